// ottr-domain ops of the training step: the appended loss and the optimizer updates.
//
//   ottr::SoftmaxCrossEntropy(logits f32[N,C], labels i64[N]) -> (loss f32[], log_prob f32[N,C])
//     loss = mean over rows with label != ignore_index of
//            (1 - ε) · (-log_prob[i, y_i]) + ε / C · Σ_c (-log_prob[i, c])     (PyTorch's
//            cross_entropy with label_smoothing ε; 0/0 = NaN when every row is ignored, as PyTorch)
//   ottr::SoftmaxCrossEntropyGrad(dloss f32[], log_prob f32[N,C], labels i64[N]) -> dlogits f32[N,C]
//     dlogits[i] = dloss / count · (softmax[i] - (1 - ε) · onehot(y_i) - ε / C), 0 for ignored rows
//   ottr::SoftmaxCrossEntropyWithGrad(logits f32[N,C], labels i64[N], dloss f32[]) -> (loss f32[], dlogits)
//     {grad_type}: SoftmaxCrossEntropy and its SoftmaxCrossEntropyGrad in one node, without the
//     log_prob between them (fuse-sce-grad). The same values: softmax[i] is exp of log_prob
//     rounded to the logits' type, dlogits is rounded to that type and then, when grad_type (an
//     ONNX element type) is given, to it (the Cast to the GEMM type of a 16-bit step folded).
//     {classes = K} (0 < K <= C): the loss is over logits[:, :K] (the Slice of a padded GEMM's
//     output folded) and dlogits is [N, C], zero in columns K.. (the Slice's gradient folded).
//     An optional third output dbias [C] = Σ_i dlogits[i, :] (fuse-sce-bgrad: the bias gradient
//     of the GEMM before, ReduceSum(dlogits, [0]) folded), summed as ReduceSum does.
//     An optional fourth input `count` (i64[], ottr::CountLabels of the same labels and
//     ignore_index) is the mean's divisor, counted before the node runs (count-labels-early): a
//     reference checks it against the labels.
//   ottr::CountLabels(labels i64[N] | i32[N]) -> count i64[]
//     {ignore_index = -100}: the number of labels that are not ignore_index.
//   ottr::LinearSoftmaxCrossEntropyWithGrad(x f32[N,K], w, [bias f32[C]], labels i64[N], dloss f32[],
//       [mask u8[N, ReluMaskRowBytes(K)]]) -> (loss f32[], dlogits f32[N,C], dx f32[N,K], [dbias f32[K]])
//     {transB, ignore_index, label_smoothing, classes = 0, relu_x = 0} (fuse-linear-sce: the
//     classifier GEMM, the loss and the data gradient through the GEMM in one node): logits =
//     x · op(w) + bias, op(w) = wᵀ with w [C, K] for transB = 1, else w [K, C]; (loss, dlogits) =
//     SoftmaxCrossEntropyWithGrad(logits, labels, dloss) {classes} (classes > 0: the loss of the
//     first `classes` columns, dlogits zero past them: a classifier padded by pad-gemm-dims);
//     dx = dlogits · op(w)ᵀ, zero where the ReLU bit mask (ir/fused_gemm.h) of x's producer is
//     clear when a mask is given (the drelu epilogue), or with relu_x = 1 where x <= 0 (x is a
//     ReLU's output: ReluGrad(dx, x)); dbias, when asked for, is Σ_i dx[i, :] summed in double
//     and rounded once (ReluGradBiasGrad's bias gradient). Float32; the logits are not an output.
//   ottr::SGDUpdate(param, grad, lr f32[], step i64[], [buf]) -> (param', [buf'])
//     PyTorch SGD: g = grad + wd · param; buf = g on step 1, else momentum · buf + (1 - dampening) · g;
//     g = g + momentum · buf (nesterov) or buf; param' = param - lr · g
//   ottr::AdamUpdate(param, grad, lr f32[], step i64[], m, v) -> (param', m', v')
//     PyTorch Adam/AdamW: AdamW first param *= 1 - lr · wd, Adam adds wd · param to grad;
//     m = lerp(m, g, 1 - β1); v = β2 · v + (1 - β2) · g²;
//     param' = param - lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + eps)
// `step` is the 1-based index of the step being taken.
//   ottr::AdamUpdateN(lr, step, p_0..p_n-1, g_0.., m_0.., v_0..) -> (p'_0.., m'_0.., v'_0..)
//   ottr::SGDUpdateN(lr, step, p_0..p_n-1, g_0.., [buf_0..]) -> (p'_0.., [buf'_0..])
//     The same updates for n tensors sharing attributes, lr and step: one node, so an executor
//     runs one multi-tensor launch (the group-optimizer-updates pass makes them). With
//     `guarded = 1` one more input comes last: a float scalar (the loss); when it is not finite
//     the update is skipped (every output equals its input), so a bad batch leaves the
//     parameters and optimizer state as they were. The guard may also be a bool scalar: false
//     skips (the nan-guard and the loss scaling pass AllFinite of the loss and the gradients). With
//     `unscale = 1` a float scalar S (the loss scale) comes before the guard and each gradient is
//     multiplied by T(1 / S) first (PyTorch's GradScaler: grad * scale.double().reciprocal()
//     .float()). Input layout: ir/optimizer_update.h.
//   ottr::GemmAdamUpdate(lr, step, A f32[K,M], B f32[K,N], p_0.., m_0.., v_0..) -> (p'_0.., m'_0.., v'_0..)
//     {the AdamUpdateN attributes but guarded/unscale/low_copies, bias = "a" | "b"}
//     (fuse-gemm-adam, passes/fuse_gemm_adam.cc): a weight gradient made from its operands and
//     the Adam update of that weight, and optionally of its bias, in one node: n = 1 or 2
//     tensors, the update of each exactly AdamUpdateN's with gradients g_0 = Aᵀ·B [M, N] (p_0
//     [M, N]) and, when n = 2, g_1 = Σ_k A[k, :] [M] (bias = "a") or Σ_k B[k, :] [N] (bias =
//     "b"), summed in double in increasing k and rounded once (FusedGemm's bgrada / bgradb). The
//     gradients are not outputs. Input layout as ir/optimizer_update.h with the gradients'
//     n inputs replaced by A and B.
//   ottr::MlpStep(lr, step, x f32[B,D], labels i32|i64[B], p_0..p_2L-1, m_0.., v_0..)
//       -> (loss f32[], p'_0.., m'_0.., v'_0..) {Adam's attributes, ignore_index}
//     (fuse-mlp-step, passes/fuse_mlp_step.cc): the whole training step of a ReLU MLP in one
//     node. p_2l = W_l [H_l, H_l-1] and p_2l+1 = b_l [H_l] (H_-1 = D); z_l = y_l-1·W_lᵀ + b_l,
//     y_l = relu(z_l) for l < L-1, logits z_L-1; loss = the mean over the rows whose label is not
//     ignore_index of -log_softmax(logits)[label] (ottr::SoftmaxCrossEntropy without label
//     smoothing); then the gradient of that loss with respect to every p_i and AdamUpdateN's
//     update of each (unguarded, no loss scale). The gradients are not outputs.
//   ottr::AllFinite(x_0, ..., x_k) -> ok bool[]
//     true when every element of every (float) input is finite.
//   ottr::LossScaleUpdate(scale f[], good_steps i64[], ok bool[]) -> (scale', good_steps')
//     torch.amp's _amp_update_scale_: not ok: scale' = scale · backoff_factor, good' = 0;
//     ok: good' = good + 1, and when good' reaches growth_interval scale' = scale · growth_factor
//     (kept only if finite) and good' = 0. Defaults 2.0, 0.5, 2000.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/optimizer_update.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using K = Attribute::Kind;

