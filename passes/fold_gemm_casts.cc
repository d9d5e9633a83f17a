// "fold-gemm-casts": a 16-bit GEMM whose product is only widened back to float32 produces float32
// itself (ottr::FusedGemm's output_type, ir/fused_gemm.h), so the Cast kernel disappears and the
// bias, added in the GEMM's epilogue, is the float32 parameter rather than its 16-bit copy.
//
//   before:  %b.bf16 : bf16[512] = Cast(%b) {to = 16}
//            %h.bf16 : bf16[64,512] = Gemm(%x.bf16, %w.bf16, %b.bf16) {transB = 1}
//            %h : f32[64,512] = Cast(%h.bf16) {to = 1}
//   after:   %h : f32[64,512] = ottr::FusedGemm(%x.bf16, %w.bf16, %b) {epilogue = "bias", output_type = 1,
//                                                                  transB = 1}
//
// Roots are the Casts to f32 of output 0 of a Gemm, a 2-D MatMul (epilogue "none", or "bias" for
// Gemm's C when it is a row [N] / [1, N] with beta 1) or an ottr::FusedGemm whose operands are
// bf16 or f16. The 16-bit product must have no other reader (nor be a graph output): it no longer
// exists afterwards. A bias must be a Cast of a float32 value (mixed-precision makes exactly that);
// the Cast is erased when nothing else reads it. A FusedGemm's bias gradient (output 1) changes
// type with Y: it must be unread or read only by its own Cast to f32, which folds too. FusedGemms
// with a GELU pre-activation (gelu_aux_bias, dgelu*) are left alone: the aux would change type.
//
// Runs first among the fusion passes (fusion_passes.h) so that fuse-gemm-epilogue sees the float32
// product of Gemm + bias and can fuse the ReLU/GELU that reads it, and fuse-gemm-dact-bgrad sees
// the float32 dX that ReluGrad reads.
//
// Numerics: the folded GEMM accumulates in float32 and rounds once to float32 where the unfolded
// one rounded once to the 16-bit type (then widened exactly), and it adds the unrounded bias:
//     |y_folded − y_unfolded| ≤ u·|y_unfolded| + |b − round16(b)| ≤ u·(|y| + |b|)
// per element, with u the unit roundoff of the 16-bit type (bf16: 2^-8, f16: 2^-11). The folded
// value is the more accurate one (one float32 rounding, ≤ 2^-24 relative). A reader that casts the
// float32 value back to 16 bits (the next layer's input) sees the same bits as before when the
// bias was exact in 16 bits: rounding is idempotent and ReLU commutes with it.
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::DType;
using ir::FusedEpilogue;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fold-gemm-casts";

bool CastsTo(const Node* n, DType t) {
  return fusion::IsOnnx(n, "Cast") && n->GetInt("to", 0) == ir::DTypeToOnnx(t);
}

struct Plan {
  Node* cast = nullptr;       // Cast(to = f32) of the product
  Node* gemm = nullptr;       // Gemm / MatMul / FusedGemm
  FusedEpilogue epilogue = FusedEpilogue::kNone;
  Value* bias = nullptr;      // the float32 bias of the new node
  Node* bias_cast = nullptr;  // the Cast that made the 16-bit bias
  Node* out1_cast = nullptr;  // FusedGemm: the Cast to f32 of its bias gradient
};

// The float32 source of a 16-bit bias `c`, or null (reason in `why`).
Value* Float32Bias(Value* c, Node** cast, std::string* why) {
  Node* p = c->producer();
  if (!fusion::IsOnnx(p, "Cast") || p->input(0)->type().dtype != DType::kFloat32) {
    *why = absl::StrCat("the bias ", c->name(), " is not a Cast of an f32 value (the f32 output takes an f32 bias)");
    return nullptr;
  }
  *cast = p;
  return p->input(0);
}

