// pad-gemm-dims (passes/pad_gemm_dims.cc): IR text in, the printed IR and remark out, the graph
// run before and after on the CPU reference (the padding is zeros: the same products), the cases
// it must not fire on, and a bf16 training step of models/mlp with its 10-wide last layer padded
// to 16 against the same step unpadded.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

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

using testing::IrBody;
using testing::PassRun;
using testing::RunOnCpu;

// Uniform [-1, 1) bf16 feeds for every input of `g` (all bf16 here).
runtime::TensorMap Bf16Feeds(const ir::Graph& g, uint64_t seed) {
  runtime::TensorMap feeds;
  for (const ir::Value* in : g.inputs()) feeds[in->name()] = testing::RandomBFloat16(ir::StaticDims(*in->type().shape), seed++);
  return feeds;
}

// The CPU GEMM widens to float and rounds once; zero terms add nothing: the same bits.
void ExpectSameBf16Outputs(const PassRun& r, uint64_t seed) {
  testing::ExpectSameOutputsOn(r, Bf16Feeds(*r.before, seed));
}

constexpr char kGemm[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : bf16[8,20]
  input %w : bf16[10,20]
  input %b : bf16[10]
  %h : bf16[8,10] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  output %h
})";

TEST(PadGemmDimsTest, PadsKAndNAndSlicesTheProductBack) {
  PassRun r = testing::RunPassOnText(passes::CreatePadGemmDimsPass(0, 0), kGemm);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.pads : i64[4] = Constant() {value = tensor<i64[4] [0, 0, 0, 4]>} origin \"fc\"\n"
            "  %x.pad : bf16[8,24] = Pad(%x, %x.pads) {mode = \"constant\"} origin \"fc\"\n"
            "  %w.pads : i64[4] = Constant() {value = tensor<i64[4] [0, 0, 6, 4]>} origin \"fc\"\n"
            "  %w.pad : bf16[16,24] = Pad(%w, %w.pads) {mode = \"constant\"} origin \"fc\"\n"
            "  %b.pads : i64[2] = Constant() {value = tensor<i64[2] [0, 6]>} origin \"fc\"\n"
            "  %b.pad : bf16[16] = Pad(%b, %b.pads) {mode = \"constant\"} origin \"fc\"\n"
            "  %h.pad : bf16[8,16] = Gemm(%x.pad, %w.pad, %b.pad) {transB = 1} origin \"fc\"\n"
            "  %h.starts : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin \"fc\"\n"
            "  %h.ends : i64[1] = Constant() {value = tensor<i64[1] [10]>} origin \"fc\"\n"
            "  %h.axes : i64[1] = Constant() {value = tensor<i64[1] [1]>} origin \"fc\"\n"
            "  %h : bf16[8,10] = Slice(%h.pad, %h.starts, %h.ends, %h.axes) origin \"fc\"\n"
            "  output %h\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "pad-gemm-dims: padded node 'fc' (Gemm) (8x10x20): k 20 -> 24, n 10 -> 16 "
                                           "with zeros, the product sliced back"))
      << r.remarks;
  ExpectSameBf16Outputs(r, 3);
}

TEST(PadGemmDimsTest, PadsOnlyKOfAMatMul) {
  PassRun r = testing::RunPassOnText(passes::CreatePadGemmDimsPass(0, 0), R"(graph "g" {
  opset ai.onnx 17
  input %x : bf16[8,12]
  input %w : bf16[12,16]
  %h : bf16[8,16] = MatMul(%x, %w) origin "mm"
  output %h
})");
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.pads : i64[4] = Constant() {value = tensor<i64[4] [0, 0, 0, 4]>} origin \"mm\"\n"
            "  %x.pad : bf16[8,16] = Pad(%x, %x.pads) {mode = \"constant\"} origin \"mm\"\n"
            "  %w.pads : i64[4] = Constant() {value = tensor<i64[4] [0, 0, 4, 0]>} origin \"mm\"\n"
            "  %w.pad : bf16[16,16] = Pad(%w, %w.pads) {mode = \"constant\"} origin \"mm\"\n"
            "  %h : bf16[8,16] = MatMul(%x.pad, %w.pad) origin \"mm\"\n"
            "  output %h\n");
  ExpectSameBf16Outputs(r, 5);
}

