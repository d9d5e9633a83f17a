// The GEMM fusion passes (passes/fusion_passes.h): IR text in, the pass, printed IR compared with
// the expected text, the remark that explains it, and the graph run before and after on the CPU
// reference (bitwise equal where the fused kernel repeats the unfused arithmetic, ReLU/bias; a
// tight bound otherwise). Where a pass must not fire, the IR is unchanged and the remark names
// the reason. Then whole training steps of models/mlp and models/cnn with and without fusion.
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/fused_gemm.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

using testing::IrBody;
using testing::ParseInferred;
using testing::RandomFeeds;
using testing::RunOnCpu;
using Result = testing::PassRun;

Result RunPass(std::unique_ptr<passes::Pass> pass, const std::string& text) {
  return testing::RunPassOnText(std::move(pass), text);
}

// --- fuse-gemm-epilogue -----------------------------------------------------------------------------

constexpr char kGemmRelu[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %b : f32[16]
  %h : f32[8,16] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  %a : f32[8,16] = Relu(%h) origin "relu"
  output %a
})";

TEST(FuseGemmEpilogueTest, FusesGemmBiasRelu) {
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), kGemmRelu);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %a : f32[8,16] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"relu_bias\", transB = 1} origin \"fc\"\n"
            "  output %a\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fused node 'fc' (Gemm) + node 'relu' (Relu) -> ottr::FusedGemm relu_bias"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 11);
}

// A bf16 GEMM above the activation-epilogue bound (4096³ > 1e10 multiply-adds): bias only, unless
// large_relu keeps the ReLU as RELU_BIAS (the training default, measured on the H200); float32
// GEMMs that large never keep it. Then fuse-gemm-dact-bgrad declines the ReLU's backward there.
TEST(FuseGemmEpilogueTest, LargeSixteenBitGemmKeepsTheReluOnlyWhenAsked) {
  const std::string big = R"(graph "g" {
  opset ai.onnx 17
  input %x : bf16[4096,4096]
  input %w : bf16[4096,4096]
  input %b : bf16[4096]
  %h : bf16[4096,4096] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  %a : bf16[4096,4096] = Relu(%h) origin "relu"
  output %a
})";
  Result plain = RunPass(passes::CreateFuseGemmEpiloguePass(), big);
  ASSERT_TRUE(plain.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*plain.after), "epilogue = \"bias\"")) << IrBody(*plain.after);
  EXPECT_TRUE(absl::StrContains(plain.remarks, "activation not fused: large GEMM (4096x4096x4096)")) << plain.remarks;
  Result kept = RunPass(passes::CreateFuseGemmEpiloguePass(true), big);
  ASSERT_TRUE(kept.after);
  EXPECT_EQ(IrBody(*kept.after),
            "  %a : bf16[4096,4096] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"relu_bias\", transB = 1} origin \"fc\"\n"
            "  output %a\n");
  std::string f32 = big;
  for (size_t at; (at = f32.find("bf16")) != std::string::npos;) f32.replace(at, 4, "f32");
  Result wide = RunPass(passes::CreateFuseGemmEpiloguePass(true), f32);
  ASSERT_TRUE(wide.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*wide.after), "epilogue = \"bias\"")) << IrBody(*wide.after);
  // The backward of that ReLU layer: a plain dX GEMM read only by the ReluGrad of the relu_bias
  // output, too large for DRELU_BGRAD.
  Result back = RunPass(passes::CreateFuseGemmDActBgradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : bf16[4096,4096]
  input %w : bf16[4096,4096]
  input %b : bf16[4096]
  input %dz : bf16[4096,4096]
  input %w2 : bf16[4096,4096]
  %a : bf16[4096,4096] = ottr::FusedGemm(%x, %w, %b) {epilogue = "relu_bias", transB = 1} origin "fc"
  %da : bf16[4096,4096] = Gemm(%dz, %w2) origin "fc2/grad"
  %dh : bf16[4096,4096] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  output %dh
})");
  ASSERT_TRUE(back.after);
  EXPECT_FALSE(back.changed);
  EXPECT_TRUE(absl::StrContains(back.remarks, "declined node 'relu/grad' (ottr.ReluGrad): large dX GEMM (6.87195e+10 "
                                              "multiply-adds > 1e+10)"))
      << back.remarks;
}

