// fuse-linear-sce (passes/fuse_sce_grad.cc) and the op it makes, ottr::LinearSoftmaxCrossEntropyWithGrad
// (ir/ops/ottr_training_ops.cc, CPU kernel in runtime/cpu/ottr_training_kernels.cc): IR text in,
// the printed IR and remark out, the graph run before and after on the CPU reference; the cases
// where it must not fire; the TF32 training step of models/mlp with the pass.
//
// Numbers: the fused CPU kernel performs the arithmetic of the three nodes it replaces (the bias
// GEMM, the loss and its gradient, the drelu GEMM) in their order, so every output is the same
// bits before and after the pass.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
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

PassRun RunPass(const std::string& text) { return testing::RunPassOnText(passes::CreateFuseLinearScePass(), text); }

// `text` with each edit's first `from` replaced by its `to` (a missing `from` fails the test).
using Edits = std::vector<std::pair<std::string, std::string>>;
std::string Edited(std::string text, const Edits& edits) {
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    if (at == std::string::npos) {
      ADD_FAILURE() << "no " << from;
      continue;
    }
    text.replace(at, from.size(), to);
  }
  return text;
}

// `text` with every `from` replaced by `to`.
std::string ReplacedAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// The pass leaves `text` as it is and says why, naming the loss node.
void ExpectDeclines(const std::string& text, const std::string& why) {
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-linear-sce: declined node 'loss'")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, why)) << r.remarks;
}

// The last two layers of a classifier after the GEMM fusions of a TF32 step: the hidden layer
// writes its ReLU mask, the classifier (10 classes) feeds the fused loss, whose dlogits the data
// gradient (drelu through the mask) and the weight gradient (with the bias gradient) read.
constexpr char kHead[] = R"(graph "g" {
  opset ai.onnx 17
  input %x0 : f32[7,6]
  input %labels : i64[7]
  input %w0 : f32[24,6]
  input %b0 : f32[24]
  input %w : f32[10,24]
  input %b : f32[10]
  %seed : f32[] = Constant() {value = tensor<f32[] [0.75]>} origin "autodiff/seed"
  %h : f32[7,24], %mask : u8[7,16] = ottr::FusedGemm(%x0, %w0, %b0) {epilogue = "relu_aux_bias", transB = 1} origin "fc0"
  %logits : f32[7,10] = ottr::FusedGemm(%h, %w, %b) {epilogue = "bias", transB = 1} origin "fc1"
  %loss : f32[], %d : f32[7,10] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %dh : f32[7,24] = ottr::FusedGemm(%d, %w, _, %mask) {epilogue = "drelu"} origin "fc1/grad"
  %gw : f32[10,24], %gb : f32[10] = ottr::FusedGemm(%d, %h) {epilogue = "bgrada", transA = 1} origin "fc1/grad"
  output %loss
  output %dh
  output %gw
  output %gb
})";

// Random inputs; row 3's label is the ignore_index.
runtime::TensorMap Feeds(const std::string& text) {
  std::unique_ptr<ir::Graph> g = testing::ParseInferred(text);
  runtime::TensorMap feeds = testing::RandomFeeds(*g, 11);
  feeds["labels"] = testing::RandomInt64({7}, 4, 0, 9);
  feeds["labels"].data<int64_t>()[3] = -1;
  return feeds;
}

// Every output after the pass has the bits it had before; dh is not all zeros, its ignored row is,
// and so are the entries the mask clears (h == 0 after the ReLU).
void ExpectSameBits(const PassRun& r, const std::string& text) {
  const runtime::TensorMap feeds = Feeds(text);
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(before.size(), after.size());
  ASSERT_GE(after.size(), 2u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i << "\n after  " << after[i].DebugString(24) << "\n before "
                                                   << before[i].DebugString(24);
  }
  EXPECT_TRUE(std::isfinite(after[0].GetAsDouble(0)));
  EXPECT_GT(after[0].GetAsDouble(0), 0.0);
  const ir::Tensor& dh = after[1];
  const int64_t k = dh.dim(1);
  double kept = 0, ignored = 0;
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < k; ++j) (i == 3 ? ignored : kept) += std::abs(dh.GetAsDouble(i * k + j));
  }
  EXPECT_EQ(ignored, 0.0);
  EXPECT_GT(kept, 1e-4);
}

