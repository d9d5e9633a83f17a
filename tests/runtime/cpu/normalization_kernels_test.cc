// Tests of the normalisation and Dropout schemas, shape functions and CPU kernels against
// straightforward double-precision references written out here.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.GetAsDouble(i);
  return v;
}

// Converts a float32 tensor to `dtype` elementwise.
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

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual.GetAsDouble(i), expected[i], tol * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

// Parses IR text and runs shape inference over it.
absl::StatusOr<std::unique_ptr<ir::Graph>> InferText(const std::string& text) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  if (!s.ok()) return s;
  return std::move(*g);
}

std::string TypeOf(const ir::Graph& g, const std::string& name) {
  return g.FindValue(name)->type().ToString();
}

// Reference normalisation of x viewed as [outer, count] rows.
void NormalizeRows(const std::vector<double>& x, int64_t rows, int64_t cols, double eps,
                   std::vector<double>* y, std::vector<double>* mean, std::vector<double>* inv) {
  y->assign(x.size(), 0.0);
  mean->assign(rows, 0.0);
  inv->assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0.0, v = 0.0;
    for (int64_t k = 0; k < cols; ++k) m += x[r * cols + k];
    m /= cols;
    for (int64_t k = 0; k < cols; ++k) v += (x[r * cols + k] - m) * (x[r * cols + k] - m);
    v /= cols;
    (*mean)[r] = m;
    (*inv)[r] = 1.0 / std::sqrt(v + eps);
    for (int64_t k = 0; k < cols; ++k) (*y)[r * cols + k] = (x[r * cols + k] - m) * (*inv)[r];
  }
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization

TEST(BatchNormalizationTest, InferenceUsesGivenStatistics) {
  const Tensor x = RandomFloat({2, 3, 4, 5}, 1, -2.0f, 2.0f);
  const Tensor scale = RandomFloat({3}, 2);
  const Tensor bias = RandomFloat({3}, 3);
  const Tensor mean = RandomFloat({3}, 4);
  const Tensor var = RandomFloat({3}, 5, 0.1f, 1.0f);
  auto out = RunSingleNode("BatchNormalization", {x, scale, bias, mean, var},
                           {{"epsilon", Attribute(0.01f)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want(x.num_elements());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t c = (i / 20) % 3;
    want[i] = scale.GetAsDouble(c) * (x.GetAsDouble(i) - mean.GetAsDouble(c)) /
                  std::sqrt(var.GetAsDouble(c) + 0.01) +
              bias.GetAsDouble(c);
  }
  ExpectNear((*out)[0], want, 1e-5);
}

TEST(BatchNormalizationTest, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  const Tensor x = RandomFloat({3, 2, 7}, 11, -3.0f, 5.0f);
  const Tensor scale = RandomFloat({2}, 12);
  const Tensor bias = RandomFloat({2}, 13);
  const Tensor mean = RandomFloat({2}, 14);
  const Tensor var = RandomFloat({2}, 15, 0.5f, 1.5f);
  auto out = RunSingleNode("BatchNormalization", {x, scale, bias, mean, var},
                           {{"training_mode", Attribute(int64_t{1})},
                            {"momentum", Attribute(0.8f)},
                            {"epsilon", Attribute(1e-3f)}},
                           3);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want_y(x.num_elements()), want_mean(2), want_var(2);
  for (int c = 0; c < 2; ++c) {
    double m = 0.0, v = 0.0;
    for (int n = 0; n < 3; ++n) {
      for (int k = 0; k < 7; ++k) m += x.GetAsDouble((n * 2 + c) * 7 + k);
    }
    m /= 21;
    for (int n = 0; n < 3; ++n) {
      for (int k = 0; k < 7; ++k) {
        const double d = x.GetAsDouble((n * 2 + c) * 7 + k) - m;
        v += d * d;
      }
    }
    v /= 21;  // population variance, also for the running statistics
    for (int n = 0; n < 3; ++n) {
      for (int k = 0; k < 7; ++k) {
        const int64_t i = (n * 2 + c) * 7 + k;
        want_y[i] = scale.GetAsDouble(c) * (x.GetAsDouble(i) - m) / std::sqrt(v + 1e-3) +
                    bias.GetAsDouble(c);
      }
    }
    // Attributes are float32: momentum 0.8f is not exactly 0.8.
    const double momentum = 0.8f;
    want_mean[c] = mean.GetAsDouble(c) * momentum + m * (1.0 - momentum);
    want_var[c] = var.GetAsDouble(c) * momentum + v * (1.0 - momentum);
  }
  ExpectNear((*out)[0], want_y, 1e-5);
  ExpectNear((*out)[1], want_mean, 1e-6);
  ExpectNear((*out)[2], want_var, 1e-6);
  EXPECT_EQ((*out)[1].dims(), std::vector<int64_t>({2}));
}

TEST(BatchNormalizationTest, MixedFloatTypesKeepEachOutputsType) {
  // Opset 15 lets X, scale/B and mean/var have different float types.
  const Tensor x32 = RandomFloat({2, 3, 2}, 21);
  const Tensor x = Convert(x32, DType::kFloat16);
  const Tensor scale = Convert(RandomFloat({3}, 22), DType::kBFloat16);
  const Tensor bias = Convert(RandomFloat({3}, 23), DType::kBFloat16);
  const Tensor mean = Convert(RandomFloat({3}, 24), DType::kFloat64);
  const Tensor var = Convert(RandomFloat({3}, 25, 0.5f, 1.0f), DType::kFloat64);
  auto out = RunSingleNode("BatchNormalization", {x, scale, bias, mean, var},
                           {{"training_mode", Attribute(int64_t{1})}}, 3);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat16);
  EXPECT_EQ((*out)[1].dtype(), DType::kFloat64);
  EXPECT_EQ((*out)[2].dtype(), DType::kFloat64);
  // Channel 0 of the normalised output has zero mean and (almost) unit variance before scale.
  double m = 0.0;
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 2; ++k) {
      m += ((*out)[0].GetAsDouble((n * 3) * 2 + k) - bias.GetAsDouble(0)) / scale.GetAsDouble(0);
    }
  }
  EXPECT_NEAR(m / 4, 0.0, 5e-3);
}

