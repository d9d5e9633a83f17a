// fuse-linear-relu-grad (passes/fuse_linear_relu_grad.cc) and the op it makes, ottr::LinearReluGrad
// (ir/ops/fused_ops.cc, CPU kernel in runtime/cpu/activation_grad_kernels.cc): IR text in, the
// printed IR and remark out, the graph run before and after on the CPU reference; the cases where
// it must not fire; the small MLP's training step with and without it.
//
// Numbers: the unfused graph's data-gradient Gemm sums its K = 12 products in float32 and the
// weight-gradient Gemm its R products in float32 (the CPU reference's GEMM); LinearReluGrad sums
// everything in double and rounds once. So the two agree to float32 summation error: for the sums
// of the tests, under 40 terms of magnitude <= 1, at most 40 · 2^-24 · Σ|terms| <= 1e-4 absolute
// on values up to ~10; AllClose(1e-5, 1e-5) holds for these inputs, where a wrong column, row or
// mask (a missing term of magnitude ~0.3) is far outside it.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
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

PassRun RunPass(const std::string& text) {
  return testing::RunPassOnText(passes::CreateFuseLinearReluGradPass(), text);
}

// The head's backward as the TF32 pipeline leaves it at large batches: the data gradient through
// the last hidden layer's ReLU (with that layer's bias gradient) and the head's weight gradient
// with its bias gradient (bgrada), both reading dZ.
constexpr char kHead[] = R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,12]
  input %w : f32[12,24]
  input %y : f32[40,24]
  %dy : f32[40,24] = Gemm(%dz, %w) origin "fc2/grad"
  %dh : f32[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  %dw : f32[12,24], %dbz : f32[12] = ottr::FusedGemm(%dz, %y) {epilogue = "bgrada", transA = 1} origin "fc2/grad"
  output %dh
  output %b.grad
  output %dw
  output %dbz
})";

TEST(FuseLinearReluGradTest, FusesTheHeadBackwardWithItsWeightGradient) {
  PassRun r = RunPass(kHead);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : f32[40,24], %b.grad : f32[24], %dw : f32[12,24], %dbz : f32[12] = ottr::LinearReluGrad(%dz, %w, "
            "%y) origin \"relu1/grad\"\n"
            "  output %dh, %b.grad, %dw, %dbz\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-linear-relu-grad: fused node 'fc2/grad' (Gemm) + node 'relu1/grad' "
                                           "(ottr.ReluGradBiasGrad) + node 'fc2/grad' (ottr.FusedGemm) -> "
                                           "ottr::LinearReluGrad (K = 12, with the weight gradient)"))
      << r.remarks;
  // Random dZ, W, Y in [-1, 1): about half of Y passes the ReLU.
  testing::ExpectSameOutputs(r, 11, 1e-5);
}

TEST(FuseLinearReluGradTest, TakesAPlainWeightGradientOrNone) {
  std::string plain = kHead;
  const std::string from =
      "  %dw : f32[12,24], %dbz : f32[12] = ottr::FusedGemm(%dz, %y) {epilogue = \"bgrada\", transA = 1} origin "
      "\"fc2/grad\"\n";
  ASSERT_NE(plain.find(from), std::string::npos);
  plain.replace(plain.find(from), from.size(), "  %dw : f32[12,24] = Gemm(%dz, %y) {transA = 1} origin \"fc2/grad\"\n");
  plain.replace(plain.find("  output %dbz\n"), 14, "");
  PassRun r = RunPass(plain);
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : f32[40,24], %b.grad : f32[24], %dw : f32[12,24], %dw.bias.fused : f32[12] = "
            "ottr::LinearReluGrad(%dz, %w, %y) origin \"relu1/grad\"\n"
            "  output %dh, %b.grad, %dw\n");
  testing::ExpectSameOutputs(r, 12, 1e-5);

  std::string none = plain;
  none.replace(none.find("  %dw : f32[12,24] = Gemm"), std::string("  %dw : f32[12,24] = Gemm(%dz, %y) {transA = 1} origin \"fc2/grad\"\n").size(), "");
  none.replace(none.find("  output %dw\n"), 13, "");
  PassRun n = RunPass(none);
  ASSERT_TRUE(n.after);
  EXPECT_EQ(IrBody(*n.after),
            "  %dh : f32[40,24], %b.grad : f32[24] = ottr::LinearReluGrad(%dz, %w, %y) origin \"relu1/grad\"\n"
            "  output %dh, %b.grad\n");
  EXPECT_TRUE(absl::StrContains(n.remarks, "-> ottr::LinearReluGrad (K = 12)")) << n.remarks;
  testing::ExpectSameOutputs(n, 13, 1e-5);
}

struct Decline {
  const char* name;
  std::string text;
  const char* reason;
};

