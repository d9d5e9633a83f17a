// Gradient rules of LayerNormalization, BatchNormalization, InstanceNormalization,
// GroupNormalization and Dropout, and the schemas of the ottr-domain backward ops they emit (CPU
// kernels in runtime/cpu/normalization_grad_kernels.cc).
//
// Every normalisation shares one backward: over a group of M elements normalised together with
// x̂ = (x − μ) · σ⁻¹ (σ⁻¹ = 1 / sqrt(var + ε), population variance) and y = s ⊙ x̂ + b,
//   g = dy ⊙ s,   dx = σ⁻¹ · (g − mean(g) − x̂ · mean(g ⊙ x̂)),
//   ds = Σ dy ⊙ x̂ and db = Σ dy over every group sharing the parameter.
// With fixed statistics (BatchNormalization in inference mode) dx = dy ⊙ s · σ⁻¹.
//
//   ottr::LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) {axis, epsilon}
//       -> (dX, [dScale], [dBias])        groups: the rows X[i, ...] of dims [0, axis);
//       dScale and dBias are shaped like X's dims [axis, rank) (summed over the rows); scale
//       broadcasts within those dims. Without mean/inv_std the kernel recomputes them.
//   ottr::BatchNormalizationGrad(dY, X, scale, [mean, var]) {epsilon} -> (dX, [dScale], [dB])
//       per channel (dim 1); with mean/var given the statistics are fixed (inference mode),
//       without them they are the batch's (training mode). dScale, dB: [C].
//   ottr::GroupNormalizationGrad(dY, X, scale) {num_groups, epsilon} -> (dX, [dScale], [dBias])
//       groups of C / num_groups channels per sample; scale is [C] or [num_groups];
//       dScale and dBias are per channel ([C]). InstanceNormalization is num_groups = C.
//   ottr::DropoutGrad(dY, mask, [ratio], [training_mode]) -> dX
//       dX = dY ⊙ mask / (1 − ratio) in training mode with ratio > 0, else dY (as the forward).
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

std::string Ottr() { return std::string(kOttrDomain); }

// Orders float types by precision (f16/bf16 < f32 < f64).
int Precision(DType t) {
  switch (t) {
    case DType::kFloat64:
      return 3;
    case DType::kFloat32:
      return 2;
    default:
      return 1;
  }
}

// Outputs a backward op needs for (dX, [dScale], [dBias]): outputs are positional.
int NumOutputs(bool want_dscale, bool want_dbias) {
  if (want_dbias) return 3;
  return want_dscale ? 2 : 1;
}

// The value of a one-element initializer or Constant; nullopt when it is not a known constant.
std::optional<double> ConstantScalar(const Value* v) {
  const Tensor* t = v->initializer();
  if (t == nullptr && v->producer() != nullptr && v->producer()->op_type() == "Constant" &&
      v->producer()->domain().empty()) {
    const Attribute* a = v->producer()->attr("value");
    if (a != nullptr && a->kind() == Kind::kTensor) t = &a->t();
  }
  if (t == nullptr || t->num_elements() != 1) return std::nullopt;
  return t->GetAsDouble(0);
}

absl::StatusOr<Value*> CastTo(GradientBuilder& b, Value* v, DType t) {
  if (v->type().dtype == t) return v;
  return b.Emit1("Cast", {v}, {{"to", Attribute(static_cast<int64_t>(t))}});
}

absl::StatusOr<Value*> MulScalar(GradientBuilder& b, Value* v, double c) {
  OTTR_ASSIGN_OR_RETURN(Value * k, b.Scalar(c, v->type().dtype));
  return b.Emit1("Mul", {v, k});
}

absl::StatusOr<std::vector<int64_t>> StaticShapeOf(GradientBuilder& b, const Value* v,
                                                   absl::string_view what) {
  if (!v->type().is_static()) {
    return b.Error(absl::StrCat("needs a static shape for ", what, ", got ", v->type().ToString(),
                                " (bind the batch size with --batch)"));
  }
  return StaticDims(*v->type().shape);
}

// ---------------------------------------------------------------------------------------------
// Shape functions of the backward ops.

// Outputs 1 and 2 (when present) get `type`.
void SetParamGradTypes(InferenceContext& ctx, const TensorType& type) {
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output_type(i, type);
}

