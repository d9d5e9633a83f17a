// Tests of the elementwise gradient rules (ir/grads/elementwise_grads.cc) beyond the
// central-difference cases: the subgradients chosen where central differences cannot look (Max/Min
// ties, Pow's exponent at a zero base, Clip with min > max), the cheaper graphs for known Pow
// exponents, and Cast between float types.
#include <cmath>
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

// Runs op(inputs) forward and backward with seed dy; inputs whose `constant` flag is set are
// initializers (not differentiated). Returns {y, d input_0, d input_1, ...} for the others.
struct Run {
  std::vector<Tensor> out;
  std::unique_ptr<ir::Graph> graph;
};

absl::StatusOr<Run> Backward(const std::string& op, const std::vector<Tensor>& inputs, const Tensor& dy,
                             std::map<std::string, Attribute> attrs = {},
                             std::vector<bool> constant = {}) {
  Run r;
  r.graph = std::make_unique<ir::Graph>("t");
  ir::Graph& g = *r.graph;
  g.set_opset_import("", ir::kMaxOnnxOpset);
  ir::NodeSpec spec{op, "", {}, {"y"}, std::move(attrs), "fwd"};
  std::vector<Value*> params;
  runtime::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = absl::StrCat("in", i);
    Value* v = nullptr;
    if (!inputs[i].defined()) {
      spec.inputs.push_back(nullptr);
      continue;
    }
    if (i < constant.size() && constant[i]) {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInitializer(name, inputs[i]));
    } else {
      OTTR_ASSIGN_OR_RETURN(v, g.AddInput(name, inputs[i].type()));
      params.push_back(v);
      feeds[name] = inputs[i];
    }
    spec.inputs.push_back(v);
  }
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), g));
  OTTR_ASSIGN_OR_RETURN(Value * seed, g.AddInput("dy", n->output(0)->type()));
  feeds["dy"] = dy;
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> grads, passes::BuildGradients(g, n->output(0), params, seed));
  g.AddOutput(n->output(0));
  for (Value* v : grads) {
    if (v == nullptr) return absl::InternalError("missing gradient");
    g.AddOutput(v);
  }
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(g));
  OTTR_ASSIGN_OR_RETURN(r.out, exec->Run(feeds));
  return r;
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(static_cast<float>(t.GetAsDouble(i)));
  return v;
}

int Count(const ir::Graph& g, const std::string& op) {
  int c = 0;
  for (const ir::Node* n : g.nodes()) c += n->op_type() == op;
  return c;
}