// kHead with `from` replaced by `to`.
std::string Edit(const std::string& from, const std::string& to) {
  std::string s = kHead;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// A classifier padded from 10 to 12 classes (pad-gemm-dims): its weight and bias gradients are
// sliced back to 10 rows by Pads with negative end pads. The node writes those rows itself and the
// Pads go; the values are the same (the rows dropped are rows the Pads dropped). When the two Pads
// keep different rows, or a Pad reads something else too, nothing is folded.
TEST(FuseLinearReluGradTest, FoldsTheSlicesOfAPaddedClassifier) {
  const std::string sliced = Edit("  output %dh\n", R"(  %pw : i64[4] = Constant() {value = tensor<i64[4] [0, 0, -2, 0]>}
  %pb : i64[2] = Constant() {value = tensor<i64[2] [0, -2]>}
  %dw10 : f32[10,24] = Pad(%dw, %pw) {mode = "constant"} origin "fc2/grad"
  %dbz10 : f32[10] = Pad(%dbz, %pb) {mode = "constant"} origin "fc2/grad"
  output %dh
  output %dw10
  output %dbz10
)");
  std::string text = sliced;
  text.replace(text.find("  output %dw\n"), 13, "");
  text.replace(text.find("  output %dbz\n"), 14, "");
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : f32[40,24], %b.grad : f32[24], %dw10 : f32[10,24], %dbz10 : f32[10] = ottr::LinearReluGrad(%dz, "
            "%w, %y) {weight_rows = 10} origin \"relu1/grad\"\n"
            "  output %dh, %dw10, %dbz10, %b.grad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "(K = 12, with the weight gradient, its first 10 rows: the slicing Pads "
                                           "folded)"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 14, 1e-5);

  // dBz's Pad keeps 11 rows: both Pads stay, the node writes all 12 rows.
  std::string mismatched = text;
  mismatched.replace(mismatched.find("[0, -2]>}"), 9, "[0, -1]>}");
  mismatched.replace(mismatched.find("%dbz10 : f32[10]"), 16, "%dbz10 : f32[11]");
  PassRun m = RunPass(mismatched);
  ASSERT_TRUE(m.after);
  EXPECT_TRUE(m.changed);
  EXPECT_EQ(CountOps(*m.after, "Pad"), 2);
  EXPECT_TRUE(absl::StrContains(m.remarks, "(K = 12, with the weight gradient)")) << m.remarks;
  testing::ExpectSameOutputs(m, 15, 1e-5);
}

TEST(FuseLinearReluGradTest, DeclinesWhatItCannotFuse) {
  const std::string dgrad = "  %dy : f32[40,24] = Gemm(%dz, %w) origin \"fc2/grad\"\n";
  const Decline cases[] = {
      {"dY read twice", Edit("  output %dh\n", "  output %dh\n  output %dy\n"), "dy has other readers"},
      {"W transposed", R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,12]
  input %wt : f32[24,12]
  input %y : f32[40,24]
  %dy : f32[40,24] = Gemm(%dz, %wt) {transB = 1} origin "fc2/grad"
  %dh : f32[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  output %dh
  output %b.grad
})",
       "dy is not a product dZ · W (Gemm with no transposes, alpha or C)"},
      {"scaled", Edit(dgrad, "  %dy : f32[40,24] = Gemm(%dz, %w) {alpha = 0.5} origin \"fc2/grad\"\n"),
       "dy is not a product dZ · W (Gemm with no transposes, alpha or C)"},
      {"dY an input", R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[40,24]
  input %y : f32[40,24]
  %dh : f32[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  output %dh
  output %b.grad
})",
       "dy is not a product dZ · W (Gemm with no transposes, alpha or C)"},
      {"K above 16", R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,20]
  input %w : f32[20,24]
  input %y : f32[40,24]
  %dy : f32[40,24] = Gemm(%dz, %w) origin "fc2/grad"
  %dh : f32[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  output %dh
  output %b.grad
})",
       "K = 20 > 16"},
      {"bf16", R"(graph "g" {
  opset ai.onnx 17
  input %dz : bf16[40,12]
  input %w : bf16[12,24]
  input %y : bf16[40,24]
  %dy : bf16[40,24] = Gemm(%dz, %w) origin "fc2/grad"
  %dh : bf16[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) {bias_type = 1} origin "relu1/grad"
  output %dh
  output %b.grad
})",
       "dZ bf16[40,12], W bf16[12,24] and Y bf16[40,24] are not all static f32 matrices"},
      {"dXT written", R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,12]
  input %w : f32[12,24]
  input %y : f32[40,24]
  %dy : f32[40,24] = Gemm(%dz, %w) origin "fc2/grad"
  %dh : f32[40,24], %b.grad : f32[24], %dht : f32[24,40] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  output %dh
  output %b.grad
  output %dht
})",
       "it writes dXᵀ too"},
  };
  for (const Decline& c : cases) {
    SCOPED_TRACE(c.name);
    PassRun r = RunPass(c.text);
    ASSERT_TRUE(r.after);
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
    EXPECT_TRUE(absl::StrContains(
        r.remarks, absl::StrCat("declined node 'relu1/grad' (ottr.ReluGradBiasGrad): ", c.reason)))
        << r.remarks;
  }
  // A weight gradient of another operand (dZᵀ·X, X not the ReLU's Y) stays: only the data gradient is taken.
  PassRun other = RunPass(R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,12]
  input %w : f32[12,24]
  input %y : f32[40,24]
  input %x : f32[40,24]
  %dy : f32[40,24] = Gemm(%dz, %w) origin "fc2/grad"
  %dh : f32[40,24], %b.grad : f32[24] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu1/grad"
  %dw : f32[12,24] = Gemm(%dz, %x) {transA = 1} origin "fc2/grad"
  output %dh
  output %b.grad
  output %dw
})");
  ASSERT_TRUE(other.after);
  EXPECT_EQ(CountOps(*other.after, "Gemm"), 1);
  EXPECT_EQ(CountOps(*other.after, "LinearReluGrad"), 1);
  testing::ExpectSameOutputs(other, 14, 1e-5);
}

