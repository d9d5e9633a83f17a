// The group-optimizer-updates pass: per-parameter AdamUpdate/SGDUpdate nodes become one N-ary
// node that keeps the values' names, where it must not fire it declines, and the grouped step
// computes bit-identical results on the CPU reference (same per-element arithmetic).
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

std::unique_ptr<ir::Graph> Step(const std::string& model, passes::OptimizerSpec::Kind kind, float momentum,
                                bool grouped) {
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.optimizer.kind = kind;
  spec.optimizer.momentum = momentum;
  spec.multi_tensor_updates = grouped;
  spec.disabled_passes.insert("split-optimizer-updates");  // one group (split_optimizer_updates_test.cc)
  auto step = passes::BuildTrainingGraph(**forward, spec);
  EXPECT_TRUE(step.ok()) << step.status();
  return std::move(*step);
}

struct Case {
  passes::OptimizerSpec::Kind kind;
  float momentum;
  const char* single;
  const char* grouped;
};

class GroupOptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(GroupOptimizerTest, OneNodeSameNamesIdenticalNumbers) {
  const Case& c = GetParam();
  auto plain = Step("models/mlp/model.onnx", c.kind, c.momentum, false);
  auto grouped = Step("models/mlp/model.onnx", c.kind, c.momentum, true);
  ASSERT_TRUE(plain && grouped);
  EXPECT_EQ(CountOps(*plain, c.single), 6);  // 3 weights + 3 biases
  EXPECT_EQ(CountOps(*plain, c.grouped), 0);
  EXPECT_EQ(CountOps(*grouped, c.single), 0);
  EXPECT_EQ(CountOps(*grouped, c.grouped), 1);
  // State updates still read values with the original names (fc1.weight.new, ...).
  ASSERT_EQ(plain->updates().size(), grouped->updates().size());
  for (size_t i = 0; i < plain->updates().size(); ++i) {
    EXPECT_EQ(plain->updates()[i].target->name(), grouped->updates()[i].target->name());
    EXPECT_EQ(plain->updates()[i].value->name(), grouped->updates()[i].value->name());
  }
  // The planner still writes every update in place.
  auto plan = passes::PlanMemory(*grouped);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->update_copies.empty()) << passes::FormatPlan(*plan);
  EXPECT_TRUE(passes::VerifyPlan(*grouped, *plan).ok());

  auto a = runtime::cpu::CpuExecutor::Create(*plain);
  auto b = runtime::cpu::CpuExecutor::Create(*grouped);
  ASSERT_TRUE(a.ok() && b.ok());
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({16, 784}, 5, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({16}, 6, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  for (int k = 0; k < 3; ++k) {
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "loss of step " << k;
  }
  for (const ir::StateUpdate& u : plain->updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_TRUE(x && y) << u.target->name();
    EXPECT_TRUE(x->BitwiseEquals(*y)) << u.target->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, GroupOptimizerTest,
                         ::testing::Values(Case{passes::OptimizerSpec::Kind::kAdam, 0, "AdamUpdate", "AdamUpdateN"},
                                           Case{passes::OptimizerSpec::Kind::kAdamW, 0, "AdamUpdate", "AdamUpdateN"},
                                           Case{passes::OptimizerSpec::Kind::kSgd, 0.9f, "SGDUpdate", "SGDUpdateN"},
                                           Case{passes::OptimizerSpec::Kind::kSgd, 0, "SGDUpdate", "SGDUpdateN"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.grouped) + "_" + std::to_string(info.index);
                         });

TEST(NanGuardTest, NonFiniteLossLeavesTheStateAsItWas) {
  // nan-guard: a batch whose loss is NaN changes no parameter, optimizer state or step counter;
  // the run then goes on exactly as one that never saw that batch.
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok());
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.multi_tensor_updates = true;
  auto plain = passes::BuildTrainingGraph(**forward, spec);
  spec.nan_guard = true;
  auto guarded = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  int guarded_nodes = 0;
  for (const ir::Node* n : (*guarded)->nodes()) guarded_nodes += n->GetInt("guarded", 0) != 0;
  EXPECT_EQ(guarded_nodes, 1);
  auto plan = passes::PlanMemory(**guarded);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Every update stays in place but the step counter's (an 8-byte copy after the step).
  for (const passes::UpdateCopy& c : plan->update_copies) EXPECT_EQ(c.target->name(), passes::kStepState);
  EXPECT_TRUE(passes::VerifyPlan(**guarded, *plan).ok());

  auto a = runtime::cpu::CpuExecutor::Create(**plain);
  auto b = runtime::cpu::CpuExecutor::Create(**guarded);
  ASSERT_TRUE(a.ok() && b.ok());
  runtime::TensorMap good;
  good["x"] = testing::RandomFloat({16, 784}, 5, -1.0f, 1.0f);
  good[passes::kLabelsInput] = testing::RandomInt64({16}, 6, 0, 9);
  good[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  runtime::TensorMap bad = good;
  bad["x"] = testing::RandomFloat({16, 784}, 5, -1.0f, 1.0f);  // its own buffer (Tensor copies share)
  bad["x"].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();

  ASSERT_TRUE((*a)->Run(good).ok());
  ASSERT_TRUE((*b)->Run(good).ok());
  std::map<std::string, ir::Tensor> before;
  for (const ir::StateUpdate& u : (*guarded)->updates()) before.emplace(u.target->name(), *(*b)->State(u.target->name()));
  auto r = (*b)->Run(bad);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::isnan((*r)[0].GetAsDouble(0)));
  for (const auto& [name, t] : before) {
    EXPECT_TRUE((*b)->State(name)->BitwiseEquals(t)) << name << " changed in a skipped step";
  }
  auto ra = (*a)->Run(good);
  auto rb = (*b)->Run(good);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0]));
  for (const ir::StateUpdate& u : (*plain)->updates()) {
    const ir::Tensor sa = *(*a)->State(u.target->name());
    EXPECT_TRUE(sa.BitwiseEquals(*(*b)->State(u.target->name()))) << u.target->name() << " " << sa.GetAsDouble(0) << " vs " << (*b)->State(u.target->name())->GetAsDouble(0);
  }
}

TEST(GroupOptimizerTest, DeclinesWhenThereIsNothingToGroup) {
  // One parameter trained (the rest frozen): a group of one stays a plain update.
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok());
  passes::TrainingSpec spec;
  spec.batch = 4;
  spec.freeze = "^(fc1|fc2|fc3\\.bias)";
  spec.multi_tensor_updates = true;
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(CountOps(**step, "AdamUpdate"), 1);
  EXPECT_EQ(CountOps(**step, "AdamUpdateN"), 0);
}

}  // namespace
}  // namespace ottr
