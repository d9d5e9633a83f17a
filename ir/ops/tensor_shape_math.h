// Shape arithmetic shared by the shape functions of the tensor-manipulation ops (ir/ops) and their
// CPU kernels (runtime/cpu), so that static IR types and computed tensors agree by construction.
// Errors are InvalidArgument without node context; callers prefix the node.
#ifndef OTTR_IR_OPS_TENSOR_SHAPE_MATH_H_
#define OTTR_IR_OPS_TENSOR_SHAPE_MATH_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace ottr::ir {

// Maps a possibly negative axis into [0, rank); InvalidArgument when out of range.
absl::StatusOr<int64_t> WrapAxis(int64_t axis, int64_t rank);
// Normalizes a list of axes against `rank`; duplicates are InvalidArgument.
absl::StatusOr<std::vector<int64_t>> WrapAxes(const std::vector<int64_t>& axes, int64_t rank);

// Reshape's target dims: 0 copies the input dim at the same position (unless allowzero), one -1
// takes the remaining element count. Checks that the element counts agree.
absl::StatusOr<std::vector<int64_t>> ResolveReshape(const std::vector<int64_t>& in_dims,
                                                    const std::vector<int64_t>& shape,
                                                    bool allowzero);
// The same on possibly symbolic input dims: a -1 resolves when the input's symbols cancel against
// the output's (e.g. [N,3,4] with [0,-1] gives [N,12]); otherwise it is unknown.
absl::StatusOr<Shape> ResolveReshapeSymbolic(const Shape& in, const std::vector<int64_t>& shape,
                                             bool allowzero);

// One axis of Slice after ONNX's clamping: start index, step, and the number of elements taken.
// For step > 0 start and end clamp to [0, dim]; for step < 0 start clamps to [0, dim-1] and end
// to [-1, dim-1]; count = max(0, ceil((end - start) / step)).
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};
SliceRange ComputeSliceRange(int64_t dim, int64_t start, int64_t end, int64_t step);

// Per-axis parameters of Slice from its inputs (axes default 0..n-1, steps default 1): for each
// axis of the data either a SliceRange or nullopt (not sliced). Validates lengths, axes and steps.
struct SliceSpec {
  std::vector<int64_t> axes;   // normalized
  std::vector<int64_t> starts;
  std::vector<int64_t> ends;
  std::vector<int64_t> steps;
};
absl::StatusOr<SliceSpec> MakeSliceSpec(int64_t rank, const std::vector<int64_t>& starts,
                                        const std::vector<int64_t>& ends,
                                        const std::optional<std::vector<int64_t>>& axes,
                                        const std::optional<std::vector<int64_t>>& steps);

// Sizes of Split's outputs along the axis of length `dim`: the explicit `split` sizes, or with
// `num_outputs` > 0 chunks of ceil(dim / num_outputs) with the last one smaller, or (neither)
// `n_outputs` equal parts.
absl::StatusOr<std::vector<int64_t>> SplitSizes(int64_t dim,
                                                const std::optional<std::vector<int64_t>>& split,
                                                int64_t num_outputs, int64_t n_outputs);

// Pad amounts per data axis from Pad's `pads` input (begins then ends for `axes`, default all
// axes). Returned as (begin, end) per axis of the data, zero for axes not named.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> PadAmounts(
    int64_t rank, const std::vector<int64_t>& pads,
    const std::optional<std::vector<int64_t>>& axes);

// Range's element count max(ceil((limit - start) / delta), 0), with the difference taken in the
// element type (as ONNX's reference does) and the division in double. delta == 0 is an error.
template <typename T>
absl::StatusOr<int64_t> RangeCount(T start, T limit, T delta) {
  if (delta == T(0)) return absl::InvalidArgumentError("Range: delta must not be zero");
  double n;
  if constexpr (std::is_integral_v<T>) {
    // Exact ceiling division in 128 bits (the difference of two int64 may overflow 64).
    const __int128 diff = static_cast<__int128>(limit) - static_cast<__int128>(start);
    const __int128 d = static_cast<__int128>(delta);
    __int128 q = diff / d;
    if (diff % d != 0 && ((diff % d > 0) == (d > 0))) ++q;
    n = static_cast<double>(q);
  } else {
    n = std::ceil(static_cast<double>(limit - start) / static_cast<double>(delta));
  }
  if (!(n > 0)) return int64_t{0};  // also NaN
  if (n > 1e12) return absl::InvalidArgumentError("Range: too many elements");
  return static_cast<int64_t>(n);
}

// RangeCount on the single elements of three tensors of one element type (half types are computed
// in float); InvalidArgument for bool or mismatched inputs.
absl::StatusOr<int64_t> RangeCountOf(const Tensor& start, const Tensor& limit, const Tensor& delta);

// Product of dims: static when all are, the single non-static dim when the rest multiply to 1,
// else unknown.
Dim DimProduct(const std::vector<Dim>& dims);

}  // namespace ottr::ir

#endif  // OTTR_IR_OPS_TENSOR_SHAPE_MATH_H_