// A float32 (TF32) GEMM above its bound (8192 x 512 x 784 > 1e9 multiply-adds) keeps the ReLU
// only with large_relu_f32 (the training default, measured on the H200); a 16-bit-only
// large_relu leaves it bias-only. The backward of such a layer: a small dX GEMM (8192 x 512 x 12,
// under the DRELU bound) still declines DRELU_BGRAD, because the forward would have to become
// relu_aux_bias, slower than RELU_BIAS that large.
TEST(FuseGemmEpilogueTest, LargeFloat32GemmKeepsTheReluWithLargeReluF32) {
  const std::string big = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8192,784]
  input %w : f32[512,784]
  input %b : f32[512]
  %h : f32[8192,512] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  %a : f32[8192,512] = Relu(%h) origin "relu"
  output %a
})";
  Result sixteen_only = RunPass(passes::CreateFuseGemmEpiloguePass(true, false), big);
  ASSERT_TRUE(sixteen_only.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*sixteen_only.after), "epilogue = \"bias\"")) << IrBody(*sixteen_only.after);
  Result kept = RunPass(passes::CreateFuseGemmEpiloguePass(true, true), big);
  ASSERT_TRUE(kept.after);
  EXPECT_EQ(IrBody(*kept.after),
            "  %a : f32[8192,512] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"relu_bias\", transB = 1} origin \"fc\"\n"
            "  output %a\n");
  testing::ExpectSameOutputs(kept, 12);
  Result back = RunPass(passes::CreateFuseGemmDActBgradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8192,784]
  input %w : f32[512,784]
  input %b : f32[512]
  input %dz : f32[8192,12]
  input %w2 : f32[12,512]
  %a : f32[8192,512] = ottr::FusedGemm(%x, %w, %b) {epilogue = "relu_bias", transB = 1} origin "fc"
  %da : f32[8192,512] = Gemm(%dz, %w2) origin "fc2/grad"
  %dh : f32[8192,512] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  output %dh
})");
  ASSERT_TRUE(back.after);
  EXPECT_FALSE(back.changed);
  EXPECT_TRUE(absl::StrContains(back.remarks, "declined node 'relu/grad' (ottr.ReluGrad): the forward GEMM is large "
                                              "(3.28833e+09 multiply-adds > 1e+09)"))
      << back.remarks;
}

TEST(FuseGemmEpilogueTest, FusesMatMulAddWithBiasOnEitherSide) {
  for (const char* add : {"Add(%p, %b)", "Add(%b, %p)"}) {
    const std::string text = absl::StrCat(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  input %b : f32[1,16]
  %p : f32[8,16] = MatMul(%x, %w) origin "mm"
  %y : f32[8,16] = )", add, R"( origin "add"
  output %y
})");
    Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), text);
    ASSERT_TRUE(r.after);
    EXPECT_EQ(IrBody(*r.after),
              "  %y : f32[8,16] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"bias\"} origin \"mm\"\n"
              "  output %y\n");
    // MatMul then Add rounds twice in another order than bias-then-accumulate: not bitwise.
    testing::ExpectSameOutputs(r, 11, 1e-6);
  }
}

// The backward reads the GELU pre-activation: the aux variant writes it as output 1.
constexpr char kGelu[] = R"(graph "g" {
  opset ai.onnx 20
  input %x : f32[8,32]
  input %w : f32[32,N]
  input %b : f32[N]
  input %dy : f32[8,N]
  %p : f32[8,N] = MatMul(%x, %w) origin "mm"
  %h : f32[8,N] = Add(%p, %b) origin "add"
  %y : f32[8,N] = Gelu(%h) {approximate = "APPROX"} origin "gelu"
  %dh : f32[8,N] = ottr::GeluGrad(%dy, %h) {approximate = "APPROX"} origin "gelu/grad"
  output %y
  output %dh
})";

