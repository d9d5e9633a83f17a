// The backward GEMM fusions (fusion_passes.h): "fuse-gemm-dact-bgrad" and "fuse-gemm-bgrad".
//
// fuse-gemm-dact-bgrad, for a layer whose forward is a fused ReLU (or tanh GELU) GEMM:
//   before:  %a, = ottr::FusedGemm(%x, %w1, %b1) {epilogue = "relu_bias", transB = 1}
//            ...
//            %da = Gemm(%dy, %w2)                         (only reader: the ReluGrad)
//            %dh = ottr::ReluGrad(%da, %a)
//            %s = ReduceSum(%dh, [0]) {keepdims = 1}      %b1.grad = Reshape(%s, [512])
//   after:   %a, %a.relu_mask = ottr::FusedGemm(%x, %w1, %b1) {epilogue = "relu_aux_bias", transB = 1}
//            %dh, %b1.grad = ottr::FusedGemm(%dy, %w2, _, %a.relu_mask) {epilogue = "drelu_bgrad"}
// ReluGrad is dY · [Y > 0] with Y the Relu output, and the mask bit is [pre-activation > 0]: the
// same predicate. GeluGrad reads the pre-activation, which the forward's gelu_aux_bias writes:
//            %dh, %b1.grad = ottr::FusedGemm(%dy, %w2, _, %h) {epilogue = "dgelu_bgrad"}
// Without a bias-gradient ReduceSum of %dh the epilogue is drelu / dgelu.
//
// fuse-gemm-bgrad, for a bias gradient left over:
//   before:  %w.grad = Gemm(%dy, %x) {transA = 1}         %s = ReduceSum(%dy, [0]) {keepdims = 1}
//            %b.grad = Reshape(%s, [10])
//   after:   %w.grad, %b.grad = ottr::FusedGemm(%dy, %x) {epilogue = "bgrada", transA = 1}
// The sum must run over the GEMM's k dimension of the operand it reads: A = dY with transA (sum
// over A's axis 0) -> bgrada (cuBLASLt BGRADB), or B = dY without transB (axis 0) -> bgradb
// (cuBLASLt BGRADA). cuBLASLt's bias gradient is not scaled by alpha: alpha must be 1.
// Plain GEMMs are ONNX Gemms without C and ottr::FusedGemm "none" (fold-gemm-casts): the fused
// node keeps output_type, and a bias gradient of another type must be cast to it (its Cast folds).
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::FusedEpilogue;
using ir::Node;
using ir::Value;

std::map<std::string, ir::Attribute> GemmAttrs(const Node* g, FusedEpilogue e) {
  std::map<std::string, ir::Attribute> attrs = {{"epilogue", ir::Attribute(ir::FusedEpilogueName(e))}};
  if (g->GetInt("transA", 0) != 0) attrs["transA"] = ir::Attribute(int64_t{1});
  if (g->GetInt("transB", 0) != 0) attrs["transB"] = ir::Attribute(int64_t{1});
  if (g->GetFloat("alpha", 1.0f) != 1.0f) attrs["alpha"] = ir::Attribute(g->GetFloat("alpha", 1.0f));
  fusion::CopyOutputType(g, attrs);
  return attrs;
}

// --- fuse-gemm-dact-bgrad -----------------------------------------------------------------------

constexpr char kDAct[] = "fuse-gemm-dact-bgrad";

struct DActPlan {
  Node* grad = nullptr;     // ReluGrad / GeluGrad
  Node* gemm = nullptr;     // dX = Gemm(dY, W) feeding it
  Node* forward = nullptr;  // the fused forward GEMM
  bool relu = true;
  std::optional<fusion::BiasGradMatch> bias;
  bool bias_to_weight_gemm = false;  // the bias gradient left to fuse-gemm-bgrad
};

struct BgradPlan {
  fusion::BiasGradMatch bias;
  Node* gemm = nullptr;
  FusedEpilogue epilogue = FusedEpilogue::kBgradA;
};
std::optional<BgradPlan> MatchBgrad(Node* s, std::string* why);  // fuse-gemm-bgrad's match, below

