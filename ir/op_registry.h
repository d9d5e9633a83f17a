// The op registry: one schema per (domain, op type) with the opset range ottr imports, the
// attributes it accepts (kind, default, required), input/output arity and the shape function.
// Other layers attach their parts of an op's entry (CPU kernel, gradient builder, CUDA kernel) in
// their own tables keyed the same way; a registry-wide test checks that every op is complete.
//
// Canonical form: the IR always uses the newest ONNX form of an op (e.g. ReduceSum's axes as an
// input, Softmax on one axis). The importer rewrites older opsets into it, so shape functions and
// kernels see one form only.
#ifndef OTTR_IR_OP_REGISTRY_H_
#define OTTR_IR_OP_REGISTRY_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/attribute.h"
#include "ir/graph.h"

namespace ottr::ir {

// Newest ai.onnx opset ottr knows; models may declare up to this.
inline constexpr int64_t kMaxOnnxOpset = 27;
// Oldest ai.onnx opset ottr imports.
inline constexpr int64_t kMinOnnxOpset = 7;

// What a shape function sees of one node: input types, constant input values where known, and
// where it writes output types.
class InferenceContext {
 public:
  InferenceContext(const Node& node, std::vector<const TensorType*> input_types,
                   std::vector<const Tensor*> input_constants)
      : node_(node),
        input_types_(std::move(input_types)),
        input_constants_(std::move(input_constants)),
        output_types_(node.num_outputs()) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  int num_outputs() const { return node_.num_outputs(); }
  bool has_input(int i) const { return i < num_inputs() && input_types_[i] != nullptr; }
  // Type of input i; requires has_input(i).
  const TensorType& input_type(int i) const { return *input_types_[i]; }
  // The value of input i when it is a constant (initializer or folded); null otherwise.
  const Tensor* input_constant(int i) const {
    return i < static_cast<int>(input_constants_.size()) ? input_constants_[i] : nullptr;
  }
  void set_output_type(int i, TensorType t) { output_types_[i] = std::move(t); }
  const std::vector<std::optional<TensorType>>& output_types() const { return output_types_; }

  // InvalidArgument naming the node: "node 'x' (Gemm): <msg>".
  absl::Status Error(absl::string_view msg) const;

 private:
  const Node& node_;
  std::vector<const TensorType*> input_types_;
  std::vector<const Tensor*> input_constants_;
  std::vector<std::optional<TensorType>> output_types_;
};

using ShapeFn = std::function<absl::Status(InferenceContext&)>;

class GradientBuilder;  // ir/gradient.h
// Emits the IR computing an op's input gradients from its output gradients (see gradient.h).
using GradientFn = std::function<absl::Status(GradientBuilder&)>;

struct AttrSpec {
  std::string name;
  Attribute::Kind kind;
  bool required = false;
};

struct OpSchema {
  std::string domain;   // "" = ai.onnx
  std::string op_type;
  int64_t min_opset = kMinOnnxOpset;  // first opset of `domain` ottr imports this op at
  int64_t max_opset = kMaxOnnxOpset;  // last opset of `domain` the canonical form is valid for
  int min_inputs = 0;
  int max_inputs = 0;   // -1: variadic
  int min_outputs = 1;
  int max_outputs = 1;  // -1: variadic
  std::vector<AttrSpec> attrs;
  ShapeFn infer_shape;
  // False for ops whose output is random (Dropout in training) and so never constant-folded.
  bool deterministic = true;
  // Reverse-mode rule; set by the ir/grads/*.cc files. Exactly one of `gradient` and
  // `not_differentiable` holds for every op (a registry-wide test checks it).
  GradientFn gradient;
  // No gradient flows through this op (integer/bool results, shapes, comparisons, constants,
  // optimizer updates).
  bool not_differentiable = false;

