// "pad-gemm-dims": pads a large 16-bit GEMM whose inner (k) or output (n) dimension is not a
// multiple of 8 elements (with `float32`, also a float32 GEMM whose k or n is not a multiple of 4:
// TF32 steps on the GPU), so every leading dimension of it and of its backward GEMMs is 16 bytes
// (cuBLASLt's Tensor Core kernels on Hopper read operands through TMA, which needs 16-byte
// aligned leading dimensions; a misaligned GEMM falls back to slower kernels).
//
//   before:  %h.bf16 : bf16[4096,1001] = Gemm(%x.bf16, %w.bf16, %b.bf16) {transB = 1}
//   after:   %w.bf16.pad : bf16[1008,4096] = Pad(%w.bf16, [0, 0, 7, 0])
//            %b.bf16.pad : bf16[1008] = Pad(%b.bf16, [0, 7])
//            %h.bf16.pad : bf16[4096,1008] = Gemm(%x.bf16, %w.bf16.pad, %b.bf16.pad) {transB = 1}
//            %h.bf16 : bf16[4096,1001] = Slice(%h.bf16.pad, [0], [1001], [1])
//
// The padding is zeros: the padded k terms add exact zeros and the padded n columns are sliced
// away, so the product is the same (up to the GEMM's summation order). It runs on the forward
// graph after mixed-precision and before autodiff: the gradients of Pad (a Slice) and Slice (a
// zero Pad) make the backward GEMMs dX = dY·W and dW = dYᵀ·X run on the padded shapes too. Each
// padded GEMM costs a Pad per padded operand and a Slice per step forward and backward. The
// weight's Pad (and its gradient's Slice) copy k·n elements while the misaligned kernel loses time
// in proportion to m·k·n, so what decides is m, the rows of the product: GEMMs of fewer than
// `min_rows` rows or `min_macs` multiply-adds are left alone (a remark says so). The defaults come
// from the H200 (bench/RESULTS.md, 2026-12-01 (4), bf16 Adam steps, padding off -> on):
//   MLP 4100-4096-1001: m = 256 437 -> 504 µs (slower), m = 1024 1735 -> 617, m = 4096 6213 -> 1137;
//   MLP 1001-1024-1001: m = 512 181 -> 138, m = 4096 921 -> 316;
//   MLP 784-512-512-10 (n = 10): m = 128 68.4 -> 76.7 (slower: 8 more launches), m = 8192 198.9 -> 184.8.
// TF32 (the H200, small MLP 784-512-512-10 at batch 8192, n = 10): the three GEMMs of the last
// layer ran on cuBLASLt's align1 kernels, 13.2 µs forward, 13.1 µs dX (k = 10) and 17.5 + 4.6 +
// 7.4 µs dW with its bias gradient, where 16-byte rows take a few µs each (bench/RESULTS.md). So
// with `float32` (the tools turn it on for TF32 steps on the GPU) float32 GEMMs are padded to 4
// elements under the same size rules; exact float32 steps and the CPU leave them alone. Batched
// MatMuls are never padded.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "pad-gemm-dims";
constexpr int64_t kAlignBytes = 16;

// Elements of `t` in 16 bytes: 8 for the 16-bit types, 4 for float32.
int64_t AlignOf(ir::DType t) { return kAlignBytes / static_cast<int64_t>(ir::DTypeSize(t)); }
int64_t RoundUp(int64_t v, int64_t align) { return (v + align - 1) / align * align; }

struct Plan {
  Node* gemm = nullptr;
  int64_t align = 8;  // elements
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  bool pad_bias = false;  // C has the n dimension as its last axis
};

