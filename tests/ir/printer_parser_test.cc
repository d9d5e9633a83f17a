#include <cmath>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace ottr::ir {
namespace {

// A graph exercising every printable construct: symbolic and unknown dims, unknown rank, quoted
// names, omitted inputs, every attribute kind, a nested graph, domains, inline constants.
constexpr char kText[] = R"(graph "main" {
  opset ai.onnx 17
  opset ai.onnx.preview.training 1
  input %x : f32[N,4]
  input %"weird name" : i64[*]
  init %w : f32[2,2] = [1.5, -2.0, 3.25e-05, inf]
  init %big : f16[32] = elided
  capture %outer : f32[?,3]
  %y : f32[N,4] = Relu(%x) origin "relu/0"
  %z : f32[N,4], %mask : bool[N,4] = Dropout(%y, _, _) {seed = 7} origin "drop"
  %c : f32[2] = Constant() {value = tensor<f32[2] [0.5, nan]>} origin "c"
  %a : f32[*] = Foo(%z, %w) {f = 0.1, fs = floats[1.0, -2.5], i = -3, is = ints[], s = "a\"b", ss = strings["p", "q"]} origin "foo"
  %l : f32[N,4] = Loop(_, _, %x) {body = graph "body" {
    input %it : i64[]
    input %cond : bool[]
    input %v : f32[N,4]
    %v2 : f32[N,4] = Neg(%v) origin "neg"
    output %cond, %v2
  }} origin "loop"
  %u : f32[N,4] = ai.onnx.preview.training::Adam(%x) origin "adam"
  output %z, %a, %l, %u
}
)";

TEST(PrinterParserTest, RoundTripsEveryConstruct) {
  auto g = ParseGraph(kText);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string printed = (*g)->ToString();
  auto g2 = ParseGraph(printed);
  ASSERT_TRUE(g2.ok()) << g2.status() << "\n" << printed;
  EXPECT_EQ((*g2)->ToString(), printed);
  // Values survive the trip exactly.
  const Value* w = (*g2)->FindValue("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->initializer()->data<float>()[2], 3.25e-05f);
  EXPECT_TRUE(std::isinf(w->initializer()->data<float>()[3]));
  const Node* foo = (*g2)->FindValue("a")->producer();
  EXPECT_EQ(foo->attr("s")->s(), "a\"b");
  EXPECT_EQ(foo->attr("is")->kind(), Attribute::Kind::kInts);
  EXPECT_EQ(foo->GetInt("i", 0), -3);
  EXPECT_EQ((*g2)->FindValue("weird name")->type().ToString(), "i64[*]");
  EXPECT_EQ((*g2)->FindValue("u")->producer()->domain(), "ai.onnx.preview.training");
  EXPECT_EQ((*g2)->FindValue("z")->producer()->input(1), nullptr);
}

TEST(PrinterParserTest, PrintsNodesInTopologicalOrderAndAcceptsForwardReferences) {
  // %b is used before the line defining it.
  auto g = ParseGraph(R"(graph "g" {
    input %x : f32[3]
    %c : f32[3] = Neg(%b) origin "second"
    %b : f32[3] = Relu(%x) origin "first"
    output %c
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string s = (*g)->ToString();
  EXPECT_LT(s.find("origin \"first\""), s.find("origin \"second\""));
}

TEST(PrinterParserTest, FloatsPrintExactly) {
  Graph g;
  const std::vector<float> vals = {0.1f, 1.0f / 3.0f, 1e-38f, -65504.0f, 16777217.0f};
  auto v = g.AddInitializer("t", Tensor::FromVector<float>({5}, vals));
  ASSERT_TRUE(v.ok());
  g.AddOutput(*v);
  auto back = ParseGraph(PrintGraph(g));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)->FindValue("t")->initializer()->BitwiseEquals(*(*v)->initializer()));
}

TEST(PrinterParserTest, ElidesLargeConstantsUnlessAsked) {
  Graph g;
  auto v = g.AddInitializer("t", Tensor(DType::kFloat32, {100}));
  ASSERT_TRUE(v.ok());
  EXPECT_NE(PrintGraph(g).find("= elided"), std::string::npos);
  PrintOptions all;
  all.max_inline_elements = -1;
  EXPECT_EQ(PrintGraph(g, all).find("elided"), std::string::npos);
}

TEST(PrinterParserTest, ErrorsNameLineAndColumn) {
  auto g = ParseGraph("graph \"g\" {\n  input %x : f32[3]\n  %y : f32[3] = Relu(%nope) origin \"r\"\n  output %y\n}\n");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("line 3"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("%nope"), absl::string_view::npos) << g.status();
  EXPECT_FALSE(ParseGraph("graph \"g\" { input %x : f99[3] }").ok());
  EXPECT_FALSE(ParseGraph("graph \"g\" { init %x : f32[2] = [1.0] }").ok());  // too few
  EXPECT_FALSE(ParseGraph("graph \"g\" { input %x : f32[3]").ok());           // unterminated
  EXPECT_FALSE(ParseGraph("graph \"g\" { } trailing").ok());
}

}  // namespace
}  // namespace ottr::ir