TEST(FuseLinearSceTest, FusesTheClassifierTheLossAndTheDataGradient) {
  PassRun r = RunPass(kHead);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [0.75]>} origin \"autodiff/seed\"\n"
            "  %h : f32[7,24], %mask : u8[7,16] = ottr::FusedGemm(%x0, %w0, %b0) {epilogue = \"relu_aux_bias\", "
            "transB = 1} origin \"fc0\"\n"
            "  %loss : f32[], %d : f32[7,10], %dh : f32[7,24] = ottr::LinearSoftmaxCrossEntropyWithGrad(%h, %w, %b, "
            "%labels, %seed, %mask) {ignore_index = -1, label_smoothing = 0.100000001, transB = 1} origin \"loss\"\n"
            "  %gw : f32[10,24], %gb : f32[10] = ottr::FusedGemm(%d, %h) {epilogue = \"bgrada\", transA = 1} origin "
            "\"fc1/grad\"\n"
            "  output %loss, %dh, %gw, %gb\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-linear-sce: fused node 'fc1' (ottr.FusedGemm) + node 'loss' "
                                           "(ottr.SoftmaxCrossEntropyWithGrad) + node 'fc1/grad' (ottr.FusedGemm) -> "
                                           "ottr::LinearSoftmaxCrossEntropyWithGrad (10 classes, dx through the ReLU "
                                           "mask)"))
      << r.remarks;
  ExpectSameBits(r, kHead);
}

// A classifier without a bias whose weight is [K, C] (transB = 0), and a data gradient without an
// activation: no mask input.
TEST(FuseLinearSceTest, FusesAWeightOfKByCWithoutBiasOrMask) {
  const std::string text =
      Edited(kHead, {{"input %w : f32[10,24]", "input %w : f32[24,10]"},
                     {"ottr::FusedGemm(%h, %w, %b) {epilogue = \"bias\", transB = 1}",
                      "ottr::FusedGemm(%h, %w) {epilogue = \"none\"}"},
                     {"ottr::FusedGemm(%d, %w, _, %mask) {epilogue = \"drelu\"}",
                      "ottr::FusedGemm(%d, %w) {epilogue = \"none\", transB = 1}"},
                     {"  input %b : f32[10]\n", ""}});
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_TRUE(r.changed) << r.remarks;
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after),
                                "= ottr::LinearSoftmaxCrossEntropyWithGrad(%h, %w, _, %labels, %seed) {ignore_index = "
                                "-1, label_smoothing = 0.100000001, transB = 0}"))
      << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(r.remarks, "(10 classes, dx without an activation)")) << r.remarks;
  const runtime::TensorMap feeds = Feeds(text);
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(before.size(), 4u);
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(after[i].BitwiseEquals(before[i])) << i;
}

TEST(FuseLinearSceTest, DeclinesWhatTheKernelDoesNotCompute) {
  struct Decline {
    Edits edits;
    std::string why;
  };
  const std::vector<Decline> cases = {
      // The logits are also an output.
      {{{"  output %loss\n", "  output %loss\n  output %logits\n"}}, "logits logits have other readers"},
      // The data gradient also writes the bias gradient of the layer below (a sum over the batch).
      {{{"%dh : f32[7,24] = ottr::FusedGemm(%d, %w, _, %mask) {epilogue = \"drelu\"}",
         "%dh : f32[7,24], %db0 : f32[24] = ottr::FusedGemm(%d, %w, _, %mask) {epilogue = \"drelu_bgrad\"}"},
        {"  output %gb\n", "  output %gb\n  output %db0\n"}},
       "has the epilogue drelu_bgrad"},
      // No data gradient (the classifier's input needs none).
      {{{"  %dh : f32[7,24] = ottr::FusedGemm(%d, %w, _, %mask) {epilogue = \"drelu\"} origin \"fc1/grad\"\n", ""},
        {"  output %dh\n", ""}},
       "no ottr::FusedGemm none / drelu or Gemm reads dlogits d and the weight w"},
      // 40 classes: more than a warp's lanes.
      {{{"%w : f32[10,24]", "%w : f32[40,24]"},
        {"%b : f32[10]", "%b : f32[40]"},
        {"%logits : f32[7,10]", "%logits : f32[7,40]"},
        {"%d : f32[7,10]", "%d : f32[7,40]"},
        {"%gw : f32[10,24], %gb : f32[10]", "%gw : f32[40,24], %gb : f32[40]"}},
       "40 classes (the fused kernel holds at most 32 per row)"},
      // bf16 dlogits (a 16-bit step).
      {{{"%d : f32[7,10] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {",
         "%d : bf16[7,10] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {grad_type = 16, "},
        {"  %dh : f32[7,24] = ottr::FusedGemm(%d, %w, _, %mask) {epilogue = \"drelu\"} origin \"fc1/grad\"\n", ""},
        {"  output %dh\n", ""},
        {"  %gw : f32[10,24], %gb : f32[10] = ottr::FusedGemm(%d, %h) {epilogue = \"bgrada\", transA = 1} origin "
         "\"fc1/grad\"\n",
         ""},
        {"  output %gw\n  output %gb\n", "  output %d\n"}},
       "are not both float32"},
      // The loss node already sums dlogits' columns (fuse-sce-bgrad).
      {{{"%loss : f32[], %d : f32[7,10] = ottr::SoftmaxCrossEntropyWithGrad",
         "%loss : f32[], %d : f32[7,10], %s : f32[10] = ottr::SoftmaxCrossEntropyWithGrad"},
        {"  output %gb\n", "  output %gb\n  output %s\n"}},
       "it already writes the column sums of dlogits"},
  };
  for (const Decline& c : cases) {
    SCOPED_TRACE(c.why);
    ExpectDeclines(Edited(kHead, c.edits), c.why);
  }
}

