// Tests of the activation gradient rules (ir/grads/activation_grads.cc) beyond the
// central-difference cases: which forward value each backward op reads, that attributes are
// passed on, PRelu's slope reduction, and a float32 training-graph run against the float64 one.
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
using ir::Value;

// One forward node on graph inputs, plus a graph input "dy" typed like its output (the seed).
struct OneNode {
  std::unique_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::vector<Value*> inputs;
  Value* dy = nullptr;
};

absl::StatusOr<OneNode> Build(const std::string& op, const std::vector<ir::TensorType>& inputs,
                              std::map<std::string, Attribute> attrs = {}) {
  OneNode g;
  g.graph = std::make_unique<ir::Graph>("t");
  g.graph->set_opset_import("", ir::kMaxOnnxOpset);
  g.graph->set_opset_import(std::string(ir::kOttrDomain), 1);
  ir::NodeSpec spec{op, "", {}, {"y"}, std::move(attrs), "fwd"};
  for (size_t i = 0; i < inputs.size(); ++i) {
    OTTR_ASSIGN_OR_RETURN(Value * v, g.graph->AddInput(absl::StrCat("in", i), inputs[i]));
    spec.inputs.push_back(v);
    g.inputs.push_back(v);
  }
  OTTR_ASSIGN_OR_RETURN(g.node, g.graph->AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *g.graph));
  OTTR_ASSIGN_OR_RETURN(g.dy, g.graph->AddInput("dy", g.node->output(0)->type()));
  return g;
}

std::vector<ir::Node*> NodesOf(const ir::Graph& g, const std::string& op) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes()) {
    if (n->op_type() == op) out.push_back(n);
  }
  return out;
}

ir::TensorType F32(std::vector<int64_t> dims) {
  return ir::TensorType(DType::kFloat32, ir::ShapeFromDims(dims));
}

TEST(ActivationGradientTest, EachRuleEmitsOneBackwardOpOnTheRightForwardValue) {
  struct Expect {
    const char* op;
    const char* grad;
    bool reads_output;
  };
  for (const Expect& e : {Expect{"Relu", "ReluGrad", true}, Expect{"Sigmoid", "SigmoidGrad", true},
                          Expect{"Tanh", "TanhGrad", true}, Expect{"Gelu", "GeluGrad", false},
                          Expect{"Mish", "MishGrad", false}, Expect{"Elu", "EluGrad", false},
                          Expect{"Softplus", "SoftplusGrad", false}}) {
    auto g = Build(e.op, {F32({4, 5})});
    ASSERT_TRUE(g.ok()) << g.status();
    auto grads = passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_EQ(g->graph->nodes().size(), 2u) << e.op << ": only the forward node and its backward";
    const auto backward = NodesOf(*g->graph, e.grad);
    ASSERT_EQ(backward.size(), 1u) << e.op;
    EXPECT_EQ(backward[0]->domain(), ir::kOttrDomain);
    EXPECT_EQ(backward[0]->input(0), g->dy);
    EXPECT_EQ(backward[0]->input(1), e.reads_output ? g->node->output(0) : g->inputs[0]) << e.op;
    EXPECT_EQ((*grads)[0], backward[0]->output(0));
  }
}

TEST(ActivationGradientTest, AttributesArePassedOn) {
  auto g = Build("Gelu", {F32({3})}, {{"approximate", Attribute("tanh")}});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy).ok());
  const auto gelu = NodesOf(*g->graph, "GeluGrad");
  ASSERT_EQ(gelu.size(), 1u);
  EXPECT_EQ(gelu[0]->GetString("approximate", "none"), "tanh");

  g = Build("Selu", {F32({3})}, {{"alpha", Attribute(2.0f)}, {"gamma", Attribute(0.5f)}});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy).ok());
  const auto selu = NodesOf(*g->graph, "SeluGrad");
  ASSERT_EQ(selu.size(), 1u);
  EXPECT_EQ(selu[0]->GetFloat("alpha", 0), 2.0f);
  EXPECT_EQ(selu[0]->GetFloat("gamma", 0), 0.5f);
}

