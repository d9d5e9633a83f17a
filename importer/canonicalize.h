// Rewrites ONNX nodes of older opsets into the canonical form the IR uses (the newest opset's
// form), e.g. ReduceSum's `axes` attribute (before opset 13) into its `axes` input, Clip's
// min/max attributes (before 11) into inputs, Softmax's 2-D coercion (before 13) into
// Flatten + Softmax + Reshape, and Constant's value_* attributes into `value`.
#ifndef OTTR_IMPORTER_CANONICALIZE_H_
#define OTTR_IMPORTER_CANONICALIZE_H_

#include <functional>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace ottr::importer {

// What a canonicalizer may do besides editing the node spec: add constants and nodes that run
// before the node.
class CanonicalizeContext {
 public:
  CanonicalizeContext(ir::Graph& graph, std::function<absl::StatusOr<ir::Node*>(ir::NodeSpec)> add)
      : graph_(graph), add_node_(std::move(add)) {}
  ir::Graph& graph() { return graph_; }
  // A new initializer holding `t`, named after `hint`.
  absl::StatusOr<ir::Value*> AddConstant(const std::string& hint, ir::Tensor t);
  // Adds a helper node (shape inference runs on it).
  absl::StatusOr<ir::Node*> AddNode(ir::NodeSpec spec) { return add_node_(std::move(spec)); }

 private:
  ir::Graph& graph_;
  std::function<absl::StatusOr<ir::Node*>(ir::NodeSpec)> add_node_;
};

// Rewrites `spec` (an ai.onnx node at `opset`) in place. Returns true when the node was lowered to
// other nodes entirely (added through ctx, the last one producing the node's outputs under their
// names); the caller then does not add `spec`.
absl::StatusOr<bool> Canonicalize(ir::NodeSpec& spec, int64_t opset, CanonicalizeContext& ctx);

}  // namespace ottr::importer

#endif  // OTTR_IMPORTER_CANONICALIZE_H_