TEST(BatchNormalizationTest, Rank2InputNormalisesPerFeature) {
  const Tensor x = Tensor::FromVector<double>({2, 2}, {1.0, 10.0, 3.0, 30.0});
  const Tensor ones = Tensor::FromVector<double>({2}, {1.0, 1.0});
  const Tensor zeros = Tensor::FromVector<double>({2}, {0.0, 0.0});
  auto out = RunSingleNode("BatchNormalization", {x, ones, zeros, zeros, ones},
                           {{"training_mode", Attribute(int64_t{1})},
                            {"epsilon", Attribute(0.0f)}},
                           3);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {-1.0, -1.0, 1.0, 1.0}, 1e-12);
  // running_mean = 0 * 0.9 + batch_mean * 0.1; running_var = 1 * 0.9 + batch_var * 0.1.
  const double mo = 0.9f;
  ExpectNear((*out)[1], {2.0 * (1 - mo), 20.0 * (1 - mo)}, 1e-12);
  ExpectNear((*out)[2], {mo + 1.0 * (1 - mo), mo + 100.0 * (1 - mo)}, 1e-12);
}

TEST(BatchNormalizationTest, WrongChannelCountIsAnError) {
  auto out = RunSingleNode("BatchNormalization",
                           {RandomFloat({2, 3, 4}, 1), RandomFloat({4}, 2), RandomFloat({3}, 3),
                            RandomFloat({3}, 4), RandomFloat({3}, 5, 0.1f, 1.0f)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("scale"), std::string::npos) << out.status();
}

TEST(BatchNormalizationTest, RunningOutputsNeedTrainingMode) {
  const Tensor v = RandomFloat({3}, 2, 0.1f, 1.0f);
  auto out = RunSingleNode("BatchNormalization", {RandomFloat({2, 3}, 1), v, v, v, v}, {}, 3);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("training_mode"), std::string::npos) << out.status();
}

TEST(BatchNormalizationTest, Rank1InputIsAnError) {
  const Tensor v = RandomFloat({3}, 2, 0.1f, 1.0f);
  auto out = RunSingleNode("BatchNormalization", {RandomFloat({3}, 1), v, v, v, v});
  EXPECT_FALSE(out.ok());
}

TEST(BatchNormalizationTest, ShapeInferenceKeepsSymbolsAndTypesRunningStats) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,C,8]
    input %s : f32[C]
    input %m : f64[C]
    %y : f32[*], %rm : f32[*], %rv : f32[*] = BatchNormalization(%x, %s, %s, %m, %m) {training_mode = 1} origin "bn"
    output %y, %rm, %rv
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f32[N,C,8]");
  EXPECT_EQ(TypeOf(**g, "rm"), "f64[C]");
}

