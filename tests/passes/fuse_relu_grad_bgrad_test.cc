// fuse-relu-grad-bgrad (passes/fuse_relu_grad_bgrad.cc) and the op it makes,
// ottr::ReluGradBiasGrad (ir/ops/fused_ops.cc, CPU kernel in runtime/cpu/activation_grad_kernels.cc):
// IR text in, the printed IR and remark out, the graph run before and after on the CPU reference;
// the cases where it must not fire; the training step of models/mlp with the pass, its memory
// plan, and the same step's numbers with and without it.
//
// Numbers: ReduceSum and the fused kernel both sum in double in row order and round once, so a
// float32 bias gradient is the same bits. With bf16 dX the unfused graph rounds the sum to bf16
// before its widening Cast; the fused node rounds the same double sum to float32 once, so the two
// differ by at most one bf16 rounding (2^-8 relative) and the fused one is the float32 rounding
// of the exact sum of the bf16 dX values.
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
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

using testing::IrBody;
using testing::PassRun;
using testing::RunOnCpu;

PassRun RunPass(const std::string& text) {
  return testing::RunPassOnText(passes::CreateFuseReluGradBgradPass(), text);
}

// The backward of a ReLU layer followed by the bias gradient of the layer below (as autodiff
// writes it): ReduceSum keepdims 1 and a Reshape to the bias shape.
constexpr char kF32[] = R"(graph "g" {
  opset ai.onnx 17
  input %da : f32[24,40]
  input %a : f32[24,40]
  %dh : f32[24,40] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad"
  %s : f32[1,40] = ReduceSum(%dh, %axes) {keepdims = 1} origin "fc/grad"
  %shape : i64[1] = Constant() {value = tensor<i64[1] [40]>} origin "fc/grad"
  %b.grad : f32[40] = Reshape(%s, %shape) origin "fc/grad"
  output %dh
  output %b.grad
})";

TEST(FuseReluGradBgradTest, FusesReluGradAndTheBiasGradient) {
  PassRun r = RunPass(kF32);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : f32[24,40], %b.grad : f32[40] = ottr::ReluGradBiasGrad(%da, %a) origin \"relu/grad\"\n"
            "  output %dh, %b.grad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-relu-grad-bgrad: fused node 'relu/grad' (ottr.ReluGrad) + node "
                                           "'fc/grad' (ReduceSum) -> ottr::ReluGradBiasGrad (bias gradient in f32)"))
      << r.remarks;
  // Random dY and Y in [-1, 1): about half of the elements pass the ReLU.
  testing::ExpectSameOutputs(r, 5);
}

TEST(FuseReluGradBgradTest, FusesTheSumWithoutKeptDims) {
  std::string text = kF32;
  const std::string from =
      "  %s : f32[1,40] = ReduceSum(%dh, %axes) {keepdims = 1} origin \"fc/grad\"\n"
      "  %shape : i64[1] = Constant() {value = tensor<i64[1] [40]>} origin \"fc/grad\"\n"
      "  %b.grad : f32[40] = Reshape(%s, %shape) origin \"fc/grad\"\n";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(),
               "  %b.grad : f32[40] = ReduceSum(%dh, %axes) {keepdims = 0} origin \"fc/grad\"\n");
  PassRun r = RunPass(text);
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : f32[24,40], %b.grad : f32[40] = ottr::ReluGradBiasGrad(%da, %a) origin \"relu/grad\"\n"
            "  output %dh, %b.grad\n");
  testing::ExpectSameOutputs(r, 6);
}

// bf16 steps: narrow-exact-ops leaves ReluGrad in bf16, the sum is bf16 and then widened.
constexpr char kBf16[] = R"(graph "g" {
  opset ai.onnx 17
  input %da : bf16[64,48]
  input %a : bf16[64,48]
  %dh : bf16[64,48] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad"
  %s : bf16[1,48] = ReduceSum(%dh, %axes) {keepdims = 1} origin "fc/grad"
  %shape : i64[1] = Constant() {value = tensor<i64[1] [48]>} origin "fc/grad"
  %low : bf16[48] = Reshape(%s, %shape) origin "fc/grad"
  %b.grad : f32[48] = Cast(%low) {to = 1} origin "fc/grad"
  output %dh
  output %b.grad
})";

