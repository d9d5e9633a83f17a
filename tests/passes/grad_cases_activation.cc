// Central-difference cases of the activation gradient rules (ir/grads/activation_grads.cc) and
// so of the ottr::*Grad kernels they emit. Inputs stay away from each op's kinks (Relu at 0,
// HardSwish at ±3, ThresholdedRelu at alpha, ...).
#include <cmath>

#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

// Values in [lo, hi) moved to at least `margin` from each of `points`.
Tensor AwayFrom(std::vector<int64_t> dims, uint64_t seed, double lo, double hi,
                const std::vector<double>& points, double margin = 0.05) {
  Tensor t = RandomDouble(std::move(dims), seed, lo, hi);
  for (double& x : t.span<double>()) {
    for (double p : points) {
      if (std::abs(x - p) < margin) x = x >= p ? p + margin : p - margin;
    }
  }
  return t;
}

Attribute F(float v) { return Attribute(v); }

}  // namespace

std::vector<GradCase> ActivationGradCases() {
  std::vector<GradCase> cases;
  const std::vector<int64_t> shape = {3, 4};
  cases.push_back(Case("Relu", "Relu", {AwayFrom(shape, 1, -2.0, 2.0, {0.0})}));
  cases.push_back(Case("Relu/3d", "Relu", {AwayFrom({2, 3, 2}, 2, -1.0, 1.0, {0.0})}));
  cases.push_back(Case("LeakyRelu", "LeakyRelu", {AwayFrom(shape, 3, -2.0, 2.0, {0.0})}));
  cases.push_back(Case("LeakyRelu/alpha", "LeakyRelu", {AwayFrom(shape, 4, -2.0, 2.0, {0.0})},
                       {{"alpha", F(0.3f)}}));
  cases.push_back(Case("LeakyRelu/negative_alpha", "LeakyRelu",
                       {AwayFrom(shape, 5, -2.0, 2.0, {0.0})}, {{"alpha", F(-0.5f)}}));
  cases.push_back(Case("Sigmoid", "Sigmoid", {RandomDouble(shape, 6, -4.0, 4.0)}));
  cases.push_back(Case("Sigmoid/large", "Sigmoid",
                       {Tensor::FromVector<double>({4}, {-30.0, -12.0, 15.0, 30.0})}));
  cases.push_back(Case("Tanh", "Tanh", {RandomDouble(shape, 7, -3.0, 3.0)}));
  cases.push_back(Case("Gelu", "Gelu", {RandomDouble(shape, 8, -4.0, 4.0)}));
  cases.push_back(Case("Gelu/none", "Gelu", {RandomDouble({5}, 9, -3.0, 3.0)},
                       {{"approximate", Attribute("none")}}));
  cases.push_back(Case("Gelu/tanh", "Gelu", {RandomDouble(shape, 10, -4.0, 4.0)},
                       {{"approximate", Attribute("tanh")}}));
  cases.push_back(Case("Elu", "Elu", {AwayFrom(shape, 11, -3.0, 2.0, {0.0})}));
  cases.push_back(Case("Elu/alpha", "Elu", {AwayFrom(shape, 12, -3.0, 2.0, {0.0})},
                       {{"alpha", F(0.4f)}}));
  cases.push_back(Case("Selu", "Selu", {AwayFrom(shape, 13, -3.0, 2.0, {0.0})}));
  cases.push_back(Case("Selu/alpha_gamma", "Selu", {AwayFrom(shape, 14, -3.0, 2.0, {0.0})},
                       {{"alpha", F(2.0f)}, {"gamma", F(0.8f)}}));
  cases.push_back(Case("Celu", "Celu", {AwayFrom(shape, 15, -3.0, 2.0, {0.0})}));
  cases.push_back(Case("Celu/alpha", "Celu", {AwayFrom(shape, 16, -3.0, 2.0, {0.0})},
                       {{"alpha", F(2.5f)}}));
  cases.push_back(Case("Softplus", "Softplus", {RandomDouble(shape, 17, -4.0, 4.0)}));
  cases.push_back(Case("Softplus/large", "Softplus",
                       {Tensor::FromVector<double>({4}, {-40.0, -15.0, 20.0, 40.0})}));
  // Kinks where alpha x + beta is 0 or 1.
  cases.push_back(Case("HardSigmoid", "HardSigmoid", {AwayFrom(shape, 18, -4.0, 4.0, {-2.5, 2.5})}));
  cases.push_back(Case("HardSigmoid/alpha_beta", "HardSigmoid",
                       {AwayFrom(shape, 19, -3.0, 3.0, {-0.6, 1.4})},
                       {{"alpha", F(0.5f)}, {"beta", F(0.3f)}}));
  cases.push_back(Case("HardSwish", "HardSwish", {AwayFrom({4, 5}, 20, -5.0, 5.0, {-3.0, 3.0})}));
  cases.push_back(Case("Mish", "Mish", {RandomDouble(shape, 21, -5.0, 5.0)}));
  cases.push_back(Case("Mish/large", "Mish",
                       {Tensor::FromVector<double>({5}, {-40.0, -19.0, 19.5, 21.0, 35.0})}));
  cases.push_back(Case("Softsign", "Softsign", {AwayFrom(shape, 22, -3.0, 3.0, {0.0})}));
  cases.push_back(Case("ThresholdedRelu", "ThresholdedRelu",
                       {AwayFrom(shape, 23, -1.0, 3.0, {1.0})}));
  cases.push_back(Case("ThresholdedRelu/alpha", "ThresholdedRelu",
                       {AwayFrom(shape, 24, -1.0, 2.0, {0.4})}, {{"alpha", F(0.4f)}}));

  // PRelu: X and slope both differentiated, slope broadcast in the ways ONNX allows.
  struct PRelu {
    const char* name;
    std::vector<int64_t> x, slope;
  };
  uint64_t seed = 30;
  for (const PRelu& p : {PRelu{"channel", {2, 3, 2, 2}, {3, 1, 1}}, PRelu{"last_dim", {2, 4}, {4}},
                         PRelu{"one_element", {3, 4}, {1}}, PRelu{"scalar", {2, 3}, {}},
                         PRelu{"same_shape", {2, 3}, {2, 3}}, PRelu{"middle", {2, 3, 4}, {3, 1}}}) {
    cases.push_back(Case(std::string("PRelu/") + p.name, "PRelu",
                         {AwayFrom(p.x, seed, -2.0, 2.0, {0.0}), RandomDouble(p.slope, seed + 1, -0.5, 0.9)}));
    seed += 2;
  }
  GradCase slope_only = Case("PRelu/only_slope", "PRelu",
                             {AwayFrom({4, 3}, 50, -2.0, 2.0, {0.0}), RandomDouble({3}, 51)});
  slope_only.wrt = {1};
  cases.push_back(slope_only);
  return cases;
}

}  // namespace ottr::testing