std::optional<DActPlan> MatchDAct(Node* r, bool bgrad_to_weight_gemm, std::string* why) {
  DActPlan p;
  p.grad = r;
  p.relu = r->op_type() == "ReluGrad";
  Value* da = r->input(0);
  Value* z = r->input(1);
  const ir::TensorType& t = r->output(0)->type();
  if (std::string d = fusion::UnsupportedDType(t.dtype); !d.empty()) {
    *why = d;
    return std::nullopt;
  }
  if (!p.relu && r->GetString("approximate", "none") != "tanh") {
    *why = "GeluGrad of the erf form (cuBLASLt's DGELU is the tanh approximation)";
    return std::nullopt;
  }
  Node* f = z->producer();
  const std::optional<FusedEpilogue> fe = fusion::FusedEpilogueOf(f);
  if (p.relu) {
    if (!fe || (*fe != FusedEpilogue::kReluBias && *fe != FusedEpilogue::kReluAuxBias) || z->producer_index() != 0) {
      *why = absl::StrCat("ReluGrad reads ", z->name(), ", not the output of a fused relu GEMM");
      return std::nullopt;
    }
  } else if (!fe || *fe != FusedEpilogue::kGeluAuxBias || z->producer_index() != 1) {
    *why = absl::StrCat("GeluGrad reads ", z->name(), ", not the pre-activation written by a gelu_aux_bias GEMM");
    return std::nullopt;
  }
  p.forward = f;
  Node* g = da->producer();
  if (!fusion::IsPlainGemm(g)) {
    *why = absl::StrCat("dY ", da->name(), " is not made by a plain Gemm (",
                        g ? g->Describe() : std::string("no producer"), ")");
    return std::nullopt;
  }
  if (fusion::SoleUser(da) != r) {
    *why = absl::StrCat("two users: ", da->name(), " is read by ", da->uses().size(),
                        " nodes (or is a graph output), the epilogue would overwrite it");
    return std::nullopt;
  }
  if (da->type() != t || da->type() != f->output(0)->type()) {
    *why = absl::StrCat("shapes differ: ", da->type().ToString(), " vs ", f->output(0)->type().ToString());
    return std::nullopt;
  }
  // H200 (cuBLASLt 13.1): DRELU_BGRAD on the bf16 4096³ dX GEMM took 264 µs against 158 µs for
  // the plain GEMM + 26 µs ReluGrad (+ its bias sum); TF32 at 4096³ 447 µs against 317 + 51 + 23.
  {
    const std::vector<int64_t> dd = ir::StaticDims(*da->type().shape);  // the product [m, n]
    const std::vector<int64_t> ga = ir::StaticDims(*g->input(0)->type().shape);
    const double macs = static_cast<double>(dd[0]) * static_cast<double>(dd[1]) *
                        static_cast<double>(g->GetInt("transA", 0) != 0 ? ga[0] : ga[1]);
    const double large = t.dtype == ir::DType::kFloat32 ? 1e9 : 1e10;
    if (macs > large) {
      *why = absl::StrCat("large dX GEMM (", macs, " multiply-adds > ", large,
                          "): cuBLASLt's DRELU/DGELU epilogues are slower there than the plain GEMM and a separate "
                          "activation backward");
      return std::nullopt;
    }
    // The forward would turn from relu_bias into relu_aux_bias: above the same bound that is
    // slower than RELU_BIAS (TF32 4096³: 460 against 312 + 37 µs), so a large forward that kept
    // its ReLU without a mask (fuse-gemm-epilogue's large_relu) keeps it that way.
    const std::vector<int64_t> fd = ir::StaticDims(*f->output(0)->type().shape);
    const std::vector<int64_t> fa = ir::StaticDims(*f->input(0)->type().shape);
    const double fmacs = static_cast<double>(fd[0]) * static_cast<double>(fd[1]) *
                         static_cast<double>(f->GetInt("transA", 0) != 0 ? fa[0] : fa[1]);
    if (p.relu && *fe == FusedEpilogue::kReluBias && fmacs > large) {
      *why = absl::StrCat("the forward GEMM is large (", fmacs, " multiply-adds > ", large,
                          "): it keeps RELU_BIAS without the mask DRELU would read");
      return std::nullopt;
    }
  }
  p.gemm = g;
  p.bias = fusion::FindBiasGrad(r->output(0), 0);
  if (p.bias && bgrad_to_weight_gemm && t.dtype == ir::DType::kFloat32) {
    // TF32 steps: the layer's weight-gradient GEMM, which fuse-gemm-bgrad gives the bias gradient
    // when it can (tried here with its own rules), runs beside the data gradients on a side
    // stream, where DRELU_BGRAD's column sums (a cross-CTA reduction for tiles shorter than the
    // batch) sit on the backward's critical path. H200, small MLP at batch 128: fc2's data
    // gradient 9.06 -> 6.05 µs and fc3's 6.02 -> 3.78, the step 55.4 -> 52.6 µs (bench/RESULTS.md
    // 2026-12-03).
    std::string unused;
    if (MatchBgrad(p.bias->chain[0], &unused)) {
      p.bias.reset();
      p.bias_to_weight_gemm = true;
    }
  }
  return p;
}

