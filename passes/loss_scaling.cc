#include "passes/loss_scaling.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"

namespace ottr::passes {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Node;
using ir::Value;

bool IsFloatScalar(const Value* v) {
  const ir::TensorType& t = v->type();
  return ir::IsFloat(t.dtype) && t.is_static() && ir::NumElements(ir::StaticDims(*t.shape)) == 1;
}

absl::StatusOr<Node*> AddNode(ir::Graph& g, ir::NodeSpec spec) {
  OTTR_ASSIGN_OR_RETURN(Node * n, g.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *n));
  return n;
}

// Makes `to` the value of every state update and graph output that reads `from`, leaving the
// nodes that read `from` as they are.
void RedirectRoots(ir::Graph& g, Value* from, Value* to) {
  const std::vector<ir::Use> uses = from->uses();
  g.ReplaceAllUsesWith(from, to);
  for (const ir::Use& u : uses) g.SetNodeInput(u.node, u.index, from);  // (`to`'s producer among them)
}

class ScaleLossPass : public Pass {
 public:
  explicit ScaleLossPass(LossScaleSpec spec) : spec_(spec) {}
  absl::string_view name() const override { return "scale-loss"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    if (g.FindValue(kLossScaleState) != nullptr) return false;
    Value* loss = g.FindValue(kLossOutput);
    if (loss == nullptr || !IsFloatScalar(loss)) {
      return absl::FailedPreconditionError("scale-loss: the step has no float scalar 'loss' (run append-loss first)");
    }
    if (!(spec_.init_scale > 0.0f) || !std::isfinite(spec_.init_scale)) {
      return absl::InvalidArgumentError(absl::StrCat("the loss scale must be positive and finite, got ", spec_.init_scale));
    }
    ir::Tensor scale(loss->type().dtype, ir::StaticDims(*loss->type().shape));
    ir::VisitDType(scale.dtype(), [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) scale.data<T>()[0] = ir::FromDouble<T>(spec_.init_scale);
    });
    if (!std::isfinite(scale.GetAsDouble(0))) {
      return absl::InvalidArgumentError(absl::StrCat("the loss scale ", spec_.init_scale, " overflows the loss's type ",
                                                     ir::DTypeName(scale.dtype())));
    }
    OTTR_RETURN_IF_ERROR(g.AddInitializer(kLossScaleState, std::move(scale)).status());
    return true;
  }

 private:
  LossScaleSpec spec_;
};

