// Registry-wide gradient checks: every op with a gradient rule has at least one central-difference
// case, and every case passes. A new differentiable op cannot skip this: the coverage test fails.
#include <set>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

std::vector<GradCase> AllCases() {
  std::vector<GradCase> all;
  for (auto fn : {ElementwiseGradCases, ActivationGradCases, ReductionGradCases, TensorGradCases,
                  LinalgGradCases, ConvPoolGradCases, NormalizationGradCases, LossGradCases}) {
    for (GradCase& c : fn()) all.push_back(std::move(c));
  }
  return all;
}

TEST(GradientCheckTest, EveryOpHasAGradientRuleOrIsMarkedNotDifferentiable) {
  for (const ir::OpSchema* s : ir::OpRegistry::Global().All()) {
    EXPECT_TRUE(static_cast<bool>(s->gradient) != s->not_differentiable)
        << (s->domain.empty() ? "" : s->domain + "::") << s->op_type
        << (s->gradient ? " has a gradient rule and is marked not differentiable"
                        : " has neither a gradient rule nor NotDifferentiable()");
  }
}

TEST(GradientCheckTest, EveryGradientRuleHasACase) {
  std::set<std::string> covered;
  for (const GradCase& c : AllCases()) covered.insert(c.domain + "::" + c.op_type);
  for (const ir::OpSchema* s : ir::OpRegistry::Global().All()) {
    if (!s->gradient) continue;
    EXPECT_TRUE(covered.count(s->domain + "::" + s->op_type))
        << "no central-difference case for " << s->op_type;
  }
}

class GradientCaseTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientCaseTest, MatchesCentralDifferences) {
  absl::Status s = CheckGradient(GetParam());
  EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradientCaseTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ottr::testing