// Tensors of an N-ary update: Adam (2 + 4n inputs, 3n outputs); SGD (2 + 2n inputs, n outputs)
// or with momentum buffers (2 + 3n inputs, 2n outputs); then [grad_scale], [guard]
// (ir/optimizer_update.h).
absl::Status InferParamUpdateN(InferenceContext& ctx, bool adam) {
  const UpdateNLayout l = UpdateNLayoutOf(ctx.node(), adam);
  auto scalar = [&](int i) {
    const TensorType& t = ctx.input_type(i);
    return t.is_static() && NumElements(StaticDims(*t.shape)) == 1;
  };
  if (l.guard >= 0) {
    const TensorType& g = ctx.input_type(l.guard);
    if (!(IsFloat(g.dtype) || g.dtype == DType::kBool) || !scalar(l.guard)) {
      return ctx.Error(absl::StrCat("the guard (last input) must be a float or bool scalar, got ", g.ToString()));
    }
  }
  if (l.grad_scale >= 0 && (!IsFloat(ctx.input_type(l.grad_scale).dtype) || !scalar(l.grad_scale))) {
    return ctx.Error(absl::StrCat("the gradient scale (input ", l.grad_scale, ") must be a float scalar, got ",
                                  ctx.input_type(l.grad_scale).ToString()));
  }
  if (!l.valid) {
    return ctx.Error(adam ? absl::StrCat("AdamUpdateN needs 2 + 4n inputs and 3n outputs, got ", ctx.num_inputs(),
                                         " and ", ctx.num_outputs())
                          : absl::StrCat("SGDUpdateN needs 2 + 2n (or 3n) inputs and n (or 2n) outputs, got ",
                                         ctx.num_inputs(), " and ", ctx.num_outputs()));
  }
  const int n = l.n, states = l.states;
  for (int k = 0; k < n; ++k) {
    const TensorType& p = ctx.input_type(2 + k);
    if (ctx.input_type(2 + n + k) != p) {
      return ctx.Error(absl::StrCat("gradient ", k, " ", ctx.input_type(2 + n + k).ToString(),
                                    " does not match param ", p.ToString()));
    }
    ctx.set_output_type(k, p);
    for (int s = 0; s < states; ++s) ctx.set_output_type((1 + s) * n + k, ctx.input_type(2 + (2 + s) * n + k));
  }
  if (!l.low_copies.empty()) {
    const DType low = static_cast<DType>(ctx.node().GetInt("low_type", 0));
    if (low != DType::kBFloat16 && low != DType::kFloat16) {
      return ctx.Error(absl::StrCat("low_type must be float16 (10) or bfloat16 (16), got ", ctx.node().GetInt("low_type", 0)));
    }
    for (size_t j = 0; j < l.low_copies.size(); ++j) {
      const TensorType& p = ctx.input_type(2 + static_cast<int>(l.low_copies[j]));
      if (p.dtype != DType::kFloat32) {
        return ctx.Error(absl::StrCat("a low-precision copy of parameter ", l.low_copies[j], " needs float32, got ",
                                      p.ToString()));
      }
      ctx.set_output_type(l.first_low + static_cast<int>(j), TensorType(low, p.shape));
    }
  }
  return absl::OkStatus();
}