std::string GeluText(int n, const std::string& approx) {
  std::string t = kGelu;
  for (auto [from, to] : {std::pair<std::string, std::string>{"N", std::to_string(n)}, {"APPROX", approx}}) {
    size_t pos = 0;
    while ((pos = t.find(from, pos)) != std::string::npos) {
      t.replace(pos, from.size(), to);
      pos += to.size();
    }
  }
  return t;
}

TEST(FuseGemmEpilogueTest, GeluWithBackwardUsesTheAuxVariant) {
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), GeluText(16, "tanh"));
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %y : f32[8,16], %h : f32[8,16] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"gelu_aux_bias\"} origin "
            "\"mm\"\n"
            "  %dh : f32[8,16] = ottr::GeluGrad(%dy, %h) {approximate = \"tanh\"} origin \"gelu/grad\"\n"
            "  output %y, %dh\n");
  testing::ExpectSameOutputs(r, 11, 1e-6);
}

TEST(FuseGemmEpilogueTest, MisalignedGeluAuxFusesTheBiasOnly) {
  // N = 12: the pre-activation aux would have a leading dimension that is not a multiple of 8.
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), GeluText(12, "tanh"));
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%h : f32[8,12] = ottr::FusedGemm(%x, %w, %b) {epilogue = \"bias\"}"))
      << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "= Gelu(%h)")) << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(r.remarks, "misaligned")) << r.remarks;
  testing::ExpectSameOutputs(r, 11, 1e-6);
}

TEST(FuseGemmEpilogueTest, ErfGeluIsNotFused) {
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), GeluText(16, "none"));
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "= Gelu(%h)")) << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(r.remarks, "tanh approximation")) << r.remarks;
}

struct DeclineCase {
  const char* name;
  const char* text;
  const char* reason;
};

class FuseGemmEpilogueDeclineTest : public ::testing::TestWithParam<DeclineCase> {};

TEST_P(FuseGemmEpilogueDeclineTest, LeavesTheGraphAndSaysWhy) {
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), GetParam().text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.after->ToString(), r.before->ToString());
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, GetParam().reason)) << r.remarks;
}

const DeclineCase kDeclineCases[] = {
        DeclineCase{"TwoUsers", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  input %b : f32[16]
  %p : f32[8,16] = MatMul(%x, %w) origin "mm"
  %y : f32[8,16] = Add(%p, %b) origin "add"
  %z : f32[8,16] = Relu(%p) origin "relu"
  output %y
  output %z
})",
                    "2 users"},
        DeclineCase{"BiasIsAColumn", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  input %b : f32[8,1]
  %p : f32[8,16] = MatMul(%x, %w) origin "mm"
  %y : f32[8,16] = Add(%p, %b) origin "add"
  output %y
})",
                    "wrong bias shape"},
        DeclineCase{"GemmCIsAMatrix", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %c : f32[8,16]
  %y : f32[8,16] = Gemm(%x, %w, %c) {transB = 1} origin "fc"
  output %y
})",
                    "wrong bias shape"},
        DeclineCase{"GemmBetaIsNotOne", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %c : f32[16]
  %y : f32[8,16] = Gemm(%x, %w, %c) {beta = 0.5, transB = 1} origin "fc"
  output %y
})",
                    "beta 0.5"},
        DeclineCase{"Float64", R"(graph "g" {
  opset ai.onnx 17
  input %x : f64[8,32]
  input %w : f64[16,32]
  input %b : f64[16]
  %h : f64[8,16] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  %a : f64[8,16] = Relu(%h) origin "relu"
  output %a
})",
                    "unsupported element type f64"},
        DeclineCase{"BatchedMatMul", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,8,32]
  input %w : f32[32,16]
  input %b : f32[16]
  %p : f32[2,8,16] = MatMul(%x, %w) origin "mm"
  %y : f32[2,8,16] = Add(%p, %b) origin "add"
  output %y
})",
                    "not static matrices"},
        DeclineCase{"NoBias", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  %p : f32[8,16] = MatMul(%x, %w) origin "mm"
  %y : f32[8,16] = Relu(%p) origin "relu"
  output %y
})",
                    "no bias"}};

