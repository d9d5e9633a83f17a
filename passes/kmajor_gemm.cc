// "kmajor-gemm-operands": TF32 Tensor Cores read both GEMM operands K-major (Hopper's wgmma takes
// a transposed, MN-major shared-memory operand only for 16-bit types), so a float32 GEMM whose
// operands both have k as their slow axis runs on cuBLASLt's slower kernels. That is the weight
// gradient of every linear layer, dW = dYᵀ·X with dY [batch, out] and X [batch, in]: k is the
// batch. On the H200 (cuBLASLt 13.1) its 4096³ TF32 GEMM took 547 µs where the forward and the
// data gradient of the same size, with at most one MN-major operand, took 311–317 µs; a 4096 x
// 4096 float32 transpose moves 128 MB (~35 µs). The pass makes one operand K-major:
//
//   before:  %dW : f32[4096,4096] = Gemm(%dY, %x) {transA = 1}
//   after:   %x.kmajor : f32[4096,4096] = Transpose(%x) {perm = [1, 0]}
//            %dW : f32[4096,4096] = Gemm(%dY, %x.kmajor) {transA = 1, transB = 1}
//
// It takes ONNX Gemm and ottr::FusedGemm with the epilogues that do not depend on the operands'
// layout (none, bias) or that keep the summed operand as it is (bgrada sums A, so B is
// transposed; bgradb sums B, so A is), float32 2-D static operands with transA = 1 and
// transB = 0, and only GEMMs large enough that the transpose is paid back: m, n >= 128,
// m·n >= 2^20 and k >= 1024. (H200: the 4096³ weight gradients took 317–340 µs after the ~35 µs
// transpose; the small MLP's 512 x 784 x 8192 and 512 x 512 x 8192 ones at batch 8192 did not get
// faster, and their two transposes took that step from 292.7 to 322.0 µs. With the input x and
// the activation a0 transposed instead, off the backward's chain, those GEMMs took 36.2 and 27.7
// µs against 48.8 and 35 µs, but the transposes (26.5 and 14.7 µs, beside compute-bound GEMMs)
// still made the step slower: 268.5 against 253.7 µs, 2026-12-02.) Of the two operands it
// transposes the one made earlier in the step (a graph input or forward activation rather than a
// gradient, so the Transpose can run beside earlier work), else the smaller one (A on a tie: the
// product then has the layout of a data gradient, dY·W), or the one another GEMM already had
// transposed: a value is transposed once for all its GEMMs.
//
// When an operand is the dX of an ottr::ReluGradBiasGrad (fuse-relu-grad-bgrad) read by nothing
// but this GEMM (the first layer's dY: no data gradient reads it), that kernel writes dXT
// instead of dX (its optional third output) and no Transpose is made:
//
//   before:  %dz : f32[4096,4096], %db = ottr::ReluGradBiasGrad(%g, %a)
//            %dW : f32[4096,4096] = Gemm(%dz, %x) {transA = 1}
//   after:   %dz, %db, %dz.kmajor : f32[4096,4096] = ottr::ReluGradBiasGrad(%g, %a)   (dz unread)
//            %dW : f32[4096,4096] = Gemm(%dz.kmajor, %x) {transA = 0}
//
// H200, MLP 4096x4 TF32: 38 -> 37 launches (the first layer's Transpose of x gone), 4693.4 ->
// 4668.0 µs in one A/B, 4672-4697 in later calls (about the noise). The fold moves no extra
// bytes, so it takes the rule's m, n and k but not its 2^20 outputs: on the small MLP at batch
// 8192 (512 x 784 x 8192) the one-K-major GEMM alone ran on 60 CTAs (cuBLASLt's sm90 kernel
// does not split k: 51.5 µs) and the step was slower with the fold (234.1 against 229.9 µs,
// 2026-12-03); since LtGemm times k in parts (2 parts: 32.5 µs) it is faster: 194.9 against
// 206.2 µs (2026-12-04, `ottr bench`, two rounds each). (With x transposed too, both operands
// K-major, the Transpose of x (19-25 µs) landed on the chain: 229.8-236.4 against 219.4-229.9;
// folding the next layer's dY too (ReLU backward writing dX and dXT) with its activation
// transposed, 251-261 µs.)
//
// A data gradient dX = dY·W (transA = transB = 0) has one MN-major operand, the weight W [out, in]
// (k = out is its slow axis). cuBLASLt has fast kernels for that at 4096³ (316 µs against 311 for
// the forward) but not for tall products: on the H200 the small MLP's 8192 x 512 x 512 data
// gradient took 46.3 µs where the forward of the same size took 15.9 µs. Transposing the weight
// copies k·n elements (1 MB there, off the critical path: it needs only the parameter), so the
// pass transposes B of such a GEMM when the product is tall, m >= 4·max(k, n), and at least 1e9
// multiply-adds:
//
//   before:  %dx : f32[8192,512] = Gemm(%dy, %w)
//   after:   %w.kmajor : f32[512,512] = Transpose(%w) {perm = [1, 0]}
//            %dx : f32[8192,512] = Gemm(%dy, %w.kmajor) {transB = 1}
//
// Any epilogue may stay: it acts on the product, whose layout does not change.
//
// The training pipeline runs the pass after the GEMM fusion passes, only for TF32 steps on the GPU
// (TrainingSpec::kmajor_gemm_operands); the CPU GEMM packs its operands either way.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using ir::DType;
using ir::Node;
using ir::Value;

