// kmajor-gemm-operands (passes/kmajor_gemm.cc): IR text in, the pass, the printed IR compared with
// the expected; the cases where it must not fire (small GEMMs, 16-bit operands, an operand already
// K-major, an epilogue that reads an auxiliary buffer); and the same numbers before and after on
// the CPU reference.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "passes/fusion_passes.h"
#include "tests/passes/pass_test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::PassRun;

PassRun RunKMajor(const std::string& text) {
  return testing::RunPassOnText(passes::CreateKMajorGemmOperandsPass(), text);
}

// Transposing an operand moves values without rounding; the CPU GEMM may still add the k terms
// in another order with the other packing, so the outputs agree to float32 summation error over
// k = 1024 terms of magnitude < 1 (random inputs in [-1, 1)): relative 1e-5 is ~80 ulps.
constexpr double kRtol = 1e-5;

// A weight gradient with its bias gradient (bgrada sums A = dY, so B = X is the one transposed)
// and a plain one of the same X: X is transposed once for both.
TEST(KMajorGemmOperandsTest, TransposesTheUnsummedOperandOnce) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[1024,256]
  input %x : f32[1024,4096]
  %dw : f32[256,4096], %db : f32[256] = ottr::FusedGemm(%dy, %x) {epilogue = "bgrada", transA = 1} origin "fc/grad"
  %dw2 : f32[256,4096] = Gemm(%dy, %x) {transA = 1, alpha = 0.5} origin "fc2/grad"
  output %dw
  output %db
  output %dw2
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.kmajor : f32[4096,1024] = Transpose(%x) {perm = ints[1, 0]} origin \"fc/grad\"\n"
            "  %dw : f32[256,4096], %db : f32[256] = ottr::FusedGemm(%dy, %x.kmajor) {epilogue = \"bgrada\", transA = 1, "
            "transB = 1} origin \"fc/grad\"\n"
            "  %dw2 : f32[256,4096] = Gemm(%dy, %x.kmajor) {alpha = 0.5, transA = 1, transB = 1} origin \"fc2/grad\"\n"
            "  output %dw, %db, %dw2\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "transposed B (x) of node 'fc/grad' (ottr.FusedGemm)")) << r.remarks;
  testing::ExpectSameOutputs(r, 5, kRtol);
}

// Without an epilogue the smaller operand is transposed: here A (dY, 1024 x 256 against X's
// 1024 x 4096), which leaves the layout of a data gradient (transA = transB = 0).
TEST(KMajorGemmOperandsTest, TransposesTheSmallerOperandOfAPlainGemm) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[1024,256]
  input %x : f32[1024,4096]
  %dw : f32[256,4096] = Gemm(%dy, %x) {transA = 1} origin "fc/grad"
  output %dw
})");
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %dy.kmajor : f32[256,1024] = Transpose(%dy) {perm = ints[1, 0]} origin \"fc/grad\"\n"
            "  %dw : f32[256,4096] = Gemm(%dy.kmajor, %x) {transA = 0} origin \"fc/grad\"\n"
            "  output %dw\n");
  testing::ExpectSameOutputs(r, 5, kRtol);
}

TEST(KMajorGemmOperandsTest, DeclinesSmallSixteenBitAndAuxGemms) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[128,512]
  input %x : f32[128,784]
  input %dyh : bf16[1024,256]
  input %xh : bf16[1024,4096]
  input %a : f32[1024,4096]
  input %w : f32[256,4096]
  input %mask : u8[4096,32]
  input %p : f32[1024,256]
  %small : f32[512,784] = Gemm(%dy, %x) {transA = 1} origin "small"
  %half : f32[256,4096] = ottr::FusedGemm(%dyh, %xh) {epilogue = "none", output_type = 1, transA = 1} origin "half"
  %kmajor : f32[1024,256] = Gemm(%a, %w) {transB = 1} origin "forward"
  %aux : f32[4096,256] = ottr::FusedGemm(%a, %p, _, %mask) {epilogue = "drelu", transA = 1} origin "aux"
  output %small
  output %half
  output %kmajor
  output %aux
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'small' (Gemm): GEMM 512x784x128 is too small")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'half' (ottr.FusedGemm): operands are bf16")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'aux' (ottr.FusedGemm): epilogue drelu reads its auxiliary"))
      << r.remarks;
  // A GEMM with a K-major operand is not a candidate: no remark.
  EXPECT_FALSE(absl::StrContains(r.remarks, "forward")) << r.remarks;
}

