#include "passes/training.h"

#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/autodiff.h"
#include "passes/fusion_passes.h"
#include "passes/loss_scaling.h"
#include "passes/layout.h"
#include "passes/mixed_precision.h"
#include "passes/standard_passes.h"

namespace ottr::passes {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using ir::Value;

// Adds a node and infers its output types; the node's origin names the pass.
absl::StatusOr<ir::Node*> Add(ir::Graph& g, ir::NodeSpec spec) {
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *n));
  return n;
}

absl::StatusOr<Value*> Add1(ir::Graph& g, const std::string& op, std::vector<Value*> inputs,
                            const std::string& name, const std::string& origin,
                            std::map<std::string, Attribute> attrs = {},
                            const std::string& domain = "") {
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, Add(g, {op, domain, std::move(inputs), {g.UniqueName(name)},
                                              std::move(attrs), origin}));
  return n->output(0);
}

absl::StatusOr<Value*> ConstantNode(ir::Graph& g, Tensor t, const std::string& name,
                                    const std::string& origin) {
  return Add1(g, "Constant", {}, name, origin, {{"value", Attribute(std::move(t))}});
}

// --- append-loss ---------------------------------------------------------------------------------

// Before:  output %logits : f32[128,10]
// After:   input %labels : i64[128]
//          %loss : f32[], %logits.log_prob = ottr::SoftmaxCrossEntropy(%logits, %labels)
//          output %loss
class AppendLossPass : public Pass {
 public:
  explicit AppendLossPass(LossSpec spec) : spec_(std::move(spec)) {}
  absl::string_view name() const override { return "append-loss"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    if (g.FindValue(kLossOutput) != nullptr && g.outputs().size() == 1 &&
        g.outputs()[0]->name() == kLossOutput && g.FindValue(kLrInput) != nullptr) {
      return false;  // already a training step
    }
    Value* out = nullptr;
    if (spec_.output.empty()) {
      if (g.outputs().size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the model has ", g.outputs().size(),
            " outputs: name the one the loss uses with --logits (or --loss-output)"));
      }
      out = g.outputs()[0];
    } else {
      for (Value* o : g.outputs()) {
        if (o->name() == spec_.output) out = o;
      }
      if (out == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("the model has no output named '",
                                                       spec_.output, "'"));
      }
    }
    const ir::TensorType& t = out->type();
    if (!ir::IsFloat(t.dtype) || !t.is_static()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", out->name(), "' is ", t.ToString(),
                                                     ": the loss needs a float output of static "
                                                     "shape (bind the batch with --batch)"));
    }
    Value* loss = nullptr;
    const std::string origin = "loss";
    switch (spec_.kind) {
      case LossSpec::Kind::kModelOutput: {
        if (ir::NumElements(ir::StaticDims(*t.shape)) != 1) {
          return absl::InvalidArgumentError(absl::StrCat("--loss-output '", out->name(), "' is ",
                                                         t.ToString(), ", not a scalar"));
        }
        OTTR_ASSIGN_OR_RETURN(Value * shape, ConstantNode(g, Tensor::FromVector<int64_t>({0}, {}),
                                                          "loss.shape", origin));
        OTTR_ASSIGN_OR_RETURN(loss, Add1(g, "Reshape", {out, shape}, kLossOutput, origin));
        break;
      }
      case LossSpec::Kind::kSoftmaxCrossEntropy: {
        if (t.rank() != 2) {
          return absl::InvalidArgumentError(absl::StrCat(
              "softmax cross-entropy needs logits [N, C]; output '", out->name(), "' is ",
              t.ToString()));
        }
        OTTR_ASSIGN_OR_RETURN(Value * labels,
                              g.AddInput(kLabelsInput, ir::TensorType(DType::kInt64,
                                                                      ir::Shape{(*t.shape)[0]})));
        OTTR_ASSIGN_OR_RETURN(
            ir::Node * n,
            Add(g, {"SoftmaxCrossEntropy", std::string(ir::kOttrDomain), {out, labels},
                    {kLossOutput, g.UniqueName(out->name() + ".log_prob")},
                    {{"ignore_index", Attribute(spec_.ignore_index)},
                     {"label_smoothing", Attribute(spec_.label_smoothing)}},
                    origin}));
        loss = n->output(0);
        break;
      }
      case LossSpec::Kind::kMse: {
        OTTR_ASSIGN_OR_RETURN(Value * labels, g.AddInput(kLabelsInput, t));
        OTTR_ASSIGN_OR_RETURN(Value * diff, Add1(g, "Sub", {out, labels}, "loss.diff", origin));
        OTTR_ASSIGN_OR_RETURN(Value * sq, Add1(g, "Mul", {diff, diff}, "loss.sq", origin));
        OTTR_ASSIGN_OR_RETURN(loss, Add1(g, "ReduceMean", {sq}, kLossOutput, origin,
                                         {{"keepdims", Attribute(int64_t{0})}}));
        break;
      }
    }
    g.ClearOutputs();  // the step's only output is the loss
    g.AddOutput(loss);
    return true;
  }

 private:
  LossSpec spec_;
};

