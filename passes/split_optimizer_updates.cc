// "split-optimizer-updates": the grouped optimizer update (group-optimizer-updates) waits for every
// gradient, so the whole multi-tensor launch sits at the end of the backward's critical path, after
// the first layer's weight gradient, which is made last. This pass takes the parameters whose
// gradients are made deepest in the step (the longest chain of nodes from the step's inputs) out
// into an update of their own; the other parameters' update then depends only on gradients made
// earlier and an executor with two streams runs it beside the last weight-gradient GEMMs:
//
//   before:  %w0.new, %w1.new, %w0.m.new, %w1.m.new, ... = ottr::AdamUpdateN(%lr, %s, %w0, %w1,
//                %w0.grad, %w1.grad, %w0.m, %w1.m, %w0.v, %w1.v)        (w0.grad made last)
//   after:   %w1.new, %w1.m.new, %w1.v.new = ottr::AdamUpdateN(%lr, %s, %w1, %w1.grad, %w1.m, %w1.v)
//            %w0.new, %w0.m.new, %w0.v.new = ottr::AdamUpdateN(%lr, %s, %w0, %w0.grad, %w0.m, %w0.v)
//
// Every element is updated by the same arithmetic as before (the updates are elementwise), so
// the step's numbers do not change; the values keep their names. The cost is one more launch.
//
// Declines an update whose deepest gradients' parameters hold less than a fifth of its elements
// (kMinTailShare: the rest would still wait for the gradients made just before the last) and a
// guarded update (nan-guard, loss scaling): the guard is the finiteness of every
// gradient, so both halves would wait for the last one anyway, and a half may not go ahead
// alone (a skipped step leaves every parameter as it was). Runs after the fusion passes, which
// decide which node makes each gradient, and before optimizer-low-copies.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using ir::Node;
using ir::Value;

constexpr char kName[] = "split-optimizer-updates";

// The least share of the update's elements the deepest gradients' parameters must hold. Below it
// the other half is nearly the whole update and still runs after the gradients made just before
// the last, so the split only adds a launch: on the H200 the CNN (the first convolution's 288
// weights last, of 1.2 M) ran 251.7, 252.8 µs split against 250.4, 249.6 whole at batch 128,
// while the small MLP (the first layer's 401 k of 670 k weights) ran 49.7, 48.5 against 50.2, 49.8
// at batch 128, 209.9, 209.0 against 210.5, 210.4 at 8192, and the MLP 4096x4 (16.8 M of 71.2 M,
// 24%) 4719.7, 4727.0 against 4732.0, 4733.1 (bench/RESULTS.md 2026-12-03 (5)).
constexpr double kMinTailShare = 0.2;

class SplitOptimizerUpdatesPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    const std::vector<Node*> updates = fusion::GroupedUpdates(g);
    if (updates.empty()) return false;
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    const fusion::Depths depths = fusion::ValueDepths(order);
    bool changed = false;
    for (Node* u : updates) {
      OTTR_ASSIGN_OR_RETURN(bool c, Split(g, u, depths));
      changed |= c;
    }
    return changed;
  }

 private:
  absl::StatusOr<bool> Split(ir::Graph& g, Node* u, const fusion::Depths& depths) {
    const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*u);
    if (!l.valid) return false;
    auto decline = [&](const std::string& why) {
      fusion::Remark(remarks(), kName, absl::StrCat("kept ", u->Describe(), " whole: ", why));
      return false;
    };
    if (l.guard >= 0 || l.grad_scale >= 0) {
      return decline("it is guarded (every gradient's finiteness decides the whole step)");
    }
    if (!l.low_copies.empty()) return decline("it writes low-precision copies");
    std::vector<int> depth(l.n);
    for (int k = 0; k < l.n; ++k) depth[k] = fusion::DepthOf(depths, u->input(2 + l.n + k));
    const int last = *std::max_element(depth.begin(), depth.end());
    std::vector<int> early, tail;
    for (int k = 0; k < l.n; ++k) (depth[k] == last ? tail : early).push_back(k);
    if (early.empty()) {
      return decline(absl::StrCat("every gradient is made at the same depth (", last, ")"));
    }
    // The elements each half updates (shapes are static in a planned step; a dynamic one skips
    // the test).
    bool known = true;
    auto elements = [&](const std::vector<int>& ks) {
      int64_t total = 0;
      for (int k : ks) {
        const ir::TensorType& t = u->input(2 + k)->type();
        known &= t.is_static();
        if (t.is_static()) total += ir::NumElements(ir::StaticDims(*t.shape));
      }
      return total;
    };
    const int64_t tail_elems = elements(tail), all_elems = tail_elems + elements(early);
    if (known && static_cast<double>(tail_elems) < kMinTailShare * static_cast<double>(all_elems)) {
      return decline(absl::StrCat("the deepest gradients' parameters hold ", tail_elems, " of ", all_elems,
                                  " elements (less than ", kMinTailShare,
                                  "): the other update would still wait for the gradients made just before"));
    }
    // Per group: (lr, step, params, grads, each state's tensors), outputs in the same order.
    const int outs_per = 1 + l.states;
    auto make = [&](const std::vector<int>& ks) -> absl::StatusOr<Node*> {
      ir::NodeSpec spec;
      spec.op_type = u->op_type();
      spec.domain = u->domain();
      spec.origin = u->origin();
      spec.attrs = u->attrs();
      spec.inputs = {u->input(0), u->input(1)};
      for (int part = 0; part < 2 + l.states; ++part) {
        for (int k : ks) spec.inputs.push_back(u->input(2 + part * l.n + k));
      }
      for (int o = 0; o < outs_per; ++o) {
        for (int k : ks) spec.output_names.push_back(g.UniqueName(u->output(o * l.n + k)->name()));
      }
      return fusion::AddInferred(g, std::move(spec));
    };
    fusion::Renames renames;
    for (const std::vector<int>* ks : {&early, &tail}) {
      OTTR_ASSIGN_OR_RETURN(Node * r, make(*ks));
      const int m = static_cast<int>(ks->size());
      for (int o = 0; o < outs_per; ++o) {
        for (int j = 0; j < m; ++j) renames.Replace(g, u->output(o * l.n + (*ks)[j]), r->output(o * m + j));
      }
    }
    std::string names;
    for (int k : tail) absl::StrAppend(&names, names.empty() ? "" : ", ", u->input(2 + k)->name());
    fusion::Remark(remarks(), kName,
                   absl::StrCat("split ", u->Describe(), ": ", names, " (gradients at depth ", last,
                                ") get an update of their own; the other ", early.size(),
                                " parameters' update no longer waits for them"));
    OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, {u}));
    renames.Apply(g);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateSplitOptimizerUpdatesPass() { return std::make_unique<SplitOptimizerUpdatesPass>(); }

}  // namespace ottr::passes
