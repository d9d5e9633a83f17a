// fuse-linear-sce-relu-grad (passes/fuse_linear_sce_relu_grad.cc) and the op it makes,
// ottr::LinearSceReluGrad (ir/ops/fused_ops.cc, CPU kernel in runtime/cpu/ottr_training_kernels.cc):
// IR text in, the printed IR and remark out, the graph run before and after on the CPU reference
// (the same bits: the CPU kernel is the three nodes' arithmetic in their order); the cases where it
// must not fire; the shape checks; the small MLP's TF32 step with and without it.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/fusion_passes.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;
using testing::IrBody;
using testing::PassRun;

PassRun RunPass(const std::string& text) {
  return testing::RunPassOnText(passes::CreateFuseLinearSceReluGradPass(), text);
}

// The head of a TF32 step above 1024 rows after count-labels-early and fuse-linear-relu-grad (here
// 40 rows of 128 features, 12 classes of which the loss reads 10, the gradients' first 10 rows).
constexpr char kHead[] = R"(graph "g" {
  opset ai.onnx 17
  input %y : f32[40,128]
  input %w : f32[12,128]
  input %b : f32[12]
  input %labels : i64[40]
  input %count : i64[]
  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin "autodiff/seed"
  %z : f32[40,12] = ottr::FusedGemm(%y, %w, %b) {epilogue = "bias", transB = 1} origin "fc3"
  %loss : f32[], %dz : f32[40,12] = ottr::SoftmaxCrossEntropyWithGrad(%z, %labels, %seed, %count) {classes = 10, ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %dh : f32[40,128], %db : f32[128], %dw : f32[10,128], %dbz : f32[10] = ottr::LinearReluGrad(%dz, %w, %y) {weight_rows = 10} origin "fc3/grad"
  output %loss
  output %dh
  output %db
  output %dw
  output %dbz
})";

runtime::TensorMap HeadFeeds() {
  runtime::TensorMap feeds;
  feeds["y"] = testing::RandomFloat({40, 128}, 31, -1.0f, 2.0f);  // about a third <= 0: the mask matters
  feeds["w"] = testing::RandomFloat({12, 128}, 32, -0.5f, 0.5f);
  feeds["b"] = testing::RandomFloat({12}, 33, -1.0f, 1.0f);
  feeds["labels"] = testing::RandomInt64({40}, 34, -1, 9);  // -1: ignored
  int64_t kept = 0;
  for (int64_t i = 0; i < 40; ++i) kept += feeds.at("labels").data<int64_t>()[i] != -1;
  feeds["count"] = ir::Tensor::Scalar<int64_t>(kept);
  return feeds;
}

std::vector<ir::Tensor> RunOnCpu(const ir::Graph& g, const runtime::TensorMap& feeds) {
  auto cpu = runtime::cpu::CpuExecutor::Create(g);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  if (!cpu.ok()) return {};
  auto out = (*cpu)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<ir::Tensor>{};
}

