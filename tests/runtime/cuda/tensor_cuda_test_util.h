// Test helpers for the CUDA tensor and reduction op tests: one node whose inputs are graph inputs
// or constants (integer initializers, which the CUDA executor sees as compile-time constants),
// run through shape inference, then on the CPU reference and on the CUDA executor (whose arena is
// poisoned with NaN bytes, so an element a kernel fails to write shows up), and compared.
#ifndef OTTR_TESTS_RUNTIME_CUDA_TENSOR_CUDA_TEST_UTIL_H_
#define OTTR_TESTS_RUNTIME_CUDA_TENSOR_CUDA_TEST_UTIL_H_

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "ir/tensor.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"

#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#endif

namespace ottr::testing::cuda_tensor {

using Attrs = std::map<std::string, ir::Attribute>;

struct Input {
  ir::Tensor value;       // undefined: an omitted optional input
  bool constant = false;  // an initializer instead of a graph input
};
inline Input In(ir::Tensor t) { return {std::move(t), false}; }
inline Input Const(ir::Tensor t) { return {std::move(t), true}; }
inline Input Omitted() { return {}; }

struct Case {
  std::string op;
  std::vector<Input> inputs;
  Attrs attrs = {};
  int num_outputs = 1;
  std::string domain = "";
  double rtol = 0.0;  // 0, 0: exact (bitwise for floats up to NaN payloads)
  double atol = 0.0;
};

inline absl::StatusOr<std::unique_ptr<ir::Graph>> BuildGraph(const Case& c, runtime::TensorMap* feeds) {
  auto g = std::make_unique<ir::Graph>("cuda_tensor_case");
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
  for (int i = 0; i < c.num_outputs; ++i) g->AddOutput(n->output(i));
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

// Runs `c` on both executors and compares every output; with `twice`, runs the CUDA graph a
// second time and requires bitwise-identical results (determinism).
inline void ExpectMatchesCpu(const Case& c, bool twice = false) {
#ifdef OTTR_HAVE_CUDA
  SCOPED_TRACE(c.op);
  runtime::TensorMap feeds;
  auto g = BuildGraph(c, &feeds);
  ASSERT_TRUE(g.ok()) << g.status();
  auto cpu = runtime::cpu::CpuExecutor::Create(**g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(**g, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const absl::Status s = runtime::AllClose((*got)[i], (*want)[i], c.rtol, c.atol);
    EXPECT_TRUE(s.ok()) << "output " << i << ": " << s << "\n got  " << (*got)[i].DebugString(12)
                        << "\n want " << (*want)[i].DebugString(12);
  }
  if (twice) {
    auto again = (*gpu)->Run(feeds);
    ASSERT_TRUE(again.ok()) << again.status();
    for (size_t i = 0; i < got->size(); ++i) {
      EXPECT_TRUE((*again)[i].BitwiseEquals((*got)[i])) << "output " << i << " differs between runs";
    }
  }
#endif
}

// Compiling `c` for CUDA fails (InvalidArgument or Unimplemented), naming the node.
inline void ExpectCudaRejects(const Case& c, absl::StatusCode code) {
#ifdef OTTR_HAVE_CUDA
  runtime::TensorMap feeds;
  auto g = BuildGraph(c, &feeds);
  ASSERT_TRUE(g.ok()) << g.status();
  auto gpu = cuda::CudaExecutor::Create(**g);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_NE(got.status().message().find("n0"), std::string::npos) << got.status();
#endif
}

// Random values of any element type: floats uniform in [lo, hi), integers in [lo, hi], bool
// with probability 1/2. Never all zeros for the ranges the tests use.
inline ir::Tensor Random(ir::DType t, std::vector<int64_t> dims, uint64_t seed, double lo = -1.0,
                         double hi = 1.0) {
  ir::Tensor x(t, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(lo, hi);
  ir::VisitDType(t, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      T* p = x.data<T>();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        if constexpr (std::is_same_v<T, bool>) {
          p[i] = (rng() & 1) != 0;
        } else if constexpr (std::is_integral_v<T>) {
          const int64_t span = static_cast<int64_t>(hi - lo) + 1;
          p[i] = static_cast<T>(static_cast<int64_t>(lo) + static_cast<int64_t>(rng() % static_cast<uint64_t>(span)));
        } else {
          p[i] = ir::FromDouble<T>(uni(rng));
        }
      }
    }
  });
  return x;
}

template <typename T>
ir::Tensor Vec(std::vector<int64_t> dims, std::vector<T> v) {
  return ir::Tensor::FromVector<T>(std::move(dims), v);
}
inline ir::Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return ir::Tensor::FromVector<int64_t>({n}, v);
}
inline ir::Tensor I64Scalar(int64_t v) { return ir::Tensor::Scalar<int64_t>(v); }

}  // namespace ottr::testing::cuda_tensor

#endif  // OTTR_TESTS_RUNTIME_CUDA_TENSOR_CUDA_TEST_UTIL_H_
