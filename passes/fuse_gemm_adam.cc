// "fuse-gemm-adam": at a small batch a weight gradient is a small GEMM (k = the batch) whose
// product only the optimizer reads, and the Adam update of that weight is a launch of its own
// after it: on the small MLP at batch 128 the first layer's weight gradient (cuBLASLt, 5.3 µs),
// its BGRADB kernel (1.9 µs) and that layer's update (6.1 µs) ended the step one after the other,
// each mostly launch latency (bench/RESULTS.md 2026-12-03 (5)). The pass takes such a parameter
// (and its bias, when the GEMM's bgrad epilogue makes the bias gradient and the same update reads
// it) out of the grouped update into one ottr::GemmAdamUpdate, which computes the gradients and
// applies Adam in one kernel without storing them:
//
//   before:  %dW, %db = ottr::FusedGemm(%dz, %x) {transA = 1, epilogue = "bgrada"}
//            %w.new, %b.new, %u.new, %w.m.new, ... = ottr::AdamUpdateN(%lr, %step, %w, %b, %u,
//                %dW, %db, %du, %w.m, %b.m, %u.m, %w.v, %b.v, %u.v)
//   after:   %w.new, %b.new, %w.m.new, %b.m.new, %w.v.new, %b.v.new = ottr::GemmAdamUpdate(%lr,
//                %step, %dz, %x, %w, %b, %w.m, %b.m, %w.v, %b.v) {bias = "a", Adam's attributes}
//            %u.new, %u.m.new, %u.v.new = ottr::AdamUpdateN(%lr, %step, %u, %du, %u.m, %u.v)
//
// The CPU reference computes the same gradients as the nodes it replaces (the FusedGemm kernel's
// product and sums) and AdamUpdateN's arithmetic, so the step's numbers on the CPU do not change.
// The CUDA kernel sums the product in float32 in increasing k with TF32 off, on the TF32 tensor
// cores with it on (as cuBLASLt's weight gradient then would). Off by default: on the H100 at
// batch 128 the fused step was still 1.5 µs slower than the unfused one (bench/RESULTS.md
// 2026-12-07 (4)).
//
// Matches a float32 ONNX Gemm (no C, or beta 0; alpha 1) or ottr::FusedGemm with epilogue none,
// bgrada or bgradb, transA = 1, transB = 0 (a weight gradient dYᵀ·X with both operands read
// along their rows), k <= kMaxK, whose product (and bias gradient) only this update reads, of an
// unguarded float32 Adam update without loss scale or low-precision copies (the guard needs every
// gradient's finiteness before any update). Runs after the GEMM fusion passes and kmajor-gemm-
// operands, which decide how each gradient is made, and before split-optimizer-updates.
#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using ir::DType;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-gemm-adam";

// The largest k (the batch of a weight gradient) the fused kernel takes (kernels::kGemmAdamMaxK:
// it keeps all k rows of its operand tiles in shared memory, so past a few hundred rows the
// separate GEMM's pipelined tiles would win back what the launches cost).
constexpr int64_t kMaxK = 256;

struct Match {
  Node* gemm = nullptr;
  int weight = -1;  // tensor index of the weight in the update
  int bias = -1;    // tensor index of the bias (its gradient is the GEMM's output 1), or -1
  std::string bias_of;  // "a" | "b"
};

class FuseGemmAdamPass : public Pass {
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
  // The weight gradient g_k of update u made by a GEMM this pass can fuse; else nullopt and why
  // (empty: not a GEMM at all, nothing to say).
  std::optional<Match> MatchGrad(Node* u, const ir::UpdateNLayout& l, int k, std::string* why) {
    Value* grad = u->input(2 + l.n + k);
    Node* gemm = grad->producer();
    const std::optional<ir::FusedEpilogue> e = fusion::FusedEpilogueOf(gemm);
    const bool onnx = fusion::IsOnnx(gemm, "Gemm");
    if (gemm == nullptr || grad->producer_index() != 0 || (!onnx && !e)) return std::nullopt;
    if (onnx && gemm->has_input(2) && gemm->GetFloat("beta", 1.0f) != 0.0f) {
      *why = "the Gemm adds C";
      return std::nullopt;
    }
    if (e && *e != ir::FusedEpilogue::kNone && *e != ir::FusedEpilogue::kBgradA && *e != ir::FusedEpilogue::kBgradB) {
      *why = absl::StrCat("epilogue ", ir::FusedEpilogueName(*e), " is not a weight gradient's");
      return std::nullopt;
    }
    if (gemm->GetInt("transA", 0) != 1 || gemm->GetInt("transB", 0) != 0 || gemm->GetFloat("alpha", 1.0f) != 1.0f) {
      *why = "not Aᵀ·B with alpha 1 (transA = 1, transB = 0)";
      return std::nullopt;
    }
    if (e && gemm->GetInt("output_type", ir::DTypeToOnnx(DType::kFloat32)) != ir::DTypeToOnnx(DType::kFloat32)) {
      *why = "the product is not float32";
      return std::nullopt;
    }
    const ir::TensorType& a = gemm->input(0)->type();
    const ir::TensorType& b = gemm->input(1)->type();
    if (a.dtype != DType::kFloat32 || b.dtype != DType::kFloat32 || !a.is_static() || !b.is_static() ||
        a.rank() != 2 || b.rank() != 2) {
      *why = absl::StrCat("operands ", a.ToString(), ", ", b.ToString(), " are not static float32 matrices");
      return std::nullopt;
    }
    const int64_t kk = ir::StaticDims(*a.shape)[0];
    if (kk > kMaxK) {
      *why = absl::StrCat("k = ", kk, " > ", kMaxK, ": the fused kernel keeps all k rows in shared memory");
      return std::nullopt;
    }
    if (fusion::SoleUser(grad) != u) {
      *why = absl::StrCat(grad->name(), " is read by more than the update");
      return std::nullopt;
    }
    Match m;
    m.gemm = gemm;
    m.weight = k;
    if (e && (*e == ir::FusedEpilogue::kBgradA || *e == ir::FusedEpilogue::kBgradB)) {
      Value* db = gemm->num_outputs() > 1 ? gemm->output(1) : nullptr;
      if (db != nullptr && !db->uses().empty()) {
        for (int j = 0; j < l.n; ++j) {
          if (u->input(2 + l.n + j) == db && fusion::SoleUser(db) == u) m.bias = j;
        }
        if (m.bias < 0) {
          *why = absl::StrCat("its bias gradient ", db->name(), " is read by more than the update");
          return std::nullopt;
        }
        m.bias_of = *e == ir::FusedEpilogue::kBgradA ? "a" : "b";
      }
    }
    return m;
  }

