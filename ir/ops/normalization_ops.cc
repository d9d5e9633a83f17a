// Schemas and shape functions of the normalisation ops (BatchNormalization, LayerNormalization,
// InstanceNormalization, GroupNormalization) and of Dropout.
//
// Canonical forms (importer/canonicalize.cc rewrites older opsets into them):
//   BatchNormalization-15: training_mode attribute; outputs Y[, running_mean, running_var].
//   Dropout-13: inputs data[, ratio[, training_mode]]; outputs output[, mask (bool)].
// GroupNormalization accepts both the opset-18 form (scale and bias per group) and the opset-21
// form (per channel): the lengths tell them apart, and where they coincide (num_groups == C) the
// two definitions agree.
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

// InvalidArgument unless input i (when present with a known dtype) has a floating-point type.
absl::Status RequireFloatInput(const InferenceContext& ctx, int i, absl::string_view name) {
  if (!ctx.has_input(i)) return absl::OkStatus();
  const DType t = ctx.input_type(i).dtype;
  if (t == DType::kUndefined || IsFloat(t)) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input '", name, "' must be a floating-point tensor, got ",
                                DTypeName(t)));
}

// Requires input i (when present with a known rank) to be 1-D; when its length and `len` are both
// static they must be equal. Returns the input's dim, or `len` when that is more precise.
absl::StatusOr<Dim> CheckVector(const InferenceContext& ctx, int i, absl::string_view name,
                                const Dim& len, absl::string_view len_what) {
  if (!ctx.has_input(i) || !ctx.input_type(i).has_rank()) return len;
  const Shape& s = *ctx.input_type(i).shape;
  if (s.size() != 1) {
    return ctx.Error(absl::StrCat("input '", name, "' must be 1-D, got shape ", ShapeToString(s)));
  }
  if (s[0].is_static() && len.is_static() && s[0].value() != len.value()) {
    return ctx.Error(absl::StrCat("input '", name, "' has length ", s[0].value(), " but ",
                                  len_what, " is ", len.value()));
  }
  return len.is_static() ? len : s[0];
}

// Requires input `i` to be unidirectionally broadcastable to `x` (NumPy rules, x unchanged).
absl::Status CheckBroadcastTo(const InferenceContext& ctx, int i, absl::string_view name,
                              const Shape& x) {
  if (!ctx.has_input(i) || !ctx.input_type(i).has_rank()) return absl::OkStatus();
  const Shape& s = *ctx.input_type(i).shape;
  bool ok = s.size() <= x.size();
  for (size_t k = 0; ok && k < s.size(); ++k) {
    const Dim& d = s[s.size() - 1 - k];
    const Dim& xd = x[x.size() - 1 - k];
    ok = !d.is_static() || d.value() == 1 || !xd.is_static() || d.value() == xd.value();
  }
  if (ok) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input '", name, "' of shape ", ShapeToString(s),
                                " cannot be broadcast to the input shape ", ShapeToString(x)));
}

// BatchNormalization-15: Y = scale * (X - mean) / sqrt(var + epsilon) + B per channel (dim 1).
// In training mode the statistics are the batch's and outputs 1 and 2 are the updated running
// statistics, shaped [C] and typed like input_mean / input_var.
absl::Status InferBatchNormalization(InferenceContext& ctx) {
  static const char* const kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 5; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  if (ctx.node().GetInt("spatial", 1) != 1) {
    return ctx.Error("spatial=0 (per-activation statistics) is not supported");
  }
  const bool training = ctx.node().GetInt("training_mode", 0) != 0;
  if (!training && ctx.num_outputs() > 1) {
    return ctx.Error("the running_mean/running_var outputs require training_mode=1");
  }
  const TensorType& x = ctx.input_type(0);
  Dim channels;
  if (x.has_rank()) {
    if (x.rank() < 2) {
      return ctx.Error(absl::StrCat("X must have rank >= 2 (N x C x ...), got ",
                                    ShapeToString(*x.shape)));
    }
    channels = (*x.shape)[1];
  }
  for (int i = 1; i < 5; ++i) {
    OTTR_ASSIGN_OR_RETURN(channels, CheckVector(ctx, i, kNames[i], channels, "the channel count"));
  }
  ctx.set_output_type(0, x);
  for (int i = 1; i < ctx.num_outputs(); ++i) {
    ctx.set_output_type(i, TensorType(ctx.input_type(2 + i).dtype, Shape{channels}));
  }
  return absl::OkStatus();
}

