// fuse-sce-grad (passes/fuse_sce_grad.cc) and the op it makes, ottr::SoftmaxCrossEntropyWithGrad
// (ir/ops/ottr_training_ops.cc, CPU kernel in runtime/cpu/ottr_training_kernels.cc): IR text in,
// the printed IR and remark out, the graph run before and after on the CPU reference; the cases
// where it must not fire; the training step of models/mlp with the pass.
//
// Numbers: the fused CPU kernel is the composition of the two kernels (log_prob rounded to the
// logits' type, dlogits to it and then to grad_type), so the outputs are the same bits.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/printer.h"
#include "runtime/cpu/cpu_executor.h"
#include "passes/fusion_passes.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

using testing::IrBody;
using testing::PassRun;
using testing::RunOnCpu;

PassRun RunPass(const std::string& text) { return testing::RunPassOnText(passes::CreateFuseSceGradPass(), text); }

// The loss and its gradient as autodiff writes them in a bf16 step: the seed, and dlogits cast
// to bf16 for the last layer's backward GEMMs. Label 3 of 7 rows is the ignore_index (-1).
constexpr char kSce[] = R"(graph "g" {
  opset ai.onnx 17
  input %logits : f32[7,12]
  input %labels : i64[7]
  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin "autodiff/seed"
  %loss : f32[], %lp : f32[7,12] = ottr::SoftmaxCrossEntropy(%logits, %labels) {ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %d : f32[7,12] = ottr::SoftmaxCrossEntropyGrad(%seed, %lp, %labels) {ignore_index = -1, label_smoothing = 0.1} origin "loss/grad"
  %d.bf16 : bf16[7,12] = Cast(%d) {to = 16} origin "fc/grad"
  output %loss
  output %d.bf16
})";

runtime::TensorMap Feeds() {
  runtime::TensorMap feeds;
  feeds["logits"] = testing::RandomFloat({7, 12}, 3, -4.0f, 4.0f);
  feeds["labels"] = testing::RandomInt64({7}, 4, 0, 11);
  feeds["labels"].data<int64_t>()[3] = -1;
  return feeds;
}

// The loss and dlogits of the graph after the pass, which are the same bits as before it on `feeds`
// (empty when either run did not give two outputs).
std::vector<ir::Tensor> SameBitsAfter(const PassRun& r, const runtime::TensorMap& feeds) {
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  EXPECT_EQ(before.size(), 2u);
  EXPECT_EQ(after.size(), 2u);
  if (before.size() != 2 || after.size() != 2) return {};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i << "\n after  " << after[i].DebugString(24) << "\n before "
                                                   << before[i].DebugString(24);
  }
  return after;
}

void ExpectSameBits(const PassRun& r) {
  const std::vector<ir::Tensor> after = SameBitsAfter(r, Feeds());
  ASSERT_EQ(after.size(), 2u);
  // The ignored row's gradient is zero; the others are not.
  const ir::Tensor& d = after[1];
  double ignored = 0, kept = 0;
  for (int64_t j = 0; j < 12; ++j) {
    ignored += std::abs(d.GetAsDouble(3 * 12 + j));
    kept += std::abs(d.GetAsDouble(j));
  }
  EXPECT_EQ(ignored, 0.0);
  EXPECT_GT(kept, 0.0);
}

TEST(FuseSceGradTest, FusesTheLossItsGradientAndTheCast) {
  PassRun r = RunPass(kSce);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n"
            "  %loss : f32[], %d.bf16 : bf16[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) "
            "{grad_type = 16, ignore_index = -1, label_smoothing = 0.100000001} origin \"loss\"\n"
            "  output %loss, %d.bf16\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-sce-grad: fused node 'loss' (ottr.SoftmaxCrossEntropy) + node "
                                           "'loss/grad' (ottr.SoftmaxCrossEntropyGrad) + node 'fc/grad' (Cast) -> "
                                           "ottr::SoftmaxCrossEntropyWithGrad (dlogits in bf16, no log_prob)"))
      << r.remarks;
  ExpectSameBits(r);
}