TEST(BatchNormalizationTest, EmptyBatchInInferenceModeGivesEmptyOutput) {
  const Tensor v = RandomFloat({3}, 2, 0.1f, 1.0f);
  auto out = RunSingleNode("BatchNormalization", {Tensor(DType::kFloat32, {0, 3, 2}), v, v, v, v});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), std::vector<int64_t>({0, 3, 2}));
  auto train = RunSingleNode("BatchNormalization",
                             {Tensor(DType::kFloat32, {0, 3, 2}), v, v, v, v},
                             {{"training_mode", Attribute(int64_t{1})}}, 3);
  EXPECT_FALSE(train.ok());
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization

void CheckLayerNorm(const std::vector<int64_t>& dims, int64_t axis, bool with_bias, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "axis " << axis);
  const int64_t rank = dims.size();
  const int64_t a = axis < 0 ? axis + rank : axis;
  const std::vector<int64_t> norm_dims(dims.begin() + a, dims.end());
  const Tensor x = RandomFloat(dims, seed, -3.0f, 3.0f);
  const Tensor scale = RandomFloat(norm_dims, seed + 1);
  const Tensor bias = RandomFloat(norm_dims, seed + 2);
  std::vector<Tensor> inputs = {x, scale};
  if (with_bias) inputs.push_back(bias);
  auto out = RunSingleNode("LayerNormalization", inputs,
                           {{"axis", Attribute(axis)}, {"epsilon", Attribute(0.1f)}}, 3);
  ASSERT_TRUE(out.ok()) << out.status();
  int64_t rows = 1;
  for (int64_t k = 0; k < a; ++k) rows *= dims[k];
  const int64_t cols = x.num_elements() / rows;
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), rows, cols, static_cast<double>(0.1f), &y, &mean, &inv);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    y[i] = y[i] * scale.GetAsDouble(i % cols) + (with_bias ? bias.GetAsDouble(i % cols) : 0.0);
  }
  ExpectNear((*out)[0], y, 1e-5);
  ExpectNear((*out)[1], mean, 1e-6);
  ExpectNear((*out)[2], inv, 1e-6);
  std::vector<int64_t> stat_dims(dims.begin(), dims.begin() + a);
  stat_dims.resize(rank, 1);
  EXPECT_EQ((*out)[1].dims(), stat_dims);
  EXPECT_EQ((*out)[2].dims(), stat_dims);
  EXPECT_EQ((*out)[1].dtype(), DType::kFloat32);
}

TEST(LayerNormalizationTest, EveryAxisWithAndWithoutBias) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  for (int64_t axis = -4; axis < 4; ++axis) {
    CheckLayerNorm(dims, axis, /*with_bias=*/true, 100 + axis);
    CheckLayerNorm(dims, axis, /*with_bias=*/false, 200 + axis);
  }
}

TEST(LayerNormalizationTest, ScaleBroadcastsAndStashTypeSetsStatisticsType) {
  // Scale [1, 5] broadcasts over the normalised dims [4, 5]; stash_type 11 = double.
  const Tensor x = RandomFloat({3, 4, 5}, 31);
  const Tensor scale = RandomFloat({1, 5}, 32);
  auto out = RunSingleNode("LayerNormalization", {x, scale},
                           {{"axis", Attribute(int64_t{1})}, {"stash_type", Attribute(int64_t{11})}},
                           3);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 3, 20, static_cast<double>(1e-5f), &y, &mean, &inv);
  for (int64_t i = 0; i < x.num_elements(); ++i) y[i] *= scale.GetAsDouble(i % 5);
  ExpectNear((*out)[0], y, 1e-5);
  EXPECT_EQ((*out)[1].dtype(), DType::kFloat64);
  EXPECT_EQ((*out)[2].dtype(), DType::kFloat64);
  ExpectNear((*out)[1], mean, 1e-12);
}

TEST(LayerNormalizationTest, HalfInputComputesThroughFloat) {
  const Tensor x32 = RandomFloat({4, 8}, 41, -2.0f, 2.0f);
  const Tensor x = Convert(x32, DType::kFloat16);
  const Tensor scale = Convert(RandomFloat({8}, 42), DType::kFloat16);
  auto out = RunSingleNode("LayerNormalization", {x, scale}, {}, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat16);
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 4, 8, static_cast<double>(1e-5f), &y, &mean, &inv);
  for (int64_t i = 0; i < x.num_elements(); ++i) y[i] *= scale.GetAsDouble(i % 8);
  ExpectNear((*out)[0], y, 2e-3);
}

