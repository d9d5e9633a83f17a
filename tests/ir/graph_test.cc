#include "ir/graph.h"

#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace ottr::ir {
namespace {

TEST(GraphTest, ReplaceAllUsesWithMovesUsesAndOutputs) {
  Graph g;
  Value* x = *g.AddInput("x", TensorType(DType::kFloat32, Shape{Dim(2)}));
  Node* a = *g.AddNode({"Relu", "", {x}, {"a"}, {}, "relu"});
  Node* b = *g.AddNode({"Neg", "", {a->output(0)}, {"b"}, {}, "neg"});
  g.AddOutput(a->output(0));
  g.ReplaceAllUsesWith(a->output(0), x);
  EXPECT_EQ(b->input(0), x);
  EXPECT_EQ(g.outputs()[0], x);
  EXPECT_TRUE(a->output(0)->uses().empty());
  EXPECT_EQ(x->uses().size(), 2u);
}

}  // namespace
}  // namespace ottr::ir
