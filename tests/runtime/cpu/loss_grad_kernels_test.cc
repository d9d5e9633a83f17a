// Tests of the softmax and classification-loss backward kernels
// (runtime/cpu/loss_grad_kernels.cc) against vector-Jacobian products computed by central
// differences of double-precision reference forwards written out here.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Log-softmax of x [outer, n, inner] along the middle dim (softmax = exp of it).
std::vector<double> LogSoftmaxRef(const std::vector<double>& x, int64_t outer, int64_t n,
                                  int64_t inner) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[(o * n + k) * inner + i]);
      double s = 0.0;
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[(o * n + k) * inner + i] - m);
      for (int64_t k = 0; k < n; ++k) {
        y[(o * n + k) * inner + i] = x[(o * n + k) * inner + i] - m - std::log(s);
      }
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// SoftmaxGrad / LogSoftmaxGrad

TEST(SoftmaxGradTest, EveryAxisMatchesNumericVjp) {
  const std::vector<int64_t> dims = {2, 3, 4};
  const Tensor x = RandomFloat(dims, 1, -2.0f, 2.0f);
  const Tensor dy = RandomFloat(dims, 2);
  for (const bool log : {false, true}) {
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t k = 0; k < a; ++k) outer *= dims[k];
      for (int64_t k = a + 1; k < 3; ++k) inner *= dims[k];
      auto y = RunSingleNode(log ? "LogSoftmax" : "Softmax", {x}, {{"axis", Attribute(axis)}});
      ASSERT_TRUE(y.ok()) << y.status();
      auto out = RunSingleNode(log ? "LogSoftmaxGrad" : "SoftmaxGrad", {dy, (*y)[0]},
                               {{"axis", Attribute(axis)}}, 1, kOttr);
      ASSERT_TRUE(out.ok()) << out.status();
      const Fn f = [&](const std::vector<double>& xv) {
        std::vector<double> r = LogSoftmaxRef(xv, outer, dims[a], inner);
        if (!log) {
          for (double& v : r) v = std::exp(v);
        }
        return r;
      };
      SCOPED_TRACE(absl::StrCat(log ? "LogSoftmax" : "Softmax", " axis ", axis));
      ExpectNear((*out)[0], NumericVjp(f, Values(x), Values(dy)), 1e-4);
    }
  }
}

TEST(SoftmaxGradTest, HalfAndDoubleTypes) {
  const Tensor y = RunSingleNode("Softmax", {RandomFloat({3, 7}, 11)}).value()[0];
  const Tensor dy = RandomFloat({3, 7}, 12);
  auto f32 = RunSingleNode("SoftmaxGrad", {dy, y}, {}, 1, kOttr);
  ASSERT_TRUE(f32.ok()) << f32.status();
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    auto out = RunSingleNode("SoftmaxGrad", {Convert(dy, t), Convert(y, t)}, {}, 1, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].dtype(), t);
    ExpectNear((*out)[0], Values((*f32)[0]), t == DType::kFloat64 ? 1e-6 : 2e-2);
  }
}

TEST(SoftmaxGradTest, BadInputsAreErrors) {
  const Tensor y = RandomFloat({2, 3}, 21);
  EXPECT_FALSE(RunSingleNode("SoftmaxGrad", {RandomFloat({3, 2}, 22), y}, {}, 1, kOttr).ok());
  EXPECT_FALSE(
      RunSingleNode("LogSoftmaxGrad", {y, y}, {{"axis", Attribute(int64_t{2})}}, 1, kOttr).ok());
  EXPECT_FALSE(RunSingleNode("SoftmaxGrad", {Convert(y, DType::kFloat64), y}, {}, 1, kOttr).ok());
  Tensor yi(DType::kInt64, {2, 3});
  EXPECT_FALSE(RunSingleNode("SoftmaxGrad", {yi, yi}, {}, 1, kOttr).ok());
}

// ---------------------------------------------------------------------------------------------
// SoftmaxCrossEntropyLossGrad / NegativeLogLikelihoodLossGrad