INSTANTIATE_TEST_SUITE_P(Cases, FuseGemmEpilogueDeclineTest, ::testing::ValuesIn(kDeclineCases),
                         [](const ::testing::TestParamInfo<DeclineCase>& info) { return std::string(info.param.name); });

TEST(FuseGemmEpilogueTest, ReluWhosePreActivationIsReadElsewhereFusesTheBiasOnly) {
  Result r = RunPass(passes::CreateFuseGemmEpiloguePass(), R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %b : f32[16]
  %h : f32[8,16] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  %a : f32[8,16] = Relu(%h) origin "relu"
  output %a
  output %h
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "= Relu(%h)")) << IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(r.remarks, "graph output")) << r.remarks;
  testing::ExpectSameOutputs(r, 11);
}

// --- fuse-gemm-dact-bgrad -----------------------------------------------------------------------

// Two layers' forward (fused) and the backward of the second into the first.
constexpr char kBackward[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w1 : f32[16,32]
  input %b1 : f32[16]
  input %w2 : f32[4,16]
  input %dy : f32[8,4]
  %a : f32[8,16] = ottr::FusedGemm(%x, %w1, %b1) {epilogue = "relu_bias", transB = 1} origin "fc1"
  %da : f32[8,16] = Gemm(%dy, %w2) origin "fc2/grad"
  %dh : f32[8,16] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc1/grad"
  %s : f32[1,16] = ReduceSum(%dh, %axes) {keepdims = 1} origin "fc1/grad"
  %shape : i64[1] = Constant() {value = tensor<i64[1] [16]>} origin "fc1/grad"
  %b1.grad : f32[16] = Reshape(%s, %shape) origin "fc1/grad"
  %w1.grad : f32[16,32] = Gemm(%dh, %x) {transA = 1} origin "fc1/grad"
  output %a
  output %w1.grad
  output %b1.grad
})";

TEST(FuseGemmDActBgradTest, FusesReluGradAndBiasGradientIntoTheDxGemm) {
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(), kBackward);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %a : f32[8,16], %a.relu_mask : u8[8,16] = ottr::FusedGemm(%x, %w1, %b1) {epilogue = \"relu_aux_bias\", "
            "transB = 1} origin \"fc1\"\n"
            "  %dh : f32[8,16], %b1.grad : f32[16] = ottr::FusedGemm(%dy, %w2, _, %a.relu_mask) {epilogue = "
            "\"drelu_bgrad\"} origin \"fc2/grad\"\n"
            "  %w1.grad : f32[16,32] = Gemm(%dh, %x) {transA = 1} origin \"fc1/grad\"\n"
            "  output %a, %w1.grad, %b1.grad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "drelu_bgrad; node 'fc1' (ottr.FusedGemm) now relu_aux_bias")) << r.remarks;
  testing::ExpectSameOutputs(r, 11);
}

// TF32 steps (bgrad_to_weight_gemm): the bias gradient stays a ReduceSum for fuse-gemm-bgrad,
// which puts it into the weight-gradient GEMM reading the same dh; the dX GEMM gets drelu.
TEST(FuseGemmDActBgradTest, LeavesTheBiasGradientToTheWeightGemm) {
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(/*bgrad_to_weight_gemm=*/true), kBackward);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%dh : f32[8,16] = ottr::FusedGemm(%dy, %w2, _, %a.relu_mask) "
                                                "{epilogue = \"drelu\"}"))
      << IrBody(*r.after);
  EXPECT_EQ(CountOps(*r.after, "ReduceSum"), 1);
  EXPECT_TRUE(absl::StrContains(r.remarks, "(the bias gradient left to the weight-gradient GEMM: fuse-gemm-bgrad)"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 11);
  Result b = RunPass(passes::CreateFuseGemmBgradPass(), r.after->ToString());
  ASSERT_TRUE(b.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*b.after), "%w1.grad : f32[16,32], %b1.grad : f32[16] = ottr::FusedGemm(%dh, "
                                                "%x) {epilogue = \"bgrada\", transA = 1}"))
      << IrBody(*b.after);
  EXPECT_EQ(CountOps(*b.after, "ReduceSum"), 0);
  b.before = std::move(r.before);  // against the unfused original
  testing::ExpectSameOutputs(b, 11);
}

