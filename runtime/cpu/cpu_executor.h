// The CPU reference executor: runs a graph node by node in topological order with the kernels of
// runtime/cpu, freeing each intermediate after its last use. It is the numerical reference every
// other backend and pass is checked against, so it favours clarity over speed (GEMM excepted).
#ifndef OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_
#define OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_

#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"

namespace ottr::runtime::cpu {

struct CpuExecutorOptions {
  uint64_t seed = 0;  // random draws of training-mode Dropout
  // Check every output against its static IR type (a mismatch is an Internal error).
  bool check_types = true;
};

class CpuExecutor : public Executor {
 public:
  // Fails with Unimplemented naming the first node without a CPU kernel. `graph` must outlive the
  // executor.
  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(const ir::Graph& graph,
                                                             CpuExecutorOptions options = {});
  absl::StatusOr<std::vector<Tensor>> Run(const TensorMap& feeds) override;

 private:
  struct Scope;
  CpuExecutor(const ir::Graph& graph, CpuExecutorOptions options)
      : graph_(graph), options_(options), rng_(options.seed) {}
  absl::StatusOr<std::vector<Tensor>> RunGraph(const ir::Graph& graph,
                                               absl::flat_hash_map<const ir::Value*, Tensor> env,
                                               const Scope* parent);

  const ir::Graph& graph_;
  CpuExecutorOptions options_;
  std::mt19937_64 rng_;
};

// Checks that every node of `graph` (and its subgraphs) has a CPU kernel.
absl::Status CheckCpuKernels(const ir::Graph& graph);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_CPU_EXECUTOR_H_