struct LossSpec {
  std::string reduction = "mean";
  bool weighted = false;
  std::optional<int64_t> ignore_index;
};

// The loss of input x [N, C, D] (flattened trailing dims) as a vector (one element unless
// reduction is "none"); `softmax` applies log-softmax over C first.
std::vector<double> LossRef(const std::vector<double>& x, const std::vector<double>& weights,
                            const std::vector<int64_t>& labels, int64_t n, int64_t c, int64_t d,
                            const LossSpec& spec, bool softmax) {
  const std::vector<double> lp = softmax ? LogSoftmaxRef(x, n, c, d) : x;
  std::vector<double> loss(n * d, 0.0);
  double sum = 0.0, wsum = 0.0;
  for (int64_t j = 0; j < n * d; ++j) {
    const int64_t t = labels[j];
    if (spec.ignore_index && t == *spec.ignore_index) continue;
    const double w = spec.weighted ? weights[t] : 1.0;
    loss[j] = -w * lp[((j / d) * c + t) * d + j % d];
    sum += loss[j];
    wsum += w;
  }
  if (spec.reduction == "none") return loss;
  return {spec.reduction == "sum" ? sum : sum / wsum};
}

void CheckLossGrad(bool softmax, const LossSpec& spec, std::vector<int64_t> dims, uint64_t seed) {
  const int64_t n = dims[0], c = dims[1];
  int64_t d = 1;
  for (size_t k = 2; k < dims.size(); ++k) d *= dims[k];
  std::vector<int64_t> label_dims = dims;
  label_dims.erase(label_dims.begin() + 1);
  Tensor labels = RandomInt64(label_dims, seed, 0, c - 1);
  if (spec.ignore_index) labels.data<int64_t>()[1] = *spec.ignore_index;
  const Tensor scores = RandomFloat(dims, seed + 1, -2.0f, 2.0f);
  const Tensor weights = RandomFloat({c}, seed + 2, 0.5f, 1.5f);
  const Tensor dloss =
      spec.reduction == "none" ? RandomFloat(label_dims, seed + 3) : Tensor::Scalar<float>(0.7f);
  std::map<std::string, Attribute> attrs = {{"reduction", Attribute(spec.reduction)}};
  if (spec.ignore_index) attrs["ignore_index"] = Attribute(*spec.ignore_index);
  // SCE's backward reads log_prob; NLL's reads its own input.
  Tensor input = scores;
  if (softmax) {
    auto lp = RunSingleNode("LogSoftmax", {scores}, {{"axis", Attribute(int64_t{1})}});
    ASSERT_TRUE(lp.ok()) << lp.status();
    input = (*lp)[0];
  }
  std::vector<Tensor> ins = {dloss, input, labels};
  if (spec.weighted) ins.push_back(weights);
  auto out =
      RunSingleNode(softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad", ins,
                    attrs, spec.weighted ? 2 : 1, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<int64_t> lv = labels.ToInt64Vector();
  const std::vector<double> wv = Values(weights);
  const Fn fx = [&](const std::vector<double>& xv) {
    return LossRef(xv, wv, lv, n, c, d, spec, softmax);
  };
  ExpectNear((*out)[0], NumericVjp(fx, Values(scores), Values(dloss)), 1e-4);
  if (spec.weighted) {
    const Fn fw = [&](const std::vector<double>& w) {
      return LossRef(Values(scores), w, lv, n, c, d, spec, softmax);
    };
    ExpectNear((*out)[1], NumericVjp(fw, wv, Values(dloss)), 1e-4);
  }
}

TEST(ClassificationLossGradTest, EveryReductionWeightsAndIgnoreIndexMatchNumericVjp) {
  uint64_t seed = 100;
  for (const bool softmax : {true, false}) {
    for (const std::string reduction : {"none", "sum", "mean"}) {
      for (const bool weighted : {false, true}) {
        for (const std::optional<int64_t> ignore :
             {std::optional<int64_t>(), std::optional<int64_t>(-100), std::optional<int64_t>(1)}) {
          for (const std::vector<int64_t>& dims :
               {std::vector<int64_t>{4, 3}, std::vector<int64_t>{2, 4, 3, 2}}) {
            SCOPED_TRACE(absl::StrCat(
                softmax ? "SCE " : "NLL ", reduction, weighted ? " weighted" : "",
                ignore ? absl::StrCat(" ignore ", *ignore) : "", " rank ", dims.size()));
            CheckLossGrad(softmax, {reduction, weighted, ignore}, dims, seed += 10);
          }
        }
      }
    }
  }
}

TEST(ClassificationLossGradTest, IgnoredPositionsGetZeroAndInt32LabelsWork) {
  const Tensor lp = RunSingleNode("LogSoftmax", {RandomFloat({3, 4}, 201)}).value()[0];
  const Tensor labels = Tensor::FromVector<int32_t>({3}, {2, 7, 0});
  auto out = RunSingleNode("SoftmaxCrossEntropyLossGrad", {Tensor::Scalar<float>(1.0f), lp, labels},
                           {{"ignore_index", Attribute(int64_t{7})}}, 1, kOttr);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int ch = 0; ch < 4; ++ch) EXPECT_EQ((*out)[0].GetAsDouble(4 + ch), 0.0);
  // Mean over the two counted rows: row 0 is (softmax − onehot) / 2.
  EXPECT_NEAR((*out)[0].GetAsDouble(2), (std::exp(lp.GetAsDouble(2)) - 1.0) / 2, 1e-6);
}

