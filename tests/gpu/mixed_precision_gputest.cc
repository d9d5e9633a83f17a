// Mixed-precision training steps on the GPU against the CPU reference's mixed-precision step:
// the MLP and the CNN in bf16 and fp16, one step from the same parameters and batch. The CUDA
// step is what `ottr train --precision bf16` runs (fused GEMM epilogues, multi-tensor optimizer);
// the CPU step is the plain pipeline.
//
// Tolerance. Both sides run every GEMM/convolution on the same 16-bit inputs with float32
// accumulation and round the output once; they differ only in the order of the float32 sums
// (~1e-6 relative), so an output differs by one rounding step of the 16-bit type (2u: bf16
// 7.8e-3, fp16 9.8e-4 relative) only where a sum lies within that of a rounding boundary (a
// fraction ~1e-6/2u of the elements), and ReLU/MaxPool decisions (signs and maxima computed before
// the rounding) agree. Propagated through the step that stays far below u normwise; we allow u
// per gradient (‖g_gpu − g_cpu‖ / ‖g_cpu‖ ≤ u) and u/4 on the loss, which still fails on a GEMM
// that accumulates in the 16-bit type (its error grows like sqrt(k)·u) or that skips a cast.
// The CUDA step also folds the Casts around its GEMMs (fold-gemm-casts: f32 products, one 16-bit
// rounding fewer), which moves each weight/bias gradient by ≤ u per element from the plain
// step's (0.45u normwise measured on the CPU, tests/passes/fold_gemm_casts_test.cc); the bound u
// per gradient holds that too, the loss moves by ~1e-6 relative.
#include <map>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/mixed_precision.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cuda/cuda_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

class MixedPrecisionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

std::unique_ptr<ir::Graph> MakeStep(const ir::Graph& forward, int64_t batch, passes::Precision precision,
                                    bool cuda_pipeline, bool low_copies = true) {
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.precision = precision;
  spec.expose_gradients = true;
  // As `ottr train` builds it for the device (tools::UseDevicePipeline): on the GPU the CUDA
  // pipeline (fusions, channels-last, 16-bit selects, the grouped optimizer), and on both devices
  // the 16-bit copies of the parameters written by the optimizer unless `low_copies` is false.
  if (cuda_pipeline) passes::UseCudaPipeline(spec);
  spec.optimizer_low_copies = low_copies;
  auto step = passes::BuildTrainingGraph(forward, spec);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? std::move(*step) : nullptr;
}

double NormwiseError(const ir::Tensor& got, const ir::Tensor& want) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.GetAsDouble(i);
    d += (got.GetAsDouble(i) - w) * (got.GetAsDouble(i) - w);
    n += w * w;
  }
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