// A tall data gradient dX = dY·W (8192 x 512 x 512: m >= 4·max(k, n), 2.1e9 multiply-adds) gets
// its weight transposed (B K-major; its epilogue stays); a square one (2048³: not tall) and a small
// tall one (8192 x 512 x 64: 2.7e8 multiply-adds) are declined with the reason.
TEST(KMajorGemmOperandsTest, TransposesTheWeightOfATallDataGradient) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8192,512]
  input %w : f32[512,512]
  input %mask : u8[8192,64]
  %dx : f32[8192,512], %db : f32[512] = ottr::FusedGemm(%dy, %w, _, %mask) {epilogue = "drelu_bgrad"} origin "fc/grad"
  output %dx
  output %db
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %w.kmajor : f32[512,512] = Transpose(%w) {perm = ints[1, 0]} origin \"fc/grad\"\n"
            "  %dx : f32[8192,512], %db : f32[512] = ottr::FusedGemm(%dy, %w.kmajor, _, %mask) {epilogue = "
            "\"drelu_bgrad\", transB = 1} origin \"fc/grad\"\n"
            "  output %dx, %db\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "transposed B (w) of node 'fc/grad' (ottr.FusedGemm): B was MN-major in a "
                                           "tall product"))
      << r.remarks;
  PassRun d = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8192,512]
  input %w : f32[512,512]
  input %dz : f32[2048,2048]
  input %v : f32[2048,2048]
  input %dq : f32[8192,64]
  input %u : f32[64,512]
  %dx : f32[8192,512] = Gemm(%dy, %w) origin "tall"
  %square : f32[2048,2048] = Gemm(%dz, %v) origin "square"
  %small : f32[8192,512] = Gemm(%dq, %u) origin "small"
  output %dx
  output %square
  output %small
})");
  ASSERT_TRUE(d.after);
  EXPECT_TRUE(d.changed);
  EXPECT_TRUE(absl::StrContains(IrBody(*d.after), "Gemm(%dy, %w.kmajor) {transB = 1}")) << IrBody(*d.after);
  EXPECT_TRUE(absl::StrContains(d.remarks, "declined node 'square' (Gemm): GEMM 2048x2048x2048 with an MN-major B: not "
                                           "tall"))
      << d.remarks;
  EXPECT_TRUE(absl::StrContains(d.remarks, "declined node 'small' (Gemm): GEMM 8192x512x64 with an MN-major B"))
      << d.remarks;
}

// The weight gradient of a first layer, dW = dYᵀ·X with X a graph input and dY made from another
// input: X exists earlier in the step (depth 0 against 1), so X is transposed, although it is the
// larger operand (the smaller-operand rule would take dY).
TEST(KMajorGemmOperandsTest, TransposesTheOperandMadeEarlier) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %g : f32[2048,1024]
  input %x : f32[2048,2048]
  %dy : f32[2048,1024] = Relu(%g) origin "relu/grad"
  %dw : f32[1024,2048] = Gemm(%dy, %x) {transA = 1} origin "fc/grad"
  output %dw
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "Gemm(%dy, %x.kmajor) {transA = 1, transB = 1}")) << IrBody(*r.after);
  testing::ExpectSameOutputs(r, 5, kRtol);
}

