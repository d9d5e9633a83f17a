// Gradient rules of the activation ops, and the ottr-domain backward ops they emit.
//
// Each activation's backward is one elementwise op dX = F(dY, Z). Z is the forward output Y where
// the derivative is a function of Y alone (Relu, Sigmoid, Tanh: nothing is recomputed, and Y is
// kept alive for the next op anyway), the forward input X otherwise. The backward ops take the
// forward op's attributes with the same defaults. Conventions at kinks follow PyTorch.
//
//   ottr::ReluGrad(dY, Y)                          dX = dY · [Y > 0]
//   ottr::LeakyReluGrad(dY, X) {alpha = 0.01}      dX = dY · (X > 0 ? 1 : α)
//   ottr::SigmoidGrad(dY, Y)                       dX = dY · Y · (1 − Y)
//   ottr::TanhGrad(dY, Y)                          dX = dY · (1 − Y²)
//   ottr::GeluGrad(dY, X) {approximate = "none"}   none: dX = dY · (Φ(X) + X · φ(X)),
//       Φ(x) = (1 + erf(x/√2)) / 2, φ(x) = e^(−x²/2) / √(2π);
//     tanh: with u = √(2/π) (X + 0.044715 X³), t = tanh u:
//       dX = dY · ((1 + t) / 2 + X/2 · (1 − t²) · √(2/π) (1 + 3 · 0.044715 X²))
//   ottr::EluGrad(dY, X) {alpha = 1}               dX = dY · (X > 0 ? 1 : α eˣ)
//   ottr::SeluGrad(dY, X) {alpha, gamma}           dX = dY · γ · (X > 0 ? 1 : α eˣ)
//   ottr::CeluGrad(dY, X) {alpha = 1}              dX = dY · (X > 0 ? 1 : e^(X/α))
//   ottr::SoftplusGrad(dY, X)                      dX = dY · σ(X)
//   ottr::HardSigmoidGrad(dY, X) {alpha = 0.2, beta = 0.5}
//                                                  dX = dY · α · [0 < αX + β < 1]
//   ottr::HardSwishGrad(dY, X)                     dX = dY · (X < −3 ? 0 : X ≤ 3 ? X/3 + 1/2 : 1)
//   ottr::MishGrad(dY, X)                          dX = dY · (t + X · (1 − t²) · σ(X)),
//                                                  t = tanh(softplus(X))
//   ottr::SoftsignGrad(dY, X)                      dX = dY / (1 + |X|)²
//   ottr::ThresholdedReluGrad(dY, X) {alpha = 1}   dX = dY · [X > α]
//   ottr::PReluGrad(dY, X, slope) -> (dX, dSlope)  dX = dY · (X > 0 ? 1 : slope),
//       dSlope = Σ over the dims slope is broadcast along of dY · (X > 0 ? 0 : X)
//
// dY, Z and dX have one float type and one shape (PReluGrad: dY and dX have the broadcast of X
// and slope, dSlope has slope's type). CPU kernels: runtime/cpu/activation_grad_kernels.cc.
#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

std::string Ottr() { return std::string(kOttrDomain); }

// Input i's element type, which must be a float type when known.
absl::StatusOr<DType> FloatInput(const InferenceContext& ctx, int i, absl::string_view what) {
  const DType t = ctx.input_type(i).dtype;
  if (t != DType::kUndefined && !IsFloat(t)) {
    return ctx.Error(absl::StrCat(what, " has element type ", DTypeName(t),
                                  "; expected a float type"));
  }
  return t;
}