TEST(FuseSceGradTest, FusesWithoutACast) {
  std::string text = kSce;
  const std::string cast = "  %d.bf16 : bf16[7,12] = Cast(%d) {to = 16} origin \"fc/grad\"\n";
  ASSERT_NE(text.find(cast), std::string::npos);
  text.erase(text.find(cast), cast.size());
  text.replace(text.find("output %d.bf16"), 14, "output %d");
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%loss : f32[], %d : f32[7,12] = ottr::SoftmaxCrossEntropyWithGrad("))
      << IrBody(*r.after);
  EXPECT_FALSE(absl::StrContains(IrBody(*r.after), "grad_type"));
  ExpectSameBits(r);
}

TEST(FuseSceGradTest, DeclinesWhereTheLogProbOrTheSeedForbidIt) {
  struct Decline {
    std::string from, to, why;
  };
  const std::vector<Decline> cases = {
      // log_prob is also a graph output.
      {"  output %loss\n", "  output %loss\n  output %lp\n", "log_prob lp has other readers"},
      // A seed computed from the loss (not a training step, but the pass must not create a cycle).
      {"  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n", "",
       "the gradient seed seed is computed from the loss"},
      // Different smoothing in the gradient.
      {"(%seed, %lp, %labels) {ignore_index = -1, label_smoothing = 0.1}", "(%seed, %lp, %labels) {ignore_index = -1, label_smoothing = 0.2}",
       "differ in ignore_index or label_smoothing"},
  };
  for (const Decline& c : cases) {
    std::string text = kSce;
    ASSERT_NE(text.find(c.from), std::string::npos) << c.from;
    text.replace(text.find(c.from), c.from.size(), c.to);
    if (c.to.empty()) {  // the seed case: it is now computed from the loss
      text.insert(text.find("  %d : f32[7,12]"), "  %seed : f32[] = Neg(%loss) origin \"odd\"\n");
    }
    SCOPED_TRACE(c.why);
    PassRun r = RunPass(text);
    ASSERT_TRUE(r.after) << text;
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
    EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-sce-grad: declined node 'loss/grad'")) << r.remarks;
    EXPECT_TRUE(absl::StrContains(r.remarks, c.why)) << r.remarks;
  }
}

// The loss of a padded classifier GEMM (pad-gemm-dims: 10 classes in 12 columns) and the Slice's
// gradient, as autodiff writes them: the fused node reads the padded rows and writes padded
// dlogits; the Slice and SliceGrad go.
constexpr char kPadded[] = R"(graph "g" {
  opset ai.onnx 17
  input %logits.pad : f32[7,12]
  input %labels : i64[7]
  %starts : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc"
  %ends : i64[1] = Constant() {value = tensor<i64[1] [10]>} origin "fc"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [1]>} origin "fc"
  %logits : f32[7,10] = Slice(%logits.pad, %starts, %ends, %axes) origin "fc"
  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin "autodiff/seed"
  %loss : f32[], %lp : f32[7,10] = ottr::SoftmaxCrossEntropy(%logits, %labels) {ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %d : f32[7,10] = ottr::SoftmaxCrossEntropyGrad(%seed, %lp, %labels) {ignore_index = -1, label_smoothing = 0.1} origin "loss/grad"
  %d.pad : f32[7,12] = ottr::SliceGrad(%d, %starts, %ends, %axes) {shape = ints[7, 12]} origin "fc/grad"
  output %loss
  output %d.pad
})";

runtime::TensorMap PaddedFeeds() {
  runtime::TensorMap feeds;
  feeds["logits.pad"] = testing::RandomFloat({7, 12}, 5, -4.0f, 4.0f);
  feeds["labels"] = testing::RandomInt64({7}, 6, 0, 9);
  feeds["labels"].data<int64_t>()[3] = -1;
  return feeds;
}

TEST(FuseSceGradTest, FoldsThePaddedGemmsSliceAndItsGradient) {
  PassRun r = RunPass(kPadded);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n"
            "  %loss : f32[], %d.pad : f32[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits.pad, %labels, %seed) "
            "{classes = 10, ignore_index = -1, label_smoothing = 0.100000001} origin \"loss\"\n"
            "  output %loss, %d.pad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "+ node 'fc' (Slice) + node 'fc/grad' (ottr.SliceGrad) -> "
                                           "ottr::SoftmaxCrossEntropyWithGrad (dlogits in f32, no log_prob, the "
                                           "first 10 of 12 columns)"))
      << r.remarks;
  const std::vector<ir::Tensor> after = SameBitsAfter(r, PaddedFeeds());
  ASSERT_EQ(after.size(), 2u);
  // The padding columns get zero gradients, the classes of kept rows do not.
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(after[1].GetAsDouble(i * 12 + 10), 0.0);
    EXPECT_EQ(after[1].GetAsDouble(i * 12 + 11), 0.0);
    if (i != 3) {
      EXPECT_NE(after[1].GetAsDouble(i * 12), 0.0);
    }
  }
}

