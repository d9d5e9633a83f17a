// Loss scaling (passes/loss_scaling.h): the unscale-gradients pass on IR text (and where it must
// not fire), the pipeline's choices per precision, and on the CPU reference:
//   - a power-of-two scale is exact in float32: a scaled float32 run (with and without gradient
//     clipping) is bit-identical to an unscaled one, so scale, seed, unscale and the clip
//     correction introduce no arithmetic of their own;
//   - a forced overflow (a float16 backward under a scale of 2^30, and a batch with an
//     infinity) skips the step exactly (parameters, Adam state, step counter bit for bit), halves
//     the scale, and training then follows, bit for bit, a run started at the reduced scale; the
//     scale doubles after growth_interval good steps;
//   - float16 without scaling flushes small gradients to zero where the scaled run gets them
//     within float16's rounding.
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/loss_scaling.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

using ir::Tensor;
using Kind = passes::LossScaleSpec::Kind;

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? std::move(*g) : nullptr;
}

std::string Canonical(const std::string& text) {
  auto g = Parse(text);
  return g ? g->ToString() : "";
}

// A step after group-optimizer-updates: two parameters, one SGD update node.
constexpr char kGroupedStep[] = R"(graph "step" {
  opset ai.onnx 17
  input %ottr.lr : f32[]
  input %loss : f32[]
  input %w.grad : f32[3]
  input %b.grad : f32[2]
  init %w : f32[3] = elided
  init %b : f32[2] = elided
  init %ottr.loss_scale : f32[] = [1024.0]
  init %ottr.step : i64[] = [0]
  %ottr.one : i64[] = Constant() {value = tensor<i64[] [1]>} origin "optimizer"
  %ottr.step.new : i64[] = Add(%ottr.step, %ottr.one) origin "optimizer"
  %w.new : f32[3], %b.new : f32[2] = ottr::SGDUpdateN(%ottr.lr, %ottr.step.new, %w, %b, %w.grad, %b.grad) {dampening = 0.0, momentum = 0.0, nesterov = 0, weight_decay = 0.0} origin "group-optimizer-updates"
  output %loss
  update %ottr.step <- %ottr.step.new
  update %w <- %w.new
  update %b <- %b.new
})";

TEST(UnscaleGradientsTest, GuardsUnscalesAndUpdatesTheScale) {
  auto g = Parse(kGroupedStep);
  ASSERT_TRUE(g);
  passes::LossScaleSpec spec;
  spec.kind = Kind::kDynamic;
  spec.growth_interval = 5;
  auto pass = passes::CreateUnscaleGradientsPass(spec);
  std::ostringstream remarks;
  pass->set_remarks(&remarks);
  auto changed = pass->Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(ir::VerifyGraph(*g).ok()) << g->ToString();
  EXPECT_EQ(g->ToString(), Canonical(R"(graph "step" {
  opset ai.onnx 17
  input %ottr.lr : f32[]
  input %loss : f32[]
  input %w.grad : f32[3]
  input %b.grad : f32[2]
  init %w : f32[3] = elided
  init %b : f32[2] = elided
  init %ottr.loss_scale : f32[] = [1024.0]
  init %ottr.step : i64[] = [0]
  init %ottr.loss_scale.good_steps : i64[] = [0]
  %ottr.one : i64[] = Constant() {value = tensor<i64[] [1]>} origin "optimizer"
  %ottr.step.new : i64[] = Add(%ottr.step, %ottr.one) origin "optimizer"
  %ottr.grads_finite : bool[] = ottr::AllFinite(%w.grad, %b.grad, %loss) origin "unscale-gradients"
  %w.new : f32[3], %b.new : f32[2] = ottr::SGDUpdateN(%ottr.lr, %ottr.step.new, %w, %b, %w.grad, %b.grad, %ottr.loss_scale, %ottr.grads_finite) {dampening = 0.0, guarded = 1, momentum = 0.0, nesterov = 0, unscale = 1, weight_decay = 0.0} origin "group-optimizer-updates"
  %ottr.step.unscaled : i64[] = Where(%ottr.grads_finite, %ottr.step.new, %ottr.step) origin "unscale-gradients"
  %ottr.loss_scale.new : f32[], %ottr.loss_scale.good_steps.new : i64[] = ottr::LossScaleUpdate(%ottr.loss_scale, %ottr.loss_scale.good_steps, %ottr.grads_finite) {backoff_factor = 0.5, growth_factor = 2.0, growth_interval = 5} origin "unscale-gradients"
  output %loss
  update %ottr.step <- %ottr.step.unscaled
  update %w <- %w.new
  update %b <- %b.new
  update %ottr.loss_scale <- %ottr.loss_scale.new
  update %ottr.loss_scale.good_steps <- %ottr.loss_scale.good_steps.new
})"));
  EXPECT_TRUE(absl::StrContains(remarks.str(), "1 update node(s)")) << remarks.str();
  // A second run changes nothing.
  auto again = passes::CreateUnscaleGradientsPass(spec)->Run(*g);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
}

