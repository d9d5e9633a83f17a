// The mixed-precision pass: IR text in, printed IR out; the rewritten graph computes on the CPU
// reference what the float32 graph computes, within the 16-bit type's rounding; the cases where
// it must not fire (--keep-fp32, integer MatMul, float64, graphs already in bf16, a second run);
// and the training pipeline around it (parameters stay float32 master weights, gradients arrive in
// float32, the optimizer updates float32).
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/mixed_precision.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using ir::DType;

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? std::move(*g) : nullptr;
}

// The printed form of `text` (so the expectations below need not match the printer's spacing).
std::string Canonical(const std::string& text) {
  auto g = Parse(text);
  return g ? g->ToString() : "";
}

struct PassResult {
  bool changed = false;
  std::string remarks;
};

PassResult RunPass(ir::Graph& g, DType low, const std::string& keep = "") {
  auto pass = passes::CreateMixedPrecisionPass(low, keep);
  std::ostringstream remarks;
  pass->set_remarks(&remarks);
  auto changed = pass->Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  absl::Status verified = ir::VerifyGraph(g);
  EXPECT_TRUE(verified.ok()) << verified << "\n" << g.ToString();
  return {changed.ok() && *changed, remarks.str()};
}

constexpr char kMatMulLayer[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w : f32[8,3] = elided
  %h : f32[4,3] = MatMul(%x, %w) origin "fc"
  %y : f32[4,3] = Relu(%h) origin "relu"
  output %y
})";

TEST(MixedPrecisionTest, MatMulRunsInBf16BetweenCasts) {
  auto g = Parse(kMatMulLayer);
  ASSERT_TRUE(g);
  PassResult r = RunPass(*g, DType::kBFloat16);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(g->ToString(), Canonical(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w : f32[8,3] = elided
  %x.bf16 : bf16[4,8] = Cast(%x) {to = 16} origin "fc"
  %w.bf16 : bf16[8,3] = Cast(%w) {to = 16} origin "fc"
  %h.bf16 : bf16[4,3] = MatMul(%x.bf16, %w.bf16) origin "fc"
  %h : f32[4,3] = Cast(%h.bf16) {to = 1} origin "fc"
  %y : f32[4,3] = Relu(%h) origin "relu"
  output %y
})"));
  EXPECT_TRUE(absl::StrContains(r.remarks, "runs node 'fc' (MatMul) in bf16")) << r.remarks;
  // A second run finds nothing left in float32.
  PassResult again = RunPass(*g, DType::kBFloat16);
  EXPECT_FALSE(again.changed);
  EXPECT_TRUE(absl::StrContains(again.remarks, "not f32")) << again.remarks;
}

TEST(MixedPrecisionTest, GemmCastsItsBiasAndFp16Works) {
  auto g = Parse(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w : f32[3,8] = elided
  init %b : f32[3] = [0.5, -1.0, 2.0]
  %h : f32[4,3] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
  output %h
})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(RunPass(*g, DType::kFloat16).changed);
  EXPECT_EQ(g->ToString(), Canonical(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w : f32[3,8] = elided
  init %b : f32[3] = [0.5, -1.0, 2.0]
  %x.f16 : f16[4,8] = Cast(%x) {to = 10} origin "fc"
  %w.f16 : f16[3,8] = Cast(%w) {to = 10} origin "fc"
  %b.f16 : f16[3] = Cast(%b) {to = 10} origin "fc"
  %h.f16 : f16[4,3] = Gemm(%x.f16, %w.f16, %b.f16) {transB = 1} origin "fc"
  %h : f32[4,3] = Cast(%h.f16) {to = 1} origin "fc"
  output %h
})"));
}

TEST(MixedPrecisionTest, ConvAndSharedInputsGetOneCast) {
  // %x feeds two convolutions: one Cast, shared. Softmax stays float32.
  auto g = Parse(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,6,6]
  init %w1 : f32[4,3,3,3] = elided
  init %w2 : f32[4,3,3,3] = elided
  %a : f32[2,4,4,4] = Conv(%x, %w1) {kernel_shape = ints[3, 3]} origin "conv1"
  %b : f32[2,4,4,4] = Conv(%x, %w2) {kernel_shape = ints[3, 3]} origin "conv2"
  %s : f32[2,4,4,4] = Add(%a, %b) origin "add"
  %y : f32[2,4,4,4] = Softmax(%s) {axis = 1} origin "softmax"
  output %y
})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(RunPass(*g, DType::kBFloat16).changed);
  EXPECT_EQ(g->ToString(), Canonical(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,6,6]
  init %w1 : f32[4,3,3,3] = elided
  init %w2 : f32[4,3,3,3] = elided
  %x.bf16 : bf16[2,3,6,6] = Cast(%x) {to = 16} origin "conv1"
  %w1.bf16 : bf16[4,3,3,3] = Cast(%w1) {to = 16} origin "conv1"
  %a.bf16 : bf16[2,4,4,4] = Conv(%x.bf16, %w1.bf16) {kernel_shape = ints[3, 3]} origin "conv1"
  %a : f32[2,4,4,4] = Cast(%a.bf16) {to = 1} origin "conv1"
  %w2.bf16 : bf16[4,3,3,3] = Cast(%w2) {to = 16} origin "conv2"
  %b.bf16 : bf16[2,4,4,4] = Conv(%x.bf16, %w2.bf16) {kernel_shape = ints[3, 3]} origin "conv2"
  %b : f32[2,4,4,4] = Cast(%b.bf16) {to = 1} origin "conv2"
  %s : f32[2,4,4,4] = Add(%a, %b) origin "add"
  %y : f32[2,4,4,4] = Softmax(%s) {axis = 1} origin "softmax"
  output %y
})"));
}

