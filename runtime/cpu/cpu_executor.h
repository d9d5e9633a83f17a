// The CPU reference executor: runs a graph node by node in topological order with the kernels of
// runtime/cpu, freeing each intermediate after its last use. It is the numerical reference every
// other backend and pass is checked against, so it favours clarity over speed (GEMM excepted).
//
// With a memory plan (CpuExecutorOptions::memory_plan, from passes::PlanMemory) it runs the plan's
// schedule from one arena allocation, as the CUDA executor does: initializers live in their
// persistent buffers, feeds are copied into their buffers, AllocateOutput hands kernels views of
// their outputs' planned memory, outputs a kernel produced elsewhere (views via SetOutput, results
// built on the side) are copied to their planned place, and state updates planned in place need
// no commit copy. Results are identical to running without the plan (the schedule may differ from
// the topological order; only training-mode Dropout draws would notice). Subgraphs (Loop, If) run
// unplanned.
#ifndef OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_
#define OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_

#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/memory_planner.h"  // the plan's data only: nothing here links ottr_passes
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"

namespace ottr::runtime::cpu {

struct CpuExecutorOptions {
  uint64_t seed = 0;  // random draws of training-mode Dropout
  // Check every output against its static IR type (a mismatch is an Internal error).
  bool check_types = true;
  // Commit state updates right after each run. When false, they wait in pending_updates() until
  // CommitUpdates() (the trainer first checks the loss is finite) and the next Run drops them.
  bool auto_commit = true;
  // Check every float output of every node for NaN/Inf and fail (DataLoss) at the first one,
  // naming the value and node (the trainer's NaN diagnosis).
  bool check_finite = false;
  // Run from this plan of `graph` (null: allocate per value). The plan must come from
  // passes::PlanMemory on the same graph object; with auto_commit = false it must not write
  // state updates in place (plan with PlanOptions::in_place_updates = false).
  std::shared_ptr<const passes::MemoryPlan> memory_plan;
};

class CpuExecutor : public Executor {
 public:
  // Fails with Unimplemented naming the first node without a CPU kernel. `graph` must outlive the
  // executor.
  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(const ir::Graph& graph,
                                                             CpuExecutorOptions options = {});
  // Runs the graph; then every state update of the graph (see Graph::AddUpdate) replaces the
  // executor's copy of its initializer, so the next run sees the new value (a training step).
  // With a memory plan whose updates are in place, a Run that fails part-way may leave some
  // state already updated.
  absl::StatusOr<std::vector<Tensor>> Run(const TensorMap& feeds) override;

  // State updates computed by the last Run and not yet committed (order of graph.updates()).
  // With a memory plan they are views of the arena, valid until the next Run.
  const std::vector<Tensor>& pending_updates() const { return pending_; }
  void CommitUpdates();
  void set_check_finite(bool on) { options_.check_finite = on; }

  // The executor's current value of initializer `name` (null when there is none). With a memory
  // plan it is a view of the arena: the next Run changes it in place.
  const Tensor* State(const std::string& name) const;
  // Replaces the current value of an initializer (same dtype and dims).
  absl::Status SetState(const std::string& name, Tensor t);
  // The random generator's state as text (for checkpoints) and back.
  std::string SaveRngState() const;
  absl::Status LoadRngState(const std::string& text);

 private:
  struct Scope;
  CpuExecutor(const ir::Graph& graph, CpuExecutorOptions options)
      : graph_(graph), options_(options), rng_(options.seed) {
    for (const ir::Value* v : graph.initializers()) state_[v] = *v->initializer();
  }
  // Runs `graph`; `planned` (top level with a memory plan only) runs the plan's schedule with
  // outputs in the arena.
  absl::StatusOr<std::vector<Tensor>> RunGraph(const ir::Graph& graph,
                                               absl::flat_hash_map<const ir::Value*, Tensor> env,
                                               const Scope* parent, bool planned = false);
  // Allocates the arena for options_.memory_plan and moves the state into it.
  absl::Status SetUpArena();
  // The arena bytes of a value's buffer (null when it has none).
  void* ArenaAddress(const ir::Value* v) const;
  absl::StatusOr<std::vector<Tensor>> RunPlanned(const TensorMap& feeds);

  const ir::Graph& graph_;
  CpuExecutorOptions options_;
  std::mt19937_64 rng_;
  absl::flat_hash_map<const ir::Value*, Tensor> state_;  // current initializer values
  std::vector<Tensor> pending_;
  // With a memory plan: the arena and, per schedule position, the planned outputs of its node.
  std::unique_ptr<void, void (*)(void*)> arena_{nullptr, nullptr};
  std::vector<std::vector<PlannedOutput>> planned_outputs_;
};

// Checks that every node of `graph` (and its subgraphs) has a CPU kernel.
absl::Status CheckCpuKernels(const ir::Graph& graph);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_
