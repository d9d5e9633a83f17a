#include "ir/tensor.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::ir {

namespace {
// No tensor may exceed the machine's physical memory: a shape fed at run time that asks for
// more is an error, not an allocation the system (or a sanitizer) aborts on.
uint64_t MaxTensorBytes() {
  static const uint64_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : uint64_t{1} << 40;
  }();
  return limit;
}
}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  // Round up to a multiple of 64 and allocate at least 64 bytes so empty tensors have an address.
  uint64_t elements = 1;
  for (int64_t d : dims_) {
    if (d < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) {
      throw std::length_error("tensor shape [" + absl::StrJoin(dims_, ",") + "] has too many elements");
    }
  }
  uint64_t raw = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(DTypeSize(dtype_)), &raw) ||
      raw > MaxTensorBytes()) {
    throw std::length_error("tensor shape [" + absl::StrJoin(dims_, ",") + "] is too large to allocate");
  }
  const size_t bytes = std::max<size_t>(64, (raw + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  data_ = p;
}

Tensor Tensor::View(DType dtype, std::vector<int64_t> dims, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.data_ = data;
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshaped(std::vector<int64_t> dims) const {
  if (NumElements(dims) != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape ", num_elements(), " elements [", absl::StrJoin(dims_, ","), "] to [",
        absl::StrJoin(dims, ","), "]"));
  }
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, dims_);
  if (nbytes() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

double Tensor::GetAsDouble(int64_t i) const {
  return VisitDType(dtype_, [&]<typename T>() -> double {
    if constexpr (std::is_void_v<T>) {
      return 0.0;
    } else {
      return ToDouble(data<T>()[i]);
    }
  });
}

int64_t Tensor::GetAsInt64(int64_t i) const {
  return VisitDType(dtype_, [&]<typename T>() -> int64_t {
    if constexpr (std::is_void_v<T>) {
      return 0;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<int64_t>(data<T>()[i]);
    } else {
      return static_cast<int64_t>(ToDouble(data<T>()[i]));
    }
  });
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> v(num_elements());
  for (int64_t i = 0; i < num_elements(); ++i) v[i] = GetAsInt64(i);
  return v;
}

bool Tensor::BitwiseEquals(const Tensor& o) const {
  return dtype_ == o.dtype_ && dims_ == o.dims_ &&
         (nbytes() == 0 || std::memcmp(data_, o.data_, nbytes()) == 0);
}

std::string Tensor::DebugString(int max_values) const {
  std::string s = absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(dims_, ","), "]{");
  const int64_t n = std::min<int64_t>(num_elements(), max_values);
  for (int64_t i = 0; i < n; ++i) absl::StrAppend(&s, i ? ", " : "", GetAsDouble(i));
  if (num_elements() > n) absl::StrAppend(&s, ", ...");
  return s + "}";
}

}  // namespace ottr::ir
