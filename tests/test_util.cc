#include "tests/test_util.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"

namespace ottr::testing {

absl::StatusOr<std::vector<ir::Tensor>> RunSingleNode(
    const std::string& op_type, const std::vector<ir::Tensor>& inputs,
    const std::map<std::string, ir::Attribute>& attrs, int num_outputs, const std::string& domain,
    int64_t opset) {
  ir::Graph g("single_node");
  g.set_opset_import(domain, opset > 0 ? opset : (domain.empty() ? ir::kMaxOnnxOpset : 1));
  ir::NodeSpec spec{op_type, domain, {}, {}, attrs, "n0"};
  runtime::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    const std::string name = absl::StrCat("in", i);
    OTTR_ASSIGN_OR_RETURN(ir::Value * v, g.AddInput(name, inputs[i].type()));
    spec.inputs.push_back(v);
    feeds[name] = inputs[i];
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  for (int i = 0; i < num_outputs; ++i) g.AddOutput(n->output(i));
  const ir::OpRegistry& registry = ir::OpRegistry::Global();
  OTTR_RETURN_IF_ERROR(registry.CheckNode(*n, g.opset(domain)));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(registry, g));
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  return exec->Run(feeds);
}

ir::Tensor RandomFloat(std::vector<int64_t> dims, uint64_t seed, float lo, float hi) {
  ir::Tensor t(ir::DType::kFloat32, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& x : t.span<float>()) x = dist(rng);
  return t;
}

ir::Tensor RandomBFloat16(std::vector<int64_t> dims, uint64_t seed, float lo, float hi) {
  const ir::Tensor f = RandomFloat(std::move(dims), seed, lo, hi);
  ir::Tensor b(ir::DType::kBFloat16, f.dims());
  for (int64_t i = 0; i < f.num_elements(); ++i) b.data<ir::BFloat16>()[i] = ir::FloatToBFloat16(f.data<float>()[i]);
  return b;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> ToFloat64(const ir::Graph& g) {
  std::unique_ptr<ir::Graph> out = g.Clone();
  const auto widen = [](ir::Value* v) {
    if (v->type().dtype == ir::DType::kFloat32) v->set_type(ir::TensorType(ir::DType::kFloat64, v->type().shape));
  };
  for (const ir::Node* n : out->nodes()) {
    for (const auto& [name, a] : n->attrs()) {
      if (a.kind() == ir::Attribute::Kind::kTensor && a.t().dtype() == ir::DType::kFloat32) {
        return absl::UnimplementedError(absl::StrCat("ToFloat64: ", n->Describe(), " has a float32 tensor attribute"));
      }
    }
    for (ir::Value* v : n->outputs()) widen(v);
  }
  for (ir::Value* v : out->inputs()) widen(v);
  const std::vector<ir::Value*> initializers = out->initializers();
  for (ir::Value* v : initializers) {
    if (v->initializer()->dtype() != ir::DType::kFloat32) continue;
    OTTR_ASSIGN_OR_RETURN(ir::Tensor wide, runtime::cpu::ew::CastTensor(*v->initializer(), ir::DType::kFloat64));
    const std::string name = v->name();
    out->RenameValue(v, out->UniqueName(name + ".f32"));
    OTTR_ASSIGN_OR_RETURN(ir::Value * w, out->AddInitializer(name, std::move(wide)));
    out->ReplaceAllUsesWith(v, w);
    OTTR_RETURN_IF_ERROR(out->EraseValue(v));
  }
  return out;
}

int CountOps(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

double NormwiseRelativeError(const ir::Tensor& got, const ir::Tensor& want) {
  double d = 0, n = 0;
  for (int64_t j = 0; j < want.num_elements() && j < got.num_elements(); ++j) {
    const double w = want.GetAsDouble(j), y = got.GetAsDouble(j);
    d += (y - w) * (y - w);
    n += w * w;
  }
  if (n == 0) return d == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(d / n);
}

ir::Tensor RandomInt64(std::vector<int64_t> dims, uint64_t seed, int64_t lo, int64_t hi) {
  ir::Tensor t(ir::DType::kInt64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t& x : t.span<int64_t>()) x = dist(rng);
  return t;
}

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(OTTR_SOURCE_DIR, "/", relative);
}

}  // namespace ottr::testing
