// fuse-mlp-step (passes/fuse_mlp_step.cc) and the op it makes, ottr::MlpStep (ir/ops/
// ottr_training_ops.cc, CPU kernel in runtime/cpu/ottr_training_kernels.cc): the TF32 training
// step of ReLU MLPs of 2 to 8 layers becomes one node whose CPU reference computes what the
// unfused step computes (the same bits: the same GEMM calls, sums and updates in the same order),
// step after step; the plan holds; the cases where it must not fire, each with its remark; the
// shape checks; bad labels.
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "passes/fusion_passes.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::CountOps;

// A ReLU MLP x [batch, widths[0]] -> ... -> logits [batch, widths.back()] of ONNX Gemm nodes
// (transB = 1) with random float32 weights and biases (initializers).
std::unique_ptr<ir::Graph> MakeMlp(const std::vector<int64_t>& widths, uint64_t seed) {
  auto g = std::make_unique<ir::Graph>("mlp");
  g->set_opset_import("", 17);
  auto x = g->AddInput("x", ir::TensorType(ir::DType::kFloat32, ir::Shape{ir::Dim::Symbol("batch"), ir::Dim(widths[0])}));
  EXPECT_TRUE(x.ok());
  ir::Value* h = *x;
  const int layers = static_cast<int>(widths.size()) - 1;
  for (int l = 0; l < layers; ++l) {
    const std::string fc = absl::StrCat("fc", l);
    auto w = g->AddInitializer(fc + ".weight", testing::RandomFloat({widths[l + 1], widths[l]}, seed + 2 * l, -0.2f, 0.2f));
    auto b = g->AddInitializer(fc + ".bias", testing::RandomFloat({widths[l + 1]}, seed + 2 * l + 1, -0.1f, 0.1f));
    EXPECT_TRUE(w.ok() && b.ok());
    auto z = g->AddNode({"Gemm", "", {h, *w, *b}, {fc + ".out"}, {{"transB", ir::Attribute(int64_t{1})}}, fc});
    EXPECT_TRUE(z.ok()) << z.status();
    h = (*z)->output(0);
    if (l + 1 < layers) {
      auto r = g->AddNode({"Relu", "", {h}, {fc + ".relu"}, {}, fc + ".relu"});
      EXPECT_TRUE(r.ok());
      h = (*r)->output(0);
    }
  }
  g->AddOutput(h);
  return g;
}

passes::TrainingSpec Tf32Spec(int64_t batch) {
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.precision = passes::Precision::kTf32;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.fuse_mlp_step = true;
  return spec;
}

// Steps of `step` on the CPU reference: the loss of each, then every state (parameters, moments,
// the step counter) after the last.
std::vector<ir::Tensor> RunSteps(const ir::Graph& step, int64_t batch, int64_t features, int64_t classes, int steps) {
  auto cpu = runtime::cpu::CpuExecutor::Create(step);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  if (!cpu.ok()) return {};
  std::vector<ir::Tensor> out;
  for (int s = 0; s < steps; ++s) {
    runtime::TensorMap feeds;
    feeds["x"] = testing::RandomFloat({batch, features}, 100 + s, -1.0f, 1.0f);
    ir::Tensor labels = testing::RandomInt64({batch}, 200 + s, 0, classes - 1);
    for (int64_t i = 0; i < batch; i += 7) labels.data<int64_t>()[i] = -100;  // ignored rows
    feeds[passes::kLabelsInput] = std::move(labels);
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
    auto r = (*cpu)->Run(feeds);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    out.push_back((*r)[0]);
  }
  for (const ir::StateUpdate& u : step.updates()) {
    const ir::Tensor* t = (*cpu)->State(u.target->name());
    EXPECT_NE(t, nullptr) << u.target->name();
    if (t != nullptr) out.push_back(*t);
  }
  return out;
}