  absl::StatusOr<bool> Rewrite(ir::Graph& g, Node* u) {
    if (u->op_type() != "AdamUpdateN") return false;
    const ir::UpdateNLayout l = ir::UpdateNLayoutOf(*u);
    if (!l.valid) return false;
    auto decline = [&](const std::string& why) {
      fusion::Remark(remarks(), kName, absl::StrCat("declined ", u->Describe(), ": ", why));
      return false;
    };
    if (l.guard >= 0 || l.grad_scale >= 0) {
      return decline("it is guarded (every gradient's finiteness decides the whole step)");
    }
    if (!l.low_copies.empty()) return decline("it writes low-precision copies");
    if (u->input(2)->type().dtype != DType::kFloat32) return decline("its tensors are not float32");
    std::vector<Match> matches;
    std::set<int> taken;
    for (int k = 0; k < l.n; ++k) {
      if (taken.contains(k)) continue;
      std::string why;
      std::optional<Match> m = MatchGrad(u, l, k, &why);
      if (!m) {
        if (!why.empty()) {
          fusion::Remark(remarks(), kName, absl::StrCat("declined the update of ", u->input(2 + k)->name(), ": ", why));
        }
        continue;
      }
      if (m->bias >= 0 && taken.contains(m->bias)) continue;
      taken.insert(k);
      if (m->bias >= 0) taken.insert(m->bias);
      matches.push_back(std::move(*m));
    }
    if (matches.empty()) return false;
    fusion::Renames renames;
    // One GemmAdamUpdate per match: (lr, step, A, B, p.., m.., v..) -> (p'.., m'.., v'..).
    for (const Match& m : matches) {
      std::vector<int> ks = {m.weight};
      if (m.bias >= 0) ks.push_back(m.bias);
      ir::NodeSpec spec;
      spec.op_type = "GemmAdamUpdate";
      spec.domain = std::string(ir::kOttrDomain);
      spec.origin = m.gemm->origin();
      for (const char* a : {"beta1", "beta2", "epsilon", "weight_decay", "decoupled"}) {
        if (u->has_attr(a)) spec.attrs[a] = *u->attr(a);
      }
      if (m.bias >= 0) spec.attrs["bias"] = ir::Attribute(m.bias_of);
      spec.inputs = {u->input(0), u->input(1), m.gemm->input(0), m.gemm->input(1)};
      for (int part : {0, 2, 3}) {  // params, m, v (part 1 is the gradients)
        for (int k : ks) spec.inputs.push_back(u->input(2 + part * l.n + k));
      }
      for (int o = 0; o < 3; ++o) {
        for (int k : ks) spec.output_names.push_back(g.UniqueName(u->output(o * l.n + k)->name()));
      }
      OTTR_ASSIGN_OR_RETURN(Node * r, fusion::AddInferred(g, std::move(spec)));
      const int c = static_cast<int>(ks.size());
      for (int o = 0; o < 3; ++o) {
        for (int j = 0; j < c; ++j) renames.Replace(g, u->output(o * l.n + ks[j]), r->output(o * c + j));
      }
      fusion::Remark(remarks(), kName,
                     absl::StrCat("fused ", m.gemm->Describe(), " into the update of ", u->input(2 + m.weight)->name(),
                                  m.bias >= 0 ? absl::StrCat(" and ", u->input(2 + m.bias)->name()) : "",
                                  ": one ottr::GemmAdamUpdate, the gradients never stored"));
    }
    // The rest of the update, when anything is left.
    std::vector<int> rest;
    for (int k = 0; k < l.n; ++k) {
      if (!taken.contains(k)) rest.push_back(k);
    }
    if (!rest.empty()) {
      ir::NodeSpec spec;
      spec.op_type = u->op_type();
      spec.domain = u->domain();
      spec.origin = u->origin();
      spec.attrs = u->attrs();
      spec.inputs = {u->input(0), u->input(1)};
      for (int part = 0; part < 4; ++part) {
        for (int k : rest) spec.inputs.push_back(u->input(2 + part * l.n + k));
      }
      for (int o = 0; o < 3; ++o) {
        for (int k : rest) spec.output_names.push_back(g.UniqueName(u->output(o * l.n + k)->name()));
      }
      OTTR_ASSIGN_OR_RETURN(Node * r, fusion::AddInferred(g, std::move(spec)));
      const int c = static_cast<int>(rest.size());
      for (int o = 0; o < 3; ++o) {
        for (int j = 0; j < c; ++j) renames.Replace(g, u->output(o * l.n + rest[j]), r->output(o * c + j));
      }
    }
    std::vector<Node*> dead = {u};
    for (const Match& m : matches) dead.push_back(m.gemm);
    OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
    renames.Apply(g);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseGemmAdamPass() { return std::make_unique<FuseGemmAdamPass>(); }

}  // namespace ottr::passes
