// Central-difference cases of the tensor family's gradient rules (ir/grads/tensor_grads.cc).
// Integer inputs (shapes, axes, indices, pads...) are given as int64 tensors; float inputs are
// random float64.
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>({n}, v);
}

Tensor X(std::vector<int64_t> dims, uint64_t seed) { return RandomDouble(std::move(dims), seed); }

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

void AddLayoutCases(std::vector<GradCase>& v) {
  v.push_back(Case("Reshape/minus_one", "Reshape", {X({2, 3, 4}, 1), I64({4, -1})}));
  v.push_back(Case("Reshape/copy_dim", "Reshape", {X({2, 3, 4}, 2), I64({0, 12})}));
  v.push_back(Case("Flatten/axis2", "Flatten", {X({2, 3, 4}, 3)}, {{"axis", Attribute(2)}}));
  v.push_back(Case("Flatten/axis0", "Flatten", {X({2, 3}, 4)}, {{"axis", Attribute(0)}}));
  v.push_back(
      Case("Flatten/negative_axis", "Flatten", {X({2, 3, 2}, 5)}, {{"axis", Attribute(-1)}}));
  v.push_back(Case("Squeeze/axes", "Squeeze", {X({2, 1, 3, 1}, 6), I64({-1, 1})}));
  v.push_back(Case("Squeeze/all", "Squeeze", {X({1, 3, 1, 2}, 7)}));
  v.push_back(Case("Unsqueeze/axes", "Unsqueeze", {X({2, 3}, 8), I64({0, -1})}));
  v.push_back(Case("Identity/basic", "Identity", {X({3, 4}, 9)}));
  v.push_back(Case("Transpose/default", "Transpose", {X({2, 3, 4}, 10)}));
  v.push_back(Case("Transpose/perm", "Transpose", {X({2, 3, 4}, 11)},
                   {{"perm", Attribute(std::vector<int64_t>{1, 2, 0})}}));
  v.push_back(Case("Expand/broadcast_dims", "Expand", {X({3, 1}, 12), I64({2, 3, 4})}));
  v.push_back(Case("Expand/lower_target_rank", "Expand", {X({2, 1, 4}, 13), I64({3, 1})}));
  v.push_back(Case("Tile/rows", "Tile", {X({2, 3}, 14), I64({2, 1})}));
  v.push_back(Case("Tile/all_axes", "Tile", {X({2, 1, 3}, 15), I64({1, 3, 2})}));
}

void AddConcatSplitCases(std::vector<GradCase>& v) {
  v.push_back(Case("Concat/axis1", "Concat", {X({2, 1, 3}, 20), X({2, 2, 3}, 21), X({2, 3, 3}, 22)},
                   {{"axis", Attribute(1)}}));
  v.push_back(Case("Concat/negative_axis", "Concat", {X({2, 3}, 23), X({2, 1}, 24)},
                   {{"axis", Attribute(-1)}}));
  v.push_back(Case("Concat/single_input", "Concat", {X({2, 3}, 25)}, {{"axis", Attribute(0)}}));
  {
    GradCase c =
        Case("Split/sizes", "Split", {X({2, 4, 3}, 26), I64({1, 3})}, {{"axis", Attribute(1)}});
    c.num_outputs = 2;
    v.push_back(c);
  }
  {
    GradCase c =
        Case("Split/num_outputs", "Split", {X({7, 2}, 27)}, {{"num_outputs", Attribute(3)}});
    c.num_outputs = 3;
    v.push_back(c);
  }
  {
    // Only outputs 0 and 2 enter the loss: output 1's gradient is zeros.
    GradCase c = Case("Split/unused_output", "Split", {X({2, 6}, 28)}, {{"axis", Attribute(-1)}});
    c.num_outputs = 3;
    c.outputs = {0, 2};
    v.push_back(c);
  }
}

void AddSliceCases(std::vector<GradCase>& v) {
  v.push_back(Case("Slice/step1", "Slice", {X({4, 5}, 30), I64({1, 0}), I64({3, 4})}));
  v.push_back(Case("Slice/steps_axes", "Slice",
                   {X({5, 6, 3}, 31), I64({0, 1}), I64({6, 100}), I64({-2, 0}), I64({2, 2})}));
  v.push_back(Case("Slice/negative_step", "Slice",
                   {X({4, 6}, 32), I64({-1}), I64({-100}), I64({1}), I64({-1})}));
  v.push_back(Case("Slice/negative_step2", "Slice",
                   {X({7, 3}, 33), I64({5, 2}), I64({0, 0}), I64({0, 1}), I64({-2, -1})}));
  v.push_back(Case("Slice/empty", "Slice", {X({3, 4}, 34), I64({2}), I64({2}), I64({1})}));
}