// Where no weight-gradient GEMM can take it (alpha is not 1), the dX GEMM keeps drelu_bgrad.
TEST(FuseGemmDActBgradTest, KeepsDReluBgradWhenTheWeightGemmCannotTakeIt) {
  std::string text = kBackward;
  const std::string from = "Gemm(%dh, %x) {transA = 1}";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "Gemm(%dh, %x) {alpha = 0.5, transA = 1}");
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(/*bgrad_to_weight_gemm=*/true), text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "{epilogue = \"drelu_bgrad\"}")) << IrBody(*r.after);
  EXPECT_EQ(CountOps(*r.after, "ReduceSum"), 0);
  testing::ExpectSameOutputs(r, 11);
}

TEST(FuseGemmDActBgradTest, WithoutABiasGradientUsesDRelu) {
  std::string text = kBackward;
  text = text.substr(0, text.find("  %axes")) + "  %w1.grad : f32[16,32] = Gemm(%dh, %x) {transA = 1} origin \"g\"\n"
         "  output %a\n  output %w1.grad\n}";
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "%dh : f32[8,16] = ottr::FusedGemm(%dy, %w2, _, %a.relu_mask) "
                                                "{epilogue = \"drelu\"}"))
      << IrBody(*r.after);
  testing::ExpectSameOutputs(r, 11);
}

TEST(FuseGemmDActBgradTest, DeclinesWhenDyHasTwoUsers) {
  std::string text = kBackward;
  text.replace(text.find("  output %a\n"), 0, "  output %da\n");
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.after->ToString(), r.before->ToString());
  EXPECT_TRUE(absl::StrContains(r.remarks, "two users")) << r.remarks;
}

TEST(FuseGemmDActBgradTest, DeclinesWhenTheForwardIsNotFused) {
  std::string text = kBackward;
  text.replace(text.find("  %a : f32[8,16] = ottr::FusedGemm"), std::string("  %a : f32[8,16] = ottr::FusedGemm(%x, %w1, %b1) {epilogue = \"relu_bias\", transB = 1} origin \"fc1\"").size(),
               "  %h : f32[8,16] = Gemm(%x, %w1, %b1) {transB = 1} origin \"fc1\"\n  %a : f32[8,16] = Relu(%h) origin \"relu\"");
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "not the output of a fused relu GEMM")) << r.remarks;
}

TEST(FuseGemmDActBgradTest, FusesGeluGradIntoDGeluBgrad) {
  Result fwd = RunPass(passes::CreateFuseGemmEpiloguePass(), R"(graph "g" {
  opset ai.onnx 20
  input %x : f32[8,32]
  input %w1 : f32[16,32]
  input %b1 : f32[16]
  input %w2 : f32[8,16]
  input %dy : f32[8,8]
  %h : f32[8,16] = Gemm(%x, %w1, %b1) {transB = 1} origin "fc1"
  %a : f32[8,16] = Gelu(%h) {approximate = "tanh"} origin "gelu"
  %da : f32[8,16] = Gemm(%dy, %w2) origin "fc2/grad"
  %dh : f32[8,16] = ottr::GeluGrad(%da, %h) {approximate = "tanh"} origin "gelu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc1/grad"
  %b1.grad : f32[16] = ReduceSum(%dh, %axes) {keepdims = 0} origin "fc1/grad"
  output %a
  output %dh
  output %b1.grad
})");
  ASSERT_TRUE(fwd.after);
  const std::string fused_forward = fwd.after->ToString();
  Result r = RunPass(passes::CreateFuseGemmDActBgradPass(), fused_forward);
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %a : f32[8,16], %h : f32[8,16] = ottr::FusedGemm(%x, %w1, %b1) {epilogue = \"gelu_aux_bias\", transB = "
            "1} origin \"fc1\"\n"
            "  %dh : f32[8,16], %b1.grad : f32[16] = ottr::FusedGemm(%dy, %w2, _, %h) {epilogue = \"dgelu_bgrad\"} "
            "origin \"fc2/grad\"\n"
            "  output %a, %dh, %b1.grad\n");
  // Against the unfused original.
  r.before = std::move(fwd.before);
  testing::ExpectSameOutputs(r, 11, 1e-6);
}