// The Slice stays (the loss and its gradient still fuse) where its output has another reader or
// the gradient is not its SliceGrad.
TEST(FuseSceGradTest, KeepsASliceThatIsNotOnlyThePadding) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  output %loss\n", "  output %loss\n  output %logits\n"},
      {"%d.pad : f32[7,12] = ottr::SliceGrad(%d, %starts, %ends, %axes)",
       "%d.pad : f32[7,12] = ottr::SliceGrad(%d, %starts, %ends, %axes2)"},
      {"%ends : i64[1] = Constant() {value = tensor<i64[1] [10]>}", "%ends : i64[1] = Constant() {value = tensor<i64[1] [12]>}"},
  };
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(to);
    std::string text = kPadded;
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
    if (absl::StrContains(to, "axes2")) {
      text.insert(text.find("  %logits : f32"), "  %axes2 : i64[1] = Constant() {value = tensor<i64[1] [-1]>} origin \"fc\"\n");
    }
    if (absl::StrContains(to, "[12]")) {  // a Slice of every column: [7,12] logits
      for (const char* t : {"%logits : f32[7,10]", "%lp : f32[7,10]", "%d : f32[7,10]"}) {
        std::string w = t;
        text.replace(text.find(w), w.size(), w.substr(0, w.size() - 3) + "12]");
      }
    }
    PassRun r = RunPass(text);
    ASSERT_TRUE(r.after) << text;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(CountOps(*r.after, "SoftmaxCrossEntropyWithGrad"), 1);
    EXPECT_EQ(CountOps(*r.after, "Slice"), 1) << IrBody(*r.after);
    EXPECT_EQ(CountOps(*r.after, "SliceGrad"), 1) << IrBody(*r.after);
    EXPECT_FALSE(absl::StrContains(IrBody(*r.after), "classes")) << IrBody(*r.after);
  }
}

// The models/mlp step with its 10-class GEMM padded to 12 (pad-gemm-dims for TF32, every size):
// the loss node reads the padded logits, and the step computes the same bits as without the pass.
TEST(FuseSceGradTrainingTest, PaddedMlpStepFoldsTheSlices) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kTf32;
  spec.pad_tf32_gemms = true;
  spec.pad_gemm_min_macs = 0;
  spec.pad_gemm_min_rows = 0;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  spec.disabled_passes = {"fuse-linear-sce"};  // it would take the loss node with the GEMMs around it
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(CountOps(**step, "SoftmaxCrossEntropyWithGrad"), 1);
  EXPECT_EQ(CountOps(**step, "Slice"), 0);
  EXPECT_EQ(CountOps(**step, "SliceGrad"), 0);
  for (const ir::Node* n : (*step)->nodes()) {
    if (n->op_type() == "SoftmaxCrossEntropyWithGrad") {
      EXPECT_EQ(n->GetInt("classes", 0), 10);
    }
  }
  passes::TrainingSpec without = spec;
  without.disabled_passes = {"fuse-sce-grad", "fuse-linear-sce"};
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_EQ(CountOps(*b.step, "SliceGrad"), 1);
  testing::ExpectSameStepOutputs(a, b);
}

// The models/mlp step with the fusion passes, float32 and bf16: one fused loss node (in bf16
// with dlogits in bf16), a verified memory plan, and the same bits as without the pass.
TEST(FuseSceGradTrainingTest, MlpStepFusesTheLossAndComputesTheSameBits) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  for (passes::Precision p : {passes::Precision::kFp32, passes::Precision::kBf16}) {
    SCOPED_TRACE(static_cast<int>(p));
    passes::TrainingSpec spec;
    spec.batch = 16;
    spec.precision = p;
    spec.fuse_epilogues = true;
    spec.multi_tensor_updates = true;
    spec.narrow_exact_ops = true;
    spec.expose_gradients = true;
    auto step = passes::BuildTrainingGraph(**forward, spec);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(CountOps(**step, "SoftmaxCrossEntropyWithGrad"), 1);
    EXPECT_EQ(CountOps(**step, "SoftmaxCrossEntropy"), 0);
    EXPECT_EQ(CountOps(**step, "SoftmaxCrossEntropyGrad"), 0);
    for (const ir::Node* n : (*step)->nodes()) {
      if (n->op_type() != "SoftmaxCrossEntropyWithGrad") continue;
      EXPECT_EQ(n->output(1)->type().dtype, p == passes::Precision::kBf16 ? ir::DType::kBFloat16 : ir::DType::kFloat32);
    }
    auto plan = passes::PlanMemory(**step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(passes::VerifyPlan(**step, *plan).ok());
    passes::TrainingSpec without = spec;
    without.disabled_passes = {"fuse-sce-grad"};
    testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
    testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
    ASSERT_TRUE(a.step && b.step);
    EXPECT_EQ(CountOps(*b.step, "SoftmaxCrossEntropyWithGrad"), 0);
    testing::ExpectSameStepOutputs(a, b);
  }
}