// --- autodiff --------------------------------------------------------------------------------------

// Before:  ... output %loss
// After:   ... gradient nodes; "%<param>.grad" for each trainable parameter the loss depends on.
class AutodiffPass : public Pass {
 public:
  AutodiffPass(std::string freeze, bool expose) : freeze_(std::move(freeze)), expose_(expose) {}
  absl::string_view name() const override { return "autodiff"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    Value* loss = g.FindValue(kLossOutput);
    if (loss == nullptr) return absl::FailedPreconditionError("no 'loss' value: run append-loss first");
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> params, TrainableParameters(g, freeze_));
    bool already = false;
    for (Value* p : params) already |= g.FindValue(GradName(p->name())) != nullptr;
    if (already) return false;
    // With loss scaling (scale-loss ran) the loss's gradient is the scale, not 1.
    Value* seed = g.FindValue(kLossScaleState);
    if (seed != nullptr && (!seed->is_initializer() || seed->type() != loss->type())) seed = nullptr;
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> grads, BuildGradients(g, loss, params, seed));
    for (size_t i = 0; i < params.size(); ++i) {
      Value* grad = grads[i];
      if (grad == nullptr) continue;  // the loss does not depend on it: not trained (PyTorch: None)
      const std::string name = GradName(params[i]->name());
      const bool fresh = grad->producer() != nullptr &&
                         absl::StrContains(grad->producer()->origin(), "/grad") &&
                         !absl::EndsWith(grad->name(), ".grad") && !g.IsRoot(grad);
      if (fresh) {
        g.RenameValue(grad, name);
      } else {
        OTTR_ASSIGN_OR_RETURN(grad, Add1(g, "Identity", {grad}, name, "autodiff"));
      }
      if (expose_) g.AddOutput(grad);
    }
    return true;
  }

 private:
  std::string freeze_;
  bool expose_;
};

// --- clip-gradients --------------------------------------------------------------------------------

