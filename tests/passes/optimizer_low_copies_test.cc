// optimizer-low-copies (passes/optimizer_low_copies.cc): the grouped optimizer update writes each
// parameter's 16-bit copy instead of the forward's Cast. The copy is Cast(p) computed at the same
// point of the training, so steps with and without the pass give the same bits on the CPU
// reference (Adam in bf16; SGD with momentum in fp16 with dynamic loss scaling, whose first steps
// overflow and are skipped), the Casts of the parameters are gone, and every copy equals the cast
// of its parameter after each step. RefreshLowPrecisionCopies brings copies back to their
// parameters after a parameter is set from outside the step.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/mixed_precision.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

std::unique_ptr<ir::Graph> Step(const ir::Graph& forward, passes::Precision precision, bool sgd, bool scaled,
                                bool copies) {
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = precision;
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.optimizer_low_copies = copies;
  if (sgd) {
    spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
    spec.optimizer.momentum = 0.9f;
  }
  if (scaled) {
    spec.loss_scale.kind = passes::LossScaleSpec::Kind::kDynamic;
    spec.loss_scale.init_scale = std::ldexp(1.0f, 24);  // overflows fp16: the first steps are skipped
    spec.loss_scale.growth_interval = 3;
  }
  auto step = passes::BuildTrainingGraph(forward, spec);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? std::move(*step) : nullptr;
}

int CastsOfParameters(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node* node : g.nodes()) {
    n += node->op_type() == "Cast" && node->input(0)->is_initializer();
  }
  return n;
}

void ExpectCopiesFollowParameters(const ir::Graph& step, const runtime::cpu::CpuExecutor& exec, int k) {
  for (const passes::LowPrecisionCopy& c : passes::LowPrecisionCopies(step)) {
    const ir::Tensor* p = exec.State(c.param);
    const ir::Tensor* copy = exec.State(c.copy);
    ASSERT_TRUE(p != nullptr && copy != nullptr) << c.copy;
    auto want = runtime::cpu::ew::CastTensor(*p, c.dtype);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(copy->BitwiseEquals(*want)) << "step " << k << ": " << c.copy << " is not Cast(" << c.param << ")";
  }
}

void ExpectSameSteps(const std::string& model, std::vector<int64_t> dims, passes::Precision precision, bool sgd,
                     bool scaled) {
  SCOPED_TRACE(absl::StrCat(model, " ", passes::PrecisionName(precision)));
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto plain = Step(**forward, precision, sgd, scaled, false);
  auto fused = Step(**forward, precision, sgd, scaled, true);
  ASSERT_TRUE(plain && fused);
  // Every Cast of a parameter became a copy (fold-gemm-casts leaves some biases in float32).
  const int casts = CastsOfParameters(*plain);
  EXPECT_GE(casts, 3);
  EXPECT_EQ(CastsOfParameters(*fused), 0);
  EXPECT_EQ(static_cast<int>(passes::LowPrecisionCopies(*fused).size()), casts);
  auto a = runtime::cpu::CpuExecutor::Create(*plain);
  auto b = runtime::cpu::CpuExecutor::Create(*fused);
  ASSERT_TRUE(a.ok() && b.ok());
  int taken = 0;
  constexpr int kSteps = 8;
  for (int k = 0; k < kSteps; ++k) {
    runtime::TensorMap feeds;
    dims[0] = 16;
    feeds[(*forward)->inputs()[0]->name()] = testing::RandomFloat(dims, 70 + k, -1.0f, 1.0f);
    feeds[passes::kLabelsInput] = testing::RandomInt64({16}, 80 + k, 0, 9);
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    ASSERT_EQ(ra->size(), rb->size());
    for (size_t i = 0; i < ra->size(); ++i) EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "step " << k;
    for (const ir::StateUpdate& u : plain->updates()) {
      const ir::Tensor* sa = (*a)->State(u.target->name());
      const ir::Tensor* sb = (*b)->State(u.target->name());
      ASSERT_TRUE(sa != nullptr && sb != nullptr) << u.target->name();
      EXPECT_TRUE(sa->BitwiseEquals(*sb)) << "step " << k << ": " << u.target->name();
    }
    ExpectCopiesFollowParameters(*fused, **b, k);
    taken = static_cast<int>((*b)->State(passes::kStepState)->GetAsInt64(0));
  }
  if (scaled) {
    EXPECT_LT(taken, kSteps) << "2^24 should overflow fp16 at first";
    EXPECT_GT(taken, 0) << "the scale should have come down to a usable one";
  }
}

TEST(OptimizerLowCopiesTest, AdamBf16MlpStepsGiveTheSameBits) {
  ExpectSameSteps("models/mlp/model.onnx", {16, 784}, passes::Precision::kBf16, /*sgd=*/false, /*scaled=*/false);
}

TEST(OptimizerLowCopiesTest, SkippedAndTakenFp16SgdCnnStepsGiveTheSameBits) {
  ExpectSameSteps("models/cnn/model.onnx", {16, 1, 28, 28}, passes::Precision::kFp16, /*sgd=*/true, /*scaled=*/true);
}

TEST(OptimizerLowCopiesTest, RefreshFollowsAParameterSetFromOutside) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto step = Step(**forward, passes::Precision::kBf16, false, false, true);
  ASSERT_TRUE(step);
  auto exec = runtime::cpu::CpuExecutor::Create(*step);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const passes::LowPrecisionCopy c = passes::LowPrecisionCopies(*step).at(0);
  const ir::Tensor fresh = testing::RandomFloat((*exec)->State(c.param)->dims(), 99, -2.0f, 2.0f);
  ASSERT_TRUE((*exec)->SetState(c.param, fresh).ok());
  auto cast = runtime::cpu::ew::CastTensor(fresh, c.dtype);
  ASSERT_TRUE(cast.ok());
  EXPECT_FALSE((*exec)->State(c.copy)->BitwiseEquals(*cast)) << "the copy should still hold the old parameter";
  absl::Status s = passes::RefreshLowPrecisionCopies(
      *step,
      [&](const std::string& n) -> absl::StatusOr<ir::Tensor> {
        const ir::Tensor* t = (*exec)->State(n);
        if (t == nullptr) return absl::NotFoundError(n);
        return *t;
      },
      [&](const std::string& n, const ir::Tensor& t) { return (*exec)->SetState(n, t); });
  ASSERT_TRUE(s.ok()) << s;
  ExpectCopiesFollowParameters(*step, **exec, 0);
}

}  // namespace
}  // namespace ottr