absl::Status RewriteDAct(ir::Graph& g, DActPlan& p, std::ostream* remarks) {
  Value* aux = nullptr;
  fusion::Renames renames;
  std::string forward_note;
  if (p.relu) {
    if (*fusion::FusedEpilogueOf(p.forward) == FusedEpilogue::kReluBias) {
      // The forward now also writes the ReLU mask.
      Node* f = p.forward;
      std::map<std::string, ir::Attribute> attrs = f->attrs();
      attrs["epilogue"] = ir::Attribute(ir::FusedEpilogueName(FusedEpilogue::kReluAuxBias));
      OTTR_ASSIGN_OR_RETURN(
          Node * f2, fusion::AddInferred(g, {f->op_type(), f->domain(), f->inputs(),
                                             {g.UniqueName(f->output(0)->name() + ".fused"),
                                              g.UniqueName(f->output(0)->name() + ".relu_mask")},
                                             std::move(attrs), f->origin()}));
      renames.Replace(g, f->output(0), f2->output(0));
      OTTR_RETURN_IF_ERROR(g.EraseNode(f));
      renames.Apply(g);
      p.forward = f2;
      forward_note = absl::StrCat("; ", f2->Describe(), " now relu_aux_bias");
    }
    aux = p.forward->output(1);
  } else {
    aux = p.forward->output(1);
  }
  const FusedEpilogue e = p.relu ? (p.bias ? FusedEpilogue::kDReluBgrad : FusedEpilogue::kDRelu)
                                 : (p.bias ? FusedEpilogue::kDGeluBgrad : FusedEpilogue::kDGelu);
  Node* gemm = p.gemm;
  std::vector<std::string> names = {g.UniqueName(p.grad->output(0)->name() + ".fused")};
  if (p.bias) names.push_back(g.UniqueName(p.bias->result->name() + ".fused"));
  OTTR_ASSIGN_OR_RETURN(Node * b, fusion::AddInferred(g, {std::string(ir::kFusedGemmOp), std::string(ir::kOttrDomain),
                                                          {gemm->input(0), gemm->input(1), nullptr, aux}, names,
                                                          GemmAttrs(gemm, e), gemm->origin()}));
  std::string what = absl::StrCat(gemm->Describe(), " + ", p.grad->Describe());
  renames.Replace(g, p.grad->output(0), b->output(0));
  std::vector<Node*> dead;
  if (p.bias) {
    absl::StrAppend(&what, " + ", p.bias->chain[0]->Describe());
    renames.Replace(g, p.bias->result, b->output(1));
    dead.insert(dead.end(), p.bias->chain.rbegin(), p.bias->chain.rend());
  }
  dead.push_back(p.grad);
  dead.push_back(gemm);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kDAct,
         absl::StrCat("fused ", what, " -> ottr::FusedGemm ", ir::FusedEpilogueName(e), forward_note,
                      p.bias                  ? ""
                      : p.bias_to_weight_gemm ? " (the bias gradient left to the weight-gradient GEMM: fuse-gemm-bgrad)"
                                              : " (no bias gradient of this layer to fuse)"));
  return absl::OkStatus();
}

