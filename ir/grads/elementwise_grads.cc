// Gradient rules of the elementwise ops. Broadcasting is undone with SumToShape, so every rule
// below is written for equal shapes and holds for broadcast operands too.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

// Sets input i's gradient to `g` summed back to input i's shape.
absl::Status SetReduced(GradientBuilder& b, int i, Value* g) {
  if (!b.needs_input_grad(i)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * r, b.SumToShape(g, b.input(i)->type()));
  b.set_input_grad(i, r);
  return absl::OkStatus();
}

DType T(GradientBuilder& b) { return b.output(0)->type().dtype; }

// Y = A + B:  dA = dY,  dB = dY
absl::Status AddGrad(GradientBuilder& b) {
  OTTR_RETURN_IF_ERROR(SetReduced(b, 0, b.output_grad(0)));
  return SetReduced(b, 1, b.output_grad(0));
}

// Y = A − B:  dA = dY,  dB = −dY
absl::Status SubGrad(GradientBuilder& b) {
  OTTR_RETURN_IF_ERROR(SetReduced(b, 0, b.output_grad(0)));
  if (!b.needs_input_grad(1)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * neg, b.Emit1("Neg", {b.output_grad(0)}));
  return SetReduced(b, 1, neg);
}

// Y = A · B:  dA = dY · B,  dB = dY · A
absl::Status MulGrad(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (b.needs_input_grad(0)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {dy, b.input(1)}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 0, g));
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {dy, b.input(0)}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  return absl::OkStatus();
}

// Y = A / B:  dA = dY / B,  dB = −dY · Y / B
absl::Status DivGrad(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  OTTR_ASSIGN_OR_RETURN(Value * q, b.Emit1("Div", {dy, b.input(1)}));
  OTTR_RETURN_IF_ERROR(SetReduced(b, 0, q));
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * qy, b.Emit1("Mul", {q, b.output(0)}));
    OTTR_ASSIGN_OR_RETURN(Value * neg, b.Emit1("Neg", {qy}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 1, neg));
  }
  return absl::OkStatus();
}

// Y = −X:  dX = −dY
absl::Status NegGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Neg", {b.output_grad(0)}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = Σ_i X_i:  dX_i = dY
absl::Status SumGrad(GradientBuilder& b) {
  for (int i = 0; i < b.node().num_inputs(); ++i) OTTR_RETURN_IF_ERROR(SetReduced(b, i, b.output_grad(0)));
  return absl::OkStatus();
}

// Y = (1/n) Σ_i X_i:  dX_i = dY / n
absl::Status MeanGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * inv_n, b.Scalar(1.0 / b.node().num_inputs(), T(b)));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {b.output_grad(0), inv_n}));
  for (int i = 0; i < b.node().num_inputs(); ++i) OTTR_RETURN_IF_ERROR(SetReduced(b, i, g));
  return absl::OkStatus();
}

// Y = Max(X_0, ...) (Min alike):  dX_i = dY where X_i == Y, else 0 (ties: each tied input gets dY).
absl::Status ExtremumGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, T(b)));
  for (int i = 0; i < b.node().num_inputs(); ++i) {
    if (!b.needs_input_grad(i)) continue;
    OTTR_ASSIGN_OR_RETURN(Value * hit, b.Emit1("Equal", {b.input(i), b.output(0)}));
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {hit, b.output_grad(0), zero}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, i, g));
  }
  return absl::OkStatus();
}

// Y = A^B:  dA = dY · B · A^(B−1),  dB = dY · Y · ln A
absl::Status PowGrad(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  Value* a = b.input(0);
  Value* e = b.input(1);
  if (b.needs_input_grad(0)) {
    Value* ef = e;
    if (e->type().dtype != a->type().dtype) {
      OTTR_ASSIGN_OR_RETURN(ef, b.Emit1("Cast", {e}, {{"to", Attribute(int64_t{DTypeToOnnx(a->type().dtype)})}}));
    }
    OTTR_ASSIGN_OR_RETURN(Value * one, b.Scalar(1.0, a->type().dtype));
    OTTR_ASSIGN_OR_RETURN(Value * em1, b.Emit1("Sub", {ef, one}));
    OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Pow", {a, em1}));
    OTTR_ASSIGN_OR_RETURN(Value * bp, b.Emit1("Mul", {ef, p}));
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {dy, bp}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 0, g));
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * ln, b.Emit1("Log", {a}));
    OTTR_ASSIGN_OR_RETURN(Value * yl, b.Emit1("Mul", {b.output(0), ln}));
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {dy, yl}));
    if (g->type().dtype != e->type().dtype) {
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Cast", {g}, {{"to", Attribute(int64_t{DTypeToOnnx(e->type().dtype)})}}));
    }
    OTTR_RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  return absl::OkStatus();
}