TEST(UnscaleGradientsTest, StaticScaleHasNoScaleUpdate) {
  auto g = Parse(kGroupedStep);
  ASSERT_TRUE(g);
  passes::LossScaleSpec spec;
  spec.kind = Kind::kStatic;
  auto changed = passes::CreateUnscaleGradientsPass(spec)->Run(*g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_EQ(CountOps(*g, "AllFinite"), 1);
  EXPECT_EQ(CountOps(*g, "LossScaleUpdate"), 0);
  EXPECT_EQ(g->FindValue(passes::kGoodStepsState), nullptr);
  EXPECT_EQ(g->updates().size(), 3u);
}

TEST(UnscaleGradientsTest, NanGuardChecksLossAndGradientsWithoutScaling) {
  auto g = Parse(kGroupedStep);
  ASSERT_TRUE(g);
  auto changed = passes::CreateNanGuardPass()->Run(*g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_TRUE(ir::VerifyGraph(*g).ok()) << g->ToString();
  const ir::Value* ok = g->FindValue("ottr.grads_finite");
  ASSERT_NE(ok, nullptr);
  std::vector<std::string> checked;
  for (const ir::Value* v : ok->producer()->inputs()) checked.push_back(v->name());
  EXPECT_EQ(checked, (std::vector<std::string>{"w.grad", "b.grad", "loss"}));
  const ir::Node* update = g->FindValue("w.new")->producer();
  ASSERT_EQ(update->num_inputs(), 7);
  EXPECT_EQ(update->input(6), ok);
  EXPECT_EQ(update->GetInt("guarded", 0), 1);
  EXPECT_EQ(update->GetInt("unscale", 0), 0);
  EXPECT_EQ(CountOps(*g, "LossScaleUpdate"), 0);
  ASSERT_EQ(g->updates()[0].target->name(), passes::kStepState);
  EXPECT_EQ(g->updates()[0].value->name(), "ottr.step.guarded");
  EXPECT_EQ(g->updates()[0].value->producer()->input(1)->name(), "ottr.step.new");
  EXPECT_EQ(update->input(1)->name(), "ottr.step.new") << "the update reads the unguarded step";
  auto again = passes::CreateNanGuardPass()->Run(*g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(UnscaleGradientsTest, FoldsAFloatGuardIntoTheCheck) {
  // A float guard already on the update (here another scalar) joins AllFinite; the scale takes its slot.
  std::string text = kGroupedStep;
  text.replace(text.find("  input %b.grad"), 0, "  input %other : f32[]\n");
  text.replace(text.find("%b.grad) {dampening"), std::string("%b.grad) {dampening").size(),
               "%b.grad, %other) {guarded = 1, dampening");
  auto g = Parse(text);
  ASSERT_TRUE(g);
  passes::LossScaleSpec spec;
  spec.kind = Kind::kStatic;
  auto changed = passes::CreateUnscaleGradientsPass(spec)->Run(*g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  const ir::Value* ok = g->FindValue("ottr.grads_finite");
  ASSERT_NE(ok, nullptr);
  std::vector<std::string> checked;
  for (const ir::Value* v : ok->producer()->inputs()) checked.push_back(v->name());
  EXPECT_EQ(checked, (std::vector<std::string>{"w.grad", "b.grad", "other", "loss"}));
  const ir::Node* update = g->FindValue("w.new")->producer();
  ASSERT_EQ(update->num_inputs(), 8);
  EXPECT_EQ(update->input(6)->name(), passes::kLossScaleState);
  EXPECT_EQ(update->input(7), ok);
}

TEST(UnscaleGradientsTest, RefusesSingleTensorUpdatesAndAMissingScale) {
  auto g = Parse(R"(graph "step" {
  opset ai.onnx 17
  input %ottr.lr : f32[]
  input %loss : f32[]
  input %w.grad : f32[3]
  init %w : f32[3] = elided
  init %ottr.loss_scale : f32[] = [1024.0]
  init %ottr.step : i64[] = [1]
  %w.new : f32[3] = ottr::SGDUpdate(%w, %w.grad, %ottr.lr, %ottr.step) origin "optimizer/w"
  output %loss
  update %w <- %w.new
})");
  ASSERT_TRUE(g);
  passes::LossScaleSpec spec;
  spec.kind = Kind::kDynamic;
  auto r = passes::CreateUnscaleGradientsPass(spec)->Run(*g);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "single-tensor")) << r.status();

  auto no_scale = Parse(std::string(kGroupedStep).replace(std::string(kGroupedStep).find("  init %ottr.loss_scale"),
                                                           std::string("  init %ottr.loss_scale : f32[] = [1024.0]\n").size(), ""));
  ASSERT_TRUE(no_scale);
  r = passes::CreateUnscaleGradientsPass(spec)->Run(*no_scale);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

std::unique_ptr<ir::Graph> Mlp() {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  EXPECT_TRUE(forward.ok()) << forward.status();
  return forward.ok() ? std::move(*forward) : nullptr;
}

std::unique_ptr<ir::Graph> Step(const ir::Graph& forward, const passes::TrainingSpec& spec) {
  auto step = passes::BuildTrainingGraph(forward, spec);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? std::move(*step) : nullptr;
}

TEST(LossScalingPipelineTest, OnForFp16ByDefaultOffOtherwise) {
  auto forward = Mlp();
  ASSERT_TRUE(forward);
  passes::TrainingSpec spec;
  spec.batch = 4;
  for (passes::Precision p : {passes::Precision::kFp32, passes::Precision::kBf16, passes::Precision::kFp16}) {
    for (Kind k : {Kind::kAuto, Kind::kNone, Kind::kStatic, Kind::kDynamic}) {
      spec.precision = p;
      spec.loss_scale.kind = k;
      SCOPED_TRACE(absl::StrCat(passes::PrecisionName(p), " kind ", static_cast<int>(k)));
      auto step = Step(*forward, spec);
      ASSERT_TRUE(step);
      const bool scaled = k == Kind::kStatic || k == Kind::kDynamic || (k == Kind::kAuto && p == passes::Precision::kFp16);
      const bool dynamic = k == Kind::kDynamic || (k == Kind::kAuto && p == passes::Precision::kFp16);
      EXPECT_EQ(CountOps(*step, "AllFinite"), scaled ? 1 : 0);
      EXPECT_EQ(CountOps(*step, "LossScaleUpdate"), dynamic ? 1 : 0);
      EXPECT_EQ(CountOps(*step, "AdamUpdateN"), scaled ? 1 : 0);  // grouped even without multi_tensor_updates
      EXPECT_EQ(step->FindValue(passes::kLossScaleState) != nullptr, scaled);
      if (!scaled) continue;
      // The seed: the cross-entropy's gradient reads the scale, and the scale is no parameter.
      bool seeded = false;
      for (const ir::Node* n : step->nodes()) {
        seeded |= n->op_type() == "SoftmaxCrossEntropyGrad" && n->input(0)->name() == passes::kLossScaleState;
      }
      EXPECT_TRUE(seeded) << step->ToString();
      EXPECT_EQ(step->FindValue("ottr.loss_scale.grad"), nullptr);
      auto params = passes::TrainableParameters(*step, "");
      ASSERT_TRUE(params.ok());
      EXPECT_EQ(params->size(), 6u);
      // Every state update stays in place except the step counter's (the Where is not its last reader).
      auto plan = passes::PlanMemory(*step);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_TRUE(passes::VerifyPlan(*step, *plan).ok());
      for (const passes::UpdateCopy& c : plan->update_copies) {
        EXPECT_TRUE(c.target->name() == passes::kStepState || absl::StartsWith(c.target->name(), "ottr.loss_scale"))
            << c.target->name();
      }
    }
  }
}

runtime::TensorMap MlpBatch(uint64_t seed, int64_t batch = 16) {
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 784}, seed, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, seed + 1, 0, 9);
  feeds[passes::kLrInput] = Tensor::Scalar<float>(1e-3f);
  return feeds;
}

std::map<std::string, Tensor> States(const ir::Graph& step, const runtime::cpu::CpuExecutor& exec) {
  std::map<std::string, Tensor> out;
  for (const ir::StateUpdate& u : step.updates()) out.emplace(u.target->name(), exec.State(u.target->name())->Clone());
  return out;
}

void ExpectSameStates(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.contains(name)) << name;
    EXPECT_TRUE(t.BitwiseEquals(b.at(name))) << what << ": " << name;
  }
}

