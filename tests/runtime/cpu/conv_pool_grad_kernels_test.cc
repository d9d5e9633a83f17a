// Tests of the convolution and pooling backward kernels (runtime/cpu/conv_pool_grad_kernels.cc)
// and their schemas (ir/grads/conv_pool_grads.cc).
//
// The linear ones are checked as adjoints of their forward op on random shapes: for Y = A(X),
// <A(x), dy> = <x, A*(dy)> for random x and dy holds only when A* is exactly the adjoint. So
// ConvGradInput must satisfy <Conv(x, w), dy> = <x, ConvGradInput(dy, w)>, ConvGradFilter
// <Conv(x, w), dy> = <w, ConvGradFilter(dy, x)>, and AveragePoolGrad <AveragePool(x), dy> =
// <x, AveragePoolGrad(dy)>. MaxPoolGrad must scatter dY to the forward's Indices.
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "runtime/cpu/gemm.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Attrs = std::map<std::string, Attribute>;
using Dims = std::vector<int64_t>;

const std::string kOttr(ir::kOttrDomain);

Tensor RandomOf(DType dtype, Dims dims, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t(dtype, dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  ir::VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      for (int64_t i = 0; i < t.num_elements(); ++i) t.data<T>()[i] = ir::FromDouble<T>(dist(rng));
    }
  });
  return t;
}

double Dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.GetAsDouble(i) * b.GetAsDouble(i);
  return s;
}

