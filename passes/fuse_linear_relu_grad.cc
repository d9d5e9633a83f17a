// fuse-linear-relu-grad (fusion_passes.h): the backward of a small linear layer (a classifier head
// of K <= 16 outputs) through the ReLU that made its input, in one pass over that input.
//
//   before:  %dy = Gemm(%dz, %w)                              dZ [R, K] · W [K, N]
//            %dx, %db = ottr::ReluGradBiasGrad(%dy, %y)       Y [R, N], the ReLU's output
//            [%dw, %dbz = ottr::FusedGemm(%dz, %y) {epilogue = "bgrada", transA = 1}]
//            [or %dw = Gemm(%dz, %y) {transA = 1}]            the head's weight gradient
//   after:   %dx, %db[, %dw, %dbz] = ottr::LinearReluGrad(%dz, %w, %y)
//
// At K <= 16 the data-gradient GEMM is a stream (it writes R·N floats from R·K + K·N), which the
// ReLU backward reads back with Y; the weight-gradient GEMM reads Y again (K x N outputs over R
// rows: few tiles, split-K, a BGRAD kernel). The fused kernel reads Y and dZ once and writes dX.
// Measured on the H200 (bench/RESULTS.md, 2026-12-04), the small MLP at batch 8192: five
// launches (the dY GEMM 7.7 µs, ReluGradBiasGrad 18-20, beside them the weight GEMM 18.8, its
// split-K reduce and BGRAD kernel) become one of 27 µs, the step 23 -> 19 launches and 121 -> 104
// MB of peak memory (dX takes Y's bytes, no dY), at the same step time (the step's tail, the
// first two layers' MN-major weight gradients, is what bounds it). float32 only (the kernel's
// sums are float32 FMAs of float32 values: closer to the exact sums than the TF32 GEMMs it
// replaces). It runs after fuse-relu-grad-bgrad, fuse-gemm-bgrad (which makes the bgrada node)
// and fuse-linear-sce (whose one-kernel head takes batches up to 1024 rows first).
//
// A classifier padded to K columns by pad-gemm-dims has its weight and bias gradients sliced back
// to M rows by Pads with negative pads (the gradients of the forward's Pads); when those Pads are
// the gradients' only readers the node writes the M rows itself ({weight_rows = M}) and the Pads
// go: two launches fewer, which on the H100 took 9 and 8.7 µs each in the step (tiny grids beside
// the GEMMs) on the stream of the next weight gradient.
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-linear-relu-grad";

struct Plan {
  Node* relu = nullptr;    // ottr::ReluGradBiasGrad
  Node* dgrad = nullptr;   // dY = dZ · W
  Node* wgrad = nullptr;   // dW = dZᵀ · Y (and dBz), or null
  bool wgrad_bias = false;  // wgrad is the bgrada FusedGemm
  // The Pads that keep the first `weight_rows` rows of dW (and dBz), folded into the node.
  Node* dw_slice = nullptr;
  Node* dbz_slice = nullptr;
  int64_t weight_rows = 0;
};

// The rows M < K that the only reader of `v` (rank 1 or 2, K rows) keeps: a constant-mode Pad
// whose pads are all zero but the end of axis 0, -(K - M). Else 0.
int64_t SlicedRows(const Value* v, Node** pad) {
  Node* n = fusion::SoleUser(v);
  if (n == nullptr || !fusion::IsOnnx(n, "Pad") || n->input(0) != v || n->GetString("mode", "constant") != "constant" ||
      n->num_inputs() > 3 || !v->type().is_static()) {
    return 0;
  }
  const std::optional<std::vector<int64_t>> pads = fusion::ConstInts(n->input(1));
  const int64_t rank = v->type().rank();
  if (!pads || static_cast<int64_t>(pads->size()) != 2 * rank) return 0;
  const int64_t k = ir::StaticDims(*v->type().shape)[0];
  for (int64_t i = 0; i < 2 * rank; ++i) {
    if (i != rank && (*pads)[i] != 0) return 0;
  }
  const int64_t m = k + (*pads)[rank];
  if (m < 1 || m >= k) return 0;
  *pad = n;
  return m;
}

// Sets p's slices when dW's (and, with bgrada, dBz's) only reader keeps the same first rows.
void FindSlices(Plan& p) {
  if (p.wgrad == nullptr) return;
  Node* dw_pad = nullptr;
  Node* dbz_pad = nullptr;
  const int64_t m = SlicedRows(p.wgrad->output(0), &dw_pad);
  if (m == 0) return;
  if (p.wgrad_bias && SlicedRows(p.wgrad->output(1), &dbz_pad) != m) return;
  p.dw_slice = dw_pad;
  p.dbz_slice = dbz_pad;
  p.weight_rows = m;
}

bool IsF32Matrix(const Value* v) {
  const ir::TensorType& t = v->type();
  return t.is_static() && t.rank() == 2 && t.dtype == ir::DType::kFloat32;
}

// A product with no transposes, no alpha: Gemm(a, b) or FusedGemm(a, b) {epilogue = "none"}.
bool IsUnscaledProduct(const Node* n, bool trans_a) {
  return fusion::IsPlainGemm(n) && n->GetInt("transA", 0) == (trans_a ? 1 : 0) && n->GetInt("transB", 0) == 0 &&
         n->GetFloat("alpha", 1.0f) == 1.0f && !n->has_input(2) && !n->has_attr("output_type");
}

