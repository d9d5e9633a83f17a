// Tests of the normalisation and Dropout gradient rules (ir/grads/normalization_grads.cc) beyond
// the central-difference cases: which forward values the backward reuses, the errors, and
// training-mode Dropout, whose random mask central differences cannot check.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/autodiff.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using ir::TensorType;
using ir::Value;

// A graph with one node whose inputs are graph inputs (or initializers where `constant[i]`) and
// a graph input "dy" typed like output 0, the gradient seed.
struct OneNode {
  std::unique_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::vector<Value*> inputs;
  Value* dy = nullptr;
};

absl::StatusOr<OneNode> Build(const std::string& op, const std::vector<Tensor>& inputs,
                              std::map<std::string, Attribute> attrs, int num_outputs,
                              std::vector<bool> constant = {}) {
  OneNode g;
  g.graph = std::make_unique<ir::Graph>("t");
  g.graph->set_opset_import("", ir::kMaxOnnxOpset);
  g.graph->set_opset_import(std::string(ir::kOttrDomain), 1);
  ir::NodeSpec spec{op, "", {}, {}, std::move(attrs), "fwd"};
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value* v = nullptr;
    if (inputs[i].defined()) {
      const std::string name = absl::StrCat("in", i);
      auto r = i < constant.size() && constant[i] ? g.graph->AddInitializer(name, inputs[i])
                                                  : g.graph->AddInput(name, inputs[i].type());
      if (!r.ok()) return r.status();
      v = *r;
    }
    spec.inputs.push_back(v);
    g.inputs.push_back(v);
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  auto n = g.graph->AddNode(std::move(spec));
  if (!n.ok()) return n.status();
  g.node = *n;
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *g.graph));
  auto dy = g.graph->AddInput("dy", g.node->output(0)->type());
  if (!dy.ok()) return dy.status();
  g.dy = *dy;
  return g;
}

// The nodes of `g` with op type `op` (any domain).
std::vector<ir::Node*> NodesOf(const ir::Graph& g, const std::string& op) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes()) {
    if (n->op_type() == op) out.push_back(n);
  }
  return out;
}

TEST(LayerNormalizationGradientTest, ReusesSavedStatisticsOnlyWhenPreciseEnough) {
  for (const DType x_type : {DType::kFloat32, DType::kFloat64}) {
    Tensor x(x_type, {4, 6}), s(x_type, {6}), b(x_type, {6});
    auto g = Build("LayerNormalization", {x, s, b}, {}, 3);
    ASSERT_TRUE(g.ok()) << g.status();
    auto grads = passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (Value* v : *grads) ASSERT_NE(v, nullptr);
    const auto backward = NodesOf(*g->graph, "LayerNormalizationGrad");
    ASSERT_EQ(backward.size(), 1u);
    // Default stash_type is float32: reused for float32 X, recomputed for float64 X.
    if (x_type == DType::kFloat32) {
      ASSERT_EQ(backward[0]->num_inputs(), 5);
      EXPECT_EQ(backward[0]->input(3), g->node->output(1));
      EXPECT_EQ(backward[0]->input(4), g->node->output(2));
    } else {
      EXPECT_EQ(backward[0]->num_inputs(), 3);
    }
  }
}

TEST(LayerNormalizationGradientTest, ScaleVaryingOverRowsIsAnError) {
  Tensor x(DType::kFloat32, {2, 3, 4});
  auto g = Build("LayerNormalization", {x, Tensor(DType::kFloat32, {3, 4})}, {}, 1);
  ASSERT_TRUE(g.ok()) << g.status();
  auto grads = passes::BuildGradients(*g->graph, g->node->output(0), {g->inputs[0]}, g->dy);
  ASSERT_FALSE(grads.ok());
  EXPECT_NE(grads.status().message().find("Scale"), std::string::npos) << grads.status();
  EXPECT_NE(grads.status().message().find("fwd"), std::string::npos) << grads.status();
}

