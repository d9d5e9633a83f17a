// What mixed precision costs in accuracy, measured on the CPU reference (which runs bf16/fp16
// GEMMs and convolutions the way the GPU does: 16-bit inputs, float32 accumulation, one rounding
// of the output; runtime/cpu/gemm.h).
//
// Per op: MatMul, Gemm (with bias) and Conv (with bias) rewritten by the mixed-precision pass
// against the same op in float64 on the unrounded float32 data. With u the unit roundoff of the
// 16-bit type (bf16: 8 significant bits, u = 2^-8 ≈ 3.9e-3; fp16: 11 bits, u = 2^-11 ≈ 4.9e-4)
// and M = Σ_k |a_k||b_k| (+ |c|) the magnitude of the sum (computed by the float64 op on |inputs|),
// each input is rounded once (relative error ≤ u, so a product is off by ≤ 2u + u²), the float32
// accumulation adds ≤ k·2^-24 relative to M, and the output is rounded once (≤ u·|y| ≤ u·M):
//     |ŷ − y| ≤ (3u + u² + k·2^-24) · M          (a worst-case bound, not a statistical one).
// The tests assert that bound, and that it is not vacuous: the float32 op (no pass) stays below
// k·2^-23·M, and the 16-bit op does round (its largest error exceeds u/16 · M).
//
// Per model: one training step of the MLP and the CNN in bf16 against float32, same parameters
// and batch: the loss and every parameter gradient, normwise (‖g16 − g32‖ / ‖g32‖). Two effects:
//  - rounding: each GEMM/conv rounds its inputs and output (≤ u each, independent between
//    elements, so they add in quadrature in a normwise error): a few u. Alone (ReLU masks pinned
//    to float32's, measured with PyTorch on the same weights) every gradient of the MLP is within
//    1.1u.
//  - selection flips: a ReLU (or MaxPool) whose input is within rounding of its threshold picks
//    the other way, and the gradient through that unit changes by its whole size. With a fraction
//    p of the units flipped the normwise error is about sqrt(2p) (half the units are active). The
//    pre-activations' relative error is about u, and a unit flips when it lies within that of 0:
//    p ≲ 2u per selecting layer (a Gaussian-like pre-activation has density ≤ 0.8/σ at 0).
// Bound for a parameter behind L selecting layers (ReLU/MaxPool between it and the loss):
//     normwise error ≤ 4u + sqrt(2 · L · 2u)        (L = 0: 1.6e-2; L = 1: 0.14; L = 2: 0.19)
// and the loss (continuous in the logits; ∂L/∂z has 1-norm ≤ 2, logits off by a few u·|z|,
// |z| < 1 at initialisation) within u relative. Measured (see the log): the MLP's fc1/fc2
// gradients 0.066 / 0.055, PyTorch autocast bf16 on the same weights and batch gives the same
// (0.066 / 0.050); the heads' 0.004; the losses 1e-5..3e-5 relative. The tests also assert some
// gradient error above u/16, so a step silently left in float32 fails too.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/parser.h"
#include "passes/mixed_precision.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using ir::DType;
using ir::Tensor;

double UnitRoundoff(DType t) { return t == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

Tensor ToDouble(const Tensor& t, bool absolute = false) {
  Tensor out(DType::kFloat64, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.GetAsDouble(i);
    out.data<double>()[i] = absolute ? std::abs(v) : v;
  }
  return out;
}

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? std::move(*g) : nullptr;
}

// Runs `graph` (all inputs graph inputs) on `feeds`; returns output 0.
Tensor RunOn(const ir::Graph& graph, const runtime::TensorMap& feeds) {
  auto exec = runtime::cpu::CpuExecutor::Create(graph);
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (!exec.ok()) return Tensor();
  auto out = (*exec)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

struct OpCase {
  const char* name;
  const char* graph;  // float32 text; "f32" is replaced by "f64" for the reference
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs;
  int64_t k;  // the length of each dot product
};

struct OpError {
  double max_normalized = 0;  // max |ŷ − y| / M
};

OpError MeasureOp(const OpCase& c, DType low, bool rewrite) {
  auto g32 = Parse(c.graph);
  auto g64 = Parse(absl::StrReplaceAll(c.graph, {{"f32", "f64"}}));
  if (!g32 || !g64) return {};
  if (rewrite) {
    auto changed = passes::CreateMixedPrecisionPass(low)->Run(*g32);
    EXPECT_TRUE(changed.ok() && *changed) << c.name;
  }
  runtime::TensorMap f32, f64, f64_abs;
  uint64_t seed = 40;
  for (const auto& [name, dims] : c.inputs) {
    f32[name] = testing::RandomFloat(dims, seed++);
    f64[name] = ToDouble(f32[name]);
    f64_abs[name] = ToDouble(f32[name], /*absolute=*/true);
  }
  const Tensor y = RunOn(*g32, f32);
  const Tensor want = RunOn(*g64, f64);
  const Tensor mag = RunOn(*g64, f64_abs);
  OpError e;
  EXPECT_EQ(y.num_elements(), want.num_elements());
  if (y.num_elements() != want.num_elements()) return e;
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    e.max_normalized = std::max(e.max_normalized, std::abs(y.GetAsDouble(i) - want.GetAsDouble(i)) / mag.GetAsDouble(i));
  }
  return e;
}