TEST(FuseLinearSceReluGradTest, FusesTheHeadIntoOneNodeWithTheSameBits) {
  PassRun r = RunPass(kHead);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n"
            "  %loss : f32[], %dh : f32[40,128], %db : f32[128], %dw : f32[10,128], %dbz : f32[10] = "
            "ottr::LinearSceReluGrad(%y, %w, %b, %labels, %seed, %count) {classes = 10, ignore_index = -1, "
            "label_smoothing = 0.100000001, weight_rows = 10} origin \"fc3/grad\"\n"
            "  output %loss, %dh, %db, %dw, %dbz\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "-> ottr::LinearSceReluGrad (40 rows of 128, 12 classes)")) << r.remarks;
  const runtime::TensorMap feeds = HeadFeeds();
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(before.size(), 5u);
  ASSERT_EQ(after.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i;
  // Not a degenerate case: the loss is finite and dX has both masked and unmasked elements.
  EXPECT_TRUE(std::isfinite(after[0].data<float>()[0]));
  int zeros = 0;
  for (int64_t i = 0; i < after[1].num_elements(); ++i) zeros += after[1].data<float>()[i] == 0.0f;
  EXPECT_GT(zeros, 40 * 128 / 5);
  EXPECT_LT(zeros, 40 * 128 / 2);
  // The bias may be omitted (a FusedGemm "none").
  std::string none = kHead;
  none.replace(none.find("(%y, %w, %b) {epilogue = \"bias\""), 32, "(%y, %w) {epilogue = \"none\"");
  PassRun r2 = RunPass(none);
  ASSERT_TRUE(r2.after) << none;
  EXPECT_TRUE(r2.changed);
  EXPECT_TRUE(absl::StrContains(IrBody(*r2.after), "ottr::LinearSceReluGrad(%y, %w, _, %labels, %seed, %count)"))
      << IrBody(*r2.after);
  const std::vector<ir::Tensor> b2 = RunOnCpu(*r2.before, feeds);
  const std::vector<ir::Tensor> a2 = RunOnCpu(*r2.after, feeds);
  ASSERT_EQ(a2.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(a2[i].BitwiseEquals(b2[i])) << i;
}

// The reference checks the count it is given, as SoftmaxCrossEntropyWithGrad does.
TEST(FuseLinearSceReluGradTest, TheReferenceRejectsAWrongCount) {
  PassRun r = RunPass(kHead);
  ASSERT_TRUE(r.after && r.changed);
  runtime::TensorMap feeds = HeadFeeds();
  const int64_t kept = feeds.at("count").data<int64_t>()[0];
  feeds["count"] = ir::Tensor::Scalar<int64_t>(kept - 1);
  auto cpu = runtime::cpu::CpuExecutor::Create(*r.after);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto bad = (*cpu)->Run(feeds);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), absl::StrCat("count (input 5) is ", kept - 1, " but ", kept,
                                                                      " labels are not ignore_index -1")))
      << bad.status();
}

TEST(FuseLinearSceReluGradTest, DeclinesWhatItCannotFuse) {
  struct Decline {
    std::vector<std::pair<std::string, std::string>> edits;
    std::string why;
  };
  const std::vector<Decline> cases = {
      // no count: count-labels-early did not run
      {{{"%z, %labels, %seed, %count)", "%z, %labels, %seed)"}}, "has no labels' count"},
      // the logits read elsewhere too
      {{{"  output %loss\n", "  output %loss\n  output %z\n"}}, "logits z have other readers"},
      // dlogits read elsewhere too
      {{{"  output %loss\n", "  output %loss\n  output %dz\n"}}, "dlogits dz are not float32 or have other readers"},
      // a different weight in the forward
      {{{"  input %b : f32[12]\n", "  input %b : f32[12]\n  input %w2 : f32[12,128]\n"},
        {"ottr::FusedGemm(%y, %w, %b)", "ottr::FusedGemm(%y, %w2, %b)"}},
       "is not Y·Wᵀ (+ bias) of the backward's Y and W in float32"},
      // the backward alone, without the weight gradient
      {{{", %dw : f32[10,128], %dbz : f32[10] = ottr::LinearReluGrad(%dz, %w, %y) {weight_rows = 10}",
         " = ottr::LinearReluGrad(%dz, %w, %y)"},
        {"  output %dw\n  output %dbz\n", ""}},
       "it does not compute the head's weight gradient"},
  };
  for (const Decline& d : cases) {
    std::string text = kHead;
    for (const auto& [from, to] : d.edits) {
      ASSERT_NE(text.find(from), std::string::npos) << from;
      text.replace(text.find(from), from.size(), to);
    }
    SCOPED_TRACE(text);
    PassRun r = RunPass(text);
    ASSERT_TRUE(r.after);
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
    EXPECT_TRUE(absl::StrContains(r.remarks, d.why)) << r.remarks;
  }
  // A width the kernel does not take (it splits N over 16 warps of 8·NT columns).
  std::string text = kHead;
  for (const std::string from : {"f32[40,128]", "f32[12,128]", "f32[10,128]", "f32[128]"}) {
    const std::string to = absl::StrReplaceAll(from, {{"128", "96"}});
    while (text.find(from) != std::string::npos) text.replace(text.find(from), from.size(), to);
  }
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "(the kernel takes 128, 256 or 512 columns and at most 16 classes)"))
      << r.remarks;
}

