// Helpers shared by the tensor-manipulation, reduction and control-flow CPU kernels: strides,
// axis checks, type-erased strided copies and saturating conversions.
#ifndef OTTR_RUNTIME_CPU_TENSOR_KERNEL_UTIL_H_
#define OTTR_RUNTIME_CPU_TENSOR_KERNEL_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/dtype.h"
#include "ir/ops/tensor_shape_math.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

// The column sums Σ_r x[r, c] of a row-major [rows, cols] matrix, the rows in order, each element
// made a double by `to_double`: the bias gradients of ReluGradBiasGrad and of the fused loss nodes
// (fuse-sce-bgrad, fuse-linear-sce), which round them once to their type, as the CPU ReduceSum.
template <typename T, typename ToDouble>
std::vector<double> ColumnSumsInDouble(const T* x, int64_t rows, int64_t cols, ToDouble to_double) {
  std::vector<double> sums(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) sums[c] += to_double(x[r * cols + c]);
  }
  return sums;
}

// Row-major strides (in elements) of `dims`.
inline std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// Product of dims[begin, end).
inline int64_t DimsProduct(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) p *= dims[i];
  return p;
}

// Axis normalization with an error naming the node.
inline absl::StatusOr<int64_t> KernelAxis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  absl::StatusOr<int64_t> a = ir::WrapAxis(axis, rank);
  if (!a.ok()) return ctx.Error(a.status().message());
  return a;
}

// Unsigned integer type of the given byte width (element moves do not need the real type).
template <size_t N>
using ElementBits = std::conditional_t<
    N == 1, uint8_t, std::conditional_t<N == 2, uint16_t, std::conditional_t<N == 4, uint32_t, uint64_t>>>;

// Calls f.template operator()<U>() with the unsigned type of the dtype's width.
template <typename F>
void VisitElementSize(size_t size, F&& f) {
  switch (size) {
    case 1: f.template operator()<uint8_t>(); break;
    case 2: f.template operator()<uint16_t>(); break;
    case 4: f.template operator()<uint32_t>(); break;
    default: f.template operator()<uint64_t>(); break;
  }
}

// dst[i] (row-major over `out_dims`) = src[offset + sum_d coord_d * src_strides_d] for every
// coordinate of `out_dims`. Strides may be zero (broadcast) or negative (reversed slices).
// Covers Transpose, Slice and Expand.
inline void StridedCopy(void* dst, const void* src, size_t elem_size,
                        const std::vector<int64_t>& out_dims,
                        const std::vector<int64_t>& src_strides, int64_t offset) {
  const int64_t n = ir::NumElements(out_dims);
  if (n == 0) return;
  VisitElementSize(elem_size, [&]<typename U>() {
    U* d = static_cast<U*>(dst);
    const U* s = static_cast<const U*>(src);
    const int64_t rank = static_cast<int64_t>(out_dims.size());
    if (rank == 0) {
      d[0] = s[offset];
      return;
    }
    const int64_t inner = out_dims[rank - 1];
    const int64_t inner_stride = src_strides[rank - 1];
    std::vector<int64_t> coord(rank, 0);
    int64_t src_pos = offset;
    for (int64_t done = 0; done < n; done += inner) {
      if (inner_stride == 1) {
        std::memcpy(d + done, s + src_pos, sizeof(U) * inner);
      } else {
        for (int64_t k = 0; k < inner; ++k) d[done + k] = s[src_pos + k * inner_stride];
      }
      // Advance the outer coordinates (odometer).
      for (int64_t ax = rank - 2; ax >= 0; --ax) {
        if (++coord[ax] < out_dims[ax]) {
          src_pos += src_strides[ax];
          break;
        }
        src_pos -= src_strides[ax] * (out_dims[ax] - 1);
        coord[ax] = 0;
      }
    }
  });
}

// The inverse of StridedCopy: dst[offset + sum_d coord_d * dst_strides_d] = src[i] (row-major over
// `src_dims`) for every coordinate. The addressed positions must be distinct (SliceGrad).
inline void StridedScatter(void* dst, const void* src, size_t elem_size,
                           const std::vector<int64_t>& src_dims,
                           const std::vector<int64_t>& dst_strides, int64_t offset) {
  const int64_t n = ir::NumElements(src_dims);
  if (n == 0) return;
  VisitElementSize(elem_size, [&]<typename U>() {
    U* d = static_cast<U*>(dst);
    const U* s = static_cast<const U*>(src);
    const int64_t rank = static_cast<int64_t>(src_dims.size());
    if (rank == 0) {
      d[offset] = s[0];
      return;
    }
    const int64_t inner = src_dims[rank - 1];
    const int64_t inner_stride = dst_strides[rank - 1];
    std::vector<int64_t> coord(rank, 0);
    int64_t dst_pos = offset;
    for (int64_t done = 0; done < n; done += inner) {
      if (inner_stride == 1) {
        std::memcpy(d + dst_pos, s + done, sizeof(U) * inner);
      } else {
        for (int64_t k = 0; k < inner; ++k) d[dst_pos + k * inner_stride] = s[done + k];
      }
      for (int64_t ax = rank - 2; ax >= 0; --ax) {
        if (++coord[ax] < src_dims[ax]) {
          dst_pos += dst_strides[ax];
          break;
        }
        dst_pos -= dst_strides[ax] * (src_dims[ax] - 1);
        coord[ax] = 0;
      }
    }
  });
}

// Converts a double to T: the float types round, integers truncate toward zero and saturate
// (NaN becomes 0), bool is v != 0. Used where ONNX's reference computes in floating point and
// casts the result (e.g. ReduceMean or ReduceL2 on integers).
template <typename T>
T SaturatingFromDouble(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) {
      return std::numeric_limits<T>::lowest();
    }
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return ir::FromDouble<T>(v);
  }
}

// Float element types are computed through double; other types natively.
template <typename T>
inline constexpr bool kIsFloatLike =
    std::is_floating_point_v<T> || std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>;

// For the backward kernels that scatter-add a gradient: calls `body(dst, src)` with typed
// pointers to `dst`'s zero-filled elements and `src`'s elements, where body accumulates
// (dst[p] += src[k]). float and double run in place; float16/bfloat16 run on float copies and are
// rounded once at the end. Returns false for non-float element types (dst and src must share one).
template <typename F>
bool AccumulateInFloat(const Tensor& src, Tensor& dst, F&& body) {
  bool ok = true;
  ir::VisitDType(src.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      body(dst.data<T>(), src.data<T>());
    } else if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>) {
      std::vector<float> s(src.num_elements()), d(dst.num_elements(), 0.0f);
      const T* sp = src.data<T>();
      for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(ir::ToDouble(sp[i]));
      body(d.data(), static_cast<const float*>(s.data()));
      T* dp = dst.data<T>();
      for (size_t i = 0; i < d.size(); ++i) dp[i] = ir::FromDouble<T>(d[i]);
    } else {
      ok = false;
    }
  });
  return ok;
}

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_TENSOR_KERNEL_UTIL_H_
