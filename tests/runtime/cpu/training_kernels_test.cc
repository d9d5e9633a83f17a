// Tests of the ai.onnx.preview.training optimizers (Adam, Adagrad, Momentum): schemas, shape
// functions and CPU kernels against the update rules of the ONNX specification written out here.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kDomain(ir::kTrainingDomain);

Tensor AsDoubleTensor(const Tensor& t) {
  Tensor out(DType::kFloat64, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data<double>()[i] = t.GetAsDouble(i);
  return out;
}

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual.GetAsDouble(i), expected[i], tol * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

struct AdamRef {
  std::vector<double> x, v, h;
};

AdamRef RefAdam(double r, int64_t t, const Tensor& x, const Tensor& g, const Tensor& v,
                const Tensor& h, double alpha, double beta, double eps, double norm,
                double norm_post) {
  AdamRef out;
  const double ra = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double gr = norm * x.GetAsDouble(i) + g.GetAsDouble(i);
    const double vn = alpha * v.GetAsDouble(i) + (1 - alpha) * gr;
    const double hn = beta * h.GetAsDouble(i) + (1 - beta) * gr * gr;
    out.x.push_back((1 - norm_post) * (x.GetAsDouble(i) - ra * vn / (std::sqrt(hn) + eps)));
    out.v.push_back(vn);
    out.h.push_back(hn);
  }
  return out;
}

TEST(AdamTest, TwoTensorsWithBiasCorrection) {
  const Tensor x1 = RandomFloat({3}, 1), x2 = RandomFloat({2, 2}, 2);
  const Tensor g1 = RandomFloat({3}, 3), g2 = RandomFloat({2, 2}, 4);
  const Tensor v1 = RandomFloat({3}, 5), v2 = RandomFloat({2, 2}, 6);
  const Tensor h1 = RandomFloat({3}, 7, 0.1f, 1.0f), h2 = RandomFloat({2, 2}, 8, 0.1f, 1.0f);
  const float alpha = 0.85f, beta = 0.95f, eps = 1e-3f, norm = 0.01f, post = 0.02f;
  for (int64_t t : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(::testing::Message() << "T " << t);
    auto out = RunSingleNode(
        "Adam",
        {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(t), x1, x2, g1, g2, v1, v2, h1, h2},
        {{"alpha", Attribute(alpha)},
         {"beta", Attribute(beta)},
         {"epsilon", Attribute(eps)},
         {"norm_coefficient", Attribute(norm)},
         {"norm_coefficient_post", Attribute(post)}},
        6, kDomain);
    ASSERT_TRUE(out.ok()) << out.status();
    const AdamRef r1 = RefAdam(0.1f, t, x1, g1, v1, h1, alpha, beta, eps, norm, post);
    const AdamRef r2 = RefAdam(0.1f, t, x2, g2, v2, h2, alpha, beta, eps, norm, post);
    ExpectNear((*out)[0], r1.x, 1e-6);
    ExpectNear((*out)[1], r2.x, 1e-6);
    ExpectNear((*out)[2], r1.v, 1e-6);
    ExpectNear((*out)[3], r2.v, 1e-6);
    ExpectNear((*out)[4], r1.h, 1e-6);
    ExpectNear((*out)[5], r2.h, 1e-6);
    EXPECT_EQ((*out)[1].dims(), std::vector<int64_t>({2, 2}));
  }
}

TEST(AdamTest, DefaultAttributesAndDoubleTensors) {
  const Tensor x = AsDoubleTensor(RandomFloat({4}, 11)), g = AsDoubleTensor(RandomFloat({4}, 12));
  const Tensor v = AsDoubleTensor(RandomFloat({4}, 13)), h = AsDoubleTensor(RandomFloat({4}, 14, 0.1f, 1.0f));
  auto out = RunSingleNode("Adam",
                           {Tensor::Scalar<double>(0.01), Tensor::Scalar<int64_t>(5), x, g, v, h},
                           {}, 3, kDomain);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat64);
  const AdamRef r = RefAdam(0.01, 5, x, g, v, h, 0.9f, 0.999f, 1e-6f, 0.0, 0.0);
  ExpectNear((*out)[0], r.x, 1e-12);
  ExpectNear((*out)[1], r.v, 1e-12);
  ExpectNear((*out)[2], r.h, 1e-12);
}

TEST(AdamTest, WrongArityAndShapesAreErrors) {
  const Tensor x = RandomFloat({3}, 1);
  const Tensor r = Tensor::Scalar<float>(0.1f), t = Tensor::Scalar<int64_t>(1);
  // 5 tensors after R and T is not a multiple of 4.
  EXPECT_FALSE(RunSingleNode("Adam", {r, t, x, x, x, x, x}, {}, 3, kDomain).ok());
  // Gradient shaped differently from X.
  auto bad = RunSingleNode("Adam", {r, t, x, RandomFloat({4}, 2), x, x}, {}, 3, kDomain);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shape"), std::string::npos) << bad.status();
  // T must be int64.
  EXPECT_FALSE(RunSingleNode("Adam", {r, Tensor::Scalar<int32_t>(1), x, x, x, x}, {}, 3, kDomain)
                   .ok());
  // Only opset 1 of the training domain exists.
  EXPECT_FALSE(RunSingleNode("Adam", {r, t, x, x, x, x}, {}, 3, kDomain, 2).ok());
}

