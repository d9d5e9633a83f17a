// Tests of the normalisation backward kernels (runtime/cpu/normalization_grad_kernels.cc)
// against vector-Jacobian products computed by central differences of double-precision
// reference forwards written out here, independent of the kernels' closed forms.
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Fn = std::function<std::vector<double>(const std::vector<double>&)>;

const std::string kOttr(ir::kOttrDomain);

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.GetAsDouble(i);
  return v;
}

Tensor Convert(const Tensor& t, DType dtype) {
  Tensor out(dtype, t.dims());
  ir::VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        out.data<T>()[i] = ir::FromDouble<T>(t.GetAsDouble(i));
      }
    }
  });
  return out;
}

// Σ_k dy_k · ∂f_k/∂x_i for every i, by central differences.
std::vector<double> NumericVjp(const Fn& f, std::vector<double> x, const std::vector<double>& dy) {
  const double h = 1e-5;
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const std::vector<double> up = f(x);
    x[i] = saved - h;
    const std::vector<double> down = f(x);
    x[i] = saved;
    double s = 0.0;
    for (size_t k = 0; k < dy.size(); ++k) s += dy[k] * (up[k] - down[k]);
    g[i] = s / (2 * h);
  }
  return g;
}

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual.GetAsDouble(i), expected[i], tol * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

// Normalises each group of x given by `group_of` (element -> group id) with population
// statistics, then applies y = x̂ · scale[param_of(i)] (no bias: its gradient is Σ dy).
std::vector<double> NormalizeGroups(const std::vector<double>& x, int64_t groups,
                                    const std::function<int64_t(int64_t)>& group_of,
                                    const std::vector<double>& scale,
                                    const std::function<int64_t(int64_t)>& param_of, double eps) {
  std::vector<double> sum(groups, 0.0), sq(groups, 0.0), count(groups, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    sum[group_of(i)] += x[i];
    count[group_of(i)] += 1;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = group_of(i);
    const double d = x[i] - sum[g] / count[g];
    sq[g] += d * d;
  }
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = group_of(i);
    y[i] = (x[i] - sum[g] / count[g]) / std::sqrt(sq[g] / count[g] + eps) * scale[param_of(i)];
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// LayerNormalizationGrad

TEST(LayerNormalizationGradTest, MatchesNumericVjpWithBroadcastScale) {
  // X [3, 2, 5], axis 1: rows of 10 elements; scale [5] broadcasts over the normalised dims.
  const Tensor x = RandomFloat({3, 2, 5}, 1, -2.0f, 2.0f);
  const Tensor scale = RandomFloat({5}, 2, 0.5f, 1.5f);
  const Tensor dy = RandomFloat({3, 2, 5}, 3);
  const double eps = 1e-3;
  auto out =
      RunSingleNode("LayerNormalizationGrad", {dy, x, scale},
                    {{"axis", Attribute(int64_t{1})}, {"epsilon", Attribute(1e-3f)}}, 3, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> sv = Values(scale);
  auto row = [](int64_t i) { return i / 10; };
  auto col5 = [](int64_t i) { return i % 5; };
  const Fn fx = [&](const std::vector<double>& xv) {
    return NormalizeGroups(xv, 3, row, sv, col5, eps);
  };
  ExpectNear((*out)[0], NumericVjp(fx, Values(x), Values(dy)), 1e-4);
  // dScale is per normalised element ([2, 5]), summed over the rows.
  std::vector<double> full_scale(10);
  for (int k = 0; k < 10; ++k) full_scale[k] = sv[k % 5];
  const Fn fs = [&](const std::vector<double>& s) {
    return NormalizeGroups(
        Values(x), 3, row, s, [](int64_t i) { return i % 10; }, eps);
  };
  EXPECT_EQ((*out)[1].dims(), std::vector<int64_t>({2, 5}));
  ExpectNear((*out)[1], NumericVjp(fs, full_scale, Values(dy)), 1e-4);
  std::vector<double> db(10, 0.0);
  for (int64_t i = 0; i < 30; ++i) db[i % 10] += dy.GetAsDouble(i);
  ExpectNear((*out)[2], db, 1e-5);
}

TEST(LayerNormalizationGradTest, SavedStatisticsGiveTheRecomputedResult) {
  const Tensor x = RandomFloat({4, 6}, 11, -3.0f, 3.0f);
  const Tensor scale = RandomFloat({6}, 12, 0.5f, 1.5f);
  const Tensor dy = RandomFloat({4, 6}, 13);
  auto fwd = RunSingleNode("LayerNormalization", {x, scale}, {}, 3);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto saved =
      RunSingleNode("LayerNormalizationGrad", {dy, x, scale, (*fwd)[1], (*fwd)[2]}, {}, 1, kOttr);
  auto recomputed = RunSingleNode("LayerNormalizationGrad", {dy, x, scale}, {}, 1, kOttr);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(recomputed.ok()) << recomputed.status();
  ExpectNear((*saved)[0], Values((*recomputed)[0]), 1e-5);
}

TEST(LayerNormalizationGradTest, HalfAndDoubleTypes) {
  const Tensor x = RandomFloat({2, 8}, 21, -2.0f, 2.0f);
  const Tensor scale = RandomFloat({8}, 22, 0.5f, 1.5f);
  const Tensor dy = RandomFloat({2, 8}, 23);
  auto f32 = RunSingleNode("LayerNormalizationGrad", {dy, x, scale}, {}, 2, kOttr);
  ASSERT_TRUE(f32.ok()) << f32.status();
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    auto out = RunSingleNode("LayerNormalizationGrad",
                             {Convert(dy, t), Convert(x, t), Convert(scale, t)}, {}, 2, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].dtype(), t);
    EXPECT_EQ((*out)[1].dtype(), t);
    ExpectNear((*out)[0], Values((*f32)[0]), t == DType::kFloat64 ? 1e-5 : 5e-2);
  }
}