// The type of two inputs that must agree: one dtype, one rank, equal static dims. Unknown parts
// of one are filled from the other.
absl::StatusOr<TensorType> MergeTypes(const InferenceContext& ctx, int i, int j,
                                      absl::string_view what_i, absl::string_view what_j) {
  OTTR_ASSIGN_OR_RETURN(DType ti, FloatInput(ctx, i, what_i));
  OTTR_ASSIGN_OR_RETURN(DType tj, FloatInput(ctx, j, what_j));
  const TensorType& a = ctx.input_type(i);
  const TensorType& b = ctx.input_type(j);
  if (ti != DType::kUndefined && tj != DType::kUndefined && ti != tj) {
    return ctx.Error(absl::StrCat(what_i, " ", a.ToString(), " and ", what_j, " ", b.ToString(),
                                  " must have one element type"));
  }
  TensorType out(ti != DType::kUndefined ? ti : tj, a.shape);
  if (!a.has_rank()) {
    out.shape = b.shape;
    return out;
  }
  if (!b.has_rank()) return out;
  const Shape& sa = *a.shape;
  const Shape& sb = *b.shape;
  bool ok = sa.size() == sb.size();
  for (size_t d = 0; ok && d < sa.size(); ++d) {
    if (sa[d].is_static() && sb[d].is_static()) {
      ok = sa[d].value() == sb[d].value();
    } else if (!sa[d].is_static() && sb[d].is_static()) {
      (*out.shape)[d] = sb[d];
    }
  }
  if (!ok) {
    return ctx.Error(absl::StrCat(what_i, " ", a.ToString(), " and ", what_j, " ", b.ToString(),
                                  " must have one shape"));
  }
  return out;
}

// Shape function of the elementwise backward ops: dX = F(dY, Z) has dY's (= Z's) type.
ShapeFn ActivationGradShape(absl::string_view z_name) {
  std::string z(z_name);
  return [z](InferenceContext& ctx) -> absl::Status {
    OTTR_ASSIGN_OR_RETURN(TensorType t, MergeTypes(ctx, 0, 1, "dY", z));
    ctx.set_output_type(0, std::move(t));
    return absl::OkStatus();
  };
}

absl::Status GeluGradShape(InferenceContext& ctx) {
  const std::string approximate = ctx.node().GetString("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return ctx.Error(absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"",
                                  approximate, "\""));
  }
  return ActivationGradShape("X")(ctx);
}

// PReluGrad(dY, X, slope) -> (dX, dSlope): dY has the broadcast shape of X and slope; dX has
// dY's type and dSlope slope's.
absl::Status PReluGradShape(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(DType tdy, FloatInput(ctx, 0, "dY"));
  for (int i : {1, 2}) {
    OTTR_ASSIGN_OR_RETURN(DType t, FloatInput(ctx, i, i == 1 ? "X" : "slope"));
    if (t != DType::kUndefined && tdy != DType::kUndefined && t != tdy) {
      return ctx.Error(absl::StrCat("dY ", ctx.input_type(0).ToString(), " and ",
                                    i == 1 ? "X " : "slope ", ctx.input_type(i).ToString(),
                                    " must have one element type"));
    }
  }
  const TensorType& dy = ctx.input_type(0);
  const TensorType& x = ctx.input_type(1);
  const TensorType& slope = ctx.input_type(2);
  if (dy.has_rank() && x.has_rank() && slope.has_rank()) {
    std::optional<Shape> b = BroadcastShapes(*x.shape, *slope.shape);
    if (!b.has_value()) {
      return ctx.Error(absl::StrCat("X ", x.ToString(), " and slope ", slope.ToString(),
                                    " cannot be broadcast"));
    }
    bool ok = b->size() == dy.shape->size();
    for (size_t d = 0; ok && d < b->size(); ++d) {
      ok = !(*b)[d].is_static() || !(*dy.shape)[d].is_static() ||
           (*b)[d].value() == (*dy.shape)[d].value();
    }
    if (!ok) {
      return ctx.Error(absl::StrCat("dY ", dy.ToString(), " does not have the broadcast shape ",
                                    ShapeToString(*b), " of X and slope"));
    }
  }
  ctx.set_output_type(0, dy);
  if (ctx.num_outputs() > 1) ctx.set_output_type(1, slope);
  return absl::OkStatus();
}