constexpr char kName[] = "kmajor-gemm-operands";
constexpr int64_t kMinMn = 128;
constexpr int64_t kMinK = 1024;
constexpr int64_t kMinOutput = int64_t{1} << 20;
// Data gradients (transA = transB = 0): rows per the larger of k and n, and the size.
constexpr int64_t kMinTallness = 4;
constexpr double kMinDataGradMacs = 1e9;

struct Plan {
  Node* gemm = nullptr;
  int operand = 0;  // 0: A, 1: B
  bool either = false;  // no epilogue pins the choice
  bool data_gradient = false;  // transA = transB = 0: B is the MN-major one
  Node* relu_grad = nullptr;  // the operand's producer, a ReluGradBiasGrad that writes it transposed
};

// The dims of A and B when both are static float32 matrices (TF32 candidates); else nullopt and
// the reason.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> FloatMatrices(const Node* n, std::string* why) {
  const ir::TensorType& a = n->input(0)->type();
  const ir::TensorType& b = n->input(1)->type();
  if (a.dtype != DType::kFloat32 || b.dtype != DType::kFloat32) {
    *why = absl::StrCat("operands are ", ir::DTypeName(a.dtype), ", not float32 (TF32)");
    return std::nullopt;
  }
  if (!a.is_static() || !b.is_static()) {
    *why = "operand shapes are not static";
    return std::nullopt;
  }
  std::vector<int64_t> ad = ir::StaticDims(*a.shape), bd = ir::StaticDims(*b.shape);
  if (ad.size() != 2 || bd.size() != 2) {
    *why = "operands are not 2-D";
    return std::nullopt;
  }
  return std::make_pair(std::move(ad), std::move(bd));
}

// A GEMM with transA = transB = 0 (B MN-major): transpose B when the product is tall and large.
std::optional<Plan> MatchDataGradient(Node* n, std::string* why) {
  std::string not_float;  // silent: only float32 matrices are TF32 candidates
  const auto dims = FloatMatrices(n, &not_float);
  if (!dims) return std::nullopt;
  const int64_t m = dims->first[0], k = dims->first[1], nn = dims->second[1];
  const double macs = static_cast<double>(m) * static_cast<double>(nn) * static_cast<double>(k);
  if (m < kMinTallness * std::max(k, nn) || macs < kMinDataGradMacs) {
    *why = absl::StrCat("GEMM ", m, "x", nn, "x", k, " with an MN-major B: not tall (m >= ", kMinTallness,
                        " max(k, n)) and large (>= 1e9 multiply-adds) enough to pay for transposing B");
    return std::nullopt;
  }
  Plan p;
  p.gemm = n;
  p.operand = 1;
  p.data_gradient = true;
  return p;
}