// 4000 features of 10 classes: the weight and four rows of x need more than the kernel's 200 KB
// of shared memory.
TEST(FuseLinearSceTest, DeclinesAWeightTooLargeForTheKernel) {
  ExpectDeclines(Edited(ReplacedAll(kHead, "24", "4000"), {{"u8[7,16]", "u8[7,512]"}}),
                 "the weight of 10 x 4000 does not fit the fused kernel's 204800 bytes");
}

// The head of a large TF32 step (the small MLP at batch 8192): the hidden layer keeps RELU_BIAS
// without a mask, pad-gemm-dims padded the classifier to 12 columns (the loss reads the first 10),
// and the data gradient is a plain Gemm read by the ReLU backward of the classifier's input with
// the hidden layer's bias gradient (fuse-relu-grad-bgrad).
constexpr char kPaddedHead[] = R"(graph "g" {
  opset ai.onnx 17
  input %x0 : f32[7,6]
  input %labels : i64[7]
  input %w0 : f32[24,6]
  input %b0 : f32[24]
  input %w : f32[12,24]
  input %b : f32[12]
  %seed : f32[] = Constant() {value = tensor<f32[] [0.75]>} origin "autodiff/seed"
  %h : f32[7,24] = ottr::FusedGemm(%x0, %w0, %b0) {epilogue = "relu_bias", transB = 1} origin "fc0"
  %logits : f32[7,12] = ottr::FusedGemm(%h, %w, %b) {epilogue = "bias", transB = 1} origin "fc1"
  %loss : f32[], %d : f32[7,12] = ottr::SoftmaxCrossEntropyWithGrad(%logits, %labels, %seed) {classes = 10, ignore_index = -1, label_smoothing = 0.1} origin "loss"
  %dh : f32[7,24] = Gemm(%d, %w) origin "fc1/grad"
  %dz : f32[7,24], %db0 : f32[24] = ottr::ReluGradBiasGrad(%dh, %h) origin "relu0/grad"
  %gw : f32[12,24], %gb : f32[12] = ottr::FusedGemm(%d, %h) {epilogue = "bgrada", transA = 1} origin "fc1/grad"
  output %loss
  output %dz
  output %gw
  output %gb
  output %db0
  output %d
})";

