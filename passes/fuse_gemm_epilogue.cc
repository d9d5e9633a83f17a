// "fuse-gemm-epilogue": a linear layer's GEMM, bias add and activation become one
// ottr::FusedGemm (ir/fused_gemm.h), one cublasLtMatmul with a BIAS / RELU_BIAS / GELU_BIAS
// epilogue on CUDA.
//
//   before:  %h : f32[128,512] = Gemm(%x, %w, %b) {transB = 1}
//            %a : f32[128,512] = Relu(%h)
//   after:   %a : f32[128,512] = ottr::FusedGemm(%x, %w, %b) {epilogue = "relu_bias", transB = 1}
//
// Roots are Gemm (bias = C when C is [N] or [1, N] and beta = 1) and 2-D MatMul (bias = the other
// operand of the Add that is its only reader, [N] or [1, N]), and the ottr::FusedGemm "bias" and
// "none" that fold-gemm-casts makes of 16-bit GEMMs with an f32 product (taken like Gemm with C
// and like MatMul; output_type is kept, the bias has that type):
//   before:  %h : f32[128,512] = ottr::FusedGemm(%x.bf16, %w.bf16, %b) {epilogue = "bias", output_type = 1, transB = 1}
//            %a : f32[128,512] = Relu(%h)
//   after:   %a : f32[128,512] = ottr::FusedGemm(%x.bf16, %w.bf16, %b) {epilogue = "relu_bias", output_type = 1,
//                                                                     transB = 1} The activation is fused when the
// biased value's only reader is Relu or Gelu {approximate = "tanh"} (cuBLASLt's GELU is the tanh
// form). When the backward also reads the GELU pre-activation (GeluGrad), the gelu_aux_bias
// variant writes it as a second output; ReLU's backward (ReluGrad) reads Relu's output, which the
// fused node still produces, so relu_bias suffices (fuse-gemm-dact-bgrad later switches it to
// relu_aux_bias when it fuses the backward). Values that are graph outputs or state updates are
// never dropped.
//
// Preconditions: static shapes (the training pipeline has bound the batch). Runs after autodiff:
// FusedGemm has no gradient rule.
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

constexpr char kName[] = "fuse-gemm-epilogue";

// [N] or [1, N] of element type t.
bool IsBiasRow(const ir::TensorType& b, ir::DType t, int64_t n) {
  if (!b.is_static() || b.dtype != t) return false;
  const std::vector<int64_t> d = ir::StaticDims(*b.shape);
  return (d.size() == 1 && d[0] == n) || (d.size() == 2 && d[0] == 1 && d[1] == n);
}

struct Plan {
  Node* root = nullptr;
  Value* bias = nullptr;
  Node* add = nullptr;  // the bias Add (MatMul / Gemm without C), else null
  Node* act = nullptr;  // the fused Relu / Gelu, else null
  FusedEpilogue epilogue = FusedEpilogue::kBias;
  std::string note;     // why the activation was not fused, if it was not
};

// m·n·k above which activation epilogues are not fused (see Match): float32 (TF32) GEMMs and
// 16-bit ones.
constexpr double kLargeF32GemmMacs = 1e9;
constexpr double kLargeGemmMacs = 1e10;

// `p`, unless the root already is the bias-only FusedGemm the plan would make (nothing to fuse):
// then nullopt, with the plan's note as the reason.
std::optional<Plan> Unless(bool already_fused, const Plan& p, std::string* why) {
  if (!already_fused) return p;
  *why = absl::StrCat("already a bias epilogue; activation not fused: ",
                      p.note.empty() ? "no Relu / Gelu reads the product" : p.note);
  return std::nullopt;
}