// --- fuse-sce-bgrad ---------------------------------------------------------------------------

PassRun RunBgradPass(const std::string& text) {
  return testing::RunPassOnText(passes::CreateFuseSceBgradPass(), text);
}

// The fused loss of a classifier GEMM whose bias gradient no epilogue took: the weight gradient
// reads dlogits (a plain Gemm), and a ReduceSum over the batch is the bias gradient.
constexpr char kBgrad[] = R"(graph "g" {
  opset ai.onnx 17
  input %logits : f32[7,12]
  input %labels : i64[7]
  input %h : f32[7,5]
  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin "autodiff/seed"
  %loss : f32[], %d : f32[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %gw : f32[12,5] = Gemm(%d, %h) {transA = 1} origin "fc/grad/w"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad/b"
  %gb : f32[12] = ReduceSum(%d, %axes) {keepdims = 0} origin "fc/grad/b"
  output %loss
  output %gw
  output %gb
})";

runtime::TensorMap BgradFeeds() {
  runtime::TensorMap feeds = Feeds();
  feeds["h"] = testing::RandomFloat({7, 5}, 7, -2.0f, 2.0f);
  return feeds;
}

// Every output of the graph after the pass has the bits it had before (the CPU kernel sums the
// columns as ReduceSum does: rows in order, in double, rounded once).
void ExpectSameOutputs(const PassRun& r) {
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, BgradFeeds());
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, BgradFeeds());
  ASSERT_EQ(before.size(), 3u);
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i << "\n after  " << after[i].DebugString(24) << "\n before "
                                                   << before[i].DebugString(24);
  }
  // The column sums are those of dlogits (not zeros): each within float32 rounding of the sum.
  double total = 0;
  for (int64_t j = 0; j < 12; ++j) total += std::abs(after[2].GetAsDouble(j));
  EXPECT_GT(total, 1e-3);
}

TEST(FuseSceBgradTest, TheLossNodeTakesTheBiasGradient) {
  PassRun r = RunBgradPass(kBgrad);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n"
            "  %loss : f32[], %d : f32[7,12], %gb : f32[12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, "
            "%seed) {ignore_index = -1, label_smoothing = 0.100000001} origin \"loss\"\n"
            "  %gw : f32[12,5] = Gemm(%d, %h) {transA = 1} origin \"fc/grad/w\"\n"
            "  output %loss, %gw, %gb\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-sce-bgrad: fused node 'loss' (ottr.SoftmaxCrossEntropyWithGrad) + "
                                           "node 'fc/grad/b' (ReduceSum) -> ottr::SoftmaxCrossEntropyWithGrad with "
                                           "the column sums of dlogits"))
      << r.remarks;
  ExpectSameOutputs(r);
}

TEST(FuseSceBgradTest, TakesAKeptDimsSumAndItsReshape) {
  std::string text = kBgrad;
  const std::string sum = "  %gb : f32[12] = ReduceSum(%d, %axes) {keepdims = 0} origin \"fc/grad/b\"\n";
  ASSERT_NE(text.find(sum), std::string::npos);
  text.replace(text.find(sum), sum.size(),
               "  %s : f32[1,12] = ReduceSum(%d, %axes) {keepdims = 1} origin \"fc/grad/b\"\n"
               "  %shape : i64[1] = Constant() {value = tensor<i64[1] [12]>} origin \"fc/grad/b\"\n"
               "  %gb : f32[12] = Reshape(%s, %shape) origin \"fc/grad/b\"\n");
  PassRun r = RunBgradPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(CountOps(*r.after, "ReduceSum"), 0);
  EXPECT_EQ(CountOps(*r.after, "Reshape"), 0);
  ExpectSameOutputs(r);
}

