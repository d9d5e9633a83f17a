// Tests of Loop and If (control_flow_ops.cc / control_flow_kernels.cc): the (M, cond) forms,
// carried values whose shape grows, scan outputs, captures of outer values, zero iterations,
// branch type merging and errors raised inside subgraphs.
#include <memory>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/runtime/cpu/tensor_op_test_util.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Dim;
using ir::DType;
using ir::Graph;
using ir::Node;
using ir::Shape;
using ir::Tensor;
using ir::TensorType;
using ir::Value;

// Loop body (i, c, acc) -> (stop[i], Concat(acc, [i]), table[i]): the carried `acc` grows by one
// element per iteration (its body input is left untyped, as ONNX exporters often do), the scan
// output collects rows of the captured `table`, and the next condition is read from the captured
// `stop`.
std::shared_ptr<Graph> MakeBody() {
  auto body = std::make_shared<Graph>("body");
  body->set_opset_import("", ir::kMaxOnnxOpset);
  Value* i = *body->AddInput("i", TensorType(DType::kInt64, Shape{}));
  Value* c = *body->AddInput("c", TensorType(DType::kBool, Shape{}));
  Value* acc = *body->AddInput("acc", TensorType());
  (void)c;
  Value* table = *body->AddCapture("table", TensorType(DType::kFloat32, Shape{5, 3}));
  Value* stop = *body->AddCapture("stop", TensorType(DType::kBool, Shape{5}));
  Value* axes = *body->AddInitializer("axes", I64({0}));
  Node* u = *body->AddNode({"Unsqueeze", "", {i, axes}, {"u"}, {}, "unsqueeze"});
  Node* cat = *body->AddNode({"Concat", "", {acc, u->output(0)}, {"acc2"},
                              {{"axis", Attribute(int64_t{0})}}, "concat"});
  Node* row = *body->AddNode({"Gather", "", {table, i}, {"row"}, {}, "row"});
  Node* next = *body->AddNode({"Gather", "", {stop, i}, {"c_out"}, {}, "next_cond"});
  body->AddOutput(next->output(0));
  body->AddOutput(cat->output(0));
  body->AddOutput(row->output(0));
  return body;
}

struct LoopRun {
  std::vector<TensorType> types;
  std::vector<Tensor> outputs;
};

// Runs Loop(M?, cond?, init) with the body above; a default Tensor omits M or cond.
absl::StatusOr<LoopRun> RunLoop(const Tensor& m, const Tensor& cond, const Tensor& stop) {
  Graph g("main");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  runtime::TensorMap feeds;
  Value* mv = nullptr;
  Value* cv = nullptr;
  if (m.defined()) {
    OTTR_ASSIGN_OR_RETURN(mv, g.AddInput("M", m.type()));
    feeds["M"] = m;
  }
  if (cond.defined()) {
    OTTR_ASSIGN_OR_RETURN(cv, g.AddInput("cond", cond.type()));
    feeds["cond"] = cond;
  }
  OTTR_ASSIGN_OR_RETURN(Value * init, g.AddInput("init", TensorType(DType::kInt64, Shape{1})));
  OTTR_RETURN_IF_ERROR(g.AddInput("table", TensorType(DType::kFloat32, Shape{5, 3})).status());
  OTTR_RETURN_IF_ERROR(g.AddInput("stop", TensorType(DType::kBool, Shape{5})).status());
  feeds["init"] = I64({-1});
  feeds["table"] = RandomFloat({5, 3}, 41);
  feeds["stop"] = stop;
  OTTR_ASSIGN_OR_RETURN(Node * loop, g.AddNode({"Loop", "", {mv, cv, init}, {"acc_final", "rows"},
                                                {{"body", Attribute(MakeBody())}}, "loop"}));
  g.AddOutput(loop->output(0));
  g.AddOutput(loop->output(1));
  OTTR_RETURN_IF_ERROR(ir::OpRegistry::Global().CheckNode(*loop, ir::kMaxOnnxOpset));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  LoopRun r;
  r.types = {loop->output(0)->type(), loop->output(1)->type()};
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(r.outputs, exec->Run(feeds));
  return r;
}

