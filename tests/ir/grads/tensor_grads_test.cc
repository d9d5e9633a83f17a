// Gradient rules of the tensor and reduction families (ir/grads/tensor_grads.cc,
// reduction_grads.cc): the IR they emit, float32 results computed through the CPU reference
// (the central-difference cases in tests/passes run in float64), and their errors. Each test
// differentiates one node y = op(x, ...) with a given seed dY, so no other rule is involved.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/autodiff.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>({n}, v);
}

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(std::move(dims), v);
}

struct Differentiated {
  std::unique_ptr<ir::Graph> graph;
  std::vector<std::string> ops;  // op types of the nodes autodiff added ("ottr::" prefixed)
  std::vector<Tensor> grads;     // one per float input, in input order
};

// y = op(inputs) with float inputs as graph inputs and the others as initializers; dY = `seed`
// (a graph input of y's type); returns d(Σ y·dY)/d(float inputs) computed by the CPU reference.
absl::StatusOr<Differentiated> Differentiate(const std::string& op,
                                             const std::vector<Tensor>& inputs,
                                             const std::map<std::string, Attribute>& attrs,
                                             const Tensor& seed, int num_outputs = 1,
                                             int loss_output = 0) {
  Differentiated d;
  d.graph = std::make_unique<ir::Graph>("grad_test");
  ir::Graph& g = *d.graph;
  g.set_opset_import("", ir::kMaxOnnxOpset);
  ir::NodeSpec spec{op, "", {}, {}, attrs, "op"};
  std::vector<ir::Value*> params;
  runtime::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = absl::StrCat("in", i);
    if (!inputs[i].defined()) {
      spec.inputs.push_back(nullptr);
    } else if (ir::IsFloat(inputs[i].dtype())) {
      OTTR_ASSIGN_OR_RETURN(ir::Value * v, g.AddInput(name, inputs[i].type()));
      spec.inputs.push_back(v);
      params.push_back(v);
      feeds[name] = inputs[i];
    } else {
      OTTR_ASSIGN_OR_RETURN(ir::Value * v, g.AddInitializer(name, inputs[i]));
      spec.inputs.push_back(v);
    }
  }
  for (int k = 0; k < num_outputs; ++k) spec.output_names.push_back(absl::StrCat("y", k));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  ir::Value* y = n->output(loss_output);
  OTTR_ASSIGN_OR_RETURN(ir::Value * dy, g.AddInput("dy", y->type()));
  feeds["dy"] = seed;
  const int64_t before = g.num_nodes();
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Value*> grads, passes::BuildGradients(g, y, params, dy));
  std::vector<ir::Node*> nodes = g.nodes();
  for (size_t i = static_cast<size_t>(before); i < nodes.size(); ++i) {
    const ir::Node* m = nodes[i];
    if (m->op_type() == "Constant") continue;
    d.ops.push_back(m->domain().empty() ? m->op_type() : m->domain() + "::" + m->op_type());
  }
  for (ir::Value* v : grads) {
    if (v == nullptr) return absl::InternalError("no gradient");
    g.AddOutput(v);
  }
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(d.grads, exec->Run(feeds));
  return d;
}

void ExpectValues(const Tensor& t, const std::vector<float>& want) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_FLOAT_EQ(t.GetAsDouble(i), want[i]) << "element " << i;
}

bool Has(const std::vector<std::string>& ops, const std::string& op) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

