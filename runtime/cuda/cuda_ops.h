// The CUDA op interface. An op is compiled once per static shape (choosing algorithms, sizing its
// workspace) into a launch closure that only enqueues work on a stream: no allocation, no host
// synchronisation, so a whole training step can be captured in one CUDA Graph.
#ifndef OTTR_RUNTIME_CUDA_CUDA_OPS_H_
#define OTTR_RUNTIME_CUDA_CUDA_OPS_H_

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace ottr::cuda {

class CudaLibraries;

// What a launch gets: device pointers of the node's inputs and outputs (null for an omitted
// input or an output nobody reads), its workspace, the stream and its counters
// (CompiledOp::counter_bytes; null when it asked for none) and its state (CompiledOp::state_bytes).
struct LaunchArgs {
  const std::vector<void*>& inputs;
  const std::vector<void*>& outputs;
  void* workspace;
  cudaStream_t stream;
  void* counters = nullptr;
  void* state = nullptr;
  // The executor lets the launch's first kernel start programmatically (kernels/pdl.cuh: it may
  // start while the kernel before it on `stream` ends, and waits in the kernel for it): the launch
  // follows another launch of the step on its stream with no wait for another stream in between.
  // Ops whose kernels do not follow pdl.cuh's rules ignore it.
  bool programmatic = false;
  // Bit k: no earlier launch of the step writes input k's bytes (a parameter or feed the step
  // has not updated yet), so a programmatic kernel may read it before its wait (prefetch).
  uint64_t ready_inputs = 0;
  bool ready(int k) const { return k < 64 && ((ready_inputs >> k) & 1) != 0; }
};

using LaunchFn = std::function<absl::Status(const LaunchArgs&)>;

struct CompiledOp {
  LaunchFn launch;
  int64_t workspace_bytes = 0;
  // Bytes of counters the launch keeps for itself: zero before its first launch, owned by this
  // launch alone (never reused for other data), and left zero again by every launch. A kernel uses
  // them to let the last of its blocks finish what needs all the others (a sum of partials) in the
  // same launch, where it would otherwise take a second kernel.
  int64_t counter_bytes = 0;
  // Bytes of device state the launch keeps for itself (never reused for other data), written by
  // `init` once the step's addresses are fixed, before the first launch (and before the step is
  // captured): what every launch reads that depends only on those addresses, such as the table of
  // operand pointers of a grouped GEMM (cuBLAS reads it from device memory).
  int64_t state_bytes = 0;
  std::function<absl::Status(const LaunchArgs&)> init;
  // (output, input) pairs the op produces as a view: the output holds exactly the input's bytes
  // (Reshape, Flatten, Identity...). When the executor places them in one buffer the launch is
  // skipped; otherwise `launch` copies.
  std::vector<std::pair<int, int>> views;
};

// What compiling one node sees: static input/output types, the host values of inputs that are
// compile-time constants (initializers of integer type, Constant nodes), and the libraries.
class OpCompileContext {
 public:
  OpCompileContext(const ir::Node& node, std::vector<ir::TensorType> in_types,
                   std::vector<ir::TensorType> out_types, std::vector<const ir::Tensor*> constants,
                   CudaLibraries& libs)
      : node_(node), in_types_(std::move(in_types)), out_types_(std::move(out_types)),
        constants_(std::move(constants)), libs_(libs) {}

  const ir::Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(in_types_.size()); }
  int num_outputs() const { return static_cast<int>(out_types_.size()); }
  bool has_input(int i) const { return i < num_inputs() && in_types_[i].dtype != ir::DType::kUndefined; }
  const ir::TensorType& input_type(int i) const { return in_types_[i]; }
  const ir::TensorType& output_type(int i) const { return out_types_[i]; }
  std::vector<int64_t> input_dims(int i) const { return ir::StaticDims(*in_types_[i].shape); }
  std::vector<int64_t> output_dims(int i) const { return ir::StaticDims(*out_types_[i].shape); }
  // Host value of input i when it is a compile-time constant, else null.
  const ir::Tensor* constant_input(int i) const {
    return i < static_cast<int>(constants_.size()) ? constants_[i] : nullptr;
  }
  bool output_needed(int i) const { return node_.output_used(i); }
  CudaLibraries& libs() { return libs_; }

  absl::Status Error(absl::string_view msg) const;
  absl::Status Unsupported(absl::string_view msg) const;

 private:
  const ir::Node& node_;
  std::vector<ir::TensorType> in_types_;
  std::vector<ir::TensorType> out_types_;
  std::vector<const ir::Tensor*> constants_;
  CudaLibraries& libs_;
};

using OpCompiler = std::function<absl::StatusOr<CompiledOp>(OpCompileContext&)>;

class CudaOpRegistry {
 public:
  static const CudaOpRegistry& Global();
  void Register(std::string domain, std::string op_type, OpCompiler fn);
  const OpCompiler* Find(absl::string_view domain, absl::string_view op_type) const;
  std::vector<std::pair<std::string, std::string>> Ops() const;

 private:
  absl::flat_hash_map<std::string, OpCompiler> ops_;
};

// Registration entry points, one per runtime/cuda/*_ops.cc file.
void RegisterGemmCudaOps(CudaOpRegistry& r);
void RegisterElementwiseCudaOps(CudaOpRegistry& r);
void RegisterTensorCudaOps(CudaOpRegistry& r);
void RegisterReductionCudaOps(CudaOpRegistry& r);
void RegisterLossCudaOps(CudaOpRegistry& r);
void RegisterNormalizationCudaOps(CudaOpRegistry& r);
void RegisterConvPoolCudaOps(CudaOpRegistry& r);
void RegisterOptimizerCudaOps(CudaOpRegistry& r);

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_CUDA_OPS_H_