// torch.nn.utils.clip_grad_norm_: total = sqrt(Σ_p ||g_p||²); coef = min(1, max / (total + 1e-6));
// every gradient is multiplied by coef.
class ClipGradientsPass : public Pass {
 public:
  ClipGradientsPass(float max_norm, std::string freeze) : max_norm_(max_norm), freeze_(std::move(freeze)) {}
  absl::string_view name() const override { return "clip-gradients"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    if (g.FindValue("ottr.grad_norm") != nullptr) return false;
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> params, TrainableParameters(g, freeze_));
    std::vector<Value*> grads;
    for (Value* p : params) {
      if (Value* gr = g.FindValue(GradName(p->name()))) grads.push_back(gr);
    }
    if (grads.empty()) return false;
    const std::string origin = "clip-gradients";
    const DType t = grads[0]->type().dtype;
    std::vector<Value*> squares;
    for (Value* gr : grads) {
      OTTR_ASSIGN_OR_RETURN(Value * sq, Add1(g, "ReduceSumSquare", {gr}, gr->name() + ".sumsq",
                                             origin, {{"keepdims", Attribute(int64_t{0})}}));
      squares.push_back(sq);
    }
    OTTR_ASSIGN_OR_RETURN(Value * total, Add1(g, "Sum", squares, "ottr.grad_sumsq", origin));
    OTTR_ASSIGN_OR_RETURN(Value * norm, Add1(g, "Sqrt", {total}, "ottr.grad_norm", origin));
    OTTR_ASSIGN_OR_RETURN(Value * tiny, ConstantNode(g, ScalarOf(t, 1e-6), "clip.eps", origin));
    OTTR_ASSIGN_OR_RETURN(Value * maxn, ConstantNode(g, ScalarOf(t, max_norm_), "clip.max", origin));
    OTTR_ASSIGN_OR_RETURN(Value * one, ConstantNode(g, ScalarOf(t, 1.0), "clip.one", origin));
    OTTR_ASSIGN_OR_RETURN(Value * denom, Add1(g, "Add", {norm, tiny}, "clip.denom", origin));
    OTTR_ASSIGN_OR_RETURN(Value * coef, Add1(g, "Div", {maxn, denom}, "clip.coef", origin));
    OTTR_ASSIGN_OR_RETURN(Value * clamped, Add1(g, "Min", {coef, one}, "clip.coef_clamped", origin));
    for (Value* gr : grads) {
      const std::string name = gr->name();
      g.RenameValue(gr, g.UniqueName(name + ".unclipped"));
      OTTR_ASSIGN_OR_RETURN(Value * scaled, Add1(g, "Mul", {gr, clamped}, name, origin));
      // A graph output showing the gradient now shows the clipped one.
      for (size_t k = 0; k < g.outputs().size(); ++k) {
        if (g.outputs()[k] == gr) g.SetOutput(static_cast<int>(k), scaled);
      }
    }
    return true;
  }

 private:
  static Tensor ScalarOf(DType t, double v) {
    Tensor s(t, {});
    ir::VisitDType(t, [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) s.data<T>()[0] = ir::FromDouble<T>(v);
    });
    return s;
  }
  float max_norm_;
  std::string freeze_;
};

// --- optimizer ---------------------------------------------------------------------------------------

// Before:  %w.grad = ...
// After:   input %ottr.lr : f32[]   init %ottr.step : i64[] = [0]   %step1 = Add(%ottr.step, 1)
//          %w.new, %w.m.new, %w.v.new = ottr::AdamUpdate(%w, %w.grad, %ottr.lr, %step1, %w.m, %w.v)
//          update %w <- %w.new ...   update %ottr.step <- %step1
class OptimizerPass : public Pass {
 public:
  OptimizerPass(OptimizerSpec spec, std::string freeze) : spec_(spec), freeze_(std::move(freeze)) {}
  absl::string_view name() const override { return "optimizer"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    if (g.FindValue(kLrInput) != nullptr) return false;
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> params, TrainableParameters(g, freeze_));
    const std::string origin = "optimizer";
    OTTR_ASSIGN_OR_RETURN(Value * lr, g.AddInput(kLrInput, ir::TensorType(DType::kFloat32, ir::Shape{})));
    OTTR_ASSIGN_OR_RETURN(Value * step, g.AddInitializer(kStepState, Tensor::Scalar<int64_t>(0)));
    OTTR_ASSIGN_OR_RETURN(Value * one, ConstantNode(g, Tensor::Scalar<int64_t>(1), "ottr.one", origin));
    OTTR_ASSIGN_OR_RETURN(Value * step1, Add1(g, "Add", {step, one}, "ottr.step.new", origin));
    OTTR_RETURN_IF_ERROR(g.AddUpdate(step, step1));
    for (Value* p : params) {
      Value* grad = g.FindValue(GradName(p->name()));
      if (grad == nullptr) continue;
      const Tensor zeros(p->type().dtype, ir::StaticDims(*p->type().shape));
      const std::string& pn = p->name();
      if (spec_.kind == OptimizerSpec::Kind::kSgd) {
        std::vector<Value*> ins = {p, grad, lr, step1};
        std::vector<std::string> outs = {g.UniqueName(pn + ".new")};
        Value* buf = nullptr;
        if (spec_.momentum != 0.0f) {
          OTTR_ASSIGN_OR_RETURN(buf, g.AddInitializer(g.UniqueName(pn + ".momentum_buffer"), zeros.Clone()));
          ins.push_back(buf);
          outs.push_back(g.UniqueName(buf->name() + ".new"));
        }
        OTTR_ASSIGN_OR_RETURN(
            ir::Node * n,
            Add(g, {"SGDUpdate", std::string(ir::kOttrDomain), ins, outs,
                    {{"momentum", Attribute(spec_.momentum)},
                     {"dampening", Attribute(spec_.dampening)},
                     {"nesterov", Attribute(int64_t{spec_.nesterov ? 1 : 0})},
                     {"weight_decay", Attribute(spec_.weight_decay)}},
                    origin + "/" + pn}));
        OTTR_RETURN_IF_ERROR(g.AddUpdate(p, n->output(0)));
        if (buf != nullptr) OTTR_RETURN_IF_ERROR(g.AddUpdate(buf, n->output(1)));
      } else {
        OTTR_ASSIGN_OR_RETURN(Value * m, g.AddInitializer(g.UniqueName(pn + ".m"), zeros.Clone()));
        OTTR_ASSIGN_OR_RETURN(Value * v, g.AddInitializer(g.UniqueName(pn + ".v"), zeros.Clone()));
        OTTR_ASSIGN_OR_RETURN(
            ir::Node * n,
            Add(g, {"AdamUpdate", std::string(ir::kOttrDomain), {p, grad, lr, step1, m, v},
                    {g.UniqueName(pn + ".new"), g.UniqueName(m->name() + ".new"),
                     g.UniqueName(v->name() + ".new")},
                    {{"beta1", Attribute(spec_.beta1)},
                     {"beta2", Attribute(spec_.beta2)},
                     {"epsilon", Attribute(spec_.epsilon)},
                     {"weight_decay", Attribute(spec_.weight_decay)},
                     {"decoupled", Attribute(int64_t{spec_.kind == OptimizerSpec::Kind::kAdamW})}},
                    origin + "/" + pn}));
        OTTR_RETURN_IF_ERROR(g.AddUpdate(p, n->output(0)));
        OTTR_RETURN_IF_ERROR(g.AddUpdate(m, n->output(1)));
        OTTR_RETURN_IF_ERROR(g.AddUpdate(v, n->output(2)));
      }
    }
    return true;
  }

 private:
  OptimizerSpec spec_;
  std::string freeze_;
};

