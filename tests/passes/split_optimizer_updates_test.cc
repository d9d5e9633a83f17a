// split-optimizer-updates (passes/split_optimizer_updates.cc): IR text in, the pass, the printed
// IR compared with the expected (the parameters whose gradients are made deepest updated by a
// node of their own, the values keeping their names); where it must not fire (a guarded update,
// every gradient at the same depth); and whole training steps with and without the pass giving
// the same bits on the CPU reference (Adam, AdamW, SGD with momentum), every update still in
// place.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/fusion_passes.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::PassRun;

PassRun RunSplit(const std::string& text) {
  return testing::RunPassOnText(passes::CreateSplitOptimizerUpdatesPass(), text);
}

// Parameters, gradients and Adam state of two tensors; g1 is made one node from the inputs, g0
// two. Only the node lines differ between the cases.
std::string AdamGraph(const std::string& nodes) {
  return R"(graph "g" {
  opset ai.onnx 17
  input %lr : f32[]
  input %s : i64[]
  input %x : f32[4,3]
  input %w0 : f32[4,3]
  input %w1 : f32[3]
  input %m0 : f32[4,3]
  input %m1 : f32[3]
  input %v0 : f32[4,3]
  input %v1 : f32[3]
)" + nodes + "}";
}

// Adam's second moments must not be negative: v in [0, 1), the step 3, the rest in [-1, 1).
runtime::TensorMap AdamFeeds(const ir::Graph& g) {
  runtime::TensorMap feeds = testing::RandomFeeds(g, 11);
  feeds["s"] = ir::Tensor::Scalar<int64_t>(3);
  feeds["lr"] = ir::Tensor::Scalar<float>(1e-2f);
  feeds["v0"] = testing::RandomFloat({4, 3}, 21, 0.0f, 1.0f);
  feeds["v1"] = testing::RandomFloat({3}, 22, 0.0f, 1.0f);
  return feeds;
}

constexpr char kAttrs[] =
    "{beta1 = 0.899999976, beta2 = 0.999000013, decoupled = 0, epsilon = 9.99999994e-09, weight_decay = 0.0}";

TEST(SplitOptimizerUpdatesTest, UpdatesTheDeepestGradientsLast) {
  PassRun r = RunSplit(AdamGraph(absl::StrCat(R"(  %t : f32[4,3] = Mul(%x, %x) origin "a"
  %g0 : f32[4,3] = Add(%t, %w0) origin "b"
  %g1 : f32[3] = Neg(%w1) origin "c"
  %w0.new : f32[4,3], %w1.new : f32[3], %m0.new : f32[4,3], %m1.new : f32[3], %v0.new : f32[4,3], %v1.new : f32[3] = ottr::AdamUpdateN(%lr, %s, %w0, %w1, %g0, %g1, %m0, %m1, %v0, %v1) )",
                                             kAttrs, R"( origin "opt"
  output %w0.new
  output %w1.new
  output %m0.new
  output %m1.new
  output %v0.new
  output %v1.new
)")));
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            absl::StrCat("  %t : f32[4,3] = Mul(%x, %x) origin \"a\"\n"
                         "  %g0 : f32[4,3] = Add(%t, %w0) origin \"b\"\n"
                         "  %g1 : f32[3] = Neg(%w1) origin \"c\"\n"
                         "  %w1.new : f32[3], %m1.new : f32[3], %v1.new : f32[3] = ottr::AdamUpdateN(%lr, %s, %w1, %g1, "
                         "%m1, %v1) ",
                         kAttrs,
                         " origin \"opt\"\n"
                         "  %w0.new : f32[4,3], %m0.new : f32[4,3], %v0.new : f32[4,3] = ottr::AdamUpdateN(%lr, %s, %w0, "
                         "%g0, %m0, %v0) ",
                         kAttrs,
                         " origin \"opt\"\n"
                         "  output %w0.new, %w1.new, %m0.new, %m1.new, %v0.new, %v1.new\n"));
  EXPECT_TRUE(absl::StrContains(r.remarks, "w0 (gradients at depth 2) get an update of their own; the other 1 parameters' update no longer waits"))
      << r.remarks;
  testing::ExpectSameOutputsOn(r, AdamFeeds(*r.before));
}

TEST(SplitOptimizerUpdatesTest, KeepsAGuardedUpdateWhole) {
  PassRun r = RunSplit(R"(graph "g" {
  opset ai.onnx 17
  input %lr : f32[]
  input %s : i64[]
  input %x : f32[4,3]
  input %w0 : f32[4,3]
  input %w1 : f32[3]
  input %ok : bool[]
  %t : f32[4,3] = Mul(%x, %x) origin "a"
  %g0 : f32[4,3] = Add(%t, %w0) origin "b"
  %g1 : f32[3] = Neg(%w1) origin "c"
  %w0.new : f32[4,3], %w1.new : f32[3] = ottr::SGDUpdateN(%lr, %s, %w0, %w1, %g0, %g1, %ok) {dampening = 0.0, guarded = 1, momentum = 0.0, nesterov = 0, weight_decay = 0.0} origin "opt"
  output %w0.new
  output %w1.new
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "kept node 'opt' (ottr.SGDUpdateN) whole: it is guarded")) << r.remarks;
}

