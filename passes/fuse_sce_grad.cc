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
//
// When the logits are the first K columns of a padded GEMM's output (pad-gemm-dims: a Slice on
// the last axis from 0) read by nothing else, and dlogits' only reader is that Slice's gradient
// (ottr::SliceGrad with the same starts, ends and axes), the fused node reads the padded rows and
// writes the padded dlogits itself, zero past K ({classes = K}): two copy kernels fewer.
//
//   before:  %logits = Slice(%logits.pad, [0], [K], [1])   ...   %d.pad = ottr::SliceGrad(%d, ...)
//   after:   %loss, %d.pad = ottr::SoftmaxCrossEntropyWithGrad(%logits.pad, %labels, %seed) {classes = K}
//
// fuse-sce-bgrad: the bias gradient of the classifier GEMM, when no GEMM epilogue took it (TF32
// BGRAD declines GEMMs above 1e9 multiply-adds: the MLP 4096x4's [4096, 1000] logits), is summed
// by the loss kernel as it writes dlogits, instead of a column reduction that reads them again
// (two launches there):
//
//   before:  %loss, %d = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed)
//            %s = ReduceSum(%d, [0]) {keepdims = 0}          (or keepdims 1 and a Reshape to [C])
//   after:   %loss, %d, %s = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed)
//
// float32 dlogits only (the CUDA kernel sums in float32 and double); dlogits must keep another
// reader (the GEMMs). It runs after fuse-gemm-bgrad, which removes the sum altogether where the
// weight gradient's epilogue can take it.
//
// fuse-linear-sce: a classifier of at most 32 classes, its loss and the data gradient through it
// in one node (and one kernel on the GPU: a warp per row computes the logits, the softmax terms
// and dlogits in registers and writes dx from them):
//
//   before:  %logits = ottr::FusedGemm(%x, %w, %b) {epilogue = "bias" | "none", transB = t}
//            %loss, %d = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed)
//            %dx = ottr::FusedGemm(%d, %w, _, [%mask]) {epilogue = "drelu" | "none", transB = 1 - t}
//   after:   %loss, %d, %dx = ottr::LinearSoftmaxCrossEntropyWithGrad(%x, %w, %b, %labels, %seed,
//                                                                     [%mask]) {transB = t}
//
// At batch 128 the three were three dependent launches of 4-6 µs each on the step's critical
// path. dlogits stays an output for the weight gradient (and the bias gradient GEMM epilogue).
// Float32 only (the kernel sums in float32, not TF32); the logits must have no other reader.
// Padded logits (pad-gemm-dims' {classes}) keep their padded dlogits. Where the data gradient is a
// plain Gemm read only by the ReLU backward of x itself (large GEMMs keep RELU_BIAS without a
// mask, and fuse-relu-grad-bgrad adds the layer's bias gradient), that comes in too:
//
//            %dx = Gemm(%d, %w)   %dz, %db = ottr::ReluGradBiasGrad(%dx, %x)   (or ReluGrad)
//   after:   %loss, %d, %dz, %db = ottr::LinearSoftmaxCrossEntropyWithGrad(...) {relu_x = 1}
//
// (made at batches up to ir::kLinearSceFuseMaxRows, 1024: at batch 8192, where the small MLP's
// head has this form by default, the kernel took 54.6 µs against about 36 µs for the four nodes).
// Declines a loss node with the column sums (fuse-sce-bgrad) and a data gradient with a bias
// gradient epilogue (drelu_bgrad: a column sum over the batch the kernel does not take).
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/grads/tensor_grad_util.h"
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

constexpr char kName[] = "fuse-sce-grad";

struct Plan {
  Node* loss = nullptr;   // ottr::SoftmaxCrossEntropy
  Node* grad = nullptr;   // ottr::SoftmaxCrossEntropyGrad
  Node* cast = nullptr;   // the Cast of dlogits, or null
  Node* slice = nullptr;  // the Slice of the padded logits, or null
  Node* slice_grad = nullptr;  // with `slice`: its ottr::SliceGrad, dlogits' only reader
  int64_t classes = 0;    // with `slice`: K
};