TEST(LinearReluGradOpTest, ShapeInferenceRejectsBadOperands) {
  const struct {
    const char* node;
    const char* error;
  } cases[] = {
      {"%a : f32[40,24], %b : f32[24] = ottr::LinearReluGrad(%dz, %w2, %y)", "must be static 2-D f32"},
      {"%a : f32[40,24], %b : f32[24], %c : f32[12,24] = ottr::LinearReluGrad(%dz, %w, %y)", "2 or 4 outputs"},
      {"%a : f32[40,24], %b : f32[24] = ottr::LinearReluGrad(%dz, %w, %yb)", "must be static 2-D f32"},
      {"%a : f32[40,24], %b : f32[24], %c : f32[13,24], %d : f32[13] = ottr::LinearReluGrad(%dz, %w, %y) "
       "{weight_rows = 13}",
       "weight_rows = 13 must be 1 to K = 12"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.node);
    const std::string text = absl::StrCat(R"(graph "g" {
  opset ai.onnx 17
  input %dz : f32[40,12]
  input %w : f32[12,24]
  input %w2 : f32[11,24]
  input %y : f32[40,24]
  input %yb : bf16[40,24]
  )",
                                          c.node, R"( origin "n"
  output %a
})");
    auto g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), c.error)) << s;
  }
}

// The small MLP (784-512-512-10, classes padded to 12) at batch 64 with fuse-linear-sce off, so
// the head's backward has the form of large batches: the pass takes fc3's data and weight
// gradients and fc2's ReLU backward; the step's loss and every updated parameter and state agree
// with the step without the pass to float32 summation error (normwise, 1e-5), and the plan holds.
TEST(FuseLinearReluGradTrainingTest, MlpStepMatchesTheStepWithoutIt) {
  const int64_t batch = 64;
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
  spec.disabled_passes = {"fuse-linear-sce", "fuse-gemm-dact-bgrad"};
  passes::PassManagerOptions o;
  std::ostringstream remarks;
  o.remarks = &remarks;
  testing::ModelStep with = testing::RunStepOnCpu(**forward, {batch, 784}, spec, 1e-3f, o);
  ASSERT_TRUE(with.step);
  EXPECT_EQ(CountOps(*with.step, "LinearReluGrad"), 1) << remarks.str();
  // The padded classifier's gradient slices are folded into the node: two Pads fewer.
  EXPECT_TRUE(absl::StrContains(remarks.str(), "with the weight gradient, its first 10 rows: the slicing Pads folded)"))
      << remarks.str();
  auto plan = passes::PlanMemory(*with.step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(*with.step, *plan).ok());
  spec.disabled_passes.insert("fuse-linear-relu-grad");
  testing::ModelStep without = testing::RunStepOnCpu(**forward, {batch, 784}, spec, 1e-3f);
  ASSERT_TRUE(without.step);
  EXPECT_EQ(CountOps(*without.step, "LinearReluGrad"), 0);
  EXPECT_EQ(CountOps(*without.step, "Pad") - CountOps(*with.step, "Pad"), 2);
  ASSERT_EQ(with.outputs.size(), without.outputs.size());
  ASSERT_GT(with.outputs.size(), 1u);
  for (size_t i = 0; i < with.outputs.size(); ++i) {
    const std::string& name = with.step->outputs()[i]->name();
    ASSERT_EQ(name, without.step->outputs()[i]->name());
    EXPECT_LE(testing::NormwiseRelativeError(with.outputs[i], without.outputs[i]), 1e-5) << name;
  }
}

}  // namespace
}  // namespace ottr
