// The CPU reference kernel interface. A kernel reads its node's attributes and input tensors and
// produces every output the node has (outputs nobody reads may be skipped: see output_needed).
// Kernels never write to their inputs.
#ifndef OTTR_RUNTIME_CPU_KERNEL_H_
#define OTTR_RUNTIME_CPU_KERNEL_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace ottr::runtime::cpu {

using ir::DType;
using ir::Tensor;

class KernelContext;
using KernelFn = std::function<absl::Status(KernelContext&)>;

// Runs a subgraph (Loop body) with the given inputs bound in order, resolving captures in the
// enclosing scope; returns the subgraph outputs.
using SubgraphRunner = std::function<absl::StatusOr<std::vector<Tensor>>(
    const ir::Graph& body, const std::vector<Tensor>& inputs)>;

// Where AllocateOutput puts an output when the executor runs from a memory plan
// (passes/memory_planner.h): `data` points into the arena at the output's planned offset, with
// room for the planned type. `zero` is false when the output takes over an input's buffer in
// place: the kernel still reads that input, so the bytes must not be cleared.
struct PlannedOutput {
  void* data = nullptr;  // null: allocate as usual
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  bool zero = true;
};

class KernelContext {
 public:
  KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs,
                std::vector<Tensor>* outputs, std::mt19937_64* rng, SubgraphRunner subgraphs)
      : node_(node), inputs_(std::move(inputs)), outputs_(outputs), rng_(rng),
        subgraphs_(std::move(subgraphs)) {}

  const ir::Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  // Requires has_input(i).
  const Tensor& input(int i) const { return *inputs_[i]; }
  int num_outputs() const { return static_cast<int>(outputs_->size()); }
  // False when nothing reads output i; a kernel may then leave it unset.
  bool output_needed(int i) const { return node_.output_used(i); }

  // Allocates output i (zero-filled) and returns it for the kernel to fill. With planned outputs
  // (set_planned_outputs) and `dtype`/`dims` equal to the planned type, the tensor is a view of
  // the planned memory instead (zero-filled unless the output is planned in place over an input,
  // see PlannedOutput::zero).
  Tensor& AllocateOutput(int i, DType dtype, std::vector<int64_t> dims);
  // Output i as the kernel left it (after AllocateOutput or SetOutput).
  const Tensor& output(int i) const { return (*outputs_)[i]; }
  // Sets output i to an existing tensor (e.g. a reshaped view of an input: no copy).
  void SetOutput(int i, Tensor t) { (*outputs_)[i] = std::move(t); }

  // Attribute accessors with the op's default.
  int64_t attr_int(const std::string& name, int64_t def) const { return node_.GetInt(name, def); }
  float attr_float(const std::string& name, float def) const { return node_.GetFloat(name, def); }
  std::string attr_string(const std::string& name, const std::string& def) const {
    return node_.GetString(name, def);
  }
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def = {}) const {
    return node_.GetInts(name, std::move(def));
  }
  std::vector<float> attr_floats(const std::string& name, std::vector<float> def = {}) const {
    return node_.GetFloats(name, std::move(def));
  }

  // InvalidArgument naming the node: "node 'x' (Gemm): <msg>".
  absl::Status Error(absl::string_view msg) const;
  // Unimplemented naming the node, e.g. for an unsupported element type.
  absl::Status Unsupported(absl::string_view msg) const;

  // Random numbers for Dropout in training mode (seeded per executor).
  std::mt19937_64& rng() { return *rng_; }
  absl::StatusOr<std::vector<Tensor>> RunSubgraph(const ir::Graph& body,
                                                  const std::vector<Tensor>& inputs) const {
    return subgraphs_(body, inputs);
  }

  // Planned memory for the outputs (one entry per output; null = none). The executor owns it and
  // keeps it alive while the kernel runs.
  void set_planned_outputs(const std::vector<PlannedOutput>* planned) { planned_ = planned; }

 private:
  const ir::Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor>* outputs_;
  std::mt19937_64* rng_;
  SubgraphRunner subgraphs_;
  const std::vector<PlannedOutput>* planned_ = nullptr;
};

class KernelRegistry {
 public:
  static const KernelRegistry& Global();
  void Register(std::string domain, std::string op_type, KernelFn fn);
  const KernelFn* Find(absl::string_view domain, absl::string_view op_type) const;
  std::vector<std::pair<std::string, std::string>> Ops() const;  // (domain, op), sorted

 private:
  absl::flat_hash_map<std::string, KernelFn> kernels_;
};

// Registration entry points, one per runtime/cpu/*_kernels.cc file.
void RegisterElementwiseKernels(KernelRegistry& r);
void RegisterActivationKernels(KernelRegistry& r);
void RegisterReductionKernels(KernelRegistry& r);
void RegisterTensorKernels(KernelRegistry& r);
void RegisterLinalgKernels(KernelRegistry& r);
void RegisterConvPoolKernels(KernelRegistry& r);
void RegisterNormalizationKernels(KernelRegistry& r);
void RegisterLossKernels(KernelRegistry& r);
void RegisterTrainingKernels(KernelRegistry& r);
void RegisterControlFlowKernels(KernelRegistry& r);
void RegisterOttrTrainingKernels(KernelRegistry& r);
void RegisterFusedGemmKernels(KernelRegistry& r);

// ottr::LinearReluGrad's sums (activation_grad_kernels.cc), shared with ottr::LinearSceReluGrad:
// dZ [rows, k], W [k, cols], Y [rows, cols] -> dX [rows, cols], dB [cols] and, with m > 0, the
// first m rows of dW [k, cols] and dBz [k]. Every sum in double, rounded once to float32. dX may
// be Y's buffer: Y is read for dW first, and each element of Y before dX's element in its place.
void LinearReluGradRows(const float* dz, const float* w, const float* y, int64_t rows, int64_t cols, int64_t k,
                        int64_t m, float* dx, float* db, float* dw, float* dbz);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_KERNEL_H_
