// fuse-mlp-step (fusion_passes.h): at small batches the whole training step of a ReLU MLP with
// softmax cross-entropy and Adam becomes one ottr::MlpStep, run on the GPU as one cooperative
// launch (runtime/cuda/kernels/mlp_step.cu).
//
//   before:  %z0 = Gemm(%x, %fc0.w, %fc0.b) {transB = 1}   %h0 = Relu(%z0)   ...
//            %logits = Gemm(%h1, %fc2.w, %fc2.b) {transB = 1}
//            %loss, %lp = ottr::SoftmaxCrossEntropy(%logits, %labels) {ignore_index}
//            ... autodiff's gradient nodes of those, ending in %fc0.w.grad, %fc0.b.grad, ...
//            %fc0.w.new, ..., %fc2.b.v.new = ottr::AdamUpdateN(%lr, %step, %fc0.w, ..., %fc0.w.grad,
//                ..., %fc0.w.m, ..., %fc0.w.v, ...)
//   after:   %loss, %fc0.w.new, %fc0.b.new, ..., %fc2.b.v.new = ottr::MlpStep(%lr, %step, %x, %labels,
//                %fc0.w, %fc0.b, ..., %fc0.w.m, ..., %fc0.w.v, ...) {Adam's attributes, ignore_index}
//
// At batch 128 the small MLP's step was 14 launches and ~49 µs on the H100 after every other
// fusion, each launch a few µs of latency around well under a µs of arithmetic (bench/RESULTS.md
// 2026-12-06 (3) has the step before and after). The kernel runs the forward layers, the head,
// the backward layers and the weight gradients with Adam as phases of one grid.
// It is off by default (TrainingSpec::fuse_mlp_step, `--fuse-mlp-step on`): that kernel is still
// slower than the launches it replaces (60.1 against 48.5 µs at batch 128 on the H100,
// bench/RESULTS.md 2026-12-06 (4)).
//
// The pass runs after group-optimizer-updates, before the other fusion passes (which then find
// nothing of the step left), on TF32 steps (the kernel's products are TF32 MMAs, as cuBLASLt's
// TF32 GEMMs) without loss scaling, gradient clipping or exposed gradients. It matches: the loss
// output made by ottr::SoftmaxCrossEntropy without label smoothing, of logits from a chain of ONNX
// Gemm nodes (transA = 0, transB = 1, alpha = beta = 1, float32 weight [out, in] and bias [out]),
// each but the last followed by Relu, from a float32 graph input x; one unguarded float32
// ottr::AdamUpdateN (no loss scale, no low-precision copies) of exactly those weights and biases;
// and every other node that the gradients depend on made by autodiff (origin ".../grad" or
// "autodiff/seed"), read only by one another and the update. Those gradient nodes are then the
// exact derivatives the fused node computes itself. Shapes within ir::MlpStepFits: 2 to 8 layers,
// at most ir::kMlpStepMaxRows rows and ir::kMlpStepMaxClasses classes.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/mlp_step_layout.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"
#include "passes/training.h"

