#include "ir/ops/shape_helpers.h"

#include "absl/strings/str_cat.h"

namespace ottr::ir {

absl::Status SameAsInput(InferenceContext& ctx, int in, int out) {
  if (ctx.has_input(in)) ctx.set_output_type(out, ctx.input_type(in));
  return absl::OkStatus();
}

absl::Status BroadcastAll(InferenceContext& ctx, std::optional<DType> dtype) {
  std::optional<Shape> shape = Shape{};
  DType t = dtype.value_or(ctx.has_input(0) ? ctx.input_type(0).dtype : DType::kUndefined);
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& in = ctx.input_type(i);
    if (!in.has_rank() || !shape) {
      shape.reset();
      continue;
    }
    auto b = BroadcastShapes(*shape, *in.shape);
    if (!b) {
      return ctx.Error(absl::StrCat("input shapes cannot be broadcast: ", ShapeToString(*shape),
                                    " and ", ShapeToString(*in.shape)));
    }
    shape = std::move(b);
  }
  ctx.set_output_type(0, TensorType(t, shape));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NormalizeAxis(const InferenceContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::optional<std::vector<int64_t>> ConstantInts(const InferenceContext& ctx, int i) {
  const Tensor* t = ctx.input_constant(i);
  if (t == nullptr) return std::nullopt;
  return t->ToInt64Vector();
}

absl::StatusOr<Shape> RankedInput(const InferenceContext& ctx, int i) {
  if (!ctx.has_input(i) || !ctx.input_type(i).has_rank()) {
    return ctx.Error(absl::StrCat("input ", i, " has unknown rank"));
  }
  return *ctx.input_type(i).shape;
}

}  // namespace ottr::ir
