// Tests of Softmax, LogSoftmax, Hardmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss:
// schemas, shape functions and CPU kernels against double-precision references written here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
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

absl::StatusOr<std::unique_ptr<ir::Graph>> InferText(const std::string& text) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  if (!s.ok()) return s;
  return std::move(*g);
}

// Reference log-softmax of x [outer, n, inner] along the middle dim, in long double.
std::vector<double> RefLogSoftmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> y(x.num_elements());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      long double mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        mx = std::max<long double>(mx, x.GetAsDouble((o * n + k) * inner + i));
      }
      long double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x.GetAsDouble((o * n + k) * inner + i) - mx);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t idx = (o * n + k) * inner + i;
        y[idx] = static_cast<double>(x.GetAsDouble(idx) - mx - std::log(sum));
      }
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// Softmax family

TEST(SoftmaxTest, EveryAxisMatchesReference) {
  const std::vector<int64_t> dims = {2, 3, 4};
  const Tensor x = RandomFloat(dims, 1, -4.0f, 4.0f);
  for (int64_t axis = -3; axis < 3; ++axis) {
    SCOPED_TRACE(::testing::Message() << "axis " << axis);
    const int64_t a = axis < 0 ? axis + 3 : axis;
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < a; ++k) outer *= dims[k];
    for (int64_t k = a + 1; k < 3; ++k) inner *= dims[k];
    const std::vector<double> logp = RefLogSoftmax(x, outer, dims[a], inner);
    std::vector<double> p(logp.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = std::exp(logp[i]);
    auto sm = RunSingleNode("Softmax", {x}, {{"axis", Attribute(axis)}});
    ASSERT_TRUE(sm.ok()) << sm.status();
    ExpectNear((*sm)[0], p, 1e-6);
    auto lsm = RunSingleNode("LogSoftmax", {x}, {{"axis", Attribute(axis)}});
    ASSERT_TRUE(lsm.ok()) << lsm.status();
    ExpectNear((*lsm)[0], logp, 1e-6);
  }
}

TEST(SoftmaxTest, DefaultAxisIsLast) {
  const Tensor x = Tensor::FromVector<float>({2, 2}, {0.0f, std::log(3.0f), 1.0f, 1.0f});
  auto out = RunSingleNode("Softmax", {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {0.25, 0.75, 0.5, 0.5}, 1e-6);
}

TEST(SoftmaxTest, LargeInputsAreStable) {
  const Tensor x = Tensor::FromVector<float>({1, 3}, {10000.0f, 10001.0f, 10002.0f});
  auto sm = RunSingleNode("Softmax", {x});
  ASSERT_TRUE(sm.ok()) << sm.status();
  const double z = 1.0 + std::exp(1.0) + std::exp(2.0);
  ExpectNear((*sm)[0], {1.0 / z, std::exp(1.0) / z, std::exp(2.0) / z}, 1e-6);
  auto lsm = RunSingleNode("LogSoftmax", {x});
  ASSERT_TRUE(lsm.ok()) << lsm.status();
  ExpectNear((*lsm)[0], {-std::log(z), 1.0 - std::log(z), 2.0 - std::log(z)}, 1e-6);
}

TEST(SoftmaxTest, HalfAndDoubleTypes) {
  const Tensor x32 = RandomFloat({3, 5}, 7, -2.0f, 2.0f);
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    const Tensor x = Convert(x32, t);
    auto out = RunSingleNode("LogSoftmax", {x});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].dtype(), t);
    ExpectNear((*out)[0], RefLogSoftmax(x, 3, 5, 1), t == DType::kFloat64 ? 1e-12 : 1e-2);
  }
}