void AddPadCases(std::vector<GradCase>& v) {
  v.push_back(Case("Pad/constant", "Pad", {X({2, 3}, 40), I64({1, 0, 2, 1})}));
  v.push_back(Case("Pad/constant_value", "Pad",
                   {X({2, 3}, 41), I64({0, 2, 1, 0}), Tensor::Scalar<double>(0.5)},
                   {{"mode", Attribute("constant")}}));
  v.push_back(Case("Pad/crop", "Pad", {X({4, 5}, 42), I64({-1, 2, 1, -2})}));
  v.push_back(
      Case("Pad/axes", "Pad", {X({2, 3, 4}, 43), I64({1, 2, 0, 1}), Tensor(), I64({-1, 0})}));
  v.push_back(Case("Pad/reflect", "Pad", {X({3, 4}, 44), I64({2, 3, 1, 2})},
                   {{"mode", Attribute("reflect")}}));
  v.push_back(
      Case("Pad/edge", "Pad", {X({3, 2}, 45), I64({2, 1, 1, 3})}, {{"mode", Attribute("edge")}}));
  v.push_back(
      Case("Pad/wrap", "Pad", {X({2, 3}, 46), I64({1, 4, 3, 2})}, {{"mode", Attribute("wrap")}}));
  v.push_back(Case("Pad/reflect_crop_axes", "Pad",
                   {X({5, 4}, 47), I64({-1, 2}), Tensor(), I64({1})},
                   {{"mode", Attribute("reflect")}}));
}

void AddIndexCases(std::vector<GradCase>& v) {
  v.push_back(Case("Gather/axis0_repeated", "Gather",
                   {X({5, 3}, 50), Tensor::FromVector<int64_t>({4}, {4, 0, 4, -1})}));
  v.push_back(Case("Gather/axis1_2d_indices", "Gather",
                   {X({2, 4, 3}, 51), Tensor::FromVector<int64_t>({2, 2}, {1, -1, 1, 0})},
                   {{"axis", Attribute(1)}}));
  v.push_back(Case("Gather/scalar_index_int32", "Gather",
                   {X({3, 4}, 52), Tensor::Scalar<int32_t>(2)}, {{"axis", Attribute(-1)}}));
  v.push_back(
      Case("GatherElements/axis0", "GatherElements",
           {X({3, 2}, 53), Tensor::FromVector<int64_t>({4, 2}, {0, 2, 2, 2, -1, 0, 1, 1})}));
  v.push_back(Case("GatherElements/negative_axis", "GatherElements",
                   {X({2, 4}, 54), Tensor::FromVector<int64_t>({2, 3}, {3, 0, 3, 1, 1, -4})},
                   {{"axis", Attribute(-1)}}));
  // Distinct indices along the axis (with duplicates "none" has no defined winner).
  v.push_back(
      Case("ScatterElements/none", "ScatterElements",
           {X({4, 3}, 55), Tensor::FromVector<int64_t>({2, 3}, {1, 0, 3, 3, 2, -4}), X({2, 3}, 56)},
           {{"axis", Attribute(0)}}));
  v.push_back(
      Case("ScatterElements/add_repeated", "ScatterElements",
           {X({2, 4}, 57), Tensor::FromVector<int64_t>({2, 3}, {1, 1, 3, 0, -1, 0}), X({2, 3}, 58)},
           {{"axis", Attribute(1)}, {"reduction", Attribute("add")}}));
  v.push_back(Case("CumSum/axis0", "CumSum", {X({4, 3}, 60), Tensor::Scalar<int64_t>(0)}));
  v.push_back(Case("CumSum/exclusive", "CumSum", {X({2, 5}, 61), Tensor::Scalar<int32_t>(-1)},
                   {{"exclusive", Attribute(1)}}));
  v.push_back(Case("CumSum/reverse", "CumSum", {X({3, 4}, 62), Tensor::Scalar<int64_t>(1)},
                   {{"reverse", Attribute(1)}}));
  v.push_back(Case("CumSum/reverse_exclusive", "CumSum",
                   {X({4, 2, 3}, 63), Tensor::Scalar<int64_t>(0)},
                   {{"reverse", Attribute(1)}, {"exclusive", Attribute(1)}}));
  v.push_back(Case("Trilu/upper_default", "Trilu", {X({4, 5}, 64)}));
  v.push_back(Case("Trilu/lower_k", "Trilu", {X({2, 4, 3}, 65), Tensor::Scalar<int64_t>(-1)},
                   {{"upper", Attribute(0)}}));
  v.push_back(Case("Trilu/upper_k", "Trilu", {X({3, 5}, 66), Tensor::Scalar<int64_t>(2)}));
}

}  // namespace

std::vector<GradCase> TensorGradCases() {
  std::vector<GradCase> v;
  AddLayoutCases(v);
  AddConcatSplitCases(v);
  AddSliceCases(v);
  AddPadCases(v);
  AddIndexCases(v);
  return v;
}

}  // namespace ottr::testing