// The element type selected by a stash_type attribute (an ONNX TensorProto data type).
absl::StatusOr<DType> StashType(const InferenceContext& ctx) {
  const int64_t code = ctx.node().GetInt("stash_type", 1);
  auto t = DTypeFromOnnx(static_cast<int32_t>(code));
  if (!t.ok() || !IsFloat(*t)) {
    return ctx.Error(absl::StrCat("stash_type ", code, " is not a floating-point type"));
  }
  return *t;
}

// LayerNormalization-17: normalises over dims [axis, rank); Mean and InvStdDev keep the leading
// dims and have 1 in the normalised ones; they are typed by stash_type.
absl::Status InferLayerNormalization(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "X"));
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 1, "Scale"));
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 2, "B"));
  OTTR_ASSIGN_OR_RETURN(DType stash, StashType(ctx));
  const TensorType& x = ctx.input_type(0);
  ctx.set_output_type(0, x);
  if (!x.has_rank()) {
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output_type(i, TensorType(stash, std::nullopt));
    return absl::OkStatus();
  }
  const Shape& xs = *x.shape;
  OTTR_ASSIGN_OR_RETURN(int64_t axis,
                        NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), x.rank()));
  OTTR_RETURN_IF_ERROR(CheckBroadcastTo(ctx, 1, "Scale", xs));
  OTTR_RETURN_IF_ERROR(CheckBroadcastTo(ctx, 2, "B", xs));
  Shape stat(xs.begin(), xs.begin() + axis);
  stat.resize(xs.size(), Dim(1));
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output_type(i, TensorType(stash, stat));
  return absl::OkStatus();
}

// InstanceNormalization-6: per (n, c) statistics over the spatial dims; scale and B are [C].
absl::Status InferInstanceNormalization(InferenceContext& ctx) {
  static const char* const kNames[] = {"input", "scale", "B"};
  for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  const TensorType& x = ctx.input_type(0);
  Dim channels;
  if (x.has_rank()) {
    if (x.rank() < 2) {
      return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ",
                                    ShapeToString(*x.shape)));
    }
    channels = (*x.shape)[1];
  }
  for (int i = 1; i < 3; ++i) {
    OTTR_ASSIGN_OR_RETURN(channels, CheckVector(ctx, i, kNames[i], channels, "the channel count"));
  }
  ctx.set_output_type(0, x);
  return absl::OkStatus();
}

// GroupNormalization-18/21: statistics per (n, group) over C/num_groups channels and the spatial
// dims; scale and bias are per channel ([C], opset 21) or per group ([num_groups], opset 18).
absl::Status InferGroupNormalization(InferenceContext& ctx) {
  static const char* const kNames[] = {"X", "scale", "bias"};
  for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  OTTR_RETURN_IF_ERROR(StashType(ctx).status());
  const int64_t groups = ctx.node().GetInt("num_groups", 0);
  if (groups <= 0) return ctx.Error(absl::StrCat("num_groups must be positive, got ", groups));
  const TensorType& x = ctx.input_type(0);
  Dim channels;
  if (x.has_rank()) {
    if (x.rank() < 2) {
      return ctx.Error(absl::StrCat("X must have rank >= 2 (N x C x ...), got ",
                                    ShapeToString(*x.shape)));
    }
    channels = (*x.shape)[1];
    if (channels.is_static() && channels.value() % groups != 0) {
      return ctx.Error(absl::StrCat("the channel count ", channels.value(),
                                    " is not a multiple of num_groups ", groups));
    }
  }
  for (int i = 1; i < 3; ++i) {
    if (!ctx.has_input(i) || !ctx.input_type(i).has_rank()) continue;
    const Shape& s = *ctx.input_type(i).shape;
    const bool ok = s.size() == 1 && (!s[0].is_static() || s[0].value() == groups ||
                                      !channels.is_static() || s[0].value() == channels.value());
    if (!ok) {
      return ctx.Error(absl::StrCat("input '", kNames[i], "' must be 1-D of length C (",
                                    channels.ToString(), ") or num_groups (", groups, "), got ",
                                    ShapeToString(s)));
    }
  }
  ctx.set_output_type(0, x);
  return absl::OkStatus();
}