// The Slice `sl` keeps columns [0, K) of the last axis of a static 2-D input, step 1: K, else 0.
int64_t LeadingColumns(const Node* sl) {
  if (sl == nullptr || !fusion::IsOnnx(sl, "Slice") || sl->num_inputs() < 4) return 0;
  const Value* in = sl->input(0);
  if (in == nullptr || !in->type().is_static() || ir::StaticDims(*in->type().shape).size() != 2) return 0;
  const int64_t width = ir::StaticDims(*in->type().shape)[1];
  const auto starts = ir::grad_util::KnownInts(sl->input(1));
  const auto ends = ir::grad_util::KnownInts(sl->input(2));
  const auto axes = ir::grad_util::KnownInts(sl->input(3));
  if (!starts || !ends || !axes || starts->size() != 1 || ends->size() != 1 || axes->size() != 1) return 0;
  if ((*axes)[0] != 1 && (*axes)[0] != -1) return 0;
  if (sl->num_inputs() > 4 && sl->input(4) != nullptr) {
    const auto steps = ir::grad_util::KnownInts(sl->input(4));
    if (!steps || steps->size() != 1 || (*steps)[0] != 1) return 0;
  }
  const int64_t k = (*ends)[0];
  return (*starts)[0] == 0 && k > 0 && k < width ? k : 0;
}

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
  // The Slice of a padded GEMM's output and its gradient, folded when both are there.
  Node* sl = s->input(0)->producer();
  const Value* d = p.cast != nullptr ? p.cast->output(0) : g->output(0);
  Node* sg = fusion::SoleUser(d);
  const int64_t k = LeadingColumns(sl);
  if (k > 0 && fusion::SoleUser(s->input(0)) == s && sg != nullptr && fusion::IsOttr(sg, "SliceGrad") &&
      sg->num_inputs() == sl->num_inputs() && sg->output(0)->type().shape == sl->input(0)->type().shape) {
    bool same = true;
    for (int i = 1; i < sl->num_inputs(); ++i) same &= sg->input(i) == sl->input(i);
    if (same) {
      p.slice = sl;
      p.slice_grad = sg;
      p.classes = k;
    }
  }
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* s = p.loss;
  Value* dlogits = p.cast != nullptr ? p.cast->output(0) : p.grad->output(0);
  std::map<std::string, ir::Attribute> attrs = s->attrs();
  if (p.cast != nullptr) {
    attrs["grad_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(dlogits->type().dtype)));
  }
  Value* logits = s->input(0);
  if (p.slice != nullptr) {
    attrs["classes"] = ir::Attribute(p.classes);
    logits = p.slice->input(0);
    dlogits = p.slice_grad->output(0);
  }
  OTTR_ASSIGN_OR_RETURN(
      Node * f, fusion::AddInferred(g, {"SoftmaxCrossEntropyWithGrad", std::string(ir::kOttrDomain),
                                        {logits, s->input(1), p.grad->input(0)},
                                        {g.UniqueName(s->output(0)->name() + ".fused"),
                                         g.UniqueName(dlogits->name() + ".fused")},
                                        std::move(attrs), s->origin()}));
  std::string what = absl::StrCat(s->Describe(), " + ", p.grad->Describe());
  if (p.cast != nullptr) absl::StrAppend(&what, " + ", p.cast->Describe());
  if (p.slice != nullptr) absl::StrAppend(&what, " + ", p.slice->Describe(), " + ", p.slice_grad->Describe());
  fusion::Renames renames;
  renames.Replace(g, s->output(0), f->output(0));
  renames.Replace(g, dlogits, f->output(1));
  std::vector<Node*> dead;
  if (p.slice_grad != nullptr) dead.push_back(p.slice_grad);
  if (p.cast != nullptr) dead.push_back(p.cast);
  dead.push_back(p.grad);
  dead.push_back(s);
  if (p.slice != nullptr) dead.push_back(p.slice);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::SoftmaxCrossEntropyWithGrad (dlogits in ",
                      ir::DTypeName(f->output(1)->type().dtype), ", no log_prob",
                      p.slice != nullptr ? absl::StrCat(", the first ", p.classes, " of ",
                                                        ir::StaticDims(*logits->type().shape)[1], " columns")
                                         : "",
                      ")"));
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

// --- fuse-sce-bgrad ----------------------------------------------------------------------------

constexpr char kBgradName[] = "fuse-sce-bgrad";

struct BgradPlan {
  Node* sce = nullptr;  // ottr::SoftmaxCrossEntropyWithGrad
  fusion::BiasGradMatch bias;
};