TEST(AdagradTest, MatchesSpecWithDecay) {
  const Tensor x = RandomFloat({2, 3}, 21), g = RandomFloat({2, 3}, 22);
  const Tensor h = RandomFloat({2, 3}, 23, 0.0f, 1.0f);
  const float decay = 0.1f, eps = 1e-5f, norm = 0.001f;
  auto out = RunSingleNode("Adagrad", {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(4), x, g, h},
                           {{"decay_factor", Attribute(decay)},
                            {"epsilon", Attribute(eps)},
                            {"norm_coefficient", Attribute(norm)}},
                           2, kDomain);
  ASSERT_TRUE(out.ok()) << out.status();
  const double r = static_cast<double>(0.1f) / (1 + 4 * static_cast<double>(decay));
  std::vector<double> want_x, want_h;
  for (int64_t i = 0; i < 6; ++i) {
    const double gr = norm * x.GetAsDouble(i) + g.GetAsDouble(i);
    const double hn = h.GetAsDouble(i) + gr * gr;
    want_h.push_back(hn);
    want_x.push_back(x.GetAsDouble(i) - r * gr / (std::sqrt(hn) + eps));
  }
  ExpectNear((*out)[0], want_x, 1e-6);
  ExpectNear((*out)[1], want_h, 1e-6);
}

TEST(MomentumTest, StandardAndNesterov) {
  const Tensor x = RandomFloat({5}, 31), g = RandomFloat({5}, 32), v = RandomFloat({5}, 33);
  const float alpha = 0.9f, beta = 0.5f, norm = 0.01f;
  for (const char* mode : {"standard", "nesterov"}) {
    for (int64_t t : {int64_t{0}, int64_t{2}}) {
      SCOPED_TRACE(::testing::Message() << mode << " T " << t);
      auto out = RunSingleNode("Momentum",
                               {Tensor::Scalar<float>(0.05f), Tensor::Scalar<int64_t>(t), x, g, v},
                               {{"alpha", Attribute(alpha)},
                                {"beta", Attribute(beta)},
                                {"norm_coefficient", Attribute(norm)},
                                {"mode", Attribute(mode)}},
                               2, kDomain);
      ASSERT_TRUE(out.ok()) << out.status();
      const double b = t > 0 ? beta : 1.0;
      std::vector<double> want_x, want_v;
      for (int64_t i = 0; i < 5; ++i) {
        const double gr = norm * x.GetAsDouble(i) + g.GetAsDouble(i);
        const double vn = alpha * v.GetAsDouble(i) + b * gr;
        want_v.push_back(vn);
        const double step = std::string(mode) == "nesterov" ? gr + alpha * vn : vn;
        want_x.push_back(x.GetAsDouble(i) - static_cast<double>(0.05f) * step);
      }
      ExpectNear((*out)[0], want_x, 1e-6);
      ExpectNear((*out)[1], want_v, 1e-6);
    }
  }
}

TEST(MomentumTest, ModeAndAttributesAreRequired) {
  const Tensor x = RandomFloat({2}, 1);
  const std::vector<Tensor> in = {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(1), x, x, x};
  auto bad_mode = RunSingleNode("Momentum", in,
                                {{"alpha", Attribute(0.9f)},
                                 {"beta", Attribute(1.0f)},
                                 {"norm_coefficient", Attribute(0.0f)},
                                 {"mode", Attribute("heavy-ball")}},
                                2, kDomain);
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_NE(bad_mode.status().message().find("mode"), std::string::npos) << bad_mode.status();
  EXPECT_FALSE(RunSingleNode("Momentum", in, {{"mode", Attribute("standard")}}, 2, kDomain).ok());
}

TEST(OptimizerShapeInferenceTest, OutputsFollowTheirTensors) {
  auto g = ir::ParseGraph(R"(graph "g" {
    opset ai.onnx.preview.training 1
    input %r : f32[]
    input %t : i64[]
    input %x1 : f32[N,4]
    input %x2 : f64[3]
    input %g1 : f32[N,4]
    input %g2 : f64[3]
    input %v1 : f32[N,4]
    input %v2 : f64[3]
    %y1 : f32[*], %y2 : f32[*], %w1 : f32[*], %w2 : f32[*] = ai.onnx.preview.training::Momentum(%r, %t, %x1, %x2, %g1, %g2, %v1, %v2) {alpha = 0.9, beta = 1.0, mode = "standard", norm_coefficient = 0.0} origin "m"
    output %y1, %y2, %w1, %w2
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), **g).ok());
  EXPECT_EQ((*g)->FindValue("y1")->type().ToString(), "f32[N,4]");
  EXPECT_EQ((*g)->FindValue("y2")->type().ToString(), "f64[3]");
  EXPECT_EQ((*g)->FindValue("w1")->type().ToString(), "f32[N,4]");
  EXPECT_EQ((*g)->FindValue("w2")->type().ToString(), "f64[3]");
}

}  // namespace
}  // namespace ottr::testing