// The weight gradient dZᵀ·Y among dZ's readers, if there is one.
void FindWeightGrad(const Value* dz, const Value* y, Plan& p) {
  for (const auto& use : dz->uses()) {
    Node* n = use.node;
    if (n == p.dgrad || n->num_inputs() < 2 || n->input(0) != dz || n->input(1) != y) continue;
    if (IsUnscaledProduct(n, /*trans_a=*/true)) {
      p.wgrad = n;
      p.wgrad_bias = false;
      return;
    }
    if (fusion::FusedEpilogueOf(n) == ir::FusedEpilogue::kBgradA && n->GetInt("transA", 0) == 1 &&
        n->GetInt("transB", 0) == 0 && n->GetFloat("alpha", 1.0f) == 1.0f && n->num_inputs() == 2 &&
        !n->has_attr("output_type")) {
      p.wgrad = n;
      p.wgrad_bias = true;
      return;
    }
  }
}

std::optional<Plan> Match(Node* r, std::string* why) {
  Plan p;
  p.relu = r;
  if (r->num_outputs() != 2) {
    *why = "it writes dXᵀ too";
    return std::nullopt;
  }
  const Value* dy = r->input(0);
  const Value* y = r->input(1);
  Node* g = dy->producer();
  if (g == nullptr || !IsUnscaledProduct(g, /*trans_a=*/false)) {
    *why = absl::StrCat(dy->name(), " is not a product dZ · W (Gemm with no transposes, alpha or C)");
    return std::nullopt;
  }
  if (fusion::SoleUser(dy) != r) {
    *why = absl::StrCat(dy->name(), " has other readers");
    return std::nullopt;
  }
  p.dgrad = g;
  const Value* dz = g->input(0);
  const Value* w = g->input(1);
  if (!IsF32Matrix(dz) || !IsF32Matrix(w) || !IsF32Matrix(y)) {
    *why = absl::StrCat("dZ ", dz->type().ToString(), ", W ", w->type().ToString(), " and Y ", y->type().ToString(),
                        " are not all static f32 matrices");
    return std::nullopt;
  }
  const int64_t k = ir::StaticDims(*dz->type().shape)[1];
  if (k > ir::kLinearReluGradMaxK) {
    *why = absl::StrCat("K = ", k, " > ", ir::kLinearReluGradMaxK, " (the kernel keeps K sums per column in registers)");
    return std::nullopt;
  }
  FindWeightGrad(dz, y, p);
  FindSlices(p);
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* r = p.relu;
  std::vector<std::string> names = {g.UniqueName(r->output(0)->name() + ".fused"),
                                    g.UniqueName(r->output(1)->name() + ".fused")};
  // The values the node's dW and dBz replace: the Pads' outputs when it writes the kept rows.
  const Value* dw_out = p.dw_slice != nullptr ? p.dw_slice->output(0) : p.wgrad != nullptr ? p.wgrad->output(0) : nullptr;
  const Value* dbz_out = p.dbz_slice != nullptr ? p.dbz_slice->output(0)
                         : p.wgrad_bias         ? p.wgrad->output(1)
                                                : nullptr;
  if (p.wgrad != nullptr) {
    names.push_back(g.UniqueName(dw_out->name() + ".fused"));
    names.push_back(g.UniqueName((dbz_out != nullptr ? dbz_out->name() : dw_out->name() + ".bias") + ".fused"));
  }
  std::map<std::string, ir::Attribute> attrs;
  if (p.weight_rows > 0) attrs["weight_rows"] = p.weight_rows;
  OTTR_ASSIGN_OR_RETURN(Node * f, fusion::AddInferred(g, {"LinearReluGrad", std::string(ir::kOttrDomain),
                                                          {p.dgrad->input(0), p.dgrad->input(1), r->input(1)},
                                                          names, std::move(attrs), r->origin()}));
  std::string what = absl::StrCat(p.dgrad->Describe(), " + ", r->Describe());
  fusion::Renames renames;
  renames.Replace(g, r->output(0), f->output(0));
  renames.Replace(g, r->output(1), f->output(1));
  std::vector<Node*> dead = {r, p.dgrad};
  if (p.wgrad != nullptr) {
    absl::StrAppend(&what, " + ", p.wgrad->Describe());
    renames.Replace(g, const_cast<Value*>(dw_out), f->output(2));
    if (dbz_out != nullptr) renames.Replace(g, const_cast<Value*>(dbz_out), f->output(3));
    // The Pads first (they read the weight gradient's outputs).
    if (p.dw_slice != nullptr) dead.insert(dead.begin(), p.dw_slice);
    if (p.dbz_slice != nullptr) dead.insert(dead.begin(), p.dbz_slice);
    dead.push_back(p.wgrad);
  }
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::LinearReluGrad (K = ", ir::StaticDims(*f->input(0)->type().shape)[1],
                      p.wgrad != nullptr ? ", with the weight gradient" : "",
                      p.weight_rows > 0 ? absl::StrCat(", its first ", p.weight_rows, " rows: the slicing Pads folded")
                                        : "",
                      ")"));
  return absl::OkStatus();
}

class FuseLinearReluGradPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "ReluGradBiasGrad")) roots.push_back(n);
    }
    // A rewrite erases its own ReluGradBiasGrad, its dY's product and a weight gradient: never
    // another root.
    return fusion::MatchAndRewrite(roots, remarks(), kName, Match,
                                   [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseLinearReluGradPass() { return std::make_unique<FuseLinearReluGradPass>(); }

}  // namespace ottr::passes
