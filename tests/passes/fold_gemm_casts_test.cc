// fold-gemm-casts (passes/fold_gemm_casts.cc): IR text in, the pass, printed IR compared with the
// expected text and the remark; the graph run before and after on the CPU reference, where the
// folded output may differ from the unfolded one by one 16-bit rounding of the output and of the
// bias (|Δy| ≤ u·(|y| + |b|), the pass header's bound) and must differ somewhere (the fold really
// removed a rounding). Where it must not fire, the IR is unchanged and the remark says why. Then
// bf16 training steps of models/mlp and models/cnn with and without the fold.
#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/fusion_passes.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

const double kU = std::ldexp(1.0, -8);  // bf16 unit roundoff

using testing::IrBody;
using testing::ParseInferred;
using testing::RandomFeeds;
using testing::RunOnCpu;

struct Result {
  std::unique_ptr<ir::Graph> before, after;
  bool changed = false;
  std::string remarks;
};

// Runs `passes` in order on the parsed `text`.
Result RunPasses(std::vector<std::unique_ptr<passes::Pass>> passes, const std::string& text) {
  Result r;
  r.before = ParseInferred(text);
  r.after = ParseInferred(text);
  if (!r.before || !r.after) return r;
  std::ostringstream remarks;
  for (auto& pass : passes) {
    pass->set_remarks(&remarks);
    auto changed = pass->Run(*r.after);
    EXPECT_TRUE(changed.ok()) << changed.status();
    r.changed |= changed.ok() && *changed;
    absl::Status v = ir::VerifyGraph(*r.after);
    EXPECT_TRUE(v.ok()) << v << "\n" << r.after->ToString();
  }
  r.remarks = remarks.str();
  return r;
}

Result RunFold(const std::string& text) {
  std::vector<std::unique_ptr<passes::Pass>> p;
  p.push_back(passes::CreateFoldGemmCastsPass());
  return RunPasses(std::move(p), text);
}

// Every output element of `after` within u·(|before| + bias_max) of `before` (the fold's bound:
// one bf16 rounding of the output and of the bias, whose magnitude is below bias_max; |fl(x) − x|
// ≤ u·|fl(x)| for round to nearest), and some element different (the unfolded graph did round
// there). The slack 2^-10 covers the f32 roundings of P + b and P + bf16(b). `output_ulps` = 2
// where the output itself is bf16: a bias rounding can move it across a rounding boundary, one
// bf16 ulp (≤ 2u·|y|).
void ExpectWithinOneRounding(const Result& r, double bias_max, double output_ulps = 1) {
  const runtime::TensorMap feeds = RandomFeeds(*r.before, 21);
  const std::vector<ir::Tensor> want = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> got = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(want.size(), got.size());
  bool differs = false;
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got[o].dtype(), want[o].dtype()) << "output " << o;
    ASSERT_EQ(got[o].dims(), want[o].dims()) << "output " << o;
    for (int64_t i = 0; i < want[o].num_elements(); ++i) {
      const double w = want[o].GetAsDouble(i), y = got[o].GetAsDouble(i);
      EXPECT_LE(std::abs(y - w), (1 + std::ldexp(1.0, -10)) * kU * (output_ulps * std::abs(w) + bias_max))
          << "output " << o << " element " << i << ": " << y << " vs " << w;
      differs |= y != w;
    }
  }
  EXPECT_TRUE(differs) << "the folded graph computes the same bits: no rounding was removed";
}

// --- rewrites -------------------------------------------------------------------------------------

// One mixed-precision layer as passes/mixed_precision.cc writes it.
constexpr char kGemmBias[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %b : f32[16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "fc"
  %w.bf16 : bf16[16,32] = Cast(%w) {to = 16} origin "fc"
  %b.bf16 : bf16[16] = Cast(%b) {to = 16} origin "fc"
  %h.bf16 : bf16[8,16] = Gemm(%x.bf16, %w.bf16, %b.bf16) {transB = 1} origin "fc"
  %h : f32[8,16] = Cast(%h.bf16) {to = 1} origin "fc"
  output %h
})";

