// Central-difference cases of the softmax and classification-loss gradient rules
// (ir/grads/loss_grads.cc).
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

Tensor Labels(std::vector<int64_t> dims, std::vector<int64_t> values) {
  return Tensor::FromVector<int64_t>(std::move(dims), values);
}

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

void AddSoftmaxFamily(std::vector<GradCase>& cases) {
  for (const std::string op : {"Softmax", "LogSoftmax"}) {
    cases.push_back(Case(op + "/last_axis", op, {RandomDouble({3, 5}, 1, -2.0, 2.0)}));
    cases.push_back(Case(op + "/middle_axis", op, {RandomDouble({2, 3, 4}, 2, -2.0, 2.0)},
                         {{"axis", Attribute(int64_t{1})}}));
    cases.push_back(Case(op + "/negative_axis_first", op, {RandomDouble({4, 2, 3}, 3, -2.0, 2.0)},
                         {{"axis", Attribute(int64_t{-3})}}));
    cases.push_back(Case(op + "/1d", op, {RandomDouble({6}, 4, -3.0, 3.0)}));
  }
}

// Cases shared by both losses; `op` decides whether the scores are raw (SCE) or log-probs (NLL).
void AddLoss(std::vector<GradCase>& cases, const std::string& op) {
  const bool sce = op == "SoftmaxCrossEntropyLoss";
  const double lo = sce ? -2.0 : -3.0, hi = sce ? 2.0 : -0.1;
  cases.push_back(
      Case(op + "/mean", op, {RandomDouble({4, 5}, 10, lo, hi), Labels({4}, {0, 3, 4, 1})}));
  cases.push_back(Case(op + "/sum_weights", op,
                       {RandomDouble({4, 3}, 11, lo, hi), Labels({4}, {2, 0, 2, 1}),
                        RandomDouble({3}, 12, 0.5, 1.5)},
                       {{"reduction", Attribute("sum")}}));
  cases.push_back(
      Case(op + "/none_nd", op,
           {RandomDouble({2, 3, 4}, 13, lo, hi), Labels({2, 4}, {0, 1, 2, 1, 2, 2, 0, 1})},
           {{"reduction", Attribute("none")}}));
  cases.push_back(Case(op + "/mean_weights_ignore_index", op,
                       {RandomDouble({5, 4}, 14, lo, hi), Labels({5}, {1, -1, 3, 0, -1}),
                        RandomDouble({4}, 15, 0.5, 1.5)},
                       {{"ignore_index", Attribute(int64_t{-1})}}));
  cases.push_back(Case(
      op + "/none_weights_ignore_index", op,
      {RandomDouble({3, 4}, 16, lo, hi), Labels({3}, {2, 1, 3}), RandomDouble({4}, 17, 0.5, 1.5)},
      {{"reduction", Attribute("none")}, {"ignore_index", Attribute(int64_t{1})}}));
  cases.push_back(
      Case(op + "/mean_4d_weights_ignore_index", op,
           {RandomDouble({2, 3, 2, 2}, 18, lo, hi), Labels({2, 2, 2}, {0, 2, 1, 1, 2, 0, 1, 2}),
            RandomDouble({3}, 19, 0.5, 1.5)},
           {{"ignore_index", Attribute(int64_t{2})}}));
  cases.push_back(Case(op + "/sum_3d_ignore_index", op,
                       {RandomDouble({2, 4, 3}, 20, lo, hi), Labels({2, 3}, {3, 0, 5, 1, 5, 2})},
                       {{"reduction", Attribute("sum")}, {"ignore_index", Attribute(int64_t{5})}}));
  if (sce) {
    // The log_prob output enters the loss as well.
    GradCase logp = Case(op + "/log_prob_output", op,
                         {RandomDouble({3, 4, 2}, 21, lo, hi), Labels({3, 2}, {0, 3, 1, 2, 3, 3}),
                          RandomDouble({4}, 22, 0.5, 1.5)});
    logp.num_outputs = 2;
    cases.push_back(logp);
    GradCase logp_only = Case(op + "/log_prob_output_only", op,
                              {RandomDouble({3, 4}, 23, lo, hi), Labels({3}, {0, 3, 1})});
    logp_only.num_outputs = 2;
    logp_only.outputs = {1};
    cases.push_back(logp_only);
  }
}

}  // namespace

std::vector<GradCase> LossGradCases() {
  std::vector<GradCase> cases;
  AddSoftmaxFamily(cases);
  AddLoss(cases, "SoftmaxCrossEntropyLoss");
  AddLoss(cases, "NegativeLogLikelihoodLoss");
  // ottr's appended loss: mean cross-entropy with label smoothing and an ignored row.
  for (float smoothing : {0.0f, 0.1f}) {
    GradCase c;
    c.name = smoothing == 0.0f ? "ottr_SoftmaxCrossEntropy" : "ottr_SoftmaxCrossEntropy_smoothing";
    c.op_type = "SoftmaxCrossEntropy";
    c.domain = "ottr";
    c.inputs = {RandomDouble({5, 4}, 91, -2.0, 2.0),
                ir::Tensor::FromVector<int64_t>({5}, {3, 0, -100, 2, 1})};
    c.attrs = {{"ignore_index", ir::Attribute(int64_t{-100})},
               {"label_smoothing", ir::Attribute(smoothing)}};
    c.num_outputs = 2;
    c.outputs = {0};
    cases.push_back(c);
  }
  return cases;
}

}  // namespace ottr::testing
