// fuse-linear-sce-relu-grad (fusion_passes.h): at large batches, a classifier head's forward, its
// loss and the backward through the ReLU before it in one node and one pass over that ReLU's
// output (TF32 steps).
//
//   before:  %z = ottr::FusedGemm(%y, %w, %bz) {epilogue = "bias" | "none", transB = 1}
//            %loss, %dz = ottr::SoftmaxCrossEntropyWithGrad(%z, %labels, %seed, %count) {classes}
//            %dx, %db, %dw, %dbz = ottr::LinearReluGrad(%dz, %w, %y) {weight_rows}
//   after:   %loss, %dx, %db, %dw, %dbz = ottr::LinearSceReluGrad(%y, %w, %bz, %labels, %seed, %count)
//                                         {classes, weight_rows, ignore_index, label_smoothing}
//
// This is the form the small MLP's head takes above fuse-linear-sce's 1024 rows (count-labels-early
// gave the loss its count, fuse-linear-relu-grad made the backward). On the H100 at batch 8192 the
// three were the classifier GEMM (8.0 µs, reading Y), the loss kernel (7.5) and LinearReluGrad
// (23.4, reading Y again), back to back on the step's critical path (bench/RESULTS.md 2026-12-06);
// the fused kernel reads Y once and never stores the logits or dlogits.
//
// TF32 steps only: the kernel's logits and weight gradient are TF32 products, as the GEMMs they
// replace (dX stays float32-level). It needs the logits and dlogits to have no other reader, the
// same W and Y in the forward and the backward, and a shape its kernel takes
// (ir::LinearSceReluGradFits: 128, 256 or 512 columns, at most 16 classes).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/linear_sce_layout.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::IsF32;
using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-linear-sce-relu-grad";

struct Plan {
  Node* fwd = nullptr;   // the classifier's FusedGemm
  Node* sce = nullptr;   // ottr::SoftmaxCrossEntropyWithGrad
  Node* back = nullptr;  // ottr::LinearReluGrad
};

std::optional<Plan> Match(Node* l, std::string* why) {
  Plan p;
  p.back = l;
  if (l->num_outputs() != 4) {
    *why = "it does not compute the head's weight gradient";
    return std::nullopt;
  }
  Value* dz = l->input(0);
  Value* w = l->input(1);
  Value* y = l->input(2);
  Node* s = dz->producer();
  if (s == nullptr || !fusion::IsOttr(s, "SoftmaxCrossEntropyWithGrad") || s->output(1) != dz) {
    *why = absl::StrCat(dz->name(), " is not the dlogits of an ottr::SoftmaxCrossEntropyWithGrad");
    return std::nullopt;
  }
  if (s->num_outputs() > 2) {
    *why = "the loss node also sums dlogits' columns (fuse-sce-bgrad)";
    return std::nullopt;
  }
  if (s->num_inputs() < 4 || s->input(3) == nullptr) {
    *why = "the loss node has no labels' count (count-labels-early did not give it one)";
    return std::nullopt;
  }
  if (s->GetInt("grad_type", 0) != 0 || !IsF32(dz) || fusion::SoleUser(dz) != l) {
    *why = absl::StrCat("dlogits ", dz->name(), " are not float32 or have other readers");
    return std::nullopt;
  }
  Value* z = s->input(0);
  Node* f = z->producer();
  const std::optional<ir::FusedEpilogue> fe = fusion::FusedEpilogueOf(f);
  if (!fe || (*fe != ir::FusedEpilogue::kBias && *fe != ir::FusedEpilogue::kNone)) {
    *why = absl::StrCat("logits ", z->name(), " are not the product of an ottr::FusedGemm bias / none");
    return std::nullopt;
  }
  if (f->GetInt("transA", 0) != 0 || f->GetInt("transB", 0) != 1 || f->GetFloat("alpha", 1.0f) != 1.0f ||
      f->has_attr("output_type") || f->input(0) != y || f->input(1) != w || !IsF32(z) ||
      (*fe == ir::FusedEpilogue::kBias && !IsF32(f->input(2)))) {
    *why = absl::StrCat(f->Describe(), " is not Y·Wᵀ (+ bias) of the backward's Y and W in float32");
    return std::nullopt;
  }
  if (fusion::SoleUser(z) != s) {
    *why = absl::StrCat("logits ", z->name(), " have other readers");
    return std::nullopt;
  }
  const std::vector<int64_t> yd = ir::StaticDims(*y->type().shape);
  const std::vector<int64_t> wd = ir::StaticDims(*w->type().shape);
  if (!ir::LinearSceReluGradFits(yd[1], wd[0])) {
    *why = absl::StrCat("Y ", y->type().ToString(), " and W ", w->type().ToString(),
                        " (the kernel takes 128, 256 or 512 columns and at most 16 classes)");
    return std::nullopt;
  }
  p.fwd = f;
  p.sce = s;
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* f = p.fwd;
  Node* s = p.sce;
  Node* l = p.back;
  std::map<std::string, ir::Attribute> attrs;
  for (const char* a : {"ignore_index", "label_smoothing", "classes"}) {
    if (s->attr(a) != nullptr) attrs[a] = *s->attr(a);
  }
  if (l->attr("weight_rows") != nullptr) attrs["weight_rows"] = *l->attr("weight_rows");
  std::vector<Value*> inputs = {f->input(0), f->input(1), f->num_inputs() > 2 ? f->input(2) : nullptr,
                                s->input(1), s->input(2), s->input(3)};
  std::vector<Value*> old = {s->output(0), l->output(0), l->output(1), l->output(2), l->output(3)};
  std::vector<std::string> names;
  for (const Value* v : old) names.push_back(g.UniqueName(v->name() + ".h"));
  OTTR_ASSIGN_OR_RETURN(Node * n, fusion::AddInferred(g, {"LinearSceReluGrad", std::string(ir::kOttrDomain),
                                                          std::move(inputs), std::move(names), std::move(attrs),
                                                          l->origin()}));
  for (size_t i = 0; i < old.size(); ++i) {
    if (n->output(static_cast<int>(i))->type() != old[i]->type()) {
      return absl::InternalError(absl::StrCat(kName, ": output ", i, " is ", n->output(static_cast<int>(i))->type().ToString(),
                                              ", the value it replaces ", old[i]->type().ToString()));
    }
  }
  const std::string what = absl::StrCat(f->Describe(), " + ", s->Describe(), " + ", l->Describe());
  fusion::Renames renames;
  for (size_t i = 0; i < old.size(); ++i) renames.Replace(g, old[i], n->output(static_cast<int>(i)));
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, {l, s, f}));
  renames.Apply(g);
  const std::vector<int64_t> yd = ir::StaticDims(*n->input(0)->type().shape);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::LinearSceReluGrad (", yd[0], " rows of ", yd[1], ", ",
                      ir::StaticDims(*n->input(1)->type().shape)[0], " classes)"));
  return absl::OkStatus();
}

class FuseLinearSceReluGradPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "LinearReluGrad")) roots.push_back(n);
    }
    // A rewrite erases its own LinearReluGrad, loss node and GEMM: never another root.
    return fusion::MatchAndRewrite(roots, remarks(), kName, Match,
                                   [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseLinearSceReluGradPass() { return std::make_unique<FuseLinearSceReluGradPass>(); }

}  // namespace ottr::passes