Tensor Run1(const std::string& op, const std::vector<Tensor>& ins, const Attrs& attrs,
            const std::string& domain = "") {
  auto r = RunSingleNode(op, ins, attrs, 1, domain);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

struct ConvCase {
  Dims x, w;
  Attrs attrs;
};

std::vector<ConvCase> ConvCases() {
  auto ints = [](Dims v) { return Attribute(std::move(v)); };
  return {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
      {{3, 4, 9, 8},
       {6, 2, 3, 2},
       {{"group", Attribute(int64_t{2})}, {"strides", ints({2, 3})}, {"dilations", ints({2, 1})}}},
      {{1, 4, 6, 6},
       {4, 1, 3, 3},
       {{"group", Attribute(int64_t{4})}, {"auto_pad", Attribute("SAME_UPPER")}}},
      {{2, 2, 11}, {3, 2, 4}, {{"auto_pad", Attribute("SAME_LOWER")}, {"strides", ints({2})}}},
      {{2, 2, 5, 4, 5},
       {3, 2, 2, 3, 2},
       {{"pads", ints({1, 0, 1, 0, 2, 1})}, {"strides", ints({1, 2, 2})}}},
      {{5, 3, 4, 5}, {2, 3, 1, 1}, {}},  // pointwise
      {{2, 1, 10, 10}, {2, 1, 3, 3}, {{"auto_pad", Attribute("VALID")}, {"strides", ints({3, 3})}}},
  };
}

TEST(ConvGradKernelsTest, AreAdjointsOfConvInDouble) {
  uint64_t seed = 1;
  for (const ConvCase& c : ConvCases()) {
    const Tensor x = RandomOf(DType::kFloat64, c.x, seed++);
    const Tensor w = RandomOf(DType::kFloat64, c.w, seed++);
    const Tensor y = Run1("Conv", {x, w}, c.attrs);
    const Tensor dy = RandomOf(DType::kFloat64, y.dims(), seed++);
    Attrs in_attrs = c.attrs;
    in_attrs["input_shape"] = Attribute(c.x);
    const Tensor dx = Run1("ConvGradInput", {dy, w}, in_attrs, kOttr);
    Attrs w_attrs = c.attrs;
    w_attrs["kernel_shape"] = Attribute(Dims(c.w.begin() + 2, c.w.end()));
    const Tensor dw = Run1("ConvGradFilter", {dy, x}, w_attrs, kOttr);
    ASSERT_EQ(dx.dims(), x.dims());
    ASSERT_EQ(dw.dims(), w.dims());
    const double ref = Dot(y, dy);
    EXPECT_NEAR(Dot(x, dx), ref, 1e-10 * (1 + std::fabs(ref)))
        << "x " << ::testing::PrintToString(c.x);
    EXPECT_NEAR(Dot(w, dw), ref, 1e-10 * (1 + std::fabs(ref)))
        << "x " << ::testing::PrintToString(c.x);
  }
}

TEST(ConvGradKernelsTest, FloatHalfAndBFloat16FollowDouble) {
  uint64_t seed = 100;
  for (const ConvCase& c : ConvCases()) {
    const Tensor x = RandomOf(DType::kFloat64, c.x, seed++);
    const Tensor w = RandomOf(DType::kFloat64, c.w, seed++);
    const Tensor y = Run1("Conv", {x, w}, c.attrs);
    const Tensor dy = RandomOf(DType::kFloat64, y.dims(), seed++);
    Attrs in_attrs = c.attrs;
    in_attrs["input_shape"] = Attribute(c.x);
    Attrs w_attrs = c.attrs;
    w_attrs["kernel_shape"] = Attribute(Dims(c.w.begin() + 2, c.w.end()));
    const Tensor dx64 = Run1("ConvGradInput", {dy, w}, in_attrs, kOttr);
    const Tensor dw64 = Run1("ConvGradFilter", {dy, x}, w_attrs, kOttr);
    for (auto [dtype, tol] : {std::pair{DType::kFloat32, 1e-5}, std::pair{DType::kFloat16, 2e-2},
                              std::pair{DType::kBFloat16, 1e-1}}) {
      auto convert = [&](const Tensor& t) {
        Tensor out(dtype, t.dims());
        ir::VisitDType(dtype, [&]<typename T>() {
          if constexpr (!std::is_void_v<T>) {
            for (int64_t i = 0; i < t.num_elements(); ++i) {
              out.data<T>()[i] = ir::FromDouble<T>(t.GetAsDouble(i));
            }
          }
        });
        return out;
      };
      const Tensor dx = Run1("ConvGradInput", {convert(dy), convert(w)}, in_attrs, kOttr);
      const Tensor dw = Run1("ConvGradFilter", {convert(dy), convert(x)}, w_attrs, kOttr);
      ASSERT_EQ(dx.dtype(), dtype);
      ASSERT_EQ(dw.dtype(), dtype);
      // Inputs were rounded to dtype too: compare with a tolerance scaled by the sum's size.
      for (int64_t i = 0; i < dx.num_elements(); ++i) {
        ASSERT_NEAR(dx.GetAsDouble(i), dx64.GetAsDouble(i), tol * 10) << ir::DTypeName(dtype);
      }
      for (int64_t i = 0; i < dw.num_elements(); ++i) {
        ASSERT_NEAR(dw.GetAsDouble(i), dw64.GetAsDouble(i), tol * 40) << ir::DTypeName(dtype);
      }
    }
  }
}

// ConvGradFilter sums per-image products over the batch in fixed chunks: the bits may not depend
// on the number of threads. ConvGradInput writes each image on one thread.
TEST(ConvGradKernelsTest, ThreadCountDoesNotChangeResults) {
  const Dims xd = {37, 8, 12, 12};
  const Tensor x = RandomFloat(xd, 1);
  const Tensor w = RandomFloat({16, 8, 3, 3}, 2);
  const Tensor dy = RandomFloat({37, 16, 12, 12}, 3);
  const Attrs attrs = {{"pads", Attribute(Dims{1, 1, 1, 1})}};
  Attrs in_attrs = attrs;
  in_attrs["input_shape"] = Attribute(xd);
  Attrs w_attrs = attrs;
  w_attrs["kernel_shape"] = Attribute(Dims{3, 3});
  std::vector<Tensor> dxs, dws;
  for (int threads : {1, 2, 3, 8, 16}) {
    runtime::cpu::SetGemmMaxThreads(threads);
    dxs.push_back(Run1("ConvGradInput", {dy, w}, in_attrs, kOttr));
    dws.push_back(Run1("ConvGradFilter", {dy, x}, w_attrs, kOttr));
  }
  runtime::cpu::SetGemmMaxThreads(0);
  for (size_t i = 1; i < dxs.size(); ++i) {
    EXPECT_TRUE(dxs[i].BitwiseEquals(dxs[0])) << "dX, run " << i;
    EXPECT_TRUE(dws[i].BitwiseEquals(dws[0])) << "dW, run " << i;
  }
}

TEST(ConvGradKernelsTest, BadInputsAreErrors) {
  const Tensor dy = RandomFloat({2, 4, 5, 5}, 1);
  const Tensor w = RandomFloat({4, 3, 3, 3}, 2);
  const Tensor x = RandomFloat({2, 3, 7, 7}, 3);
  // dY's spatial dims do not match the Conv of input_shape.
  EXPECT_FALSE(RunSingleNode("ConvGradInput", {dy, w},
                             {{"input_shape", Attribute(Dims{2, 3, 8, 8})}}, 1, kOttr)
                   .ok());
  // Channels disagree with the weight.
  EXPECT_FALSE(RunSingleNode("ConvGradInput", {dy, w},
                             {{"input_shape", Attribute(Dims{2, 4, 7, 7})}}, 1, kOttr)
                   .ok());
  // input_shape is required.
  EXPECT_FALSE(RunSingleNode("ConvGradInput", {dy, w}, {}, 1, kOttr).ok());
  // kernel_shape is required by ConvGradFilter.
  EXPECT_FALSE(RunSingleNode("ConvGradFilter", {dy, x}, {}, 1, kOttr).ok());
  // Group does not divide the channels.
  EXPECT_FALSE(
      RunSingleNode("ConvGradFilter", {dy, x},
                    {{"kernel_shape", Attribute(Dims{3, 3})}, {"group", Attribute(int64_t{2})}}, 1,
                    kOttr)
          .ok());
  // Mixed element types.
  EXPECT_FALSE(RunSingleNode("ConvGradFilter", {dy, RandomOf(DType::kFloat64, {2, 3, 7, 7}, 4)},
                             {{"kernel_shape", Attribute(Dims{3, 3})}}, 1, kOttr)
                   .ok());
  // Integer tensors are not supported.
  Tensor ix(DType::kInt32, {2, 3, 7, 7});
  Tensor idy(DType::kInt32, {2, 4, 5, 5});
  EXPECT_FALSE(RunSingleNode("ConvGradFilter", {idy, ix}, {{"kernel_shape", Attribute(Dims{3, 3})}},
                             1, kOttr)
                   .ok());
  // Matching shapes run.
  EXPECT_TRUE(
      RunSingleNode("ConvGradFilter", {dy, x}, {{"kernel_shape", Attribute(Dims{3, 3})}}, 1, kOttr)
          .ok());
}

TEST(ConvGradKernelsTest, ShapeFunctionsKeepSymbols) {
  ir::Graph g("t");
  g.set_opset_import(kOttr, 1);
  auto dy = g.AddInput(
      "dy", ir::TensorType(DType::kFloat32,
                           ir::Shape{ir::Dim::Symbol("N"), ir::Dim(8), ir::Dim(5), ir::Dim(5)}));
  auto x = g.AddInput(
      "x", ir::TensorType(DType::kFloat32,
                          ir::Shape{ir::Dim::Symbol("N"), ir::Dim(6), ir::Dim(7), ir::Dim(7)}));
  ASSERT_TRUE(dy.ok() && x.ok());
  auto n = g.AddNode({"ConvGradFilter",
                      kOttr,
                      {*dy, *x},
                      {"dw"},
                      {{"kernel_shape", Attribute(Dims{3, 3})}, {"group", Attribute(int64_t{2})}},
                      "n"});
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
  EXPECT_EQ((*n)->output(0)->type().ToString(), "f32[8,3,3,3]");
}

// ---------------------------------------------------------------------------------------------
// Pooling.

struct PoolCase {
  Dims x;
  Attrs attrs;
};

std::vector<PoolCase> PoolCases() {
  auto ints = [](Dims v) { return Attribute(std::move(v)); };
  return {
      {{2, 3, 8, 8}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}},
      {{1, 2, 7, 9}, {{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}}},
      {{1, 2, 9, 7},
       {{"kernel_shape", ints({2, 3})},
        {"strides", ints({2, 2})},
        {"dilations", ints({2, 1})},
        {"pads", ints({0, 1, 1, 0})},
        {"ceil_mode", Attribute(int64_t{1})}}},
      {{2, 2, 11},
       {{"kernel_shape", ints({3})},
        {"strides", ints({2})},
        {"auto_pad", Attribute("SAME_UPPER")}}},
      {{1, 2, 5, 4, 6}, {{"kernel_shape", ints({2, 2, 3})}, {"pads", ints({1, 0, 1, 0, 1, 1})}}},
      // Pads larger than the kernel: windows entirely in the padding (no gradient).
      {{1, 2, 4, 3}, {{"kernel_shape", ints({2, 2})}, {"pads", ints({3, 2, 2, 3})}}},
  };
}