TEST(FoldGemmCastsTest, GemmWithBiasWritesFloat32AndAddsTheFloat32Bias) {
  Result r = RunFold(kGemmBias);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin \"fc\"\n"
            "  %w.bf16 : bf16[16,32] = Cast(%w) {to = 16} origin \"fc\"\n"
            "  %h : f32[8,16] = ottr::FusedGemm(%x.bf16, %w.bf16, %b) {epilogue = \"bias\", output_type = 1, "
            "transB = 1} origin \"fc\"\n"
            "  output %h\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "folded node 'fc' (Gemm) + node 'fc' (Cast) -> ottr::FusedGemm bias with "
                                           "f32 output, bias b in f32"))
      << r.remarks;
  ExpectWithinOneRounding(r, 1.0);
}

TEST(FoldGemmCastsTest, MatMulAndPlainGemmBecomeEpilogueNone) {
  Result r = RunFold(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  input %dy : f32[8,16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "mm"
  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin "mm"
  %dy.bf16 : bf16[8,16] = Cast(%dy) {to = 16} origin "mm/grad"
  %p.bf16 : bf16[8,16] = MatMul(%x.bf16, %w.bf16) origin "mm"
  %p : f32[8,16] = Cast(%p.bf16) {to = 1} origin "mm"
  %dw.bf16 : bf16[32,16] = Gemm(%x.bf16, %dy.bf16) {alpha = 0.5, transA = 1} origin "mm/grad"
  %dw : f32[32,16] = Cast(%dw.bf16) {to = 1} origin "mm/grad"
  output %p
  output %dw
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin \"mm\"\n"
            "  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin \"mm\"\n"
            "  %dy.bf16 : bf16[8,16] = Cast(%dy) {to = 16} origin \"mm/grad\"\n"
            "  %p : f32[8,16] = ottr::FusedGemm(%x.bf16, %w.bf16) {epilogue = \"none\", output_type = 1} origin "
            "\"mm\"\n"
            "  %dw : f32[32,16] = ottr::FusedGemm(%x.bf16, %dy.bf16) {alpha = 0.5, epilogue = \"none\", "
            "output_type = 1, transA = 1} origin \"mm/grad\"\n"
            "  output %p, %dw\n");
  ExpectWithinOneRounding(r, 0.0);
}

// A fused weight gradient with its bias gradient, both widened: both outputs become f32.
TEST(FoldGemmCastsTest, FusedGemmBiasGradientFoldsItsCastToo) {
  Result r = RunFold(R"(graph "g" {
  opset ai.onnx 17
  input %dy : f32[8,16]
  input %x : f32[8,32]
  %dy.bf16 : bf16[8,16] = Cast(%dy) {to = 16} origin "fc/grad"
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "fc"
  %dw.bf16 : bf16[16,32], %db.bf16 : bf16[16] = ottr::FusedGemm(%dy.bf16, %x.bf16) {epilogue = "bgrada", transA = 1} origin "fc/grad"
  %db : f32[16] = Cast(%db.bf16) {to = 1} origin "fc/grad"
  %dw : f32[16,32] = Cast(%dw.bf16) {to = 1} origin "fc/grad"
  output %dw
  output %db
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dy.bf16 : bf16[8,16] = Cast(%dy) {to = 16} origin \"fc/grad\"\n"
            "  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin \"fc\"\n"
            "  %dw : f32[16,32], %db : f32[16] = ottr::FusedGemm(%dy.bf16, %x.bf16) {epilogue = \"bgrada\", "
            "output_type = 1, transA = 1} origin \"fc/grad\"\n"
            "  output %dw, %db\n");
  ExpectWithinOneRounding(r, 0.0);
}

// The point of the fold: with the Cast gone, fuse-gemm-epilogue fuses the ReLU on the f32 value.
TEST(FoldGemmCastsTest, ThenFuseGemmEpilogueFusesTheRelu) {
  std::string text = kGemmBias;
  text.replace(text.find("  output %h"), 11,
               "  %a : f32[8,16] = Relu(%h) origin \"relu\"\n  %a.bf16 : bf16[8,16] = Cast(%a) {to = 16} origin "
               "\"next\"\n  output %a.bf16");
  std::vector<std::unique_ptr<passes::Pass>> p;
  p.push_back(passes::CreateFoldGemmCastsPass());
  p.push_back(passes::CreateFuseGemmEpiloguePass());
  Result r = RunPasses(std::move(p), text);
  ASSERT_TRUE(r.after);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin \"fc\"\n"
            "  %w.bf16 : bf16[16,32] = Cast(%w) {to = 16} origin \"fc\"\n"
            "  %a : f32[8,16] = ottr::FusedGemm(%x.bf16, %w.bf16, %b) {epilogue = \"relu_bias\", output_type = 1, "
            "transB = 1} origin \"fc\"\n"
            "  %a.bf16 : bf16[8,16] = Cast(%a) {to = 16} origin \"next\"\n"
            "  output %a.bf16\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "fuse-gemm-epilogue: fused node 'fc' (ottr.FusedGemm) + node 'relu' (Relu) "
                                           "-> ottr::FusedGemm relu_bias"))
      << r.remarks;
  // The output is the next layer's bf16 input: relu(round(y)) rounded again equals round(relu(y)),
  // so only the bias rounding (b is not exact in bf16) can move it, by up to one bf16 ulp.
  ExpectWithinOneRounding(r, 1.0, /*output_ulps=*/2);
}

