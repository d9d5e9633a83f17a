// Gradient rules of the elementwise ops. Broadcasting is undone with SumToShape, so every rule
// below is written for equal shapes and holds for broadcast operands too. At points where an op
// is not differentiable (ties of Max/Min, Clip's bounds, Abs at 0) the rules pick the subgradient
// PyTorch picks.
#include <cmath>
#include <optional>

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

Attribute CastTo(DType t) { return Attribute(int64_t{DTypeToOnnx(t)}); }

// The value of a one-element input known when the rule runs (an initializer or a Constant node's
// output); nullopt otherwise.
std::optional<double> KnownScalar(const Value* v) {
  if (v == nullptr) return std::nullopt;
  const Tensor* t = v->initializer();
  if (t == nullptr && v->producer() != nullptr && v->producer()->op_type() == "Constant" &&
      v->producer()->domain().empty()) {
    const Attribute* a = v->producer()->attr("value");
    if (a != nullptr && a->kind() == Attribute::Kind::kTensor) t = &a->t();
  }
  if (t == nullptr || t->num_elements() != 1 || t->dtype() == DType::kString ||
      t->dtype() == DType::kBool) {
    return std::nullopt;
  }
  return t->GetAsDouble(0);
}

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

// Y = Max(X_0, ..., X_n−1) (Min alike):  dX_i = dY · [X_i = Y] / #{j : X_j = Y}
// Tied inputs share dY equally (PyTorch's maximum/minimum split a tie in halves), so the input
// gradients always sum to dY. Where Y is NaN no input equals it and none gets a gradient.
absl::Status ExtremumGrad(GradientBuilder& b) {
  const Node& n = b.node();
  std::vector<int> present;
  for (int i = 0; i < n.num_inputs(); ++i) {
    if (n.has_input(i)) present.push_back(i);
  }
  if (present.size() == 1) return SetReduced(b, present[0], b.output_grad(0));
  std::vector<Value*> hit(n.num_inputs(), nullptr);
  std::vector<Value*> counts;
  for (int i : present) {
    OTTR_ASSIGN_OR_RETURN(hit[i], b.Emit1("Equal", {b.input(i), b.output(0)}));
    OTTR_ASSIGN_OR_RETURN(Value * c, b.Emit1("Cast", {hit[i]}, {{"to", CastTo(T(b))}}));
    counts.push_back(c);
  }
  OTTR_ASSIGN_OR_RETURN(Value * count, b.Emit1("Sum", counts));
  OTTR_ASSIGN_OR_RETURN(Value * share, b.Emit1("Div", {b.output_grad(0), count}));
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, T(b)));
  for (int i : present) {
    if (!b.needs_input_grad(i)) continue;
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {hit[i], share, zero}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, i, g));
  }
  return absl::OkStatus();
}

// Y = A^B:  dA = dY · B · A^(B−1),  dB = dY · Y · ln A
// dB is 0 where A = 0 and B ≥ 0 (the limit of A^B ln A as A → 0+; PyTorch does the same) instead
// of 0 · (−∞) = NaN. When B is a known scalar c, dA uses it directly: 0 for c = 0, dY for c = 1,
// dY · 2A for c = 2, else dY · c · A^(c−1) with a constant exponent.
absl::Status PowGrad(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  Value* a = b.input(0);
  Value* e = b.input(1);
  const DType ta = a->type().dtype;
  if (b.needs_input_grad(0)) {
    Value* g = nullptr;
    if (std::optional<double> c = KnownScalar(e); c.has_value()) {
      if (*c == 1.0) {
        g = dy;
      } else {
        Value* slope = nullptr;  // c · A^(c−1), or the scalar 0
        if (*c == 0.0) {
          OTTR_ASSIGN_OR_RETURN(slope, b.Scalar(0.0, ta));
        } else if (*c == 2.0) {
          OTTR_ASSIGN_OR_RETURN(Value * two, b.Scalar(2.0, ta));
          OTTR_ASSIGN_OR_RETURN(slope, b.Emit1("Mul", {a, two}));
        } else {
          OTTR_ASSIGN_OR_RETURN(Value * cm1, b.Scalar(*c - 1.0, ta));
          OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Pow", {a, cm1}));
          OTTR_ASSIGN_OR_RETURN(Value * cv, b.Scalar(*c, ta));
          OTTR_ASSIGN_OR_RETURN(slope, b.Emit1("Mul", {p, cv}));
        }
        OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Mul", {dy, slope}));
      }
    } else {
      Value* ef = e;
      if (e->type().dtype != ta) {
        OTTR_ASSIGN_OR_RETURN(ef, b.Emit1("Cast", {e}, {{"to", CastTo(ta)}}));
      }
      OTTR_ASSIGN_OR_RETURN(Value * one, b.Scalar(1.0, ta));
      OTTR_ASSIGN_OR_RETURN(Value * em1, b.Emit1("Sub", {ef, one}));
      OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Pow", {a, em1}));
      OTTR_ASSIGN_OR_RETURN(Value * bp, b.Emit1("Mul", {ef, p}));
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Mul", {dy, bp}));
    }
    OTTR_RETURN_IF_ERROR(SetReduced(b, 0, g));
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * ln, b.Emit1("Log", {a}));
    OTTR_ASSIGN_OR_RETURN(Value * yl, b.Emit1("Mul", {b.output(0), ln}));
    OTTR_ASSIGN_OR_RETURN(Value * zero_a, b.Scalar(0.0, ta));
    OTTR_ASSIGN_OR_RETURN(Value * zero_e, b.Scalar(0.0, e->type().dtype));
    OTTR_ASSIGN_OR_RETURN(Value * a0, b.Emit1("Equal", {a, zero_a}));
    OTTR_ASSIGN_OR_RETURN(Value * e_nonneg, b.Emit1("GreaterOrEqual", {e, zero_e}));
    OTTR_ASSIGN_OR_RETURN(Value * limit, b.Emit1("And", {a0, e_nonneg}));
    OTTR_ASSIGN_OR_RETURN(yl, b.Emit1("Where", {limit, zero_a, yl}));
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Mul", {dy, yl}));
    if (g->type().dtype != e->type().dtype) {
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Cast", {g}, {{"to", CastTo(e->type().dtype)}}));
    }
    OTTR_RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  return absl::OkStatus();
}

