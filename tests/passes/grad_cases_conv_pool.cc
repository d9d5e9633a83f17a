// Central-difference cases of the convolution and pooling gradient rules
// (ir/grads/conv_pool_grads.cc): every padding mode, strides, dilations, groups, 1-D to 3-D,
// ConvTranspose's output_padding/output_shape (incl. negative derived pads), ceil_mode and
// count_include_pad. Inputs are continuous random values, so MaxPool windows have no ties and
// LpPool inputs stay away from 0.
#include <string>
#include <utility>
#include <vector>

#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using Attrs = std::map<std::string, Attribute>;
using Dims = std::vector<int64_t>;

Attribute Ints(Dims v) { return Attribute(std::move(v)); }

GradCase Case(std::string name, std::string op, std::vector<ir::Tensor> inputs, Attrs attrs) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

// Random values with |x| in [0.3, 1.3) and random signs (LpPool is not differentiable at 0).
ir::Tensor AwayFromZero(Dims dims, uint64_t seed) {
  ir::Tensor t = RandomDouble(dims, seed, -1.0, 1.0);
  for (double& v : t.span<double>()) v = v < 0 ? v - 0.3 : v + 0.3;
  return t;
}

void AddConvCases(std::vector<GradCase>& cases) {
  cases.push_back(
      Case("Conv_2d_pads_bias", "Conv",
           {RandomDouble({2, 3, 5, 5}, 1), RandomDouble({4, 3, 3, 3}, 2), RandomDouble({4}, 3)},
           {{"pads", Ints({1, 1, 1, 1})}}));
  cases.push_back(
      Case("Conv_2d_strides_dilations_asymmetric_pads", "Conv",
           {RandomDouble({1, 2, 6, 7}, 4), RandomDouble({3, 2, 2, 3}, 5)},
           {{"strides", Ints({2, 1})}, {"dilations", Ints({1, 2})}, {"pads", Ints({1, 0, 0, 2})}}));
  cases.push_back(
      Case("Conv_2d_group2", "Conv",
           {RandomDouble({2, 4, 5, 4}, 6), RandomDouble({6, 2, 3, 3}, 7), RandomDouble({6}, 8)},
           {{"group", Attribute(int64_t{2})}, {"kernel_shape", Ints({3, 3})}}));
  cases.push_back(Case("Conv_2d_depthwise_same_upper_stride2", "Conv",
                       {RandomDouble({1, 3, 5, 6}, 9), RandomDouble({3, 1, 3, 3}, 10)},
                       {{"group", Attribute(int64_t{3})},
                        {"auto_pad", Attribute("SAME_UPPER")},
                        {"strides", Ints({2, 2})}}));
  cases.push_back(
      Case("Conv_1d_same_lower", "Conv",
           {RandomDouble({2, 2, 7}, 11), RandomDouble({3, 2, 4}, 12), RandomDouble({3}, 13)},
           {{"auto_pad", Attribute("SAME_LOWER")}}));
  cases.push_back(Case(
      "Conv_3d_pads_bias", "Conv",
      {RandomDouble({1, 2, 4, 3, 4}, 14), RandomDouble({2, 2, 2, 2, 3}, 15), RandomDouble({2}, 16)},
      {{"pads", Ints({1, 0, 1, 0, 1, 1})}}));
  cases.push_back(Case(
      "Conv_pointwise", "Conv",
      {RandomDouble({2, 3, 3, 4}, 17), RandomDouble({5, 3, 1, 1}, 18), RandomDouble({5}, 19)}, {}));
  // Stride 3 leaves the last input row and column outside every window.
  cases.push_back(Case("Conv_valid_stride3_unused_tail", "Conv",
                       {RandomDouble({2, 1, 8, 8}, 20), RandomDouble({2, 1, 3, 3}, 21)},
                       {{"auto_pad", Attribute("VALID")}, {"strides", Ints({3, 3})}}));
  GradCase only_w =
      Case("Conv_weight_only", "Conv",
           {RandomDouble({3, 2, 4, 4}, 22), RandomDouble({2, 2, 3, 3}, 23), RandomDouble({2}, 24)},
           {{"pads", Ints({0, 1, 0, 1})}});
  only_w.wrt = {1};
  cases.push_back(only_w);
}