TEST(LayerNormalizationTest, BadAxisAndBadScaleAreErrors) {
  const Tensor x = RandomFloat({2, 3}, 51);
  auto bad_axis = RunSingleNode("LayerNormalization", {x, RandomFloat({3}, 52)},
                                {{"axis", Attribute(int64_t{2})}});
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_NE(bad_axis.status().message().find("axis"), std::string::npos) << bad_axis.status();
  auto bad_scale = RunSingleNode("LayerNormalization", {x, RandomFloat({4}, 53)});
  ASSERT_FALSE(bad_scale.ok());
  EXPECT_NE(bad_scale.status().message().find("Scale"), std::string::npos) << bad_scale.status();
  auto int_input = RunSingleNode("LayerNormalization",
                                 {RandomInt64({2, 3}, 1, 0, 5), RandomFloat({3}, 54)});
  EXPECT_FALSE(int_input.ok());
}

TEST(LayerNormalizationTest, ShapeInferenceWithSymbolicDims) {
  auto g = InferText(R"(graph "g" {
    input %x : bf16[B,T,64]
    input %s : bf16[64]
    %y : f32[*], %m : f32[*], %i : f32[*] = LayerNormalization(%x, %s) {axis = -1} origin "ln"
    output %y, %m, %i
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "bf16[B,T,64]");
  EXPECT_EQ(TypeOf(**g, "m"), "f32[B,T,1]");
  EXPECT_EQ(TypeOf(**g, "i"), "f32[B,T,1]");
}

TEST(LayerNormalizationTest, EmptyRowsGiveEmptyOutputs) {
  auto out = RunSingleNode("LayerNormalization",
                           {Tensor(DType::kFloat32, {0, 4}), RandomFloat({4}, 1)}, {}, 3);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), std::vector<int64_t>({0, 4}));
  EXPECT_EQ((*out)[1].dims(), std::vector<int64_t>({0, 1}));
}

// ---------------------------------------------------------------------------------------------
// InstanceNormalization and GroupNormalization

TEST(InstanceNormalizationTest, NormalisesEachInstanceAndChannel) {
  const Tensor x = RandomFloat({2, 3, 4, 2}, 61, -2.0f, 4.0f);
  const Tensor scale = RandomFloat({3}, 62);
  const Tensor bias = RandomFloat({3}, 63);
  auto out = RunSingleNode("InstanceNormalization", {x, scale, bias},
                           {{"epsilon", Attribute(0.05f)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 6, 8, static_cast<double>(0.05f), &y, &mean, &inv);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t c = (i / 8) % 3;
    y[i] = y[i] * scale.GetAsDouble(c) + bias.GetAsDouble(c);
  }
  ExpectNear((*out)[0], y, 1e-5);
}

TEST(InstanceNormalizationTest, DoubleInputAndBadScale) {
  const Tensor x = Convert(RandomFloat({1, 2, 5}, 71), DType::kFloat64);
  const Tensor s = Convert(RandomFloat({2}, 72), DType::kFloat64);
  auto out = RunSingleNode("InstanceNormalization", {x, s, s});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat64);
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 2, 5, static_cast<double>(1e-5f), &y, &mean, &inv);
  for (int64_t i = 0; i < 10; ++i) y[i] = y[i] * s.GetAsDouble(i / 5) + s.GetAsDouble(i / 5);
  ExpectNear((*out)[0], y, 1e-12);
  const Tensor s3 = Convert(RandomFloat({3}, 73), DType::kFloat64);
  EXPECT_FALSE(RunSingleNode("InstanceNormalization", {x, s3, s}).ok());
}

TEST(GroupNormalizationTest, PerChannelScaleAndBias) {
  const Tensor x = RandomFloat({2, 6, 3}, 81, -1.0f, 3.0f);
  const Tensor scale = RandomFloat({6}, 82);
  const Tensor bias = RandomFloat({6}, 83);
  auto out = RunSingleNode("GroupNormalization", {x, scale, bias},
                           {{"num_groups", Attribute(int64_t{3})}, {"epsilon", Attribute(1e-3f)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 6, 6, static_cast<double>(1e-3f), &y, &mean, &inv);  // 2 ch * 3
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t c = (i / 3) % 6;
    y[i] = y[i] * scale.GetAsDouble(c) + bias.GetAsDouble(c);
  }
  ExpectNear((*out)[0], y, 1e-5);
}

TEST(GroupNormalizationTest, Opset18PerGroupScaleAndBias) {
  const Tensor x = RandomFloat({1, 4, 5}, 91);
  const Tensor scale = RandomFloat({2}, 92);
  const Tensor bias = RandomFloat({2}, 93);
  auto out = RunSingleNode("GroupNormalization", {x, scale, bias},
                           {{"num_groups", Attribute(int64_t{2})}}, 1, "", 18);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, mean, inv;
  NormalizeRows(Values(x), 2, 10, static_cast<double>(1e-5f), &y, &mean, &inv);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t g = i / 10;
    y[i] = y[i] * scale.GetAsDouble(g) + bias.GetAsDouble(g);
  }
  ExpectNear((*out)[0], y, 1e-5);
}