Tensor Bools(std::vector<bool> v) {
  Tensor t(DType::kBool, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

TEST(ControlFlowKernelsTest, LoopWithTripCountAndCondition) {
  const Tensor table = RandomFloat({5, 3}, 41);
  // M=4, cond true, stop never fires: 4 iterations.
  auto r = RunLoop(Tensor::Scalar<int64_t>(4), Tensor::Scalar<bool>(true), Bools({1, 1, 1, 1, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  // acc grows: the carried type has an unknown length; the scan output [?, 3].
  EXPECT_EQ(r->types[0], TensorType(DType::kInt64, Shape{Dim()}));
  EXPECT_EQ(r->types[1], TensorType(DType::kFloat32, Shape{Dim(), 3}));
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{-1, 0, 1, 2, 3}));
  ASSERT_EQ(r->outputs[1].dims(), (std::vector<int64_t>{4, 3}));
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(At<float>(r->outputs[1], k), At<float>(table, k));
  // The body's condition stops the loop: stop[2] is false, so iterations 0, 1, 2 run.
  r = RunLoop(Tensor::Scalar<int64_t>(5), Tensor::Scalar<bool>(true), Bools({1, 1, 0, 1, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{-1, 0, 1, 2}));
  EXPECT_EQ(r->outputs[1].dims(), (std::vector<int64_t>{3, 3}));
}

TEST(ControlFlowKernelsTest, LoopWhileAndForForms) {
  // ("", cond): a while loop.
  auto r = RunLoop(Tensor(), Tensor::Scalar<bool>(true), Bools({1, 0, 1, 1, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{-1, 0, 1}));
  // (M, ""): the body's condition is ignored.
  r = RunLoop(Tensor::Scalar<int64_t>(3), Tensor(), Bools({0, 0, 0, 0, 0}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{-1, 0, 1, 2}));
  // Initial cond false: no iteration; carried = initial, scan outputs empty with the body's dims.
  r = RunLoop(Tensor::Scalar<int64_t>(3), Tensor::Scalar<bool>(false), Bools({1, 1, 1, 1, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{-1}));
  EXPECT_EQ(r->outputs[1].dims(), (std::vector<int64_t>{0, 3}));
}

TEST(ControlFlowKernelsTest, LoopErrors) {
  // Neither M nor cond: would never terminate.
  auto r = RunLoop(Tensor(), Tensor(), Bools({1, 1, 1, 1, 1}));
  EXPECT_FALSE(r.ok());
  // Iteration 5 reads table[5]: the Gather error surfaces with the iteration.
  r = RunLoop(Tensor::Scalar<int64_t>(9), Tensor(), Bools({1, 1, 1, 1, 1}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("iteration 5"), absl::string_view::npos) << r.status();
  // A body whose signature does not fit the node.
  auto t = InferNode("Loop", {In(Tensor::Scalar<int64_t>(2)), In(Tensor::Scalar<bool>(true))},
                     {{"body", Attribute(MakeBody())}}, 2);
  EXPECT_FALSE(t.ok());
}

// Body (i, c, x) -> (c, x): outputs that are body inputs themselves. `x` is declared f32[7], which
// contradicts the fed value's shape; the fed type wins, but an element type mismatch is an error.
absl::StatusOr<LoopRun> RunPassThrough(const Tensor& x) {
  auto body = std::make_shared<Graph>("pass");
  body->set_opset_import("", ir::kMaxOnnxOpset);
  OTTR_RETURN_IF_ERROR(body->AddInput("i", TensorType(DType::kInt64, Shape{})).status());
  OTTR_ASSIGN_OR_RETURN(Value * c, body->AddInput("c", TensorType(DType::kBool, Shape{})));
  OTTR_ASSIGN_OR_RETURN(Value * bx, body->AddInput("bx", TensorType(DType::kFloat32, Shape{7})));
  body->AddOutput(c);
  body->AddOutput(bx);
  Graph g("main");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  OTTR_ASSIGN_OR_RETURN(Value * m, g.AddInitializer("M", Tensor::Scalar<int64_t>(3)));
  OTTR_ASSIGN_OR_RETURN(Value * xv, g.AddInput("x", x.type()));
  OTTR_ASSIGN_OR_RETURN(Node * loop, g.AddNode({"Loop", "", {m, nullptr, xv}, {"y"},
                                                {{"body", Attribute(body)}}, "loop"}));
  g.AddOutput(loop->output(0));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  LoopRun r;
  r.types = {loop->output(0)->type()};
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(r.outputs, exec->Run({{"x", x}}));
  return r;
}

TEST(ControlFlowKernelsTest, LoopPassThroughBodyAndTypeMismatch) {
  const Tensor x = RandomFloat({2, 3}, 43);
  auto r = RunPassThrough(x);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{2, 3}));
  EXPECT_TRUE(r->outputs[0].BitwiseEquals(x));
  r = RunPassThrough(I64({1, 2}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("loop-carried input 0"), absl::string_view::npos) << r.status();
}

// If whose branches return x (captured) or its transpose.
absl::StatusOr<LoopRun> RunIf(const Tensor& cond, bool constant_cond) {
  auto then_b = std::make_shared<Graph>("then");
  then_b->set_opset_import("", ir::kMaxOnnxOpset);
  Value* tx = *then_b->AddCapture("x", TensorType(DType::kFloat32, Shape{2, 3}));
  Node* id = *then_b->AddNode({"Identity", "", {tx}, {"t_out"}, {}, "then_id"});
  then_b->AddOutput(id->output(0));
  auto else_b = std::make_shared<Graph>("else");
  else_b->set_opset_import("", ir::kMaxOnnxOpset);
  Value* ex = *else_b->AddCapture("x", TensorType(DType::kFloat32, Shape{2, 3}));
  Node* tr = *else_b->AddNode({"Transpose", "", {ex}, {"e_out"}, {}, "else_tr"});
  else_b->AddOutput(tr->output(0));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *then_b));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *else_b));

  Graph g("main");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  runtime::TensorMap feeds;
  Value* c;
  if (constant_cond) {
    OTTR_ASSIGN_OR_RETURN(c, g.AddInitializer("cond", cond));
  } else {
    OTTR_ASSIGN_OR_RETURN(c, g.AddInput("cond", cond.type()));
    feeds["cond"] = cond;
  }
  OTTR_RETURN_IF_ERROR(g.AddInput("x", TensorType(DType::kFloat32, Shape{2, 3})).status());
  feeds["x"] = RandomFloat({2, 3}, 42);
  OTTR_ASSIGN_OR_RETURN(Node * n, g.AddNode({"If", "", {c}, {"y"},
                                             {{"then_branch", Attribute(then_b)},
                                              {"else_branch", Attribute(else_b)}}, "if"}));
  g.AddOutput(n->output(0));
  OTTR_RETURN_IF_ERROR(ir::OpRegistry::Global().CheckNode(*n, ir::kMaxOnnxOpset));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  LoopRun r;
  r.types = {n->output(0)->type()};
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(r.outputs, exec->Run(feeds));
  return r;
}

TEST(ControlFlowKernelsTest, IfRunsTheChosenBranch) {
  const Tensor x = RandomFloat({2, 3}, 42);
  auto r = RunIf(Tensor::Scalar<bool>(true), false);
  ASSERT_TRUE(r.ok()) << r.status();
  // The branches disagree on the shape: both dims unknown.
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{Dim(), Dim()}));
  EXPECT_TRUE(r->outputs[0].BitwiseEquals(x));
  r = RunIf(Tensor::Scalar<bool>(false), false);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(At<float>(r->outputs[0], 1), At<float>(x, 3));  // y[0,1] = x[1,0]
  // A constant condition gives the taken branch's exact type.
  r = RunIf(Tensor::Scalar<bool>(false), true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{3, 2}));
  // The condition must hold one element.
  EXPECT_FALSE(RunIf(Bools({true, false}), false).ok());
}

}  // namespace
}  // namespace ottr::testing