TEST(ActivationGradientTest, PReluSumsTheSlopeGradientToItsShape) {
  auto g = Build("PRelu", {F32({2, 3, 4, 4}), F32({3, 1, 1})});
  ASSERT_TRUE(g.ok()) << g.status();
  auto grads = passes::BuildGradients(*g->graph, g->node->output(0), g->inputs, g->dy);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(NodesOf(*g->graph, "PReluGrad").size(), 1u);
  // The kernel reduces dSlope itself: no ReduceSum, no Reshape.
  EXPECT_TRUE(NodesOf(*g->graph, "ReduceSum").empty());
  EXPECT_EQ((*grads)[0]->type(), F32({2, 3, 4, 4}));
  EXPECT_EQ((*grads)[1]->type(), F32({3, 1, 1}));

  // Only the slope trained (X is not a parameter).
  g = Build("PRelu", {F32({5, 3}), F32({3})});
  ASSERT_TRUE(g.ok()) << g.status();
  grads = passes::BuildGradients(*g->graph, g->node->output(0), {g->inputs[1]}, g->dy);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0]->type(), F32({3}));
}

TEST(ActivationGradientTest, Float32BackwardMatchesFloat64) {
  // x -> Gelu -> Tanh -> Mish -> PRelu(slope): the float32 graph against the float64 one.
  auto run = [](DType dt) -> absl::StatusOr<std::vector<Tensor>> {
    ir::Graph g("chain");
    g.set_opset_import("", ir::kMaxOnnxOpset);
    g.set_opset_import(std::string(ir::kOttrDomain), 1);
    const ir::TensorType t(dt, ir::ShapeFromDims({4, 6}));
    OTTR_ASSIGN_OR_RETURN(Value * x, g.AddInput("x", t));
    OTTR_ASSIGN_OR_RETURN(Value * s, g.AddInput("s", ir::TensorType(dt, ir::ShapeFromDims({6}))));
    OTTR_ASSIGN_OR_RETURN(Value * dy, g.AddInput("dy", t));
    OTTR_ASSIGN_OR_RETURN(ir::Node * a, g.AddNode({"Gelu", "", {x}, {"a"}, {}, "gelu"}));
    OTTR_ASSIGN_OR_RETURN(ir::Node * b, g.AddNode({"Tanh", "", {a->output(0)}, {"b"}, {}, "tanh"}));
    OTTR_ASSIGN_OR_RETURN(ir::Node * c, g.AddNode({"Mish", "", {b->output(0)}, {"c"}, {}, "mish"}));
    OTTR_ASSIGN_OR_RETURN(ir::Node * d, g.AddNode({"PRelu", "", {c->output(0), s}, {"d"}, {}, "prelu"}));
    OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
    OTTR_ASSIGN_OR_RETURN(std::vector<Value*> grads, passes::BuildGradients(g, d->output(0), {x, s}, dy));
    for (Value* v : grads) g.AddOutput(v);
    OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
    auto cast = [dt](const Tensor& f) {
      Tensor o(dt, f.dims());
      for (int64_t i = 0; i < f.num_elements(); ++i) {
        if (dt == DType::kFloat32) o.data<float>()[i] = f.data<float>()[i];
        else o.data<double>()[i] = f.data<float>()[i];
      }
      return o;
    };
    return exec->Run({{"x", cast(RandomFloat({4, 6}, 1, -3.0f, 3.0f))},
                      {"s", cast(RandomFloat({6}, 2, 0.1f, 0.5f))},
                      {"dy", cast(RandomFloat({4, 6}, 3))}});
  };
  auto f32 = run(DType::kFloat32);
  auto f64 = run(DType::kFloat64);
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(f64.ok()) << f64.status();
  for (size_t k = 0; k < f32->size(); ++k) {
    const Tensor& a = (*f32)[k];
    const Tensor& b = (*f64)[k];
    ASSERT_EQ(a.dims(), b.dims());
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      EXPECT_NEAR(a.GetAsDouble(i), b.GetAsDouble(i), 1e-5 * (1 + std::fabs(b.GetAsDouble(i))))
          << "gradient " << k << " element " << i;
    }
  }
}

}  // namespace
}  // namespace ottr::testing