TEST(MixedPrecisionTest, GraphOutputKeepsItsNameAndFloat32Type) {
  auto g = Parse(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w : f32[8,3] = elided
  %logits : f32[4,3] = MatMul(%x, %w) origin "fc"
  output %logits
})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(RunPass(*g, DType::kBFloat16).changed);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0]->name(), "logits");
  EXPECT_EQ(g->outputs()[0]->type().dtype, DType::kFloat32);
  EXPECT_EQ(g->outputs()[0]->producer()->op_type(), "Cast");
}

// --- where it must not fire ---------------------------------------------------------------------

TEST(MixedPrecisionTest, KeepFp32MatchesOriginOrOutputName) {
  for (const char* keep : {"^fc$", "^h$", "f."}) {
    auto g = Parse(kMatMulLayer);
    ASSERT_TRUE(g);
    const std::string before = g->ToString();
    PassResult r = RunPass(*g, DType::kBFloat16, keep);
    EXPECT_FALSE(r.changed) << keep;
    EXPECT_EQ(g->ToString(), before) << keep;
    EXPECT_TRUE(absl::StrContains(r.remarks, "kept in f32 by --keep-fp32")) << r.remarks;
  }
  // A regex that matches neither: the layer is rewritten.
  auto g = Parse(kMatMulLayer);
  ASSERT_TRUE(g);
  EXPECT_TRUE(RunPass(*g, DType::kBFloat16, "^fc2$").changed);
}

TEST(MixedPrecisionTest, KeepFp32KeepsOnlyTheNamedLayer) {
  auto g = Parse(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w1 : f32[8,8] = elided
  init %w2 : f32[8,3] = elided
  %h : f32[4,8] = MatMul(%x, %w1) origin "fc1"
  %y : f32[4,3] = MatMul(%h, %w2) origin "head"
  output %y
})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(RunPass(*g, DType::kBFloat16, "head").changed);
  EXPECT_EQ(g->ToString(), Canonical(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  init %w1 : f32[8,8] = elided
  init %w2 : f32[8,3] = elided
  %x.bf16 : bf16[4,8] = Cast(%x) {to = 16} origin "fc1"
  %w1.bf16 : bf16[8,8] = Cast(%w1) {to = 16} origin "fc1"
  %h.bf16 : bf16[4,8] = MatMul(%x.bf16, %w1.bf16) origin "fc1"
  %h : f32[4,8] = Cast(%h.bf16) {to = 1} origin "fc1"
  %y : f32[4,3] = MatMul(%h, %w2) origin "head"
  output %y
})"));
}

TEST(MixedPrecisionTest, IntegerFloat64AndLowPrecisionGraphsAreLeftAlone) {
  const char* graphs[] = {
      R"(graph "g" {
  opset ai.onnx 17
  input %a : i32[4,8]
  input %b : i32[8,3]
  %y : i32[4,3] = MatMul(%a, %b) origin "int_matmul"
  output %y
})",
      R"(graph "g" {
  opset ai.onnx 17
  input %a : f64[4,8]
  input %b : f64[8,3]
  %y : f64[4,3] = MatMul(%a, %b) origin "f64_matmul"
  output %y
})",
      R"(graph "g" {
  opset ai.onnx 17
  input %a : bf16[4,8]
  input %b : bf16[8,3]
  %y : bf16[4,3] = MatMul(%a, %b) origin "bf16_matmul"
  %z : f32[4,3] = Cast(%y) {to = 1} origin "cast"
  output %z
})",
      R"(graph "g" {
  opset ai.onnx 17
  input %a : f16[4,8]
  input %b : f16[8,3]
  %y : f16[4,3] = MatMul(%a, %b) origin "f16_matmul"
  output %y
})",
  };
  for (const char* text : graphs) {
    for (DType low : {DType::kBFloat16, DType::kFloat16}) {
      auto g = Parse(text);
      ASSERT_TRUE(g);
      const std::string before = g->ToString();
      PassResult r = RunPass(*g, low);
      EXPECT_FALSE(r.changed) << text;
      EXPECT_EQ(g->ToString(), before);
      EXPECT_TRUE(absl::StrContains(r.remarks, "declined")) << r.remarks;
    }
  }
}