// A weight gradient whose dY is the ReLU backward's dX, read by nothing else: the ReLU backward
// writes dXT as its third output instead of a Transpose node, and the GEMM reads it K-major; dX
// itself is left unread. The same dY with a second reader (a data gradient) gets the Transpose as
// before (of X: made earlier), and a GEMM below the size rule is declined even with a foldable dY.
TEST(KMajorGemmOperandsTest, FoldsTheTransposeIntoTheReluBackward) {
  PassRun r = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %g : f32[1024,256]
  input %h : f32[1024,256]
  input %x : f32[1024,4096]
  %dz : f32[1024,256], %db : f32[256] = ottr::ReluGradBiasGrad(%g, %h) origin "relu/grad"
  %dw : f32[256,4096] = Gemm(%dz, %x) {transA = 1} origin "fc/grad"
  output %dw
  output %db
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dz : f32[1024,256], %db : f32[256], %dz.kmajor : f32[256,1024] = ottr::ReluGradBiasGrad(%g, %h) origin "
            "\"relu/grad\"\n"
            "  %dw : f32[256,4096] = Gemm(%dz.kmajor, %x) {transA = 0} origin \"fc/grad\"\n"
            "  output %dw, %db\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "transposed A (dz) of node 'fc/grad' (Gemm) in its ReLU backward"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 5, kRtol);

  PassRun d = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %g : f32[1024,256]
  input %h : f32[1024,256]
  input %x : f32[1024,4096]
  input %w : f32[256,4096]
  input %g2 : f32[512,256]
  input %h2 : f32[512,256]
  input %x2 : f32[512,128]
  %dz : f32[1024,256], %db : f32[256] = ottr::ReluGradBiasGrad(%g, %h) origin "relu/grad"
  %dw : f32[256,4096] = Gemm(%dz, %x) {transA = 1} origin "fc/grad"
  %dx : f32[1024,4096] = Gemm(%dz, %w) origin "fc/dx"
  %dz2 : f32[512,256], %db2 : f32[256] = ottr::ReluGradBiasGrad(%g2, %h2) origin "relu2/grad"
  %dw2 : f32[256,128] = Gemm(%dz2, %x2) {transA = 1} origin "fc2/grad"
  output %dw
  output %db
  output %dx
  output %dw2
  output %db2
})");
  ASSERT_TRUE(d.after);
  EXPECT_TRUE(d.changed);
  const std::string body = IrBody(*d.after);
  EXPECT_TRUE(absl::StrContains(body, "Gemm(%dz, %x.kmajor) {transA = 1, transB = 1}")) << body;
  EXPECT_FALSE(absl::StrContains(body, "dz2.kmajor")) << body;
  EXPECT_TRUE(absl::StrContains(d.remarks, "declined node 'fc2/grad' (Gemm): GEMM 256x128x512 is too small")) << d.remarks;

  // Below 2^20 outputs with a long k: the fold (no bytes of its own) is taken, a Transpose is not.
  PassRun f = RunKMajor(R"(graph "g" {
  opset ai.onnx 17
  input %g : f32[2048,256]
  input %h : f32[2048,256]
  input %x : f32[2048,128]
  input %y : f32[2048,256]
  %dz : f32[2048,256], %db : f32[256] = ottr::ReluGradBiasGrad(%g, %h) origin "relu/grad"
  %dw : f32[256,128] = Gemm(%dz, %x) {transA = 1} origin "fc/grad"
  %dv : f32[256,128] = Gemm(%y, %x) {transA = 1} origin "plain/grad"
  output %dw
  output %db
  output %dv
})");
  ASSERT_TRUE(f.after);
  const std::string fbody = IrBody(*f.after);
  EXPECT_TRUE(absl::StrContains(fbody, "%dw : f32[256,128] = Gemm(%dz.kmajor, %x) {transA = 0}")) << fbody;
  EXPECT_FALSE(absl::StrContains(fbody, "Transpose")) << fbody;
  EXPECT_TRUE(absl::StrContains(f.remarks, "declined node 'plain/grad' (Gemm): GEMM 256x128x2048 is too small"))
      << f.remarks;
  testing::ExpectSameOutputs(f, 7, kRtol);
}

}  // namespace
}  // namespace ottr
