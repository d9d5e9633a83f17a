// Gradient rules of the reductions. Notation: X the input, Y the output, R(i) the reduced
// positions that element i of X contributes to, and dYk / Yk the output gradient / output viewed
// with keepdims = 1 (X's rank with 1 on the reduced axes), so that it broadcasts against X.
// With noop_with_empty_axes = 1 and no axes the op is elementwise and dYk = dY.
//
//   ottr::ReduceProdGrad(X, dYk) -> dX,  dX_i = dYk · Π_{j ∈ R(i), j != i} X_j
//     The reduced axes are those where dYk has size 1 and X does not; the product of the others is
//     computed without dividing by X_i where X_i = 0 (exact with zeros, as PyTorch).
//
// ArgMax and ArgMin (integer results) are marked not differentiable in their schemas.
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/grads/tensor_grad_util.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using K = Attribute::Kind;
using grad_util::KnownInts;
using grad_util::StaticDimsOf;

// Which axes of X the node reduces, when known while the rule runs (constant axes, or an axes
// input whose static shape holds no element): nullopt when the axes are only known at run time.
std::optional<std::vector<bool>> ReducedAxes(const GradientBuilder& b, int64_t rank) {
  const bool noop = b.node().GetInt("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (b.node().num_inputs() > 1 && b.input(1) != nullptr) {
    const TensorType& t = b.input(1)->type();
    const bool statically_empty = t.is_static() && NumElements(StaticDims(*t.shape)) == 0;
    std::optional<std::vector<int64_t>> known = KnownInts(b.input(1));
    if (!known && !statically_empty) return std::nullopt;
    if (known) axes = *known;
  }
  if (axes.empty()) return std::vector<bool>(rank, !noop);
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;  // the forward shape function rejects this
    reduced[a < 0 ? a + rank : a] = true;
  }
  return reduced;
}

// `v` (Y or dY) viewed with keepdims = 1: as it is with keepdims = 1 (or noop), else reshaped to
// X's dims with 1 on the reduced axes, which must then be known (an initializer or Constant).
absl::StatusOr<Value*> KeepDims(GradientBuilder& b, Value* v) {
  if (b.node().GetInt("keepdims", 1) != 0) return v;
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  std::optional<std::vector<bool>> reduced = ReducedAxes(b, rank);
  if (!reduced) {
    return b.Error("with keepdims = 0 the axes must be a constant (initializer or Constant node)");
  }
  std::vector<int64_t> dims = x_dims;
  for (int64_t a = 0; a < rank; ++a) {
    if ((*reduced)[a]) dims[a] = 1;
  }
  OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(dims));
  return b.Emit1("Reshape", {v, shape});
}