// --- fuse-gemm-bgrad --------------------------------------------------------------------------------

constexpr char kBgrad[] = R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8,10]
  input %x : f32[8,32]
  %w.grad : f32[10,32] = Gemm(%dy, %x) {transA = 1} origin "fc/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad"
  %s : f32[1,10] = ReduceSum(%dy, %axes) {keepdims = 1} origin "fc/grad"
  %shape : i64[1] = Constant() {value = tensor<i64[1] [10]>} origin "fc/grad"
  %b.grad : f32[10] = Reshape(%s, %shape) origin "fc/grad"
  output %w.grad
  output %b.grad
})";

TEST(FuseGemmBgradTest, FusesTheBiasGradientIntoTheWeightGradient) {
  Result r = RunPass(passes::CreateFuseGemmBgradPass(), kBgrad);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %w.grad : f32[10,32], %b.grad : f32[10] = ottr::FusedGemm(%dy, %x) {epilogue = \"bgrada\", transA = 1} "
            "origin \"fc/grad\"\n"
            "  output %w.grad, %b.grad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "-> ottr::FusedGemm bgrada")) << r.remarks;
  testing::ExpectSameOutputs(r, 11);
}

TEST(FuseGemmBgradTest, TransposedWeightGradientUsesBgradb) {
  // dWᵀ = Xᵀ · dY (a MatMul layer's weight gradient): dY is B, summed over its axis 0.
  Result r = RunPass(passes::CreateFuseGemmBgradPass(), R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8,10]
  input %x : f32[8,32]
  %w.grad : f32[32,10] = Gemm(%x, %dy) {transA = 1} origin "fc/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad"
  %b.grad : f32[10] = ReduceSum(%dy, %axes) {keepdims = 0} origin "fc/grad"
  output %w.grad
  output %b.grad
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "ottr::FusedGemm(%x, %dy) {epilogue = \"bgradb\", transA = 1}"))
      << IrBody(*r.after);
  testing::ExpectSameOutputs(r, 11);
}

TEST(FuseGemmBgradTest, DeclinesWhenTheSumIsAlsoReadElsewhere) {
  std::string text = kBgrad;
  text.replace(text.find("  output %w.grad\n"), 0, "  output %s\n");
  Result r = RunPass(passes::CreateFuseGemmBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.after->ToString(), r.before->ToString());
  EXPECT_TRUE(absl::StrContains(r.remarks, "another user")) << r.remarks;
}

TEST(FuseGemmBgradTest, DeclinesWhenTheSummedAxisIsNotTheGemmsK) {
  // Summing dY over axis 1 is not the bias gradient of this GEMM.
  std::string text = kBgrad;
  text.replace(text.find("[0]>"), 4, "[1]>");
  text.replace(text.find("%s : f32[1,10]"), 14, "%s : f32[8,1]");
  text.replace(text.find("%b.grad : f32[10]"), 17, "%b.grad : f32[8]");
  text.replace(text.find("tensor<i64[1] [10]>"), 19, "tensor<i64[1] [8]>");
  Result r = RunPass(passes::CreateFuseGemmBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "as its k dimension")) << r.remarks;
}