// ottr::GemmAdamUpdate(lr, step, A [K, M], B [K, N], p.., m.., v..) -> (p'.., m'.., v'..).
absl::Status InferGemmAdamUpdate(InferenceContext& ctx) {
  const int in = ctx.num_inputs() - 4;
  const int n = in / 3;
  if (in != 3 * n || (n != 1 && n != 2) || ctx.num_outputs() != 3 * n) {
    return ctx.Error(absl::StrCat("GemmAdamUpdate needs 4 + 3n inputs and 3n outputs with n = 1 or 2, got ",
                                  ctx.num_inputs(), " and ", ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
  }
  const TensorType& a = ctx.input_type(2);
  const TensorType& b = ctx.input_type(3);
  if (a.dtype != DType::kFloat32 || b.dtype != DType::kFloat32 || !a.is_static() || !b.is_static() ||
      a.shape->size() != 2 || b.shape->size() != 2) {
    return ctx.Error(absl::StrCat("A and B must be static 2-D float32, got ", a.ToString(), " and ", b.ToString()));
  }
  const std::vector<int64_t> ad = StaticDims(*a.shape), bd = StaticDims(*b.shape);
  if (ad[0] != bd[0]) return ctx.Error(absl::StrCat("A ", a.ToString(), " and B ", b.ToString(), " differ in K"));
  const std::string bias = ctx.node().GetString("bias", "");
  if (n == 2 && bias != "a" && bias != "b") return ctx.Error("a bias update needs bias = \"a\" or \"b\"");
  for (int k = 0; k < n; ++k) {
    const std::vector<int64_t> want = k == 0 ? std::vector<int64_t>{ad[1], bd[1]}
                                             : std::vector<int64_t>{bias == "a" ? ad[1] : bd[1]};
    const TensorType& p = ctx.input_type(4 + k);
    if (p.dtype != DType::kFloat32 || !p.is_static() || StaticDims(*p.shape) != want) {
      return ctx.Error(absl::StrCat("parameter ", k, " ", p.ToString(), " is not the float32 [",
                                    absl::StrJoin(want, ", "), "] of its gradient"));
    }
    for (int s = 1; s <= 2; ++s) {
      if (ctx.input_type(4 + s * n + k) != p) {
        return ctx.Error(absl::StrCat("state ", ctx.input_type(4 + s * n + k).ToString(), " does not match parameter ",
                                      p.ToString()));
      }
    }
    for (int s = 0; s <= 2; ++s) ctx.set_output_type(s * n + k, p);
  }
  const TensorType& lr = ctx.input_type(0);
  const TensorType& step = ctx.input_type(1);
  if (!IsFloat(lr.dtype) || (step.dtype != DType::kInt64 && step.dtype != DType::kInt32)) {
    return ctx.Error(absl::StrCat("lr must be a float scalar and step an integer scalar, got ", lr.ToString(), " and ",
                                  step.ToString()));
  }
  return absl::OkStatus();
}

// ottr::MlpStep(lr, step, x, labels, p.., m.., v..) -> (loss, p'.., m'.., v'..).
absl::Status InferMlpStep(InferenceContext& ctx) {
  const int in = ctx.num_inputs() - 4;
  const int layers = in / 6;
  if (in != 6 * layers || layers < 1 || ctx.num_outputs() != 1 + 6 * layers) {
    return ctx.Error(absl::StrCat("MlpStep needs 4 + 6L inputs and 1 + 6L outputs (L layers), got ",
                                  ctx.num_inputs(), " and ", ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
  }
  const TensorType& lr = ctx.input_type(0);
  const TensorType& step = ctx.input_type(1);
  if (!IsFloat(lr.dtype) || (step.dtype != DType::kInt64 && step.dtype != DType::kInt32)) {
    return ctx.Error(absl::StrCat("lr must be a float scalar and step an integer scalar, got ", lr.ToString(), " and ",
                                  step.ToString()));
  }
  const TensorType& x = ctx.input_type(2);
  const TensorType& labels = ctx.input_type(3);
  if (x.dtype != DType::kFloat32 || !x.is_static() || x.rank() != 2) {
    return ctx.Error(absl::StrCat("x must be a static 2-D float32 tensor, got ", x.ToString()));
  }
  const std::vector<int64_t> xd = StaticDims(*x.shape);
  if ((labels.dtype != DType::kInt64 && labels.dtype != DType::kInt32) || !labels.is_static() ||
      StaticDims(*labels.shape) != std::vector<int64_t>{xd[0]}) {
    return ctx.Error(absl::StrCat("labels must be int32 or int64 [", xd[0], "], got ", labels.ToString()));
  }
  const int n = 2 * layers;
  int64_t width = xd[1];
  for (int l = 0; l < layers; ++l) {
    const TensorType& w = ctx.input_type(4 + 2 * l);
    const TensorType& b = ctx.input_type(5 + 2 * l);
    if (w.dtype != DType::kFloat32 || !w.is_static() || w.rank() != 2 || StaticDims(*w.shape)[1] != width) {
      return ctx.Error(absl::StrCat("layer ", l, "'s weight must be float32 [out, ", width, "], got ", w.ToString()));
    }
    const int64_t out = StaticDims(*w.shape)[0];
    if (b.dtype != DType::kFloat32 || !b.is_static() || StaticDims(*b.shape) != std::vector<int64_t>{out}) {
      return ctx.Error(absl::StrCat("layer ", l, "'s bias must be float32 [", out, "], got ", b.ToString()));
    }
    width = out;
  }
  for (int k = 0; k < n; ++k) {
    const TensorType& p = ctx.input_type(4 + k);
    for (int s = 1; s <= 2; ++s) {
      if (ctx.input_type(4 + s * n + k) != p) {
        return ctx.Error(absl::StrCat("state ", ctx.input_type(4 + s * n + k).ToString(), " does not match parameter ",
                                      p.ToString()));
      }
    }
    for (int s = 0; s <= 2; ++s) ctx.set_output_type(1 + s * n + k, p);
  }
  ctx.set_output_type(0, TensorType(DType::kFloat32, Shape{}));
  return absl::OkStatus();
}

// ottr::AllFinite(x_0, ...) -> bool[]: every element of every input is finite.
absl::Status InferAllFinite(InferenceContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || !IsFloat(ctx.input_type(i).dtype)) {
      return ctx.Error(absl::StrCat("input ", i, " must be a float tensor"));
    }
  }
  ctx.set_output_type(0, TensorType(DType::kBool, Shape{}));
  return absl::OkStatus();
}

// ottr::LossScaleUpdate(scale, good_steps, ok) -> (scale', good_steps').
absl::Status InferLossScaleUpdate(InferenceContext& ctx) {
  const TensorType& s = ctx.input_type(0);
  const TensorType& c = ctx.input_type(1);
  const TensorType& ok = ctx.input_type(2);
  auto scalar = [](const TensorType& t) { return t.is_static() && NumElements(StaticDims(*t.shape)) == 1; };
  if (!IsFloat(s.dtype) || !scalar(s)) return ctx.Error(absl::StrCat("the scale must be a float scalar, got ", s.ToString()));
  if (c.dtype != DType::kInt64 || !scalar(c)) {
    return ctx.Error(absl::StrCat("the good-step counter must be an int64 scalar, got ", c.ToString()));
  }
  if (ok.dtype != DType::kBool || !scalar(ok)) return ctx.Error(absl::StrCat("ok must be a bool scalar, got ", ok.ToString()));
  if (ctx.node().GetInt("growth_interval", 2000) < 1) return ctx.Error("growth_interval must be at least 1");
  ctx.set_output_type(0, s);
  ctx.set_output_type(1, c);
  return absl::OkStatus();
}

absl::Status InferSce(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(Shape logits, RankedInput(ctx, 0));
  if (logits.size() != 2) {
    return ctx.Error(absl::StrCat("logits must be [N, C], got ", ShapeToString(logits)));
  }
  OTTR_ASSIGN_OR_RETURN(Shape labels, RankedInput(ctx, 1));
  if (labels.size() != 1 || (labels[0].is_static() && logits[0].is_static() &&
                             labels[0].value() != logits[0].value())) {
    return ctx.Error(absl::StrCat("labels must be [N] for logits ", ShapeToString(logits),
                                  ", got ", ShapeToString(labels)));
  }
  const DType t = ctx.input_type(0).dtype;
  const DType lt = ctx.input_type(1).dtype;
  if (lt != DType::kInt64 && lt != DType::kInt32) {
    return ctx.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(lt)));
  }
  ctx.set_output_type(0, TensorType(t, Shape{}));
  if (ctx.num_outputs() > 1) ctx.set_output_type(1, ctx.input_type(0));
  return absl::OkStatus();
}

