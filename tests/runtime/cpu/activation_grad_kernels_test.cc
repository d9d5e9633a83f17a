// Tests of the activation backward kernels (runtime/cpu/activation_grad_kernels.cc). The float64
// path is checked against central differences by tests/passes/grad_cases_activation.cc; here the
// float32 path (inline exp/tanh, bitwise selects) and the float16/bfloat16 paths are compared
// with it on the same (rounded) inputs, including inputs far out in the tails, and PReluGrad is
// compared with a direct broadcasting loop. Also shape functions and error cases.
#include <cmath>
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

const std::string kOttr(ir::kOttrDomain);

Tensor CastTo(const Tensor& t, DType dt) {
  absl::StatusOr<Tensor> r = runtime::cpu::ew::CastTensor(t, dt);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor();
}

struct GradOp {
  std::string forward;  // the activation, run to get Y for ops that take it
  std::string grad;
  Attrs attrs;
  bool from_output;
};

std::vector<GradOp> GradOps() {
  return {
      {"Relu", "ReluGrad", {}, true},
      {"LeakyRelu", "LeakyReluGrad", {}, false},
      {"LeakyRelu", "LeakyReluGrad", {{"alpha", Attribute(0.3f)}}, false},
      {"Sigmoid", "SigmoidGrad", {}, true},
      {"Tanh", "TanhGrad", {}, true},
      {"Gelu", "GeluGrad", {}, false},
      {"Gelu", "GeluGrad", {{"approximate", Attribute("tanh")}}, false},
      {"Elu", "EluGrad", {}, false},
      {"Elu", "EluGrad", {{"alpha", Attribute(0.4f)}}, false},
      {"Selu", "SeluGrad", {}, false},
      {"Selu", "SeluGrad", {{"alpha", Attribute(2.0f)}, {"gamma", Attribute(0.5f)}}, false},
      {"Celu", "CeluGrad", {}, false},
      {"Celu", "CeluGrad", {{"alpha", Attribute(0.25f)}}, false},
      {"Softplus", "SoftplusGrad", {}, false},
      {"HardSigmoid", "HardSigmoidGrad", {}, false},
      {"HardSigmoid", "HardSigmoidGrad", {{"alpha", Attribute(0.5f)}, {"beta", Attribute(0.3f)}}, false},
      {"HardSwish", "HardSwishGrad", {}, false},
      {"Mish", "MishGrad", {}, false},
      {"Softsign", "SoftsignGrad", {}, false},
      {"ThresholdedRelu", "ThresholdedReluGrad", {}, false},
      {"ThresholdedRelu", "ThresholdedReluGrad", {{"alpha", Attribute(-0.5f)}}, false},
  };
}

TEST(ActivationGradKernelTest, EveryTypeMatchesTheFloat64Kernel) {
  // [-8, 8] plus the tails and the branch points.
  Tensor x = RandomFloat({6, 25}, 7, -8.0f, 8.0f);
  const std::vector<float> special = {0.0f,   -0.0f,  1.0f,   -1.0f,  3.0f,    -3.0f,  -0.5f,
                                      20.0f,  -20.0f, 21.5f,  -30.0f, 45.0f,   -45.0f, 100.0f,
                                      -100.0f, 1e-4f, -1e-4f, 88.0f,  -88.0f,  -200.0f};
  for (size_t i = 0; i < special.size(); ++i) x.data<float>()[i] = special[i];
  const Tensor dy = RandomFloat(x.dims(), 8, -2.0f, 2.0f);
  for (const GradOp& op : GradOps()) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const Tensor xt = CastTo(x, dt);
      const Tensor dyt = CastTo(dy, dt);
      Tensor z = xt;
      if (op.from_output) {
        absl::StatusOr<std::vector<Tensor>> y = RunSingleNode(op.forward, {xt}, op.attrs);
        ASSERT_TRUE(y.ok()) << y.status();
        z = (*y)[0];
      }
      absl::StatusOr<std::vector<Tensor>> got = RunSingleNode(op.grad, {dyt, z}, op.attrs, 1, kOttr);
      ASSERT_TRUE(got.ok()) << op.grad << ": " << got.status();
      // The reference: the float64 kernel on the very same (rounded) values.
      absl::StatusOr<std::vector<Tensor>> want = RunSingleNode(
          op.grad, {CastTo(dyt, DType::kFloat64), CastTo(z, DType::kFloat64)}, op.attrs, 1, kOttr);
      ASSERT_TRUE(want.ok()) << want.status();
      const Tensor& g = (*got)[0];
      ASSERT_EQ(g.dtype(), dt);
      ASSERT_EQ(g.dims(), x.dims());
      // float32: a few ulp of exp and erfc, plus x² rounding amplified by the exponent in the tails.
      const double rtol = dt == DType::kFloat32 ? 1e-5 : dt == DType::kFloat16 ? 1e-3 : 8e-3;
      const double atol = dt == DType::kFloat32 ? 1e-30 : 1e-4;
      for (int64_t i = 0; i < g.num_elements(); ++i) {
        const double w = (*want)[0].GetAsDouble(i);
        const double v = g.GetAsDouble(i);
        ASSERT_FALSE(std::isnan(v)) << op.grad << " " << ir::DTypeName(dt) << " x=" << xt.GetAsDouble(i);
        EXPECT_NEAR(v, w, atol + rtol * std::fabs(w))
            << op.grad << " " << ir::DTypeName(dt) << " x=" << xt.GetAsDouble(i)
            << " z=" << z.GetAsDouble(i) << " dy=" << dyt.GetAsDouble(i);
      }
    }
  }
}

