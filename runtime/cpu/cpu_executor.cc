#include "runtime/cpu/cpu_executor.h"

#include <cmath>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"

namespace ottr::runtime::cpu {

// The values visible to a running graph: its own environment plus the enclosing scopes, which
// captures read by name.
struct CpuExecutor::Scope {
  const ir::Graph* graph;
  const absl::flat_hash_map<const ir::Value*, Tensor>* env;
  const Scope* parent;

  const Tensor* Lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      const ir::Value* v = s->graph->FindValue(name);
      if (v == nullptr) continue;
      auto it = s->env->find(v);
      if (it != s->env->end()) return &it->second;
    }
    return nullptr;
  }
};

absl::Status CheckCpuKernels(const ir::Graph& graph) {
  const KernelRegistry& kernels = KernelRegistry::Global();
  for (const ir::Node* n : graph.nodes()) {
    if (kernels.Find(n->domain(), n->op_type()) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "node '", n->origin(), "': op ", n->op_type(), " of domain ",
          n->domain().empty() ? "ai.onnx" : n->domain(), " opset ", graph.opset(n->domain()),
          " has no CPU kernel"));
    }
    for (const auto& [name, a] : n->attrs()) {
      if (a.kind() == ir::Attribute::Kind::kGraph) OTTR_RETURN_IF_ERROR(CheckCpuKernels(*a.g()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::Create(const ir::Graph& graph,
                                                                  CpuExecutorOptions options) {
  OTTR_RETURN_IF_ERROR(CheckCpuKernels(graph));
  OTTR_RETURN_IF_ERROR(graph.TopoOrder().status());
  return std::unique_ptr<CpuExecutor>(new CpuExecutor(graph, options));
}

absl::StatusOr<std::vector<Tensor>> CpuExecutor::Run(const TensorMap& feeds) {
  pending_.clear();
  absl::flat_hash_map<const ir::Value*, Tensor> env = state_;
  for (const auto& [name, t] : feeds) {
    const ir::Value* v = graph_.FindValue(name);
    if (v == nullptr || (v->kind() != ir::Value::Kind::kInput && !v->is_initializer())) {
      return absl::InvalidArgumentError(absl::StrCat("the model has no input named '", name, "'"));
    }
    OTTR_RETURN_IF_ERROR(CheckFeed(*v, t));
    env[v] = t;
  }
  for (const ir::Value* v : graph_.inputs()) {
    if (!env.contains(v)) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", v->name(), "' (",
                                                     v->type().ToString(), ")"));
    }
  }
  if (graph_.updates().empty()) return RunGraph(graph_, std::move(env), nullptr);
  // Fetch the update values as extra results, then commit them all at once.
  OTTR_ASSIGN_OR_RETURN(std::vector<Tensor> results, RunGraph(graph_, std::move(env), nullptr));
  const size_t n_out = graph_.outputs().size();
  OTTR_RET_CHECK(results.size() == n_out + graph_.updates().size());
  pending_.assign(std::make_move_iterator(results.begin() + n_out),
                  std::make_move_iterator(results.end()));
  results.resize(n_out);
  if (options_.auto_commit) CommitUpdates();
  return results;
}

void CpuExecutor::CommitUpdates() {
  for (size_t i = 0; i < pending_.size() && i < graph_.updates().size(); ++i) {
    state_[graph_.updates()[i].target] = std::move(pending_[i]);
  }
  pending_.clear();
}

const Tensor* CpuExecutor::State(const std::string& name) const {
  const ir::Value* v = graph_.FindValue(name);
  if (v == nullptr) return nullptr;
  auto it = state_.find(v);
  return it == state_.end() ? nullptr : &it->second;
}

absl::Status CpuExecutor::SetState(const std::string& name, Tensor t) {
  const ir::Value* v = graph_.FindValue(name);
  if (v == nullptr || !v->is_initializer()) {
    return absl::InvalidArgumentError(absl::StrCat("the model has no initializer named '", name, "'"));
  }
  if (t.dtype() != v->type().dtype || t.type() != v->type()) {
    return absl::InvalidArgumentError(absl::StrCat("state '", name, "' is ", v->type().ToString(),
                                                   ", got ", t.type().ToString()));
  }
  state_[v] = std::move(t);
  return absl::OkStatus();
}

std::string CpuExecutor::SaveRngState() const {
  std::ostringstream s;
  s << rng_;
  return s.str();
}

absl::Status CpuExecutor::LoadRngState(const std::string& text) {
  std::istringstream s(text);
  s >> rng_;
  if (!s) return absl::InvalidArgumentError("corrupt random-generator state");
  return absl::OkStatus();
}