// --- batchnorm-statistics --------------------------------------------------------------------------

// Training-mode BatchNormalization also computes the updated running statistics (outputs 1, 2);
// they become state updates of the initializers they were computed from, so the trained model
// carries them (as torch.nn.BatchNorm's buffers).
//   before:  %y, %rm, %rv = BatchNormalization(%x, %s, %b, %bn.running_mean, %bn.running_var) {training_mode = 1}
//   after:   ... update %bn.running_mean <- %rm   update %bn.running_var <- %rv
class BatchNormStatisticsPass : public Pass {
 public:
  absl::string_view name() const override { return "batchnorm-statistics"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    bool changed = false;
    for (ir::Node* n : g.nodes()) {
      if (!n->domain().empty() || n->op_type() != "BatchNormalization" ||
          n->GetInt("training_mode", 0) == 0) {
        continue;
      }
      for (int k : {1, 2}) {
        Value* stat = n->input(2 + k);
        Value* updated = n->output(k);
        if (stat == nullptr || updated == nullptr || !stat->is_initializer()) continue;
        bool already = false;
        for (const ir::StateUpdate& u : g.updates()) already |= u.target == stat;
        if (already || updated->type() != stat->type()) continue;
        OTTR_RETURN_IF_ERROR(g.AddUpdate(stat, updated));
        changed = true;
      }
    }
    return changed;
  }
};

std::unique_ptr<Pass> Simplify() {
  std::vector<std::unique_ptr<Pass>> inner;
  inner.push_back(CreateConstantFoldingPass());
  inner.push_back(CreateCsePass());
  inner.push_back(CreateDcePass());
  return std::make_unique<FixedPointPass>("simplify", std::move(inner));
}

}  // namespace

std::string GradName(const std::string& param) { return param + ".grad"; }

