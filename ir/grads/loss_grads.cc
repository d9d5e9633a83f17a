// Gradient rules of Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss,
// and the schemas of the ottr-domain backward ops they emit (CPU kernels in
// runtime/cpu/loss_grad_kernels.cc):
//
//   ottr::SoftmaxGrad(dY, Y) {axis} -> dX              dX = Y ⊙ (dY − Σ_axis dY ⊙ Y)
//   ottr::LogSoftmaxGrad(dY, Y) {axis} -> dX           dX = dY − exp(Y) ⊙ Σ_axis dY
//   ottr::SoftmaxCrossEntropyLossGrad(dloss, log_prob [N,C,d..], labels [N,d..], [weights [C]])
//       {reduction, ignore_index} -> (dscores [N,C,d..], [dweights [C]])
//   ottr::NegativeLogLikelihoodLossGrad(dloss, input [N,C,d..], labels, [weights])
//       {reduction, ignore_index} -> (dinput, [dweights])
//
// With j = (n, d) a position of the labels, t_j its label, w_j = 0 when t_j == ignore_index and
// weights[t_j] (1 without weights) otherwise, W = Σ_j w_j, lp_j = logp[n, t_j, d], and
//   c_j = w_j · dloss_j (none), w_j · dloss (sum), w_j · dloss / W (mean):
//   NLL:  dinput[n, c, d] = −c_j · [c == t_j]
//   SCE:  dscores[n, c, d] = c_j · (softmax[n, c, d] − [c == t_j])    (softmax = exp(log_prob))
//   dweights[k] = Σ_{j: t_j = k} g_j · (−lp_j) with g_j = dloss_j (none), dloss (sum);
//                 mean: dloss / W · Σ_{j: t_j = k} (−lp_j − loss)
// Ignored positions get a zero gradient (as PyTorch's nll_loss backward).
#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

std::string Ottr() { return std::string(kOttrDomain); }

// Shape function of SoftmaxGrad / LogSoftmaxGrad: dX is typed like Y (input 1), and dY must be too.
absl::Status InferSoftmaxGrad(InferenceContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  const TensorType& y = ctx.input_type(1);
  if (dy.dtype != y.dtype || (dy.has_rank() && y.has_rank() && dy.rank() != y.rank())) {
    return ctx.Error(absl::StrCat("dY ", dy.ToString(), " does not match Y ", y.ToString()));
  }
  if (y.has_rank()) {
    OTTR_RETURN_IF_ERROR(NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), y.rank()).status());
  }
  ctx.set_output_type(0, y);
  return absl::OkStatus();
}

// Shape function of the two loss backward ops: output 0 is typed like input 1 (log_prob / input),
// output 1 like the weights (input 3).
absl::Status InferLossGrad(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  if (x.has_rank() && x.rank() < 2) {
    return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ", x.ToString()));
  }
  ctx.set_output_type(0, x);
  if (ctx.num_outputs() > 1) {
    if (!ctx.has_input(3)) return ctx.Error("the weights gradient needs the weights input");
    ctx.set_output_type(1, ctx.input_type(3));
  }
  return absl::OkStatus();
}

