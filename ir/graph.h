// The ottr IR: SSA values, nodes and the graph that owns both.
//
// A Value has at most one producer (a node output) or is a graph input, an initializer (a constant
// tensor owned by the graph, e.g. a parameter) or a capture (a name a subgraph reads from its
// enclosing graph). Only Graph methods edit use lists, so `uses()` is always exact.
#ifndef OTTR_IR_GRAPH_H_
#define OTTR_IR_GRAPH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/attribute.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace ottr::ir {

inline constexpr absl::string_view kOnnxDomain = "";  // ai.onnx is the empty domain in ONNX
inline constexpr absl::string_view kTrainingDomain = "ai.onnx.preview.training";
inline constexpr absl::string_view kOttrDomain = "ottr";

class Node;
class Value;
class Graph;

// A training step's state update: after the step, initializer `target` holds `value`.
struct StateUpdate {
  Value* target;
  Value* value;
};

struct Use {
  Node* node;
  int index;  // input slot of `node`
  bool operator==(const Use& o) const = default;
};

class Value {
 public:
  enum class Kind { kNodeOutput, kInput, kInitializer, kCapture };

  int64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  Kind kind() const { return kind_; }
  const TensorType& type() const { return type_; }
  void set_type(TensorType t) { type_ = std::move(t); }
  Node* producer() const { return producer_; }
  int producer_index() const { return producer_index_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool is_initializer() const { return kind_ == Kind::kInitializer; }
  // The constant data of an initializer; null for other values.
  const Tensor* initializer() const { return initializer_ ? &*initializer_ : nullptr; }
  Graph* graph() const { return graph_; }

 private:
  friend class Graph;
  int64_t id_ = 0;
  std::string name_;
  Kind kind_ = Kind::kNodeOutput;
  TensorType type_;
  Node* producer_ = nullptr;
  int producer_index_ = -1;
  std::vector<Use> uses_;
  std::optional<Tensor> initializer_;
  Graph* graph_ = nullptr;
};

class Node {
 public:
  int64_t id() const { return id_; }
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }
  // "Gemm", or "ai.onnx.preview.training.Adam" / "ottr.FusedGemm" outside the default domain.
  std::string QualifiedOpType() const;
  // The ONNX node name this node came from (or was derived from); used in every error about it.
  const std::string& origin() const { return origin_; }
  void set_origin(std::string o) { origin_ = std::move(o); }
  // Origin and op in one phrase for messages: "node 'fc1' (Gemm)".
  std::string Describe() const;

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  // Input i, or null when omitted or past the end (ONNX optional inputs).
  Value* input(int i) const { return i < num_inputs() ? inputs_[i] : nullptr; }
  Value* output(int i) const { return i < num_outputs() ? outputs_[i] : nullptr; }
  bool has_input(int i) const { return input(i) != nullptr; }
  // Output i exists and something reads it (a node or the graph outputs).
  bool output_used(int i) const;

  const std::map<std::string, Attribute>& attrs() const { return attrs_; }
  bool has_attr(const std::string& name) const { return attrs_.count(name) > 0; }
  const Attribute* attr(const std::string& name) const;
  void set_attr(const std::string& name, Attribute a) { attrs_[name] = std::move(a); }
  void erase_attr(const std::string& name) { attrs_.erase(name); }
  int64_t GetInt(const std::string& name, int64_t def) const;
  float GetFloat(const std::string& name, float def) const;
  std::string GetString(const std::string& name, const std::string& def) const;
  std::vector<int64_t> GetInts(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> GetFloats(const std::string& name, std::vector<float> def = {}) const;

  Graph* graph() const { return graph_; }

 private:
  friend class Graph;
  int64_t id_ = 0;
  std::string op_type_;
  std::string domain_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, Attribute> attrs_;  // sorted: printing is deterministic
  std::string origin_;
  Graph* graph_ = nullptr;
};

// Arguments of Graph::AddNode.
struct NodeSpec {
  std::string op_type;
  std::string domain;  // "" = ai.onnx
  std::vector<Value*> inputs;  // null entries are omitted optional inputs
  std::vector<std::string> output_names;  // one per output; "" = generate a unique name
  std::map<std::string, Attribute> attrs;
  std::string origin;
};

class Graph {
 public:
  explicit Graph(std::string name = "main");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Opset version per domain ("" = ai.onnx) the graph was imported at.
  const std::map<std::string, int64_t>& opset_imports() const { return opset_imports_; }
  void set_opset_import(const std::string& domain, int64_t version) {
    opset_imports_[domain] = version;
  }
  int64_t opset(const std::string& domain) const;  // 0 when not imported

  // --- construction -------------------------------------------------------------------------
  absl::StatusOr<Value*> AddInput(const std::string& name, TensorType type);
  absl::StatusOr<Value*> AddInitializer(const std::string& name, Tensor data);
  // A value a subgraph reads from the enclosing scope by name.
  absl::StatusOr<Value*> AddCapture(const std::string& name, TensorType type);
  // Appends a node; creates its outputs (named or uniquely generated) and updates use lists.
  absl::StatusOr<Node*> AddNode(NodeSpec spec);
  void AddOutput(Value* v);
  void SetOutput(int i, Value* v);
  void ClearOutputs() { outputs_.clear(); }
  // Declares that after each run, initializer `target` takes the value of `value` (same type).
  absl::Status AddUpdate(Value* target, Value* value);
  // Replaces an initializer's data (same dtype and dims; e.g. updated parameters).
  absl::Status SetInitializerData(Value* v, Tensor data);

  // --- edits --------------------------------------------------------------------------------
  void SetNodeInput(Node* node, int index, Value* v);  // v may be null (omit)
  void AppendNodeInput(Node* node, Value* v);
  // Every use of `from` (node inputs and graph outputs) now reads `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);
  // Removes a node; FailedPrecondition while any of its outputs is used or a graph output.
  absl::Status EraseNode(Node* node);
  // Removes an unused input, initializer or capture.
  absl::Status EraseValue(Value* v);
  void RenameValue(Value* v, const std::string& name);

  // --- queries ------------------------------------------------------------------------------
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<Value*>& initializers() const { return initializers_; }
  const std::vector<Value*>& captures() const { return captures_; }
  const std::vector<StateUpdate>& updates() const { return updates_; }
  // Nodes in insertion order (not necessarily topological).
  std::vector<Node*> nodes() const;
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  // Kahn's algorithm; ties broken by insertion order so the result is deterministic.
  absl::StatusOr<std::vector<Node*>> TopoOrder() const;
  Value* FindValue(const std::string& name) const;
  bool IsGraphOutput(const Value* v) const;
  // A graph output or the value of a state update: something a run must compute.
  bool IsRoot(const Value* v) const;
  // A name not used by any value of this graph, derived from `prefix`.
  std::string UniqueName(const std::string& prefix);

  // Deep copy (values, nodes, initializers, subgraphs); ids and names are preserved.
  std::unique_ptr<Graph> Clone() const;

  // Printed form (see printer.h); equal graphs print equally.
  std::string ToString() const;

 private:
  Value* NewValue(const std::string& name, Value::Kind kind);
  void RemoveUse(Value* v, Node* node, int index);

  std::string name_;
  std::map<std::string, int64_t> opset_imports_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Value*> initializers_;
  std::vector<Value*> captures_;
  std::vector<StateUpdate> updates_;
  absl::flat_hash_map<std::string, Value*> by_name_;
  int64_t next_value_id_ = 0;
  int64_t next_node_id_ = 0;
  int64_t next_unique_ = 0;
};

}  // namespace ottr::ir

#endif  // OTTR_IR_GRAPH_H_
