// Helpers shared by the normalisation, loss and optimizer CPU kernels: they compute in double
// (the ONNX NumPy references use float64 intermediates in places, and double accumulation keeps
// float32 sums within the conformance tolerance) and convert at the tensor boundary.
#ifndef OTTR_RUNTIME_CPU_NORM_LOSS_HELPERS_H_
#define OTTR_RUNTIME_CPU_NORM_LOSS_HELPERS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/dtype.h"
#include "ir/tensor.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu::norm_loss {

// Unimplemented naming the node unless input i is a floating-point tensor.
inline absl::Status RequireFloatInput(const KernelContext& ctx, int i, absl::string_view name) {
  const DType t = ctx.input(i).dtype();
  if (ir::IsFloat(t)) return absl::OkStatus();
  return ctx.Unsupported(absl::StrCat("input '", name, "' has element type ", ir::DTypeName(t),
                                      "; expected a floating-point type"));
}

// All elements of a floating-point tensor as doubles.
inline std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.num_elements()));
  ir::VisitDType(t.dtype(), [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      const T* p = t.data<T>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = ir::ToDouble(p[i]);
    }
  });
  return out;
}

// Writes `values` (one per element, rounded to nearest) into the floating-point tensor `t`.
inline void FromDoubles(const std::vector<double>& values, Tensor& t) {
  ir::VisitDType(t.dtype(), [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      T* p = t.data<T>();
      const size_t n = static_cast<size_t>(t.num_elements());
      for (size_t i = 0; i < n && i < values.size(); ++i) p[i] = ir::FromDouble<T>(values[i]);
    }
  });
}

// Allocates output i with `dtype` and `dims` and fills it from `values`.
inline void SetOutputFromDoubles(KernelContext& ctx, int i, DType dtype, std::vector<int64_t> dims,
                                 const std::vector<double>& values) {
  Tensor& t = ctx.AllocateOutput(i, dtype, std::move(dims));
  FromDoubles(values, t);
}

// Product of dims[begin, end).
inline int64_t DimProduct(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t k = begin; k < end && k < dims.size(); ++k) p *= dims[k];
  return p;
}

// Output i is wanted: it exists on the node and something reads it.
inline bool WantOutput(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output_needed(i);
}

// "[2,3,4]".
inline std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// True when `src` broadcasts to `dst` (NumPy rules) without changing dst.
inline bool BroadcastsTo(const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  if (src.size() > dst.size()) return false;
  for (size_t k = 0; k < src.size(); ++k) {
    const int64_t a = src[src.size() - 1 - k];
    const int64_t b = dst[dst.size() - 1 - k];
    if (a != 1 && a != b) return false;
  }
  return true;
}

// For every element of a tensor shaped `dst`, the flat index of the element of a tensor shaped
// `src` that NumPy broadcasting maps to it. Requires BroadcastsTo(src, dst).
inline std::vector<int64_t> BroadcastIndex(const std::vector<int64_t>& src,
                                           const std::vector<int64_t>& dst) {
  const size_t rank = dst.size();
  std::vector<int64_t> stride(rank, 0);  // src stride per dst dim; 0 where broadcast
  int64_t s = 1;
  for (size_t k = 0; k < src.size(); ++k) {
    const size_t sd = src.size() - 1 - k;
    const size_t dd = rank - 1 - k;
    stride[dd] = src[sd] == 1 ? 0 : s;
    s *= src[sd];
  }
  const int64_t n = ir::NumElements(dst);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = off;
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      off += stride[d];
      if (idx[d] < dst[d]) break;
      off -= stride[d] * idx[d];
      idx[d] = 0;
    }
  }
  return out;
}

// The element types the backward kernels compute: float16/bfloat16/float32 in float, float64 in
// double (sums are accumulated in double for every type).
template <typename T>
inline constexpr bool kIsFloatType = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                     std::is_same_v<T, ir::Half> ||
                                     std::is_same_v<T, ir::BFloat16>;
template <typename T>
using ComputeType = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline ComputeType<T> Load(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<float>(ir::ToDouble(v));
  }
}
template <typename T>
inline T Store(ComputeType<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;
  } else {
    return ir::FromDouble<T>(v);
  }
}

// Calls f.template operator()<T>() for the floating-point element type `t`; Unimplemented naming
// `what` for any other type.
template <typename F>
absl::Status VisitFloatType(const KernelContext& ctx, DType t, absl::string_view what, F&& f) {
  return ir::VisitDType(t, [&]<typename T>() -> absl::Status {
    if constexpr (kIsFloatType<T>) {
      return f.template operator()<T>();
    } else {
      return ctx.Unsupported(absl::StrCat(what, " has element type ", ir::DTypeName(t),
                                          "; expected a floating-point type"));
    }
  });
}

}  // namespace ottr::runtime::cpu::norm_loss

namespace ottr::runtime::cpu {

// Kernels of the ottr-domain backward ops, registered by RegisterNormalizationKernels and
// RegisterLossKernels (runtime/cpu/normalization_grad_kernels.cc, loss_grad_kernels.cc).
void RegisterNormalizationGradKernels(KernelRegistry& r);
void RegisterLossGradKernels(KernelRegistry& r);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_NORM_LOSS_HELPERS_H_