absl::Status InferSceWithGrad(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(InferSce(ctx));
  const TensorType& logits = ctx.input_type(0);
  const TensorType& dloss = ctx.input_type(2);
  if (!IsFloat(dloss.dtype)) return ctx.Error(absl::StrCat("dloss must be a float scalar, got ", dloss.ToString()));
  if (dloss.shape && !dloss.shape->empty()) {
    return ctx.Error(absl::StrCat("dloss must be a scalar, got ", dloss.ToString()));
  }
  if (ctx.has_input(3)) {  // the labels' count (ottr::CountLabels)
    const TensorType& count = ctx.input_type(3);
    if (count.dtype != DType::kInt64 || (count.shape && !count.shape->empty())) {
      return ctx.Error(absl::StrCat("count (input 3) must be an int64 scalar, got ", count.ToString()));
    }
  }
  DType g = logits.dtype;
  if (ctx.node().attr("grad_type") != nullptr) {
    absl::StatusOr<DType> o = DTypeFromOnnx(static_cast<int32_t>(ctx.node().GetInt("grad_type", 0)));
    if (!o.ok() || !IsFloat(*o)) {
      return ctx.Error(absl::StrCat("grad_type ", ctx.node().GetInt("grad_type", 0), " is not a float element type"));
    }
    g = *o;
  }
  ctx.set_output_type(1, TensorType(g, logits.shape));
  if (ctx.num_outputs() > 2) {  // the column sums of dlogits (fuse-sce-bgrad)
    if (!logits.shape) return ctx.Error("the column sums of dlogits need the logits' rank");
    ctx.set_output_type(2, TensorType(g, Shape{(*logits.shape)[1]}));
  }
  return absl::OkStatus();
}

