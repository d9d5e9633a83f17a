// Tests of the activation ops: every op against a double-precision reference of its ONNX formula
// on random inputs, in float, double and float16, with default and explicit attributes; PRelu's
// slope broadcasting; shape functions and error cases.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/tensor.h"
#include "runtime/cpu/elementwise_common.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Attrs = std::map<std::string, Attribute>;

double Softplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }

struct Case {
  std::string op;
  Attrs attrs;
  std::function<double(double)> ref;
};

std::vector<Case> Cases() {
  const double kSeluAlpha = 1.67326319217681884765625, kSeluGamma = 1.05070102214813232421875;
  return {
      {"Relu", {}, [](double x) { return std::max(x, 0.0); }},
      {"LeakyRelu", {}, [](double x) { return x < 0 ? 0.01f * x : x; }},
      {"LeakyRelu", {{"alpha", Attribute(0.3f)}}, [](double x) { return x < 0 ? 0.3f * x : x; }},
      {"Sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"Tanh", {}, [](double x) { return std::tanh(x); }},
      {"Softplus", {}, Softplus},
      {"Softsign", {}, [](double x) { return x / (1 + std::fabs(x)); }},
      {"Elu", {}, [](double x) { return x > 0 ? x : std::exp(x) - 1; }},
      {"Elu", {{"alpha", Attribute(2.5f)}}, [](double x) { return x > 0 ? x : 2.5 * (std::exp(x) - 1); }},
      {"Selu", {}, [=](double x) { return kSeluGamma * (x > 0 ? x : kSeluAlpha * (std::exp(x) - 1)); }},
      {"Selu", {{"alpha", Attribute(2.0f)}, {"gamma", Attribute(3.0f)}},
       [](double x) { return 3 * (x > 0 ? x : 2 * (std::exp(x) - 1)); }},
      {"Celu", {}, [](double x) { return std::max(0.0, x) + std::min(0.0, std::exp(x) - 1); }},
      {"Celu", {{"alpha", Attribute(0.5f)}},
       [](double x) { return std::max(0.0, x) + std::min(0.0, 0.5 * (std::exp(x / 0.5) - 1)); }},
      {"HardSigmoid", {}, [](double x) { return std::clamp(0.2f * x + 0.5f, 0.0, 1.0); }},
      {"HardSigmoid", {{"alpha", Attribute(0.5f)}, {"beta", Attribute(0.25f)}},
       [](double x) { return std::clamp(0.5 * x + 0.25, 0.0, 1.0); }},
      {"HardSwish", {}, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }},
      {"ThresholdedRelu", {}, [](double x) { return x > 1 ? x : 0; }},
      {"ThresholdedRelu", {{"alpha", Attribute(-0.5f)}}, [](double x) { return x > -0.5 ? x : 0; }},
      {"Mish", {}, [](double x) { return x * std::tanh(Softplus(x)); }},
      {"Gelu", {}, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {"Gelu", {{"approximate", Attribute("tanh")}},
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (x + 0.044715 * x * x * x)));
       }},
  };
}

TEST(ActivationKernelTest, EveryOpMatchesItsFormula) {
  // Values in [-6, 6] plus a few exact points where branches switch.
  Tensor x = RandomFloat({4, 25}, 99, -6.0f, 6.0f);
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 3.0f, -3.0f, 0.5f, -0.5f};
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = special[i];
  for (const Case& c : Cases()) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
      absl::StatusOr<Tensor> xin = runtime::cpu::ew::CastTensor(x, dt);
      ASSERT_TRUE(xin.ok());
      absl::StatusOr<std::vector<Tensor>> r = RunSingleNode(c.op, {*xin}, c.attrs);
      ASSERT_TRUE(r.ok()) << c.op << ": " << r.status();
      const Tensor& y = (*r)[0];
      ASSERT_EQ(y.dtype(), dt);
      ASSERT_EQ(y.dims(), x.dims());
      const double rtol = dt == DType::kFloat64   ? 1e-12
                          : dt == DType::kFloat32 ? 2e-6
                          : dt == DType::kFloat16 ? 2e-3
                                                  : 1.6e-2;
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const double in = xin->GetAsDouble(i);
        const double want = c.ref(in);
        EXPECT_NEAR(y.GetAsDouble(i), want, rtol * std::max(1.0, std::fabs(want)))
            << c.op << " " << ir::DTypeName(dt) << " x=" << in;
      }
    }
  }
}

TEST(ActivationKernelTest, LargeInputsDoNotOverflow) {
  const Tensor x = Tensor::FromVector<float>({4}, {-100.0f, 100.0f, -1000.0f, 1000.0f});
  auto run = [&](const std::string& op) {
    absl::StatusOr<std::vector<Tensor>> r = RunSingleNode(op, {x});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : Tensor();
  };
  const Tensor s = run("Sigmoid");
  EXPECT_NEAR(s.data<float>()[0], 3.7200759760208356e-44, 3e-45);  // exp(-100), a float subnormal
  EXPECT_EQ(s.data<float>()[1], 1.0f);
  EXPECT_EQ(s.data<float>()[2], 0.0f);
  EXPECT_EQ(s.data<float>()[3], 1.0f);
  const Tensor sp = run("Softplus");
  EXPECT_EQ(sp.data<float>()[1], 100.0f);
  EXPECT_EQ(sp.data<float>()[3], 1000.0f);
  EXPECT_EQ(sp.data<float>()[2], 0.0f);
  const Tensor m = run("Mish");
  EXPECT_EQ(m.data<float>()[3], 1000.0f);
  EXPECT_FALSE(std::isnan(m.data<float>()[2]));
}