std::optional<BgradPlan> MatchBgrad(Node* s, std::string* why) {
  BgradPlan p;
  p.sce = s;
  if (s->num_outputs() > 2) {
    *why = "it already writes the column sums of dlogits";
    return std::nullopt;
  }
  Value* d = s->output(1);
  std::optional<fusion::BiasGradMatch> m = fusion::FindBiasGrad(d, 0);
  if (!m) {
    *why = absl::StrCat("no ReduceSum over axis 0 (a bias gradient) reads dlogits ", d->name(),
                        " (the GEMM epilogues took it, or there is none)");
    return std::nullopt;
  }
  if (d->type().dtype != ir::DType::kFloat32) {
    *why = absl::StrCat("dlogits ", d->name(), " are ", ir::DTypeName(d->type().dtype),
                        ", the fused column sums are float32 only");
    return std::nullopt;
  }
  if (m->result->type().dtype != ir::DType::kFloat32) {
    *why = absl::StrCat("the bias gradient ", m->result->name(), " is not float32");
    return std::nullopt;
  }
  if (d->uses().size() < 2) {
    // The kernel writes dlogits as it sums them; with no other reader the sum is all that is left.
    *why = absl::StrCat("the bias gradient is the only reader of dlogits ", d->name());
    return std::nullopt;
  }
  p.bias = *m;
  return p;
}

absl::Status RewriteBgrad(ir::Graph& g, const BgradPlan& p, std::ostream* remarks) {
  Node* s = p.sce;
  OTTR_ASSIGN_OR_RETURN(
      Node * f, fusion::AddInferred(g, {"SoftmaxCrossEntropyWithGrad", std::string(ir::kOttrDomain),
                                        {s->input(0), s->input(1), s->input(2)},
                                        {g.UniqueName(s->output(0)->name() + ".b"),
                                         g.UniqueName(s->output(1)->name() + ".b"),
                                         g.UniqueName(p.bias.result->name() + ".fused")},
                                        s->attrs(), s->origin()}));
  if (f->output(2)->type() != p.bias.result->type()) {
    return absl::InternalError(absl::StrCat(kBgradName, ": the fused column sums are ", f->output(2)->type().ToString(),
                                            ", the bias gradient ", p.bias.result->type().ToString()));
  }
  const std::string what = absl::StrCat(s->Describe(), " + ", p.bias.chain[0]->Describe());
  fusion::Renames renames;
  renames.Replace(g, s->output(0), f->output(0));
  renames.Replace(g, s->output(1), f->output(1));
  renames.Replace(g, p.bias.result, f->output(2));
  std::vector<Node*> dead(p.bias.chain.rbegin(), p.bias.chain.rend());
  dead.push_back(s);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kBgradName,
         absl::StrCat("fused ", what, " -> ottr::SoftmaxCrossEntropyWithGrad with the column sums of dlogits"));
  return absl::OkStatus();
}

class FuseSceBgradPass : public Pass {
 public:
  absl::string_view name() const override { return kBgradName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "SoftmaxCrossEntropyWithGrad")) roots.push_back(n);
    }
    // A rewrite erases its own loss node and ReduceSum chain: never another root.
    return fusion::MatchAndRewrite(roots, remarks(), kBgradName, MatchBgrad,
                                   [&](const BgradPlan& p) { return RewriteBgrad(g, p, remarks()); });
  }
};

// --- fuse-linear-sce ---------------------------------------------------------------------------

constexpr char kLinearName[] = "fuse-linear-sce";

struct LinearPlan {
  Node* fwd = nullptr;   // the classifier: ottr::FusedGemm bias / none
  Node* sce = nullptr;   // ottr::SoftmaxCrossEntropyWithGrad
  Node* back = nullptr;  // the data gradient: ottr::FusedGemm drelu / none or a Gemm of dlogits and the weight
  Node* act = nullptr;   // ottr::ReluGrad / ReluGradBiasGrad(back's product, x), or null
};

// The ReLU backward through x of the data gradient `back` (none epilogue), when it is the product's
// only reader: ottr::ReluGrad(dx, x) or ottr::ReluGradBiasGrad(dx, x) with a float32 bias gradient.
Node* ReluBackwardThroughX(Node* back, const Value* x) {
  Node* r = fusion::SoleUser(back->output(0));
  if (r == nullptr || r->input(0) != back->output(0) || r->input(1) != x) return nullptr;
  if (fusion::IsOttr(r, "ReluGrad")) return IsF32(r->output(0)) ? r : nullptr;
  if (fusion::IsOttr(r, "ReluGradBiasGrad") && IsF32(r->output(0)) && IsF32(r->output(1))) return r;
  return nullptr;
}