// unscale-gradients, and (unscale = false) the nan-guard: the same check, guard and step hold
// without the scale.
class GuardUpdatesPass : public Pass {
 public:
  GuardUpdatesPass(LossScaleSpec spec, bool unscale) : spec_(spec), unscale_(unscale) {}
  absl::string_view name() const override { return unscale_ ? "unscale-gradients" : "nan-guard"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    static constexpr char kFinite[] = "ottr.grads_finite";
    if (g.FindValue(kFinite) != nullptr) return false;
    Value* scale = unscale_ ? g.FindValue(kLossScaleState) : nullptr;
    Value* loss = g.FindValue(kLossOutput);
    if (unscale_ && (scale == nullptr || !scale->is_initializer())) {
      return absl::FailedPreconditionError("unscale-gradients: no %ottr.loss_scale (run scale-loss before autodiff)");
    }
    if (loss == nullptr || !IsFloatScalar(loss)) {
      return absl::FailedPreconditionError(absl::StrCat(name(), ": the step has no float scalar 'loss'"));
    }
    std::vector<Node*> updates;
    for (Node* n : g.nodes()) {
      if (n->domain() != ir::kOttrDomain) continue;
      const std::string& op = n->op_type();
      if (op == "AdamUpdate" || op == "SGDUpdate") {
        return absl::FailedPreconditionError(absl::StrCat(
            name(), ": ", n->Describe(), " is a single-tensor update (group the updates first)"));
      }
      if (op == "AdamUpdateN" || op == "SGDUpdateN") updates.push_back(n);
    }
    if (updates.empty()) return false;
    const std::string origin(name());
    // Every gradient the updates read, the loss, and any float guard already there.
    std::vector<Value*> checked;
    auto check = [&](Value* v) {
      for (Value* c : checked) {
        if (c == v) return;
      }
      checked.push_back(v);
    };
    for (Node* n : updates) {
      const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*n);
      if (!l.valid || l.grad_scale >= 0) {
        return absl::FailedPreconditionError(absl::StrCat(name(), ": ", n->Describe(),
                                                          " has an unexpected arity or is already unscaled"));
      }
      for (int k = 0; k < l.n; ++k) check(n->input(2 + l.n + k));
      if (l.guard >= 0) {
        Value* guard = n->input(l.guard);
        if (!ir::IsFloat(guard->type().dtype)) {
          return absl::FailedPreconditionError(absl::StrCat(name(), ": ", n->Describe(), " has a bool guard"));
        }
        check(guard);
      }
    }
    check(loss);
    OTTR_ASSIGN_OR_RETURN(Node * all_finite, AddNode(g, {"AllFinite", std::string(ir::kOttrDomain), checked,
                                                         {kFinite}, {}, origin}));
    Value* ok = all_finite->output(0);
    for (Node* n : updates) {
      const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*n);
      if (l.guard >= 0 && unscale_) {
        g.SetNodeInput(n, l.guard, scale);  // (.., grad_scale, guard): the scale takes the guard's slot
        g.AppendNodeInput(n, ok);
      } else if (l.guard >= 0) {
        g.SetNodeInput(n, l.guard, ok);
      } else {
        if (unscale_) g.AppendNodeInput(n, scale);
        g.AppendNodeInput(n, ok);
      }
      if (unscale_) n->set_attr("unscale", Attribute(int64_t{1}));
      n->set_attr("guarded", Attribute(int64_t{1}));
      OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *n));
    }
    // Clipping measured the scaled gradients: its coefficient reads the true norm.
    if (Value* norm = g.FindValue("ottr.grad_norm"); unscale_ && norm != nullptr && norm->producer() != nullptr) {
      if (norm->type().dtype != scale->type().dtype) {
        return absl::UnimplementedError(absl::StrCat("unscale-gradients: gradient clipping of ",
                                                     ir::DTypeName(norm->type().dtype), " gradients with a ",
                                                     ir::DTypeName(scale->type().dtype), " loss scale"));
      }
      const std::vector<ir::Use> uses = norm->uses();
      OTTR_ASSIGN_OR_RETURN(Node * div, AddNode(g, {"Div", "", {norm, scale}, {g.UniqueName("ottr.grad_norm.unscaled")},
                                                    {}, origin}));
      for (const ir::Use& u : uses) g.SetNodeInput(u.node, u.index, div->output(0));
    }
    // The step counter holds on a skipped step.
    for (const ir::StateUpdate& u : std::vector<ir::StateUpdate>(g.updates())) {
      if (u.target->name() != kStepState) continue;
      OTTR_ASSIGN_OR_RETURN(Node * where, AddNode(g, {"Where", "", {ok, u.value, u.target},
                                                      {g.UniqueName(unscale_ ? "ottr.step.unscaled" : "ottr.step.guarded")},
                                                      {}, origin}));
      RedirectRoots(g, u.value, where->output(0));
    }
    if (unscale_ && spec_.kind == LossScaleSpec::Kind::kDynamic) {
      if (spec_.growth_interval < 1 || !(spec_.growth_factor >= 1.0f) || !(spec_.backoff_factor > 0.0f) ||
          !(spec_.backoff_factor < 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dynamic loss scaling needs growth_interval >= 1, growth_factor >= 1 and backoff_factor in (0, 1); got ",
            spec_.growth_interval, ", ", spec_.growth_factor, ", ", spec_.backoff_factor));
      }
      Value* good = g.FindValue(kGoodStepsState);
      if (good == nullptr) {
        OTTR_ASSIGN_OR_RETURN(good, g.AddInitializer(kGoodStepsState, ir::Tensor::Scalar<int64_t>(0)));
      }
      OTTR_ASSIGN_OR_RETURN(
          Node * su,
          AddNode(g, {"LossScaleUpdate", std::string(ir::kOttrDomain), {scale, good, ok},
                      {g.UniqueName(absl::StrCat(kLossScaleState, ".new")),
                       g.UniqueName(absl::StrCat(kGoodStepsState, ".new"))},
                      {{"growth_factor", Attribute(spec_.growth_factor)},
                       {"backoff_factor", Attribute(spec_.backoff_factor)},
                       {"growth_interval", Attribute(spec_.growth_interval)}},
                      origin}));
      OTTR_RETURN_IF_ERROR(g.AddUpdate(scale, su->output(0)));
      OTTR_RETURN_IF_ERROR(g.AddUpdate(good, su->output(1)));
    }
    if (remarks() != nullptr) {
      *remarks() << "// " << name() << ": " << updates.size() << " update node(s)"
                 << (unscale_ ? absl::StrCat(" unscale by %", kLossScaleState, " and") : "") << " skip unless "
                 << checked.size() << " value(s) are finite"
                 << (!unscale_ ? "" : spec_.kind == LossScaleSpec::Kind::kDynamic ? "; dynamic scale" : "; static scale")
                 << "\n";
    }
    return true;
  }

 private:
  LossScaleSpec spec_;
  bool unscale_;
};

}  // namespace

std::unique_ptr<Pass> CreateScaleLossPass(const LossScaleSpec& spec) { return std::make_unique<ScaleLossPass>(spec); }
std::unique_ptr<Pass> CreateUnscaleGradientsPass(const LossScaleSpec& spec) {
  return std::make_unique<GuardUpdatesPass>(spec, /*unscale=*/true);
}
std::unique_ptr<Pass> CreateNanGuardPass() { return std::make_unique<GuardUpdatesPass>(LossScaleSpec{}, false); }

}  // namespace ottr::passes