// --- must not fire --------------------------------------------------------------------------------

struct DeclineCase {
  const char* name;
  const char* text;
  const char* reason;  // in the remark; "" when the Cast is no GEMM's and there is no remark
};

class FoldGemmCastsDeclineTest : public ::testing::TestWithParam<DeclineCase> {};

TEST_P(FoldGemmCastsDeclineTest, LeavesTheGraphAndSaysWhy) {
  Result r = RunFold(GetParam().text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.after->ToString(), r.before->ToString());
  if (*GetParam().reason == '\0') {
    EXPECT_EQ(r.remarks, "");
  } else {
    EXPECT_TRUE(absl::StrContains(r.remarks, "fold-gemm-casts: declined")) << r.remarks;
    EXPECT_TRUE(absl::StrContains(r.remarks, GetParam().reason)) << r.remarks;
  }
}

const DeclineCase kDeclineCases[] = {
    DeclineCase{"LowPrecisionProductHasAnotherUser", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "mm"
  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin "mm"
  %p.bf16 : bf16[8,16] = MatMul(%x.bf16, %w.bf16) origin "mm"
  %p : f32[8,16] = Cast(%p.bf16) {to = 1} origin "mm"
  %q : bf16[8,16] = Relu(%p.bf16) origin "relu"
  output %p
  output %q
})",
                "read by 2 nodes"},
    DeclineCase{"LowPrecisionProductIsAGraphOutput", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "mm"
  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin "mm"
  %p.bf16 : bf16[8,16] = MatMul(%x.bf16, %w.bf16) origin "mm"
  %p : f32[8,16] = Cast(%p.bf16) {to = 1} origin "mm"
  output %p
  output %p.bf16
})",
                "or is a graph output"},
    DeclineCase{"Float32Gemm", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  %p : f32[8,16] = MatMul(%x, %w) origin "mm"
  %q : f32[8,16] = Cast(%p) {to = 1} origin "cast"
  output %q
})",
                "is f32 from f32 operands, not a 16-bit GEMM"},
    DeclineCase{"CastToAnotherType", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[32,16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "mm"
  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin "mm"
  %p.bf16 : bf16[8,16] = MatMul(%x.bf16, %w.bf16) origin "mm"
  %p : f64[8,16] = Cast(%p.bf16) {to = 11} origin "mm"
  output %p
})",
                "casts to f64, not f32"},
    DeclineCase{"BiasIsNotACastOfFloat32", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %b : bf16[16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "fc"
  %w.bf16 : bf16[16,32] = Cast(%w) {to = 16} origin "fc"
  %h.bf16 : bf16[8,16] = Gemm(%x.bf16, %w.bf16, %b) {transB = 1} origin "fc"
  %h : f32[8,16] = Cast(%h.bf16) {to = 1} origin "fc"
  output %h
})",
                "the bias b is not a Cast of an f32 value"},
    DeclineCase{"GemmBetaIsNotOne", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  input %w : f32[16,32]
  input %b : f32[16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "fc"
  %w.bf16 : bf16[16,32] = Cast(%w) {to = 16} origin "fc"
  %b.bf16 : bf16[16] = Cast(%b) {to = 16} origin "fc"
  %h.bf16 : bf16[8,16] = Gemm(%x.bf16, %w.bf16, %b.bf16) {beta = 0.5, transB = 1} origin "fc"
  %h : f32[8,16] = Cast(%h.bf16) {to = 1} origin "fc"
  output %h
})",
                "with beta 0.5 is not a bias row"},
    DeclineCase{"GeluAuxWouldChangeType", R"(graph "g" {
  opset ai.onnx 20
  input %x : f32[8,32]
  input %w : f32[32,16]
  input %b : f32[16]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "mm"
  %w.bf16 : bf16[32,16] = Cast(%w) {to = 16} origin "mm"
  %b.bf16 : bf16[16] = Cast(%b) {to = 16} origin "mm"
  %y.bf16 : bf16[8,16], %pre : bf16[8,16] = ottr::FusedGemm(%x.bf16, %w.bf16, %b.bf16) {epilogue = "gelu_aux_bias"} origin "mm"
  %y : f32[8,16] = Cast(%y.bf16) {to = 1} origin "mm"
  output %y
  output %pre
})",
                "GELU pre-activation would change type"},
    DeclineCase{"CastOfNoGemm", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[8,32]
  %x.bf16 : bf16[8,32] = Cast(%x) {to = 16} origin "a"
  %y : bf16[8,32] = Relu(%x.bf16) origin "relu"
  %z : f32[8,32] = Cast(%y) {to = 1} origin "b"
  output %z
})",
                ""}};