TEST(PadGemmDimsTest, DeclinesSmallGemmsAndLeavesOthersAlone) {
  // The default thresholds: an 8x10x20 GEMM has too few rows to pay for the weight's copies.
  PassRun small = testing::RunPassOnText(passes::CreatePadGemmDimsPass(), kGemm);
  ASSERT_TRUE(small.after);
  EXPECT_FALSE(small.changed);
  EXPECT_EQ(IrBody(*small.after), IrBody(*small.before));
  EXPECT_TRUE(absl::StrContains(small.remarks, "declined node 'fc' (Gemm): GEMM 8x10x20 (bf16, k = 20, n = 10: not "
                                               "both multiples of 8) has 8 rows (< 512)"))
      << small.remarks;
  // Without the rows bound, the multiply-add bound declines it.
  PassRun few = testing::RunPassOnText(passes::CreatePadGemmDimsPass(1e4, 0), kGemm);
  ASSERT_TRUE(few.after);
  EXPECT_FALSE(few.changed);
  EXPECT_TRUE(absl::StrContains(few.remarks, "has 1600 multiply-adds (< 10000)")) << few.remarks;
  // Float32 (without float32 = true) and aligned 16-bit GEMMs are not candidates: no change and no
  // remark.
  for (const char* text : {R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,20]
  input %w : f32[10,20]
  %h : f32[8,10] = Gemm(%x, %w) {transB = 1} origin "fc"
  output %h
})",
                           R"(graph "g" {
  opset ai.onnx 17
  input %x : bf16[8,24]
  input %w : bf16[16,24]
  %h : bf16[8,16] = Gemm(%x, %w) {transB = 1} origin "fc"
  output %h
})"}) {
    PassRun r = testing::RunPassOnText(passes::CreatePadGemmDimsPass(0, 0), text);
    ASSERT_TRUE(r.after);
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(r.remarks, "");
  }
}

// With float32 = true (TF32 steps on the GPU) a float32 GEMM is padded to 16-byte rows: 4
// elements, so k 20 stays and n 10 -> 12; the product is the same (zeros added, the padded
// columns sliced away), to float32 rounding of the other summation order.
TEST(PadGemmDimsTest, PadsFloat32GemmsToFourElementsWhenAsked) {
  const std::string text = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,20]
  input %w : f32[10,20]
  input %b : f32[10]
  %h : f32[8,10] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  output %h
})";
  PassRun r = testing::RunPassOnText(passes::CreatePadGemmDimsPass(0, 0, /*float32=*/true), text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%w.pad : f32[12,20] = Pad(%w, %w.pads)")) << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%h.pad : f32[8,12] = Gemm(%x, %w.pad, %b.pad)")) << IrBody(*r.after);
  EXPECT_FALSE(absl::StrContains(IrBody(*r.after), "%x.pad")) << "k = 20 is a multiple of 4";
  EXPECT_TRUE(absl::StrContains(r.remarks, "n 10 -> 12")) << r.remarks;
  testing::ExpectSameOutputs(r, 9, 1e-6);
  PassRun off = testing::RunPassOnText(passes::CreatePadGemmDimsPass(0, 0, /*float32=*/false), text);
  ASSERT_TRUE(off.after);
  EXPECT_FALSE(off.changed);
}

// models/mlp in bf16 with every misaligned GEMM padded (threshold 0): fc3's n = 10 -> 16, so its
// forward, dX (k = 16) and dW (16 rows, cropped) run on aligned shapes. The step plans, and its
// loss and gradients match the unpadded step: the products are the same, but the padded logits
// and fc3 gradients pass through bf16 (the Slice/Pad stand between the GEMM and the Cast that
// fold-gemm-casts would fold), so the bound is bf16's u = 2^-8 (relative on the loss, normwise
// on each gradient).
TEST(PadGemmDimsTrainingTest, Bf16MlpStepWithThePaddedLastLayer) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kBf16;
  spec.fuse_epilogues = true;
  spec.narrow_exact_ops = true;
  spec.expose_gradients = true;
  spec.pad_gemm_dims = false;
  passes::TrainingSpec padded = spec;
  padded.pad_gemm_dims = true;
  padded.pad_gemm_min_macs = 0;
  padded.pad_gemm_min_rows = 0;
  std::ostringstream remarks;
  passes::PassManagerOptions o;
  o.remarks = &remarks;
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, padded, 1e-3f, o);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, spec, 1e-3f);
  ASSERT_TRUE(a.step && b.step);
  EXPECT_TRUE(absl::StrContains(remarks.str(), "pad-gemm-dims: padded node 'fc3' (Gemm) (16x10x512): n 10 -> 16"))
      << remarks.str();
  auto plan = passes::PlanMemory(*a.step);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(*a.step, *plan).ok());
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  const double u = std::ldexp(1.0, -8);
  const double loss = b.outputs[0].GetAsDouble(0);
  EXPECT_LE(std::abs(a.outputs[0].GetAsDouble(0) - loss), u * std::abs(loss));
  for (size_t i = 1; i < a.outputs.size(); ++i) {
    ASSERT_EQ(a.outputs[i].dims(), b.outputs[i].dims()) << b.step->outputs()[i]->name();
    EXPECT_LE(testing::NormwiseRelativeError(a.outputs[i], b.outputs[i]), u) << b.step->outputs()[i]->name();
  }
}

}  // namespace
}  // namespace ottr