LossScaleSpec::Kind EffectiveLossScale(const TrainingSpec& spec) {
  if (spec.loss_scale.kind != LossScaleSpec::Kind::kAuto) return spec.loss_scale.kind;
  return spec.precision == Precision::kFp16 ? LossScaleSpec::Kind::kDynamic : LossScaleSpec::Kind::kNone;
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

absl::StatusOr<std::vector<Value*>> TrainableParameters(const ir::Graph& g,
                                                        const std::string& freeze) {
  std::optional<std::regex> re;
  if (!freeze.empty()) {
    try {
      re.emplace(freeze);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("bad --freeze regex '", freeze, "': ", e.what()));
    }
  }
  std::vector<Value*> out;
  for (Value* v : g.initializers()) {
    if (!ir::IsFloat(v->type().dtype)) continue;
    if (v->name() == kStepState || v->name() == kLossScaleState) continue;
    if (re && std::regex_search(v->name(), *re)) continue;
    // Optimizer state (an optimizer update's input past param, grad) is not a parameter.
    bool is_state = false;
    for (const ir::Use& u : v->uses()) {
      if (u.node->domain() != ir::kOttrDomain) continue;
      const std::string& op = u.node->op_type();
      if (op == "AdamUpdate" || op == "SGDUpdate") is_state |= u.index >= 2;
      // N-ary forms: (lr, step, params.., grads.., states.., [grad_scale], [guard]).
      if (op == "AdamUpdateN" || op == "SGDUpdateN") is_state |= u.index >= 2 + 2 * ir::UpdateNLayoutOf(*u.node).n;
      // GemmAdamUpdate (lr, step, A, B, p.., m.., v..), MlpStep (lr, step, x, labels, p.., m.., v..).
      if (op == "GemmAdamUpdate" || op == "MlpStep") is_state |= u.index >= 4 + (u.node->num_inputs() - 4) / 3;
    }
    if (is_state) continue;
    // BatchNormalization's running statistics (inputs 3 and 4) are state, not parameters.
    bool only_statistics = !v->uses().empty();
    for (const ir::Use& u : v->uses()) {
      only_statistics &= u.node->domain().empty() && u.node->op_type() == "BatchNormalization" &&
                         u.index >= 3;
    }
    if (only_statistics) continue;
    out.push_back(v);
  }
  return out;
}

