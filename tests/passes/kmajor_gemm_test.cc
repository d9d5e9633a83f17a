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

}  // namespace
}  // namespace ottr