namespace ottr::passes {
namespace {

using fusion::IsF32;
using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-mlp-step";

struct Plan {
  Node* update = nullptr;
  Node* sce = nullptr;
  std::vector<Node*> gemms;            // layer order
  std::vector<Node*> relus;            // after gemms[l], l < L-1
  std::vector<Node*> backward;         // the gradient nodes
  std::vector<int> slot;               // slot[2l], slot[2l+1]: index of W_l, b_l in the update
};

bool IsStatic2D(const Value* v) { return v->type().is_static() && v->type().rank() == 2; }

std::optional<Plan> Match(ir::Graph& g, Node* u, std::string* why) {
  Plan p;
  p.update = u;
  if (!fusion::IsOttr(u, "AdamUpdateN")) {
    *why = absl::StrCat(u->Describe(), " is not Adam");
    return std::nullopt;
  }
  const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*u);
  if (!l.valid || l.guard >= 0 || l.grad_scale >= 0 || !l.low_copies.empty()) {
    *why = absl::StrCat(u->Describe(), " is guarded, unscales its gradients or keeps low-precision copies");
    return std::nullopt;
  }
  const int n = l.n;
  for (int k = 0; k < n; ++k) {
    if (!IsF32(u->input(2 + k))) {
      *why = absl::StrCat("parameter ", u->input(2 + k)->name(), " is not float32");
      return std::nullopt;
    }
  }
  // The loss and its logits.
  Value* loss = nullptr;
  for (Value* o : g.outputs()) {
    if (o->name() == kLossOutput) loss = o;
  }
  Node* sce = loss != nullptr ? loss->producer() : nullptr;
  if (sce == nullptr || !fusion::IsOttr(sce, "SoftmaxCrossEntropy") || sce->output(0) != loss) {
    *why = "the loss is not an ottr::SoftmaxCrossEntropy";
    return std::nullopt;
  }
  if (sce->GetFloat("label_smoothing", 0.0f) != 0.0f) {
    *why = "the loss smooths its labels";
    return std::nullopt;
  }
  p.sce = sce;
  Value* labels = sce->input(1);
  if (labels->producer() != nullptr || labels->is_initializer() ||
      (labels->type().dtype != ir::DType::kInt64 && labels->type().dtype != ir::DType::kInt32)) {
    *why = "the labels are not an int32 / int64 input of the step";
    return std::nullopt;
  }
  // The chain, from the logits back to x.
  Value* v = sce->input(0);
  std::vector<Node*> gemms, relus;
  while (true) {
    Node* gm = v->producer();
    if (!fusion::IsOnnx(gm, "Gemm") || gm->num_inputs() != 3 || gm->GetInt("transA", 0) != 0 ||
        gm->GetInt("transB", 0) != 1 || gm->GetFloat("alpha", 1.0f) != 1.0f || gm->GetFloat("beta", 1.0f) != 1.0f ||
        !IsF32(v) || !IsStatic2D(v)) {
      *why = absl::StrCat(v->name(), " is not a float32 Gemm(x, W, b) {transB = 1} of a linear layer");
      return std::nullopt;
    }
    Value* w = gm->input(1);
    Value* b = gm->input(2);
    if (!IsF32(w) || !IsStatic2D(w) || !IsF32(b) || !b->type().is_static() || b->type().rank() != 1 ||
        ir::StaticDims(*b->type().shape)[0] != ir::StaticDims(*w->type().shape)[0]) {
      *why = absl::StrCat(gm->Describe(), ": the weight and bias are not float32 [out, in] and [out]");
      return std::nullopt;
    }
    gemms.push_back(gm);
    Value* in = gm->input(0);
    Node* r = in->producer();
    if (r == nullptr) break;
    if (!fusion::IsOnnx(r, "Relu")) {
      *why = absl::StrCat(in->name(), " is neither the step's input nor a Relu of a Gemm");
      return std::nullopt;
    }
    relus.push_back(r);
    v = r->input(0);
  }
  std::reverse(gemms.begin(), gemms.end());
  std::reverse(relus.begin(), relus.end());
  p.gemms = gemms;
  p.relus = relus;
  const int layers = static_cast<int>(gemms.size());
  Value* x = gemms[0]->input(0);
  if (x->is_initializer() || !IsF32(x) || !IsStatic2D(x)) {
    *why = absl::StrCat(x->name(), " is not a float32 [B, D] input of the step");
    return std::nullopt;
  }
  const int64_t rows = ir::StaticDims(*x->type().shape)[0];
  const int64_t classes = ir::StaticDims(*gemms.back()->output(0)->type().shape)[1];
  if (!ir::MlpStepFits(layers, rows, classes)) {
    *why = absl::StrCat(layers, " layers, ", rows, " rows, ", classes, " classes (the kernel takes 2 to ",
                        ir::kMlpStepMaxLayers, " layers, at most ", ir::kMlpStepMaxRows, " rows and ",
                        ir::kMlpStepMaxClasses, " classes)");
    return std::nullopt;
  }
  // The update's parameters are exactly the layers' weights and biases.
  if (n != 2 * layers) {
    *why = absl::StrCat(u->Describe(), " updates ", n, " tensors, the ", layers, " layers have ", 2 * layers);
    return std::nullopt;
  }
  std::map<const Value*, int> slot_of;
  for (int k = 0; k < n; ++k) slot_of[u->input(2 + k)] = k;
  for (int ly = 0; ly < layers; ++ly) {
    for (int j = 1; j <= 2; ++j) {
      auto it = slot_of.find(gemms[ly]->input(j));
      if (it == slot_of.end()) {
        *why = absl::StrCat(gemms[ly]->input(j)->name(), " is not updated by ", u->Describe());
        return std::nullopt;
      }
      p.slot.push_back(it->second);
    }
  }
  // The nodes the gradients depend on, the forward chain excluded.
  std::set<const Node*> fwd(gemms.begin(), gemms.end());
  fwd.insert(relus.begin(), relus.end());
  fwd.insert(sce);
  std::set<const Node*> back;
  std::vector<Value*> stack;
  for (int k = 0; k < n; ++k) stack.push_back(u->input(2 + n + k));
  while (!stack.empty()) {
    Value* s = stack.back();
    stack.pop_back();
    Node* pn = s->producer();
    if (pn == nullptr || fwd.contains(pn) || back.contains(pn)) continue;
    back.insert(pn);
    p.backward.push_back(pn);
    for (Value* in : pn->inputs()) {
      if (in != nullptr) stack.push_back(in);
    }
  }
  for (const Node* b : back) {
    const std::string& o = b->origin();
    if (!absl::StrContains(o, "/grad") && o != "autodiff/seed") {
      *why = absl::StrCat(b->Describe(), " (origin \"", o, "\") is not autodiff's");
      return std::nullopt;
    }
    for (const Value* out : b->outputs()) {
      if (out == nullptr) continue;
      if (g.IsRoot(out)) {
        *why = absl::StrCat("gradient value ", out->name(), " is an output of the step");
        return std::nullopt;
      }
      for (const ir::Use& use : out->uses()) {
        if (use.node != u && !back.contains(use.node)) {
          *why = absl::StrCat("gradient value ", out->name(), " is also read by ", use.node->Describe());
          return std::nullopt;
        }
      }
    }
  }
  // The forward values are read only by the chain and its gradient nodes.
  for (const Node* f : fwd) {
    for (const Value* out : f->outputs()) {
      if (out == nullptr) continue;
      if (out != loss && g.IsRoot(out)) {
        *why = absl::StrCat(out->name(), " is an output of the step");
        return std::nullopt;
      }
      for (const ir::Use& use : out->uses()) {
        if (!fwd.contains(use.node) && !back.contains(use.node)) {
          *why = absl::StrCat(out->name(), " is also read by ", use.node->Describe());
          return std::nullopt;
        }
      }
    }
  }
  // Every gradient comes from that cone: not from a constant or an input.
  for (int k = 0; k < n; ++k) {
    if (!back.contains(u->input(2 + n + k)->producer())) {
      *why = absl::StrCat(u->input(2 + n + k)->name(), " is not made by the gradient nodes");
      return std::nullopt;
    }
  }
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* u = p.update;
  const std::string update = u->Describe();  // for the remark: the node is erased below
  const int n = static_cast<int>(p.slot.size());
  std::vector<Value*> inputs = {u->input(0), u->input(1), p.gemms[0]->input(0), p.sce->input(1)};
  for (int s = 0; s < 3; ++s) {
    for (int k = 0; k < n; ++k) {
      // The update's inputs: lr, step, params, grads, m, v.
      inputs.push_back(u->input(2 + (s == 0 ? 0 : s + 1) * n + p.slot[k]));
    }
  }
  std::vector<Value*> old = {p.sce->output(0)};
  for (int s = 0; s < 3; ++s) {
    for (int k = 0; k < n; ++k) old.push_back(u->output(s * n + p.slot[k]));
  }
  std::vector<std::string> names;
  for (const Value* v : old) names.push_back(g.UniqueName(v->name() + ".step"));
  std::map<std::string, ir::Attribute> attrs;
  for (const char* a : {"beta1", "beta2", "epsilon", "weight_decay", "decoupled"}) {
    if (u->attr(a) != nullptr) attrs[a] = *u->attr(a);
  }
  attrs["ignore_index"] = ir::Attribute(p.sce->GetInt("ignore_index", -100));
  OTTR_ASSIGN_OR_RETURN(Node * m, fusion::AddInferred(g, {"MlpStep", std::string(ir::kOttrDomain), std::move(inputs),
                                                          std::move(names), std::move(attrs), u->origin()}));
  for (size_t i = 0; i < old.size(); ++i) {
    if (m->output(static_cast<int>(i))->type() != old[i]->type()) {
      return absl::InternalError(absl::StrCat(kName, ": output ", i, " is ", m->output(static_cast<int>(i))->type().ToString(),
                                              ", the value it replaces ", old[i]->type().ToString()));
    }
  }
  fusion::Renames renames;
  for (size_t i = 0; i < old.size(); ++i) renames.Replace(g, old[i], m->output(static_cast<int>(i)));
  // Erase the update, the gradient nodes, then the chain, readers before what they read.
  std::set<const Node*> doomed(p.backward.begin(), p.backward.end());
  doomed.insert(u);
  doomed.insert(p.sce);
  doomed.insert(p.gemms.begin(), p.gemms.end());
  doomed.insert(p.relus.begin(), p.relus.end());
  OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
  std::vector<Node*> erase;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (doomed.contains(*it)) erase.push_back(*it);
  }
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, erase));
  renames.Apply(g);
  const std::vector<int64_t> xd = ir::StaticDims(*m->input(2)->type().shape);
  Remark(remarks, kName,
         absl::StrCat("fused the step of ", p.gemms.size(), " linear layers (", xd[0], " rows of ", xd[1], ", ",
                      erase.size(), " nodes: forward, loss, gradients, ", update, ") -> ottr::MlpStep"));
  return absl::OkStatus();
}

class FuseMlpStepPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    const std::vector<Node*> updates = fusion::GroupedUpdates(g);
    if (updates.size() != 1) {
      if (updates.size() > 1) Remark(remarks(), kName, "declined: the step has several optimizer updates");
      return false;
    }
    return fusion::MatchAndRewrite(
        updates, remarks(), kName, [&](Node* u, std::string* why) { return Match(g, u, why); },
        [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseMlpStepPass() { return std::make_unique<FuseMlpStepPass>(); }

}  // namespace ottr::passes