// Groups the per-parameter optimizer updates that share op, attributes, element type, learning
// rate and step into one N-ary node (ottr::AdamUpdateN / SGDUpdateN), so an executor updates
// every parameter with one multi-tensor launch:
//   %a.new, %a.m.new, %a.v.new = ottr::AdamUpdate(%a, %a.grad, %lr, %s, %a.m, %a.v)
//   %b.new, %b.m.new, %b.v.new = ottr::AdamUpdate(%b, %b.grad, %lr, %s, %b.m, %b.v)
// becomes
//   %a.new, %b.new, %a.m.new, %b.m.new, %a.v.new, %b.v.new =
//       ottr::AdamUpdateN(%lr, %s, %a, %b, %a.grad, %b.grad, %a.m, %b.m, %a.v, %b.v)
// The values keep their names, so state updates and reports read as before. The cost: every
// gradient stays live until the one update (PyTorch's foreach/fused optimizers make the same
// trade).
// `min_group` = 1 makes even a lone update N-ary (loss scaling unscales in the N-ary form only).
class GroupOptimizerUpdatesPass : public Pass {
 public:
  explicit GroupOptimizerUpdatesPass(size_t min_group = 2) : min_group_(min_group) {}
  absl::string_view name() const override { return "group-optimizer-updates"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    std::map<std::string, std::vector<ir::Node*>> groups;
    std::vector<std::string> order;
    for (ir::Node* n : g.nodes()) {
      if (n->domain() != ir::kOttrDomain) continue;
      const bool adam = n->op_type() == "AdamUpdate";
      if (!adam && n->op_type() != "SGDUpdate") continue;
      std::string key = absl::StrCat(n->op_type(), "|", n->input(2)->name(), "|", n->input(3)->name(), "|",
                                     ir::DTypeName(n->input(0)->type().dtype), "|",
                                     adam ? 1 : n->num_outputs());
      for (const auto& [attr, a] : n->attrs()) {
        if (a.kind() == Attribute::Kind::kFloat) {
          absl::StrAppend(&key, "|", attr, "=", a.f());
        } else if (a.kind() == Attribute::Kind::kInt) {
          absl::StrAppend(&key, "|", attr, "=", a.i());
        } else {
          key = "";  // attributes the optimizer ops do not have: leave the node alone
          break;
        }
      }
      if (key.empty()) continue;
      if (!groups.contains(key)) order.push_back(key);
      groups[key].push_back(n);
    }
    bool changed = false;
    for (const std::string& key : order) {
      const std::vector<ir::Node*>& nodes = groups[key];
      if (nodes.size() < min_group_) continue;
      const int n = static_cast<int>(nodes.size());
      const int outs = nodes[0]->num_outputs();  // per tensor: param (+ states)
      const int states = outs - 1;
      std::vector<Value*> inputs = {nodes[0]->input(2), nodes[0]->input(3)};
      for (ir::Node* u : nodes) inputs.push_back(u->input(0));
      for (ir::Node* u : nodes) inputs.push_back(u->input(1));
      // State inputs: AdamUpdate's 4 and 5, SGDUpdate's 4.
      for (int s = 0; s < states; ++s) {
        for (ir::Node* u : nodes) inputs.push_back(u->input(4 + s));
      }
      std::vector<std::string> names;
      for (int o = 0; o < outs; ++o) {
        for (ir::Node* u : nodes) names.push_back(g.UniqueName(u->output(o)->name() + ".grouped"));
      }
      const std::string op = nodes[0]->op_type() + "N";
      OTTR_ASSIGN_OR_RETURN(ir::Node * grouped,
                            Add(g, {op, std::string(ir::kOttrDomain), inputs, names, nodes[0]->attrs(),
                                    "group-optimizer-updates"}));
      std::vector<std::pair<Value*, std::string>> renames;
      for (int o = 0; o < outs; ++o) {
        for (int k = 0; k < n; ++k) {
          Value* old = nodes[k]->output(o);
          Value* now = grouped->output(o * n + k);
          g.ReplaceAllUsesWith(old, now);
          renames.emplace_back(now, old->name());
        }
      }
      for (ir::Node* u : nodes) OTTR_RETURN_IF_ERROR(g.EraseNode(u));
      for (auto& [v, name] : renames) g.RenameValue(v, name);
      changed = true;
    }
    return changed;
  }

 private:
  size_t min_group_;
};