// The rule's common frame: dYk (and Yk when `needs_y`), then `body` computes dX from them (of X's
// shape by broadcasting; the final ReshapeTo is a no-op check).
template <typename F>
absl::Status ReduceRule(GradientBuilder& b, bool needs_y, F&& body) {
  if (b.output_grad(0) == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  OTTR_ASSIGN_OR_RETURN(Value * dyk, KeepDims(b, b.output_grad(0)));
  Value* yk = nullptr;
  if (needs_y) {
    OTTR_ASSIGN_OR_RETURN(yk, KeepDims(b, b.output(0)));
  }
  OTTR_ASSIGN_OR_RETURN(Value * dx, body(x_dims, dyk, yk));
  OTTR_ASSIGN_OR_RETURN(dx, b.ReshapeTo(dx, b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

absl::StatusOr<Value*> ExpandTo(GradientBuilder& b, Value* v, const std::vector<int64_t>& dims) {
  OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(dims));
  return b.Emit1("Expand", {v, shape});
}

DType XType(const GradientBuilder& b) { return b.input(0)->type().dtype; }

// Y = Σ_R X: dX = expand(dYk).
absl::Status ReduceSumGradient(GradientBuilder& b) {
  return ReduceRule(b, false, [&](const std::vector<int64_t>& x_dims, Value* dyk, Value*) {
    return ExpandTo(b, dyk, x_dims);
  });
}

// Y = Σ_R X / n with n = |R| = numel(X) / numel(Y): dX = expand(dYk / n).
absl::Status ReduceMeanGradient(GradientBuilder& b) {
  return ReduceRule(
      b, false,
      [&](const std::vector<int64_t>& x_dims, Value* dyk, Value*) -> absl::StatusOr<Value*> {
        OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> y_dims, StaticDimsOf(b, b.output(0)));
        const int64_t nx = NumElements(x_dims), ny = NumElements(y_dims);
        const int64_t n = ny > 0 && nx > 0 ? nx / ny : 1;  // empty X: dX is empty anyway
        OTTR_ASSIGN_OR_RETURN(Value * scale, b.Scalar(1.0 / static_cast<double>(n), XType(b)));
        OTTR_ASSIGN_OR_RETURN(Value * scaled, b.Emit1("Mul", {dyk, scale}));
        return ExpandTo(b, scaled, x_dims);
      });
}

// Y = Σ_R X²: dX = 2 X · dYk.
absl::Status ReduceSumSquareGradient(GradientBuilder& b) {
  return ReduceRule(b, false,
                    [&](const std::vector<int64_t>&, Value* dyk, Value*) -> absl::StatusOr<Value*> {
                      OTTR_ASSIGN_OR_RETURN(Value * two, b.Scalar(2.0, XType(b)));
                      OTTR_ASSIGN_OR_RETURN(Value * scaled, b.Emit1("Mul", {dyk, two}));
                      return b.Emit1("Mul", {b.input(0), scaled});
                    });
}

// Y = Σ_R |X|: dX = sign(X) · dYk (0 at X = 0, the subgradient PyTorch uses).
absl::Status ReduceL1Gradient(GradientBuilder& b) {
  return ReduceRule(b, false,
                    [&](const std::vector<int64_t>&, Value* dyk, Value*) -> absl::StatusOr<Value*> {
                      OTTR_ASSIGN_OR_RETURN(Value * sign, b.Emit1("Sign", {b.input(0)}));
                      return b.Emit1("Mul", {sign, dyk});
                    });
}

// Y = sqrt(Σ_R X²): dX = X · dYk / Yk, and 0 where Yk = 0 (PyTorch's norm backward).
absl::Status ReduceL2Gradient(GradientBuilder& b) {
  return ReduceRule(
      b, true, [&](const std::vector<int64_t>&, Value* dyk, Value* yk) -> absl::StatusOr<Value*> {
        OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, XType(b)));
        OTTR_ASSIGN_OR_RETURN(Value * ratio, b.Emit1("Div", {dyk, yk}));
        OTTR_ASSIGN_OR_RETURN(Value * is_zero, b.Emit1("Equal", {yk, zero}));
        OTTR_ASSIGN_OR_RETURN(Value * safe, b.Emit1("Where", {is_zero, zero, ratio}));
        return b.Emit1("Mul", {b.input(0), safe});
      });
}

// Y = log Σ_R X: dX = expand(dYk / Σ_R X) = expand(dYk / exp(Yk)).
absl::Status ReduceLogSumGradient(GradientBuilder& b) {
  return ReduceRule(
      b, true,
      [&](const std::vector<int64_t>& x_dims, Value* dyk, Value* yk) -> absl::StatusOr<Value*> {
        OTTR_ASSIGN_OR_RETURN(Value * sum, b.Emit1("Exp", {yk}));
        OTTR_ASSIGN_OR_RETURN(Value * ratio, b.Emit1("Div", {dyk, sum}));
        return ExpandTo(b, ratio, x_dims);
      });
}

// Y = log Σ_R exp(X): dX = softmax over R = exp(X - Yk) · dYk.
absl::Status ReduceLogSumExpGradient(GradientBuilder& b) {
  return ReduceRule(
      b, true, [&](const std::vector<int64_t>&, Value* dyk, Value* yk) -> absl::StatusOr<Value*> {
        OTTR_ASSIGN_OR_RETURN(Value * shifted, b.Emit1("Sub", {b.input(0), yk}));
        OTTR_ASSIGN_OR_RETURN(Value * p, b.Emit1("Exp", {shifted}));
        return b.Emit1("Mul", {p, dyk});
      });
}