std::optional<LinearPlan> MatchLinear(Node* s, std::string* why) {
  LinearPlan p;
  p.sce = s;
  if (s->num_outputs() > 2) {
    *why = "it already writes the column sums of dlogits (fuse-sce-bgrad)";
    return std::nullopt;
  }
  Value* logits = s->input(0);
  Value* d = s->output(1);
  if (!IsF32(logits) || !IsF32(d)) {
    *why = absl::StrCat("logits ", logits->type().ToString(), " and dlogits ", d->type().ToString(),
                        " are not both float32 (the fused kernel is float32)");
    return std::nullopt;
  }
  Node* f = logits->producer();
  const std::optional<ir::FusedEpilogue> fe = fusion::FusedEpilogueOf(f);
  if (!fe || (*fe != ir::FusedEpilogue::kBias && *fe != ir::FusedEpilogue::kNone)) {
    *why = absl::StrCat("logits ", logits->name(), " are not the product of an ottr::FusedGemm bias / none");
    return std::nullopt;
  }
  if (f->GetInt("transA", 0) != 0 || f->GetFloat("alpha", 1.0f) != 1.0f || !IsF32(f->input(0)) ||
      !IsF32(f->input(1)) || (*fe == ir::FusedEpilogue::kBias && !IsF32(f->input(2)))) {
    *why = absl::StrCat(f->Describe(), " has transA, alpha or operands other than float32");
    return std::nullopt;
  }
  if (fusion::SoleUser(logits) != s) {
    *why = absl::StrCat("logits ", logits->name(), " have other readers");
    return std::nullopt;
  }
  if (!logits->type().is_static() || ir::StaticDims(*logits->type().shape).size() != 2 ||
      !f->input(0)->type().is_static()) {
    *why = "the logits' or x's shape is not static";
    return std::nullopt;
  }
  const int64_t rows = ir::StaticDims(*logits->type().shape)[0];
  if (rows > ir::kLinearSceFuseMaxRows) {
    *why = absl::StrCat(rows, " rows (above ", ir::kLinearSceFuseMaxRows,
                        " the fused kernel is slower than the nodes it would replace)");
    return std::nullopt;
  }
  const int64_t width = ir::StaticDims(*logits->type().shape)[1];
  // {classes}: the loss reads the first columns of a padded GEMM (pad-gemm-dims); the kernel
  // computes those and writes zeros past them.
  const int64_t classes = s->GetInt("classes", 0) > 0 ? s->GetInt("classes", 0) : width;
  if (classes > ir::kLinearSceMaxClasses) {
    *why = absl::StrCat(classes, " classes (the fused kernel holds at most ", ir::kLinearSceMaxClasses, " per row)");
    return std::nullopt;
  }
  if (f->input(2) != nullptr && ir::NumElements(ir::StaticDims(*f->input(2)->type().shape)) != width) {
    *why = absl::StrCat("bias ", f->input(2)->type().ToString(), " is not [", width, "]");
    return std::nullopt;
  }
  Value* w = f->input(1);
  const int64_t tb = f->GetInt("transB", 0) != 0 ? 1 : 0;
  for (const auto& use : d->uses()) {
    Node* b = use.node;
    const std::optional<ir::FusedEpilogue> be = fusion::FusedEpilogueOf(b);
    const bool gemm = fusion::IsOnnx(b, "Gemm") && fusion::IsPlainGemm(b);
    if ((!be && !gemm) || b->input(0) != d || b->input(1) != w || b->GetInt("transA", 0) != 0 ||
        (b->GetInt("transB", 0) != 0 ? 1 : 0) != 1 - tb || b->GetFloat("alpha", 1.0f) != 1.0f ||
        !IsF32(b->output(0))) {
      continue;
    }
    if (gemm || *be == ir::FusedEpilogue::kNone || *be == ir::FusedEpilogue::kDRelu) {
      p.back = b;
      break;
    }
    *why = absl::StrCat("the data gradient ", b->Describe(), " has the epilogue ", ir::FusedEpilogueName(*be),
                        " (a bias gradient or an activation the kernel does not apply)");
    return std::nullopt;
  }
  if (p.back == nullptr) {
    *why = absl::StrCat("no ottr::FusedGemm none / drelu or Gemm reads dlogits ", d->name(), " and the weight ",
                        w->name(), " (the data gradient)");
    return std::nullopt;
  }
  if (p.back->num_inputs() <= 3 || p.back->input(3) == nullptr) p.act = ReluBackwardThroughX(p.back, f->input(0));
  const int64_t features = ir::StaticDims(*f->input(0)->type().shape)[1];
  const bool col_sums = p.act != nullptr && p.act->num_outputs() > 1;
  if (!ir::LinearSceFits(classes, features, col_sums)) {
    *why = absl::StrCat("the weight of ", classes, " x ", features, " does not fit the fused kernel's ",
                        ir::kLinearSceMaxSmemBytes, " bytes of shared memory (with ", ir::kLinearSceWarps,
                        " rows of x", col_sums ? " and of column sums)" : ")");
    return std::nullopt;
  }
  p.fwd = f;
  return p;
}