TEST(FuseGemmBgradTest, DeclinesWhenAlphaIsNotOne) {
  std::string text = kBgrad;
  text.replace(text.find("{transA = 1}"), 12, "{alpha = 2.0, transA = 1}");
  Result r = RunPass(passes::CreateFuseGemmBgradPass(), text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "alpha 1")) << r.remarks;
}

// --- whole training steps --------------------------------------------------------------------------

std::unique_ptr<ir::Graph> Step(const std::string& model, int64_t batch, bool fuse, std::string* remarks = nullptr) {
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(forward.ok()) << forward.status();
  if (!forward.ok()) return nullptr;
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.expose_gradients = true;
  spec.fuse_epilogues = fuse;
  std::ostringstream r;
  passes::PassManagerOptions o;
  o.remarks = &r;
  o.check_changed = true;
  auto step = passes::BuildTrainingGraph(**forward, spec, o);
  EXPECT_TRUE(step.ok()) << step.status();
  if (remarks) *remarks = r.str();
  return step.ok() ? std::move(*step) : nullptr;
}

// Three steps with and without fusion from the same state: loss, exposed gradients and every state
// bit for bit (the fused CPU kernels repeat the unfused arithmetic).
void ExpectStepsBitwiseEqual(const ir::Graph& plain, const ir::Graph& fused, std::vector<int64_t> x_dims) {
  auto a = runtime::cpu::CpuExecutor::Create(plain);
  auto b = runtime::cpu::CpuExecutor::Create(fused);
  ASSERT_TRUE(a.ok() && b.ok());
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat(x_dims, 5, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({x_dims[0]}, 6, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  for (int k = 0; k < 3; ++k) {
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    ASSERT_EQ(ra->size(), rb->size());
    for (size_t i = 0; i < ra->size(); ++i) {
      EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "step " << k << " output " << plain.outputs()[i]->name();
    }
  }
  for (const ir::StateUpdate& u : plain.updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_TRUE(x && y) << u.target->name();
    EXPECT_TRUE(x->BitwiseEquals(*y)) << u.target->name();
  }
}

TEST(FuseGemmTrainingTest, MlpStepFusesEveryLayerAndComputesTheSameBits) {
  std::string remarks;
  auto plain = Step("models/mlp/model.onnx", 16, false);
  auto fused = Step("models/mlp/model.onnx", 16, true, &remarks);
  ASSERT_TRUE(plain && fused);
  // 3 forward GEMMs, 2 drelu_bgrad (dX of fc3, fc2 with fc2's, fc1's bias gradient), 1 bgrada (fc3).
  EXPECT_EQ(CountOps(*fused, "FusedGemm"), 6);
  EXPECT_EQ(CountOps(*fused, "Gemm"), 2);  // fc2, fc1 weight gradients
  EXPECT_EQ(CountOps(*fused, "Relu"), 0);
  EXPECT_EQ(CountOps(*fused, "ReluGrad"), 0);
  EXPECT_EQ(CountOps(*fused, "ReduceSum"), 0);
  EXPECT_EQ(CountOps(*fused, "Reshape"), 0);
  // Gone: 2 Relu, 2 ReluGrad, 3 ReduceSum, 3 Reshape, their 3 Constants, 3 GEMMs merged into
  // the fused ones, and the loss gradient merged into the loss (fuse-sce-grad).
  EXPECT_EQ(CountOps(*fused, "SoftmaxCrossEntropyWithGrad"), 1);
  EXPECT_EQ(plain->num_nodes() - fused->num_nodes(), 14) << plain->num_nodes() << " -> " << fused->num_nodes();
  EXPECT_TRUE(absl::StrContains(remarks, "fuse-gemm-bgrad: fused node 'fc3/grad' (Gemm)")) << remarks;
  // The memory plan still holds (the masks are planned like any value).
  auto plan = passes::PlanMemory(*fused);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(*fused, *plan).ok());
  ExpectStepsBitwiseEqual(*plain, *fused, {16, 784});
}

// A TF32 step (tf32_bgrad_in_weight_gemm, the default): both hidden layers' bias gradients go
// into their weight-gradient GEMMs (bgrada), the data gradients get drelu; the same bits as the
// unfused step on the CPU reference.
TEST(FuseGemmTrainingTest, Tf32MlpStepPutsTheBiasGradientsInTheWeightGemms) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.expose_gradients = true;
  spec.precision = passes::Precision::kTf32;
  spec.kmajor_gemm_operands = false;
  spec.pad_tf32_gemms = false;
  spec.fuse_epilogues = true;
  // fuse-linear-sce would take the classifier's drelu data gradient into the loss node.
  spec.disabled_passes = {"fuse-linear-sce"};
  auto fused = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(fused.ok()) << fused.status();
  int drelu = 0, drelu_bgrad = 0, bgrada = 0;
  for (const ir::Node* n : (*fused)->nodes()) {
    const auto e = passes::fusion::FusedEpilogueOf(n);
    if (!e) continue;
    drelu += *e == ir::FusedEpilogue::kDRelu;
    drelu_bgrad += *e == ir::FusedEpilogue::kDReluBgrad;
    bgrada += *e == ir::FusedEpilogue::kBgradA;
  }
  EXPECT_EQ(drelu, 2);
  EXPECT_EQ(drelu_bgrad, 0);
  EXPECT_EQ(bgrada, 3);
  EXPECT_EQ(CountOps(**fused, "ReduceSum"), 0);
  spec.tf32_bgrad_in_weight_gemm = false;
  auto before = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(CountOps(**before, "FusedGemm"), 6);  // 2 drelu_bgrad, 1 bgrada, as in float32
  auto plain = Step("models/mlp/model.onnx", 16, false);
  ASSERT_TRUE(plain);
  ExpectStepsBitwiseEqual(*plain, **fused, {16, 784});
}