// Y = A mod B = A − B · q, q = floor(A / B) (fmod = 0) or trunc(A / B) (fmod = 1), q piecewise
// constant:  dA = dY,  dB = −dY · q
// q is recovered from the forward values as Round((A − Y) / B), an integer up to rounding, so it
// is the quotient the kernel used whichever mode it ran in.
absl::Status ModGrad(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  OTTR_RETURN_IF_ERROR(SetReduced(b, 0, dy));
  if (!b.needs_input_grad(1)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * r, b.Emit1("Sub", {b.input(0), b.output(0)}));
  OTTR_ASSIGN_OR_RETURN(Value * qf, b.Emit1("Div", {r, b.input(1)}));
  OTTR_ASSIGN_OR_RETURN(Value * q, b.Emit1("Round", {qf}));
  OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Mul", {dy, q}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Neg", {p}));
  return SetReduced(b, 1, g);
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

// Y = Clip(X, lo, hi) = min(max(X, lo), hi) (every element is hi when lo > hi):
//   dX = dY · [lo ≤ X ≤ hi],  dlo = Σ dY · [X < lo ∧ lo ≤ hi],  dhi = Σ dY · [otherwise]
// (an absent bound is ±∞: with lo only, dlo = Σ dY · [X < lo]; with hi only, dhi = Σ dY · [X > hi]).
absl::Status ClipGrad(GradientBuilder& b) {
  Value* x = b.input(0);
  Value* dy = b.output_grad(0);
  const bool has_lo = b.node().has_input(1);
  const bool has_hi = b.node().has_input(2);
  if (!has_lo && !has_hi) {
    b.set_input_grad(0, dy);
    return absl::OkStatus();
  }
  Value* inside = nullptr;
  if (has_lo) {
    OTTR_ASSIGN_OR_RETURN(inside, b.Emit1("GreaterOrEqual", {x, b.input(1)}));
  }
  if (has_hi) {
    OTTR_ASSIGN_OR_RETURN(Value * le, b.Emit1("LessOrEqual", {x, b.input(2)}));
    if (inside == nullptr) {
      inside = le;
    } else {
      OTTR_ASSIGN_OR_RETURN(inside, b.Emit1("And", {inside, le}));
    }
  }
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, T(b)));
  if (b.needs_input_grad(0)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {inside, dy, zero}));
    b.set_input_grad(0, g);
  }
  if (!b.needs_input_grad(1) && !b.needs_input_grad(2)) return absl::OkStatus();
  Value* below = nullptr;  // elements that become lo
  if (has_lo) {
    OTTR_ASSIGN_OR_RETURN(below, b.Emit1("Less", {x, b.input(1)}));
    if (has_hi) {
      OTTR_ASSIGN_OR_RETURN(Value * ordered, b.Emit1("LessOrEqual", {b.input(1), b.input(2)}));
      OTTR_ASSIGN_OR_RETURN(below, b.Emit1("And", {below, ordered}));
    }
    if (b.needs_input_grad(1)) {
      OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {below, dy, zero}));
      OTTR_RETURN_IF_ERROR(SetReduced(b, 1, g));
    }
  }
  if (has_hi && b.needs_input_grad(2)) {
    Value* above = nullptr;  // elements that become hi
    if (has_lo) {
      OTTR_ASSIGN_OR_RETURN(Value * kept, b.Emit1("Or", {inside, below}));
      OTTR_ASSIGN_OR_RETURN(above, b.Emit1("Not", {kept}));
    } else {
      OTTR_ASSIGN_OR_RETURN(above, b.Emit1("Greater", {x, b.input(2)}));
    }
    OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {above, dy, zero}));
    OTTR_RETURN_IF_ERROR(SetReduced(b, 2, g));
  }
  return absl::OkStatus();
}

// Y = Cast(X):  dX = Cast(dY) back to X's float type.
absl::Status CastGrad(GradientBuilder& b) {
  const DType t = b.input(0)->type().dtype;
  if (!IsFloat(t)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Cast", {b.output_grad(0)}, {{"to", CastTo(t)}}));
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
  r.SetGradient("", "Mod", ModGrad);
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