TEST(LinearSceReluGradOpTest, ShapeInferenceRejectsBadOperands) {
  const std::string good = R"(graph "g" {
  opset ai.onnx 17
  input %y : f32[8,128]
  input %w : f32[12,128]
  input %labels : i64[8]
  input %count : i64[]
  input %seed : f32[]
  %loss : f32[], %dx : f32[8,128], %db : f32[128], %dw : f32[12,128], %dbz : f32[12] = ottr::LinearSceReluGrad(%y, %w, _, %labels, %seed, %count) origin "n"
  output %dx
})";
  auto infer = [](const std::string& text) {
    auto g = ir::ParseGraph(text);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? ir::InferGraphShapes(ir::OpRegistry::Global(), **g) : g.status();
  };
  EXPECT_TRUE(infer(good).ok()) << infer(good);
  const struct {
    const char* from;
    const char* to;
    const char* error;
  } cases[] = {
      {"input %w : f32[12,128]", "input %w : f32[17,128]", "with 1 <= K <= 16"},  // more than 16 classes
      {"input %w : f32[12,128]", "input %w : f32[12,64]", "with 1 <= K <= 16"},   // N disagrees
      {"input %count : i64[]", "input %count : f32[]", "count must be the int64 scalar of ottr::CountLabels"},
      {"input %labels : i64[8]", "input %labels : i64[9]", "must be int32 or int64 [8]"},
      {"%seed, %count)", "%seed, %count) {weight_rows = 13}", "weight_rows = 13 must be 0 to K = 12"},
      {"%seed, %count)", "%seed)", "needs Y, W, [bias], labels, dloss and count"},
  };
  for (const auto& c : cases) {
    std::string text = good;
    text.replace(text.find(c.from), std::string(c.from).size(), c.to);
    SCOPED_TRACE(text);
    const absl::Status s = infer(text);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), c.error)) << s;
  }
}

// The small MLP (784-512-512-10, classes padded to 12) at batch 300 in TF32 with fuse-linear-sce
// and fuse-gemm-dact-bgrad off, so its head has the large-batch form: the pass fuses it, the plan holds, and the step's
// outputs (loss, every updated parameter and state, the gradients) are the same bits as without.
TEST(FuseLinearSceReluGradTrainingTest, MlpStepComputesTheSameBits) {
  const int64_t batch = 300;
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.precision = passes::Precision::kTf32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  spec.pad_tf32_gemms = true;
  spec.pad_gemm_min_macs = 0;
  spec.pad_gemm_min_rows = 0;
  // As at large batches: the head's ReLU backward a ReluGradBiasGrad, not a DRELU epilogue.
  spec.disabled_passes = {"fuse-linear-sce", "fuse-gemm-dact-bgrad"};
  passes::PassManagerOptions o;
  std::ostringstream remarks;
  o.remarks = &remarks;
  testing::ModelStep with = testing::RunStepOnCpu(**forward, {batch, 784}, spec, 1e-3f, o);
  ASSERT_TRUE(with.step);
  EXPECT_EQ(CountOps(*with.step, "LinearSceReluGrad"), 1) << remarks.str();
  EXPECT_EQ(CountOps(*with.step, "LinearReluGrad"), 0);
  EXPECT_EQ(CountOps(*with.step, "SoftmaxCrossEntropyWithGrad"), 0);
  EXPECT_TRUE(absl::StrContains(remarks.str(), "fuse-linear-sce-relu-grad: fused")) << remarks.str();
  auto plan = passes::PlanMemory(*with.step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(*with.step, *plan).ok());
  spec.disabled_passes.insert("fuse-linear-sce-relu-grad");
  testing::ModelStep without = testing::RunStepOnCpu(**forward, {batch, 784}, spec, 1e-3f);
  ASSERT_TRUE(without.step);
  EXPECT_EQ(CountOps(*without.step, "LinearSceReluGrad"), 0);
  EXPECT_EQ(CountOps(*without.step, "LinearReluGrad"), 1);
  testing::ExpectSameStepOutputs(with, without);
  // float32 steps keep the three nodes (the fused kernel's products are TF32).
  spec.precision = passes::Precision::kFp32;
  spec.disabled_passes = {"fuse-linear-sce", "fuse-gemm-dact-bgrad"};
  testing::ModelStep fp32 = testing::RunStepOnCpu(**forward, {batch, 784}, spec, 1e-3f);
  ASSERT_TRUE(fp32.step);
  EXPECT_EQ(CountOps(*fp32.step, "LinearSceReluGrad"), 0);
}

}  // namespace
}  // namespace ottr