TEST(FuseReluGradBgradTest, Bf16FoldsTheWideningCastAndSumsInFloat32) {
  PassRun r = RunPass(kBf16);
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %dh : bf16[64,48], %b.grad : f32[48] = ottr::ReluGradBiasGrad(%da, %a) {bias_type = 1} origin "
            "\"relu/grad\"\n"
            "  output %dh, %b.grad\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "+ its widening node 'fc/grad' (Cast)")) << r.remarks;
  runtime::TensorMap feeds;
  feeds["da"] = testing::RandomBFloat16({64, 48}, 7);
  feeds["a"] = testing::RandomBFloat16({64, 48}, 8);
  const std::vector<ir::Tensor> before = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> after = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_TRUE(after[0].BitwiseEquals(before[0]));
  ASSERT_EQ(after[1].dtype(), ir::DType::kFloat32);
  int nonzero = 0;
  for (int64_t c = 0; c < 48; ++c) {
    double exact = 0;
    for (int64_t i = 0; i < 64; ++i) exact += after[0].GetAsDouble(i * 48 + c);
    const double got = after[1].GetAsDouble(c);
    EXPECT_EQ(got, static_cast<double>(static_cast<float>(exact))) << "column " << c;
    EXPECT_LE(std::abs(before[1].GetAsDouble(c) - got), std::ldexp(std::abs(got), -8)) << "column " << c;
    nonzero += got != 0.0;
  }
  EXPECT_GT(nonzero, 40);
}

// The pass must leave these alone, saying why.
struct Decline {
  const char* name;
  const char* text;
  const char* reason;
};

TEST(FuseReluGradBgradTest, DeclinesWhatItCannotFuse) {
  const Decline cases[] = {
      {"no bias gradient", R"(graph "g" {
  opset ai.onnx 17
  input %da : f32[8,16]
  input %a : f32[8,16]
  %dh : f32[8,16] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  output %dh
})",
       "no bias gradient (ReduceSum over axis 0 to a vector) reads dh"},
      {"sum over the other axis", R"(graph "g" {
  opset ai.onnx 17
  input %da : f32[8,16]
  input %a : f32[8,16]
  %dh : f32[8,16] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [1]>} origin "fc/grad"
  %s : f32[8] = ReduceSum(%dh, %axes) {keepdims = 0} origin "fc/grad"
  output %dh
  output %s
})",
       "no bias gradient (ReduceSum over axis 0 to a vector) reads dh"},
      {"kept dims read twice", R"(graph "g" {
  opset ai.onnx 17
  input %da : f32[8,16]
  input %a : f32[8,16]
  %dh : f32[8,16] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  %axes : i64[1] = Constant() {value = tensor<i64[1] [0]>} origin "fc/grad"
  %s : f32[1,16] = ReduceSum(%dh, %axes) {keepdims = 1} origin "fc/grad"
  %shape : i64[1] = Constant() {value = tensor<i64[1] [16]>} origin "fc/grad"
  %b.grad : f32[16] = Reshape(%s, %shape) origin "fc/grad"
  output %dh
  output %b.grad
  output %s
})",
       "no bias gradient (ReduceSum over axis 0 to a vector) reads dh"},
      {"a 4-D activation", R"(graph "g" {
  opset ai.onnx 17
  input %da : f32[2,3,4,4]
  input %a : f32[2,3,4,4]
  %dh : f32[2,3,4,4] = ottr::ReluGrad(%da, %a) origin "relu/grad"
  output %dh
})",
       "dX f32[2,3,4,4] is not a static matrix"},
  };
  for (const Decline& c : cases) {
    SCOPED_TRACE(c.name);
    PassRun r = RunPass(c.text);
    ASSERT_TRUE(r.after);
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
    EXPECT_TRUE(absl::StrContains(r.remarks, std::string("declined node 'relu/grad' (ottr.ReluGrad): ") + c.reason))
        << r.remarks;
  }
}

TEST(ReluGradBiasGradOpTest, ShapeInferenceRejectsBadOperands) {
  const struct {
    const char* node;
    const char* error;
  } cases[] = {
      {"%dx : f32[8,16], %db : f16[16] = ottr::ReluGradBiasGrad(%dy, %y) {bias_type = 10}", "bias_type 10 must be"},
      {"%dx : f32[8,16], %db : f32[16] = ottr::ReluGradBiasGrad(%dy, %z)", "must be one static 2-D float type"},
  };
  for (const auto& c : cases) {
    const std::string text = absl::StrCat(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8,16]
  input %y : f32[8,16]
  input %z : f32[8,15]
  )", c.node, R"(
  output %db
})");
    auto g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
    EXPECT_FALSE(s.ok()) << c.node;
    EXPECT_TRUE(absl::StrContains(s.message(), c.error)) << s;
  }
}