absl::Status InferLayerNormalizationGrad(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  ctx.set_output_type(0, x);
  if (ctx.has_input(3) != ctx.has_input(4)) {
    return ctx.Error("mean and inv_std must be given together");
  }
  if (!x.has_rank()) {
    SetParamGradTypes(ctx, TensorType(ctx.input_type(2).dtype, std::nullopt));
    return absl::OkStatus();
  }
  OTTR_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), x.rank()));
  SetParamGradTypes(
      ctx, TensorType(ctx.input_type(2).dtype, Shape(x.shape->begin() + axis, x.shape->end())));
  return absl::OkStatus();
}

// BatchNormalizationGrad and GroupNormalizationGrad: dX like X, parameter gradients [C].
absl::Status InferChannelNormalizationGrad(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  ctx.set_output_type(0, x);
  if (ctx.has_input(3) != ctx.has_input(4)) return ctx.Error("mean and var must be given together");
  Dim channels;
  if (x.has_rank()) {
    if (x.rank() < 2) return ctx.Error(absl::StrCat("X must have rank >= 2, got ", x.ToString()));
    channels = (*x.shape)[1];
  }
  SetParamGradTypes(ctx, TensorType(ctx.input_type(2).dtype, Shape{channels}));
  return absl::OkStatus();
}