TEST(FuseGemmTrainingTest, CnnStepFusesTheDenseLayersAndComputesTheSameBits) {
  std::string remarks;
  auto plain = Step("models/cnn/model.onnx", 4, false);
  auto fused = Step("models/cnn/model.onnx", 4, true, &remarks);
  ASSERT_TRUE(plain && fused);
  EXPECT_EQ(CountOps(*fused, "FusedGemm"), 4);  // fc1 relu_aux_bias, fc2 bias, drelu_bgrad, bgrada
  // The conv layers' ReluGrads and bias sums are not GEMM patterns: declined with a reason. The
  // second conv layer's ReluGrad goes into its MaxPoolGrad (fuse-maxpool-relu-grad), the first
  // stays.
  EXPECT_EQ(CountOps(*fused, "ReluGrad"), 1);
  EXPECT_TRUE(absl::StrContains(remarks, "fuse-maxpool-relu-grad: fused node 'pool/grad'")) << remarks;
  EXPECT_TRUE(absl::StrContains(remarks, "fuse-gemm-dact-bgrad: declined node 'relu2/grad'")) << remarks;
  EXPECT_TRUE(absl::StrContains(remarks, "fuse-gemm-bgrad: declined node 'conv2/grad' (ReduceSum)")) << remarks;
  ExpectStepsBitwiseEqual(*plain, *fused, {4, 1, 28, 28});
}

TEST(FuseGemmTrainingTest, DisabledPassesAreSkipped) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok());
  passes::TrainingSpec spec;
  spec.batch = 8;
  spec.fuse_epilogues = true;
  // fuse-linear-sce would take the classifier, the loss and the last ReluGrad.
  spec.disabled_passes = {"fuse-gemm-dact-bgrad", "fuse-linear-sce"};
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  // Without dact-bgrad, bgrad takes every layer's bias gradient into its weight-gradient GEMM.
  EXPECT_EQ(CountOps(**step, "ReluGrad"), 2);
  EXPECT_EQ(CountOps(**step, "ReduceSum"), 0);
  EXPECT_EQ(CountOps(**step, "FusedGemm"), 6);  // 3 forward + 3 bgrada
}

}  // namespace
}  // namespace ottr
