#include "runtime/cpu/cpu_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>

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
  auto exec = std::unique_ptr<CpuExecutor>(new CpuExecutor(graph, options));
  if (options.memory_plan != nullptr) OTTR_RETURN_IF_ERROR(exec->SetUpArena());
  return exec;
}

void* CpuExecutor::ArenaAddress(const ir::Value* v) const {
  const int64_t offset = options_.memory_plan->OffsetOf(v);
  return offset < 0 ? nullptr : static_cast<char*>(arena_.get()) + offset;
}

absl::Status CpuExecutor::SetUpArena() {
  const passes::MemoryPlan& plan = *options_.memory_plan;
  // The plan must be this graph's (pointer identity) and self-consistent enough that no write
  // can leave the arena.
  if (static_cast<int64_t>(plan.schedule.size()) != graph_.num_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("the memory plan schedules ", plan.schedule.size(),
                                                   " nodes; the graph has ", graph_.num_nodes()));
  }
  absl::flat_hash_map<const ir::Node*, int> seen;
  for (const ir::Node* n : graph_.nodes()) seen[n] = 0;
  for (const ir::Node* n : plan.schedule) {
    auto it = seen.find(n);
    if (it == seen.end() || it->second++ != 0) {
      return absl::InvalidArgumentError("the memory plan was made for another graph");
    }
  }
  for (const auto& [v, b] : plan.buffer_of) {
    const ir::TensorType& t = v->type();
    if (b < 0 || b >= static_cast<int>(plan.buffers.size()) || !t.is_static() ||
        plan.buffers[b].offset < 0 ||
        plan.buffers[b].offset + ir::NumElements(ir::StaticDims(*t.shape)) *
                static_cast<int64_t>(ir::DTypeSize(t.dtype)) > plan.peak_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("the memory plan places '", v->name(),
                                                     "' outside its arena"));
    }
  }
  if (!options_.auto_commit) {
    for (const ir::StateUpdate& u : graph_.updates()) {
      auto bv = plan.buffer_of.find(u.value);
      auto bt = plan.buffer_of.find(u.target);
      if (bv != plan.buffer_of.end() && bt != plan.buffer_of.end() && bv->second == bt->second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "auto_commit = false needs a memory plan without in-place state updates, but '",
            u.value->name(), "' is planned in the buffer of '", u.target->name(),
            "' (plan with PlanOptions::in_place_updates = false)"));
      }
    }
  }
  const size_t alignment = std::max<size_t>(64, static_cast<size_t>(plan.alignment));
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(plan.peak_bytes, 1)) + alignment - 1) /
                       alignment * alignment;
  void* memory = std::aligned_alloc(alignment, bytes);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the ", bytes,
                                                     "-byte arena of the memory plan"));
  }
  arena_ = std::unique_ptr<void, void (*)(void*)>(memory, std::free);
  // Poison: a read of bytes nothing wrote shows up as NaN (0xFF.. floats) rather than as zeros.
  std::memset(memory, 0xFF, bytes);
  for (const ir::Value* v : graph_.initializers()) {
    void* at = ArenaAddress(v);
    if (at == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the memory plan has no buffer for initializer '",
                                                     v->name(), "'"));
    }
    const Tensor& t = state_.at(v);
    std::memcpy(at, t.raw_data(), t.nbytes());
    state_[v] = Tensor::View(t.dtype(), t.dims(), at);
  }
  planned_outputs_.assign(plan.schedule.size(), {});
  for (size_t k = 0; k < plan.schedule.size(); ++k) {
    const ir::Node& n = *plan.schedule[k];
    std::vector<PlannedOutput>& outs = planned_outputs_[k];
    outs.resize(n.num_outputs());
    for (int i = 0; i < n.num_outputs(); ++i) {
      const ir::Value* v = n.output(i);
      if (v == nullptr || !plan.buffer_of.contains(v)) continue;
      auto alias = plan.alias_of.find(v);
      // A view's memory is its input's: the kernel returns a view (SetOutput), or its copy is
      // moved there afterwards; handing out that memory zero-filled would clear the input.
      if (alias != plan.alias_of.end() && alias->second.kind == passes::Alias::Kind::kView) continue;
      outs[i].data = ArenaAddress(v);
      outs[i].dtype = v->type().dtype;
      outs[i].dims = ir::StaticDims(*v->type().shape);
      outs[i].zero = alias == plan.alias_of.end();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> CpuExecutor::RunPlanned(const TensorMap& feeds) {
  absl::flat_hash_map<const ir::Value*, Tensor> env = state_;
  // Initializers fed for this run only: their bytes are restored afterwards unless their update
  // was written in place (then the update computed from the fed value is the new state, as
  // without a plan).
  std::vector<std::pair<const ir::Value*, Tensor>> saved;
  for (const auto& [name, t] : feeds) {
    const ir::Value* v = graph_.FindValue(name);
    if (v == nullptr || (v->kind() != ir::Value::Kind::kInput && !v->is_initializer())) {
      return absl::InvalidArgumentError(absl::StrCat("the model has no input named '", name, "'"));
    }
    OTTR_RETURN_IF_ERROR(CheckFeed(*v, t));
    void* at = ArenaAddress(v);
    const ir::TensorType& want = v->type();
    if (at == nullptr || !want.is_static() || ir::StaticDims(*want.shape) != t.dims()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", t.type().ToString(),
                                                     "; the memory plan was made for ",
                                                     want.ToString()));
    }
    if (v->is_initializer()) saved.emplace_back(v, state_.at(v).Clone());
    std::memcpy(at, t.raw_data(), t.nbytes());
    env[v] = Tensor::View(t.dtype(), t.dims(), at);
  }
  for (const ir::Value* v : graph_.inputs()) {
    if (!env.contains(v)) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", v->name(), "' (",
                                                     v->type().ToString(), ")"));
    }
  }
  absl::StatusOr<std::vector<Tensor>> ran = RunGraph(graph_, std::move(env), nullptr, true);
  const passes::MemoryPlan& plan = *options_.memory_plan;
  for (auto& [v, t] : saved) {
    bool in_place = false;
    for (const ir::StateUpdate& u : graph_.updates()) {
      in_place |= u.target == v && ran.ok() && plan.buffer_of.contains(u.value) &&
                  plan.buffer_of.at(u.value) == plan.buffer_of.at(v);
    }
    if (!in_place) std::memcpy(state_.at(v).raw_data(), t.raw_data(), t.nbytes());
  }
  if (!ran.ok()) return ran.status();
  std::vector<Tensor> results = *std::move(ran);
  const size_t n_out = graph_.outputs().size();
  OTTR_RET_CHECK(results.size() == n_out + graph_.updates().size());
  pending_.assign(results.begin() + n_out, results.end());  // views: valid until the next Run
  results.resize(n_out);
  for (Tensor& t : results) t = t.Clone();  // the arena is reused by the next Run
  if (options_.auto_commit) CommitUpdates();
  return results;
}