TEST(FuseMlpStepTest, TheStepOfAReluMlpIsOneNodeWithTheSameBits) {
  struct Case {
    std::vector<int64_t> widths;
    int64_t batch;
  };
  for (const Case& c : {Case{{784, 512, 512, 10}, 128}, Case{{20, 33, 7}, 45}, Case{{64, 48, 40, 24, 16}, 512}}) {
    SCOPED_TRACE(absl::StrCat(c.widths.size() - 1, " layers, batch ", c.batch));
    std::unique_ptr<ir::Graph> forward = MakeMlp(c.widths, 7);
    passes::TrainingSpec spec = Tf32Spec(c.batch);
    passes::PassManagerOptions o;
    std::ostringstream remarks;
    o.remarks = &remarks;
    auto with = passes::BuildTrainingGraph(*forward, spec, o);
    ASSERT_TRUE(with.ok()) << with.status();
    EXPECT_EQ(CountOps(**with, "MlpStep"), 1) << remarks.str();
    // Nothing of the step is left but the step counter's increment.
    EXPECT_EQ(CountOps(**with, "Gemm"), 0);
    EXPECT_EQ(CountOps(**with, "Relu"), 0);
    EXPECT_EQ(CountOps(**with, "AdamUpdateN"), 0);
    EXPECT_EQ(CountOps(**with, "SoftmaxCrossEntropy"), 0);
    EXPECT_LE((*with)->nodes().size(), 3u);
    EXPECT_TRUE(absl::StrContains(remarks.str(), absl::StrCat("fuse-mlp-step: fused the step of ", c.widths.size() - 1,
                                                              " linear layers")))
        << remarks.str();
    auto plan = passes::PlanMemory(**with);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(passes::VerifyPlan(**with, *plan).ok());
    spec.disabled_passes = {"fuse-mlp-step"};
    auto without = passes::BuildTrainingGraph(*forward, spec);
    ASSERT_TRUE(without.ok()) << without.status();
    EXPECT_EQ(CountOps(**without, "MlpStep"), 0);
    const std::vector<ir::Tensor> a = RunSteps(**with, c.batch, c.widths[0], c.widths.back(), 3);
    const std::vector<ir::Tensor> b = RunSteps(**without, c.batch, c.widths[0], c.widths.back(), 3);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), 3 + (*with)->updates().size());
    EXPECT_EQ(a.size(), 3 + 6 * (c.widths.size() - 1) + 1);  // W, b and their moments; the step counter
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].BitwiseEquals(b[i])) << (i < 3 ? absl::StrCat("loss of step ", i)
                                                      : (*with)->updates()[i - 3].target->name());
    }
    // The loss moved: the updates were applied.
    EXPECT_NE(a[0].GetAsDouble(0), a[2].GetAsDouble(0));
  }
}

TEST(FuseMlpStepTest, DeclinesWhatItCannotFuse) {
  struct Case {
    std::string what;
    std::vector<int64_t> widths;
    int64_t batch;
    std::function<void(passes::TrainingSpec&)> change;
    std::string remark;  // "" when the pass does not run at all
  };
  const std::vector<Case> cases = {
      {"too many rows", {784, 512, 512, 10}, 1024, [](passes::TrainingSpec&) {}, "1024 rows"},
      {"too many classes", {32, 16, 20}, 64, [](passes::TrainingSpec&) {}, "20 classes"},
      {"one layer", {32, 10}, 64, [](passes::TrainingSpec&) {}, "1 layers"},
      {"SGD", {32, 16, 10}, 64,
       [](passes::TrainingSpec& s) { s.optimizer.kind = passes::OptimizerSpec::Kind::kSgd; }, "is not Adam"},
      {"guarded update", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.nan_guard = true; }, "guarded"},
      {"frozen layer", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.freeze = "^fc0\\.bias$"; }, "updates 3 tensors"},
      {"label smoothing", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.loss.label_smoothing = 0.1f; },
       "smooths its labels"},
      {"not asked for (the default)", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.fuse_mlp_step = false; }, ""},
      {"float32 step", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.precision = passes::Precision::kFp32; }, ""},
      {"exposed gradients", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.expose_gradients = true; }, ""},
      {"clipped gradients", {32, 16, 10}, 64, [](passes::TrainingSpec& s) { s.optimizer.max_grad_norm = 1.0f; }, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::unique_ptr<ir::Graph> forward = MakeMlp(c.widths, 11);
    passes::TrainingSpec spec = Tf32Spec(c.batch);
    c.change(spec);
    passes::PassManagerOptions o;
    std::ostringstream remarks;
    o.remarks = &remarks;
    auto step = passes::BuildTrainingGraph(*forward, spec, o);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(CountOps(**step, "MlpStep"), 0);
    if (c.remark.empty()) {
      EXPECT_FALSE(absl::StrContains(remarks.str(), "fuse-mlp-step")) << remarks.str();
    } else {
      EXPECT_TRUE(absl::StrContains(remarks.str(), "fuse-mlp-step: declined")) << remarks.str();
      EXPECT_TRUE(absl::StrContains(remarks.str(), c.remark)) << remarks.str();
    }
  }
  // A layer without its ReLU (two Gemms back to back) is not a chain the node computes.
  {
    std::unique_ptr<ir::Graph> forward = MakeMlp({32, 16, 10}, 12);
    ir::Node* relu = nullptr;
    for (ir::Node* n : forward->nodes()) {
      if (n->op_type() == "Relu") relu = n;
    }
    ASSERT_NE(relu, nullptr);
    forward->ReplaceAllUsesWith(relu->output(0), relu->input(0));
    ASSERT_TRUE(forward->EraseNode(relu).ok());
    passes::PassManagerOptions o;
    std::ostringstream remarks;
    o.remarks = &remarks;
    auto step = passes::BuildTrainingGraph(*forward, Tf32Spec(64), o);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(CountOps(**step, "MlpStep"), 0);
    EXPECT_TRUE(absl::StrContains(remarks.str(), "is neither the step's input nor a Relu of a Gemm")) << remarks.str();
  }
}

