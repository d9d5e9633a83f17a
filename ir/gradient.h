// What a gradient rule sees and uses: the forward node, the gradients flowing into its outputs,
// which inputs need gradients, and helpers that emit IR. Rules are registered per op with
// OpRegistry::SetGradient in ir/grads/*.cc and state their math in a comment, e.g.
//
//   // Y = A · B:  dA = dY · Bᵀ,  dB = Aᵀ · dY
//
// The training graph has static shapes (the batch is bound first), so rules may rely on static
// dimensions; SumToShape undoes broadcasting.
#ifndef OTTR_IR_GRADIENT_H_
#define OTTR_IR_GRADIENT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace ottr::ir {

class GradientBuilder {
 public:
  GradientBuilder(Graph& graph, const Node& node, std::vector<Value*> output_grads,
                  std::vector<bool> needs_input_grad);

  const Node& node() const { return node_; }
  Graph& graph() { return graph_; }
  Value* input(int i) const { return node_.input(i); }
  Value* output(int i) const { return node_.output(i); }
  // Gradient of the loss w.r.t. output i; null when none flows into it (treat as zero).
  Value* output_grad(int i) const {
    return i < static_cast<int>(output_grads_.size()) ? output_grads_[i] : nullptr;
  }
  // Whether input i needs a gradient (it leads to a trainable parameter and is float).
  bool needs_input_grad(int i) const {
    return i < static_cast<int>(needs_.size()) && needs_[i];
  }
  void set_input_grad(int i, Value* g);
  const std::vector<Value*>& input_grads() const { return input_grads_; }

  // Emits a node (origin "<forward origin>/grad"), infers its output types, returns its outputs.
  absl::StatusOr<std::vector<Value*>> Emit(const std::string& op_type, std::vector<Value*> inputs,
                                           std::map<std::string, Attribute> attrs = {},
                                           int num_outputs = 1, const std::string& domain = "");
  absl::StatusOr<Value*> Emit1(const std::string& op_type, std::vector<Value*> inputs,
                               std::map<std::string, Attribute> attrs = {},
                               const std::string& domain = "");
  // A Constant node holding `t`.
  absl::StatusOr<Value*> Constant(Tensor t);
  // A scalar Constant of element type `dtype`.
  absl::StatusOr<Value*> Scalar(double v, DType dtype);
  // An i64 1-D Constant (axes, shapes).
  absl::StatusOr<Value*> Ints(const std::vector<int64_t>& v);
  // Sums `grad` over the dimensions broadcasting added or stretched so it gets `shape`
  // (ReduceSum with keepdims, then Reshape when the rank differs). Static shapes required.
  absl::StatusOr<Value*> SumToShape(Value* grad, const TensorType& target);
  // `grad` reshaped to `target`'s static shape (no-op when equal).
  absl::StatusOr<Value*> ReshapeTo(Value* grad, const TensorType& target);

  // InvalidArgument naming the node.
  absl::Status Error(absl::string_view msg) const;

 private:
  Graph& graph_;
  const Node& node_;
  std::vector<Value*> output_grads_;
  std::vector<bool> needs_;
  std::vector<Value*> input_grads_;
};

}  // namespace ottr::ir

#endif  // OTTR_IR_GRADIENT_H_