// Y = √X:  dX = dY / (2Y)
absl::Status SqrtGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * half, b.Scalar(0.5, T(b)));
  OTTR_ASSIGN_OR_RETURN(Value * q, b.Emit1("Div", {b.output_grad(0), b.output(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {q, half}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = eˣ:  dX = dY · Y
absl::Status ExpGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {b.output_grad(0), b.output(0)}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = ln X:  dX = dY / X
absl::Status LogGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Div", {b.output_grad(0), b.input(0)}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = 1/X:  dX = −dY · Y²
absl::Status ReciprocalGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * y2, b.Emit1("Mul", {b.output(0), b.output(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Mul", {b.output_grad(0), y2}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Neg", {p}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = |X|:  dX = dY · sign(X)
absl::Status AbsGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * s, b.Emit1("Sign", {b.input(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {b.output_grad(0), s}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = erf(X):  dX = dY · 2/√π · e^(−X²)
absl::Status ErfGrad(GradientBuilder& b) {
  Value* x = b.input(0);
  OTTR_ASSIGN_OR_RETURN(Value * x2, b.Emit1("Mul", {x, x}));
  OTTR_ASSIGN_OR_RETURN(Value * nx2, b.Emit1("Neg", {x2}));
  OTTR_ASSIGN_OR_RETURN(Value * e, b.Emit1("Exp", {nx2}));
  OTTR_ASSIGN_OR_RETURN(Value * c, b.Scalar(2.0 / std::sqrt(M_PI), T(b)));
  OTTR_ASSIGN_OR_RETURN(Value * ce, b.Emit1("Mul", {e, c}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {b.output_grad(0), ce}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = sin X:  dX = dY · cos X;   Y = cos X:  dX = −dY · sin X
absl::Status SinGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * c, b.Emit1("Cos", {b.input(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {b.output_grad(0), c}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}
absl::Status CosGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * s, b.Emit1("Sin", {b.input(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Mul", {b.output_grad(0), s}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Neg", {p}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = Where(C, A, B):  dA = Where(C, dY, 0),  dB = Where(C, 0, dY)
absl::Status WhereGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, T(b)));
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {b.input(0), b.output_grad(0), zero}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  if (b.needs_input_grad(2)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {b.input(0), zero, b.output_grad(0)}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 2, g));
  }
  return absl::OkStatus();
}

// Y = Clip(X, lo, hi):  dX = dY where lo ≤ X ≤ hi, else 0 (the bounds get no gradient).
absl::Status ClipGrad(GradientBuilder& b) {
  Value* x = b.input(0);
  Value* inside = nullptr;
  for (int i : {1, 2}) {
    if (!b.node().has_input(i)) continue;
    OTTR_ASSIGN_OR_RETURN(Value * c, b.Emit1(i == 1 ? "GreaterOrEqual" : "LessOrEqual", {x, b.input(i)}));
    if (inside == nullptr) {
      inside = c;
    } else {
      OTTR_ASSIGN_OR_RETURN(inside, b.Emit1("And", {inside, c}));
    }
  }
  if (inside == nullptr) {
    b.set_input_grad(0, b.output_grad(0));
    return absl::OkStatus();
  }
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, T(b)));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {inside, b.output_grad(0), zero}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

// Y = Cast(X):  dX = Cast(dY) back to X's float type.
absl::Status CastGrad(GradientBuilder& b) {
  const DType t = b.input(0)->type().dtype;
  if (!IsFloat(t)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Cast", {b.output_grad(0)}, {{"to", Attribute(int64_t{DTypeToOnnx(t)})}}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseGradients(OpRegistry& r) {
  r.SetGradient("", "Add", AddGrad);
  r.SetGradient("", "Sub", SubGrad);
  r.SetGradient("", "Mul", MulGrad);
  r.SetGradient("", "Div", DivGrad);
  r.SetGradient("", "Neg", NegGrad);
  r.SetGradient("", "Sum", SumGrad);
  r.SetGradient("", "Mean", MeanGrad);
  r.SetGradient("", "Max", ExtremumGrad);
  r.SetGradient("", "Min", ExtremumGrad);
  r.SetGradient("", "Pow", PowGrad);
  r.SetGradient("", "Sqrt", SqrtGrad);
  r.SetGradient("", "Exp", ExpGrad);
  r.SetGradient("", "Log", LogGrad);
  r.SetGradient("", "Reciprocal", ReciprocalGrad);
  r.SetGradient("", "Abs", AbsGrad);
  r.SetGradient("", "Erf", ErfGrad);
  r.SetGradient("", "Sin", SinGrad);
  r.SetGradient("", "Cos", CosGrad);
  r.SetGradient("", "Where", WhereGrad);
  r.SetGradient("", "Clip", ClipGrad);
  r.SetGradient("", "Cast", CastGrad);
  r.SetGradient("", "CastLike", CastGrad);
}

}  // namespace ottr::ir