TEST(GroupNormalizationTest, GroupsMustDivideChannels) {
  const Tensor s = RandomFloat({6}, 2);
  auto out = RunSingleNode("GroupNormalization", {RandomFloat({1, 6, 2}, 1), s, s},
                           {{"num_groups", Attribute(int64_t{4})}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("num_groups"), std::string::npos) << out.status();
  // num_groups is required.
  EXPECT_FALSE(RunSingleNode("GroupNormalization", {RandomFloat({1, 6, 2}, 1), s, s}).ok());
}

// ---------------------------------------------------------------------------------------------
// Dropout

TEST(DropoutTest, InferenceIsIdentityWithAllTrueMask) {
  const Tensor x = RandomFloat({3, 4}, 101);
  auto out = RunSingleNode("Dropout", {x, Tensor::Scalar<float>(0.7f)}, {}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].BitwiseEquals(x));
  ASSERT_EQ((*out)[1].dtype(), DType::kBool);
  for (int64_t i = 0; i < 12; ++i) EXPECT_TRUE((*out)[1].data<bool>()[i]);
}

TEST(DropoutTest, TrainingWithZeroRatioIsIdentity) {
  const Tensor x = RandomFloat({2, 5}, 102);
  auto out = RunSingleNode("Dropout",
                           {x, Tensor::Scalar<float>(0.0f), Tensor::Scalar<bool>(true)}, {}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].BitwiseEquals(x));
  for (int64_t i = 0; i < 10; ++i) EXPECT_TRUE((*out)[1].data<bool>()[i]);
}

TEST(DropoutTest, TrainingDropsAboutRatioAndScalesTheRest) {
  const Tensor x = RandomFloat({100, 100}, 103, 0.5f, 1.5f);
  auto out = RunSingleNode("Dropout",
                           {x, Tensor::Scalar<double>(0.25), Tensor::Scalar<bool>(true)}, {}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0];
  const Tensor& mask = (*out)[1];
  int64_t kept = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (mask.data<bool>()[i]) {
      ++kept;
      EXPECT_FLOAT_EQ(y.data<float>()[i], x.data<float>()[i] / 0.75f);
    } else {
      EXPECT_EQ(y.data<float>()[i], 0.0f);
    }
  }
  EXPECT_GT(kept, 7200);
  EXPECT_LT(kept, 7800);
}

TEST(DropoutTest, DefaultRatioIsOneHalfAndHalfTypesWork) {
  const Tensor x = Convert(RandomFloat({50, 40}, 104, 0.5f, 1.0f), DType::kBFloat16);
  auto out = RunSingleNode("Dropout", {x, Tensor(), Tensor::Scalar<bool>(true)}, {}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kBFloat16);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if ((*out)[1].data<bool>()[i]) {
      ++kept;
      EXPECT_NEAR((*out)[0].GetAsDouble(i), 2.0 * x.GetAsDouble(i), 1e-2);
    }
  }
  EXPECT_GT(kept, 900);
  EXPECT_LT(kept, 1100);
}

TEST(DropoutTest, RatioOneInTrainingIsAnError) {
  auto out = RunSingleNode("Dropout", {RandomFloat({4}, 1), Tensor::Scalar<float>(1.0f),
                                       Tensor::Scalar<bool>(true)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("ratio"), std::string::npos) << out.status();
}

TEST(DropoutTest, NonScalarRatioAndNonBoolTrainingModeAreErrors) {
  EXPECT_FALSE(RunSingleNode("Dropout", {RandomFloat({4}, 1), RandomFloat({2}, 2)}).ok());
  EXPECT_FALSE(RunSingleNode("Dropout", {RandomFloat({4}, 1), Tensor::Scalar<float>(0.5f),
                                         Tensor::Scalar<float>(1.0f)})
                   .ok());
}

TEST(DropoutTest, ShapeInferenceGivesBoolMask) {
  auto g = InferText(R"(graph "g" {
    input %x : f16[N,?,3]
    %y : f32[*], %m : f32[*] = Dropout(%x) origin "d"
    output %y, %m
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f16[N,?,3]");
  EXPECT_EQ(TypeOf(**g, "m"), "bool[N,?,3]");
}

}  // namespace
}  // namespace ottr::testing