class FuseGemmDActBgradPass : public Pass {
 public:
  explicit FuseGemmDActBgradPass(bool bgrad_to_weight_gemm) : bgrad_to_weight_gemm_(bgrad_to_weight_gemm) {}
  absl::string_view name() const override { return kDAct; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    // A rewrite erases its own ReluGrad/GeluGrad, a Gemm, a ReduceSum chain and (replaced) a
    // forward FusedGemm: never another candidate, so `roots` stays valid.
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "ReluGrad") || fusion::IsOttr(n, "GeluGrad")) roots.push_back(n);
    }
    return fusion::MatchAndRewrite(
        roots, remarks(), kDAct, [&](Node* r, std::string* why) { return MatchDAct(r, bgrad_to_weight_gemm_, why); },
        [&](DActPlan& p) { return RewriteDAct(g, p, remarks()); });
  }

 private:
  bool bgrad_to_weight_gemm_;
};

// --- fuse-gemm-bgrad ----------------------------------------------------------------------------

constexpr char kBgrad[] = "fuse-gemm-bgrad";
constexpr double kLargeF32BgradMacs = 1e9;


std::optional<BgradPlan> MatchBgrad(Node* s, std::string* why) {
  BgradPlan p;
  int axis = -1;
  std::optional<fusion::BiasGradMatch> m = fusion::MatchBiasGrad(s, &axis, why);
  if (!m) return std::nullopt;
  p.bias = *m;
  Value* d = s->input(0);
  if (std::string t = fusion::UnsupportedDType(d->type().dtype); !t.empty()) {
    *why = t;
    return std::nullopt;
  }
  for (const ir::Use& u : d->uses()) {
    Node* g = u.node;
    if (!fusion::IsPlainGemm(g) || g->GetFloat("alpha", 1.0f) != 1.0f || g->input(0) == g->input(1)) continue;
    const bool ta = g->GetInt("transA", 0) != 0, tb = g->GetInt("transB", 0) != 0;
    // cuBLASLt (13.1, H200) has kernels for bgrada only with transA and for bgradb only
    // without transB (CUBLAS_STATUS_NOT_SUPPORTED otherwise): dW = dYᵀ·X and dW = Xᵀ·dY.
    if (!(u.index == 0 && ta && axis == 0) && !(u.index == 1 && !tb && axis == 0)) continue;
    // The bias gradient comes out in the GEMM's output type. A GEMM that writes f32 from 16-bit
    // operands (fold-gemm-casts) takes the sum's widening Cast along: the sum of dY is then
    // rounded once to f32 instead of to the 16-bit type.
    const ir::DType out = g->output(0)->type().dtype;
    if (p.bias.result->type().dtype != out && !fusion::AppendCastTo(p.bias, out)) continue;
    // A 16-bit BGRAD whose bias has fewer than 64 elements runs on a slow cuBLASLt kernel (H200,
    // cuBLASLt 13.1: bf16 bgrada of a 10 x 512 x 8192 weight gradient 323 µs, against 19 µs for
    // the same GEMM in TF32 and a few µs for the plain GEMM and a separate sum): left unfused.
    const int64_t bias_elems = p.bias.result->type().is_static()
                                   ? ir::NumElements(ir::StaticDims(*p.bias.result->type().shape))
                                   : 0;
    if (ir::DTypeSize(d->type().dtype) == 2 && bias_elems < 64) {
      *why = absl::StrCat("a 16-bit BGRAD epilogue for a bias of ", bias_elems,
                          " elements (< 64) is slower than the plain GEMM and a separate sum");
      return std::nullopt;
    }
    // A float32 (TF32) BGRAD on a large GEMM runs on slower kernels than the plain GEMM: the MLP
    // 4096x4 step took 4933 µs with its five BGRADA weight gradients against 4848 µs with plain
    // GEMMs and separate sums (H200, cuBLASLt 13.1, bench/compare of 2026-12-01).
    if (d->type().dtype == ir::DType::kFloat32) {
      const std::vector<int64_t> ad = ir::StaticDims(*g->input(0)->type().shape);
      const std::vector<int64_t> bd = ir::StaticDims(*g->input(1)->type().shape);
      const bool ta = g->GetInt("transA", 0) != 0, tb = g->GetInt("transB", 0) != 0;
      const double macs = static_cast<double>(ta ? ad[1] : ad[0]) * static_cast<double>(ta ? ad[0] : ad[1]) *
                          static_cast<double>(tb ? bd[0] : bd[1]);
      if (macs > kLargeF32BgradMacs) {
        *why = absl::StrCat("a float32 (TF32) BGRAD epilogue on a GEMM of ", macs,
                            " multiply-adds (> 1e9) is slower than the plain GEMM and a separate sum");
        return std::nullopt;
      }
    }
    p.gemm = g;
    p.epilogue = u.index == 0 ? FusedEpilogue::kBgradA : FusedEpilogue::kBgradB;
    return p;
  }
  *why = absl::StrCat("no plain Gemm (alpha 1) reads ", d->name(), " with the summed axis ", axis,
                      " as its k dimension in a layout cuBLASLt's BGRAD epilogues support (A transposed or B not)",
                      " and an output type the sum has or is cast to");
  return std::nullopt;
}

