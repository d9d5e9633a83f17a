#include "ir/graph.h"

#include "gtest/gtest.h"
#include "ir/parser.h"

namespace ottr::ir {
namespace {

std::unique_ptr<Graph> Parse(const char* text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

constexpr char kChain[] = R"(graph "g" {
  input %x : f32[2]
  %a : f32[2] = Relu(%x) origin "relu"
  %b : f32[2] = Neg(%a) origin "neg"
  %c : f32[2] = Add(%a, %b) origin "add"
  output %c
})";

TEST(GraphTest, ReplaceAllUsesWithMovesUsesAndOutputs) {
  auto g = Parse(kChain);
  Value* x = g->FindValue("x");
  Value* a = g->FindValue("a");
  g->ReplaceAllUsesWith(a, x);
  EXPECT_TRUE(a->uses().empty());
  EXPECT_EQ(x->uses().size(), 3u);  // relu, neg, add
  EXPECT_EQ(g->FindValue("b")->producer()->input(0), x);
  g->ReplaceAllUsesWith(g->FindValue("c"), x);
  EXPECT_EQ(g->outputs()[0], x);
}

TEST(GraphTest, EraseNodeRefusesWhileUsed) {
  auto g = Parse(kChain);
  Node* relu = g->FindValue("a")->producer();
  absl::Status s = g->EraseNode(relu);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("'a' is still used"), absl::string_view::npos) << s;
  // Graph outputs count as uses.
  EXPECT_FALSE(g->EraseNode(g->FindValue("c")->producer()).ok());
  // Once unused, it goes, and its output name is free again.
  g->ReplaceAllUsesWith(g->FindValue("a"), g->FindValue("x"));
  ASSERT_TRUE(g->EraseNode(relu).ok());
  EXPECT_EQ(g->FindValue("a"), nullptr);
  EXPECT_EQ(g->num_nodes(), 2);
  EXPECT_EQ(g->UniqueName("a"), "a");
}

TEST(GraphTest, TopoOrderIsDeterministicAndDetectsCycles) {
  auto g = Parse(kChain);
  auto order = g->TopoOrder();
  ASSERT_TRUE(order.ok());
  ASSERT_EQ(order->size(), 3u);
  EXPECT_EQ((*order)[0]->origin(), "relu");
  EXPECT_EQ((*order)[2]->origin(), "add");
  // Make relu read add's output: relu -> neg -> add -> relu.
  Node* relu = g->FindValue("a")->producer();
  g->SetNodeInput(relu, 0, g->FindValue("c"));
  auto cyc = g->TopoOrder();
  ASSERT_FALSE(cyc.ok());
  EXPECT_NE(cyc.status().message().find("cycle"), absl::string_view::npos);
}

TEST(GraphTest, SetNodeInputKeepsUseListsExact) {
  auto g = Parse(kChain);
  Node* add = g->FindValue("c")->producer();
  Value* a = g->FindValue("a");
  Value* x = g->FindValue("x");
  EXPECT_EQ(a->uses().size(), 2u);
  g->SetNodeInput(add, 0, x);
  EXPECT_EQ(a->uses().size(), 1u);
  EXPECT_EQ(x->uses().size(), 2u);
  g->SetNodeInput(add, 0, nullptr);
  EXPECT_EQ(x->uses().size(), 1u);
  EXPECT_EQ(add->input(0), nullptr);
}

TEST(GraphTest, CloneIsDeepAndEqual) {
  auto g = Parse(kChain);
  auto c = g->Clone();
  EXPECT_EQ(c->ToString(), g->ToString());
  g->ReplaceAllUsesWith(g->FindValue("b"), g->FindValue("x"));
  EXPECT_NE(c->ToString(), g->ToString());
  EXPECT_EQ(c->FindValue("b")->uses().size(), 1u);
}

TEST(GraphTest, DuplicateNamesAreRejected) {
  Graph g;
  ASSERT_TRUE(g.AddInput("x", TensorType(DType::kFloat32, Shape{})).ok());
  EXPECT_FALSE(g.AddInput("x", TensorType(DType::kFloat32, Shape{})).ok());
  EXPECT_FALSE(g.AddInitializer("x", Tensor::Scalar<float>(1.0f)).ok());
  EXPECT_FALSE(g.AddNode({"Relu", "", {g.FindValue("x")}, {"x"}, {}, "r"}).ok());
}

}  // namespace
}  // namespace ottr::ir
