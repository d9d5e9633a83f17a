// Central-difference cases of the normalisation and Dropout gradient rules
// (ir/grads/normalization_grads.cc). Training-mode Dropout with ratio > 0 draws a new mask per
// run, so central differences cannot check it; tests/ir/grads/normalization_grads_test.cc does.
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

Tensor Bool(bool v) { return Tensor::Scalar<bool>(v); }

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

void AddLayerNormalization(std::vector<GradCase>& cases) {
  cases.push_back(
      Case("LayerNormalization/last_axis", "LayerNormalization",
           {RandomDouble({3, 5}, 1), RandomDouble({5}, 2, 0.5, 1.5), RandomDouble({5}, 3)}));
  cases.push_back(
      Case("LayerNormalization/axis1_3d", "LayerNormalization",
           {RandomDouble({2, 3, 4}, 4), RandomDouble({3, 4}, 5, 0.5, 1.5), RandomDouble({3, 4}, 6)},
           {{"axis", Attribute(int64_t{1})}, {"epsilon", Attribute(1e-3f)}}));
  // Scale broadcast within the normalised dims, B shaped like the last dim.
  cases.push_back(
      Case("LayerNormalization/negative_axis_broadcast_params", "LayerNormalization",
           {RandomDouble({2, 3, 4}, 7), RandomDouble({1, 4}, 8, 0.5, 1.5), RandomDouble({4}, 9)},
           {{"axis", Attribute(int64_t{-2})}}));
  cases.push_back(Case("LayerNormalization/no_bias", "LayerNormalization",
                       {RandomDouble({4, 6}, 10), RandomDouble({6}, 11, 0.5, 1.5)}));
  // Scale with leading 1s past the normalised rank; a single-element B.
  cases.push_back(Case(
      "LayerNormalization/scale_leading_ones", "LayerNormalization",
      {RandomDouble({2, 3, 4}, 12), RandomDouble({1, 1, 4}, 13, 0.5, 1.5), RandomDouble({1}, 14)}));
  // B varying over the rows (summed from dY directly).
  cases.push_back(Case(
      "LayerNormalization/bias_per_row", "LayerNormalization",
      {RandomDouble({2, 3, 4}, 15), RandomDouble({4}, 16, 0.5, 1.5), RandomDouble({3, 1}, 17)}));
  // Mean and InvStdDev outputs in float64 enter the loss (their gradients reach X) and are
  // reused by the backward.
  GradCase stats = Case(
      "LayerNormalization/stats_outputs", "LayerNormalization",
      {RandomDouble({3, 2, 4}, 18), RandomDouble({2, 4}, 19, 0.5, 1.5), RandomDouble({2, 4}, 20)},
      {{"axis", Attribute(int64_t{1})}, {"stash_type", Attribute(int64_t{11})}});
  stats.num_outputs = 3;
  cases.push_back(stats);
  // Only the Mean output enters the loss besides Y.
  GradCase mean_only = Case("LayerNormalization/mean_output", "LayerNormalization",
                            {RandomDouble({3, 5}, 21), RandomDouble({5}, 22, 0.5, 1.5)},
                            {{"stash_type", Attribute(int64_t{11})}});
  mean_only.num_outputs = 2;
  cases.push_back(mean_only);
  // Only the statistics enter the loss: X's gradient comes from them alone.
  GradCase stats_only = Case("LayerNormalization/stats_outputs_only", "LayerNormalization",
                             {RandomDouble({2, 5}, 26), RandomDouble({5}, 27, 0.5, 1.5)},
                             {{"stash_type", Attribute(int64_t{11})}});
  stats_only.num_outputs = 3;
  stats_only.outputs = {1, 2};
  stats_only.wrt = {0};
  cases.push_back(stats_only);
  // float32 statistics (default stash_type) of a float64 X: not reused, recomputed.
  GradCase f32_stats =
      Case("LayerNormalization/float32_stash_recomputed", "LayerNormalization",
           {RandomDouble({4, 3}, 23), RandomDouble({3}, 24, 0.5, 1.5), RandomDouble({3}, 25)});
  f32_stats.num_outputs = 3;
  f32_stats.outputs = {0};
  cases.push_back(f32_stats);
}