absl::Status AddTrainingPasses(PassManager& pm, const TrainingSpec& spec) {
  pm.Add(CreateInferShapesPass(spec.batch, spec.dims));
  pm.Add(Simplify());
  if (spec.precision == Precision::kBf16 || spec.precision == Precision::kFp16) {
    pm.Add(CreateMixedPrecisionPass(
        spec.precision == Precision::kBf16 ? DType::kBFloat16 : DType::kFloat16, spec.keep_fp32));
    if (spec.pad_gemm_dims) pm.Add(CreatePadGemmDimsPass(spec.pad_gemm_min_macs, spec.pad_gemm_min_rows));
  } else if (spec.precision == Precision::kTf32 && spec.pad_gemm_dims && spec.pad_tf32_gemms) {
    pm.Add(CreatePadGemmDimsPass(spec.pad_gemm_min_macs, spec.pad_gemm_min_rows, /*float32=*/true));
  }
  pm.Add(std::make_unique<AppendLossPass>(spec.loss));
  const LossScaleSpec::Kind scaling = EffectiveLossScale(spec);
  LossScaleSpec loss_scale = spec.loss_scale;
  loss_scale.kind = scaling;
  if (scaling != LossScaleSpec::Kind::kNone) pm.Add(CreateScaleLossPass(loss_scale));
  pm.Add(std::make_unique<AutodiffPass>(spec.freeze, spec.expose_gradients));
  if (spec.optimizer.max_grad_norm > 0) {
    pm.Add(std::make_unique<ClipGradientsPass>(spec.optimizer.max_grad_norm, spec.freeze));
  }
  pm.Add(std::make_unique<OptimizerPass>(spec.optimizer, spec.freeze));
  pm.Add(std::make_unique<BatchNormStatisticsPass>());
  pm.Add(Simplify());
  if (spec.narrow_exact_ops && (spec.precision == Precision::kBf16 || spec.precision == Precision::kFp16)) {
    pm.Add(CreateNarrowExactOpsPass());
  }
  if (scaling != LossScaleSpec::Kind::kNone) {
    // The loss scaling's finiteness check also covers the loss: the nan-guard is implied.
    pm.Add(std::make_unique<GroupOptimizerUpdatesPass>(1));
    pm.Add(CreateUnscaleGradientsPass(loss_scale));
  } else {
    if (spec.multi_tensor_updates) pm.Add(std::make_unique<GroupOptimizerUpdatesPass>());
    if (spec.multi_tensor_updates && spec.nan_guard) pm.Add(CreateNanGuardPass());
  }
  // The whole step of a small MLP in one node, before the other fusions (which then find none of
  // it left); it declines guarded updates itself.
  if (spec.fuse_mlp_step && spec.fuse_epilogues && spec.multi_tensor_updates && spec.precision == Precision::kTf32 &&
      scaling == LossScaleSpec::Kind::kNone && spec.optimizer.max_grad_norm <= 0 && !spec.expose_gradients) {
    pm.Add(CreateFuseMlpStepPass());
  }
  if (spec.fuse_epilogues) {
    pm.Add(CreateFuseSceGradPass());
    pm.Add(CreateFoldGemmCastsPass());
    pm.Add(CreateFuseGemmEpiloguePass(spec.large_relu_epilogue, spec.large_relu_epilogue_tf32));
    pm.Add(CreateFuseGemmDActBgradPass(spec.precision == Precision::kTf32 && spec.tf32_bgrad_in_weight_gemm));
    const bool low = spec.precision == Precision::kBf16 || spec.precision == Precision::kFp16;
    if (spec.fuse_relu_grad_bgrad.value_or(low || spec.precision == Precision::kTf32)) {
      pm.Add(CreateFuseReluGradBgradPass());
    }
    pm.Add(CreateFuseGemmBgradPass());
    pm.Add(CreateFuseSceBgradPass());
    pm.Add(CreateFuseLinearScePass());
    pm.Add(CreateCountLabelsEarlyPass());
    pm.Add(CreateFuseLinearReluGradPass());
    if (spec.precision == Precision::kTf32) pm.Add(CreateFuseLinearSceReluGradPass());
  }
  if (spec.channels_last) pm.Add(CreateNhwcLayoutPass());
  if (spec.kmajor_gemm_operands && spec.precision == Precision::kTf32) pm.Add(CreateKMajorGemmOperandsPass());
  if (spec.fuse_epilogues) {
    pm.Add(CreateFuseConvActivationPass());
    pm.Add(CreateFuseMaxPoolReluGradPass());
  }
  // Last of the GEMM rewrites: it groups only what the epilogue passes left plain.
  if (spec.group_gemms) pm.Add(CreateGroupGemmsPass());
  // After the passes that decide which node makes each gradient; declines guarded updates.
  if (spec.fuse_gemm_adam && spec.fuse_epilogues && spec.multi_tensor_updates) pm.Add(CreateFuseGemmAdamPass());
  if (spec.multi_tensor_updates) pm.Add(CreateSplitOptimizerUpdatesPass());
  if (spec.optimizer_low_copies && (spec.precision == Precision::kBf16 || spec.precision == Precision::kFp16)) {
    pm.Add(CreateOptimizerLowCopiesPass());
  }
  return absl::OkStatus();
}

void UseCudaPipeline(TrainingSpec& spec) {
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.channels_last = true;
  spec.narrow_exact_ops = true;
  spec.kmajor_gemm_operands = true;
  spec.pad_tf32_gemms = true;
  spec.optimizer_low_copies = true;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> BuildTrainingGraph(const ir::Graph& forward,
                                                              const TrainingSpec& spec,
                                                              PassManagerOptions options) {
  std::unique_ptr<ir::Graph> g = forward.Clone();
  options.disabled.insert(spec.disabled_passes.begin(), spec.disabled_passes.end());
  PassManager pm(std::move(options));
  OTTR_RETURN_IF_ERROR(AddTrainingPasses(pm, spec));
  OTTR_RETURN_IF_ERROR(pm.Run(*g).status());
  return g;
}

}  // namespace ottr::passes