// Y = max_R X (or min): the gradient goes to the elements equal to the extreme, split evenly among
// ties (PyTorch's amax/amin backward): M = (X == Yk), dX = M · dYk / Σ_R M.
absl::Status ReduceExtremeGradient(GradientBuilder& b) {
  return ReduceRule(
      b, true, [&](const std::vector<int64_t>&, Value* dyk, Value* yk) -> absl::StatusOr<Value*> {
        OTTR_ASSIGN_OR_RETURN(Value * eq, b.Emit1("Equal", {b.input(0), yk}));
        OTTR_ASSIGN_OR_RETURN(
            Value * mask,
            b.Emit1("Cast", {eq}, {{"to", Attribute(static_cast<int64_t>(XType(b)))}}));
        // The tie count, with the forward's own axes and flags but keepdims = 1.
        std::vector<Value*> inputs = {mask};
        if (b.node().num_inputs() > 1 && b.input(1) != nullptr) inputs.push_back(b.input(1));
        OTTR_ASSIGN_OR_RETURN(Value * count,
                              b.Emit1("ReduceSum", inputs,
                                      {{"keepdims", Attribute(int64_t{1})},
                                       {"noop_with_empty_axes",
                                        Attribute(b.node().GetInt("noop_with_empty_axes", 0))}}));
        OTTR_ASSIGN_OR_RETURN(Value * share, b.Emit1("Div", {dyk, count}));
        return b.Emit1("Mul", {mask, share});
      });
}

// Y = Π_R X: dX_i = dYk · Π_{j ∈ R(i), j != i} X_j (ottr::ReduceProdGrad, exact with zeros).
absl::Status ReduceProdGradient(GradientBuilder& b) {
  return ReduceRule(
      b, false, [&](const std::vector<int64_t>&, Value* dyk, Value*) -> absl::StatusOr<Value*> {
        return b.Emit1("ReduceProdGrad", {b.input(0), dyk}, {}, std::string(kOttrDomain));
      });
}

absl::Status InferReduceProdGrad(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const TensorType& dy = ctx.input_type(1);
  if (x.dtype != dy.dtype && x.dtype != DType::kUndefined && dy.dtype != DType::kUndefined) {
    return ctx.Error(absl::StrCat("X ", x.ToString(), " and dY ", dy.ToString(),
                                  " have different element types"));
  }
  if (x.has_rank() && dy.has_rank()) {
    bool ok = x.rank() == dy.rank();
    for (int64_t a = 0; ok && a < x.rank(); ++a) {
      const Dim& xd = (*x.shape)[a];
      const Dim& yd = (*dy.shape)[a];
      ok = !(xd.is_static() && yd.is_static()) || yd.value() == 1 || yd.value() == xd.value();
    }
    if (!ok) {
      return ctx.Error(absl::StrCat("dY ", dy.ToString(), " must have X's rank with each dim ",
                                    "equal to X's or 1; X is ", x.ToString()));
    }
  }
  return SameAsInput(ctx);
}

}  // namespace

void RegisterReductionGradients(OpRegistry& r) {
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "ReduceProdGrad")
                 .Inputs(2, 2)
                 .Outputs(1, 1)
                 .Shape(InferReduceProdGrad)
                 .NotDifferentiable()
                 .Build());
  r.SetGradient("", "ReduceSum", ReduceSumGradient);
  r.SetGradient("", "ReduceMean", ReduceMeanGradient);
  r.SetGradient("", "ReduceSumSquare", ReduceSumSquareGradient);
  r.SetGradient("", "ReduceL1", ReduceL1Gradient);
  r.SetGradient("", "ReduceL2", ReduceL2Gradient);
  r.SetGradient("", "ReduceLogSum", ReduceLogSumGradient);
  r.SetGradient("", "ReduceLogSumExp", ReduceLogSumExpGradient);
  r.SetGradient("", "ReduceMax", ReduceExtremeGradient);
  r.SetGradient("", "ReduceMin", ReduceExtremeGradient);
  r.SetGradient("", "ReduceProd", ReduceProdGradient);
}

}  // namespace ottr::ir