TEST(MlpStepOpTest, ShapeInferenceAndTheReferenceRejectBadOperands) {
  const std::string head = R"(graph "g" {
  opset ai.onnx 17
  input %lr : f32[]
  input %step : i64[]
  input %x : f32[8,6]
  input %labels : i64[8]
)";
  struct Case {
    std::string params;  // W0, b0, W1, b1 then m and v (same types)
    std::string error;
  };
  const std::string ok = "f32[5,6] f32[5] f32[3,5] f32[3]";
  const std::vector<Case> cases = {
      {"f32[5,7] f32[5] f32[3,5] f32[3]", "layer 0's weight must be float32 [out, 6]"},
      {"f32[5,6] f32[4] f32[3,5] f32[3]", "layer 0's bias must be float32 [5]"},
      {"f32[5,6] f32[5] f32[3,4] f32[3]", "layer 1's weight must be float32 [out, 5]"},
      {"f64[5,6] f32[5] f32[3,5] f32[3]", "layer 0's weight must be float32"},
  };
  auto graph_of = [&](const std::string& params, const std::string& moments, const std::string& labels) {
    std::vector<std::string> types;
    std::istringstream in(params);
    for (std::string t; in >> t;) types.push_back(t);
    std::vector<std::string> mt;
    std::istringstream in2(moments);
    for (std::string t; in2 >> t;) mt.push_back(t);
    std::string text = head;
    if (labels != "i64[8]") absl::StrReplaceAll({{"%labels : i64[8]", "%labels : " + labels}}, &text);
    std::string args, outs;
    for (size_t i = 0; i < types.size(); ++i) {
      absl::StrAppend(&text, "  input %p", i, " : ", types[i], "\n");
      absl::StrAppend(&args, ", %p", i);
      absl::StrAppend(&outs, ", %p", i, ".new : ", types[i]);
    }
    for (const char* s : {"m", "v"}) {
      for (size_t i = 0; i < mt.size(); ++i) {
        absl::StrAppend(&text, "  input %", s, i, " : ", mt[i], "\n");
        absl::StrAppend(&args, ", %", s, i);
        absl::StrAppend(&outs, ", %", s, i, ".new : ", mt[i]);
      }
    }
    absl::StrAppend(&text, "  %loss : f32[]", outs, " = ottr::MlpStep(%lr, %step, %x, %labels", args,
                    ") {ignore_index = -1}\n  output %loss\n}");
    return text;
  };
  {
    auto g = ir::ParseGraph(graph_of(ok, ok, "i64[8]"));
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), **g).ok());
  }
  for (const Case& c : cases) {
    auto g = ir::ParseGraph(graph_of(c.params, c.params, "i64[8]"));
    ASSERT_TRUE(g.ok()) << g.status();
    const absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
    EXPECT_FALSE(s.ok()) << c.params;
    EXPECT_TRUE(absl::StrContains(s.message(), c.error)) << s;
  }
  {
    auto g = ir::ParseGraph(graph_of(ok, "f32[5,6] f32[5] f32[3,5] f32[4]", "i64[8]"));
    ASSERT_TRUE(g.ok()) << g.status();
    const absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
    EXPECT_TRUE(absl::StrContains(s.message(), "does not match parameter")) << s;
  }
  {
    auto g = ir::ParseGraph(graph_of(ok, ok, "i64[7]"));
    ASSERT_TRUE(g.ok()) << g.status();
    const absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
    EXPECT_TRUE(absl::StrContains(s.message(), "labels must be int32 or int64 [8]")) << s;
  }
  // The CPU reference names a label outside the classes.
  {
    auto g = ir::ParseGraph(graph_of(ok, ok, "i64[8]"));
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), **g).ok());
    runtime::TensorMap feeds = testing::RandomFeeds(**g, 5);
    feeds["lr"] = ir::Tensor::Scalar<float>(1e-3f);
    feeds["step"] = ir::Tensor::Scalar<int64_t>(1);
    ir::Tensor labels = testing::RandomInt64({8}, 6, 0, 2);
    labels.data<int64_t>()[3] = 3;  // 3 classes
    feeds["labels"] = labels;
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto r = (*cpu)->Run(feeds);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::StrContains(r.status().message(), "3")) << r.status();
  }
}

}  // namespace
}  // namespace ottr