TEST(PoolGradKernelsTest, MaxPoolGradScattersToTheForwardIndices) {
  uint64_t seed = 10;
  for (const PoolCase& c : PoolCases()) {
    for (bool ties : {false, true}) {
      Tensor x = RandomOf(DType::kFloat32, c.x, seed++, -2, 2);
      if (ties) {  // few distinct values: many windows with several maxima
        for (float& v : x.span<float>()) v = std::round(v);
      }
      auto fwd = RunSingleNode("MaxPool", {x}, c.attrs, 2);
      ASSERT_TRUE(fwd.ok()) << fwd.status();
      const Tensor& indices = (*fwd)[1];
      const Tensor dy = RandomOf(DType::kFloat32, (*fwd)[0].dims(), seed++);
      const Tensor dx = Run1("MaxPoolGrad", {dy, x}, c.attrs, kOttr);
      std::vector<double> expected(x.num_elements(), 0.0);
      for (int64_t o = 0; o < dy.num_elements(); ++o) {
        const int64_t i = indices.data<int64_t>()[o];
        if (i >= 0) expected[i] += dy.data<float>()[o];
      }
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        ASSERT_NEAR(dx.data<float>()[i], expected[i], 1e-5)
            << "element " << i << " of " << ::testing::PrintToString(c.x) << (ties ? " ties" : "");
      }
    }
  }
}