INSTANTIATE_TEST_SUITE_P(Cases, FoldGemmCastsDeclineTest, ::testing::ValuesIn(kDeclineCases),
                         [](const ::testing::TestParamInfo<DeclineCase>& info) { return std::string(info.param.name); });

// --- bf16 training steps with and without the fold ------------------------------------------------

struct StepOut {
  double loss = 0;
  std::map<std::string, ir::Tensor> grads;
  int casts = 0;
};

// One bf16 step (Adam, fused epilogues, gradients exposed) with the float parameters rounded to
// bf16 first, so that a Cast of a bias is exact (see ExpectFoldWithinOneRounding).
StepOut RunStep(const std::string& model, std::vector<int64_t> x_dims, bool fold) {
  StepOut s;
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(forward.ok()) << forward.status();
  if (!forward.ok()) return s;
  for (ir::Value* v : (*forward)->initializers()) {
    if (v->type().dtype != ir::DType::kFloat32) continue;
    ir::Tensor t = *v->initializer();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      t.data<float>()[i] = ir::BFloat16ToFloat(ir::FloatToBFloat16(t.data<float>()[i]));
    }
    EXPECT_TRUE((*forward)->SetInitializerData(v, std::move(t)).ok());
  }
  passes::TrainingSpec spec;
  spec.batch = x_dims[0];
  spec.precision = passes::Precision::kBf16;
  spec.expose_gradients = true;
  spec.fuse_epilogues = true;
  if (!fold) spec.disabled_passes = {"fold-gemm-casts"};
  passes::PassManagerOptions o;
  o.check_changed = true;
  const testing::ModelStep m = testing::RunStepOnCpu(**forward, x_dims, spec, 1e-3f, o);
  if (!m.step) return s;
  for (const ir::Node* n : m.step->nodes()) s.casts += n->op_type() == "Cast";
  s.loss = m.outputs[0].GetAsDouble(0);
  for (size_t i = 1; i < m.outputs.size(); ++i) s.grads[m.step->outputs()[i]->name()] = m.outputs[i];
  return s;
}

