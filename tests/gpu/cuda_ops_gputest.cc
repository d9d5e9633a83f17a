// Every op on the GPU against the CPU reference: each central-difference case's graph (the op,
// a weighted-sum loss and every gradient op autodiff emits for it) runs in float32 on both
// executors with TF32 off. The CUDA arena is poisoned (0xff bytes = NaN) before the first run,
// so an output a kernel fails to write shows up as NaN. Bound: normwise relative error 1e-4
// (float32 sums in another order; reductions over up to a few thousand terms).
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

std::vector<GradCase> AllCases() {
  std::vector<GradCase> all;
  for (auto fn : {ElementwiseGradCases, ActivationGradCases, ReductionGradCases, TensorGradCases,
                  LinalgGradCases, ConvPoolGradCases, NormalizationGradCases, LossGradCases}) {
    for (GradCase& c : fn()) all.push_back(std::move(c));
  }
  return all;
}

class CudaOpTest : public ::testing::TestWithParam<GradCase> {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaOpTest, MatchesCpuReference) {
  auto gg = BuildGradientGraph(GetParam(), ir::DType::kFloat32);
  ASSERT_TRUE(gg.ok()) << gg.status();
  runtime::TensorMap feeds(gg->feeds.begin(), gg->feeds.end());
  auto cpu = runtime::cpu::CpuExecutor::Create(*gg->graph);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(*gg->graph, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    ASSERT_EQ((*got)[i].dims(), (*want)[i].dims()) << "output " << i;
    const double err = runtime::MaxRelativeError((*got)[i], (*want)[i]);
    EXPECT_LE(err, 1e-4) << "output " << i << " ('" << gg->graph->outputs()[i]->name() << "')";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOpTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ottr::testing