// Matches at Cast `cast`. nullopt with an empty `why`: not a Cast of a GEMM product (no remark).
std::optional<Plan> Match(Node* cast, std::string* why) {
  Plan p;
  p.cast = cast;
  Value* x = cast->input(0);
  Node* g = x->producer();
  const bool gemm = fusion::IsOnnx(g, "Gemm"), matmul = fusion::IsOnnx(g, "MatMul");
  const std::optional<FusedEpilogue> fe = fusion::FusedEpilogueOf(g);
  if (!gemm && !matmul && !fe) return std::nullopt;
  p.gemm = g;
  if (!CastsTo(cast, DType::kFloat32)) {
    *why = absl::StrCat("casts to ", ir::DTypeName(cast->output(0)->type().dtype), ", not f32");
    return std::nullopt;
  }
  const DType low = x->type().dtype;
  if (!fusion::IsLowFloat(low) || g->input(0)->type().dtype != low) {
    *why = absl::StrCat("the product ", x->name(), " is ", ir::DTypeName(low), " from ",
                        ir::DTypeName(g->input(0)->type().dtype), " operands, not a 16-bit GEMM");
    return std::nullopt;
  }
  if (x->producer_index() != 0) {
    *why = absl::StrCat(x->name(), " is output ", x->producer_index(), " of ", g->Describe(),
                        ", not its product (it folds with the product's Cast)");
    return std::nullopt;
  }
  if (fusion::SoleUser(x) != cast) {
    *why = absl::StrCat("the 16-bit product ", x->name(), " is read by ", x->uses().size(),
                        " nodes (or is a graph output), not only by this Cast");
    return std::nullopt;
  }
  for (int i : {0, 1}) {
    const ir::TensorType& t = g->input(i)->type();
    if (!t.is_static() || t.rank() != 2) {
      *why = absl::StrCat("operand ", g->input(i)->name(), " ", t.ToString(), " is not a static matrix");
      return std::nullopt;
    }
  }
  if (gemm && g->has_input(2) && g->GetFloat("beta", 1.0f) != 0.0f) {
    Value* c = g->input(2);
    const ir::TensorType& ct = c->type();
    const int64_t n = ir::StaticDims(*x->type().shape)[1];
    const std::vector<int64_t> d = ct.is_static() ? ir::StaticDims(*ct.shape) : std::vector<int64_t>{};
    const bool row = (d.size() == 1 && d[0] == n) || (d.size() == 2 && d[0] == 1 && d[1] == n);
    if (g->GetFloat("beta", 1.0f) != 1.0f || !row) {
      *why = absl::StrCat("C ", ct.ToString(), " with beta ", g->GetFloat("beta", 1.0f), " is not a bias row [", n,
                          "] added once");
      return std::nullopt;
    }
    p.epilogue = FusedEpilogue::kBias;
    p.bias = Float32Bias(c, &p.bias_cast, why);
    if (p.bias == nullptr) return std::nullopt;
  }
  if (fe) {
    p.epilogue = *fe;
    if (*fe == FusedEpilogue::kGeluAuxBias || *fe == FusedEpilogue::kDGelu || *fe == FusedEpilogue::kDGeluBgrad) {
      *why = absl::StrCat("epilogue ", ir::FusedEpilogueName(*fe), ": its GELU pre-activation would change type too");
      return std::nullopt;
    }
    if (g->attr("output_type") != nullptr && g->GetInt("output_type", 0) != ir::DTypeToOnnx(low)) {
      *why = "already has an output_type";
      return std::nullopt;
    }
    if (ir::EpilogueTakesBias(*fe)) {
      p.bias = Float32Bias(g->input(2), &p.bias_cast, why);
      if (p.bias == nullptr) return std::nullopt;
    }
    if (ir::EpilogueWritesBiasGrad(*fe)) {
      Value* db = g->output(1);
      Node* c = fusion::SoleUser(db);
      if (CastsTo(c, DType::kFloat32)) {
        p.out1_cast = c;
      } else if (!db->uses().empty() || db->graph()->IsRoot(db)) {
        *why = absl::StrCat("its bias gradient ", db->name(), " is read other than by one Cast to f32");
        return std::nullopt;
      }
    }
  }
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* gemm = p.gemm;
  std::map<std::string, ir::Attribute> attrs;
  if (fusion::IsOttr(gemm, ir::kFusedGemmOp)) {
    attrs = gemm->attrs();
  } else {
    attrs["epilogue"] = ir::Attribute(ir::FusedEpilogueName(p.epilogue));
    if (gemm->GetInt("transA", 0) != 0) attrs["transA"] = ir::Attribute(int64_t{1});
    if (gemm->GetInt("transB", 0) != 0) attrs["transB"] = ir::Attribute(int64_t{1});
    if (gemm->GetFloat("alpha", 1.0f) != 1.0f) attrs["alpha"] = ir::Attribute(gemm->GetFloat("alpha", 1.0f));
  }
  attrs["output_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(DType::kFloat32)));
  std::vector<Value*> inputs = {gemm->input(0), gemm->input(1)};
  if (p.bias != nullptr) inputs.push_back(p.bias);
  if (ir::EpilogueTakesAux(p.epilogue)) {
    if (inputs.size() == 2) inputs.push_back(nullptr);
    inputs.push_back(gemm->input(3));
  }
  Value* y = p.cast->output(0);
  std::vector<std::string> names = {g.UniqueName(y->name() + ".fused")};
  Value* out1 = gemm->num_outputs() > 1 ? (p.out1_cast ? p.out1_cast->output(0) : gemm->output(1)) : nullptr;
  if (out1 != nullptr) names.push_back(g.UniqueName(out1->name() + ".fused"));
  OTTR_ASSIGN_OR_RETURN(Node * f, fusion::AddInferred(g, {std::string(ir::kFusedGemmOp), std::string(ir::kOttrDomain),
                                                          inputs, names, std::move(attrs), gemm->origin()}));
  std::string what = absl::StrCat(gemm->Describe(), " + ", p.cast->Describe());
  if (p.out1_cast) absl::StrAppend(&what, " + ", p.out1_cast->Describe());
  fusion::Renames renames;
  renames.Replace(g, y, f->output(0));
  if (out1 != nullptr) renames.Replace(g, out1, f->output(1));
  std::vector<Node*> dead = {p.cast};
  if (p.out1_cast) dead.push_back(p.out1_cast);
  dead.push_back(gemm);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  std::string bias_note;
  if (p.bias_cast != nullptr) {
    bias_note = absl::StrCat(", bias ", p.bias->name(), " in f32");
    if (p.bias_cast->output(0)->uses().empty() && !g.IsRoot(p.bias_cast->output(0))) {
      absl::StrAppend(&bias_note, " (", p.bias_cast->Describe(), " erased)");
      OTTR_RETURN_IF_ERROR(g.EraseNode(p.bias_cast));
    }
  }
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("folded ", what, " -> ottr::FusedGemm ", ir::FusedEpilogueName(p.epilogue), " with f32 output",
                      bias_note));
  return absl::OkStatus();
}

class FoldGemmCastsPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOnnx(n, "Cast")) roots.push_back(n);
    }
    // A rewrite erases its Cast, maybe the bias gradient's Cast and the bias's Cast: other roots.
    absl::flat_hash_set<Node*> erased;
    bool changed = false;
    for (Node* n : roots) {
      if (erased.contains(n)) continue;
      std::string why;
      std::optional<Plan> p = Match(n, &why);
      if (!p) {
        if (!why.empty()) Remark(remarks(), kName, absl::StrCat("declined ", n->Describe(), ": ", why));
        continue;
      }
      erased.insert(p->cast);
      if (p->out1_cast) erased.insert(p->out1_cast);
      if (p->bias_cast) erased.insert(p->bias_cast);  // erased when dead; never a root of its own
      OTTR_RETURN_IF_ERROR(Rewrite(g, *p, remarks()));
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFoldGemmCastsPass() { return std::make_unique<FoldGemmCastsPass>(); }

}  // namespace ottr::passes