TEST(BatchNormalizationGradientTest, TrainingGivesRunningStatisticsNoGradient) {
  Tensor v(DType::kFloat32, {3});
  auto g = Build("BatchNormalization", {Tensor(DType::kFloat32, {2, 3, 4}), v, v, v, v},
                 {{"training_mode", Attribute(int64_t{1})}}, 3);
  ASSERT_TRUE(g.ok()) << g.status();
  auto grads = passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_NE((*grads)[0], nullptr);
  EXPECT_NE((*grads)[1], nullptr);
  EXPECT_NE((*grads)[2], nullptr);
  EXPECT_EQ((*grads)[3], nullptr);
  EXPECT_EQ((*grads)[4], nullptr);
  const auto backward = NodesOf(*g->graph, "BatchNormalizationGrad");
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(backward[0]->num_inputs(), 3);  // batch statistics: no mean/var inputs
}

TEST(DropoutGradientTest, TrainingModeUsesTheMask) {
  const Tensor x = RandomFloat({256}, 1, 0.5f, 1.5f);
  auto g = Build("Dropout", {x, Tensor::Scalar<float>(0.25f), Tensor::Scalar<bool>(true)}, {}, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  auto grads = passes::BuildGradients(*g->graph, g->node->output(0), {g->inputs[0]}, g->dy);
  ASSERT_TRUE(grads.ok()) << grads.status();
  g->graph->AddOutput(g->node->output(0));
  g->graph->AddOutput(g->node->output(1));
  g->graph->AddOutput((*grads)[0]);
  auto exec = runtime::cpu::CpuExecutor::Create(*g->graph);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const Tensor dy = RandomFloat({256}, 2);
  auto out = (*exec)->Run({{"in0", x},
                           {"in1", Tensor::Scalar<float>(0.25f)},
                           {"in2", Tensor::Scalar<bool>(true)},
                           {"dy", dy}});
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0];
  const Tensor& mask = (*out)[1];
  const Tensor& dx = (*out)[2];
  int kept = 0;
  for (int i = 0; i < 256; ++i) {
    const bool k = mask.data<bool>()[i];
    kept += k;
    EXPECT_NEAR(y.GetAsDouble(i), k ? x.GetAsDouble(i) / 0.75 : 0.0, 1e-6);
    EXPECT_NEAR(dx.GetAsDouble(i), k ? dy.GetAsDouble(i) / 0.75 : 0.0, 1e-6);
  }
  EXPECT_GT(kept, 150);
  EXPECT_LT(kept, 240);
}

TEST(DropoutGradientTest, TrainingModeWithoutMaskIsAnErrorNamingTheMask) {
  auto g =
      Build("Dropout",
            {Tensor(DType::kFloat32, {4}), Tensor::Scalar<float>(0.5f), Tensor::Scalar<bool>(true)},
            {}, 1);
  ASSERT_TRUE(g.ok()) << g.status();
  auto grads = passes::BuildGradients(*g->graph, g->node->output(0), {g->inputs[0]}, g->dy);
  ASSERT_FALSE(grads.ok());
  EXPECT_NE(grads.status().message().find("mask output"), std::string::npos) << grads.status();
}

TEST(DropoutGradientTest, ConstantFalseTrainingModeOrZeroRatioIsTheIdentity) {
  for (const auto& [ratio, training] :
       std::vector<std::pair<float, bool>>{{0.5f, false}, {0.0f, true}}) {
    auto g = Build("Dropout",
                   {Tensor(DType::kFloat32, {4}), Tensor::Scalar<float>(ratio),
                    Tensor::Scalar<bool>(training)},
                   {}, 1, {false, true, true});
    ASSERT_TRUE(g.ok()) << g.status();
    auto grads = passes::BuildGradients(*g->graph, g->node->output(0), {g->inputs[0]}, g->dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_EQ((*grads)[0], g->dy);
  }
}

}  // namespace
}  // namespace ottr::testing
