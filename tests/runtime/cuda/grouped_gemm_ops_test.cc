// ottr::GroupedGemm on CUDA (runtime/cuda/gemm_ops.cc) against the CPU reference: the grouped
// cuBLAS launch and the separate cuBLASLt GEMMs (OTTR_GROUPED_GEMM forces each), float32 and TF32,
// products of different shapes, transposes and alphas in one node. The executor poisons its arena
// with NaN bytes, so an element no product writes shows up. Skipped without a device.
//
// Bounds, per element, with u = 2^-24 and S = Σ_q |alpha·a·b| over the element's k terms:
// float32 (k + 2)·u·S (the GPU's and the CPU's float accumulations of k terms, in any order);
// TF32 (2^-9 + (k + 2)·u)·S (each operand rounded or truncated to TF32's 10 bits, 2^-10 relative
// each, then the same accumulation). A product computed into the wrong output, transposed the
// wrong way or with the wrong alpha is off by about S itself.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/op_registry.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cuda/cuda_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

// Three products of one float32 node: A [48, 40] · B [40, 72] (alpha 1), Aᵀ · B with A stored
// [40, 48] (alpha 0.5), A · Bᵀ with B stored [24, 40] (alpha -2): different m, n and k too.
constexpr char kGraph[] = R"(graph "g" {
  opset ai.onnx 17
  input %a0 : f32[48,40]
  input %b0 : f32[40,72]
  input %a1 : f32[40,48]
  input %b1 : f32[40,33]
  input %a2 : f32[130,40]
  input %b2 : f32[24,40]
  %y0 : f32[48,72], %y1 : f32[48,33], %y2 : f32[130,24] = ottr::GroupedGemm(%a0, %b0, %a1, %b1, %a2, %b2) {alpha = floats[1, 0.5, -2], transA = ints[0, 1, 0], transB = ints[0, 0, 1]}
  output %y0
  output %y1
  output %y2
})";

struct Product {
  const char* a;
  const char* b;
  bool ta, tb;
  double alpha;
};

TEST(CudaGroupedGemmTest, MatchesCpuGroupedAndSeparate) {
  if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto parsed = ir::ParseGraph(kGraph);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::unique_ptr<ir::Graph> g = std::move(*parsed);
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), *g).ok());
  runtime::TensorMap feeds;
  uint64_t seed = 31;
  for (const ir::Value* v : g->inputs()) feeds[v->name()] = testing::RandomFloat(ir::StaticDims(*v->type().shape), seed++);
  auto cpu = runtime::cpu::CpuExecutor::Create(*g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::vector<Product> products = {{"a0", "b0", false, false, 1.0}, {"a1", "b1", true, false, 0.5},
                                         {"a2", "b2", false, true, -2.0}};
  const double u = std::ldexp(1.0, -24);
  for (const char* way : {"grouped", "separate"}) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(absl::StrCat(way, tf32 ? " tf32" : " fp32"));
      struct Unset {  // whatever fails below, later tests do not see the variable
        ~Unset() { unsetenv("OTTR_GROUPED_GEMM"); }
      } unset;
      setenv("OTTR_GROUPED_GEMM", way, 1);
      cuda::CudaExecutorOptions o;
      o.tf32 = tf32;
      auto gpu = cuda::CudaExecutor::Create(*g, o);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      for (int run = 0; run < 2; ++run) {  // the first compiles (reading the variable), the second replays
        auto got = (*gpu)->Run(feeds);
        unsetenv("OTTR_GROUPED_GEMM");
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->size(), products.size());
        for (size_t p = 0; p < products.size(); ++p) {
          const Product& pr = products[p];
          const ir::Tensor& a = feeds.at(pr.a);
          const ir::Tensor& b = feeds.at(pr.b);
          const int64_t m = pr.ta ? a.dim(1) : a.dim(0), k = pr.ta ? a.dim(0) : a.dim(1);
          const int64_t n = pr.tb ? b.dim(0) : b.dim(1);
          ASSERT_EQ((*got)[p].dims(), (std::vector<int64_t>{m, n}));
          int bad = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double s = 0;
              for (int64_t q = 0; q < k; ++q) {
                const double av = a.GetAsDouble(pr.ta ? q * m + i : i * k + q);
                const double bv = b.GetAsDouble(pr.tb ? j * k + q : q * n + j);
                s += std::abs(pr.alpha * av * bv);
              }
              const double bound = ((tf32 ? std::ldexp(1.0, -9) : 0.0) + (k + 2) * u) * s;
              const double gv = (*got)[p].GetAsDouble(i * n + j), wv = (*want)[p].GetAsDouble(i * n + j);
              if (!(std::abs(gv - wv) <= bound) && bad++ < 5) {
                ADD_FAILURE() << "product " << p << " [" << i << ", " << j << "] = " << gv << ", CPU " << wv
                              << ", bound " << bound;
              }
            }
          }
          EXPECT_EQ(bad, 0) << "product " << p << " run " << run;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ottr