// dX = <grad_op>(dY, Y or X) with the forward node's attributes.
GradientFn ElementwiseRule(std::string grad_op, bool from_output) {
  return [grad_op, from_output](GradientBuilder& b) -> absl::Status {
    Value* dy = b.output_grad(0);
    if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
    Value* z = from_output ? b.output(0) : b.input(0);
    OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1(grad_op, {dy, z}, b.node().attrs(), Ottr()));
    b.set_input_grad(0, dx);
    return absl::OkStatus();
  };
}

// Y = PRelu(X, slope) = X > 0 ? X : slope · X:
//   dX = dY · (X > 0 ? 1 : slope),  dSlope = Σ_broadcast dY · (X > 0 ? 0 : X)
// both from one PReluGrad; each is summed to its input's shape (dX only differs from X's shape
// when slope has more elements than X, which ONNX does not allow but the kernels accept).
absl::Status PReluGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> g,
                        b.Emit("PReluGrad", {dy, b.input(0), b.input(1)}, {}, 2, Ottr()));
  for (int i : {0, 1}) {
    if (!b.needs_input_grad(i)) continue;
    OTTR_ASSIGN_OR_RETURN(Value * r, b.SumToShape(g[i], b.input(i)->type()));
    b.set_input_grad(i, r);
  }
  return absl::OkStatus();
}

struct ElementwiseGradOp {
  const char* forward;
  const char* grad;
  bool from_output;  // Z = Y (else X)
  std::vector<std::pair<const char*, Kind>> attrs;
};

}  // namespace

void RegisterActivationGradients(OpRegistry& r) {
  const std::vector<ElementwiseGradOp> ops = {
      {"Relu", "ReluGrad", true, {}},
      {"LeakyRelu", "LeakyReluGrad", false, {{"alpha", Kind::kFloat}}},
      {"Sigmoid", "SigmoidGrad", true, {}},
      {"Tanh", "TanhGrad", true, {}},
      {"Gelu", "GeluGrad", false, {{"approximate", Kind::kString}}},
      {"Elu", "EluGrad", false, {{"alpha", Kind::kFloat}}},
      {"Selu", "SeluGrad", false, {{"alpha", Kind::kFloat}, {"gamma", Kind::kFloat}}},
      {"Celu", "CeluGrad", false, {{"alpha", Kind::kFloat}}},
      {"Softplus", "SoftplusGrad", false, {}},
      {"HardSigmoid", "HardSigmoidGrad", false, {{"alpha", Kind::kFloat}, {"beta", Kind::kFloat}}},
      {"HardSwish", "HardSwishGrad", false, {}},
      {"Mish", "MishGrad", false, {}},
      {"Softsign", "SoftsignGrad", false, {}},
      {"ThresholdedRelu", "ThresholdedReluGrad", false, {{"alpha", Kind::kFloat}}},
  };
  for (const ElementwiseGradOp& op : ops) {
    OpSchemaBuilder s(Ottr(), op.grad);
    s.Inputs(2, 2).Outputs(1, 1).NotDifferentiable();
    for (const auto& [name, kind] : op.attrs) s.Attr(name, kind);
    if (std::string(op.grad) == "GeluGrad") {
      s.Shape(GeluGradShape);
    } else {
      s.Shape(ActivationGradShape(op.from_output ? "Y" : "X"));
    }
    r.Register(s.Build());
    r.SetGradient("", op.forward, ElementwiseRule(op.grad, op.from_output));
  }
  r.Register(OpSchemaBuilder(Ottr(), "PReluGrad")
                 .Inputs(3, 3)
                 .Outputs(2, 2)
                 .Shape(PReluGradShape)
                 .NotDifferentiable()
                 .Build());
  r.SetGradient("", "PRelu", PReluGradient);
}

}  // namespace ottr::ir