TEST(ElementwiseGradientTest, MaxAndMinTiesShareTheGradient) {
  const Tensor dy = Tensor::FromVector<float>({4}, {1.0f, 2.0f, 4.0f, 8.0f});
  auto r = Backward("Max",
                    {Tensor::FromVector<float>({4}, {1.0f, 2.0f, 3.0f, 5.0f}),
                     Tensor::FromVector<float>({4}, {1.0f, 7.0f, 3.0f, 0.0f})},
                    dy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{0.5f, 0.0f, 2.0f, 8.0f}));
  EXPECT_EQ(Floats(r->out[2]), (std::vector<float>{0.5f, 2.0f, 2.0f, 0.0f}));
  // Three-way tie with a broadcast scalar: each gets a third, the scalar sums its shares.
  r = Backward("Min",
               {Tensor::FromVector<float>({4}, {3.0f, 3.0f, 1.0f, 9.0f}),
                Tensor::FromVector<float>({4}, {3.0f, 4.0f, 2.0f, 9.0f}), Tensor::Scalar<float>(3.0f)},
               Tensor::FromVector<float>({4}, {3.0f, 6.0f, 12.0f, 24.0f}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->out[0]), (std::vector<float>{3.0f, 3.0f, 1.0f, 3.0f}));
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{1.0f, 3.0f, 12.0f, 0.0f}));
  EXPECT_EQ(Floats(r->out[2]), (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(Floats(r->out[3]), (std::vector<float>{1.0f + 3.0f + 24.0f}));
}

TEST(ElementwiseGradientTest, MaxWithNaNGivesNoGradient) {
  const float nan = std::nanf("");
  auto r = Backward("Max",
                    {Tensor::FromVector<float>({2}, {nan, 1.0f}), Tensor::FromVector<float>({2}, {2.0f, 0.0f})},
                    Tensor::FromVector<float>({2}, {1.0f, 1.0f}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(Floats(r->out[2]), (std::vector<float>{0.0f, 0.0f}));
}

TEST(ElementwiseGradientTest, PowWithAKnownExponentNeedsNoGeneralPow) {
  const Tensor a = Tensor::FromVector<float>({3}, {-1.5f, 0.0f, 2.0f});
  const Tensor dy = Tensor::FromVector<float>({3}, {1.0f, 2.0f, 3.0f});
  // Square: dA = dY · 2A, no Pow in the backward.
  auto r = Backward("Pow", {a, Tensor::Scalar<int64_t>(2)}, dy, {}, {false, true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Count(*r->graph, "Pow"), 1);
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{-3.0f, 0.0f, 12.0f}));
  // Identity exponent: dA = dY.
  r = Backward("Pow", {a, Tensor::Scalar<float>(1.0f)}, dy, {}, {false, true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Count(*r->graph, "Pow"), 1);
  EXPECT_EQ(Floats(r->out[1]), Floats(dy));
  // Cube: one Pow with the constant exponent 2, no Cast/Sub of the exponent.
  r = Backward("Pow", {a, Tensor::FromVector<int32_t>({1}, {3})}, dy, {}, {false, true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Count(*r->graph, "Pow"), 2);
  EXPECT_EQ(Count(*r->graph, "Cast"), 0);
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{6.75f, 0.0f, 36.0f}));
}

TEST(ElementwiseGradientTest, PowExponentGradientIsZeroAtAZeroBase) {
  // d/dB A^B = A^B ln A → 0 as A → 0+ for B > 0 (PyTorch's choice), not 0 · (−∞) = NaN.
  auto r = Backward("Pow",
                    {Tensor::FromVector<float>({3}, {0.0f, 2.0f, 0.0f}),
                     Tensor::FromVector<float>({3}, {1.5f, 2.0f, 0.0f})},
                    Tensor::FromVector<float>({3}, {1.0f, 1.0f, 1.0f}));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<float> db = Floats(r->out[2]);
  EXPECT_EQ(db[0], 0.0f);
  EXPECT_NEAR(db[1], 4.0f * std::log(2.0f), 1e-6);
  EXPECT_EQ(db[2], 0.0f);
}

TEST(ElementwiseGradientTest, ClipWithMinAboveMaxSendsEverythingToMax) {
  auto r = Backward("Clip",
                    {Tensor::FromVector<float>({3}, {-1.0f, 0.2f, 2.0f}), Tensor::Scalar<float>(0.5f),
                     Tensor::Scalar<float>(-0.5f)},
                    Tensor::FromVector<float>({3}, {1.0f, 2.0f, 4.0f}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->out[0]), (std::vector<float>{-0.5f, -0.5f, -0.5f}));
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(Floats(r->out[2]), (std::vector<float>{0.0f}));
  EXPECT_EQ(Floats(r->out[3]), (std::vector<float>{7.0f}));
}

TEST(ElementwiseGradientTest, ClipBoundsGetTheGradientOfTheElementsTheyReplace) {
  auto r = Backward("Clip",
                    {Tensor::FromVector<float>({4}, {-1.0f, 0.0f, 0.5f, 2.0f}), Tensor::Scalar<float>(-0.5f),
                     Tensor::Scalar<float>(1.0f)},
                    Tensor::FromVector<float>({4}, {1.0f, 2.0f, 4.0f, 8.0f}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{0.0f, 2.0f, 4.0f, 0.0f}));
  EXPECT_EQ(Floats(r->out[2]), (std::vector<float>{1.0f}));
  EXPECT_EQ(Floats(r->out[3]), (std::vector<float>{8.0f}));
}

TEST(ElementwiseGradientTest, CastGradientReturnsToTheSourceType) {
  auto r = Backward("Cast", {Tensor::FromVector<float>({2}, {1.0f, 2.0f})},
                    Tensor::FromVector<double>({2}, {0.25, -3.0}), {{"to", Attribute(int64_t{11})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out[1].dtype(), DType::kFloat32);
  EXPECT_EQ(Floats(r->out[1]), (std::vector<float>{0.25f, -3.0f}));
  // float16 -> float32: the gradient is rounded back to float16.
  auto h = Backward("CastLike", {Tensor(DType::kFloat16, {2}), Tensor(DType::kFloat32, {1})},
                    Tensor::FromVector<float>({2}, {0.5f, 1.0f}), {}, {false, true});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->out[1].dtype(), DType::kFloat16);
  EXPECT_EQ(Floats(h->out[1]), (std::vector<float>{0.5f, 1.0f}));
}

TEST(ElementwiseGradientTest, ModGradientUsesTheQuotientOfEitherMode) {
  // 7 mod −2: fmod=0 → −1 (q = floor(−3.5) = −4), fmod=1 → 1 (q = trunc(−3.5) = −3).
  for (int64_t fmod : {0, 1}) {
    auto r = Backward("Mod", {Tensor::FromVector<float>({1}, {7.0f}), Tensor::FromVector<float>({1}, {-2.0f})},
                      Tensor::FromVector<float>({1}, {1.0f}), {{"fmod", Attribute(fmod)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Floats(r->out[0])[0], fmod ? 1.0f : -1.0f);
    EXPECT_EQ(Floats(r->out[1])[0], 1.0f);
    EXPECT_EQ(Floats(r->out[2])[0], fmod ? 3.0f : 4.0f);
  }
}

}  // namespace
}  // namespace ottr::testing