const std::vector<OpCase>& OpCases() {
  static const std::vector<OpCase> cases = {
      {"MatMul", R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[64,256]
  input %b : f32[256,48]
  %y : f32[64,48] = MatMul(%a, %b) origin "matmul"
  output %y
})",
       {{"a", {64, 256}}, {"b", {256, 48}}}, 256},
      {"Gemm", R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[32,300]
  input %b : f32[40,300]
  input %c : f32[40]
  %y : f32[32,40] = Gemm(%a, %b, %c) {transB = 1} origin "gemm"
  output %y
})",
       {{"a", {32, 300}}, {"b", {40, 300}}, {"c", {40}}}, 301},
      {"Conv", R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,16,10,10]
  input %w : f32[8,16,3,3]
  input %bias : f32[8]
  %y : f32[2,8,8,8] = Conv(%x, %w, %bias) {kernel_shape = ints[3, 3]} origin "conv"
  output %y
})",
       {{"x", {2, 16, 10, 10}}, {"w", {8, 16, 3, 3}}, {"bias", {8}}}, 16 * 9 + 1},
  };
  return cases;
}

TEST(MixedPrecisionNumericsTest, PerOpErrorAgainstFloat64WithinTheRoundingBound) {
  for (const OpCase& c : OpCases()) {
    const double k_term = static_cast<double>(c.k) * std::ldexp(1.0, -24);
    const OpError f32 = MeasureOp(c, DType::kBFloat16, /*rewrite=*/false);
    EXPECT_LE(f32.max_normalized, 2 * k_term) << c.name << " f32";
    std::printf("%-6s f32  max |err|/M = %.3g\n", c.name, f32.max_normalized);
    for (DType low : {DType::kBFloat16, DType::kFloat16}) {
      const double u = UnitRoundoff(low);
      const OpError e = MeasureOp(c, low, /*rewrite=*/true);
      std::printf("%-6s %-4s max |err|/M = %.3g (bound %.3g)\n", c.name, std::string(ir::DTypeName(low)).c_str(),
                  e.max_normalized, 3 * u + u * u + k_term);
      EXPECT_LE(e.max_normalized, 3 * u + u * u + k_term) << c.name << " " << ir::DTypeName(low);
      EXPECT_GT(e.max_normalized, u / 16) << c.name << " " << ir::DTypeName(low) << ": no rounding seen";
    }
  }
}

// --- one training step, bf16 against float32 ---------------------------------------------------

struct StepOut {
  double loss = 0;
  std::map<std::string, Tensor> grads;
};

StepOut RunStep(const std::string& model, std::vector<int64_t> input_dims, passes::Precision precision) {
  StepOut s;
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(forward.ok()) << forward.status();
  if (!forward.ok()) return s;
  passes::TrainingSpec spec;
  spec.batch = input_dims[0];
  spec.precision = precision;
  spec.expose_gradients = true;
  spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
  const testing::ModelStep m = testing::RunStepOnCpu(**forward, input_dims, spec, 1e-2f);
  if (!m.step) return s;
  s.loss = m.outputs[0].GetAsDouble(0);
  for (size_t i = 1; i < m.outputs.size(); ++i) s.grads[m.step->outputs()[i]->name()] = m.outputs[i];
  return s;
}

double NormwiseError(const Tensor& got, const Tensor& want) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.GetAsDouble(i);
    d += (got.GetAsDouble(i) - w) * (got.GetAsDouble(i) - w);
    n += w * w;
  }
  return std::sqrt(d / n);
}

// `selections`: parameter name prefix -> the number of ReLU/MaxPool layers between it and the loss.
void ExpectBf16StepNearFloat32(const std::string& model, std::vector<int64_t> input_dims,
                               const std::map<std::string, int>& selections) {
  const StepOut f32 = RunStep(model, input_dims, passes::Precision::kFp32);
  const StepOut bf16 = RunStep(model, input_dims, passes::Precision::kBf16);
  const double u = UnitRoundoff(DType::kBFloat16);
  ASSERT_FALSE(f32.grads.empty());
  ASSERT_EQ(f32.grads.size(), bf16.grads.size());
  const double loss_err = std::abs(bf16.loss - f32.loss) / std::abs(f32.loss);
  std::printf("%s: loss f32 %.6f bf16 %.6f (relative error %.3g)\n", model.c_str(), f32.loss, bf16.loss, loss_err);
  EXPECT_LE(loss_err, u) << model;
  double worst = 0;
  for (const auto& [name, want] : f32.grads) {
    ASSERT_TRUE(bf16.grads.contains(name)) << name;
    const Tensor& got = bf16.grads.at(name);
    ASSERT_EQ(got.dtype(), DType::kFloat32) << name << ": gradients arrive in float32";
    const double e = NormwiseError(got, want);
    worst = std::max(worst, e);
    const std::string layer = name.substr(0, name.find('.'));
    ASSERT_TRUE(selections.contains(layer)) << name;
    const double bound = 4 * u + std::sqrt(2.0 * selections.at(layer) * 2 * u);
    std::printf("  %-18s normwise error %.3g (bound %.3g)\n", name.c_str(), e, bound);
    EXPECT_LE(e, bound) << model << " " << name;
  }
  EXPECT_GT(worst, u / 16) << model << ": the bf16 step shows no rounding at all";
}

TEST(MixedPrecisionNumericsTest, MlpStepInBf16NearFloat32) {
  // fc1 -> relu1 -> fc2 -> relu2 -> fc3 -> loss
  ExpectBf16StepNearFloat32("models/mlp/model.onnx", {32, 784}, {{"fc1", 2}, {"fc2", 1}, {"fc3", 0}});
}

TEST(MixedPrecisionNumericsTest, CnnStepInBf16NearFloat32) {
  // conv1 -> relu1 -> conv2 -> relu2 -> pool -> fc1 -> relu3 -> fc2 -> loss
  ExpectBf16StepNearFloat32("models/cnn/model.onnx", {8, 1, 28, 28},
                            {{"conv1", 4}, {"conv2", 3}, {"fc1", 1}, {"fc2", 0}});
}

}  // namespace
}  // namespace ottr
