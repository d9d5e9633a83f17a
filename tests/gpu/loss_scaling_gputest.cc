// The nan-guard and dynamic loss scaling on the CUDA executor, whole steps replayed as one CUDA
// Graph (the guard, the finiteness check, the unscale and the scale update all read device
// memory: nothing is decided on the host):
//   - nan-guard: a batch whose loss is not finite changes no parameter, Adam state or step
//     counter; the run then goes on bit for bit as one that never saw the batch;
//   - fp16 with a scale of 2^30: each overflowing step is skipped exactly and halves the scale;
//     after recovery the run follows, bit for bit, a second executor started at the reduced scale,
//     through a batch with an infinity and a growth of the scale;
//   - `ottr train --device cuda --nan-policy skip|stop` (RunTraining in process): skip reports the
//     step and goes on; stop fails naming the step and the first non-finite tensor.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/training.h"
#include "runtime/cuda/cuda_executor.h"
#include "tests/test_util.h"
#include "tools/train_loop.h"

namespace ottr {
namespace {

class LossScalingGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

std::unique_ptr<ir::Graph> Mlp() {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  EXPECT_TRUE(forward.ok()) << forward.status();
  return forward.ok() ? std::move(*forward) : nullptr;
}

std::map<std::string, ir::Tensor> States(const ir::Graph& step, cuda::CudaExecutor& exec) {
  std::map<std::string, ir::Tensor> out;
  for (const ir::StateUpdate& u : step.updates()) {
    const ir::Tensor* t = exec.State(u.target->name());
    EXPECT_NE(t, nullptr) << u.target->name();
    if (t != nullptr) out.emplace(u.target->name(), t->Clone());
  }
  return out;
}

runtime::TensorMap Batch(uint64_t seed, int64_t batch = 32) {
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 784}, seed, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, seed + 1, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  return feeds;
}

TEST_F(LossScalingGpuTest, NanGuardSkipsANonFiniteStepOnTheDevice) {
  auto forward = Mlp();
  ASSERT_TRUE(forward);
  passes::TrainingSpec spec;
  spec.batch = 32;
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  // The guard declines fuse-gemm-adam (its weight gradients are float32 sums in another order):
  // the unguarded step goes without it too, so the two steps differ only by the guard.
  spec.disabled_passes.insert("fuse-gemm-adam");
  auto plain = passes::BuildTrainingGraph(*forward, spec);
  spec.nan_guard = true;
  auto guarded = passes::BuildTrainingGraph(*forward, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  auto a = cuda::CudaExecutor::Create(**plain);
  auto b = cuda::CudaExecutor::Create(**guarded);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const runtime::TensorMap good = Batch(41);
  runtime::TensorMap bad = Batch(41);
  bad["x"].data<float>()[7] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE((*a)->Run(good).ok());
  ASSERT_TRUE((*b)->Run(good).ok());
  const auto before = States(**guarded, **b);
  auto r = (*b)->Run(bad);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(std::isfinite((*r)[0].GetAsDouble(0)));
  const auto after = States(**guarded, **b);
  for (const auto& [name, t] : before) EXPECT_TRUE(after.at(name).BitwiseEquals(t)) << name << " changed in a skipped step";
  auto ra = (*a)->Run(good);
  auto rb = (*b)->Run(good);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0]));
  const auto sa = States(**plain, **a);
  const auto sb = States(**guarded, **b);
  for (const auto& [name, t] : sa) EXPECT_TRUE(t.BitwiseEquals(sb.at(name))) << name;
  EXPECT_EQ(sb.at(passes::kStepState).GetAsInt64(0), 2);
}

std::unique_ptr<ir::Graph> Fp16Step(const ir::Graph& forward, float init_scale, int64_t interval) {
  passes::TrainingSpec spec;
  spec.batch = 32;
  spec.precision = passes::Precision::kFp16;
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.loss_scale.kind = passes::LossScaleSpec::Kind::kDynamic;
  spec.loss_scale.init_scale = init_scale;
  spec.loss_scale.growth_interval = interval;
  auto step = passes::BuildTrainingGraph(forward, spec);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? std::move(*step) : nullptr;
}