void AddConvTransposeCases(std::vector<GradCase>& cases) {
  cases.push_back(
      Case("ConvTranspose_2d_stride2_bias", "ConvTranspose",
           {RandomDouble({2, 3, 3, 3}, 31), RandomDouble({3, 2, 3, 3}, 32), RandomDouble({2}, 33)},
           {{"strides", Ints({2, 2})}}));
  cases.push_back(Case(
      "ConvTranspose_output_padding_pads", "ConvTranspose",
      {RandomDouble({1, 2, 3, 4}, 34), RandomDouble({2, 3, 3, 3}, 35)},
      {{"strides", Ints({2, 3})}, {"pads", Ints({1, 0, 1, 1})}, {"output_padding", Ints({1, 2})}}));
  cases.push_back(
      Case("ConvTranspose_group2_dilations", "ConvTranspose",
           {RandomDouble({1, 4, 3, 3}, 36), RandomDouble({4, 1, 2, 2}, 37), RandomDouble({2}, 38)},
           {{"group", Attribute(int64_t{2})}, {"dilations", Ints({2, 2})}}));
  // output_shape 9 > the natural 7: derived pads -1, -1 (a Slice of dY).
  cases.push_back(Case("ConvTranspose_output_shape_negative_pads", "ConvTranspose",
                       {RandomDouble({1, 2, 3, 3}, 39), RandomDouble({2, 2, 3, 3}, 40)},
                       {{"strides", Ints({2, 2})}, {"output_shape", Ints({9, 8})}}));
  cases.push_back(
      Case("ConvTranspose_output_shape_positive_pads", "ConvTranspose",
           {RandomDouble({1, 2, 3, 3}, 41), RandomDouble({2, 1, 3, 3}, 42), RandomDouble({1}, 43)},
           {{"strides", Ints({2, 2})}, {"output_shape", Ints({1, 1, 6, 5})}}));
  cases.push_back(Case("ConvTranspose_same_upper", "ConvTranspose",
                       {RandomDouble({2, 1, 3, 2}, 44), RandomDouble({1, 2, 3, 3}, 45)},
                       {{"strides", Ints({2, 2})}, {"auto_pad", Attribute("SAME_UPPER")}}));
  cases.push_back(Case("ConvTranspose_same_lower_1d", "ConvTranspose",
                       {RandomDouble({2, 2, 4}, 46), RandomDouble({2, 3, 2}, 47)},
                       {{"strides", Ints({3})}, {"auto_pad", Attribute("SAME_LOWER")}}));
  // output_padding >= stride: the trailing outputs get only the bias (a Slice of dY).
  cases.push_back(
      Case("ConvTranspose_1d_output_padding_past_stride", "ConvTranspose",
           {RandomDouble({1, 2, 4}, 48), RandomDouble({2, 3, 3}, 49), RandomDouble({3}, 50)},
           {{"output_padding", Ints({2})}}));
  cases.push_back(Case(
      "ConvTranspose_3d", "ConvTranspose",
      {RandomDouble({1, 2, 2, 3, 2}, 51), RandomDouble({2, 2, 2, 2, 2}, 52), RandomDouble({2}, 53)},
      {{"strides", Ints({1, 2, 2})}, {"pads", Ints({0, 1, 0, 1, 0, 1})}}));
  cases.push_back(Case("ConvTranspose_pointwise", "ConvTranspose",
                       {RandomDouble({2, 3, 3, 2}, 54), RandomDouble({3, 4, 1, 1}, 55)}, {}));
}

