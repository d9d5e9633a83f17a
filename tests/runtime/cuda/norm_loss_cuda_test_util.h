// Test helpers for the CUDA loss, normalisation and optimizer op tests (loss_ops_test.cc,
// normalization_ops_test.cc, optimizer_ops_test.cc): one node whose inputs are graph inputs
// (device values at run time) or initializers (integer/bool initializers are compile-time
// constants for the CUDA executor), run through shape inference, then on the CPU reference and
// on the CUDA executor (whose arena is poisoned with NaN bytes, so an element a kernel fails to
// write shows up), and compared. Tests skip without a device.
#ifndef OTTR_TESTS_RUNTIME_CUDA_NORM_LOSS_CUDA_TEST_UTIL_H_
#define OTTR_TESTS_RUNTIME_CUDA_NORM_LOSS_CUDA_TEST_UTIL_H_

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "ir/tensor.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#endif

namespace ottr::testing::norm_loss_cuda {

using Attrs = std::map<std::string, ir::Attribute>;

struct Input {
  ir::Tensor value;       // undefined: an omitted optional input
  bool constant = false;  // an initializer instead of a graph input
};
inline Input In(ir::Tensor t) { return {std::move(t), false}; }
inline Input Const(ir::Tensor t) { return {std::move(t), true}; }
inline Input Omitted() { return {}; }

struct Case {
  Case(std::string op_type, std::vector<Input> ins, Attrs attributes = {}, int outputs = 1, std::string dom = "")
      : op(std::move(op_type)), inputs(std::move(ins)), attrs(std::move(attributes)), num_outputs(outputs),
        domain(std::move(dom)) {}
  std::string op;
  std::vector<Input> inputs;
  Attrs attrs;
  int num_outputs = 1;
  std::string domain;
  double rtol = 1e-5;
  double atol = 1e-6;
  bool tf32 = false;  // float32 GEMMs / convolutions on TF32 tensor cores
  std::vector<int> unread_outputs;  // outputs left out of the graph outputs (nobody reads them)
};

inline absl::StatusOr<std::unique_ptr<ir::Graph>> BuildGraph(const Case& c, runtime::TensorMap* feeds) {
  auto g = std::make_unique<ir::Graph>("norm_loss_case");
  g->set_opset_import("", ir::kMaxOnnxOpset);
  if (!c.domain.empty()) g->set_opset_import(c.domain, 1);
  ir::NodeSpec spec{c.op, c.domain, {}, {}, c.attrs, "n0"};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    if (!in.value.defined()) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    const std::string name = absl::StrCat("in", i);
    ir::Value* v;
    if (in.constant) {
      OTTR_ASSIGN_OR_RETURN(v, g->AddInitializer(name, in.value));
    } else {
      OTTR_ASSIGN_OR_RETURN(v, g->AddInput(name, in.value.type()));
      (*feeds)[name] = in.value;
    }
    spec.inputs.push_back(v);
  }
  for (int i = 0; i < c.num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g->AddNode(std::move(spec)));
  for (int i = 0; i < c.num_outputs; ++i) {
    bool unread = false;
    for (int u : c.unread_outputs) unread |= u == i;
    if (!unread) g->AddOutput(n->output(i));
  }
  const ir::OpRegistry& registry = ir::OpRegistry::Global();
  OTTR_RETURN_IF_ERROR(registry.CheckNode(*n, g->opset(c.domain)));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(registry, *g));
  return g;
}

inline bool DeviceAvailable() {
#ifdef OTTR_HAVE_CUDA
  return cuda::CudaDeviceAvailable();
#else
  return false;
#endif
}

// Skips the test without a device (and in CPU-only builds).
#define OTTR_REQUIRE_CUDA_DEVICE()                                           \
  do {                                                                       \
    if (!::ottr::testing::norm_loss_cuda::DeviceAvailable()) {               \
      GTEST_SKIP() << "no CUDA device visible (or a CPU-only build)";        \
    }                                                                        \
  } while (0)

// The graph outputs of `c` on the CUDA executor, run `runs` times (the last run's outputs).
inline absl::StatusOr<std::vector<std::vector<ir::Tensor>>> RunCuda(const Case& c, int runs,
                                                                   bool use_cuda_graph = true) {
#ifdef OTTR_HAVE_CUDA
  runtime::TensorMap feeds;
  OTTR_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> g, BuildGraph(c, &feeds));
  cuda::CudaExecutorOptions o;
  o.tf32 = c.tf32;
  o.use_cuda_graph = use_cuda_graph;
  OTTR_ASSIGN_OR_RETURN(auto gpu, cuda::CudaExecutor::Create(*g, o));
  std::vector<std::vector<ir::Tensor>> all;
  for (int r = 0; r < runs; ++r) {
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Tensor> out, gpu->Run(feeds));
    all.push_back(std::move(out));
  }
  return all;