TEST(SoftmaxTest, BadAxisAndIntegerInputAreErrors) {
  auto bad_axis = RunSingleNode("Softmax", {RandomFloat({2, 3}, 1)}, {{"axis", Attribute(int64_t{2})}});
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_NE(bad_axis.status().message().find("axis"), std::string::npos) << bad_axis.status();
  EXPECT_FALSE(RunSingleNode("Softmax", {RandomInt64({2, 3}, 1, 0, 3)}).ok());
  EXPECT_FALSE(RunSingleNode("Softmax", {Tensor::Scalar<float>(1.0f)}).ok());
}

TEST(SoftmaxTest, EmptyTensor) {
  auto out = RunSingleNode("Softmax", {Tensor(DType::kFloat32, {0, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dims(), std::vector<int64_t>({0, 4}));
}

TEST(HardmaxTest, OneAtFirstMaximum) {
  const Tensor x = Tensor::FromVector<float>({2, 4}, {1.0f, 3.0f, 3.0f, 0.0f, -5.0f, -6.0f, -7.0f, -5.5f});
  auto out = RunSingleNode("Hardmax", {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {0, 1, 0, 0, 1, 0, 0, 0}, 0.0);
  auto axis0 = RunSingleNode("Hardmax", {x}, {{"axis", Attribute(int64_t{0})}});
  ASSERT_TRUE(axis0.ok()) << axis0.status();
  ExpectNear((*axis0)[0], {1, 1, 1, 1, 0, 0, 0, 0}, 0.0);
}

TEST(SoftmaxTest, ShapeInferenceKeepsSymbols) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[B,T,V]
    %y : f32[*] = Softmax(%x) origin "s"
    %z : f32[*] = Hardmax(%x) {axis = 1} origin "h"
    output %y, %z
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->FindValue("y")->type().ToString(), "f32[B,T,V]");
  EXPECT_EQ((*g)->FindValue("z")->type().ToString(), "f32[B,T,V]");
}

// ---------------------------------------------------------------------------------------------
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss

// Reference loss terms -logp[n, t, d] * w and their weights (0 for ignored labels).
struct RefLoss {
  std::vector<double> loss;
  double sum = 0.0;
  double weight_sum = 0.0;
};

RefLoss ComputeRefLoss(const std::vector<double>& logp, const std::vector<int64_t>& label,
                       int64_t n, int64_t c, int64_t d, const Tensor* weights,
                       std::optional<int64_t> ignore) {
  RefLoss r;
  r.loss.assign(n * d, 0.0);
  for (int64_t j = 0; j < n * d; ++j) {
    if (ignore && label[j] == *ignore) continue;
    const double w = weights ? weights->GetAsDouble(label[j]) : 1.0;
    r.loss[j] = -logp[((j / d) * c + label[j]) * d + j % d] * w;
    r.sum += r.loss[j];
    r.weight_sum += w;
  }
  return r;
}

TEST(SoftmaxCrossEntropyLossTest, ReductionsWeightsAndIgnoreIndex) {
  const int64_t n = 3, c = 5, d = 4;
  const Tensor x = RandomFloat({n, c, d}, 11, -3.0f, 3.0f);
  Tensor labels = RandomInt64({n, d}, 12, 0, c - 1);
  labels.data<int64_t>()[2] = -7;  // ignored
  const Tensor weights = RandomFloat({c}, 13, 0.2f, 2.0f);
  const std::vector<double> logp = RefLogSoftmax(x, n, c, d);
  const std::vector<int64_t> label = labels.ToInt64Vector();
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (bool with_weights : {false, true}) {
      SCOPED_TRACE(::testing::Message() << reduction << " weights " << with_weights);
      std::vector<Tensor> inputs = {x, labels};
      if (with_weights) inputs.push_back(weights);
      auto out = RunSingleNode("SoftmaxCrossEntropyLoss", inputs,
                               {{"reduction", Attribute(reduction)},
                                {"ignore_index", Attribute(int64_t{-7})}},
                               2);
      ASSERT_TRUE(out.ok()) << out.status();
      const RefLoss ref = ComputeRefLoss(logp, label, n, c, d, with_weights ? &weights : nullptr,
                                         -7);
      if (std::string(reduction) == "none") {
        EXPECT_EQ((*out)[0].dims(), std::vector<int64_t>({n, d}));
        ExpectNear((*out)[0], ref.loss, 1e-6);
        EXPECT_EQ((*out)[0].GetAsDouble(2), 0.0);
      } else if (std::string(reduction) == "sum") {
        EXPECT_EQ((*out)[0].rank(), 0);
        ExpectNear((*out)[0], {ref.sum}, 1e-6);
      } else {
        ExpectNear((*out)[0], {ref.sum / ref.weight_sum}, 1e-6);
      }
      ExpectNear((*out)[1], logp, 1e-6);
    }
  }
}

TEST(SoftmaxCrossEntropyLossTest, DefaultMeanOverAllElementsWithInt32Labels) {
  const Tensor x = RandomFloat({4, 3}, 21, -2.0f, 2.0f);
  const Tensor labels = Tensor::FromVector<int32_t>({4}, {0, 2, 1, 2});
  auto out = RunSingleNode("SoftmaxCrossEntropyLoss", {x, labels});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> logp = RefLogSoftmax(x, 4, 3, 1);
  const RefLoss ref = ComputeRefLoss(logp, {0, 2, 1, 2}, 4, 3, 1, nullptr, std::nullopt);
  ExpectNear((*out)[0], {ref.sum / 4}, 1e-6);
}

TEST(SoftmaxCrossEntropyLossTest, DoubleScoresAndHighDimensions) {
  const Tensor x = Convert(RandomFloat({2, 3, 2, 2, 2}, 31, -2.0f, 2.0f), DType::kFloat64);
  const Tensor labels = RandomInt64({2, 2, 2, 2}, 32, 0, 2);
  auto out = RunSingleNode("SoftmaxCrossEntropyLoss", {x, labels},
                           {{"reduction", Attribute("sum")}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat64);
  const RefLoss ref = ComputeRefLoss(RefLogSoftmax(x, 2, 3, 8), labels.ToInt64Vector(), 2, 3, 8,
                                     nullptr, std::nullopt);
  ExpectNear((*out)[0], {ref.sum}, 1e-12);
}

TEST(SoftmaxCrossEntropyLossTest, AllIgnoredMeanIsNaN) {
  const Tensor labels = Tensor::FromVector<int64_t>({2}, {1, 1});
  auto out = RunSingleNode("SoftmaxCrossEntropyLoss", {RandomFloat({2, 3}, 1), labels},
                           {{"ignore_index", Attribute(int64_t{1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(std::isnan((*out)[0].GetAsDouble(0)));
}

TEST(SoftmaxCrossEntropyLossTest, LabelOutOfRangeIsAnError) {
  const Tensor labels = Tensor::FromVector<int64_t>({2}, {0, 3});
  auto out = RunSingleNode("SoftmaxCrossEntropyLoss", {RandomFloat({2, 3}, 1), labels});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("label 3"), std::string::npos) << out.status();
}

TEST(SoftmaxCrossEntropyLossTest, MismatchedLabelsAndBadAttributesAreErrors) {
  EXPECT_FALSE(RunSingleNode("SoftmaxCrossEntropyLoss",
                             {RandomFloat({2, 3}, 1), RandomInt64({3}, 2, 0, 2)})
                   .ok());
  EXPECT_FALSE(RunSingleNode("SoftmaxCrossEntropyLoss",
                             {RandomFloat({2, 3}, 1), RandomInt64({2}, 2, 0, 2)},
                             {{"reduction", Attribute("avg")}})
                   .ok());
  EXPECT_FALSE(RunSingleNode("SoftmaxCrossEntropyLoss",
                             {RandomFloat({2, 3}, 1), RandomFloat({2}, 2)})
                   .ok());
  EXPECT_FALSE(RunSingleNode("SoftmaxCrossEntropyLoss",
                             {RandomFloat({2, 3}, 1), RandomInt64({2}, 2, 0, 2),
                              RandomFloat({4}, 3)})
                   .ok());
}

TEST(NegativeLogLikelihoodLossTest, ReductionsWeightsAndIgnoreIndex) {
  const int64_t n = 4, c = 3, d = 5;
  const Tensor x = RandomFloat({n, c, d}, 41, -4.0f, 0.0f);
  Tensor labels = RandomInt64({n, d}, 42, 0, c - 1);
  labels.data<int64_t>()[0] = 1;
  labels.data<int64_t>()[7] = 1;
  const Tensor weights = RandomFloat({c}, 43, 0.1f, 1.0f);
  const std::vector<double> logp = [&] {
    std::vector<double> v(x.num_elements());
    for (int64_t i = 0; i < x.num_elements(); ++i) v[i] = x.GetAsDouble(i);
    return v;
  }();
  const std::vector<int64_t> label = labels.ToInt64Vector();
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (bool with_weights : {false, true}) {
      SCOPED_TRACE(::testing::Message() << reduction << " weights " << with_weights);
      std::vector<Tensor> inputs = {x, labels};
      if (with_weights) inputs.push_back(weights);
      auto out = RunSingleNode("NegativeLogLikelihoodLoss", inputs,
                               {{"reduction", Attribute(reduction)},
                                {"ignore_index", Attribute(int64_t{1})}});
      ASSERT_TRUE(out.ok()) << out.status();
      const RefLoss ref =
          ComputeRefLoss(logp, label, n, c, d, with_weights ? &weights : nullptr, 1);
      if (std::string(reduction) == "none") {
        ExpectNear((*out)[0], ref.loss, 1e-6);
      } else if (std::string(reduction) == "sum") {
        ExpectNear((*out)[0], {ref.sum}, 1e-6);
      } else {
        ExpectNear((*out)[0], {ref.sum / ref.weight_sum}, 1e-6);
      }
    }
  }
}

TEST(NegativeLogLikelihoodLossTest, IgnoreIndexOutsideClassRangeIsAllowed) {
  const Tensor x = Tensor::FromVector<float>({2, 2}, {-0.5f, -1.0f, -2.0f, -0.25f});
  const Tensor labels = Tensor::FromVector<int64_t>({2}, {10, 1});
  auto out = RunSingleNode("NegativeLogLikelihoodLoss", {x, labels},
                           {{"ignore_index", Attribute(int64_t{10})}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {0.25}, 1e-7);
  // Without ignore_index, label 10 is out of range.
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLoss", {x, labels}).ok());
}

TEST(NegativeLogLikelihoodLossTest, ShapeInferenceWithSymbolicBatch) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,10,H]
    input %t : i64[N,H]
    %l : f32[*] = NegativeLogLikelihoodLoss(%x, %t) {reduction = "none"} origin "nll"
    %m : f32[*] = NegativeLogLikelihoodLoss(%x, %t) origin "nll_mean"
    %s : f32[*], %lp : f32[*] = SoftmaxCrossEntropyLoss(%x, %t) {reduction = "sum"} origin "sce"
    output %l, %m, %s, %lp
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->FindValue("l")->type().ToString(), "f32[N,H]");
  EXPECT_EQ((*g)->FindValue("m")->type().ToString(), "f32[]");
  EXPECT_EQ((*g)->FindValue("s")->type().ToString(), "f32[]");
  EXPECT_EQ((*g)->FindValue("lp")->type().ToString(), "f32[N,10,H]");
}

TEST(NegativeLogLikelihoodLossTest, ShapeInferenceRejectsMismatchedLabels) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[4,10]
    input %t : i64[5]
    %l : f32[*] = NegativeLogLikelihoodLoss(%x, %t) origin "nll"
    output %l
  })");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nll"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace ottr::testing
