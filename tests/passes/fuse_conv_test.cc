// fuse-conv-activation and fuse-maxpool-relu-grad (passes/fuse_conv.cc): IR text in, the pass,
// the printed IR and remarks compared with the expected; the graph run before and after on the
// CPU reference, where the outputs are the same bits (the ReLU and the mask are the same selects,
// applied inside the fused kernel). Where a pass must not fire the IR is unchanged and the remark
// says why.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "passes/fusion_passes.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::PassRun;

PassRun RunPass(std::unique_ptr<passes::Pass> pass, const std::string& text) {
  return testing::RunPassOnText(std::move(pass), text);
}

// Random inputs in [-1, 1) (half the ReLU inputs negative), the same outputs bit for bit.
void ExpectSameBits(const PassRun& r) {
  const runtime::TensorMap feeds = testing::RandomFeeds(*r.before, 11);
  auto run = [&](const ir::Graph& g) { return testing::RunOnCpu(g, feeds); };
  const std::vector<ir::Tensor> want = run(*r.before), got = run(*r.after);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_FALSE(want.empty());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(got[i].BitwiseEquals(want[i])) << "output " << i;
    int64_t zeros = 0;
    for (int64_t k = 0; k < want[i].num_elements(); ++k) zeros += want[i].GetAsDouble(k) == 0;
    EXPECT_GT(zeros, 0) << "output " << i << ": the ReLU / mask never cut anything";
    EXPECT_LT(zeros, want[i].num_elements()) << "output " << i;
  }
}

TEST(FuseConvActivationTest, ConvAndReluBecomeOneNode) {
  PassRun r = RunPass(passes::CreateFuseConvActivationPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %w : f32[4,3,3,3]
  input %b : f32[4]
  %c : f32[2,4,6,6] = Conv(%x, %w, %b) {kernel_shape = ints[3, 3]} origin "conv"
  %r : f32[2,4,6,6] = Relu(%c) origin "relu"
  output %r
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %r : f32[2,4,6,6] = ottr::Conv(%x, %w, %b) {activation = \"relu\", kernel_shape = ints[3, 3]} origin "
            "\"conv\"\n"
            "  output %r\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fused node 'conv' (Conv) + node 'relu' (Relu) -> ottr::Conv relu"))
      << r.remarks;
  ExpectSameBits(r);
}

TEST(FuseConvActivationTest, DeclinesWhenThePreActivationIsRead) {
  PassRun r = RunPass(passes::CreateFuseConvActivationPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %w : f32[4,3,3,3]
  %c : f32[2,4,6,6] = Conv(%x, %w) {kernel_shape = ints[3, 3]} origin "conv"
  %r : f32[2,4,6,6] = Relu(%c) origin "relu"
  output %r
  output %c
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'relu' (Relu): the convolution's output c has other "
                                           "readers"))
      << r.remarks;
}

TEST(FuseMaxPoolReluGradTest, ReluGradOfThePoolInputBecomesTheMask) {
  PassRun r = RunPass(passes::CreateFuseMaxPoolReluGradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %dy : f32[2,3,4,4]
  %g : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool/grad"
  %d : f32[2,3,8,8] = ottr::ReluGrad(%g, %x) origin "relu/grad"
  output %d
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %d : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[2, 2], relu_mask = 1, strides = "
            "ints[2, 2]} origin \"pool/grad\"\n"
            "  output %d\n");
  ExpectSameBits(r);
}

TEST(FuseMaxPoolReluGradTest, DeclinesAnotherMaskOrASharedGradient) {
  PassRun r = RunPass(passes::CreateFuseMaxPoolReluGradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %y : f32[2,3,8,8]
  input %dy : f32[2,3,4,4]
  %g : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool/grad"
  %d : f32[2,3,8,8] = ottr::ReluGrad(%g, %y) origin "relu/grad"
  %g2 : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %y) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool2/grad"
  %d2 : f32[2,3,8,8] = ottr::ReluGrad(%g2, %y) origin "relu2/grad"
  output %d
  output %d2
  output %g2
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'relu/grad' (ottr.ReluGrad): ReluGrad masks by y, not the "
                                           "pool's input x"))
      << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "the pool gradient g2 has other readers")) << r.remarks;
}

}  // namespace
}  // namespace ottr