absl::StatusOr<std::vector<Tensor>> CpuExecutor::Run(const TensorMap& feeds) {
  pending_.clear();
  if (options_.memory_plan != nullptr) return RunPlanned(feeds);
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
    const ir::Value* target = graph_.updates()[i].target;
    if (options_.memory_plan != nullptr) {
      // The state lives in the arena: copy unless the update was computed in place.
      Tensor& state = state_.at(target);
      if (state.raw_data() != pending_[i].raw_data()) {
        std::memmove(state.raw_data(), pending_[i].raw_data(), state.nbytes());
      }
      continue;
    }
    state_[target] = std::move(pending_[i]);
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
  if (options_.memory_plan != nullptr) {
    std::memcpy(state_.at(v).raw_data(), t.raw_data(), t.nbytes());
    return absl::OkStatus();
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

// A planned output the kernel produced outside its planned memory (a view of an input via
// SetOutput, a result built on the side) is copied there, so that later reads find it where the
// plan says. For a view op the copy writes the input's own bytes over themselves.
absl::Status MoveToPlannedPlace(const ir::Node& n, int i, void* at, Tensor& t) {
  if (at == nullptr || t.raw_data() == at) return absl::OkStatus();
  const ir::TensorType& want = n.output(i)->type();
  const size_t planned = static_cast<size_t>(ir::NumElements(ir::StaticDims(*want.shape))) *
                         ir::DTypeSize(want.dtype);
  if (t.nbytes() != planned) {
    return absl::InternalError(absl::StrCat(
        n.Describe(), ": output ", i, " '", n.output(i)->name(), "' was computed as ",
        ir::DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","), "] (", t.nbytes(),
        " bytes) but the memory plan holds ", want.ToString(), " (", planned, " bytes)"));
  }
  std::memmove(at, t.raw_data(), t.nbytes());
  t = Tensor::View(t.dtype(), t.dims(), at);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> CpuExecutor::RunGraph(
    const ir::Graph& graph, absl::flat_hash_map<const ir::Value*, Tensor> env,
    const Scope* parent, bool planned) {
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
  std::vector<ir::Node*> order;
  if (planned) {
    order = options_.memory_plan->schedule;
  } else {
    OTTR_ASSIGN_OR_RETURN(order, graph.TopoOrder());
  }
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
    if (planned) ctx.set_planned_outputs(&planned_outputs_[k]);
    const KernelFn* fn = kernels.Find(n.domain(), n.op_type());
    OTTR_RET_CHECK(fn != nullptr) << n.Describe() << " has no CPU kernel";
    // Tensor's constructor throws when an output's size overflows or cannot be allocated: a
    // shape fed at run time may ask for 2^62 elements, which is an error, not a crash.
    absl::Status kernel_status;
    try {
      kernel_status = (*fn)(ctx);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat(n.Describe(), ": cannot allocate an output of this size"));
    } catch (const std::length_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(n.Describe(), ": ", e.what()));
    }
    OTTR_RETURN_IF_ERROR(kernel_status);
    for (int i = 0; i < n.num_outputs(); ++i) {
      if (!outputs[i].defined()) {
        OTTR_RET_CHECK(!n.output_used(i)) << n.Describe() << " did not compute output " << i;
        continue;
      }
      if (planned) OTTR_RETURN_IF_ERROR(MoveToPlannedPlace(n, i, ArenaAddress(n.output(i)), outputs[i]));
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