absl::Status RewriteLinear(ir::Graph& g, const LinearPlan& p, std::ostream* remarks) {
  Node* f = p.fwd;
  Node* s = p.sce;
  Node* b = p.back;
  Node* r = p.act;
  std::map<std::string, ir::Attribute> attrs;
  attrs["transB"] = ir::Attribute(static_cast<int64_t>(f->GetInt("transB", 0) != 0 ? 1 : 0));
  for (const char* a : {"ignore_index", "label_smoothing", "classes"}) {
    if (s->attr(a) != nullptr) attrs[a] = *s->attr(a);
  }
  if (r != nullptr) attrs["relu_x"] = ir::Attribute(int64_t{1});
  Value* mask = b->num_inputs() > 3 ? b->input(3) : nullptr;
  std::vector<Value*> inputs = {f->input(0), f->input(1), f->input(2), s->input(1), s->input(2)};
  if (mask != nullptr) inputs.push_back(mask);
  // What the node's outputs replace: the loss, dlogits, dx (through the ReLU when r), dbias.
  std::vector<Value*> old = {s->output(0), s->output(1), r != nullptr ? r->output(0) : b->output(0)};
  if (r != nullptr && r->num_outputs() > 1) old.push_back(r->output(1));
  std::vector<std::string> names;
  for (const Value* v : old) names.push_back(g.UniqueName(v->name() + ".l"));
  OTTR_ASSIGN_OR_RETURN(Node * n, fusion::AddInferred(g, {"LinearSoftmaxCrossEntropyWithGrad",
                                                          std::string(ir::kOttrDomain), std::move(inputs),
                                                          std::move(names), std::move(attrs), s->origin()}));
  for (size_t i = 0; i < old.size(); ++i) {
    if (n->output(static_cast<int>(i))->type() != old[i]->type()) {
      return absl::InternalError(absl::StrCat(kLinearName, ": output ", i, " is ",
                                              n->output(static_cast<int>(i))->type().ToString(),
                                              ", the value it replaces ", old[i]->type().ToString()));
    }
  }
  std::string what = absl::StrCat(f->Describe(), " + ", s->Describe(), " + ", b->Describe());
  if (r != nullptr) absl::StrAppend(&what, " + ", r->Describe());
  fusion::Renames renames;
  for (size_t i = 0; i < old.size(); ++i) renames.Replace(g, old[i], n->output(static_cast<int>(i)));
  const int64_t classes = s->GetInt("classes", 0);
  std::vector<Node*> dead = {b, s, f};
  if (r != nullptr) dead.insert(dead.begin(), r);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  std::string how = mask != nullptr ? "through the ReLU mask" : "without an activation";
  if (r != nullptr) how = old.size() > 3 ? "through x's ReLU, with its column sums" : "through x's ReLU";
  Remark(remarks, kLinearName,
         absl::StrCat("fused ", what, " -> ottr::LinearSoftmaxCrossEntropyWithGrad (",
                      classes > 0 ? absl::StrCat("the first ", classes, " of ") : "",
                      ir::StaticDims(*n->output(1)->type().shape)[1], " classes, dx ", how, ")"));
  return absl::OkStatus();
}

class FuseLinearScePass : public Pass {
 public:
  absl::string_view name() const override { return kLinearName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "SoftmaxCrossEntropyWithGrad")) roots.push_back(n);
    }
    // A rewrite erases its own loss node and two GEMMs: never another root.
    return fusion::MatchAndRewrite(roots, remarks(), kLinearName, MatchLinear,
                                   [&](const LinearPlan& p) { return RewriteLinear(g, p, remarks()); });
  }
};