TEST(TensorGradsTest, SliceWritesTheGradientBackWithOneSliceGrad) {
  // x[2, 4][:, 3:0:-2] -> columns 3 and 1.
  absl::StatusOr<Differentiated> d =
      Differentiate("Slice", {RandomFloat({2, 4}, 1), I64({3}), I64({0}), I64({1}), I64({-2})}, {},
                    F32({2, 2}, {1, 2, 3, 4}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ops, std::vector<std::string>{"ottr::SliceGrad"});
  ExpectValues(d->grads[0], {0, 2, 0, 1, 0, 4, 0, 3});
}

TEST(TensorGradsTest, ConstantPadIsUndoneByOnePadAndTheValueGetsThePaddingSum) {
  // pad [a, b] by (1, 2) with c: y = [c, a, b, c, c].
  absl::StatusOr<Differentiated> d =
      Differentiate("Pad", {F32({2}, {5, 6}), I64({1, 2}), Tensor::Scalar<float>(0.5f)}, {},
                    F32({5}, {1, 2, 4, 8, 16}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(Has(d->ops, "Pad"));
  EXPECT_FALSE(Has(d->ops, "ottr::PadGrad"));
  ExpectValues(d->grads[0], {2, 4});
  ExpectValues(d->grads[1], {25});
}

TEST(TensorGradsTest, ReflectPadUsesPadGrad) {
  // reflect [a, b, c] by (2, 1): y = [c, b, a, b, c, b].
  absl::StatusOr<Differentiated> d =
      Differentiate("Pad", {F32({3}, {1, 2, 3}), I64({2, 1})}, {{"mode", Attribute("reflect")}},
                    F32({6}, {1, 2, 4, 8, 16, 32}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ops, std::vector<std::string>{"ottr::PadGrad"});
  ExpectValues(d->grads[0], {4, 2 + 8 + 32, 1 + 16});
}

TEST(TensorGradsTest, ConcatIsUndoneByOneSplit) {
  absl::StatusOr<Differentiated> d =
      Differentiate("Concat", {RandomFloat({1, 2}, 2), RandomFloat({2, 2}, 3)},
                    {{"axis", Attribute(0)}}, F32({3, 2}, {1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ops, std::vector<std::string>{"Split"});
  ExpectValues(d->grads[0], {1, 2});
  ExpectValues(d->grads[1], {3, 4, 5, 6});
}

TEST(TensorGradsTest, SplitFillsOutputsWithoutGradientWithZeros) {
  absl::StatusOr<Differentiated> d = Differentiate(
      "Split", {RandomFloat({4}, 4)}, {{"num_outputs", Attribute(2)}}, F32({2}, {7, 9}),
      /*num_outputs=*/2, /*loss_output=*/1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(Has(d->ops, "ConstantOfShape"));
  ExpectValues(d->grads[0], {0, 0, 7, 9});
}

TEST(TensorGradsTest, GatherScatterAddsRepeatedIndices) {
  absl::StatusOr<Differentiated> d = Differentiate(
      "Gather", {RandomFloat({3, 2}, 5), Tensor::FromVector<int64_t>({3}, {2, -1, 0})}, {},
      F32({3, 2}, {1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ops, std::vector<std::string>{"ottr::GatherGrad"});
  ExpectValues(d->grads[0], {5, 6, 0, 0, 4, 6});
}

TEST(TensorGradsTest, TileSumsTheCopies) {
  absl::StatusOr<Differentiated> d =
      Differentiate("Tile", {RandomFloat({1, 2}, 6), I64({3, 2})}, {},
                    F32({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues(d->grads[0], {1 + 3 + 5 + 7 + 9 + 11, 2 + 4 + 6 + 8 + 10 + 12});
}

TEST(TensorGradsTest, ScatterElementsWithMulReductionIsUnimplemented) {
  absl::StatusOr<Differentiated> d = Differentiate(
      "ScatterElements",
      {RandomFloat({3}, 7), Tensor::FromVector<int64_t>({1}, {1}), RandomFloat({1}, 8)},
      {{"reduction", Attribute("mul")}}, F32({3}, {1, 2, 3}));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented) << d.status();
  EXPECT_NE(d.status().message().find("'mul'"), std::string::npos) << d.status();
}

TEST(TensorGradsTest, ScatterElementsNoneZeroesTheOverwrittenPositions) {
  absl::StatusOr<Differentiated> d = Differentiate(
      "ScatterElements",
      {RandomFloat({4}, 9), Tensor::FromVector<int64_t>({2}, {3, 0}), RandomFloat({2}, 10)}, {},
      F32({4}, {1, 2, 3, 4}));
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues(d->grads[0], {0, 2, 3, 0});
  ExpectValues(d->grads[1], {4, 1});
}

TEST(TensorGradsTest, ControlFlowAndShapeOpsAreNotDifferentiable) {
  const ir::OpRegistry& r = ir::OpRegistry::Global();
  for (const char* op : {"Loop", "If", "Shape", "Size", "Constant", "ConstantOfShape", "Range",
                         "OneHot", "ArgMax", "ArgMin"}) {
    const ir::OpSchema* s = r.Find("", op);
    ASSERT_NE(s, nullptr) << op;
    EXPECT_TRUE(s->not_differentiable) << op;
    EXPECT_FALSE(static_cast<bool>(s->gradient)) << op;
  }
}

TEST(ReductionGradsTest, MaxSplitsTheGradientAmongTies) {
  absl::StatusOr<Differentiated> d =
      Differentiate("ReduceMax", {F32({2, 3}, {1, 3, 3, 5, 2, 4}), I64({1})},
                    {{"keepdims", Attribute(0)}}, F32({2}, {6, 10}));
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues(d->grads[0], {0, 3, 3, 10, 0, 0});
}

TEST(ReductionGradsTest, MeanDividesByTheReducedCount) {
  absl::StatusOr<Differentiated> d =
      Differentiate("ReduceMean", {RandomFloat({2, 2, 2}, 11), I64({0, -1})},
                    {{"keepdims", Attribute(0)}}, F32({2}, {4, 8}));
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues(d->grads[0], {1, 1, 2, 2, 1, 1, 2, 2});
}

TEST(ReductionGradsTest, L2IsZeroForAnAllZeroSlice) {
  absl::StatusOr<Differentiated> d =
      Differentiate("ReduceL2", {F32({2, 2}, {0, 0, 3, 4}), I64({1})}, {}, F32({2, 1}, {1, 10}));
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues(d->grads[0], {0, 0, 6, 8});
}

TEST(ReductionGradsTest, ProdIsExactWithAZero) {
  absl::StatusOr<Differentiated> d = Differentiate(
      "ReduceProd", {F32({3}, {2, 0, 5})}, {{"keepdims", Attribute(0)}}, Tensor::Scalar<float>(3));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ops, (std::vector<std::string>{"Reshape", "ottr::ReduceProdGrad"}));
  ExpectValues(d->grads[0], {0, 30, 0});
}

TEST(ReductionGradsTest, RunTimeAxesWithoutKeepdimsAreAnError) {
  // The axes are a graph input, so the rule cannot tell which dims to restore.
  ir::Graph g("runtime_axes");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  absl::StatusOr<ir::Value*> x =
      g.AddInput("x", ir::TensorType(ir::DType::kFloat32, ir::ShapeFromDims({2, 3})));
  absl::StatusOr<ir::Value*> axes =
      g.AddInput("axes", ir::TensorType(ir::DType::kInt64, ir::ShapeFromDims({1})));
  ASSERT_TRUE(x.ok() && axes.ok());
  absl::StatusOr<ir::Node*> n =
      g.AddNode({"ReduceSum", "", {*x, *axes}, {"y"}, {{"keepdims", Attribute(int64_t{0})}}, "r"});
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
  absl::StatusOr<ir::Value*> dy = g.AddInput("dy", (*n)->output(0)->type());
  ASSERT_TRUE(dy.ok());
  absl::StatusOr<std::vector<ir::Value*>> grads =
      passes::BuildGradients(g, (*n)->output(0), {*x}, *dy);
  ASSERT_FALSE(grads.ok());
  EXPECT_NE(grads.status().message().find("axes must be a constant"), std::string::npos)
      << grads.status();
}

}  // namespace
}  // namespace ottr::testing