TEST(ActivationKernelTest, ReluOnSignedIntegersAndNaN) {
  absl::StatusOr<std::vector<Tensor>> r =
      RunSingleNode("Relu", {Tensor::FromVector<int8_t>({4}, {-128, -1, 0, 127})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((std::vector<int8_t>((*r)[0].data<int8_t>(), (*r)[0].data<int8_t>() + 4)),
            (std::vector<int8_t>{0, 0, 0, 127}));
  r = RunSingleNode("Relu", {Tensor::FromVector<int64_t>({2}, {-5, 9})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<int64_t>()[0], 0);
  EXPECT_EQ((*r)[0].data<int64_t>()[1], 9);
  r = RunSingleNode("Relu", {Tensor::FromVector<float>({1}, {std::numeric_limits<float>::quiet_NaN()})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::isnan((*r)[0].data<float>()[0]));
}

TEST(ActivationKernelTest, PReluBroadcastsSlope) {
  // Per-channel slope [C,1,1] against [N,C,H,W].
  const Tensor x = RandomFloat({2, 3, 2, 2}, 5);
  const Tensor slope = Tensor::FromVector<float>({3, 1, 1}, {0.1f, 0.2f, 0.3f});
  absl::StatusOr<std::vector<Tensor>> r = RunSingleNode("PRelu", {x, slope});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = (*r)[0];
  ASSERT_EQ(y.dims(), x.dims());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float v = x.data<float>()[i];
    const float s = slope.data<float>()[(i / 4) % 3];
    EXPECT_EQ(y.data<float>()[i], v < 0 ? s * v : v);
  }
  // Scalar slope, integer types.
  r = RunSingleNode("PRelu", {Tensor::FromVector<int32_t>({3}, {-4, 0, 5}),
                              Tensor::FromVector<int32_t>({}, {3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((std::vector<int32_t>((*r)[0].data<int32_t>(), (*r)[0].data<int32_t>() + 3)),
            (std::vector<int32_t>{-12, 0, 5}));
  // Incompatible slope and mixed types are errors.
  EXPECT_FALSE(RunSingleNode("PRelu", {x, RandomFloat({4}, 6)}).ok());
  EXPECT_FALSE(RunSingleNode("PRelu", {x, Tensor::FromVector<double>({1}, {0.5})}).ok());
}

TEST(ActivationKernelTest, GeluRejectsUnknownApproximation) {
  absl::StatusOr<std::vector<Tensor>> r =
      RunSingleNode("Gelu", {RandomFloat({3}, 1)}, {{"approximate", Attribute("erf")}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("approximate"), std::string::npos) << r.status();
}

TEST(ActivationKernelTest, RejectsNonFloatTypesAndUnknownAttributes) {
  EXPECT_FALSE(RunSingleNode("Sigmoid", {Tensor::FromVector<int32_t>({1}, {1})}).ok());
  EXPECT_FALSE(RunSingleNode("Relu", {Tensor::FromVector<uint8_t>({1}, {1})}).ok());
  EXPECT_FALSE(RunSingleNode("Elu", {RandomFloat({2}, 2)}, {{"beta", Attribute(1.0f)}}).ok());
  // Gelu exists from opset 20, Mish from 18.
  EXPECT_FALSE(RunSingleNode("Gelu", {RandomFloat({2}, 3)}, {}, 1, "", 19).ok());
  EXPECT_TRUE(RunSingleNode("Mish", {RandomFloat({2}, 3)}, {}, 1, "", 18).ok());
}

TEST(ActivationKernelTest, SymbolicShapesPassThrough) {
  ir::Graph g("g");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  const ir::Shape s{ir::Dim::Symbol("N"), 16};
  absl::StatusOr<ir::Value*> x = g.AddInput("x", ir::TensorType(DType::kFloat32, s));
  ASSERT_TRUE(x.ok());
  absl::StatusOr<ir::Value*> slope = g.AddInput("s", ir::TensorType(DType::kFloat32, ir::Shape{16}));
  ASSERT_TRUE(slope.ok());
  absl::StatusOr<ir::Node*> gelu = g.AddNode({"Gelu", "", {*x}, {"g"}, {}, "gelu"});
  ASSERT_TRUE(gelu.ok());
  absl::StatusOr<ir::Node*> prelu = g.AddNode({"PRelu", "", {(*gelu)->output(0), *slope}, {"p"}, {}, "prelu"});
  ASSERT_TRUE(prelu.ok());
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
  EXPECT_EQ((*prelu)->output(0)->type(), ir::TensorType(DType::kFloat32, s));
}

}  // namespace
}  // namespace ottr::testing