void AddBatchNormalization(std::vector<GradCase>& cases) {
  auto inputs = [](std::vector<int64_t> x, uint64_t seed) {
    const int64_t c = x[1];
    return std::vector<Tensor>{RandomDouble(x, seed), RandomDouble({c}, seed + 1, 0.5, 1.5),
                               RandomDouble({c}, seed + 2), RandomDouble({c}, seed + 3),
                               RandomDouble({c}, seed + 4, 0.5, 1.5)};
  };
  // Training mode: batch statistics; input_mean / input_var do not reach Y.
  GradCase train = Case("BatchNormalization/training_4d", "BatchNormalization",
                        inputs({4, 3, 2, 2}, 30), {{"training_mode", Attribute(int64_t{1})}});
  train.wrt = {0, 1, 2};
  cases.push_back(train);
  GradCase train2d =
      Case("BatchNormalization/training_2d", "BatchNormalization", inputs({5, 3}, 40),
           {{"training_mode", Attribute(int64_t{1})}, {"epsilon", Attribute(1e-2f)}});
  train2d.wrt = {0, 1, 2};
  cases.push_back(train2d);
  // The running statistics enter the loss too (their gradients reach X and the inputs).
  GradCase running =
      Case("BatchNormalization/training_running_stats", "BatchNormalization", inputs({3, 2, 4}, 50),
           {{"training_mode", Attribute(int64_t{1})}, {"momentum", Attribute(0.8f)}});
  running.num_outputs = 3;
  cases.push_back(running);
  GradCase running_mean =
      Case("BatchNormalization/training_running_mean_only", "BatchNormalization",
           inputs({2, 3, 3}, 60), {{"training_mode", Attribute(int64_t{1})}});
  running_mean.num_outputs = 2;
  running_mean.wrt = {0, 1, 2, 3};
  cases.push_back(running_mean);
  GradCase running_only =
      Case("BatchNormalization/training_running_stats_only", "BatchNormalization",
           inputs({4, 2}, 65), {{"training_mode", Attribute(int64_t{1})}});
  running_only.num_outputs = 3;
  running_only.outputs = {1, 2};
  running_only.wrt = {0, 3, 4};
  cases.push_back(running_only);
  // Inference mode: fixed statistics, which get gradients too.
  cases.push_back(
      Case("BatchNormalization/inference_4d", "BatchNormalization", inputs({2, 3, 2, 3}, 70)));
  cases.push_back(Case("BatchNormalization/inference_2d", "BatchNormalization", inputs({4, 2}, 80),
                       {{"epsilon", Attribute(1e-3f)}}));
}

void AddGroupedNormalization(std::vector<GradCase>& cases) {
  cases.push_back(
      Case("InstanceNormalization/3d", "InstanceNormalization",
           {RandomDouble({2, 3, 4}, 90), RandomDouble({3}, 91, 0.5, 1.5), RandomDouble({3}, 92)}));
  cases.push_back(
      Case("InstanceNormalization/4d", "InstanceNormalization",
           {RandomDouble({2, 2, 3, 3}, 93), RandomDouble({2}, 94, 0.5, 1.5), RandomDouble({2}, 95)},
           {{"epsilon", Attribute(1e-2f)}}));
  const std::map<std::string, Attribute> two_groups = {{"num_groups", Attribute(int64_t{2})}};
  cases.push_back(
      Case("GroupNormalization/per_channel", "GroupNormalization",
           {RandomDouble({2, 4, 3}, 100), RandomDouble({4}, 101, 0.5, 1.5), RandomDouble({4}, 102)},
           two_groups));
  cases.push_back(Case(
      "GroupNormalization/per_group_opset18", "GroupNormalization",
      {RandomDouble({2, 4, 2, 2}, 103), RandomDouble({2}, 104, 0.5, 1.5), RandomDouble({2}, 105)},
      two_groups));
  cases.push_back(
      Case("GroupNormalization/scale_per_channel_bias_per_group", "GroupNormalization",
           {RandomDouble({2, 6, 2}, 106), RandomDouble({6}, 107, 0.5, 1.5), RandomDouble({3}, 108)},
           {{"num_groups", Attribute(int64_t{3})}}));
  cases.push_back(
      Case("GroupNormalization/one_group", "GroupNormalization",
           {RandomDouble({3, 4}, 109), RandomDouble({4}, 110, 0.5, 1.5), RandomDouble({4}, 111)},
           {{"num_groups", Attribute(int64_t{1})}, {"epsilon", Attribute(1e-3f)}}));
}

void AddDropout(std::vector<GradCase>& cases) {
  // No training_mode input: inference, Y = X.
  GradCase inference = Case("Dropout/inference", "Dropout",
                            {RandomDouble({3, 4}, 120), Tensor::Scalar<double>(0.3)});
  inference.wrt = {0};
  cases.push_back(inference);
  cases.push_back(Case("Dropout/data_only", "Dropout", {RandomDouble({2, 3, 2}, 121)}));
  // training_mode false fed at run time, with the mask output: DropoutGrad decides at run time.
  GradCase not_training =
      Case("Dropout/training_mode_false_with_mask", "Dropout",
           {RandomDouble({4, 3}, 122), Tensor::Scalar<double>(0.5), Bool(false)});
  not_training.num_outputs = 2;
  not_training.wrt = {0};
  cases.push_back(not_training);
  // Training with ratio 0 keeps everything.
  GradCase ratio0 = Case("Dropout/training_ratio0_with_mask", "Dropout",
                         {RandomDouble({5}, 123), Tensor::Scalar<double>(0.0), Bool(true)});
  ratio0.num_outputs = 2;
  ratio0.wrt = {0};
  cases.push_back(ratio0);
}

}  // namespace

std::vector<GradCase> NormalizationGradCases() {
  std::vector<GradCase> cases;
  AddLayerNormalization(cases);
  AddBatchNormalization(cases);
  AddGroupedNormalization(cases);
  AddDropout(cases);
  return cases;
}

}  // namespace ottr::testing
