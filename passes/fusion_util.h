// Helpers shared by the GEMM fusion passes (fuse_gemm_epilogue.cc, fuse_gemm_backward.cc).
#ifndef OTTR_PASSES_FUSION_UTIL_H_
#define OTTR_PASSES_FUSION_UTIL_H_

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/fused_gemm.h"
#include "ir/graph.h"
#include "ir/status.h"

namespace ottr::passes::fusion {

// The integer values of a constant (Constant node or integer initializer), else nullopt.
std::optional<std::vector<int64_t>> ConstInts(const ir::Value* v);

// Writes "<pass>: <text>\n" to `out` when it is not null.
void Remark(std::ostream* out, absl::string_view pass, absl::string_view text);

// The loop every fusion pass runs: `match(node, &why)` each root in order (a std::optional plan,
// or nullopt with the reason); a decline is remarked as "declined <node>: <why>", a plan is
// handed to `rewrite(plan)`. Returns whether anything was rewritten.
template <typename MatchFn, typename RewriteFn>
absl::StatusOr<bool> MatchAndRewrite(const std::vector<ir::Node*>& roots, std::ostream* remarks,
                                     absl::string_view pass, MatchFn match, RewriteFn rewrite) {
  bool changed = false;
  for (ir::Node* n : roots) {
    std::string why;
    auto plan = match(n, &why);
    if (!plan) {
      Remark(remarks, pass, absl::StrCat("declined ", n->Describe(), ": ", why));
      continue;
    }
    OTTR_RETURN_IF_ERROR(rewrite(*plan));
    changed = true;
  }
  return changed;
}

// "" when cuBLASLt's epilogues run on `t` (f32, f16, bf16), else the reason they do not.
std::string UnsupportedDType(ir::DType t);

// `v` exists and is float32.
inline bool IsF32(const ir::Value* v) { return v != nullptr && v->type().dtype == ir::DType::kFloat32; }

// A 16-bit float type of mixed precision: bfloat16 or float16.
inline bool IsLowFloat(ir::DType t) { return t == ir::DType::kBFloat16 || t == ir::DType::kFloat16; }

// The node that is the only reader of `v` (and `v` is not a graph output or state update), else
// null.
ir::Node* SoleUser(const ir::Value* v);

// Node is `op` in the ai.onnx domain.
bool IsOnnx(const ir::Node* n, absl::string_view op);
bool IsOttr(const ir::Node* n, absl::string_view op);

// The FusedGemm epilogue of `n`, or nullopt when `n` is not an ottr::FusedGemm.
std::optional<ir::FusedEpilogue> FusedEpilogueOf(const ir::Node* n);

// A plain matrix product the backward passes can take over: an ONNX Gemm with no C (or beta 0),
// or an ottr::FusedGemm with epilogue "none" (fold-gemm-casts makes those), 2-D static operands.
bool IsPlainGemm(const ir::Node* n);

// Copies `from`'s output_type attribute (ottr::FusedGemm) into `attrs`, when it has one.
void CopyOutputType(const ir::Node* from, std::map<std::string, ir::Attribute>& attrs);

// A bias gradient of `d` (2-D): ReduceSum(d, axes = [axis]) with keepdims 0, or with keepdims 1
// followed by a Reshape to 1-D that is its only reader. `result` is the 1-D value; `chain` the
// nodes to erase once `result` is replaced, in order.
struct BiasGradMatch {
  ir::Value* result = nullptr;
  std::vector<ir::Node*> chain;
};
// Matches the pattern rooted at ReduceSum `s`; on failure returns the reason in `why`. `axis` is
// the reduced axis (0 or 1).
std::optional<BiasGradMatch> MatchBiasGrad(ir::Node* s, int* axis, std::string* why);
// Extends `m` by the Cast that is the only reader of its result when that Cast converts to `to`
// (a widened sum); returns whether it did.
bool AppendCastTo(BiasGradMatch& m, ir::DType to);
// The first bias gradient of `d` over `axis` among its readers.
std::optional<BiasGradMatch> FindBiasGrad(const ir::Value* d, int axis);

// The grouped optimizer updates (ottr::AdamUpdateN / SGDUpdateN) of `g`, in node order.
std::vector<ir::Node*> GroupedUpdates(const ir::Graph& g);

// How far from the step's inputs each value is made, in nodes: 0 for inputs and initializers
// (absent from the map), else one more than the deepest input of its producer.
using Depths = absl::flat_hash_map<const ir::Value*, int>;
Depths ValueDepths(const std::vector<ir::Node*>& topo_order);
int DepthOf(const Depths& depths, const ir::Value* v);

// Adds `spec`, infers its shapes (with the values of Constant-node inputs) and returns it.
absl::StatusOr<ir::Node*> AddInferred(ir::Graph& g, ir::NodeSpec spec);

// Erases `nodes` in order (each must be dead by then), then any Constant nodes that fed them and
// are now unread.
absl::Status EraseDead(ir::Graph& g, const std::vector<ir::Node*>& nodes);

// Replaces `from` (every reader) by `to` and gives `to` the name of `from` once `from` is gone:
// call Rename after the erasures.
struct Renames {
  std::vector<std::pair<ir::Value*, std::string>> pending;
  void Replace(ir::Graph& g, ir::Value* from, ir::Value* to) {
    g.ReplaceAllUsesWith(from, to);
    pending.emplace_back(to, from->name());
  }
  void Apply(ir::Graph& g) {
    for (auto& [v, name] : pending) g.RenameValue(v, name);
    pending.clear();
  }
};

}  // namespace ottr::passes::fusion

#endif  // OTTR_PASSES_FUSION_UTIL_H_
