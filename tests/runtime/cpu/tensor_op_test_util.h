// Test helpers for the tensor, reduction and control-flow op tests: one node whose inputs may be
// constants (initializers, so shape functions see their values) or graph inputs with a declared
// type (e.g. symbolic dims), run through shape inference and the CPU reference (which checks every
// output against its static type).
#ifndef OTTR_TESTS_RUNTIME_CPU_TENSOR_OP_TEST_UTIL_H_
#define OTTR_TESTS_RUNTIME_CPU_TENSOR_OP_TEST_UTIL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "ir/tensor.h"
#include "runtime/cpu/cpu_executor.h"

namespace ottr::testing {

// One input of the node under test.
struct NodeInput {
  ir::Tensor value;                         // undefined: an omitted optional input
  bool constant = false;                    // an initializer (its value is known to inference)
  std::optional<ir::TensorType> declared;   // graph-input type to declare instead of value's
};

inline NodeInput In(ir::Tensor t) { return {std::move(t), false, std::nullopt}; }
inline NodeInput Const(ir::Tensor t) { return {std::move(t), true, std::nullopt}; }
inline NodeInput Declared(ir::Tensor t, ir::TensorType type) { return {std::move(t), false, type}; }
inline NodeInput Omitted() { return {}; }

struct NodeResult {
  std::vector<ir::TensorType> types;  // static output types after shape inference
  std::vector<ir::Tensor> outputs;    // computed outputs
};

// Builds the one-node graph and runs inference; returns the output types (no execution).
inline absl::StatusOr<std::vector<ir::TensorType>> InferNode(
    const std::string& op, const std::vector<NodeInput>& inputs,
    const std::map<std::string, ir::Attribute>& attrs = {}, int num_outputs = 1) {
  ir::Graph g("infer");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  ir::NodeSpec spec{op, "", {}, {}, attrs, "n0"};
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].value.defined() && !inputs[i].declared) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    const std::string name = absl::StrCat("in", i);
    ir::Value* v;
    if (inputs[i].constant) {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInitializer(name, inputs[i].value));
    } else {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInput(name, inputs[i].declared.value_or(inputs[i].value.type())));
    }
    spec.inputs.push_back(v);
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::OpRegistry::Global().CheckNode(*n, ir::kMaxOnnxOpset));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  std::vector<ir::TensorType> types;
  for (int i = 0; i < num_outputs; ++i) types.push_back(n->output(i)->type());
  return types;
}

// Builds the graph, infers shapes and runs it on the CPU reference with type checks on.
inline absl::StatusOr<NodeResult> RunNode(const std::string& op,
                                          const std::vector<NodeInput>& inputs,
                                          const std::map<std::string, ir::Attribute>& attrs = {},
                                          int num_outputs = 1) {
  ir::Graph g("run");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  ir::NodeSpec spec{op, "", {}, {}, attrs, "n0"};
  runtime::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].value.defined()) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    const std::string name = absl::StrCat("in", i);
    ir::Value* v;
    if (inputs[i].constant) {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInitializer(name, inputs[i].value));
    } else {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInput(name, inputs[i].declared.value_or(inputs[i].value.type())));
      feeds[name] = inputs[i].value;
    }
    spec.inputs.push_back(v);
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  for (int i = 0; i < num_outputs; ++i) g.AddOutput(n->output(i));
  OTTR_RETURN_IF_ERROR(ir::OpRegistry::Global().CheckNode(*n, ir::kMaxOnnxOpset));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  NodeResult r;
  for (int i = 0; i < num_outputs; ++i) r.types.push_back(n->output(i)->type());
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(r.outputs, exec->Run(feeds));
  return r;
}

template <typename T>
ir::Tensor Vec(std::vector<int64_t> dims, std::vector<T> values) {
  return ir::Tensor::FromVector<T>(std::move(dims), values);
}
inline ir::Tensor I64(std::vector<int64_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return ir::Tensor::FromVector<int64_t>({n}, values);
}

// Element i of a tensor of type T.
template <typename T>
T At(const ir::Tensor& t, int64_t i) {
  return t.data<T>()[i];
}

// All elements as doubles (for comparisons in tests).
inline std::vector<double> Values(const ir::Tensor& t) {
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.GetAsDouble(i);
  return v;
}

// Row-major offset of `coord` in `dims`.
inline int64_t Offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& coord) {
  int64_t o = 0;
  for (size_t i = 0; i < dims.size(); ++i) o = o * dims[i] + coord[i];
  return o;
}

}  // namespace ottr::testing

#endif  // OTTR_TESTS_RUNTIME_CPU_TENSOR_OP_TEST_UTIL_H_