TEST_F(LossScalingGpuTest, Fp16OverflowSkipsHalvesAndRecoversOnTheDevice) {
  auto forward = Mlp();
  ASSERT_TRUE(forward);
  constexpr int64_t kInterval = 3;
  float scale = std::ldexp(1.0f, 30);
  auto step_a = Fp16Step(*forward, scale, kInterval);
  ASSERT_TRUE(step_a);
  auto a = cuda::CudaExecutor::Create(*step_a);
  ASSERT_TRUE(a.ok()) << a.status();
  const auto initial = States(*step_a, **a);
  int skipped = 0;
  for (; skipped < 30; ++skipped) {
    auto r = (*a)->Run(Batch(7));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isfinite((*r)[0].GetAsDouble(0)));
    const auto now = States(*step_a, **a);
    if (now.at(passes::kStepState).GetAsInt64(0) != 0) break;
    for (const auto& [name, t] : initial) {
      if (name != passes::kLossScaleState) {
        EXPECT_TRUE(t.BitwiseEquals(now.at(name))) << name << " skip " << skipped;
      }
    }
    scale /= 2;
    EXPECT_EQ(now.at(passes::kLossScaleState).GetAsDouble(0), scale);
  }
  ASSERT_GE(skipped, 5);
  ASSERT_LT(skipped, 30);
  std::printf("cuda fp16: 2^30 overflowed %d times, first step at scale %g\n", skipped, scale);
  auto step_b = Fp16Step(*forward, scale, kInterval);
  ASSERT_TRUE(step_b);
  auto b = cuda::CudaExecutor::Create(*step_b);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Run(Batch(7)).ok());
  {
    const auto sa = States(*step_a, **a);
    const auto sb = States(*step_b, **b);
    for (const auto& [name, t] : sa) EXPECT_TRUE(t.BitwiseEquals(sb.at(name))) << "first step: " << name;
  }
  int taken = 0;
  for (int k = 0; k < 8; ++k) {
    runtime::TensorMap feeds = Batch(7);
    if (k == 2) feeds["x"].data<float>()[5] = std::numeric_limits<float>::infinity();
    const auto before = States(*step_a, **a);
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "step " << k;
    const auto after = States(*step_a, **a);
    const auto sb = States(*step_b, **b);
    for (const auto& [name, t] : after) EXPECT_TRUE(t.BitwiseEquals(sb.at(name))) << "step " << k << ": " << name;
    const double s0 = before.at(passes::kLossScaleState).GetAsDouble(0);
    const double s1 = after.at(passes::kLossScaleState).GetAsDouble(0);
    const int64_t good0 = before.at(passes::kGoodStepsState).GetAsInt64(0);
    const bool stepped = after.at(passes::kStepState).GetAsInt64(0) != before.at(passes::kStepState).GetAsInt64(0);
    if (k == 2) {
      EXPECT_FALSE(stepped) << "the batch with an infinity was applied";
    }
    if (!stepped) {
      for (const auto& [name, t] : before) {
        if (!absl::StartsWith(name, "ottr.loss_scale")) {
          EXPECT_TRUE(t.BitwiseEquals(after.at(name))) << name;
        }
      }
      EXPECT_EQ(s1, s0 / 2);
      continue;
    }
    ++taken;
    EXPECT_EQ(s1, good0 + 1 == kInterval ? 2 * s0 : s0) << "step " << k;
  }
  EXPECT_GE(taken, 4);
}

// Six steps of the MLP from `steps` feeds; step 1's batch holds a NaN.
runtime::DataSource StepsWithNan() {
  runtime::DataSource d;
  d.kind = runtime::DataSource::Kind::kSteps;
  for (int k = 0; k < 6; ++k) {
    runtime::TensorMap feeds;
    feeds["x"] = testing::RandomFloat({16, 784}, 50 + k, 0.0f, 1.0f);
    feeds[passes::kLabelsInput] = testing::RandomInt64({16}, 60 + k, 0, 9);
    if (k == 1) feeds["x"].data<float>()[100] = std::numeric_limits<float>::quiet_NaN();
    d.steps.push_back(std::move(feeds));
  }
  return d;
}

tools::TrainConfig CudaConfig(bool skip) {
  tools::TrainConfig c;
  c.spec.loss.kind = passes::LossSpec::Kind::kSoftmaxCrossEntropy;
  c.spec.multi_tensor_updates = true;
  c.spec.fuse_epilogues = true;
  c.schedule.lr = 1e-3;
  c.log_every = 4;  // the loss is read every 4 steps: step 1's NaN is found after step 3 ran
  c.nan_skip = skip;
  c.device = "cuda";
  return c;
}

TEST_F(LossScalingGpuTest, TrainNanPolicySkipGoesOn) {
  ::testing::internal::CaptureStdout();
  const absl::Status s = tools::RunTraining(testing::SourcePath("models/mlp/model.onnx"), StepsWithNan(), CudaConfig(true));
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(s.ok()) << s << "\n" << out;
  EXPECT_TRUE(absl::StrContains(out, "step 1: loss ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "is not finite: step skipped on the device")) << out;
  EXPECT_TRUE(absl::StrContains(out, "1 steps skipped so far")) << out;
}

TEST_F(LossScalingGpuTest, TrainNanPolicyStopNamesTheStepAndTensor) {
  ::testing::internal::CaptureStdout();
  const absl::Status s = tools::RunTraining(testing::SourcePath("models/mlp/model.onnx"), StepsWithNan(), CudaConfig(false));
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_FALSE(s.ok()) << out;
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "step 1: the loss is ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "non-finite value ")) << s;  // the CPU re-run's finding
  EXPECT_TRUE(absl::StrContains(s.message(), "fc1")) << s;                     // the first layer reads x
  EXPECT_TRUE(absl::StrContains(s.message(), "skipped on the device")) << s;
  std::printf("stop: %s\n", std::string(s.message()).c_str());
}

}  // namespace
}  // namespace ottr