TEST(FuseSceBgradTest, DeclinesWhatTheKernelDoesNotSum) {
  struct Decline {
    std::string from, to, why;
  };
  const std::vector<Decline> cases = {
      // A sum over the classes, not the batch.
      {"%gb : f32[12] = ReduceSum(%d, %axes)", "%gb : f32[7] = ReduceSum(%d, %axes1)",
       "no ReduceSum over axis 0 (a bias gradient) reads dlogits d"},
      // The sum is dlogits' only reader.
      {"  %gw : f32[12,5] = Gemm(%d, %h) {transA = 1} origin \"fc/grad/w\"\n", "",
       "the bias gradient is the only reader of dlogits d"},
      // bf16 dlogits (a 16-bit step).
      {"%d : f32[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {",
       "%d : bf16[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {grad_type = 16, ",
       "dlogits d are bf16, the fused column sums are float32 only"},
  };
  for (const Decline& c : cases) {
    SCOPED_TRACE(c.why);
    std::string text = kBgrad;
    ASSERT_NE(text.find(c.from), std::string::npos) << c.from;
    text.replace(text.find(c.from), c.from.size(), c.to);
    if (absl::StrContains(c.to, "axes1")) {
      text.insert(text.find("  %gb :"), "  %axes1 : i64[1] = Constant() {value = tensor<i64[1] [1]>} origin \"x\"\n");
    }
    if (c.to.empty()) text.replace(text.find("  output %gw\n"), 13, "");
    if (absl::StrContains(c.to, "bf16")) {
      text.replace(text.find("%gw : f32[12,5]"), 15, "%gw : bf16[12,5]");
      text.replace(text.find("%h : f32[7,5]"), 13, "%h : bf16[7,5]");
      text.replace(text.find("%gb : f32[12]"), 13, "%gb : bf16[12]");
    }
    PassRun r = RunBgradPass(text);
    ASSERT_TRUE(r.after) << text;
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
    EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-sce-bgrad: declined node 'loss'")) << r.remarks;
    EXPECT_TRUE(absl::StrContains(r.remarks, c.why)) << r.remarks;
  }
}

// The models/mlp step in float32 with fuse-gemm-bgrad off (as when the classifier's weight
// gradient is too large for TF32 BGRAD): the loss node sums its bias gradient, and the step
// computes the same bits as without fuse-sce-bgrad.
TEST(FuseSceBgradTrainingTest, MlpStepSumsTheClassifierBiasGradientInTheLoss) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kFp32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  spec.disabled_passes = {"fuse-gemm-bgrad"};
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  int sums = 0;
  for (const ir::Node* n : (*step)->nodes()) {
    if (n->op_type() == "SoftmaxCrossEntropyWithGrad") sums += n->num_outputs() == 3 ? 1 : 0;
  }
  EXPECT_EQ(sums, 1);
  auto plan = passes::PlanMemory(**step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(**step, *plan).ok());
  passes::TrainingSpec without = spec;
  without.disabled_passes = {"fuse-gemm-bgrad", "fuse-sce-bgrad"};
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_EQ(CountOps(*a.step, "ReduceSum") + 1, CountOps(*b.step, "ReduceSum"));
  testing::ExpectSameStepOutputs(a, b);
}

// --- count-labels-early -------------------------------------------------------------------------

PassRun RunCountPass(const std::string& text) {
  return testing::RunPassOnText(passes::CreateCountLabelsEarlyPass(), text);
}

// The fused loss of 300 rows of 12 logits: more than the CUDA kernel's one block takes
// (ir::SceOneBlockRows(12) = 128).
constexpr char kCount[] = R"(graph "g" {
  opset ai.onnx 17
  input %logits : f32[300,12]
  input %labels : i64[300]
  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin "autodiff/seed"
  %loss : f32[], %d : f32[300,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {ignore_index = -1, label_smoothing = 0.1} origin "loss"
  output %loss
  output %d
})";

runtime::TensorMap CountFeeds(int64_t n) {
  runtime::TensorMap feeds;
  feeds["logits"] = testing::RandomFloat({n, 12}, 11, -4.0f, 4.0f);
  feeds["labels"] = testing::RandomInt64({n}, 12, -1, 11);  // -1: ignored, about 1 in 13
  return feeds;
}