// The 2-D GEMMs of a 16-bit type (or float32, with `float32`) with a misaligned k or n (the
// candidates).
bool IsCandidate(const Node* n, bool float32) {
  if (!fusion::IsOnnx(n, "Gemm") && !fusion::IsOnnx(n, "MatMul")) return false;
  for (int i = 0; i < 2; ++i) {
    const ir::TensorType& t = n->input(i)->type();
    if (!t.is_static() || t.rank() != 2) return false;
    if (!fusion::IsLowFloat(t.dtype) && !(float32 && t.dtype == ir::DType::kFloat32)) return false;
  }
  const std::vector<int64_t> a = ir::StaticDims(*n->input(0)->type().shape);
  const std::vector<int64_t> b = ir::StaticDims(*n->input(1)->type().shape);
  const int64_t k = n->GetInt("transA", 0) != 0 ? a[0] : a[1];
  const int64_t cols = n->GetInt("transB", 0) != 0 ? b[0] : b[1];
  const int64_t align = AlignOf(n->input(0)->type().dtype);
  return k % align != 0 || cols % align != 0;
}

std::optional<Plan> Match(Node* g, double min_macs, int64_t min_rows, std::string* why) {
  Plan p;
  p.gemm = g;
  p.align = AlignOf(g->input(0)->type().dtype);
  p.ta = g->GetInt("transA", 0) != 0;
  p.tb = g->GetInt("transB", 0) != 0;
  const std::vector<int64_t> a = ir::StaticDims(*g->input(0)->type().shape);
  const std::vector<int64_t> b = ir::StaticDims(*g->input(1)->type().shape);
  p.m = p.ta ? a[1] : a[0];
  p.k = p.ta ? a[0] : a[1];
  p.n = p.tb ? b[0] : b[1];
  const std::string dims = absl::StrCat(p.m, "x", p.n, "x", p.k, " (", ir::DTypeName(g->input(0)->type().dtype),
                                        ", k = ", p.k, ", n = ", p.n, ": not both multiples of ", p.align, ")");
  if (p.m < min_rows) {
    *why = absl::StrCat("GEMM ", dims, " has ", p.m, " rows (< ", min_rows,
                        "): the weight's Pad and its gradient's Slice would cost more than the misaligned kernel loses");
    return std::nullopt;
  }
  const double macs = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  if (macs < min_macs) {
    *why = absl::StrCat("GEMM ", dims, " has ", macs, " multiply-adds (< ", min_macs,
                        "): the Pad and Slice copies would cost more",
                        " than the misaligned kernel loses");
    return std::nullopt;
  }
  if (g->num_inputs() > 2 && g->input(2) != nullptr) {
    const ir::TensorType& c = g->input(2)->type();
    if (!c.is_static()) {
      *why = absl::StrCat("the bias ", c.ToString(), " has no static shape");
      return std::nullopt;
    }
    const std::vector<int64_t> cd = ir::StaticDims(*c.shape);
    p.pad_bias = !cd.empty() && cd.back() == p.n && p.n != 1;
    if (!cd.empty() && cd.back() != p.n && cd.back() != 1) {
      *why = absl::StrCat("the bias ", c.ToString(), " does not broadcast along n = ", p.n);
      return std::nullopt;
    }
  }
  return p;
}

// A Constant node holding the int64 vector `values`.
absl::StatusOr<Value*> IntsConstant(ir::Graph& g, const std::string& name, const std::vector<int64_t>& values,
                                    const std::string& origin) {
  OTTR_ASSIGN_OR_RETURN(Node * c, g.AddNode({"Constant", "", {}, {g.UniqueName(name)},
                                             {{"value", ir::Attribute(ir::Tensor::FromVector<int64_t>(
                                                            {static_cast<int64_t>(values.size())}, values))}},
                                             origin}));
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *c));
  return c->output(0);
}