TEST(LayerNormalizationGradTest, BadInputsAreErrors) {
  const Tensor x = RandomFloat({2, 3, 4}, 31);
  const Tensor dy = RandomFloat({2, 3, 4}, 32);
  // dY shaped differently from X.
  auto a = RunSingleNode("LayerNormalizationGrad",
                         {RandomFloat({2, 12}, 33), x, RandomFloat({4}, 34)}, {}, 1, kOttr);
  EXPECT_FALSE(a.ok());
  // Scale varying over the rows (dims before axis).
  auto b = RunSingleNode("LayerNormalizationGrad", {dy, x, RandomFloat({3, 4}, 35)},
                         {{"axis", Attribute(int64_t{-1})}}, 1, kOttr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("varies over the leading dims"), std::string::npos)
      << b.status();
  // Axis out of range.
  auto c = RunSingleNode("LayerNormalizationGrad", {dy, x, RandomFloat({4}, 36)},
                         {{"axis", Attribute(int64_t{3})}}, 1, kOttr);
  EXPECT_FALSE(c.ok());
  // Mean without inv_std.
  auto d = RunSingleNode("LayerNormalizationGrad",
                         {dy, x, RandomFloat({4}, 37), RandomFloat({2, 3, 1}, 38)}, {}, 1, kOttr);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("together"), std::string::npos) << d.status();
  // Statistics with the wrong element count.
  auto e = RunSingleNode("LayerNormalizationGrad",
                         {dy, x, RandomFloat({4}, 39), RandomFloat({5}, 40), RandomFloat({5}, 41)},
                         {}, 1, kOttr);
  EXPECT_FALSE(e.ok());
  // Integer X.
  Tensor xi(DType::kInt32, {2, 4});
  auto f =
      RunSingleNode("LayerNormalizationGrad", {xi, xi, Tensor(DType::kInt32, {4})}, {}, 1, kOttr);
  EXPECT_FALSE(f.ok());
}

// ---------------------------------------------------------------------------------------------
// BatchNormalizationGrad

