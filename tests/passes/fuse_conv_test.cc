// fuse-conv-activation and fuse-maxpool-relu-grad (passes/fuse_conv.cc): IR text in, the pass,
// the printed IR and remarks compared with the expected; the graph run before and after on the
// CPU reference, where the outputs are the same bits (the ReLU and the mask are the same selects,
// applied inside the fused kernel). Where a pass must not fire the IR is unchanged and the remark
// says why.
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/fusion_passes.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

struct Result {
  std::unique_ptr<ir::Graph> before, after;
  bool changed = false;
  std::string remarks;
};

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  EXPECT_TRUE(s.ok()) << s;
  return std::move(*g);
}

Result RunPass(std::unique_ptr<passes::Pass> pass, const std::string& text) {
  Result r;
  r.before = Parse(text);
  r.after = Parse(text);
  if (!r.before || !r.after) return r;
  std::ostringstream remarks;
  pass->set_remarks(&remarks);
  auto changed = pass->Run(*r.after);
  EXPECT_TRUE(changed.ok()) << changed.status();
  r.changed = changed.ok() && *changed;
  absl::Status v = ir::VerifyGraph(*r.after);
  EXPECT_TRUE(v.ok()) << v << "\n" << r.after->ToString();
  r.remarks = remarks.str();
  return r;
}

std::string Body(const ir::Graph& g) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(g.ToString(), '\n')) {
    if (absl::StartsWith(line, "  %") || absl::StartsWith(line, "  output")) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

// Random inputs in [-1, 1) (half the ReLU inputs negative), the same outputs bit for bit.
void ExpectSameBits(const Result& r) {
  runtime::TensorMap feeds;
  uint64_t seed = 11;
  for (const ir::Value* v : r.before->inputs()) {
    feeds[v->name()] = testing::RandomFloat(ir::StaticDims(*v->type().shape), seed++, -1.0f, 1.0f);
  }
  auto run = [&](const ir::Graph& g) {
    auto e = runtime::cpu::CpuExecutor::Create(g);
    EXPECT_TRUE(e.ok()) << e.status();
    auto out = (*e)->Run(feeds);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::move(*out) : std::vector<ir::Tensor>{};
  };
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
  Result r = RunPass(passes::CreateFuseConvActivationPass(), R"(graph "g" {
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
  EXPECT_EQ(Body(*r.after),
            "  %r : f32[2,4,6,6] = ottr::Conv(%x, %w, %b) {activation = \"relu\", kernel_shape = ints[3, 3]} origin "
            "\"conv\"\n"
            "  output %r\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fused node 'conv' (Conv) + node 'relu' (Relu) -> ottr::Conv relu"))
      << r.remarks;
  ExpectSameBits(r);
}

TEST(FuseConvActivationTest, DeclinesWhenThePreActivationIsRead) {
  Result r = RunPass(passes::CreateFuseConvActivationPass(), R"(graph "g" {
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
  EXPECT_EQ(Body(*r.after), Body(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'relu' (Relu): the convolution's output c has other "
                                           "readers"))
      << r.remarks;
}

TEST(FuseMaxPoolReluGradTest, ReluGradOfThePoolInputBecomesTheMask) {
  Result r = RunPass(passes::CreateFuseMaxPoolReluGradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %dy : f32[2,3,4,4]
  %g : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool/grad"
  %d : f32[2,3,8,8] = ottr::ReluGrad(%g, %x) origin "relu/grad"
  output %d
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(Body(*r.after),
            "  %d : f32[2,3,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[2, 2], relu_mask = 1, strides = "
            "ints[2, 2]} origin \"pool/grad\"\n"
            "  output %d\n");
  ExpectSameBits(r);
}

TEST(FuseMaxPoolReluGradTest, DeclinesAnotherMaskOrASharedGradient) {
  Result r = RunPass(passes::CreateFuseMaxPoolReluGradPass(), R"(graph "g" {
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