namespace {

// Values a node reads: its inputs plus, for nodes with subgraphs, the outer values the subgraphs
// capture by name (they must stay alive until the node has run).
std::vector<const ir::Value*> ReadValues(const ir::Node& n, const ir::Graph& g) {
  std::vector<const ir::Value*> out(n.inputs().begin(), n.inputs().end());
  for (const auto& [name, a] : n.attrs()) {
    if (a.kind() != ir::Attribute::Kind::kGraph) continue;
    for (const ir::Value* c : a.g()->captures()) {
      if (const ir::Value* outer = g.FindValue(c->name())) out.push_back(outer);
    }
  }
  return out;
}

absl::Status CheckOutputType(const ir::Node& n, int i, const Tensor& t) {
  const ir::TensorType& want = n.output(i)->type();
  bool ok = want.dtype == ir::DType::kUndefined || want.dtype == t.dtype();
  if (ok && want.has_rank()) {
    ok = want.rank() == t.rank();
    for (int64_t d = 0; ok && d < t.rank(); ++d) {
      ok = !(*want.shape)[d].is_static() || (*want.shape)[d].value() == t.dim(d);
    }
  }
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      n.Describe(), ": output ", i, " '", n.output(i)->name(), "' was computed as ",
      ir::DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","), "] but shape inference said ",
      want.ToString()));
}

absl::Status CheckFinite(const ir::Node& n, int i, const Tensor& t) {
  if (!ir::IsFloat(t.dtype())) return absl::OkStatus();
  for (int64_t k = 0; k < t.num_elements(); ++k) {
    const double v = t.GetAsDouble(k);
    if (!std::isfinite(v)) {
      return absl::DataLossError(absl::StrCat("non-finite value ", v, " in '", n.output(i)->name(),
                                              "' (output ", i, " of ", n.Describe(),
                                              ") at flat index ", k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> CpuExecutor::RunGraph(
    const ir::Graph& graph, absl::flat_hash_map<const ir::Value*, Tensor> env,
    const Scope* parent) {
  Scope scope{&graph, &env, parent};
  for (const ir::Value* c : graph.captures()) {
    const Tensor* t = parent ? parent->Lookup(c->name()) : nullptr;
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("subgraph '", graph.name(),
                                                     "' reads undefined outer value '",
                                                     c->name(), "'"));
    }
    env[c] = *t;
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, graph.TopoOrder());
  // Position of the last node reading each value; values read by nobody die after production.
  absl::flat_hash_map<const ir::Value*, size_t> last_use;
  for (size_t k = 0; k < order.size(); ++k) {
    for (const ir::Value* v : ReadValues(*order[k], graph)) {
      if (v != nullptr) last_use[v] = k;
    }
  }
  const KernelRegistry& kernels = KernelRegistry::Global();
  SubgraphRunner run_subgraph = [this, &scope](const ir::Graph& body,
                                               const std::vector<Tensor>& inputs)
      -> absl::StatusOr<std::vector<Tensor>> {
    if (inputs.size() != body.inputs().size()) {
      return absl::InvalidArgumentError(absl::StrCat("subgraph '", body.name(), "' takes ",
                                                     body.inputs().size(), " inputs, got ",
                                                     inputs.size()));
    }
    absl::flat_hash_map<const ir::Value*, Tensor> sub_env;
    for (const ir::Value* v : body.initializers()) sub_env[v] = *v->initializer();
    for (size_t i = 0; i < inputs.size(); ++i) sub_env[body.inputs()[i]] = inputs[i];
    return RunGraph(body, std::move(sub_env), &scope);
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const ir::Node& n = *order[k];
    std::vector<const Tensor*> inputs;
    for (const ir::Value* v : n.inputs()) {
      if (v == nullptr) {
        inputs.push_back(nullptr);
        continue;
      }
      auto it = env.find(v);
      OTTR_RET_CHECK(it != env.end()) << n.Describe() << " reads '" << v->name()
                                      << "' before it is computed";
      inputs.push_back(&it->second);
    }
    std::vector<Tensor> outputs(n.num_outputs());
    KernelContext ctx(n, std::move(inputs), &outputs, &rng_, run_subgraph);
    const KernelFn* fn = kernels.Find(n.domain(), n.op_type());
    OTTR_RET_CHECK(fn != nullptr) << n.Describe() << " has no CPU kernel";
    OTTR_RETURN_IF_ERROR((*fn)(ctx));
    for (int i = 0; i < n.num_outputs(); ++i) {
      if (!outputs[i].defined()) {
        OTTR_RET_CHECK(!n.output_used(i)) << n.Describe() << " did not compute output " << i;
        continue;
      }
      if (options_.check_types) OTTR_RETURN_IF_ERROR(CheckOutputType(n, i, outputs[i]));
      if (options_.check_finite) OTTR_RETURN_IF_ERROR(CheckFinite(n, i, outputs[i]));
      env[n.output(i)] = std::move(outputs[i]);
    }
    for (const ir::Value* v : ReadValues(n, graph)) {
      if (v != nullptr && last_use[v] == k && !graph.IsRoot(v) &&
          v->kind() == ir::Value::Kind::kNodeOutput) {
        env.erase(v);
      }
    }
  }
  std::vector<Tensor> results;
  std::vector<const ir::Value*> fetch(graph.outputs().begin(), graph.outputs().end());
  for (const ir::StateUpdate& u : graph.updates()) fetch.push_back(u.value);
  for (const ir::Value* v : fetch) {
    auto it = env.find(v);
    OTTR_RET_CHECK(it != env.end()) << "graph output '" << v->name() << "' was not computed";
    results.push_back(it->second);
  }
  return results;
}

}  // namespace ottr::runtime::cpu
