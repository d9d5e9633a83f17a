// "optimizer-low-copies": with mixed precision every step casts each float32 master weight to the
// 16-bit type before its first GEMM or convolution (mixed_precision.h), a kernel per parameter
// that reads 4 and writes 2 bytes per element. The grouped optimizer update already reads and
// writes every parameter, so it writes the 16-bit copy the next step's forward reads:
//
//   before:  %w.bf16 : bf16[512,784] = Cast(%w) {to = 16} origin "fc1"
//            ... = Gemm(%x.bf16, %w.bf16, ...)
//            %w.new, ... = ottr::AdamUpdateN(%lr, %step, %w, ..., %w.grad, ..., %w.m, ..., %w.v, ...)
//            update %w <- %w.new
//   after:   init %w.bf16 : bf16[512,784] = Cast of w's initial value  (state)
//            ... = Gemm(%x.bf16, %w.bf16, ...)
//            %w.new, ..., %w.bf16.new = ottr::AdamUpdateN(...) {low_copies = ints[0], low_type = 16}
//            update %w <- %w.new
//            update %w.bf16 <- %w.bf16.new
//
// The copy is Cast(w) rounded the same way (round to nearest even) at the same point of the
// training, so every step computes the same bits as before. What changes is that the copy is
// state: whoever sets a parameter from outside the step (resume, an initialization graph) sets
// its copy too — tools/train_loop.cc refreshes the copies with RefreshLowPrecisionCopies.
// Takes the parameters of an ottr::AdamUpdateN / SGDUpdateN (group-optimizer-updates) that are
// float32 initializers read by Casts to one 16-bit type; runs last in the training pipeline when
// TrainingSpec::optimizer_low_copies is set.
#include "absl/strings/str_cat.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/fusion_util.h"
#include "passes/mixed_precision.h"
#include "runtime/cpu/elementwise_common.h"

namespace ottr::passes {
namespace {

using ir::DType;
using ir::Node;
using ir::Value;

constexpr char kName[] = "optimizer-low-copies";

struct Pick {
  int k = 0;
  std::vector<Node*> casts;
};

class OptimizerLowCopiesPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    bool changed = false;
    for (Node* u : fusion::GroupedUpdates(g)) {
      OTTR_ASSIGN_OR_RETURN(bool c, Rewrite(g, u));
      changed |= c;
    }
    return changed;
  }

 private:
  absl::StatusOr<bool> Rewrite(ir::Graph& g, Node* u) {
    const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*u);
    if (!l.valid || !l.low_copies.empty()) return false;
    DType low = DType::kUndefined;
    std::vector<Pick> picks;
    for (int k = 0; k < l.n; ++k) {
      Value* p = u->input(2 + k);
      if (!p->is_initializer() || p->type().dtype != DType::kFloat32) continue;
      Pick pick{k, {}};
      for (const ir::Use& use : p->uses()) {
        Node* c = use.node;
        if (!fusion::IsOnnx(c, "Cast")) continue;
        const DType t = c->output(0)->type().dtype;
        if (!fusion::IsLowFloat(t) || (low != DType::kUndefined && t != low)) continue;
        low = t;
        pick.casts.push_back(c);
      }
      if (!pick.casts.empty()) picks.push_back(std::move(pick));
    }
    if (picks.empty()) return false;
    ir::NodeSpec spec;
    spec.op_type = u->op_type();
    spec.domain = u->domain();
    spec.origin = u->origin();
    spec.attrs = u->attrs();
    spec.inputs.assign(u->inputs().begin(), u->inputs().end());
    std::vector<int64_t> low_copies;
    for (int i = 0; i < u->num_outputs(); ++i) spec.output_names.push_back(g.UniqueName(u->output(i)->name()));
    for (const Pick& p : picks) {
      low_copies.push_back(p.k);
      spec.output_names.push_back(g.UniqueName(p.casts[0]->output(0)->name() + ".new"));
    }
    spec.attrs["low_copies"] = ir::Attribute(low_copies);
    spec.attrs["low_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(low)));
    OTTR_ASSIGN_OR_RETURN(Node * r, fusion::AddInferred(g, std::move(spec)));
    fusion::Renames renames;
    std::vector<Node*> dead;
    const ir::UpdateNLayout rl = ir::UpdateNLayoutOf(*r);
    for (size_t j = 0; j < picks.size(); ++j) {
      Value* p = u->input(2 + picks[j].k);
      OTTR_ASSIGN_OR_RETURN(ir::Tensor data, runtime::cpu::ew::CastTensor(*p->initializer(), low));
      OTTR_ASSIGN_OR_RETURN(Value * state, g.AddInitializer(g.UniqueName(p->name() + ".low"), std::move(data)));
      for (Node* c : picks[j].casts) {
        if (c == picks[j].casts[0]) {
          renames.Replace(g, c->output(0), state);
        } else {
          g.ReplaceAllUsesWith(c->output(0), state);
        }
        dead.push_back(c);
      }
      OTTR_RETURN_IF_ERROR(g.AddUpdate(state, r->output(rl.first_low + static_cast<int>(j))));
      fusion::Remark(remarks(), kName,
                     absl::StrCat(u->Describe(), " writes the ", ir::DTypeName(low), " copy of ", p->name(),
                                  " (replaces ", picks[j].casts.size(), " Cast)"));
    }
    for (int i = 0; i < u->num_outputs(); ++i) renames.Replace(g, u->output(i), r->output(i));
    dead.push_back(u);
    OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
    renames.Apply(g);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateOptimizerLowCopiesPass() { return std::make_unique<OptimizerLowCopiesPass>(); }

absl::Status RefreshLowPrecisionCopies(const ir::Graph& step,
                                       const std::function<absl::StatusOr<ir::Tensor>(const std::string&)>& get,
                                       const std::function<absl::Status(const std::string&, const ir::Tensor&)>& set) {
  for (const LowPrecisionCopy& c : LowPrecisionCopies(step)) {
    OTTR_ASSIGN_OR_RETURN(ir::Tensor p, get(c.param));
    OTTR_ASSIGN_OR_RETURN(ir::Tensor data, runtime::cpu::ew::CastTensor(p, c.dtype));
    OTTR_RETURN_IF_ERROR(set(c.copy, data));
  }
  return absl::OkStatus();
}

std::vector<LowPrecisionCopy> LowPrecisionCopies(const ir::Graph& step) {
  std::vector<LowPrecisionCopy> out;
  for (const ir::Node* n : fusion::GroupedUpdates(step)) {
    const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*n);
    if (!l.valid) continue;
    for (size_t j = 0; j < l.low_copies.size(); ++j) {
      const Value* copy_new = n->output(l.first_low + static_cast<int>(j));
      for (const ir::StateUpdate& s : step.updates()) {
        if (s.value != copy_new) continue;
        out.push_back({n->input(2 + static_cast<int>(l.low_copies[j]))->name(), s.target->name(),
                       copy_new->type().dtype});
      }
    }
  }
  return out;
}

}  // namespace ottr::passes