TEST(SplitOptimizerUpdatesTest, KeepsGradientsOfOneDepthTogether) {
  PassRun r = RunSplit(AdamGraph(absl::StrCat(R"(  %g0 : f32[4,3] = Mul(%x, %w0) origin "b"
  %g1 : f32[3] = Neg(%w1) origin "c"
  %w0.new : f32[4,3], %w1.new : f32[3], %m0.new : f32[4,3], %m1.new : f32[3], %v0.new : f32[4,3], %v1.new : f32[3] = ottr::AdamUpdateN(%lr, %s, %w0, %w1, %g0, %g1, %m0, %m1, %v0, %v1) )",
                                             kAttrs, R"( origin "opt"
  output %w0.new
  output %w1.new
)")));
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "every gradient is made at the same depth (1)")) << r.remarks;
}

// The deepest gradient's parameter holds 2 of 14 elements (less than a fifth): kept whole.
TEST(SplitOptimizerUpdatesTest, KeepsAnUpdateWhoseDeepestPartIsSmall) {
  PassRun r = RunSplit(R"(graph "g" {
  opset ai.onnx 17
  input %lr : f32[]
  input %s : i64[]
  input %w0 : f32[4,3]
  input %w1 : f32[2]
  %t : f32[2] = Mul(%w1, %w1) origin "a"
  %g1 : f32[2] = Add(%t, %w1) origin "b"
  %g0 : f32[4,3] = Neg(%w0) origin "c"
  %w0.new : f32[4,3], %w1.new : f32[2] = ottr::SGDUpdateN(%lr, %s, %w0, %w1, %g0, %g1) {dampening = 0.0, momentum = 0.0, nesterov = 0, weight_decay = 0.0} origin "opt"
  output %w0.new
  output %w1.new
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "parameters hold 2 of 14 elements (less than 0.2)")) << r.remarks;
}

// Whole steps of the bundled MLP with the grouped update, with and without the split: two update
// nodes instead of one, the first layer's weight updated last, every update in place, and three
// steps giving the same loss and state bits on the CPU reference.
struct StepCase {
  passes::OptimizerSpec::Kind kind;
  float momentum;
  const char* op;
};

class SplitOptimizerStepTest : public ::testing::TestWithParam<StepCase> {};

TEST_P(SplitOptimizerStepTest, SameBitsAsOneUpdate) {
  const StepCase& c = GetParam();
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.optimizer.kind = c.kind;
  spec.optimizer.momentum = c.momentum;
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.precision = passes::Precision::kTf32;  // the CUDA tools' pipeline; the CPU computes float32
  // fuse-gemm-adam would take the first layer's weight out of the grouped update at this batch.
  spec.disabled_passes.insert("fuse-gemm-adam");
  auto split = passes::BuildTrainingGraph(**forward, spec);
  spec.disabled_passes.insert("split-optimizer-updates");
  auto whole = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(split.ok() && whole.ok()) << split.status() << whole.status();
  EXPECT_EQ(testing::CountOps(**whole, c.op), 1);
  EXPECT_EQ(testing::CountOps(**split, c.op), 2);
  // The last update node (in the graph's order) takes the first layer's weight and nothing of the
  // other layers.
  const ir::Node* last = nullptr;
  for (const ir::Node* n : (*split)->nodes()) {
    if (n->op_type() == c.op) last = n;
  }
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->input(2)->name(), "fc1.weight");
  for (int i = 2; i < last->num_inputs(); ++i) {
    const std::string& name = last->input(i)->name();
    EXPECT_TRUE(!absl::StrContains(name, "fc2") && !absl::StrContains(name, "fc3")) << name;
  }
  auto plan = passes::PlanMemory(**split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->update_copies.empty()) << passes::FormatPlan(*plan);
  EXPECT_TRUE(passes::VerifyPlan(**split, *plan).ok());

  auto a = runtime::cpu::CpuExecutor::Create(**whole);
  auto b = runtime::cpu::CpuExecutor::Create(**split);
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
  ASSERT_EQ((*whole)->updates().size(), (*split)->updates().size());
  for (const ir::StateUpdate& u : (*whole)->updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_TRUE(x && y) << u.target->name();
    EXPECT_TRUE(x->BitwiseEquals(*y)) << u.target->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, SplitOptimizerStepTest,
                         ::testing::Values(StepCase{passes::OptimizerSpec::Kind::kAdam, 0, "AdamUpdateN"},
                                           StepCase{passes::OptimizerSpec::Kind::kAdamW, 0, "AdamUpdateN"},
                                           StepCase{passes::OptimizerSpec::Kind::kSgd, 0.9f, "SGDUpdateN"}),
                         [](const ::testing::TestParamInfo<StepCase>& info) {
                           return std::string(info.param.op) + "_" + std::to_string(info.index);
                         });

}  // namespace
}  // namespace ottr