TEST(ActivationGradKernelTest, KnownValues) {
  const Tensor dy = Tensor::FromVector<float>({4}, {2.0f, 2.0f, 2.0f, 2.0f});
  auto run = [&](const std::string& op, const Tensor& z, Attrs attrs = {}) {
    absl::StatusOr<std::vector<Tensor>> r = RunSingleNode(op, {dy, z}, attrs, 1, kOttr);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<float> v;
    if (r.ok()) v.assign((*r)[0].data<float>(), (*r)[0].data<float>() + 4);
    return v;
  };
  // ReluGrad reads Y: 0 at Y = 0 (PyTorch's convention at the kink).
  EXPECT_EQ(run("ReluGrad", Tensor::FromVector<float>({4}, {0.0f, 1.5f, 0.0f, 3.0f})),
            (std::vector<float>{0.0f, 2.0f, 0.0f, 2.0f}));
  EXPECT_EQ(run("SigmoidGrad", Tensor::FromVector<float>({4}, {0.5f, 0.25f, 1.0f, 0.0f})),
            (std::vector<float>{0.5f, 0.375f, 0.0f, 0.0f}));
  EXPECT_EQ(run("TanhGrad", Tensor::FromVector<float>({4}, {0.0f, 0.5f, -1.0f, 1.0f})),
            (std::vector<float>{2.0f, 1.5f, 0.0f, 0.0f}));
  // LeakyRelu at 0 takes alpha (PyTorch: x > 0 ? dy : alpha dy).
  EXPECT_EQ(run("LeakyReluGrad", Tensor::FromVector<float>({4}, {-1.0f, 0.0f, 2.0f, -3.0f}),
                {{"alpha", Attribute(0.5f)}}),
            (std::vector<float>{1.0f, 1.0f, 2.0f, 1.0f}));
  // HardSwish at -3 takes the middle branch, -3/3 + 1/2 (PyTorch's convention).
  EXPECT_EQ(run("HardSwishGrad", Tensor::FromVector<float>({4}, {-4.0f, -3.0f, 0.0f, 4.0f})),
            (std::vector<float>{0.0f, -1.0f, 1.0f, 2.0f}));
  EXPECT_EQ(run("ThresholdedReluGrad", Tensor::FromVector<float>({4}, {1.0f, 1.5f, 0.0f, 0.5f})),
            (std::vector<float>{0.0f, 2.0f, 0.0f, 0.0f}));
  EXPECT_EQ(run("SoftsignGrad", Tensor::FromVector<float>({4}, {0.0f, 1.0f, -1.0f, 3.0f})),
            (std::vector<float>{2.0f, 0.5f, 0.5f, 0.125f}));
  // Gelu'(0) = 1/2 in both forms.
  EXPECT_EQ(run("GeluGrad", Tensor::FromVector<float>({4}, {0.0f, 0.0f, 0.0f, 0.0f}))[0], 1.0f);
  EXPECT_EQ(run("GeluGrad", Tensor::FromVector<float>({4}, {0.0f, 0.0f, 0.0f, 0.0f}),
                {{"approximate", Attribute("tanh")}})[0],
            1.0f);
}

// dY's index -> X's and slope's indices under NumPy broadcasting.
int64_t BroadcastIndex(int64_t flat, const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  int64_t idx = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, k = static_cast<int64_t>(in.size()) - 1; d >= 0;
       --d, --k) {
    const int64_t coord = flat % out[d];
    flat /= out[d];
    if (k >= 0) {
      if (in[k] != 1) idx += coord * stride;
      stride *= in[k];
    }
  }
  return idx;
}