TEST(MixedPrecisionTest, NoGemmNoChange) {
  auto g = Parse(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[4,8]
  %y : f32[4,8] = Softmax(%x) {axis = 1} origin "softmax"
  %z : f32[4] = ReduceSum(%y) {keepdims = 0} origin "sum"
  output %z
})");
  ASSERT_TRUE(g);
  const std::string before = g->ToString();
  EXPECT_FALSE(RunPass(*g, DType::kBFloat16).changed);
  EXPECT_EQ(g->ToString(), before);
}

TEST(MixedPrecisionTest, BadArgumentsAreInvalidArgument) {
  auto g = Parse(kMatMulLayer);
  ASSERT_TRUE(g);
  auto bad_regex = passes::CreateMixedPrecisionPass(DType::kBFloat16, "(")->Run(*g);
  EXPECT_EQ(bad_regex.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_type = passes::CreateMixedPrecisionPass(DType::kFloat32)->Run(*g);
  EXPECT_EQ(bad_type.status().code(), absl::StatusCode::kInvalidArgument);
}

// --- numerics on the CPU reference --------------------------------------------------------------

// The rewritten layer against the float32 one on random data: |Δ| <= 3u · Σ|x||w| per element
// (inputs and output each rounded once to the 16-bit type, unit roundoff u; the float32
// accumulation's error is below 2^-24·k·Σ|x||w|, negligible at k = 8), and it differs at all (the
// casts are real): bf16 rounds at least one of 12 results.
TEST(MixedPrecisionTest, RewrittenLayerMatchesFloat32WithinRounding) {
  for (DType low : {DType::kBFloat16, DType::kFloat16}) {
    const double u = low == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    auto g32 = Parse(kMatMulLayer);
    auto glow = Parse(kMatMulLayer);
    ASSERT_TRUE(g32 && glow);
    const ir::Tensor w = testing::RandomFloat({8, 3}, 11);
    ASSERT_TRUE(g32->SetInitializerData(g32->FindValue("w"), w).ok());
    ASSERT_TRUE(glow->SetInitializerData(glow->FindValue("w"), w).ok());
    ASSERT_TRUE(RunPass(*glow, low).changed);
    runtime::TensorMap feeds;
    feeds["x"] = testing::RandomFloat({4, 8}, 12);
    auto a = runtime::cpu::CpuExecutor::Create(*g32);
    auto b = runtime::cpu::CpuExecutor::Create(*glow);
    ASSERT_TRUE(a.ok() && b.ok());
    auto ya = (*a)->Run(feeds);
    auto yb = (*b)->Run(feeds);
    ASSERT_TRUE(ya.ok() && yb.ok()) << ya.status() << yb.status();
    ASSERT_EQ((*yb)[0].dtype(), DType::kFloat32);
    const ir::Tensor& x = feeds["x"];
    int differ = 0;
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        double mag = 0;
        for (int64_t k = 0; k < 8; ++k) mag += std::abs(x.GetAsDouble(i * 8 + k) * w.GetAsDouble(k * 3 + j));
        const double d = std::abs((*ya)[0].GetAsDouble(i * 3 + j) - (*yb)[0].GetAsDouble(i * 3 + j));
        EXPECT_LE(d, 3 * u * mag + 1e-6) << ir::DTypeName(low) << " element " << i << "," << j;
        differ += d > 0;
      }
    }
    if (low == DType::kBFloat16) {
      EXPECT_GT(differ, 0);
    }
  }
}

// --- the training pipeline ----------------------------------------------------------------------

TEST(MixedPrecisionTest, TrainingStepKeepsFloat32MasterWeights) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 8;
  spec.precision = passes::Precision::kBf16;
  spec.expose_gradients = true;
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  int low_gemms = 0;
  for (const ir::Node* n : (*step)->nodes()) {
    if (n->op_type() == "Gemm" && n->domain().empty()) {
      EXPECT_EQ(n->output(0)->type().dtype, DType::kBFloat16) << n->Describe();
      ++low_gemms;
    }
    if (n->op_type() == "SoftmaxCrossEntropy") {
      EXPECT_EQ(n->input(0)->type().dtype, DType::kFloat32) << "the loss runs in float32";
    }
    if (n->op_type() == "AdamUpdate") {
      for (const ir::Value* v : n->inputs()) {
        if (v != nullptr && ir::IsFloat(v->type().dtype)) {
          EXPECT_EQ(v->type().dtype, DType::kFloat32) << n->Describe() << " reads " << v->name();
        }
      }
    }
  }
  EXPECT_EQ(low_gemms, 3 + 2 * 3 - 1);  // 3 forward; dX (not for fc1, x is an input) and dW each
  for (const ir::Value* init : (*step)->initializers()) {
    if (ir::IsFloat(init->type().dtype)) {
      EXPECT_EQ(init->type().dtype, DType::kFloat32) << init->name();
    }
  }
  for (const ir::Value* out : (*step)->outputs()) {
    EXPECT_EQ(out->type().dtype, DType::kFloat32) << out->name();
  }
  EXPECT_EQ((*step)->outputs().size(), 1u + 6u);  // loss + 3 weights + 3 biases
}

}  // namespace
}  // namespace ottr