// The loss, dlogits with their padded columns, dx through x's ReLU and its column sums: one node;
// every output the same bits as before; the padded columns of dlogits are zero, dx is zero where
// the ReLU cleared h and in the ignored row.
TEST(FuseLinearSceTest, FusesAPaddedClassifierAndTheReluBackwardOfItsInput) {
  PassRun r = RunPass(kPaddedHead);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed) << r.remarks;
  EXPECT_EQ(IrBody(*r.after),
            "  %seed : f32[] = Constant() {value = tensor<f32[] [0.75]>} origin \"autodiff/seed\"\n"
            "  %h : f32[7,24] = ottr::FusedGemm(%x0, %w0, %b0) {epilogue = \"relu_bias\", transB = 1} origin \"fc0\"\n"
            "  %loss : f32[], %d : f32[7,12], %dz : f32[7,24], %db0 : f32[24] = "
            "ottr::LinearSoftmaxCrossEntropyWithGrad(%h, %w, %b, %labels, %seed) {classes = 10, ignore_index = -1, "
            "label_smoothing = 0.100000001, relu_x = 1, transB = 1} origin \"loss\"\n"
            "  %gw : f32[12,24], %gb : f32[12] = ottr::FusedGemm(%d, %h) {epilogue = \"bgrada\", transA = 1} origin "
            "\"fc1/grad\"\n"
            "  output %loss, %dz, %gw, %gb, %db0, %d\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "+ node 'fc1/grad' (Gemm) + node 'relu0/grad' (ottr.ReluGradBiasGrad) -> "
                                           "ottr::LinearSoftmaxCrossEntropyWithGrad (the first 10 of 12 classes, dx "
                                           "through x's ReLU, with its column sums)"))
      << r.remarks;
  ExpectSameBits(r, kPaddedHead);
  const runtime::TensorMap feeds = Feeds(kPaddedHead);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(after.size(), 6u);
  const ir::Tensor& d = after[5];
  const ir::Tensor& dz = after[1];
  const ir::Tensor& db = after[4];
  double live = 0;
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < 12; ++j) {
      if (j >= 10) {
        EXPECT_EQ(d.GetAsDouble(i * 12 + j), 0.0) << i << "," << j;
      }
      live += j < 10 ? std::abs(d.GetAsDouble(i * 12 + j)) : 0.0;
    }
  }
  EXPECT_GT(live, 1e-3);
  // h = relu(x0 · w0ᵀ + b0), recomputed from the feeds: dz is zero wherever h is.
  const ir::Tensor& x0 = feeds.at("x0");
  const ir::Tensor& w0 = feeds.at("w0");
  const ir::Tensor& b0 = feeds.at("b0");
  int cleared = 0;
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < 24; ++j) {
      double z = b0.GetAsDouble(j);
      for (int64_t t = 0; t < 6; ++t) z += x0.GetAsDouble(i * 6 + t) * w0.GetAsDouble(j * 6 + t);
      if (z < -1e-5) {
        ++cleared;
        EXPECT_EQ(dz.GetAsDouble(i * 24 + j), 0.0) << i << "," << j;
      }
    }
  }
  EXPECT_GT(cleared, 10);
  for (int64_t j = 0; j < 24; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < 7; ++i) sum += dz.GetAsDouble(i * 24 + j);
    EXPECT_EQ(db.GetAsDouble(j), static_cast<double>(static_cast<float>(sum))) << j;
  }
}

// 2048 rows: above 1024 the kernel is slower than the nodes it would replace.
TEST(FuseLinearSceTest, DeclinesMoreRowsThanTheKernelIsFastFor) {
  ExpectDeclines(ReplacedAll(ReplacedAll(kPaddedHead, "[7,", "[2048,"), "i64[7]", "i64[2048]"),
                 "2048 rows (above 1024 the fused kernel is slower than the nodes it would replace)");
}

// ReluGrad without the column sums: dx through x's ReLU, three outputs.
TEST(FuseLinearSceTest, FusesTheReluGradOfItsInputWithoutColumnSums) {
  const std::string text = Edited(kPaddedHead, {{"%dz : f32[7,24], %db0 : f32[24] = ottr::ReluGradBiasGrad(%dh, %h)",
                                                 "%dz : f32[7,24] = ottr::ReluGrad(%dh, %h)"},
                                                {"  output %db0\n", ""}});
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_TRUE(r.changed) << r.remarks;
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after),
                                "%loss : f32[], %d : f32[7,12], %dz : f32[7,24] = ottr::LinearSoftmaxCrossEntropyWithGrad("
                                "%h, %w, %b, %labels, %seed) {classes = 10, ignore_index = -1, label_smoothing = "
                                "0.100000001, relu_x = 1, transB = 1}"))
      << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(r.remarks, "(the first 10 of 12 classes, dx through x's ReLU)")) << r.remarks;
  ExpectSameBits(r, text);
}