absl::Status InferCountLabels(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(Shape labels, RankedInput(ctx, 0));
  const DType lt = ctx.input_type(0).dtype;
  if (labels.size() != 1 || (lt != DType::kInt64 && lt != DType::kInt32)) {
    return ctx.Error(absl::StrCat("labels must be int32 or int64 [N], got ", ctx.input_type(0).ToString()));
  }
  ctx.set_output_type(0, TensorType(DType::kInt64, Shape{}));
  return absl::OkStatus();
}

absl::Status InferLinearSce(InferenceContext& ctx) {
  if (!ctx.has_input(3) || !ctx.has_input(4)) return ctx.Error("needs the labels (input 3) and dloss (input 4)");
  OTTR_ASSIGN_OR_RETURN(Shape x, RankedInput(ctx, 0));
  OTTR_ASSIGN_OR_RETURN(Shape w, RankedInput(ctx, 1));
  if (x.size() != 2 || w.size() != 2) {
    return ctx.Error(absl::StrCat("x and w must be matrices, got ", ShapeToString(x), " and ", ShapeToString(w)));
  }
  const bool trans_b = ctx.node().GetInt("transB", 0) != 0;
  const Dim c = trans_b ? w[0] : w[1];
  const Dim wk = trans_b ? w[1] : w[0];
  if (x[1].is_static() && wk.is_static() && x[1].value() != wk.value()) {
    return ctx.Error(absl::StrCat("x ", ShapeToString(x), " and w ", ShapeToString(w), " (transB = ", trans_b ? 1 : 0,
                                  ") disagree on K"));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (i == 3 || i == 5 || !ctx.has_input(i)) continue;
    if (ctx.input_type(i).dtype != DType::kFloat32) {
      return ctx.Error(absl::StrCat("input ", i, " is ", ctx.input_type(i).ToString(), "; the fused node is float32"));
    }
  }
  const DType lt = ctx.input_type(3).dtype;
  if (lt != DType::kInt64 && lt != DType::kInt32) {
    return ctx.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(lt)));
  }
  if (ctx.has_input(5) && ctx.input_type(5).dtype != DType::kUInt8) {
    return ctx.Error(absl::StrCat("the ReLU mask must be uint8, got ", ctx.input_type(5).ToString()));
  }
  if (ctx.has_input(5) && ctx.node().GetInt("relu_x", 0) != 0) {
    return ctx.Error("relu_x = 1 and a ReLU mask: dx goes through one activation");
  }
  const int64_t classes = ctx.node().GetInt("classes", 0);
  if (classes < 0 || (c.is_static() && classes > c.value())) {
    return ctx.Error(absl::StrCat("classes ", classes, " is outside [0, ", c.ToString(), "] (the weight's classes)"));
  }
  ctx.set_output_type(0, TensorType(DType::kFloat32, Shape{}));
  ctx.set_output_type(1, TensorType(DType::kFloat32, Shape{x[0], c}));
  ctx.set_output_type(2, TensorType(DType::kFloat32, x));
  if (ctx.num_outputs() > 3) ctx.set_output_type(3, TensorType(DType::kFloat32, Shape{x[1]}));
  return absl::OkStatus();
}