absl::Status InferDropoutGrad(InferenceContext& ctx) {
  if (ctx.input_type(1).dtype != DType::kBool) {
    return ctx.Error(absl::StrCat("mask must be bool, got ", ctx.input_type(1).ToString()));
  }
  return SameAsInput(ctx, 0, 0);
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization

// Maps a gradient shaped like X's normalised dims [axis, rank) to a parameter's shape. Requires
// that the parameter does not vary over dims [0, axis) (checked by ParamVariesOverRows).
absl::StatusOr<Value*> NormalizedToParam(GradientBuilder& b, Value* g, const TensorType& param,
                                         int64_t tail_rank) {
  const std::vector<int64_t> p = StaticDims(*param.shape);
  if (static_cast<int64_t>(p.size()) <= tail_rank) return b.SumToShape(g, param);
  std::vector<int64_t> tail(p.end() - tail_rank, p.end());
  OTTR_ASSIGN_OR_RETURN(Value * s, b.SumToShape(g, TensorType(param.dtype, ShapeFromDims(tail))));
  return b.ReshapeTo(s, param);
}

// True when the parameter, broadcast to X (rank `rank`), varies over one of dims [0, axis).
bool ParamVariesOverRows(const Value* param, int64_t rank, int64_t axis) {
  const std::vector<int64_t> p = StaticDims(*param->type().shape);
  for (size_t k = 0; k < p.size(); ++k) {
    const int64_t x_dim = rank - static_cast<int64_t>(p.size()) + static_cast<int64_t>(k);
    if (x_dim < axis && p[k] != 1) return true;
  }
  return false;
}

// Y = x̂ · scale + B per row (see the file comment):
//   dX = σ⁻¹ · (g − mean(g) − x̂ · mean(g ⊙ x̂)), g = dY ⊙ scale; dScale = Σ_rows dY ⊙ x̂,
//   dB = Σ_rows dY, each then summed to the parameter's broadcast shape.
// Gradients into the Mean and InvStdDev outputs (μ, σ⁻¹ per row, M elements per row) add
//   dX += dMean / M − dInvStdDev · σ⁻³ · (X − μ) / M     (since ∂σ⁻¹/∂x = −σ⁻³ (x − μ) / M).
// The node's Mean/InvStdDev outputs are reused when it has them in at least X's precision.
absl::Status LayerNormalizationGradient(GradientBuilder& b) {
  const Node& n = b.node();
  Value* x = b.input(0);
  Value* scale = b.input(1);
  Value* bias = b.input(2);
  Value* dy = b.output_grad(0);
  Value* dmean = b.output_grad(1);
  Value* dinv = b.output_grad(2);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, x, "X"));
  OTTR_RETURN_IF_ERROR(StaticShapeOf(b, scale, "Scale").status());
  if (bias != nullptr) OTTR_RETURN_IF_ERROR(StaticShapeOf(b, bias, "B").status());
  const int64_t rank = static_cast<int64_t>(xdims.size());
  int64_t axis = n.GetInt("axis", -1);
  if (axis < -rank || axis >= rank) return b.Error(absl::StrCat("axis ", axis, " out of range"));
  if (axis < 0) axis += rank;
  const int64_t cols = NumElements(std::vector<int64_t>(xdims.begin() + axis, xdims.end()));
  const bool want_dx = b.needs_input_grad(0);
  const bool want_ds = dy != nullptr && b.needs_input_grad(1);
  const bool want_db = dy != nullptr && bias != nullptr && b.needs_input_grad(2);
  const bool bias_by_row = want_db && ParamVariesOverRows(bias, rank, axis);

  Value* dx = nullptr;
  if (dy != nullptr && (want_dx || want_ds || want_db)) {
    if (ParamVariesOverRows(scale, rank, axis)) {
      return b.Error(absl::StrCat(
          "Scale ", scale->type().ToString(),
          " varies over the leading (not normalised) dims of X ", x->type().ToString(),
          " with axis ", axis, "; the gradient supports Scale shaped like X's dims [axis, rank)"));
    }
    std::vector<Value*> ins = {dy, x, scale};
    if (n.num_outputs() >= 3 &&
        Precision(n.output(1)->type().dtype) >= Precision(x->type().dtype)) {
      ins.push_back(n.output(1));
      ins.push_back(n.output(2));
    }
    const int num_outs = NumOutputs(want_ds, want_db && !bias_by_row);
    OTTR_ASSIGN_OR_RETURN(
        std::vector<Value*> outs,
        b.Emit("LayerNormalizationGrad", ins,
               {{"axis", Attribute(axis)}, {"epsilon", Attribute(n.GetFloat("epsilon", 1e-5f))}},
               num_outs, Ottr()));
    if (want_dx) dx = outs[0];
    if (want_ds) {
      OTTR_ASSIGN_OR_RETURN(Value * ds, NormalizedToParam(b, outs[1], scale->type(), rank - axis));
      b.set_input_grad(1, ds);
    }
    if (want_db) {
      Value* db = nullptr;
      if (bias_by_row) {
        OTTR_ASSIGN_OR_RETURN(db, b.SumToShape(dy, bias->type()));
      } else {
        OTTR_ASSIGN_OR_RETURN(db, NormalizedToParam(b, outs[2], bias->type(), rank - axis));
      }
      b.set_input_grad(2, db);
    }
  }
  if (want_dx && (dmean != nullptr || dinv != nullptr)) {
    // In the statistics' type U; both outputs exist when dinv does (outputs are positional).
    const DType u = n.output(1)->type().dtype;
    Value* term = nullptr;
    if (dinv != nullptr) {
      Value* inv = n.output(2);
      OTTR_ASSIGN_OR_RETURN(Value * xu, CastTo(b, x, u));
      OTTR_ASSIGN_OR_RETURN(Value * centered, b.Emit1("Sub", {xu, n.output(1)}));
      OTTR_ASSIGN_OR_RETURN(Value * inv2, b.Emit1("Mul", {inv, inv}));
      OTTR_ASSIGN_OR_RETURN(Value * inv3, b.Emit1("Mul", {inv2, inv}));
      OTTR_ASSIGN_OR_RETURN(Value * c, b.Emit1("Mul", {dinv, inv3}));
      OTTR_ASSIGN_OR_RETURN(c, MulScalar(b, c, -1.0 / static_cast<double>(cols)));
      OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Mul", {c, centered}));
    }
    if (dmean != nullptr) {
      OTTR_ASSIGN_OR_RETURN(Value * m, MulScalar(b, dmean, 1.0 / static_cast<double>(cols)));
      if (term != nullptr) {
        OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Add", {term, m}));
      } else {
        OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(xdims));
        OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Expand", {m, shape}));
      }
    }
    OTTR_ASSIGN_OR_RETURN(term, CastTo(b, term, x->type().dtype));
    if (dx == nullptr) {
      dx = term;
    } else {
      OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("Add", {dx, term}));
    }
  }
  if (dx != nullptr) b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization

// Training mode (batch statistics μ_c, σ⁻¹_c over the M = N·D1·…·Dn elements of channel c):
//   dB_c = Σ dY, dScale_c = Σ dY ⊙ x̂, dX = scale_c · σ⁻¹_c · (dY − dB_c / M − x̂ · dScale_c / M).
//   input_mean / input_var do not reach Y: no gradient. Gradients into the running statistics
//   (running = input · momentum + batch · (1 − momentum)) add
//   dX += (1 − momentum) / M · (dRunningMean_c + 2 · dRunningVar_c · (X − μ_c)) and give
//   d input_mean = momentum · dRunningMean, d input_var = momentum · dRunningVar.
// Inference mode (fixed mean m_c and var v_c, σ⁻¹_c = 1 / sqrt(v_c + ε)):
//   dX = dY · scale_c · σ⁻¹_c, dScale_c = Σ dY ⊙ x̂, dB_c = Σ dY,
//   d mean_c = −scale_c · σ⁻¹_c · dB_c, d var_c = −½ · scale_c · σ⁻²_c · dScale_c.
absl::Status BatchNormalizationGradient(GradientBuilder& b) {
  const Node& n = b.node();
  const bool training = n.GetInt("training_mode", 0) != 0;
  const float epsilon = n.GetFloat("epsilon", 1e-5f);
  Value* x = b.input(0);
  Value* scale = b.input(1);
  Value* dy = b.output_grad(0);
  const bool want_dx = b.needs_input_grad(0);
  const bool want_ds = b.needs_input_grad(1);
  const bool want_db = b.needs_input_grad(2);
  const bool want_dmean = !training && b.needs_input_grad(3);
  const bool want_dvar = !training && b.needs_input_grad(4);
  Value* dx = nullptr;
  if (dy != nullptr && (want_dx || want_ds || want_db || want_dmean || want_dvar)) {
    const bool need_ds = want_ds || want_dvar;
    const bool need_db = want_db || want_dmean;
    std::vector<Value*> ins = {dy, x, scale};
    if (!training) {
      ins.push_back(b.input(3));
      ins.push_back(b.input(4));
    }
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> outs,
                          b.Emit("BatchNormalizationGrad", ins, {{"epsilon", Attribute(epsilon)}},
                                 NumOutputs(need_ds, need_db), Ottr()));
    if (want_dx) dx = outs[0];
    if (want_ds) b.set_input_grad(1, outs[1]);
    if (want_db) b.set_input_grad(2, outs[2]);
    if (want_dmean || want_dvar) {
      const DType t2 = b.input(3)->type().dtype;
      Value* var = b.input(4);
      OTTR_ASSIGN_OR_RETURN(Value * var_u, CastTo(b, var, t2));
      OTTR_ASSIGN_OR_RETURN(Value * eps, b.Scalar(epsilon, t2));
      OTTR_ASSIGN_OR_RETURN(Value * ve, b.Emit1("Add", {var_u, eps}));
      OTTR_ASSIGN_OR_RETURN(Value * sd, b.Emit1("Sqrt", {ve}));
      OTTR_ASSIGN_OR_RETURN(Value * inv, b.Emit1("Reciprocal", {sd}));
      OTTR_ASSIGN_OR_RETURN(Value * s, CastTo(b, scale, t2));
      OTTR_ASSIGN_OR_RETURN(Value * s_inv, b.Emit1("Mul", {s, inv}));
      if (want_dmean) {
        OTTR_ASSIGN_OR_RETURN(Value * db, CastTo(b, outs[2], t2));
        OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Mul", {db, s_inv}));
        OTTR_ASSIGN_OR_RETURN(Value * dm, b.Emit1("Neg", {p}));
        OTTR_ASSIGN_OR_RETURN(dm, CastTo(b, dm, b.input(3)->type().dtype));
        b.set_input_grad(3, dm);
      }
      if (want_dvar) {
        OTTR_ASSIGN_OR_RETURN(Value * ds, CastTo(b, outs[1], t2));
        OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Mul", {ds, s_inv}));
        OTTR_ASSIGN_OR_RETURN(p, b.Emit1("Mul", {p, inv}));
        OTTR_ASSIGN_OR_RETURN(Value * dv, MulScalar(b, p, -0.5));
        OTTR_ASSIGN_OR_RETURN(dv, CastTo(b, dv, var->type().dtype));
        b.set_input_grad(4, dv);
      }
    }
  }
  Value* drm = training ? b.output_grad(1) : nullptr;
  Value* drv = training ? b.output_grad(2) : nullptr;
  if (drm != nullptr || drv != nullptr) {
    const double momentum = n.GetFloat("momentum", 0.9f);
    if (want_dx) {
      OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, x, "X"));
      const int64_t c = xdims[1];
      const double m = static_cast<double>(NumElements(xdims) / std::max<int64_t>(c, 1));
      std::vector<int64_t> per_channel(xdims.size(), 1);
      per_channel[1] = c;
      OTTR_ASSIGN_OR_RETURN(Value * pc_shape, b.Ints(per_channel));
      Value* term = nullptr;
      if (drv != nullptr) {
        const DType u = drv->type().dtype;
        std::vector<int64_t> axes;
        for (int64_t k = 0; k < static_cast<int64_t>(xdims.size()); ++k) {
          if (k != 1) axes.push_back(k);
        }
        OTTR_ASSIGN_OR_RETURN(Value * xu, CastTo(b, x, u));
        OTTR_ASSIGN_OR_RETURN(Value * ax, b.Ints(axes));
        OTTR_ASSIGN_OR_RETURN(
            Value * mu, b.Emit1("ReduceMean", {xu, ax}, {{"keepdims", Attribute(int64_t{1})}}));
        OTTR_ASSIGN_OR_RETURN(Value * centered, b.Emit1("Sub", {xu, mu}));
        OTTR_ASSIGN_OR_RETURN(Value * k, MulScalar(b, drv, 2.0 * (1.0 - momentum) / m));
        OTTR_ASSIGN_OR_RETURN(k, b.Emit1("Reshape", {k, pc_shape}));
        OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Mul", {k, centered}));
      }
      if (drm != nullptr) {
        OTTR_ASSIGN_OR_RETURN(Value * k, MulScalar(b, drm, (1.0 - momentum) / m));
        OTTR_ASSIGN_OR_RETURN(k, b.Emit1("Reshape", {k, pc_shape}));
        if (term != nullptr) {
          OTTR_ASSIGN_OR_RETURN(k, CastTo(b, k, term->type().dtype));
          OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Add", {term, k}));
        } else {
          OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(xdims));
          OTTR_ASSIGN_OR_RETURN(term, b.Emit1("Expand", {k, shape}));
        }
      }
      OTTR_ASSIGN_OR_RETURN(term, CastTo(b, term, x->type().dtype));
      if (dx == nullptr) {
        dx = term;
      } else {
        OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("Add", {dx, term}));
      }
    }
    if (drm != nullptr && b.needs_input_grad(3)) {
      OTTR_ASSIGN_OR_RETURN(Value * d, MulScalar(b, drm, momentum));
      OTTR_ASSIGN_OR_RETURN(d, CastTo(b, d, b.input(3)->type().dtype));
      b.set_input_grad(3, d);
    }
    if (drv != nullptr && b.needs_input_grad(4)) {
      OTTR_ASSIGN_OR_RETURN(Value * d, MulScalar(b, drv, momentum));
      OTTR_ASSIGN_OR_RETURN(d, CastTo(b, d, b.input(4)->type().dtype));
      b.set_input_grad(4, d);
    }
  }
  if (dx != nullptr) b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// InstanceNormalization and GroupNormalization