TEST(BatchNormalizationGradTest, BatchStatisticsMatchNumericVjp) {
  const int64_t n = 3, c = 2, s = 4;
  const Tensor x = RandomFloat({n, c, s}, 51, -2.0f, 3.0f);
  const Tensor scale = RandomFloat({c}, 52, 0.5f, 1.5f);
  const Tensor dy = RandomFloat({n, c, s}, 53);
  auto out = RunSingleNode("BatchNormalizationGrad", {dy, x, scale},
                           {{"epsilon", Attribute(1e-2f)}}, 3, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  auto channel = [&](int64_t i) { return (i / s) % c; };
  const std::vector<double> sv = Values(scale);
  const double eps = 1e-2f;
  const Fn fx = [&](const std::vector<double>& xv) {
    return NormalizeGroups(xv, c, channel, sv, channel, eps);
  };
  ExpectNear((*out)[0], NumericVjp(fx, Values(x), Values(dy)), 1e-4);
  const Fn fs = [&](const std::vector<double>& sc) {
    return NormalizeGroups(Values(x), c, channel, sc, channel, eps);
  };
  ExpectNear((*out)[1], NumericVjp(fs, sv, Values(dy)), 1e-4);
  std::vector<double> db(c, 0.0);
  for (int64_t i = 0; i < n * c * s; ++i) db[channel(i)] += dy.GetAsDouble(i);
  ExpectNear((*out)[2], db, 1e-5);
}

TEST(BatchNormalizationGradTest, FixedStatisticsScaleTheGradient) {
  const Tensor x = RandomFloat({2, 3, 2, 2}, 61);
  const Tensor scale = RandomFloat({3}, 62, 0.5f, 1.5f);
  const Tensor mean = RandomFloat({3}, 63);
  const Tensor var = RandomFloat({3}, 64, 0.5f, 1.5f);
  const Tensor dy = RandomFloat({2, 3, 2, 2}, 65);
  auto out = RunSingleNode("BatchNormalizationGrad", {dy, x, scale, mean, var}, {}, 3, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> dx(24), ds(3, 0.0), db(3, 0.0);
  for (int64_t i = 0; i < 24; ++i) {
    const int64_t ch = (i / 4) % 3;
    const double inv = 1.0 / std::sqrt(var.GetAsDouble(ch) + double{1e-5f});
    dx[i] = dy.GetAsDouble(i) * scale.GetAsDouble(ch) * inv;
    ds[ch] += dy.GetAsDouble(i) * (x.GetAsDouble(i) - mean.GetAsDouble(ch)) * inv;
    db[ch] += dy.GetAsDouble(i);
  }
  ExpectNear((*out)[0], dx, 1e-5);
  ExpectNear((*out)[1], ds, 1e-5);
  ExpectNear((*out)[2], db, 1e-5);
}

TEST(BatchNormalizationGradTest, MixedTypesAndRank2) {
  const Tensor x = Convert(RandomFloat({5, 3}, 71), DType::kFloat16);
  const Tensor dy = Convert(RandomFloat({5, 3}, 72), DType::kFloat16);
  const Tensor scale = Convert(RandomFloat({3}, 73, 0.5f, 1.5f), DType::kFloat64);
  auto out = RunSingleNode("BatchNormalizationGrad", {dy, x, scale}, {}, 3, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat16);
  EXPECT_EQ((*out)[1].dtype(), DType::kFloat64);
  EXPECT_EQ((*out)[2].dims(), std::vector<int64_t>({3}));
  // The batch-statistics gradient sums to zero over each channel.
  for (int ch = 0; ch < 3; ++ch) {
    double sum = 0.0;
    for (int b = 0; b < 5; ++b) sum += (*out)[0].GetAsDouble(b * 3 + ch);
    EXPECT_NEAR(sum, 0.0, 2e-2);
  }
}

TEST(BatchNormalizationGradTest, BadInputsAreErrors) {
  const Tensor x = RandomFloat({2, 3, 4}, 81);
  EXPECT_FALSE(
      RunSingleNode("BatchNormalizationGrad", {x, x, RandomFloat({4}, 82)}, {}, 1, kOttr).ok());
  EXPECT_FALSE(RunSingleNode("BatchNormalizationGrad",
                             {RandomFloat({2, 3}, 83), x, RandomFloat({3}, 84)}, {}, 1, kOttr)
                   .ok());
  // No elements per channel: batch statistics are undefined.
  const Tensor empty(DType::kFloat32, {0, 3});
  auto e =
      RunSingleNode("BatchNormalizationGrad", {empty, empty, RandomFloat({3}, 85)}, {}, 1, kOttr);
  EXPECT_FALSE(e.ok());
}

// ---------------------------------------------------------------------------------------------
// GroupNormalizationGrad

TEST(GroupNormalizationGradTest, PerChannelAndPerGroupScaleMatchNumericVjp) {
  const int64_t n = 2, c = 6, s = 3, groups = 3;
  const Tensor x = RandomFloat({n, c, s}, 91, -2.0f, 2.0f);
  const Tensor dy = RandomFloat({n, c, s}, 92);
  auto group = [&](int64_t i) { return (i / (s * c)) * groups + ((i / s) % c) / (c / groups); };
  auto channel = [&](int64_t i) { return (i / s) % c; };
  auto group_param = [&](int64_t i) { return ((i / s) % c) / (c / groups); };
  for (const bool per_group : {false, true}) {
    const Tensor scale = RandomFloat({per_group ? groups : c}, 93, 0.5f, 1.5f);
    const std::vector<double> sv = Values(scale);
    std::function<int64_t(int64_t)> param_of = channel;
    if (per_group) param_of = group_param;
    auto out = RunSingleNode("GroupNormalizationGrad", {dy, x, scale},
                             {{"num_groups", Attribute(groups)}}, 3, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    const Fn fx = [&](const std::vector<double>& xv) {
      return NormalizeGroups(xv, n * groups, group, sv, param_of, 1e-5f);
    };
    ExpectNear((*out)[0], NumericVjp(fx, Values(x), Values(dy)), 1e-4);
    // dScale is per channel whatever the scale's layout.
    std::vector<double> per_channel(c);
    for (int64_t k = 0; k < c; ++k) per_channel[k] = sv[per_group ? k / (c / groups) : k];
    const Fn fs = [&](const std::vector<double>& sc) {
      return NormalizeGroups(Values(x), n * groups, group, sc, channel, 1e-5f);
    };
    EXPECT_EQ((*out)[1].dims(), std::vector<int64_t>({c}));
    ExpectNear((*out)[1], NumericVjp(fs, per_channel, Values(dy)), 1e-4);
  }
}

TEST(GroupNormalizationGradTest, BadGroupsAndScaleAreErrors) {
  const Tensor x = RandomFloat({2, 4, 3}, 101);
  auto a = RunSingleNode("GroupNormalizationGrad", {x, x, RandomFloat({4}, 102)},
                         {{"num_groups", Attribute(int64_t{3})}}, 1, kOttr);
  EXPECT_FALSE(a.ok());
  auto b = RunSingleNode("GroupNormalizationGrad", {x, x, RandomFloat({3}, 103)},
                         {{"num_groups", Attribute(int64_t{2})}}, 1, kOttr);
  EXPECT_FALSE(b.ok());
}

// ---------------------------------------------------------------------------------------------
// DropoutGrad

Tensor Mask(std::vector<int64_t> dims, uint64_t seed) {
  Tensor m(DType::kBool, dims);
  const Tensor r = RandomFloat(std::move(dims), seed, 0.0f, 1.0f);
  for (int64_t i = 0; i < m.num_elements(); ++i) m.data<bool>()[i] = r.GetAsDouble(i) > 0.3;
  return m;
}

TEST(DropoutGradTest, TrainingScalesKeptElements) {
  const Tensor dy = RandomFloat({3, 5}, 111);
  const Tensor mask = Mask({3, 5}, 112);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    auto out = RunSingleNode(
        "DropoutGrad",
        {Convert(dy, t), mask, Tensor::Scalar<float>(0.25f), Tensor::Scalar<bool>(true)}, {}, 1,
        kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> want(15);
    for (int i = 0; i < 15; ++i) {
      want[i] = mask.data<bool>()[i] ? Convert(dy, t).GetAsDouble(i) / 0.75 : 0.0;
    }
    ExpectNear((*out)[0], want, t == DType::kFloat16 ? 2e-3 : 1e-6);
  }
  // Default ratio 0.5.
  auto half =
      RunSingleNode("DropoutGrad", {dy, mask, Tensor(), Tensor::Scalar<bool>(true)}, {}, 1, kOttr);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_NEAR((*half)[0].GetAsDouble(0), mask.data<bool>()[0] ? dy.GetAsDouble(0) * 2 : 0.0, 1e-6);
}

TEST(DropoutGradTest, InferenceOrZeroRatioPassesTheGradientThrough) {
  const Tensor dy = RandomFloat({4}, 121);
  const Tensor mask = Mask({4}, 122);
  for (const auto& inputs : std::vector<std::vector<Tensor>>{
           {dy, mask},
           {dy, mask, Tensor::Scalar<float>(0.5f), Tensor::Scalar<bool>(false)},
           {dy, mask, Tensor::Scalar<float>(0.0f), Tensor::Scalar<bool>(true)}}) {
    auto out = RunSingleNode("DropoutGrad", inputs, {}, 1, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectNear((*out)[0], Values(dy), 0.0);
  }
}

TEST(DropoutGradTest, BadMaskAndRatioAreErrors) {
  const Tensor dy = RandomFloat({4}, 131);
  EXPECT_FALSE(RunSingleNode("DropoutGrad", {dy, dy}, {}, 1, kOttr).ok());
  EXPECT_FALSE(RunSingleNode("DropoutGrad", {dy, Mask({5}, 132)}, {}, 1, kOttr).ok());
  EXPECT_FALSE(
      RunSingleNode("DropoutGrad",
                    {dy, Mask({4}, 133), Tensor::Scalar<float>(1.0f), Tensor::Scalar<bool>(true)},
                    {}, 1, kOttr)
          .ok());
}

}  // namespace
}  // namespace ottr::testing
