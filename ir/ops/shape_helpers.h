// Helpers shared by the shape functions in ir/ops/*.cc.
#ifndef OTTR_IR_OPS_SHAPE_HELPERS_H_
#define OTTR_IR_OPS_SHAPE_HELPERS_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "ir/op_registry.h"
#include "ir/status.h"

namespace ottr::ir {

// Output `out` gets input `in`'s type.
absl::Status SameAsInput(InferenceContext& ctx, int in = 0, int out = 0);
// Output 0 = NumPy broadcast of all present inputs; dtype of input 0 unless `dtype` is given.
absl::Status BroadcastAll(InferenceContext& ctx, std::optional<DType> dtype = std::nullopt);
// Maps a possibly negative axis into [0, rank); InvalidArgument naming the node when out of range.
absl::StatusOr<int64_t> NormalizeAxis(const InferenceContext& ctx, int64_t axis, int64_t rank);
// The integer values of constant input i, if it is a known constant.
std::optional<std::vector<int64_t>> ConstantInts(const InferenceContext& ctx, int i);
// Requires that input i has a known rank; returns its shape.
absl::StatusOr<Shape> RankedInput(const InferenceContext& ctx, int i);

}  // namespace ottr::ir

#endif  // OTTR_IR_OPS_SHAPE_HELPERS_H_