// Y = softmax(X) along axis: dX = Y ⊙ (dY − Σ_axis dY ⊙ Y).
absl::Status SoftmaxGradient(GradientBuilder& b) {
  if (b.output_grad(0) == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx,
                        b.Emit1("SoftmaxGrad", {b.output_grad(0), b.output(0)},
                                {{"axis", Attribute(b.node().GetInt("axis", -1))}}, Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = X − log Σ_axis exp(X): dX = dY − exp(Y) ⊙ Σ_axis dY.
absl::Status LogSoftmaxGradient(GradientBuilder& b) {
  if (b.output_grad(0) == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx,
                        b.Emit1("LogSoftmaxGrad", {b.output_grad(0), b.output(0)},
                                {{"axis", Attribute(b.node().GetInt("axis", -1))}}, Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// The attributes the loss backward ops copy from the forward node.
std::map<std::string, Attribute> LossAttrs(const Node& n) {
  std::map<std::string, Attribute> attrs;
  if (const Attribute* a = n.attr("reduction")) attrs["reduction"] = *a;
  if (const Attribute* a = n.attr("ignore_index")) attrs["ignore_index"] = *a;
  return attrs;
}

// Emits `op`(dloss, logp, labels, [weights]) with the weights gradient output when needed and
// records the gradients of input 0 and (when asked) input 2. Returns the input-0 gradient.
absl::StatusOr<Value*> EmitLossGrad(GradientBuilder& b, const std::string& op, Value* logp) {
  const bool want_weights = b.node().has_input(2) && b.needs_input_grad(2);
  std::vector<Value*> ins = {b.output_grad(0), logp, b.input(1)};
  if (b.node().has_input(2)) ins.push_back(b.input(2));
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> outs,
                        b.Emit(op, ins, LossAttrs(b.node()), want_weights ? 2 : 1, Ottr()));
  if (want_weights) b.set_input_grad(2, outs[1]);
  return outs[0];
}

// SoftmaxCrossEntropyLoss: loss from log_prob = LogSoftmax(scores, axis 1) (see the file
// comment); a gradient into the log_prob output adds LogSoftmax's rule:
//   dscores = SCEGrad(dloss) + dlog_prob − softmax ⊙ Σ_c dlog_prob.
// log_prob is the node's output 1 when it has one, else recomputed with LogSoftmax.
absl::Status SoftmaxCrossEntropyLossGradient(GradientBuilder& b) {
  Value* dloss = b.output_grad(0);
  Value* dlogp = b.output_grad(1);
  if (dloss == nullptr && dlogp == nullptr) return absl::OkStatus();
  Value* logp = b.output(1);
  if (logp == nullptr) {
    OTTR_ASSIGN_OR_RETURN(logp, b.Emit1("LogSoftmax", {b.input(0)}, {{"axis", Attribute(1)}}));
  }
  Value* dscores = nullptr;
  if (dloss != nullptr) {
    OTTR_ASSIGN_OR_RETURN(dscores, EmitLossGrad(b, "SoftmaxCrossEntropyLossGrad", logp));
  }
  if (dlogp != nullptr && b.needs_input_grad(0)) {
    OTTR_ASSIGN_OR_RETURN(
        Value * d, b.Emit1("LogSoftmaxGrad", {dlogp, logp}, {{"axis", Attribute(1)}}, Ottr()));
    if (dscores == nullptr) {
      dscores = d;
    } else {
      OTTR_ASSIGN_OR_RETURN(dscores, b.Emit1("Add", {dscores, d}));
    }
  }
  b.set_input_grad(0, dscores);
  return absl::OkStatus();
}

// NegativeLogLikelihoodLoss: loss_j = −w_j · input[n, t_j, d] (see the file comment).
absl::Status NegativeLogLikelihoodLossGradient(GradientBuilder& b) {
  if (b.output_grad(0) == nullptr) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx, EmitLossGrad(b, "NegativeLogLikelihoodLossGrad", b.input(0)));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

void RegisterLossGradients(OpRegistry& r) {
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    r.Register(OpSchemaBuilder(Ottr(), op)
                   .Inputs(2, 2)
                   .Outputs(1, 1)
                   .Attr("axis", Kind::kInt)
                   .Shape(InferSoftmaxGrad)
                   .NotDifferentiable()
                   .Build());
  }
  for (const char* op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
    r.Register(OpSchemaBuilder(Ottr(), op)
                   .Inputs(3, 4)
                   .Outputs(1, 2)
                   .Attr("reduction", Kind::kString)
                   .Attr("ignore_index", Kind::kInt)
                   .Shape(InferLossGrad)
                   .NotDifferentiable()
                   .Build());
  }
  r.SetGradient("", "Softmax", SoftmaxGradient);
  r.SetGradient("", "LogSoftmax", LogSoftmaxGradient);
  r.SetGradient("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossGradient);
  r.SetGradient("", "NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossGradient);
}

}  // namespace ottr::ir