// --- count-labels-early ------------------------------------------------------------------------

constexpr char kCountName[] = "count-labels-early";

struct CountPlan {
  Node* sce = nullptr;  // ottr::SoftmaxCrossEntropyWithGrad
};

// The fused node needs dloss / count before it writes dlogits; where its kernel's grid has more
// than one block (ir::SceOneBlockRows), the blocks count the labels together and wait for each
// other: a cooperative launch with a grid-wide barrier on the step's critical path (the small MLP
// at batch 8192: 9.6 µs for 0.4 MB of logits). The labels are an input of the step, so their count
// can be made at its start, off that path. Not where the node also sums dlogits' columns
// (fuse-sce-bgrad), whose blocks wait for each other anyway.
std::optional<CountPlan> MatchCount(Node* s, std::string* why) {
  if (s->num_inputs() > 3 && s->input(3) != nullptr) {
    *why = "it already reads the labels' count";
    return std::nullopt;
  }
  if (s->num_outputs() > 2) {
    // Its blocks still wait for each other to add the column sums: the count would only add a
    // launch (the MLP 4096x4 at batch 4096 on an H100: 5039.4, 5045.3 µs against 5008.9, 5009.3).
    *why = "it also sums the columns of dlogits (fuse-sce-bgrad), a grid-wide wait the count does not remove";
    return std::nullopt;
  }
  const ir::TensorType& logits = s->input(0)->type();
  if (!logits.is_static() || logits.shape->size() != 2) {
    *why = absl::StrCat("the logits ", logits.ToString(), " are not a static [N, C]");
    return std::nullopt;
  }
  const int64_t n = (*logits.shape)[0].value(), ld = (*logits.shape)[1].value();
  if (n <= ir::SceOneBlockRows(ld)) {
    *why = absl::StrCat(n, " rows of ", ld, " run as one block, which counts the labels itself (up to ",
                        ir::SceOneBlockRows(ld), ")");
    return std::nullopt;
  }
  return CountPlan{s};
}

absl::Status RewriteCount(ir::Graph& g, const CountPlan& p, std::ostream* remarks) {
  Node* s = p.sce;
  Value* labels = s->input(1);
  const int64_t ignore = s->GetInt("ignore_index", -100);
  OTTR_ASSIGN_OR_RETURN(Node * count,
                        fusion::AddInferred(g, {"CountLabels", std::string(ir::kOttrDomain), {labels},
                                                {g.UniqueName(labels->name() + ".count")},
                                                {{"ignore_index", ir::Attribute(ignore)}}, s->origin()}));
  std::vector<Value*> inputs = {s->input(0), s->input(1), s->input(2), count->output(0)};
  std::vector<std::string> names;
  for (int i = 0; i < s->num_outputs(); ++i) names.push_back(g.UniqueName(s->output(i)->name() + ".c"));
  OTTR_ASSIGN_OR_RETURN(Node * f, fusion::AddInferred(g, {"SoftmaxCrossEntropyWithGrad", std::string(ir::kOttrDomain),
                                                          inputs, names, s->attrs(), s->origin()}));
  const std::string what = s->Describe();
  fusion::Renames renames;
  for (int i = 0; i < s->num_outputs(); ++i) renames.Replace(g, s->output(i), f->output(i));
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, {s}));
  renames.Apply(g);
  Remark(remarks, kCountName,
         absl::StrCat(what, " reads the labels' count from ottr::CountLabels(", labels->name(), ")"));
  return absl::OkStatus();
}

class CountLabelsEarlyPass : public Pass {
 public:
  absl::string_view name() const override { return kCountName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "SoftmaxCrossEntropyWithGrad")) roots.push_back(n);
    }
    return fusion::MatchAndRewrite(roots, remarks(), kCountName, MatchCount,
                                   [&](const CountPlan& p) { return RewriteCount(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateCountLabelsEarlyPass() { return std::make_unique<CountLabelsEarlyPass>(); }
std::unique_ptr<Pass> CreateFuseSceGradPass() { return std::make_unique<FuseSceGradPass>(); }
std::unique_ptr<Pass> CreateFuseSceBgradPass() { return std::make_unique<FuseSceBgradPass>(); }
std::unique_ptr<Pass> CreateFuseLinearScePass() { return std::make_unique<FuseLinearScePass>(); }

}  // namespace ottr::passes