// Matches the pattern at `root` (Gemm, MatMul, FusedGemm bias / none); on failure returns nullopt
// and the reason.
std::optional<Plan> Match(Node* root, bool large_relu, bool large_relu_f32, std::string* why) {
  Plan p;
  p.root = root;
  const std::optional<FusedEpilogue> fe = fusion::FusedEpilogueOf(root);
  // Gemm and FusedGemm "bias" carry their bias as input 2; MatMul and FusedGemm "none" are
  // followed by the bias Add.
  const bool gemm = fusion::IsOnnx(root, "Gemm") || fe == FusedEpilogue::kBias;
  Value* y = root->output(0);
  const ir::TensorType& yt = y->type();
  if (std::string d = fusion::UnsupportedDType(yt.dtype); !d.empty()) {
    *why = d;
    return std::nullopt;
  }
  const ir::TensorType& at = root->input(0)->type();
  const ir::TensorType& bt = root->input(1)->type();
  if (!at.is_static() || !bt.is_static() || at.rank() != 2 || bt.rank() != 2 || !yt.is_static()) {
    *why = absl::StrCat("operands ", at.ToString(), " and ", bt.ToString(), " are not static matrices");
    return std::nullopt;
  }
  const int64_t n = ir::StaticDims(*yt.shape)[1];
  Value* tail = y;  // the biased value
  if (gemm && root->has_input(2)) {
    Value* c = root->input(2);
    if (root->GetFloat("beta", 1.0f) != 1.0f || !IsBiasRow(c->type(), yt.dtype, n)) {
      *why = absl::StrCat("wrong bias shape: C ", c->type().ToString(), " with beta ", root->GetFloat("beta", 1.0f),
                          " is not a bias row [", n, "] of the product's type ", yt.ToString(), " added once");
      return std::nullopt;
    }
    p.bias = c;
  } else {
    Node* add = fusion::SoleUser(y);
    if (add == nullptr) {
      *why = absl::StrCat("no bias: the product ", y->name(), " has ", y->uses().size(),
                          " users (or is a graph output), not one Add");
      return std::nullopt;
    }
    if (!fusion::IsOnnx(add, "Add")) {
      *why = absl::StrCat("no bias: the product's only user is ", add->Describe(), ", not Add");
      return std::nullopt;
    }
    Value* other = add->input(add->input(0) == y ? 1 : 0);
    if (other == y || !IsBiasRow(other->type(), yt.dtype, n) || add->output(0)->type() != yt) {
      *why = absl::StrCat("wrong bias shape: ", add->Describe(), " adds ", other->type().ToString(),
                          ", not a row [", n, "] of the product's type ", yt.ToString());
      return std::nullopt;
    }
    p.bias = other;
    p.add = add;
    tail = add->output(0);
  }
  // The activation: the one Relu / Gelu reading the biased value.
  if (tail->graph()->IsRoot(tail) && !tail->uses().empty()) {
    p.note = "the biased value is also a graph output";
    return Unless(fe == FusedEpilogue::kBias, p, why);
  }
  Node* act = nullptr;
  for (const ir::Use& u : tail->uses()) {
    if (u.index == 0 && (fusion::IsOnnx(u.node, "Relu") || fusion::IsOnnx(u.node, "Gelu"))) act = act ? act : u.node;
  }
  if (act == nullptr) return Unless(fe == FusedEpilogue::kBias, p, why);
  {
    // Measured on the H200 (cuBLASLt 13.1, TF32): at 4096x4096x4096 RELU_AUX_BIAS ran 460 us
    // against 312 us for the plain GEMM + 37 us ReLU, and DRELU_BGRAD 447 us against 317 + 51 +
    // 23 us. In TF32 the small MLP at batch 8192 (8192x512x784 and 8192x512x512) also ran faster
    // unfused (264.7 against 293.0 µs per step, bench/compare of 2026-12-01), at batch 128 the
    // same; in bf16 the fused forms win up to 4096³ excluded (there DRELU_BGRAD 264 µs against
    // 158 + 26). Above kLargeF32GemmMacs (float32) or kLargeGemmMacs (16-bit) only the bias is
    // fused.
    const std::vector<int64_t> a = ir::StaticDims(*at.shape);
    const int64_t k = root->GetInt("transA", 0) != 0 ? a[0] : a[1];
    const int64_t m = ir::StaticDims(*yt.shape)[0];
    const double large = at.dtype == ir::DType::kFloat32 ? kLargeF32GemmMacs : kLargeGemmMacs;
    // With `large_relu` a 16-bit ReLU stays in the epilogue (RELU_BIAS, no mask: the ReLU's
    // backward reads the output, and fuse-gemm-dact-bgrad declines GEMMs this large); with
    // `large_relu_f32` a float32 (TF32) one does.
    const bool keep = (at.dtype == ir::DType::kFloat32 ? large_relu_f32 : large_relu) && fusion::IsOnnx(act, "Relu");
    if (!keep && static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) > large) {
      p.note = absl::StrCat("large GEMM (", m, "x", n, "x", k, "): cuBLASLt's activation epilogues are "
                            "slower there than a separate activation kernel; bias only");
      return Unless(fe == FusedEpilogue::kBias, p, why);
    }
  }
  const int others = static_cast<int>(tail->uses().size()) - 1;
  if (fusion::IsOnnx(act, "Gelu") && act->GetString("approximate", "none") != "tanh") {
    p.note = "Gelu is the erf form; cuBLASLt's GELU epilogue is the tanh approximation";
    return Unless(fe == FusedEpilogue::kBias, p, why);
  }
  if (fusion::IsOnnx(act, "Relu")) {
    if (others > 0) {
      p.note = absl::StrCat("the pre-activation ", tail->name(), " has ", others,
                            " other user(s), and ReLU's aux output is a bitmask, not the values");
      return Unless(fe == FusedEpilogue::kBias, p, why);
    }
    p.act = act;
    p.epilogue = FusedEpilogue::kReluBias;
    return p;
  }
  if (others > 0) {
    if (n % 8 != 0) {
      p.note = absl::StrCat("misaligned: the GELU pre-activation (read by ", others,
                            " other user(s)) would be an aux of leading dimension ", n,
                            ", not a multiple of 8 elements (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)");
      return Unless(fe == FusedEpilogue::kBias, p, why);
    }
    p.epilogue = FusedEpilogue::kGeluAuxBias;
  } else {
    p.epilogue = FusedEpilogue::kGeluBias;
  }
  p.act = act;
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* root = p.root;
  Value* tail = p.add ? p.add->output(0) : root->output(0);
  Value* out = p.act ? p.act->output(0) : tail;
  std::map<std::string, ir::Attribute> attrs = {{"epilogue", ir::Attribute(ir::FusedEpilogueName(p.epilogue))}};
  if (root->GetInt("transA", 0) != 0) attrs["transA"] = ir::Attribute(int64_t{1});
  if (root->GetInt("transB", 0) != 0) attrs["transB"] = ir::Attribute(int64_t{1});
  if (root->GetFloat("alpha", 1.0f) != 1.0f) attrs["alpha"] = ir::Attribute(root->GetFloat("alpha", 1.0f));
  fusion::CopyOutputType(root, attrs);
  std::vector<std::string> names = {g.UniqueName(out->name() + ".fused")};
  if (p.epilogue == FusedEpilogue::kGeluAuxBias) names.push_back(g.UniqueName(tail->name() + ".fused"));
  OTTR_ASSIGN_OR_RETURN(Node * f, fusion::AddInferred(g, {std::string(ir::kFusedGemmOp), std::string(ir::kOttrDomain),
                                                          {root->input(0), root->input(1), p.bias}, names,
                                                          std::move(attrs), root->origin()}));
  std::string what = root->Describe();
  if (p.add) absl::StrAppend(&what, " + ", p.add->Describe());
  if (p.act) absl::StrAppend(&what, " + ", p.act->Describe());
  fusion::Renames renames;
  renames.Replace(g, out, f->output(0));
  if (p.epilogue == FusedEpilogue::kGeluAuxBias) renames.Replace(g, tail, f->output(1));
  std::vector<Node*> dead;
  if (p.act) dead.push_back(p.act);
  if (p.add) dead.push_back(p.add);
  dead.push_back(root);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::FusedGemm ", ir::FusedEpilogueName(p.epilogue),
                      p.note.empty() ? "" : absl::StrCat(" (activation not fused: ", p.note, ")")));
  return absl::OkStatus();
}