// The producer of `v` when it is output 0 (dX) of a float32 ottr::ReluGradBiasGrad and this GEMM
// is its only reader: that kernel can write dXT instead of dX at no extra cost (kernels/
// activation.h), so the operand needs no Transpose of its own.
Node* FoldableReluGrad(const Value* v) {
  Node* p = v->producer();
  if (p == nullptr || !fusion::IsOttr(p, "ReluGradBiasGrad") || v->producer_index() != 0 || p->num_outputs() != 2 ||
      v->type().dtype != DType::kFloat32) {
    return nullptr;
  }
  return fusion::SoleUser(v) != nullptr ? p : nullptr;
}

std::optional<Plan> Match(Node* n, const fusion::Depths& depths, std::string* why) {
  const bool gemm = fusion::IsOnnx(n, "Gemm");
  const std::optional<ir::FusedEpilogue> e = fusion::FusedEpilogueOf(n);
  if (!gemm && !e) return std::nullopt;
  if (n->GetInt("transA", 0) == 0 && n->GetInt("transB", 0) == 0) return MatchDataGradient(n, why);
  if (n->GetInt("transA", 0) == 0 || n->GetInt("transB", 0) != 0) return std::nullopt;  // one is K-major
  const auto dims = FloatMatrices(n, why);
  if (!dims) return std::nullopt;
  const int64_t k = dims->first[0], m = dims->first[1], nn = dims->second[1];
  Plan p;
  p.gemm = n;
  if (e) {
    switch (*e) {
      case ir::FusedEpilogue::kNone:
      case ir::FusedEpilogue::kBias: break;
      case ir::FusedEpilogue::kBgradA: p.operand = 1; break;
      case ir::FusedEpilogue::kBgradB: p.operand = 0; break;
      default:
        *why = absl::StrCat("epilogue ", ir::FusedEpilogueName(*e), " reads its auxiliary buffer in this layout");
        return std::nullopt;
    }
  }
  const std::string too_small = absl::StrCat("GEMM ", m, "x", nn, "x", k,
                                             " is too small to pay for a transpose (needs m, n >= ", kMinMn,
                                             ", m*n >= 2^20, k >= ", kMinK, ")");
  // The ReLU backward's dXT costs no bytes of its own: it needs only m, n and k of the rule.
  if (m < kMinMn || nn < kMinMn || k < kMinK) {
    *why = too_small;
    return std::nullopt;
  }
  // An operand its ReLU backward can write transposed costs no Transpose: it comes first.
  const bool pinned = e && (*e == ir::FusedEpilogue::kBgradA || *e == ir::FusedEpilogue::kBgradB);
  for (int o : {0, 1}) {
    if (pinned && o != p.operand) continue;
    if (Node* relu = FoldableReluGrad(n->input(o))) {
      p.operand = o;
      p.relu_grad = relu;
      return p;
    }
  }
  if (m * nn < kMinOutput) {
    *why = too_small;
    return std::nullopt;
  }
  if (!pinned) {
    // The operand that exists earlier in the step (a graph input or a forward activation rather
    // than a gradient) is transposed: its Transpose can run beside earlier work instead of
    // between the gradient's producer and this GEMM. On a tie, the smaller one.
    const int da = fusion::DepthOf(depths, n->input(0)), db = fusion::DepthOf(depths, n->input(1));
    p.operand = da != db ? (db < da ? 1 : 0) : (nn < m ? 1 : 0);
    p.either = true;
  }
  return p;
}

class KMajorGemmOperandsPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    transposed_.clear();
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    depths_ = fusion::ValueDepths(order);
    bool changed = false;
    for (Node* n : order) {
      std::string why;
      std::optional<Plan> p = Match(n, depths_, &why);
      if (!p) {
        // Silent for nodes that are not GEMMs with both operands MN-major.
        if (!why.empty()) fusion::Remark(remarks(), kName, absl::StrCat("declined ", n->Describe(), ": ", why));
        continue;
      }
      // An operand another GEMM already had transposed costs nothing.
      if (p->either && !transposed_.contains(n->input(p->operand)) && transposed_.contains(n->input(1 - p->operand))) {
        p->operand = 1 - p->operand;
      }
      OTTR_RETURN_IF_ERROR(Rewrite(g, *p));
      changed = true;
    }
    return changed;
  }

 private:
  // v's transpose: a Transpose node made once for all readers.
  absl::StatusOr<Value*> TransposeOf(ir::Graph& g, Value* v, const Node* reader) {
    Value*& t = transposed_[v];
    if (t == nullptr) {
      OTTR_ASSIGN_OR_RETURN(Node * tr, fusion::AddInferred(g, {"Transpose", "", {v}, {g.UniqueName(v->name() + ".kmajor")},
                                                               {{"perm", ir::Attribute(std::vector<int64_t>{1, 0})}},
                                                               reader->origin()}));
      t = tr->output(0);
    }
    return t;
  }

  // Replaces n by a node of its op and origin with `attrs` and `inputs`, and `extra_outputs`
  // after n's outputs, which keep their names, readers and depths; n is erased.
  absl::StatusOr<Node*> Replace(ir::Graph& g, Node* n, std::map<std::string, ir::Attribute> attrs,
                                std::vector<Value*> inputs, const std::vector<std::string>& extra_outputs) {
    ir::NodeSpec spec{n->op_type(), n->domain(), std::move(inputs), {}, std::move(attrs), n->origin()};
    for (const Value* v : n->outputs()) spec.output_names.push_back(g.UniqueName(v->name() + ".kmajor"));
    for (const std::string& name : extra_outputs) spec.output_names.push_back(g.UniqueName(name));
    OTTR_ASSIGN_OR_RETURN(Node * r, fusion::AddInferred(g, std::move(spec)));
    fusion::Renames renames;
    for (int i = 0; i < n->num_outputs(); ++i) {
      depths_[r->output(i)] = fusion::DepthOf(depths_, n->output(i));  // a later GEMM may read it
      renames.Replace(g, n->output(i), r->output(i));
    }
    OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, {n}));
    renames.Apply(g);
    return r;
  }

  // relu's dX transposed by relu itself: it becomes a ReluGradBiasGrad with the third output.
  absl::StatusOr<Value*> FoldedTransposeOf(ir::Graph& g, Node* relu) {
    const int depth = fusion::DepthOf(depths_, relu->output(0));
    OTTR_ASSIGN_OR_RETURN(Node * r, Replace(g, relu, relu->attrs(), relu->inputs(), {relu->output(0)->name() + ".kmajor"}));
    depths_[r->output(2)] = depth;
    transposed_[r->output(0)] = r->output(2);
    return r->output(2);
  }

  absl::Status Rewrite(ir::Graph& g, const Plan& p) {
    Node* n = p.gemm;
    const std::string operand_name = n->input(p.operand)->name();
    const std::string what = n->Describe();
    Value* t = nullptr;
    if (p.relu_grad != nullptr) {
      OTTR_ASSIGN_OR_RETURN(t, FoldedTransposeOf(g, p.relu_grad));
    } else {
      OTTR_ASSIGN_OR_RETURN(t, TransposeOf(g, n->input(p.operand), n));
    }
    std::map<std::string, ir::Attribute> attrs = n->attrs();
    attrs[p.operand == 0 ? "transA" : "transB"] = ir::Attribute(int64_t{p.operand == 0 ? 0 : 1});
    std::vector<Value*> inputs = n->inputs();
    inputs[p.operand] = t;
    OTTR_RETURN_IF_ERROR(Replace(g, n, std::move(attrs), std::move(inputs), {}).status());
    fusion::Remark(remarks(), kName,
                   absl::StrCat("transposed ", p.operand == 0 ? "A" : "B", " (", operand_name, ") of ", what,
                                p.relu_grad != nullptr ? " in its ReLU backward (ReluGradBiasGrad writes dXT)" : "",
                                p.data_gradient ? ": B was MN-major in a tall product, TF32 reads it K-major"
                                                : ": both operands were MN-major, TF32 reads them K-major"));
    return absl::OkStatus();
  }

  absl::flat_hash_map<Value*, Value*> transposed_;
  fusion::Depths depths_;
};

}  // namespace

std::unique_ptr<Pass> CreateKMajorGemmOperandsPass() { return std::make_unique<KMajorGemmOperandsPass>(); }

}  // namespace ottr::passes
