// The CUDA executor: runs a graph with static shapes on one GPU.
//
// Compile (once per set of input shapes): every value gets a device buffer from one arena
// allocation (parameters, optimizer state, inputs, intermediates, workspaces), initializers and
// constants are uploaded, and each node is compiled into a launch closure (cuda_ops.h). Run:
// feeds are copied host->device, then the whole step — every node and the state updates — is
// replayed as one CUDA Graph (or launched node by node with use_cuda_graph = false), then the
// requested outputs are copied back. Nothing is allocated or freed inside a step, and nothing
// synchronises with the host between the first and the last kernel.
#ifndef OTTR_RUNTIME_CUDA_CUDA_EXECUTOR_H_
#define OTTR_RUNTIME_CUDA_CUDA_EXECUTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace ottr::cuda {

struct CudaExecutorOptions {
  bool use_cuda_graph = true;
  bool tf32 = true;
  std::string algo_cache_file;  // --algo-cache
  // Commit state updates after each run (see CpuExecutorOptions::auto_commit). When false, the
  // updates are computed into separate buffers and CommitUpdates() copies them.
  bool auto_commit = true;
  uint64_t seed = 0;
  // Reuse dying activations' buffers in place (the planner's in_place); off for debugging.
  bool plan_in_place = true;
  // Streams the step's launches are spread over (1: all on one stream, in schedule order). A
  // launch waits, through events, only for the earlier launches it depends on: it reads what they
  // write, or writes arena bytes they read or write (the planner's reuse of memory included).
  // Independent branches (a layer's weight gradient beside the next data gradient) then overlap
  // inside the captured graph. The side streams run at low priority. A launch continues the
  // stream of its latest dependency when that is the stream's last launch, else goes to the
  // stream expected to be free first (a roofline estimate of each launch's time; env
  // OTTR_STREAM_PICK=order: the earliest last launch in the schedule). OTTR_STREAMS=N overrides.
  int streams = 2;
  // Programmatic dependent launch (sm_90 and later): ottr's kernels that follow another launch on
  // their stream start while it ends and wait for it inside the kernel (kernels/pdl.cuh). Off: on
  // an H100 it hid launch gaps but made no step faster (bench/RESULTS.md "2026-12-07").
  // OTTR_PDL=0|1 overrides; `--no-pdl` in the CLI.
  bool programmatic_launch = false;
};

struct CudaStepStats {
  int64_t launches_per_step = 0;  // kernels + library calls (graph nodes) in one step
  int64_t arena_bytes = 0;        // the one device allocation
  int64_t nodes = 0;
  // Edges of the captured step that are programmatic (CudaExecutorOptions::programmatic_launch):
  // a kernel that may start while the kernel before it ends. 0 without a CUDA Graph.
  int64_t programmatic_edges = 0;
};

class CudaExecutor : public runtime::Executor {
 public:
  // `graph` must outlive the executor. Fails when no device is visible.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const ir::Graph& graph,
                                                              CudaExecutorOptions options = {});
  ~CudaExecutor() override;

  absl::StatusOr<std::vector<ir::Tensor>> Run(const runtime::TensorMap& feeds) override;

  // Benchmark path: copies `feeds` to the device once, then Step() replays the step with no
  // host transfer (WaitIdle() waits for it).
  absl::Status Prepare(const runtime::TensorMap& feeds);
  absl::Status Step();
  absl::Status WaitIdle();
  // Runs `steps` steps back to back between two CUDA events; returns the milliseconds elapsed.
  absl::StatusOr<double> TimeSteps(int steps);

  // The training pipeline: Submit() stages the feeds in pinned host memory (double-buffered),
  // copies them on a second stream while the previous step runs (ordered with events), replays
  // the step and copies its scalar outputs (the loss) to a pinned ring, all without waiting for
  // the device, so the host prepares the next batch meanwhile. DrainScalars() waits for the
  // submitted steps and returns their scalar outputs in order, one vector per step (at most
  // kMaxPendingSteps steps may be pending). The first Submit of a shape compiles (synchronous).
  static constexpr int kMaxPendingSteps = 1024;
  absl::Status Submit(const runtime::TensorMap& feeds);
  absl::StatusOr<std::vector<std::vector<double>>> DrainScalars();

  const ir::Tensor* State(const std::string& name);  // device -> host copy of an initializer
  absl::Status SetState(const std::string& name, const ir::Tensor& t);
  CudaStepStats stats() const;
  // Per-node timing: each node launched alone, median µs over `repeats` (after Prepare).
  absl::StatusOr<std::vector<std::pair<const ir::Node*, double>>> TimeNodes(int repeats);

 private:
  struct Impl;
  explicit CudaExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when a CUDA device is visible to this process.
bool CudaDeviceAvailable();

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_CUDA_EXECUTOR_H_