void AddPoolCases(std::vector<GradCase>& cases) {
  cases.push_back(Case("MaxPool_2x2_stride2", "MaxPool", {RandomDouble({2, 3, 4, 4}, 61)},
                       {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}));
  cases.push_back(Case("MaxPool_overlapping_pads", "MaxPool", {RandomDouble({1, 2, 5, 5}, 62)},
                       {{"kernel_shape", Ints({3, 3})}, {"pads", Ints({1, 1, 1, 1})}}));
  cases.push_back(Case("MaxPool_ceil_dilations", "MaxPool", {RandomDouble({1, 2, 7, 6}, 63)},
                       {{"kernel_shape", Ints({2, 2})},
                        {"strides", Ints({2, 2})},
                        {"dilations", Ints({2, 1})},
                        {"ceil_mode", Attribute(int64_t{1})}}));
  cases.push_back(Case("MaxPool_1d_same_upper", "MaxPool", {RandomDouble({2, 2, 7}, 64)},
                       {{"kernel_shape", Ints({3})},
                        {"strides", Ints({2})},
                        {"auto_pad", Attribute("SAME_UPPER")}}));
  cases.push_back(Case("MaxPool_3d", "MaxPool", {RandomDouble({1, 2, 4, 3, 4}, 65)},
                       {{"kernel_shape", Ints({2, 2, 2})}, {"pads", Ints({1, 0, 0, 0, 1, 1})}}));
  GradCase indices =
      Case("MaxPool_with_indices_storage_order", "MaxPool", {RandomDouble({2, 2, 4, 5}, 66)},
           {{"kernel_shape", Ints({2, 3})},
            {"strides", Ints({1, 2})},
            {"storage_order", Attribute(int64_t{1})}});
  indices.num_outputs = 2;
  cases.push_back(indices);

  for (int include = 0; include < 2; ++include) {
    const std::string suffix = include ? "_count_include_pad" : "";
    cases.push_back(Case("AveragePool_pads" + suffix, "AveragePool",
                         {RandomDouble({2, 2, 5, 5}, 71)},
                         {{"kernel_shape", Ints({3, 3})},
                          {"strides", Ints({2, 2})},
                          {"pads", Ints({1, 1, 1, 1})},
                          {"count_include_pad", Attribute(int64_t{include})}}));
    cases.push_back(Case("AveragePool_ceil_dilations" + suffix, "AveragePool",
                         {RandomDouble({1, 2, 7, 6}, 72)},
                         {{"kernel_shape", Ints({2, 3})},
                          {"strides", Ints({2, 2})},
                          {"dilations", Ints({2, 1})},
                          {"pads", Ints({0, 1, 1, 0})},
                          {"ceil_mode", Attribute(int64_t{1})},
                          {"count_include_pad", Attribute(int64_t{include})}}));
  }
  cases.push_back(Case("AveragePool_1d_same_lower", "AveragePool", {RandomDouble({2, 3, 6}, 73)},
                       {{"kernel_shape", Ints({3})},
                        {"strides", Ints({2})},
                        {"auto_pad", Attribute("SAME_LOWER")}}));
  cases.push_back(Case("AveragePool_3d", "AveragePool", {RandomDouble({1, 1, 4, 4, 3}, 74)},
                       {{"kernel_shape", Ints({2, 2, 2})}, {"strides", Ints({2, 1, 1})}}));

  for (int64_t p : {1, 2, 3}) {
    cases.push_back(Case("LpPool_p" + std::to_string(p), "LpPool",
                         {AwayFromZero({2, 2, 5, 4}, 80 + p)},
                         {{"kernel_shape", Ints({2, 2})},
                          {"strides", Ints({1, 2})},
                          {"pads", Ints({1, 0, 0, 0})},
                          {"p", Attribute(p)}}));
  }
  cases.push_back(Case("LpPool_1d_ceil_dilations", "LpPool", {AwayFromZero({1, 2, 8}, 84)},
                       {{"kernel_shape", Ints({3})},
                        {"strides", Ints({2})},
                        {"dilations", Ints({2})},
                        {"ceil_mode", Attribute(int64_t{1})}}));

  cases.push_back(
      Case("GlobalAveragePool_2d", "GlobalAveragePool", {RandomDouble({2, 3, 4, 5}, 91)}, {}));
  cases.push_back(
      Case("GlobalAveragePool_1d", "GlobalAveragePool", {RandomDouble({2, 3, 5}, 92)}, {}));
  cases.push_back(
      Case("GlobalAveragePool_no_spatial", "GlobalAveragePool", {RandomDouble({3, 4}, 93)}, {}));
  cases.push_back(Case("GlobalMaxPool_2d", "GlobalMaxPool", {RandomDouble({2, 3, 4, 4}, 94)}, {}));
  cases.push_back(
      Case("GlobalMaxPool_3d", "GlobalMaxPool", {RandomDouble({1, 2, 2, 3, 2}, 95)}, {}));
  cases.push_back(
      Case("GlobalMaxPool_no_spatial", "GlobalMaxPool", {RandomDouble({3, 4}, 96)}, {}));
  for (int64_t p : {2, 3}) {
    cases.push_back(Case("GlobalLpPool_p" + std::to_string(p), "GlobalLpPool",
                         {AwayFromZero({2, 2, 3, 3}, 97 + p)}, {{"p", Attribute(p)}}));
  }
  cases.push_back(Case("GlobalLpPool_no_spatial", "GlobalLpPool", {AwayFromZero({3, 4}, 101)},
                       {{"p", Attribute(int64_t{3})}}));
}

}  // namespace

std::vector<GradCase> ConvPoolGradCases() {
  std::vector<GradCase> cases;
  AddConvCases(cases);
  AddConvTransposeCases(cases);
  AddPoolCases(cases);
  return cases;
}

}  // namespace ottr::testing