// The optional third output dXT (kmajor-gemm-operands' K-major operand): shape inference gives
// it [cols, rows], and the CPU kernel writes dX transposed, bit for bit, beside the same dX and dB
// as the two-output node (random inputs, float32 and bf16, a non-square shape).
TEST(ReluGradBiasGradOpTest, ThirdOutputIsDxTransposed) {
  for (const char* t : {"f32", "bf16"}) {
    SCOPED_TRACE(t);
    const std::string text = absl::StrCat(R"(graph "g" {
  opset ai.onnx 17
  input %dy : )", t, R"([37,20]
  input %y : )", t, R"([37,20]
  %dx : )", t, R"([37,20], %db : )", t, R"([20], %dxt : )", t, R"([20,37] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu/grad"
  %dx2 : )", t, R"([37,20], %db2 : )", t, R"([20] = ottr::ReluGradBiasGrad(%dy, %y) origin "relu/grad2"
  output %dx
  output %db
  output %dxt
  output %dx2
  output %db2
})");
    auto g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), **g).ok());
    EXPECT_EQ((*g)->FindValue("dxt")->type().ToString(), absl::StrCat(t, "[20,37]"));
    auto e = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(e.ok()) << e.status();
    const bool bf16 = std::string(t) == "bf16";
    runtime::TensorMap feeds;
    feeds["dy"] = bf16 ? testing::RandomBFloat16({37, 20}, 11) : testing::RandomFloat({37, 20}, 11);
    feeds["y"] = bf16 ? testing::RandomBFloat16({37, 20}, 12) : testing::RandomFloat({37, 20}, 12);
    auto out = (*e)->Run(feeds);
    ASSERT_TRUE(out.ok()) << out.status();
    const ir::Tensor &dx = (*out)[0], &dxt = (*out)[2];
    EXPECT_TRUE(dx.BitwiseEquals((*out)[3]));
    EXPECT_TRUE((*out)[1].BitwiseEquals((*out)[4]));
    int zeros = 0, wrong = 0;
    for (int64_t r = 0; r < 37; ++r) {
      for (int64_t c = 0; c < 20; ++c) {
        const double v = dx.GetAsDouble(r * 20 + c);
        zeros += v == 0;
        wrong += !(dxt.GetAsDouble(c * 37 + r) == v);
      }
    }
    EXPECT_EQ(wrong, 0);
    EXPECT_GT(zeros, 0);        // the ReLU mask cleared some elements...
    EXPECT_LT(zeros, 37 * 20);  // ...and kept others
  }
}

passes::TrainingSpec MlpSpec(passes::Precision p, bool fuse) {
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = p;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.narrow_exact_ops = true;
  spec.fuse_relu_grad_bgrad = fuse;
  // The small MLP's ReLUs go into DRELU_BGRAD epilogues; without that pass the ReluGrads stay,
  // as they do for GEMMs too large for cuBLASLt's activation epilogues (the MLP 4096x4).
  spec.disabled_passes = {"fuse-gemm-dact-bgrad"};
  return spec;
}

TEST(FuseReluGradBgradTrainingTest, MlpStepTakesEveryHiddenLayerAndPlans) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  for (passes::Precision p : {passes::Precision::kFp32, passes::Precision::kBf16}) {
    SCOPED_TRACE(static_cast<int>(p));
    passes::PassManagerOptions o;
    std::ostringstream remarks;
    o.remarks = &remarks;
    // fuse-linear-sce (or fuse-linear-relu-grad) would take the last hidden layer's
    // ReluGradBiasGrad into the float32 head.
    passes::TrainingSpec spec = MlpSpec(p, true);
    spec.disabled_passes.insert("fuse-linear-sce");
    spec.disabled_passes.insert("fuse-linear-relu-grad");  // and fuse-linear-relu-grad the same
    auto step = passes::BuildTrainingGraph(**forward, spec, o);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(CountOps(**step, "ReluGradBiasGrad"), 2) << remarks.str();
    EXPECT_EQ(CountOps(**step, "ReluGrad"), 0);
    // The last layer's bias gradient (of the loss gradient, no ReLU) stays with its weight gradient.
    // In bf16 fuse-gemm-bgrad declines that 10-element bias (its 16-bit BGRAD is slow): a ReduceSum.
    const bool bf16 = p == passes::Precision::kBf16;
    EXPECT_TRUE(absl::StrContains(remarks.str(), bf16 ? "fuse-gemm-bgrad: declined node 'fc3/grad' (ReduceSum)"
                                                      : "fuse-gemm-bgrad: fused node 'fc3/grad'"))
        << remarks.str();
    EXPECT_EQ(CountOps(**step, "ReduceSum"), bf16 ? 1 : 0);
    auto plan = passes::PlanMemory(**step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(passes::VerifyPlan(**step, *plan).ok());
  }
  // Without the switch the pass is not in the pipeline.
  auto off = passes::BuildTrainingGraph(**forward, MlpSpec(passes::Precision::kFp32, false));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(CountOps(**off, "ReluGradBiasGrad"), 0);
}

// One float32 step with and without the pass: every output (loss, updated parameters and Adam
// state through the step's updates) is the same bits, as the sums are.
TEST(FuseReluGradBgradTrainingTest, Fp32MlpStepComputesTheSameBits) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec with = MlpSpec(passes::Precision::kFp32, true);
  passes::TrainingSpec without = MlpSpec(passes::Precision::kFp32, false);
  with.expose_gradients = without.expose_gradients = true;
  testing::ModelStep a = testing::RunStepOnCpu(**forward, {16, 784}, with, 1e-3f);
  testing::ModelStep b = testing::RunStepOnCpu(**forward, {16, 784}, without, 1e-3f);
  testing::ExpectSameStepOutputs(a, b);
}

}  // namespace
}  // namespace ottr