#else
  return absl::UnimplementedError("CPU-only build");
#endif
}

// Runs `c` on both executors and compares every graph output; the CUDA graph is replayed a
// second time, which must reproduce the first run bit for bit (deterministic kernels).
inline void ExpectMatchesCpu(const Case& c) {
  SCOPED_TRACE(absl::StrCat(c.domain.empty() ? "" : c.domain + ".", c.op));
  runtime::TensorMap feeds;
  auto g = BuildGraph(c, &feeds);
  ASSERT_TRUE(g.ok()) << g.status();
  auto cpu = runtime::cpu::CpuExecutor::Create(**g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RunCuda(c, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<ir::Tensor>& first = (*got)[0];
  ASSERT_EQ(first.size(), want->size());
  for (size_t i = 0; i < first.size(); ++i) {
    const absl::Status s = runtime::AllClose(first[i], (*want)[i], c.rtol, c.atol);
    EXPECT_TRUE(s.ok()) << "output " << i << ": " << s << "\n got  " << first[i].DebugString(12) << "\n want "
                        << (*want)[i].DebugString(12);
    EXPECT_TRUE((*got)[1][i].BitwiseEquals(first[i])) << "output " << i << " differs between two replays";
  }
}

// One training step of a bf16 step graph of models/mlp (input x [128, 784] uniform in [-1, 1) from
// `seed`, labels from seed + 1, lr 1e-3) on the GPU against the same graph on the CPU reference,
// TF32 off. Both run the same 16-bit operands with float32 accumulation; they differ in the order
// of the float32 sums (~1e-6 relative), which moves a bf16 Cast by one step (2u) only for a value
// within that of a rounding boundary: far below u = 2^-8 normwise. Bound: u per output after the
// loss (normwise), u/4 on the loss (output 0).
inline void ExpectBf16MlpStepMatchesCpu(const ir::Graph& step, uint64_t seed) {
#ifdef OTTR_HAVE_CUDA
  runtime::TensorMap feeds;
  feeds["x"] = RandomFloat({128, 784}, seed, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = RandomInt64({128}, seed + 1, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  auto cpu = runtime::cpu::CpuExecutor::Create(step);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(step, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  const double u = std::ldexp(1.0, -8);
  const double loss = (*want)[0].GetAsDouble(0);
  EXPECT_LE(std::abs((*got)[0].GetAsDouble(0) - loss), u / 4 * std::abs(loss));
  for (size_t i = 1; i < want->size(); ++i) {
    EXPECT_LE(NormwiseRelativeError((*got)[i], (*want)[i]), u) << step.outputs()[i]->name();
  }
#else
  (void)step;
  (void)seed;
#endif
}

// Compiling `c` for CUDA fails with `code`, naming the node.
inline void ExpectCudaRejects(const Case& c, absl::StatusCode code) {
  auto got = RunCuda(c, 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_NE(got.status().message().find("n0"), std::string::npos) << got.status();
}

// Uniform random floats in [lo, hi) of element type `t` (never all zeros for lo < 0 < hi).
inline ir::Tensor RandomOf(ir::DType t, std::vector<int64_t> dims, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  ir::Tensor x(t, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(lo, hi);
  ir::VisitDType(t, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      T* p = x.data<T>();
      for (int64_t i = 0; i < x.num_elements(); ++i) p[i] = ir::FromDouble<T>(uni(rng));
    }
  });
  return x;
}

// Integer labels in [lo, hi] (int64, or int32 when `int32`).
inline ir::Tensor Labels(std::vector<int64_t> dims, uint64_t seed, int64_t lo, int64_t hi, bool int32 = false) {
  ir::Tensor x(int32 ? ir::DType::kInt32 : ir::DType::kInt64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t v = dist(rng);
    if (int32) {
      x.data<int32_t>()[i] = static_cast<int32_t>(v);
    } else {
      x.data<int64_t>()[i] = v;
    }
  }
  return x;
}

template <typename T>
ir::Tensor ScalarOf(T v) {
  return ir::Tensor::Scalar<T>(v);
}

}  // namespace ottr::testing::norm_loss_cuda

#endif  // OTTR_TESTS_RUNTIME_CUDA_NORM_LOSS_CUDA_TEST_UTIL_H_