TEST(ActivationGradKernelTest, PReluGradMatchesADirectLoop) {
  struct Shapes {
    std::vector<int64_t> x, slope, out;
  };
  for (const Shapes& s : {Shapes{{2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}}, Shapes{{4, 6}, {6}, {4, 6}},
                          Shapes{{3, 5}, {1}, {3, 5}}, Shapes{{2, 3}, {2, 3}, {2, 3}},
                          Shapes{{2, 3, 4}, {3, 1}, {2, 3, 4}}, Shapes{{3, 1}, {1, 4}, {3, 4}},
                          Shapes{{0, 3}, {3}, {0, 3}}, Shapes{{2, 37}, {}, {2, 37}}}) {
    const Tensor x = RandomFloat(s.x, 1, -2.0f, 2.0f);
    const Tensor slope = RandomFloat(s.slope, 2, -0.5f, 1.0f);
    const Tensor dy = RandomFloat(s.out, 3, -1.0f, 1.0f);
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
      const Tensor xt = CastTo(x, dt), st = CastTo(slope, dt), dyt = CastTo(dy, dt);
      absl::StatusOr<std::vector<Tensor>> r = RunSingleNode("PReluGrad", {dyt, xt, st}, {}, 2, kOttr);
      ASSERT_TRUE(r.ok()) << r.status();
      const Tensor& dx = (*r)[0];
      const Tensor& ds = (*r)[1];
      ASSERT_EQ(dx.dims(), s.out);
      ASSERT_EQ(ds.dims(), s.slope);
      ASSERT_EQ(ds.dtype(), dt);
      std::vector<double> want_ds(st.num_elements(), 0.0), abs_ds(st.num_elements(), 0.0);
      const double rtol = dt == DType::kFloat16 ? 2e-3 : 1e-6;
      for (int64_t i = 0; i < dyt.num_elements(); ++i) {
        const double xv = xt.GetAsDouble(BroadcastIndex(i, s.out, s.x));
        const int64_t si = BroadcastIndex(i, s.out, s.slope);
        const double d = dyt.GetAsDouble(i);
        const double want = xv > 0 ? d : st.GetAsDouble(si) * d;
        EXPECT_NEAR(dx.GetAsDouble(i), want, rtol * std::fabs(want) + 1e-12);
        want_ds[si] += xv > 0 ? 0.0 : xv * d;
        abs_ds[si] += std::fabs(xv * d);
      }
      for (int64_t k = 0; k < ds.num_elements(); ++k) {
        EXPECT_NEAR(ds.GetAsDouble(k), want_ds[k], rtol * abs_ds[k] + 1e-12)
            << ir::DTypeName(dt) << " slope element " << k;
      }
    }
  }
}

TEST(ActivationGradKernelTest, ShapeFunctionsMergeDimsAndRejectMismatches) {
  ir::Graph g("g");
  g.set_opset_import(kOttr, 1);
  const ir::Shape sym{ir::Dim::Symbol("N"), ir::Dim()};
  auto dy = g.AddInput("dy", ir::TensorType(DType::kFloat32, sym));
  auto y = g.AddInput("y", ir::TensorType(DType::kFloat32, ir::Shape{ir::Dim(), 8}));
  ASSERT_TRUE(dy.ok() && y.ok());
  auto n = g.AddNode({"TanhGrad", kOttr, {*dy, *y}, {"dx"}, {}, "tg"});
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
  EXPECT_EQ((*n)->output(0)->type(),
            ir::TensorType(DType::kFloat32, ir::Shape{ir::Dim::Symbol("N"), 8}));

  auto err = [](const std::string& op, std::vector<Tensor> in, Attrs attrs = {}, int outs = 1) {
    absl::StatusOr<std::vector<Tensor>> r = RunSingleNode(op, in, attrs, outs, kOttr);
    EXPECT_FALSE(r.ok()) << op;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_NE(err("ReluGrad", {RandomFloat({2, 3}, 1), RandomFloat({3, 2}, 2)}).find("shape"),
            std::string::npos);
  EXPECT_NE(err("SigmoidGrad", {RandomFloat({2}, 1), CastTo(RandomFloat({2}, 2), DType::kFloat64)})
                .find("element type"),
            std::string::npos);
  EXPECT_NE(err("TanhGrad", {Tensor::FromVector<int32_t>({2}, {1, 2}), Tensor::FromVector<int32_t>({2}, {1, 2})})
                .find("float"),
            std::string::npos);
  EXPECT_NE(err("GeluGrad", {RandomFloat({2}, 1), RandomFloat({2}, 2)}, {{"approximate", Attribute("erf")}})
                .find("approximate"),
            std::string::npos);
  EXPECT_FALSE(err("EluGrad", {RandomFloat({2}, 1), RandomFloat({2}, 2)}, {{"beta", Attribute(1.0f)}}).empty());
  EXPECT_FALSE(err("PReluGrad", {RandomFloat({2, 4}, 1), RandomFloat({2, 3}, 2), RandomFloat({3}, 3)}, {}, 2)
                   .empty());
  EXPECT_FALSE(err("PReluGrad", {RandomFloat({2, 3}, 1), RandomFloat({2, 3}, 2), RandomFloat({4}, 3)}, {}, 2)
                   .empty());
}

TEST(ActivationGradKernelTest, EmptyTensors) {
  absl::StatusOr<std::vector<Tensor>> r =
      RunSingleNode("MishGrad", {Tensor(DType::kFloat32, {0, 4}), Tensor(DType::kFloat32, {0, 4})}, {}, 1, kOttr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{0, 4}));
}

}  // namespace
}  // namespace ottr::testing
