// fuse-sce-grad (fusion_passes.h): the appended loss and its gradient in one node.
//
//   before:  %loss, %lp = ottr::SoftmaxCrossEntropy(%logits, %labels)
//            %d = ottr::SoftmaxCrossEntropyGrad(%seed, %lp, %labels)
//            [%d.bf16 = Cast(%d) {to = bf16}]                (16-bit steps: dlogits for the GEMMs)
//   after:   %loss, %d[.bf16] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed)
//                                 [{grad_type = bf16}]
//
// The log-probabilities exist only to carry the softmax from the loss to its gradient: the fused
// node never writes them (on the MLP 4096x4 in bf16 the three nodes read and wrote about 100 MB
// of [4096, 1000] float32 tensors per step; the fused kernel reads the logits and writes dlogits
// in bf16, 24 MB). The values are those of the three nodes. It needs the log_prob to have no
// other reader and the gradient seed not to depend on the loss (it never does in a training step:
// the seed is a constant or the loss scale).
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-sce-grad";

struct Plan {
  Node* loss = nullptr;   // ottr::SoftmaxCrossEntropy
  Node* grad = nullptr;   // ottr::SoftmaxCrossEntropyGrad
  Node* cast = nullptr;   // the Cast of dlogits, or null
};

// Whether `v` is computed from an output of `n` (a walk up the producers).
bool DependsOn(const Value* v, const Node* n) {
  std::vector<const Node*> stack;
  absl::flat_hash_set<const Node*> seen;
  if (v->producer() != nullptr) stack.push_back(v->producer());
  while (!stack.empty()) {
    const Node* p = stack.back();
    stack.pop_back();
    if (p == n) return true;
    if (!seen.insert(p).second) continue;
    for (const Value* in : p->inputs()) {
      if (in != nullptr && in->producer() != nullptr) stack.push_back(in->producer());
    }
  }
  return false;
}

std::optional<Plan> Match(Node* g, std::string* why) {
  Plan p;
  p.grad = g;
  Value* lp = g->input(1);
  Node* s = lp->producer();
  if (s == nullptr || !fusion::IsOttr(s, "SoftmaxCrossEntropy") || s->output(1) != lp) {
    *why = absl::StrCat("its log_prob ", lp->name(), " is not the output of an ottr::SoftmaxCrossEntropy");
    return std::nullopt;
  }
  p.loss = s;
  if (fusion::SoleUser(lp) != g) {
    *why = absl::StrCat("log_prob ", lp->name(), " has other readers");
    return std::nullopt;
  }
  if (s->input(1) != g->input(2)) {
    *why = absl::StrCat("the loss reads labels ", s->input(1)->name(), ", the gradient ", g->input(2)->name());
    return std::nullopt;
  }
  if (s->GetInt("ignore_index", -100) != g->GetInt("ignore_index", -100) ||
      s->GetFloat("label_smoothing", 0.0f) != g->GetFloat("label_smoothing", 0.0f)) {
    *why = "the loss and its gradient differ in ignore_index or label_smoothing";
    return std::nullopt;
  }
  if (DependsOn(g->input(0), s)) {
    *why = absl::StrCat("the gradient seed ", g->input(0)->name(), " is computed from the loss");
    return std::nullopt;
  }
  Node* c = fusion::SoleUser(g->output(0));
  if (c != nullptr && fusion::IsOnnx(c, "Cast") && ir::IsFloat(c->output(0)->type().dtype)) p.cast = c;
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* s = p.loss;
  Value* dlogits = p.cast != nullptr ? p.cast->output(0) : p.grad->output(0);
  std::map<std::string, ir::Attribute> attrs = s->attrs();
  if (p.cast != nullptr) {
    attrs["grad_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(dlogits->type().dtype)));
  }
  OTTR_ASSIGN_OR_RETURN(
      Node * f, fusion::AddInferred(g, {"SoftmaxCrossEntropyWithGrad", std::string(ir::kOttrDomain),
                                        {s->input(0), s->input(1), p.grad->input(0)},
                                        {g.UniqueName(s->output(0)->name() + ".fused"),
                                         g.UniqueName(dlogits->name() + ".fused")},
                                        std::move(attrs), s->origin()}));
  std::string what = absl::StrCat(s->Describe(), " + ", p.grad->Describe());
  if (p.cast != nullptr) absl::StrAppend(&what, " + ", p.cast->Describe());
  fusion::Renames renames;
  renames.Replace(g, s->output(0), f->output(0));
  renames.Replace(g, dlogits, f->output(1));
  std::vector<Node*> dead;
  if (p.cast != nullptr) dead.push_back(p.cast);
  dead.push_back(p.grad);
  dead.push_back(s);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::SoftmaxCrossEntropyWithGrad (dlogits in ",
                      ir::DTypeName(f->output(1)->type().dtype), ", no log_prob)"));
  return absl::OkStatus();
}

class FuseSceGradPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "SoftmaxCrossEntropyGrad")) roots.push_back(n);
    }
    // A rewrite erases its own gradient node, its loss and its Cast: never another root.
    return fusion::MatchAndRewrite(roots, remarks(), kName, Match,
                                   [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseSceGradPass() { return std::make_unique<FuseSceGradPass>(); }

}  // namespace ottr::passes
