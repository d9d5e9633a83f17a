// A host tensor: element type, static dims and a reference-counted, 64-byte aligned buffer (or a
// non-owning view into memory owned elsewhere, such as a planned arena). Tensors are used for
// initializers and constants in the IR and as the values the CPU executor computes with.
#ifndef OTTR_IR_TENSOR_H_
#define OTTR_IR_TENSOR_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "ir/shape.h"

namespace ottr::ir {

class Tensor {
 public:
  Tensor() = default;
  // Allocates dims' worth of elements, zero-initialised.
  Tensor(DType dtype, std::vector<int64_t> dims);
  // Non-owning view of `data`; the caller keeps it alive while the tensor is used.
  static Tensor View(DType dtype, std::vector<int64_t> dims, void* data);
  // A tensor holding a copy of `values` with the given dims.
  template <typename T>
  static Tensor FromVector(std::vector<int64_t> dims, const std::vector<T>& values) {
    Tensor t(DTypeOf<T>::value, std::move(dims));
    for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.num_elements()); ++i) {
      t.data<T>()[i] = values[i];
    }
    return t;
  }
  template <typename T>
  static Tensor Scalar(T v) {
    return FromVector<T>({}, {v});
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t num_elements() const { return NumElements(dims_); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  bool defined() const { return dtype_ != DType::kUndefined; }
  TensorType type() const { return TensorType(dtype_, ShapeFromDims(dims_)); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::span<T> span() {
    return {data<T>(), static_cast<size_t>(num_elements())};
  }
  template <typename T>
  std::span<const T> span() const {
    return {data<T>(), static_cast<size_t>(num_elements())};
  }

  // Same buffer, other dims with the same element count (a view; no copy).
  absl::StatusOr<Tensor> Reshaped(std::vector<int64_t> dims) const;
  // A deep copy with its own buffer.
  Tensor Clone() const;
  // Element i converted to double / int64 (for shape-like inputs and tests).
  double GetAsDouble(int64_t i) const;
  int64_t GetAsInt64(int64_t i) const;
  // All elements as int64 (for shape, axes and similar integer inputs).
  std::vector<int64_t> ToInt64Vector() const;
  // Byte-wise equality of dtype, dims and contents.
  bool BitwiseEquals(const Tensor& o) const;
  // Short printable form: dtype, dims and the first few values.
  std::string DebugString(int max_values = 8) const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  std::shared_ptr<void> owner_;  // null for views
  void* data_ = nullptr;
};

}  // namespace ottr::ir

#endif  // OTTR_IR_TENSOR_H_