TEST(PoolGradKernelsTest, MaxPoolGradFollowsTheFirstMaximumAndNaN) {
  const Attrs attrs = {{"kernel_shape", Attribute(Dims{2, 2})}, {"strides", Attribute(Dims{2, 2})}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Window 0: ties (3 at positions 1 and 4 of the plane); window 1: a NaN after a larger value.
  const Tensor x = Tensor::FromVector<float>({1, 1, 2, 4}, {1, 3, 5, 0, 2, 3, nan, nan});
  const Tensor dy = Tensor::FromVector<float>({1, 1, 1, 2}, {10, 20});
  const Tensor dx = Run1("MaxPoolGrad", {dy, x}, attrs, kOttr);
  const std::vector<float> expected = {0, 10, 0, 0, 0, 0, 20, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(dx.data<float>()[i], expected[i]) << "element " << i;
  // The forward picked the same elements.
  auto fwd = RunSingleNode("MaxPool", {x}, attrs, 2);
  ASSERT_TRUE(fwd.ok());
  EXPECT_EQ((*fwd)[1].data<int64_t>()[0], 1);
  EXPECT_EQ((*fwd)[1].data<int64_t>()[1], 6);
  EXPECT_TRUE(std::isnan((*fwd)[0].data<float>()[1]));
}

TEST(PoolGradKernelsTest, AveragePoolGradIsTheAdjoint) {
  uint64_t seed = 50;
  for (const PoolCase& c : PoolCases()) {
    for (int include = 0; include < 2; ++include) {
      Attrs attrs = c.attrs;
      attrs["count_include_pad"] = Attribute(int64_t{include});
      attrs.erase("dilations");  // AveragePool takes dilations from opset 19: keep both forms
      for (bool dilated : {false, true}) {
        if (dilated) {
          auto it = c.attrs.find("dilations");
          if (it == c.attrs.end()) continue;
          attrs["dilations"] = it->second;
        }
        const Tensor x = RandomOf(DType::kFloat64, c.x, seed++);
        const Tensor y = Run1("AveragePool", {x}, attrs);
        Tensor dy = RandomOf(DType::kFloat64, y.dims(), seed++);
        // Windows entirely in the padding give NaN; they have no gradient.
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          if (std::isnan(y.data<double>()[i])) dy.data<double>()[i] = 0;
        }
        Tensor y0 = y.Clone();
        for (double& v : y0.span<double>()) v = std::isnan(v) ? 0 : v;
        Attrs g_attrs = attrs;
        g_attrs["input_shape"] = Attribute(c.x);
        const Tensor dx = Run1("AveragePoolGrad", {dy}, g_attrs, kOttr);
        const double ref = Dot(y0, dy);
        EXPECT_NEAR(Dot(x, dx), ref, 1e-10 * (1 + std::fabs(ref)))
            << ::testing::PrintToString(c.x) << " count_include_pad " << include;
        // float32 agrees with float64.
        Tensor dy32(DType::kFloat32, dy.dims());
        for (int64_t i = 0; i < dy.num_elements(); ++i) {
          dy32.data<float>()[i] = static_cast<float>(dy.data<double>()[i]);
        }
        const Tensor dx32 = Run1("AveragePoolGrad", {dy32}, g_attrs, kOttr);
        for (int64_t i = 0; i < dx.num_elements(); ++i) {
          ASSERT_NEAR(dx32.data<float>()[i], dx.data<double>()[i], 1e-5);
        }
      }
    }
  }
}

TEST(PoolGradKernelsTest, LpPoolGradIsZeroWhereTheWindowIsZero) {
  // The first window is all zeros (y = 0): its gradient is 0, not NaN.
  const Tensor x = Tensor::FromVector<float>({1, 1, 1, 4}, {0, 0, 3, -4});
  const Attrs attrs = {{"kernel_shape", Attribute(Dims{1, 2})},
                       {"strides", Attribute(Dims{1, 2})},
                       {"p", Attribute(int64_t{2})}};
  const Tensor y = Run1("LpPool", {x}, attrs);
  ASSERT_FLOAT_EQ(y.data<float>()[1], 5.0f);
  const Tensor dy = Tensor::FromVector<float>({1, 1, 1, 2}, {7, 10});
  const Tensor dx = Run1("LpPoolGrad", {dy, x, y}, attrs, kOttr);
  const std::vector<float> expected = {0, 0, 10 * 3 / 5.0f, 10 * -4 / 5.0f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(dx.data<float>()[i], expected[i]) << i;
}

TEST(PoolGradKernelsTest, HalfAndBFloat16) {
  const Attrs attrs = {{"kernel_shape", Attribute(Dims{2, 2})}, {"strides", Attribute(Dims{1, 1})}};
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    const Tensor x = RandomOf(t, {1, 2, 4, 4}, 7);
    const Tensor dy = RandomOf(t, {1, 2, 3, 3}, 8);
    auto fwd = RunSingleNode("MaxPool", {x}, attrs, 2);
    ASSERT_TRUE(fwd.ok());
    const Tensor dx = Run1("MaxPoolGrad", {dy, x}, attrs, kOttr);
    ASSERT_EQ(dx.dtype(), t);
    std::vector<double> expected(32, 0.0);
    for (int64_t o = 0; o < 18; ++o) expected[(*fwd)[1].data<int64_t>()[o]] += dy.GetAsDouble(o);
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(dx.GetAsDouble(i), expected[i], 2e-2) << i;
    Attrs a = attrs;
    a["input_shape"] = Attribute(Dims{1, 2, 4, 4});
    const Tensor da = Run1("AveragePoolGrad", {dy}, a, kOttr);
    ASSERT_EQ(da.dtype(), t);
    // Corner element 0 is in window (0, 0) only: dy / 4.
    EXPECT_NEAR(da.GetAsDouble(0), dy.GetAsDouble(0) / 4, 1e-2);
  }
}

TEST(PoolGradKernelsTest, BadInputsAreErrors) {
  const Attrs attrs = {{"kernel_shape", Attribute(Dims{2, 2})}};
  const Tensor x = RandomFloat({1, 2, 4, 4}, 1);
  // dY of the wrong spatial size.
  EXPECT_FALSE(
      RunSingleNode("MaxPoolGrad", {RandomFloat({1, 2, 2, 2}, 2), x}, attrs, 1, kOttr).ok());
  EXPECT_FALSE(RunSingleNode("LpPoolGrad",
                             {RandomFloat({1, 2, 3, 3}, 2), x, RandomFloat({1, 2, 2, 3}, 3)}, attrs,
                             1, kOttr)
                   .ok());
  Attrs a = attrs;
  a["input_shape"] = Attribute(Dims{1, 2, 4});  // rank differs from dY's
  EXPECT_FALSE(RunSingleNode("AveragePoolGrad", {RandomFloat({1, 2, 3, 3}, 2)}, a, 1, kOttr).ok());
  // kernel_shape is required.
  EXPECT_FALSE(RunSingleNode("MaxPoolGrad", {RandomFloat({1, 2, 3, 3}, 2), x}, {}, 1, kOttr).ok());
  // Matching shapes run.
  EXPECT_TRUE(
      RunSingleNode("MaxPoolGrad", {RandomFloat({1, 2, 3, 3}, 2), x}, attrs, 1, kOttr).ok());
}

}  // namespace
}  // namespace ottr::testing