// Per-channel parameter gradient [C] -> the parameter's shape: [C] as is, [G] (G != C) summed
// over the C / G channels of each group.
absl::StatusOr<Value*> ChannelToParam(GradientBuilder& b, Value* g, const Value* param,
                                      int64_t channels) {
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> p, StaticShapeOf(b, param, "the scale/bias"));
  if (p.size() == 1 && p[0] == channels) return g;
  if (p.size() != 1 || p[0] <= 0 || channels % p[0] != 0) {
    return b.Error(absl::StrCat("scale/bias ", param->type().ToString(),
                                " is neither per channel nor per group"));
  }
  OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints({p[0], channels / p[0]}));
  OTTR_ASSIGN_OR_RETURN(Value * r, b.Emit1("Reshape", {g, shape}));
  OTTR_ASSIGN_OR_RETURN(Value * ax, b.Ints({1}));
  return b.Emit1("ReduceSum", {r, ax}, {{"keepdims", Attribute(int64_t{0})}});
}

// Shared by both: statistics per (sample, group of C / groups channels); see the file comment.
absl::Status GroupedNormalizationGradient(GradientBuilder& b, int64_t groups) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr) return absl::OkStatus();
  const bool want_dx = b.needs_input_grad(0);
  const bool want_ds = b.needs_input_grad(1);
  const bool want_db = b.needs_input_grad(2);
  if (!want_dx && !want_ds && !want_db) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, b.input(0), "X"));
  if (xdims.size() < 2) return b.Error("X must have rank >= 2");
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> outs,
                        b.Emit("GroupNormalizationGrad", {dy, b.input(0), b.input(1)},
                               {{"num_groups", Attribute(groups)},
                                {"epsilon", Attribute(b.node().GetFloat("epsilon", 1e-5f))}},
                               NumOutputs(want_ds, want_db), Ottr()));
  if (want_dx) b.set_input_grad(0, outs[0]);
  if (want_ds) {
    OTTR_ASSIGN_OR_RETURN(Value * ds, ChannelToParam(b, outs[1], b.input(1), xdims[1]));
    b.set_input_grad(1, ds);
  }
  if (want_db) {
    OTTR_ASSIGN_OR_RETURN(Value * db, ChannelToParam(b, outs[2], b.input(2), xdims[1]));
    b.set_input_grad(2, db);
  }
  return absl::OkStatus();
}