TEST(ClassificationLossGradTest, HalfAndDoubleTypes) {
  const Tensor x = RandomFloat({3, 5}, 211);
  const Tensor labels = RandomInt64({3}, 212, 0, 4);
  auto f32 = RunSingleNode("NegativeLogLikelihoodLossGrad",
                           {Tensor::Scalar<float>(1.0f), x, labels}, {}, 1, kOttr);
  ASSERT_TRUE(f32.ok()) << f32.status();
  for (DType t : {DType::kFloat16, DType::kFloat64}) {
    auto out = RunSingleNode("NegativeLogLikelihoodLossGrad",
                             {Convert(Tensor::Scalar<float>(1.0f), t), Convert(x, t), labels}, {},
                             1, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].dtype(), t);
    ExpectNear((*out)[0], Values((*f32)[0]), 1e-3);
  }
}

TEST(ClassificationLossGradTest, BadInputsAreErrors) {
  const Tensor x = RandomFloat({3, 4}, 221);
  const Tensor one = Tensor::Scalar<float>(1.0f);
  // Label out of range.
  auto a = RunSingleNode("SoftmaxCrossEntropyLossGrad",
                         {one, x, Tensor::FromVector<int64_t>({3}, {0, 4, 1})}, {}, 1, kOttr);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("out of range"), std::string::npos) << a.status();
  // Labels of the wrong shape.
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLossGrad", {one, x, RandomInt64({4}, 222, 0, 3)},
                             {}, 1, kOttr)
                   .ok());
  // dloss shaped for reduction "none" while the reduction is "mean", and the reverse.
  const Tensor labels = RandomInt64({3}, 223, 0, 3);
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLossGrad", {RandomFloat({3}, 224), x, labels},
                             {}, 1, kOttr)
                   .ok());
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLossGrad", {one, x, labels},
                             {{"reduction", Attribute("none")}}, 1, kOttr)
                   .ok());
  // Weights of the wrong length; a weights gradient without weights; a bad reduction.
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLossGrad",
                             {one, x, labels, RandomFloat({3}, 225)}, {}, 1, kOttr)
                   .ok());
  EXPECT_FALSE(RunSingleNode("NegativeLogLikelihoodLossGrad", {one, x, labels}, {}, 2, kOttr).ok());
  EXPECT_FALSE(RunSingleNode("SoftmaxCrossEntropyLossGrad", {one, x, labels},
                             {{"reduction", Attribute("max")}}, 1, kOttr)
                   .ok());
}

}  // namespace
}  // namespace ottr::testing