TEST(LossScalingCpuTest, PowerOfTwoScaleIsExactInFloat32) {
  // Scaling by 2^k and unscaling by 2^-k are exact in binary floating point (no overflow or
  // underflow here), ReLU masks do not change, and the clip correction divides a norm of
  // 2^k-scaled gradients (sqrt(4^k x) = 2^k sqrt(x) exactly) by 2^k: every step is bit-identical.
  auto forward = Mlp();
  ASSERT_TRUE(forward);
  for (float clip : {0.0f, 0.5f}) {
    SCOPED_TRACE(absl::StrCat("clip ", clip));
    passes::TrainingSpec spec;
    spec.batch = 16;
    spec.precision = passes::Precision::kFp32;
    spec.multi_tensor_updates = true;
    spec.optimizer.max_grad_norm = clip;
    auto plain = Step(*forward, spec);
    spec.loss_scale.kind = Kind::kStatic;
    spec.loss_scale.init_scale = 1024.0f;
    auto scaled = Step(*forward, spec);
    ASSERT_TRUE(plain && scaled);
    if (clip > 0) {
      ASSERT_NE(scaled->FindValue("ottr.grad_norm.unscaled"), nullptr);
    }
    auto a = runtime::cpu::CpuExecutor::Create(*plain);
    auto b = runtime::cpu::CpuExecutor::Create(*scaled);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int k = 0; k < 3; ++k) {
      const runtime::TensorMap feeds = MlpBatch(100 + 2 * k);
      auto ra = (*a)->Run(feeds);
      auto rb = (*b)->Run(feeds);
      ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
      EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "loss of step " << k;
    }
    for (const auto& [name, t] : States(*plain, **a)) {
      EXPECT_TRUE(t.BitwiseEquals(*(*b)->State(name))) << name;
    }
    EXPECT_EQ((*b)->State(passes::kStepState)->GetAsInt64(0), 3);
  }
}