absl::Status InferParamUpdate(InferenceContext& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    // Outputs mirror (param, states...): output 0 is the param, output k the k-th state input.
    const int in = i == 0 ? 0 : ctx.num_inputs() - ctx.num_outputs() + i;
    if (!ctx.has_input(in)) return ctx.Error(absl::StrCat("missing state input ", in));
    ctx.set_output_type(i, ctx.input_type(in));
  }
  if (ctx.has_input(1) && ctx.input_type(1) != ctx.input_type(0)) {
    return ctx.Error(absl::StrCat("gradient ", ctx.input_type(1).ToString(), " does not match param ",
                                  ctx.input_type(0).ToString()));
  }
  return absl::OkStatus();
}

// dlogits = SoftmaxCrossEntropyGrad(dloss, log_prob, labels): the fused softmax/log-softmax rule.
absl::Status SceGradient(GradientBuilder& b) {
  if (!b.needs_input_grad(0) || b.output_grad(0) == nullptr) return absl::OkStatus();
  std::map<std::string, Attribute> attrs = b.node().attrs();
  Value* log_prob = b.output(1);
  if (log_prob == nullptr) return b.Error("needs its log_prob output for the gradient");
  OTTR_ASSIGN_OR_RETURN(Value * d, b.Emit1("SoftmaxCrossEntropyGrad",
                                           {b.output_grad(0), log_prob, b.input(1)}, attrs,
                                           std::string(kOttrDomain)));
  b.set_input_grad(0, d);
  return absl::OkStatus();
}

}  // namespace