// The ReLU backward of another tensor than the classifier's input stays a node of its own (the
// kernel only has x); the Gemm is still fused, dx without an activation.
TEST(FuseLinearSceTest, LeavesTheReluBackwardOfAnotherTensor) {
  const std::string text =
      Edited(kPaddedHead, {{"ottr::ReluGradBiasGrad(%dh, %h)", "ottr::ReluGradBiasGrad(%dh, %x1)"},
                           {"  input %labels", "  input %x1 : f32[7,24]\n  input %labels"}});
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after) << text;
  EXPECT_TRUE(r.changed) << r.remarks;
  EXPECT_EQ(CountOps(*r.after, "ReluGradBiasGrad"), 1);
  EXPECT_TRUE(absl::StrContains(r.remarks, "(the first 10 of 12 classes, dx without an activation)")) << r.remarks;
  ExpectSameBits(r, text);
}

// 3000 features: the weight and four rows of x fit (10 + 4) · 3000 · 4 bytes, but not with four
// rows of column sums as well ((10 + 8) · 3000 · 4 > 200 KB).
TEST(FuseLinearSceTest, DeclinesColumnSumsTooLargeForTheKernel) {
  ExpectDeclines(ReplacedAll(kPaddedHead, "24", "3000"),
                 "the weight of 10 x 3000 does not fit the fused kernel's 204800 bytes of shared memory (with 4 rows "
                 "of x and of column sums)");
}

// The models/mlp step in TF32 (the drelu data gradients of a TF32 step): the classifier, the loss
// and the last data gradient become one node, and one training step computes the same bits as
// without the pass (loss, parameters, Adam state).
TEST(FuseLinearSceTrainingTest, Tf32MlpStepFusesTheClassifierHead) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kTf32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(CountOps(**step, "LinearSoftmaxCrossEntropyWithGrad"), 1);
  EXPECT_EQ(CountOps(**step, "SoftmaxCrossEntropyWithGrad"), 0);
  auto plan = passes::PlanMemory(**step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(**step, *plan).ok());
  passes::TrainingSpec without = spec;
  without.disabled_passes = {"fuse-linear-sce"};
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_EQ(CountOps(*b.step, "LinearSoftmaxCrossEntropyWithGrad"), 0);
  EXPECT_EQ(CountOps(*a.step, "FusedGemm") + 2, CountOps(*b.step, "FusedGemm"));
  testing::ExpectSameStepOutputs(a, b);
}

// The same model as a large TF32 step has it (the small MLP at batch 8192: a padded classifier,
// RELU_BIAS without masks, ReLU backward with the bias gradients), made at batch 16 by padding
// every GEMM and leaving out the DRELU epilogues: the classifier, the loss, its data gradient and
// the ReLU backward of the last hidden layer become one node, with the same bits.
TEST(FuseLinearSceTrainingTest, PaddedTf32MlpStepFusesTheHeadAndItsReluBackward) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kTf32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.expose_gradients = true;
  spec.pad_tf32_gemms = true;
  spec.pad_gemm_min_macs = 0;
  spec.pad_gemm_min_rows = 0;
  spec.disabled_passes = {"fuse-gemm-dact-bgrad"};
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(CountOps(**step, "LinearSoftmaxCrossEntropyWithGrad"), 1);
  for (const ir::Node* n : (*step)->nodes()) {
    if (n->op_type() != "LinearSoftmaxCrossEntropyWithGrad") continue;
    EXPECT_EQ(n->GetInt("classes", 0), 10);
    EXPECT_EQ(n->GetInt("relu_x", 0), 1);
    EXPECT_EQ(n->num_outputs(), 4);
  }
  passes::TrainingSpec without = spec;
  without.disabled_passes.insert("fuse-linear-sce");
  // fuse-linear-relu-grad would take the head's backward instead (tests/passes/fuse_linear_relu_grad_test.cc).
  without.disabled_passes.insert("fuse-linear-relu-grad");
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_EQ(CountOps(*b.step, "LinearSoftmaxCrossEntropyWithGrad"), 0);
  EXPECT_EQ(CountOps(*a.step, "ReluGradBiasGrad") + 1, CountOps(*b.step, "ReluGradBiasGrad"));
  testing::ExpectSameStepOutputs(a, b);
}

}  // namespace
}  // namespace ottr