// One fp16 step graph with dynamic scaling from `init_scale`.
std::unique_ptr<ir::Graph> Fp16Step(const ir::Graph& forward, float init_scale, int64_t interval) {
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.precision = passes::Precision::kFp16;
  spec.loss_scale.kind = Kind::kDynamic;
  spec.loss_scale.init_scale = init_scale;
  spec.loss_scale.growth_interval = interval;
  return Step(forward, spec);
}

TEST(LossScalingCpuTest, ForcedOverflowSkipsHalvesAndRecovers) {
  auto forward = Mlp();
  ASSERT_TRUE(forward);
  // 2^30 overflows float16 in the backward: dlogits = scale / 16 · (softmax − onehot) reaches
  // 2^26 · 0.9 > 65504 (float16's largest finite value).
  constexpr int64_t kInterval = 3;
  auto step_a = Fp16Step(*forward, std::ldexp(1.0f, 30), kInterval);
  ASSERT_TRUE(step_a);
  auto a = runtime::cpu::CpuExecutor::Create(*step_a);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::map<std::string, Tensor> initial = States(*step_a, **a);
  int skipped = 0;
  float scale = std::ldexp(1.0f, 30);
  for (; skipped < 30; ++skipped) {
    auto r = (*a)->Run(MlpBatch(7));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isfinite((*r)[0].GetAsDouble(0))) << "the forward does not overflow";
    std::map<std::string, Tensor> now = States(*step_a, **a);
    if (now.at(passes::kStepState).GetAsInt64(0) != 0) break;  // a step was taken
    for (const auto& [name, t] : initial) {
      if (name == passes::kLossScaleState) continue;
      EXPECT_TRUE(t.BitwiseEquals(now.at(name))) << name << " changed in skipped step " << skipped;
    }
    scale /= 2;
    EXPECT_EQ(now.at(passes::kLossScaleState).GetAsDouble(0), scale) << "after skip " << skipped;
  }
  ASSERT_GE(skipped, 5) << "2^30 should overflow for several halvings";
  ASSERT_LT(skipped, 30) << "never recovered";
  EXPECT_EQ((*a)->State(passes::kGoodStepsState)->GetAsInt64(0), 1);
  // A run started at the reduced scale takes that same first step: the skipped steps changed
  // nothing but the scale. Both then go on in lockstep, through a batch with an infinity (skipped
  // and halved in both) and the growth after kInterval good steps.
  auto step_b = Fp16Step(*forward, scale, kInterval);
  ASSERT_TRUE(step_b);
  auto b = runtime::cpu::CpuExecutor::Create(*step_b);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Run(MlpBatch(7)).ok());
  ExpectSameStates(States(*step_a, **a), States(*step_b, **b), "first step");
  double first_loss = 0, last_loss = 0;
  int taken = 0;
  for (int k = 0; k < 8; ++k) {
    runtime::TensorMap feeds = MlpBatch(7);
    if (k == 2) feeds["x"].data<float>()[5] = std::numeric_limits<float>::infinity();
    const std::map<std::string, Tensor> before = States(*step_a, **a);
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "step " << k;
    const std::map<std::string, Tensor> after = States(*step_a, **a);
    ExpectSameStates(after, States(*step_b, **b), absl::StrCat("step ", k));
    const double s0 = before.at(passes::kLossScaleState).GetAsDouble(0);
    const double s1 = after.at(passes::kLossScaleState).GetAsDouble(0);
    const int64_t good0 = before.at(passes::kGoodStepsState).GetAsInt64(0);
    const bool stepped = after.at(passes::kStepState).GetAsInt64(0) != before.at(passes::kStepState).GetAsInt64(0);
    if (k == 2) {
      EXPECT_FALSE(std::isfinite((*ra)[0].GetAsDouble(0)));
      EXPECT_FALSE(stepped) << "the batch with an infinity was applied";
    }
    if (!stepped) {
      // Skipped (the infinity, or a doubled scale that overflowed again): only the scale moves.
      for (const auto& [name, t] : before) {
        if (!absl::StartsWith(name, "ottr.loss_scale")) {
          EXPECT_TRUE(t.BitwiseEquals(after.at(name))) << name;
        }
      }
      EXPECT_EQ(s1, s0 / 2) << "step " << k;
      EXPECT_EQ(after.at(passes::kGoodStepsState).GetAsInt64(0), 0);
      continue;
    }
    ++taken;
    EXPECT_EQ(after.at(passes::kStepState).GetAsInt64(0), before.at(passes::kStepState).GetAsInt64(0) + 1);
    EXPECT_EQ(s1, good0 + 1 == kInterval ? 2 * s0 : s0) << "step " << k;
    EXPECT_EQ(after.at(passes::kGoodStepsState).GetAsInt64(0), good0 + 1 == kInterval ? 0 : good0 + 1);
    if (taken == 1) first_loss = (*ra)[0].GetAsDouble(0);
    last_loss = (*ra)[0].GetAsDouble(0);
  }
  EXPECT_GE(taken, 4);
  std::printf("2^30 overflowed %d times (scale %g); then %d of 8 steps taken, loss %.4f -> %.4f\n", skipped, scale, taken,
              first_loss, last_loss);
  // Training goes on: the loss on the repeated batch falls.
  EXPECT_LT(last_loss, first_loss);
}