TEST(CountLabelsEarlyTest, TheLossReadsACountMadeFromTheLabels) {
  PassRun r = RunCountPass(kCount);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [1.0]>} origin \"autodiff/seed\"\n"
            "  %labels.count : i64[] = ottr::CountLabels(%labels) {ignore_index = -1} origin \"loss\"\n"
            "  %loss : f32[], %d : f32[300,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed, "
            "%labels.count) {ignore_index = -1, label_smoothing = 0.100000001} origin \"loss\"\n"
            "  output %loss, %d\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "count-labels-early: node 'loss' (ottr.SoftmaxCrossEntropyWithGrad) reads "
                                           "the labels' count from ottr::CountLabels(labels)"))
      << r.remarks;
  // The same bits (the count is the divisor the node computed itself), ignored rows included.
  const runtime::TensorMap feeds = CountFeeds(300);
  int64_t ignored = 0;
  for (int64_t i = 0; i < 300; ++i) ignored += feeds.at("labels").data<int64_t>()[i] == -1;
  ASSERT_GT(ignored, 0);
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i;
  // Run again, the pass finds nothing left to do.
  PassRun again = RunCountPass(ir::PrintGraph(*r.after));
  ASSERT_TRUE(again.after);
  EXPECT_FALSE(again.changed);
  EXPECT_TRUE(absl::StrContains(again.remarks, "it already reads the labels' count")) << again.remarks;
}

TEST(CountLabelsEarlyTest, DeclinesRowsThatOneBlockCounts) {
  std::string text = kCount;
  for (const std::string from : {"f32[300,12]", "i64[300]"}) {
    while (text.find(from) != std::string::npos) {
      text.replace(text.find(from), from.size(), from[0] == 'f' ? "f32[128,12]" : "i64[128]");
    }
  }
  PassRun r = RunCountPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "128 rows of 12 run as one block, which counts the labels itself (up to 128)"))
      << r.remarks;
}

TEST(CountLabelsEarlyTest, DeclinesALossThatSumsTheColumns) {
  std::string text = kCount;
  const std::string from = "%d : f32[300,12] = ";
  text.replace(text.find(from), from.size(), "%d : f32[300,12], %db : f32[12] = ");
  text.replace(text.find("  output %d\n"), 12, "  output %d\n  output %db\n");
  PassRun r = RunCountPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "it also sums the columns of dlogits (fuse-sce-bgrad)")) << r.remarks;
}

// The reference checks a count it is given: a wrong one is an error naming both numbers.
TEST(CountLabelsEarlyTest, TheReferenceRejectsAWrongCount) {
  std::string text = kCount;
  const std::string seed_line = "  %seed : f32[]";
  text.insert(text.find(seed_line), "  input %count : i64[]\n");
  text.replace(text.find("%labels, %seed)"), 15, "%labels, %seed, %count)");
  std::unique_ptr<ir::Graph> g = testing::ParseInferred(text);
  ASSERT_TRUE(g) << text;
  runtime::TensorMap feeds = CountFeeds(300);
  int64_t kept = 0;
  for (int64_t i = 0; i < 300; ++i) kept += feeds.at("labels").data<int64_t>()[i] != -1;
  auto cpu = runtime::cpu::CpuExecutor::Create(*g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  feeds["count"] = ir::Tensor::Scalar<int64_t>(kept);
  EXPECT_TRUE((*cpu)->Run(feeds).ok());
  feeds["count"] = ir::Tensor::Scalar<int64_t>(kept + 1);
  auto bad = (*cpu)->Run(feeds);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), absl::StrCat("count (input 3) is ", kept + 1, " but ", kept,
                                                                      " labels are not ignore_index -1")))
      << bad.status();
}

// The models/mlp step at batch 300 without fuse-linear-sce (which takes the loss up to 1024 rows):
// one CountLabels, and the step computes the same bits as without the pass.
TEST(CountLabelsEarlyTrainingTest, MlpStepCountsTheLabelsFirstAndComputesTheSameBits) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 300;
  spec.precision = passes::Precision::kFp32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  spec.disabled_passes = {"fuse-linear-sce"};
  passes::TrainingSpec without = spec;
  without.disabled_passes = {"fuse-linear-sce", "count-labels-early"};
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {300, 784}, spec, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {300, 784}, without, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_EQ(CountOps(*a.step, "CountLabels"), 1);
  EXPECT_EQ(CountOps(*b.step, "CountLabels"), 0);
  auto plan = passes::PlanMemory(*a.step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(*a.step, *plan).ok());
  testing::ExpectSameStepOutputs(a, b);
}

}  // namespace
}  // namespace ottr