  const AttrSpec* FindAttr(absl::string_view name) const;
};

// Fluent builder used by the ir/ops/*.cc registration files.
class OpSchemaBuilder {
 public:
  OpSchemaBuilder(std::string domain, std::string op_type) {
    schema_.domain = std::move(domain);
    schema_.op_type = std::move(op_type);
  }
  OpSchemaBuilder& Opsets(int64_t min, int64_t max = kMaxOnnxOpset) {
    schema_.min_opset = min;
    schema_.max_opset = max;
    return *this;
  }
  OpSchemaBuilder& Inputs(int min, int max) {
    schema_.min_inputs = min;
    schema_.max_inputs = max;
    return *this;
  }
  OpSchemaBuilder& Outputs(int min, int max) {
    schema_.min_outputs = min;
    schema_.max_outputs = max;
    return *this;
  }
  OpSchemaBuilder& Attr(std::string name, Attribute::Kind kind, bool required = false) {
    schema_.attrs.push_back({std::move(name), kind, required});
    return *this;
  }
  OpSchemaBuilder& Shape(ShapeFn fn) {
    schema_.infer_shape = std::move(fn);
    return *this;
  }
  OpSchemaBuilder& NonDeterministic() {
    schema_.deterministic = false;
    return *this;
  }
  OpSchemaBuilder& NotDifferentiable() {
    schema_.not_differentiable = true;
    return *this;
  }
  OpSchema Build() { return std::move(schema_); }

 private:
  OpSchema schema_;
};

class OpRegistry {
 public:
  // The process-wide registry with every op ottr knows (built on first use).
  static const OpRegistry& Global();

  void Register(OpSchema schema);
  // Attaches the gradient builder of a registered op (Internal error in tests when unknown).
  void SetGradient(absl::string_view domain, absl::string_view op_type, GradientFn fn);
  const OpSchema* Find(absl::string_view domain, absl::string_view op_type) const;
  std::vector<const OpSchema*> All() const;  // sorted by domain, op type

  // Checks a node against its schema (known op, opset range, arity, attribute kinds); the error
  // names the node, op, domain and opset.
  absl::Status CheckNode(const Node& node, int64_t opset) const;

 private:
  absl::flat_hash_map<std::string, OpSchema> schemas_;  // key: domain + "::" + op_type
};

// Runs the op's shape function on `node` with the current input types (and constant inputs that
// are initializers), and sets the output types. Outputs the function leaves unset keep theirs.
absl::Status InferNodeShapes(const OpRegistry& registry, Node& node,
                             const std::vector<const Tensor*>& extra_constants = {});

// Runs InferNodeShapes over the graph in topological order.
absl::Status InferGraphShapes(const OpRegistry& registry, Graph& graph);

// Registration entry points, one per ir/ops/*.cc file.
void RegisterElementwiseOps(OpRegistry& r);
void RegisterActivationOps(OpRegistry& r);
void RegisterReductionOps(OpRegistry& r);
void RegisterTensorOps(OpRegistry& r);
void RegisterLinalgOps(OpRegistry& r);
void RegisterConvPoolOps(OpRegistry& r);
void RegisterNormalizationOps(OpRegistry& r);
void RegisterLossOps(OpRegistry& r);
void RegisterTrainingOps(OpRegistry& r);
void RegisterControlFlowOps(OpRegistry& r);
void RegisterOptimizerOps(OpRegistry& r);
void RegisterFusedOps(OpRegistry& r);  // ops made by the fusion passes (ir/fused_gemm.h)

// Gradient registration entry points, one per ir/grads/*.cc file (run after the ops).
void RegisterElementwiseGradients(OpRegistry& r);
void RegisterActivationGradients(OpRegistry& r);
void RegisterReductionGradients(OpRegistry& r);
void RegisterTensorGradients(OpRegistry& r);
void RegisterLinalgGradients(OpRegistry& r);
void RegisterConvPoolGradients(OpRegistry& r);
void RegisterNormalizationGradients(OpRegistry& r);
void RegisterLossGradients(OpRegistry& r);

}  // namespace ottr::ir

#endif  // OTTR_IR_OP_REGISTRY_H_