// A one-layer model whose gradients are below float16's smallest subnormal (2^-24 ≈ 6e-8).
constexpr char kLinear[] = R"(graph "linear" {
  opset ai.onnx 17
  input %x : f32[64,16]
  init %w : f32[16,8] = elided
  %y : f32[64,8] = MatMul(%x, %w) origin "fc"
  output %y
})";

TEST(LossScalingCpuTest, Fp16WithoutScalingUnderflowsWhereScaledDoesNot) {
  // x in {-1, 0, 1} and w in multiples of 1/64 with |w| <= 1/16: y = x·w is exact in float16 and
  // float32, so all runs see the same residual r = y − labels with |r| in [0.5e-6, 1e-6]. The MSE
  // gradient dy = 2r / 512 is at most 3.9e-9 — below half float16's smallest subnormal, so its
  // float16 cast (the backward MatMul's input) is 0 — and 2^16 · dy ≥ 1.3e-4 is a normal float16.
  // Scaled, dW = xᵀ·dy rounds dy·S (≤ u = 2^-11 relative), accumulates in float32 and rounds the
  // output once (≤ u, or 2^-25 absolute where it is a float16 subnormal):
  //     |dW/S − dW32| ≤ (2u + 64·2^-24)·M + 2^-25 / S    with M = |x|ᵀ·|dy|, elementwise
  // (64·2^-24·M also covers the float32 reference's own accumulation error).
  auto forward = Parse(kLinear);
  ASSERT_TRUE(forward);
  std::mt19937_64 rng(11);
  Tensor w(ir::DType::kFloat32, {16, 8});
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    w.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 9) - 4) / 64.0f;
  }
  ASSERT_TRUE(forward->SetInitializerData(forward->FindValue("w"), w).ok());
  Tensor x(ir::DType::kFloat32, {64, 16});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 3) - 1);
  Tensor labels(ir::DType::kFloat32, {64, 8});
  std::vector<double> dy(64 * 8);
  std::uniform_real_distribution<double> mag(0.5e-6, 1e-6);
  for (int64_t b = 0; b < 64; ++b) {
    for (int64_t j = 0; j < 8; ++j) {
      double y = 0;
      for (int64_t k = 0; k < 16; ++k) y += x.data<float>()[b * 16 + k] * w.data<float>()[k * 8 + j];
      const double delta = (rng() % 2 ? 1 : -1) * mag(rng);
      labels.data<float>()[b * 8 + j] = static_cast<float>(y + delta);
      dy[b * 8 + j] = 2.0 * (y - static_cast<double>(labels.data<float>()[b * 8 + j])) / 512.0;
    }
  }
  runtime::TensorMap feeds{{"x", x}, {passes::kLabelsInput, labels}, {passes::kLrInput, Tensor::Scalar<float>(0.1f)}};
  auto grad = [&](passes::Precision p, Kind k) -> Tensor {
    passes::TrainingSpec spec;
    spec.batch = 64;
    spec.loss.kind = passes::LossSpec::Kind::kMse;
    spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
    spec.expose_gradients = true;
    spec.precision = p;
    spec.loss_scale.kind = k;
    auto step = Step(*forward, spec);
    if (!step) return Tensor();
    auto exec = runtime::cpu::CpuExecutor::Create(*step);
    EXPECT_TRUE(exec.ok()) << exec.status();
    auto out = (*exec)->Run(feeds);
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(step->outputs()[1]->name(), "w.grad");
    return (*out)[1].Clone();
  };
  const Tensor g32 = grad(passes::Precision::kFp32, Kind::kNone);
  const Tensor g16 = grad(passes::Precision::kFp16, Kind::kNone);
  const Tensor g16s = grad(passes::Precision::kFp16, Kind::kDynamic);  // initial scale 2^16
  ASSERT_TRUE(g32.defined() && g16.defined() && g16s.defined());
  const double u = std::ldexp(1.0, -11);
  int nonzero32 = 0;
  double max_ratio = 0;
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t e = i * 8 + j;
      double m = 0;
      for (int64_t b = 0; b < 64; ++b) m += std::abs(x.data<float>()[b * 16 + i]) * std::abs(dy[b * 8 + j]);
      nonzero32 += g32.GetAsDouble(e) != 0;
      EXPECT_EQ(g16.GetAsDouble(e), 0.0) << "fp16 without scaling: dW[" << i << "," << j << "]";
      const double err = std::abs(g16s.GetAsDouble(e) / 65536.0 - g32.GetAsDouble(e));
      EXPECT_LE(err, (2 * u + 64 * std::ldexp(1.0, -24)) * m + std::ldexp(1.0, -25) / 65536.0)
          << "dW[" << i << "," << j << "]";
      if (m > 0) max_ratio = std::max(max_ratio, err / m);
    }
  }
  EXPECT_GE(nonzero32, 120) << "the float32 gradients are not zero";
  std::printf("fp16 scaled dW: max |error| / M = %.3g (bound %.3g)\n", max_ratio, 2 * u + 64 * std::ldexp(1.0, -24));
}

}  // namespace
}  // namespace ottr