void ExpectGpuStepMatchesCpu(const std::string& model, std::vector<int64_t> input_dims, passes::Precision precision,
                             const std::map<std::string, int>& selections = {}) {
  SCOPED_TRACE(absl::StrCat(model, " ", passes::PrecisionName(precision)));
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto cpu_step = MakeStep(**forward, input_dims[0], precision, false);
  auto gpu_step = MakeStep(**forward, input_dims[0], precision, true);
  ASSERT_TRUE(cpu_step && gpu_step);
  runtime::TensorMap feeds;
  feeds[(*forward)->inputs()[0]->name()] = testing::RandomFloat(input_dims, 21, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({input_dims[0]}, 22, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  auto cpu = runtime::cpu::CpuExecutor::Create(*cpu_step);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(*gpu_step, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(want->size(), got->size());
  const double u = precision == passes::Precision::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double loss_err = std::abs((*got)[0].GetAsDouble(0) - (*want)[0].GetAsDouble(0)) / std::abs((*want)[0].GetAsDouble(0));
  std::printf("%s %s: loss cpu %.6f gpu %.6f\n", model.c_str(), passes::PrecisionName(precision),
              (*want)[0].GetAsDouble(0), (*got)[0].GetAsDouble(0));
  EXPECT_LE(loss_err, u / 4);
  for (size_t i = 1; i < got->size(); ++i) {
    const std::string& name = gpu_step->outputs()[i]->name();
    ASSERT_EQ(name, cpu_step->outputs()[i]->name());
    const double e = NormwiseError((*got)[i], (*want)[i]);
    // With `selections` (ReLU/MaxPool layers between a parameter and the loss): cuDNN and the
    // CPU accumulate the 16-bit convolutions in different orders, so a pre-activation may round
    // to the neighbouring 16-bit value on one side and flip a unit; as in
    // tests/passes/mixed_precision_numerics_test.cc the bound is 4u + sqrt(2 · L · 2u).
    double bound = u;
    for (const auto& [prefix, layers] : selections) {
      if (name.rfind(prefix, 0) == 0) bound = 4 * u + std::sqrt(2.0 * layers * 2 * u);
    }
    std::printf("  %-18s normwise %.3g (bound %.3g)\n", name.c_str(), e, bound);
    EXPECT_LE(e, bound) << name;
  }
}

TEST_F(MixedPrecisionGpuTest, MlpStepMatchesCpuInBf16AndFp16) {
  for (passes::Precision p : {passes::Precision::kBf16, passes::Precision::kFp16}) {
    // fold-gemm-casts keeps the pre-activations in f32, where the two accumulation orders
    // differ; a ReLU unit near zero, or a value next to a 16-bit rounding boundary when dX is
    // cast for the next GEMM, can then flip: the same bound as for the CNN.
    ExpectGpuStepMatchesCpu("models/mlp/model.onnx", {64, 784}, p, {{"fc1.", 2}, {"fc2.", 1}, {"fc3.", 0}});
  }
}

TEST_F(MixedPrecisionGpuTest, CnnStepMatchesCpuInBf16AndFp16) {
  for (passes::Precision p : {passes::Precision::kBf16, passes::Precision::kFp16}) {
    ExpectGpuStepMatchesCpu("models/cnn/model.onnx", {16, 1, 28, 28}, p,
                            {{"conv1.", 4}, {"conv2.", 3}, {"fc1.", 1}, {"fc2.", 0}});
  }
}

// optimizer-low-copies on the device: the multi-tensor update writes each parameter's bf16 copy
// (round to nearest even, as the Cast it replaces), so three CUDA steps with the pass give the
// same bits as three without (the same kernels otherwise, deterministic), and after each step
// every copy is the cast of its parameter.
TEST_F(MixedPrecisionGpuTest, OptimizerWritesTheBf16CopiesOnTheDevice) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto plain = MakeStep(**forward, 64, passes::Precision::kBf16, true, /*low_copies=*/false);
  auto fused = MakeStep(**forward, 64, passes::Precision::kBf16, true);
  ASSERT_TRUE(plain && fused);
  const std::vector<passes::LowPrecisionCopy> copies = passes::LowPrecisionCopies(*fused);
  ASSERT_GE(copies.size(), 3u);
  auto a = cuda::CudaExecutor::Create(*plain);
  auto b = cuda::CudaExecutor::Create(*fused);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int k = 0; k < 3; ++k) {
    runtime::TensorMap feeds;
    feeds["x"] = testing::RandomFloat({64, 784}, 40 + k, -1.0f, 1.0f);
    feeds[passes::kLabelsInput] = testing::RandomInt64({64}, 50 + k, 0, 9);
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    for (size_t i = 0; i < ra->size(); ++i) EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "step " << k << " output " << i;
    for (const ir::StateUpdate& u : plain->updates()) {
      const ir::Tensor* sa = (*a)->State(u.target->name());
      const ir::Tensor* sb = (*b)->State(u.target->name());
      ASSERT_TRUE(sa != nullptr && sb != nullptr) << u.target->name();
      EXPECT_TRUE(sa->BitwiseEquals(*sb)) << "step " << k << ": " << u.target->name();
    }
    for (const passes::LowPrecisionCopy& c : copies) {
      const ir::Tensor* p = (*b)->State(c.param);
      const ir::Tensor* copy = (*b)->State(c.copy);
      ASSERT_TRUE(p != nullptr && copy != nullptr) << c.copy;
      auto want = runtime::cpu::ew::CastTensor(*p, c.dtype);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_TRUE(copy->BitwiseEquals(*want)) << "step " << k << ": " << c.copy;
    }
  }
  EXPECT_LT((*b)->stats().launches_per_step, (*a)->stats().launches_per_step);
}

}  // namespace
}  // namespace ottr