// Why one rounding bounds the difference. With every bias exact in bf16, the two graphs differ
// only where a GEMM's product was rounded to bf16 and widened (unfolded) instead of kept in f32
// (folded). A hidden layer's product feeds ReLU and then the next GEMM's bf16 Cast: round(relu(y))
// = relu(round(y)) and rounding is idempotent, so the next layer's operands, the ReLU masks and
// the dX products' bf16 Casts are bit-identical in both graphs. What differs:
//  - the logits, by ≤ u·|z| each, so the loss by ≤ Σ|∂L/∂z|·u·|z| ≤ 2u·max|z| (∂L/∂z per sample
//    has 1-norm ≤ 2; the logits are below 1 at initialisation): within u relative;
//  - each weight/bias gradient is its GEMM's f32 product instead of that product rounded to bf16:
//    ≤ u per element, so ≤ u normwise; plus the perturbation of the logits carried into
//    ∂L/∂z, second order (it moves bf16(∂L/∂z) by one ulp in the rare elements within ~u·|z|·p of
//    a rounding boundary). Bound: 2u normwise for every gradient.
// The fold must also have removed Casts and changed some gradient (> u/16 normwise: a step where
// the pass silently did not fire fails).
void ExpectFoldWithinOneRounding(const std::string& model, std::vector<int64_t> x_dims, int removed_casts) {
  const StepOut plain = RunStep(model, x_dims, false);
  const StepOut folded = RunStep(model, x_dims, true);
  ASSERT_FALSE(plain.grads.empty());
  ASSERT_EQ(plain.grads.size(), folded.grads.size());
  EXPECT_EQ(plain.casts - folded.casts, removed_casts) << plain.casts << " -> " << folded.casts;
  const double loss_err = std::abs(folded.loss - plain.loss) / std::abs(plain.loss);
  std::printf("%s: loss %.7f unfolded, %.7f folded (relative %.3g)\n", model.c_str(), plain.loss, folded.loss,
              loss_err);
  EXPECT_LE(loss_err, kU) << model;
  double worst = 0;
  for (const auto& [name, want] : plain.grads) {
    ASSERT_TRUE(folded.grads.contains(name)) << name;
    const ir::Tensor& got = folded.grads.at(name);
    ASSERT_EQ(got.dtype(), ir::DType::kFloat32) << name;
    double d = 0, n = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      const double w = want.GetAsDouble(i), y = got.GetAsDouble(i);
      d += (y - w) * (y - w);
      n += w * w;
    }
    const double e = std::sqrt(d / n);
    worst = std::max(worst, e);
    std::printf("  %-14s normwise difference %.3g (bound 2u = %.3g)\n", name.c_str(), e, 2 * kU);
    EXPECT_LE(e, 2 * kU) << model << " " << name;
  }
  EXPECT_GT(worst, kU / 16) << model << ": the folded step computes the same gradients";
}

TEST(FoldGemmCastsTrainingTest, MlpBf16StepWithinOneRoundingOfTheUnfoldedStep) {
  // 3 layers: forward output and bias Casts (6), dX output Casts of fc3, fc2 (2), weight- and
  // bias-gradient Casts (6).
  // 13: the last layer (10 outputs) keeps its bias sum unfused in bf16 (fuse-gemm-bgrad declines
  // a 16-bit BGRAD for fewer than 64 bias elements), so that sum's Cast stays.
  ExpectFoldWithinOneRounding("models/mlp/model.onnx", {32, 784}, 13);
}

TEST(FoldGemmCastsTrainingTest, CnnBf16StepWithinOneRoundingOfTheUnfoldedStep) {
  // fc1, fc2 as in the MLP (2 + 2 + 2 + 4); the convolutions keep their Casts.
  ExpectFoldWithinOneRounding("models/cnn/model.onnx", {8, 1, 28, 28}, 9);  // the same for fc2
}

}  // namespace
}  // namespace ottr