void RegisterOptimizerOps(OpRegistry& r) {
  // ai.onnx.preview.training Gradient: lowered by passes/lower_gradient.cc before execution.
  r.Register(OpSchemaBuilder(std::string(kTrainingDomain), "Gradient")
                 .Opsets(1, 1)
                 .Inputs(1, -1)
                 .Outputs(1, -1)
                 .Attr("xs", K::kStrings, /*required=*/true)
                 .Attr("y", K::kString, /*required=*/true)
                 .Attr("zs", K::kStrings)
                 .Shape([](InferenceContext& ctx) {
                   for (int i = 0; i < ctx.num_outputs() && i < ctx.num_inputs(); ++i) {
                     if (ctx.has_input(i)) ctx.set_output_type(i, ctx.input_type(i));
                   }
                   return absl::OkStatus();
                 })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "SoftmaxCrossEntropy")
                 .Inputs(2, 2)
                 .Outputs(1, 2)
                 .Attr("ignore_index", K::kInt)
                 .Attr("label_smoothing", K::kFloat)
                 .Shape(InferSce)
                 .Build());
  r.SetGradient(kOttrDomain, "SoftmaxCrossEntropy", SceGradient);
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "SoftmaxCrossEntropyGrad")
                 .Inputs(3, 3)
                 .Outputs(1, 1)
                 .Attr("ignore_index", K::kInt)
                 .Attr("label_smoothing", K::kFloat)
                 .Shape([](InferenceContext& ctx) { return SameAsInput(ctx, 1); })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "CountLabels")
                 .Inputs(1, 1)
                 .Outputs(1, 1)
                 .Attr("ignore_index", K::kInt)
                 .Shape(InferCountLabels)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "SoftmaxCrossEntropyWithGrad")
                 .Inputs(3, 4)
                 .Outputs(2, 3)
                 .Attr("ignore_index", K::kInt)
                 .Attr("label_smoothing", K::kFloat)
                 .Attr("grad_type", K::kInt)
                 .Attr("classes", K::kInt)
                 .Shape(InferSceWithGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "LinearSoftmaxCrossEntropyWithGrad")
                 .Inputs(2, 6)  // the bias (2) may be omitted; InferLinearSce requires 3 and 4
                 .Outputs(3, 4)
                 .Attr("transB", K::kInt)
                 .Attr("ignore_index", K::kInt)
                 .Attr("label_smoothing", K::kFloat)
                 .Attr("classes", K::kInt)
                 .Attr("relu_x", K::kInt)
                 .Shape(InferLinearSce)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "SGDUpdate")
                 .Inputs(4, 5)
                 .Outputs(1, 2)
                 .Attr("momentum", K::kFloat)
                 .Attr("dampening", K::kFloat)
                 .Attr("nesterov", K::kInt)
                 .Attr("weight_decay", K::kFloat)
                 .Shape(InferParamUpdate)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "AdamUpdate")
                 .Inputs(6, 6)
                 .Outputs(3, 3)
                 .Attr("beta1", K::kFloat)
                 .Attr("beta2", K::kFloat)
                 .Attr("epsilon", K::kFloat)
                 .Attr("weight_decay", K::kFloat)
                 .Attr("decoupled", K::kInt)
                 .Shape(InferParamUpdate)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "AdamUpdateN")
                 .Inputs(6, -1)
                 .Outputs(3, -1)
                 .Attr("beta1", K::kFloat)
                 .Attr("beta2", K::kFloat)
                 .Attr("epsilon", K::kFloat)
                 .Attr("weight_decay", K::kFloat)
                 .Attr("decoupled", K::kInt)
                 .Attr("guarded", K::kInt)
                 .Attr("unscale", K::kInt)
                 .Attr("low_copies", K::kInts)
                 .Attr("low_type", K::kInt)
                 .Shape([](InferenceContext& c) { return InferParamUpdateN(c, true); })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "SGDUpdateN")
                 .Inputs(4, -1)
                 .Outputs(1, -1)
                 .Attr("momentum", K::kFloat)
                 .Attr("dampening", K::kFloat)
                 .Attr("nesterov", K::kInt)
                 .Attr("weight_decay", K::kFloat)
                 .Attr("guarded", K::kInt)
                 .Attr("unscale", K::kInt)
                 .Attr("low_copies", K::kInts)
                 .Attr("low_type", K::kInt)
                 .Shape([](InferenceContext& c) { return InferParamUpdateN(c, false); })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "GemmAdamUpdate")
                 .Inputs(7, 10)
                 .Outputs(3, 6)
                 .Attr("beta1", K::kFloat)
                 .Attr("beta2", K::kFloat)
                 .Attr("epsilon", K::kFloat)
                 .Attr("weight_decay", K::kFloat)
                 .Attr("decoupled", K::kInt)
                 .Attr("bias", K::kString)
                 .Shape(InferGemmAdamUpdate)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "MlpStep")
                 .Inputs(10, -1)
                 .Outputs(7, -1)
                 .Attr("beta1", K::kFloat)
                 .Attr("beta2", K::kFloat)
                 .Attr("epsilon", K::kFloat)
                 .Attr("weight_decay", K::kFloat)
                 .Attr("decoupled", K::kInt)
                 .Attr("ignore_index", K::kInt)
                 .Shape(InferMlpStep)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "AllFinite")
                 .Inputs(1, -1)
                 .Outputs(1, 1)
                 .Shape(InferAllFinite)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "LossScaleUpdate")
                 .Inputs(3, 3)
                 .Outputs(2, 2)
                 .Attr("growth_factor", K::kFloat)
                 .Attr("backoff_factor", K::kFloat)
                 .Attr("growth_interval", K::kInt)
                 .Shape(InferLossScaleUpdate)
                 .NotDifferentiable()
                 .Build());
}

}  // namespace ottr::ir