// Pad(v, zeros before, extra[a] zeros after along each axis a); v itself when nothing is added.
absl::StatusOr<Value*> PadAxes(ir::Graph& g, Value* v, const std::vector<int64_t>& extra, const std::string& origin) {
  const int rank = static_cast<int>(v->type().rank());
  std::vector<int64_t> pads(2 * rank, 0);
  bool any = false;
  for (int a = 0; a < rank; ++a) {
    pads[rank + a] = extra[a];
    any |= extra[a] != 0;
  }
  if (!any) return v;
  OTTR_ASSIGN_OR_RETURN(Value * c, IntsConstant(g, v->name() + ".pads", pads, origin));
  OTTR_ASSIGN_OR_RETURN(Node * pad, fusion::AddInferred(g, {"Pad", "", {v, c}, {g.UniqueName(v->name() + ".pad")},
                                                           {{"mode", ir::Attribute("constant")}}, origin}));
  return pad->output(0);
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* gemm = p.gemm;
  const std::string& origin = gemm->origin();
  const int64_t kp = RoundUp(p.k, p.align) - p.k, np = RoundUp(p.n, p.align) - p.n;
  std::vector<Value*> ins = gemm->inputs();
  std::vector<std::string> what;
  // A: k is axis 1 (axis 0 with transA); B: k is axis 0 and n axis 1 (swapped with transB).
  std::vector<int64_t> a_extra(2, 0), b_extra(2, 0);
  a_extra[p.ta ? 0 : 1] = kp;
  b_extra[p.tb ? 1 : 0] = kp;
  b_extra[p.tb ? 0 : 1] = np;
  OTTR_ASSIGN_OR_RETURN(ins[0], PadAxes(g, ins[0], a_extra, origin));
  OTTR_ASSIGN_OR_RETURN(ins[1], PadAxes(g, ins[1], b_extra, origin));
  if (np > 0 && p.pad_bias) {
    std::vector<int64_t> c_extra(ins[2]->type().rank(), 0);
    c_extra.back() = np;
    OTTR_ASSIGN_OR_RETURN(ins[2], PadAxes(g, ins[2], c_extra, origin));
  }
  if (kp > 0) what.push_back(absl::StrCat("k ", p.k, " -> ", p.k + kp));
  if (np > 0) what.push_back(absl::StrCat("n ", p.n, " -> ", p.n + np));
  Value* y = gemm->output(0);
  OTTR_ASSIGN_OR_RETURN(Node * padded, fusion::AddInferred(g, {gemm->op_type(), "", ins, {g.UniqueName(y->name() + ".pad")},
                                                              gemm->attrs(), origin}));
  Value* out = padded->output(0);
  if (np > 0) {
    OTTR_ASSIGN_OR_RETURN(Value * starts, IntsConstant(g, y->name() + ".starts", {0}, origin));
    OTTR_ASSIGN_OR_RETURN(Value * ends, IntsConstant(g, y->name() + ".ends", {p.n}, origin));
    OTTR_ASSIGN_OR_RETURN(Value * axes, IntsConstant(g, y->name() + ".axes", {1}, origin));
    OTTR_ASSIGN_OR_RETURN(Node * slice, fusion::AddInferred(g, {"Slice", "", {out, starts, ends, axes},
                                                               {g.UniqueName(y->name() + ".sliced")}, {}, origin}));
    out = slice->output(0);
  }
  fusion::Renames renames;
  renames.Replace(g, y, out);
  OTTR_RETURN_IF_ERROR(g.EraseNode(gemm));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("padded ", padded->Describe(), " (", p.m, "x", p.n, "x", p.k, "): ", absl::StrJoin(what, ", "),
                      " with zeros", np > 0 ? ", the product sliced back" : ""));
  return absl::OkStatus();
}

class PadGemmDimsPass : public Pass {
 public:
  PadGemmDimsPass(double min_macs, int64_t min_rows, bool float32)
      : min_macs_(min_macs), min_rows_(min_rows), float32_(float32) {}
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (IsCandidate(n, float32_)) roots.push_back(n);
    }
    // A rewrite replaces only its own GEMM: the other roots stay valid.
    return fusion::MatchAndRewrite(
        roots, remarks(), kName, [&](Node* n, std::string* why) { return Match(n, min_macs_, min_rows_, why); },
        [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }

 private:
  double min_macs_;
  int64_t min_rows_;
  bool float32_;
};

}  // namespace

std::unique_ptr<Pass> CreatePadGemmDimsPass(double min_macs, int64_t min_rows, bool float32) {
  return std::make_unique<PadGemmDimsPass>(min_macs, min_rows, float32);
}

}  // namespace ottr::passes