absl::Status RewriteBgrad(ir::Graph& g, const BgradPlan& p, std::ostream* remarks) {
  Node* gemm = p.gemm;
  OTTR_ASSIGN_OR_RETURN(
      Node * b, fusion::AddInferred(g, {std::string(ir::kFusedGemmOp), std::string(ir::kOttrDomain),
                                        {gemm->input(0), gemm->input(1)},
                                        {g.UniqueName(gemm->output(0)->name() + ".fused"),
                                         g.UniqueName(p.bias.result->name() + ".fused")},
                                        GemmAttrs(gemm, p.epilogue), gemm->origin()}));
  const std::string what = absl::StrCat(gemm->Describe(), " + ", p.bias.chain[0]->Describe());
  fusion::Renames renames;
  renames.Replace(g, gemm->output(0), b->output(0));
  renames.Replace(g, p.bias.result, b->output(1));
  std::vector<Node*> dead(p.bias.chain.rbegin(), p.bias.chain.rend());
  dead.push_back(gemm);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kBgrad, absl::StrCat("fused ", what, " -> ottr::FusedGemm ", ir::FusedEpilogueName(p.epilogue)));
  return absl::OkStatus();
}

class FuseGemmBgradPass : public Pass {
 public:
  absl::string_view name() const override { return kBgrad; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOnnx(n, "ReduceSum")) roots.push_back(n);
    }
    // Erasures remove only the matched ReduceSum (and its Reshape, Gemm): other roots survive.
    return fusion::MatchAndRewrite(roots, remarks(), kBgrad, MatchBgrad,
                                   [&](const BgradPlan& p) { return RewriteBgrad(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseGemmDActBgradPass(bool bgrad_to_weight_gemm) {
  return std::make_unique<FuseGemmDActBgradPass>(bgrad_to_weight_gemm);
}
std::unique_ptr<Pass> CreateFuseGemmBgradPass() { return std::make_unique<FuseGemmBgradPass>(); }

}  // namespace ottr::passes
