// Tests of the softmax and loss gradient rules (ir/grads/loss_grads.cc) beyond the
// central-difference cases: which forward values the emitted backward ops read.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "passes/autodiff.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using ir::TensorType;
using ir::Value;

struct OneNode {
  std::unique_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  Value* x = nullptr;
  Value* dy = nullptr;
};

// op(x, extra...) with x [4, 5] float32; "dy" is a graph input typed like output 0.
OneNode Build(const std::string& op, std::vector<TensorType> extra,
              std::map<std::string, Attribute> attrs, int num_outputs) {
  OneNode g;
  g.graph = std::make_unique<ir::Graph>("t");
  g.graph->set_opset_import("", ir::kMaxOnnxOpset);
  g.x = g.graph->AddInput("x", TensorType(DType::kFloat32, ir::ShapeFromDims({4, 5}))).value();
  ir::NodeSpec spec{op, "", {g.x}, {}, std::move(attrs), "fwd"};
  for (size_t i = 0; i < extra.size(); ++i) {
    spec.inputs.push_back(g.graph->AddInput(absl::StrCat("e", i), extra[i]).value());
  }
  for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  g.node = g.graph->AddNode(std::move(spec)).value();
  EXPECT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), *g.graph).ok());
  g.dy = g.graph->AddInput("dy", g.node->output(0)->type()).value();
  return g;
}

int Count(const ir::Graph& g, const std::string& op) {
  int c = 0;
  for (const ir::Node* n : g.nodes()) c += n->op_type() == op;
  return c;
}

TEST(SoftmaxGradientTest, BackwardReadsTheForwardOutput) {
  for (const std::string op : {"Softmax", "LogSoftmax"}) {
    OneNode g = Build(op, {}, {{"axis", Attribute(int64_t{0})}}, 1);
    auto grads = passes::BuildGradients(*g.graph, g.node->output(0), {g.x}, g.dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const ir::Node* back = (*grads)[0]->producer();
    EXPECT_EQ(back->domain(), ir::kOttrDomain);
    EXPECT_EQ(back->op_type(), op + "Grad");
    EXPECT_EQ(back->input(0), g.dy);
    EXPECT_EQ(back->input(1), g.node->output(0));
    EXPECT_EQ(back->GetInt("axis", -1), 0);
  }
}

TEST(SoftmaxCrossEntropyLossGradientTest, ReusesLogProbOutputOrRecomputesIt) {
  const TensorType labels(DType::kInt64, ir::ShapeFromDims({4}));
  for (const int outputs : {1, 2}) {
    OneNode g =
        Build("SoftmaxCrossEntropyLoss", {labels}, {{"reduction", Attribute("sum")}}, outputs);
    auto grads = passes::BuildGradients(*g.graph, g.node->output(0), {g.x}, g.dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const ir::Node* back = (*grads)[0]->producer();
    EXPECT_EQ(back->op_type(), "SoftmaxCrossEntropyLossGrad");
    EXPECT_EQ(back->GetString("reduction", ""), "sum");
    if (outputs == 2) {
      EXPECT_EQ(back->input(1), g.node->output(1));
      EXPECT_EQ(Count(*g.graph, "LogSoftmax"), 0);
    } else {
      EXPECT_EQ(back->input(1)->producer()->op_type(), "LogSoftmax");
      EXPECT_EQ(Count(*g.graph, "LogSoftmax"), 1);
    }
  }
}

TEST(NegativeLogLikelihoodLossGradientTest, WeightsGetAGradientOnlyWhenAsked) {
  const TensorType labels(DType::kInt64, ir::ShapeFromDims({4}));
  const TensorType weights(DType::kFloat32, ir::ShapeFromDims({5}));
  for (const bool want_weights : {false, true}) {
    OneNode g = Build("NegativeLogLikelihoodLoss", {labels, weights}, {}, 1);
    std::vector<Value*> params = {g.x};
    if (want_weights) params.push_back(g.node->input(2));
    auto grads = passes::BuildGradients(*g.graph, g.node->output(0), params, g.dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const ir::Node* back = (*grads)[0]->producer();
    EXPECT_EQ(back->num_outputs(), want_weights ? 2 : 1);
    if (want_weights) {
      EXPECT_EQ((*grads)[1], back->output(1));
    }
  }
}

}  // namespace
}  // namespace ottr::testing