class FuseGemmEpiloguePass : public Pass {
 public:
  FuseGemmEpiloguePass(bool large_relu, bool large_relu_f32) : large_relu_(large_relu), large_relu_f32_(large_relu_f32) {}
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    // A rewrite erases only its own root and the Add and activation after it, never another
    // Gemm/MatMul, so the pointers in `roots` stay valid.
    std::vector<Node*> roots;
    for (Node* n : order) {
      const std::optional<FusedEpilogue> fe = fusion::FusedEpilogueOf(n);
      if (fusion::IsOnnx(n, "Gemm") || fusion::IsOnnx(n, "MatMul") || fe == FusedEpilogue::kBias ||
          fe == FusedEpilogue::kNone) {
        roots.push_back(n);
      }
    }
    return fusion::MatchAndRewrite(
        roots, remarks(), kName, [&](Node* n, std::string* why) { return Match(n, large_relu_, large_relu_f32_, why); },
        [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }

 private:
  bool large_relu_;
  bool large_relu_f32_;
};

}  // namespace

std::unique_ptr<Pass> CreateFuseGemmEpiloguePass(bool large_relu, bool large_relu_f32) {
  return std::make_unique<FuseGemmEpiloguePass>(large_relu, large_relu_f32);
}

}  // namespace ottr::passes