// InstanceNormalization = GroupNormalization with one channel per group.
absl::Status InstanceNormalizationGradient(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, b.input(0), "X"));
  if (xdims.size() < 2) return b.Error("X must have rank >= 2");
  return GroupedNormalizationGradient(b, xdims[1]);
}

absl::Status GroupNormalizationGradient(GradientBuilder& b) {
  return GroupedNormalizationGradient(b, b.node().GetInt("num_groups", 0));
}

// ---------------------------------------------------------------------------------------------
// Dropout

// Inference mode (no training_mode, or a constant false) or a constant ratio 0: Y = X, dX = dY.
// Otherwise dX = DropoutGrad(dY, mask, ratio, training_mode), which needs the mask output.
absl::Status DropoutGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  const Node& n = b.node();
  bool identity = !n.has_input(2);
  if (!identity) {
    std::optional<double> training = ConstantScalar(n.input(2));
    identity = training.has_value() && *training == 0.0;
  }
  if (!identity && n.has_input(1)) {
    std::optional<double> ratio = ConstantScalar(n.input(1));
    identity = ratio.has_value() && *ratio == 0.0;
  }
  if (identity) {
    b.set_input_grad(0, dy);
    return absl::OkStatus();
  }
  if (n.num_outputs() < 2) {
    return b.Error(
        "Dropout may run in training mode (its training_mode input is not a constant false), "
        "and its gradient needs the dropout mask, but the node has no mask output; give the "
        "node a second output (the mask) or set training_mode to false");
  }
  std::vector<Value*> ins = {dy, n.output(1), n.input(1), n.input(2)};
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("DropoutGrad", ins, {}, Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

void RegisterNormalizationGradients(OpRegistry& r) {
  r.Register(OpSchemaBuilder(Ottr(), "LayerNormalizationGrad")
                 .Inputs(3, 5)
                 .Outputs(1, 3)
                 .Attr("axis", Kind::kInt)
                 .Attr("epsilon", Kind::kFloat)
                 .Shape(InferLayerNormalizationGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "BatchNormalizationGrad")
                 .Inputs(3, 5)
                 .Outputs(1, 3)
                 .Attr("epsilon", Kind::kFloat)
                 .Shape(InferChannelNormalizationGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "GroupNormalizationGrad")
                 .Inputs(3, 3)
                 .Outputs(1, 3)
                 .Attr("num_groups", Kind::kInt, /*required=*/true)
                 .Attr("epsilon", Kind::kFloat)
                 .Shape(InferChannelNormalizationGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "DropoutGrad")
                 .Inputs(2, 4)
                 .Outputs(1, 1)
                 .Shape(InferDropoutGrad)
                 .NotDifferentiable()
                 .Build());
  r.SetGradient("", "LayerNormalization", LayerNormalizationGradient);
  r.SetGradient("", "BatchNormalization", BatchNormalizationGradient);
  r.SetGradient("", "InstanceNormalization", InstanceNormalizationGradient);
  r.SetGradient("", "GroupNormalization", GroupNormalizationGradient);
  r.SetGradient("", "Dropout", DropoutGradient);
}

}  // namespace ottr::ir