// Dropout-13: output is shaped like data; the optional mask is bool of the same shape.
absl::Status InferDropout(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "data"));
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 1, "ratio"));
  for (int i : {1, 2}) {
    if (!ctx.has_input(i) || !ctx.input_type(i).is_static()) continue;
    if (NumElements(StaticDims(*ctx.input_type(i).shape)) != 1) {
      return ctx.Error(absl::StrCat("input '", i == 1 ? "ratio" : "training_mode",
                                    "' must be a scalar, got shape ",
                                    ShapeToString(*ctx.input_type(i).shape)));
    }
  }
  if (ctx.has_input(2) && ctx.input_type(2).dtype != DType::kUndefined &&
      ctx.input_type(2).dtype != DType::kBool) {
    return ctx.Error(absl::StrCat("input 'training_mode' must be bool, got ",
                                  DTypeName(ctx.input_type(2).dtype)));
  }
  const TensorType& x = ctx.input_type(0);
  ctx.set_output_type(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output_type(1, TensorType(DType::kBool, x.shape));
  return absl::OkStatus();
}

}  // namespace

void RegisterNormalizationOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder("", "BatchNormalization")
                 .Opsets(7)
                 .Inputs(5, 5)
                 .Outputs(1, 3)
                 .Attr("epsilon", Kind::kFloat)
                 .Attr("momentum", Kind::kFloat)
                 .Attr("training_mode", Kind::kInt)
                 .Attr("spatial", Kind::kInt)  // opsets 7-8; only 1 (the later behaviour) runs
                 .Shape(InferBatchNormalization)
                 .Build());
  r.Register(OpSchemaBuilder("", "LayerNormalization")
                 .Opsets(17)
                 .Inputs(2, 3)
                 .Outputs(1, 3)
                 .Attr("axis", Kind::kInt)
                 .Attr("epsilon", Kind::kFloat)
                 .Attr("stash_type", Kind::kInt)
                 .Shape(InferLayerNormalization)
                 .Build());
  r.Register(OpSchemaBuilder("", "InstanceNormalization")
                 .Opsets(7)
                 .Inputs(3, 3)
                 .Outputs(1, 1)
                 .Attr("epsilon", Kind::kFloat)
                 .Shape(InferInstanceNormalization)
                 .Build());
  r.Register(OpSchemaBuilder("", "GroupNormalization")
                 .Opsets(18)
                 .Inputs(3, 3)
                 .Outputs(1, 1)
                 .Attr("epsilon", Kind::kFloat)
                 .Attr("num_groups", Kind::kInt, /*required=*/true)
                 .Attr("stash_type", Kind::kInt)
                 .Shape(InferGroupNormalization)
                 .Build());
  r.Register(OpSchemaBuilder("", "Dropout")
                 .Opsets(7)
                 .Inputs(1, 3)
                 .Outputs(1, 2)
                 .Attr("seed", Kind::kInt)
                 .Shape(InferDropout)
                 .NonDeterministic()
                 .Build());
}

}  // namespace ottr::ir
