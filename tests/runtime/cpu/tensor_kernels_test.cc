// Tests of the layout ops (tensor_ops.cc / tensor_kernels.cc): static types from constant inputs,
// symbolic dims, values against independent loops, other dtypes, empty tensors and errors.
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"
#include "tests/runtime/cpu/tensor_op_test_util.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Dim;
using ir::DType;
using ir::Shape;
using ir::Tensor;
using ir::TensorType;

TensorType F32(Shape s) { return TensorType(DType::kFloat32, std::move(s)); }

Tensor RandomInt32(std::vector<int64_t> dims, uint64_t seed) {
  Tensor src = RandomInt64(dims, seed, -1000, 1000);
  Tensor t(DType::kInt32, dims);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(src.data<int64_t>()[i]);
  return t;
}

TEST(TensorKernelsTest, ReshapeWithConstantShapeIsStaticAndAView) {
  Tensor x = RandomFloat({2, 3, 4}, 1);
  auto r = RunNode("Reshape", {In(x), Const(I64({0, -1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], F32({2, 12}));
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(r->outputs[0].raw_data(), x.raw_data());  // no copy
}

TEST(TensorKernelsTest, ReshapeResolvesSymbolicDims) {
  const TensorType x = F32({Dim::Symbol("N"), 3, 4});
  auto t = InferNode("Reshape", {Declared(Tensor(), x), Const(I64({0, -1}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], F32({Dim::Symbol("N"), 12}));
  t = InferNode("Reshape", {Declared(Tensor(), x), Const(I64({-1, 12}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], F32({Dim::Symbol("N"), 12}));
  t = InferNode("Reshape", {Declared(Tensor(), x), Const(I64({-1, 6}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], F32({Dim(), 6}));
  // Non-constant shape of static length: rank known, dims not.
  t = InferNode("Reshape", {Declared(Tensor(), x), Declared(Tensor(), TensorType(DType::kInt64, Shape{3}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], F32({Dim(), Dim(), Dim()}));
  // And it runs with those types.
  auto r = RunNode("Reshape", {Declared(RandomFloat({5, 3, 4}, 2), x), In(I64({2, -1, 5}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{2, 6, 5}));
}

TEST(TensorKernelsTest, ReshapeAllowZeroAndErrors) {
  auto r = RunNode("Reshape", {In(Tensor(DType::kFloat32, {0, 3})), Const(I64({3, 0}))},
                   {{"allowzero", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 0}));
  // allowzero=0: the 0 copies the input's dim.
  r = RunNode("Reshape", {In(RandomFloat({2, 3, 4}, 3)), In(I64({4, 0, -1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_FALSE(RunNode("Reshape", {In(RandomFloat({2, 3, 4}, 3)), In(I64({5, -1}))}).ok());
  EXPECT_FALSE(RunNode("Reshape", {In(RandomFloat({2, 3, 4}, 3)), In(I64({-1, -1}))}).ok());
  EXPECT_FALSE(RunNode("Reshape", {In(RandomFloat({2, 3, 4}, 3)), Const(I64({7, 2}))}).ok());
}

TEST(TensorKernelsTest, FlattenAxes) {
  Tensor x = RandomFloat({2, 3, 4, 5}, 4);
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> cases = {
      {0, {1, 120}}, {1, {2, 60}}, {2, {6, 20}}, {4, {120, 1}}, {-1, {24, 5}}, {-4, {1, 120}}};
  for (const auto& [axis, dims] : cases) {
    auto r = RunNode("Flatten", {In(x)}, {{"axis", Attribute(axis)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->outputs[0].dims(), dims) << "axis " << axis;
    EXPECT_EQ(r->types[0], F32(ir::ShapeFromDims(dims)));
    EXPECT_TRUE(r->outputs[0].Reshaped(x.dims())->BitwiseEquals(x));
  }
  auto t = InferNode("Flatten", {Declared(Tensor(), F32({Dim::Symbol("N"), 3, 4}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0], F32({Dim::Symbol("N"), 12}));
  EXPECT_FALSE(RunNode("Flatten", {In(x)}, {{"axis", Attribute(int64_t{5})}}).ok());
}

TEST(TensorKernelsTest, TransposeMatchesIndexFormula) {
  Tensor x = RandomInt32({2, 3, 4, 5}, 5);
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  auto r = RunNode("Transpose", {In(x)}, {{"perm", Attribute(perm)}});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{4, 2, 5, 3}));
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t d = 0; d < 3; ++d) {
          // y[a,b,c,d] = x[b,d,a,c]
          ASSERT_EQ(At<int32_t>(y, Offset(y.dims(), {a, b, c, d})),
                    At<int32_t>(x, Offset(x.dims(), {b, d, a, c})));
        }
  // Default perm reverses the axes; symbolic dims move with them.
  auto t = InferNode("Transpose", {Declared(Tensor(), F32({Dim::Symbol("N"), 3, 7}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0], F32({7, 3, Dim::Symbol("N")}));
  EXPECT_FALSE(RunNode("Transpose", {In(x)}, {{"perm", Attribute(std::vector<int64_t>{0, 0, 1, 2})}}).ok());
}

TEST(TensorKernelsTest, ConcatNegativeAxisEmptyInputAndErrors) {
  Tensor a = RandomInt32({2, 3}, 6), b = Tensor(DType::kInt32, {2, 0}), c = RandomInt32({2, 2}, 7);
  auto r = RunNode("Concat", {In(a), In(b), In(c)}, {{"axis", Attribute(int64_t{-1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 5}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(At<int32_t>(y, i * 5 + j), At<int32_t>(a, i * 3 + j));
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(At<int32_t>(y, i * 5 + 3 + j), At<int32_t>(c, i * 2 + j));
  }
  EXPECT_EQ(r->types[0], TensorType(DType::kInt32, Shape{2, 5}));
  auto t = InferNode("Concat", {Declared(Tensor(), F32({Dim::Symbol("N"), 3})),
                                Declared(Tensor(), F32({Dim::Symbol("N"), 4}))},
                     {{"axis", Attribute(int64_t{1})}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0], F32({Dim::Symbol("N"), 7}));
  EXPECT_FALSE(RunNode("Concat", {In(a), In(RandomInt32({3, 3}, 8))}, {{"axis", Attribute(int64_t{1})}}).ok());
  EXPECT_FALSE(RunNode("Concat", {In(a), In(RandomFloat({2, 3}, 8))}, {{"axis", Attribute(int64_t{0})}}).ok());
}

TEST(TensorKernelsTest, SplitSizesNumOutputsAndEqualParts) {
  Tensor x = RandomFloat({7, 2}, 9);
  // num_outputs=3 on 7 rows: ceil(7/3)=3, 3, 1.
  auto r = RunNode("Split", {In(x)}, {{"num_outputs", Attribute(int64_t{3})}}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r->outputs[2].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r->types[2], F32({1, 2}));
  EXPECT_EQ(At<float>(r->outputs[2], 1), At<float>(x, 13));
  EXPECT_EQ(At<float>(r->outputs[1], 0), At<float>(x, 6));
  // Explicit sizes on axis 1 of a float16 tensor.
  Tensor h(DType::kFloat16, {2, 5});
  for (int64_t i = 0; i < 10; ++i) h.data<ir::Half>()[i] = ir::FloatToHalf(static_cast<float>(i) + 0.5f);
  r = RunNode("Split", {In(h), Const(I64({1, 4}))}, {{"axis", Attribute(int64_t{-1})}}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[1], TensorType(DType::kFloat16, Shape{2, 4}));
  EXPECT_EQ(Values(r->outputs[1]), (std::vector<double>{1.5, 2.5, 3.5, 4.5, 6.5, 7.5, 8.5, 9.5}));
  // No split and no num_outputs: equal parts, which must divide.
  r = RunNode("Split", {In(RandomFloat({6}, 10))}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[1].dims(), (std::vector<int64_t>{2}));
  EXPECT_FALSE(RunNode("Split", {In(RandomFloat({7}, 10))}, {}, 3).ok());
  EXPECT_FALSE(RunNode("Split", {In(x), In(I64({3, 3}))}, {}, 2).ok());  // sums to 6, not 7
}

// Reference slicing of a 3-D tensor, written with the spec's clamping rules per axis.
std::vector<int64_t> SliceIndices(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  std::vector<int64_t> idx;
  if (step > 0) {
    start = std::max<int64_t>(0, std::min(start, dim));
    end = std::max<int64_t>(0, std::min(end, dim));
    for (int64_t i = start; i < end; i += step) idx.push_back(i);
  } else {
    start = std::max<int64_t>(0, std::min(start, dim - 1));
    end = std::max<int64_t>(-1, std::min(end, dim - 1));
    for (int64_t i = start; i > end; i += step) idx.push_back(i);
  }
  return idx;
}

TEST(TensorKernelsTest, SliceNegativeStepsClampingAndStaticTypes) {
  Tensor x = RandomFloat({5, 6, 7}, 11);
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  // axes (2, 0, -2): starts/ends/steps per axis, including out-of-range values.
  const std::vector<int64_t> starts = {-1, 100, 1}, ends = {-kMax, -100, kMax}, steps = {-2, -1, 2};
  auto r = RunNode("Slice", {In(x), Const(I64(starts)), Const(I64(ends)), Const(I64({2, 0, -2})),
                             Const(I64(steps))});
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<int64_t> i0 = SliceIndices(5, 100, -100, -1);
  const std::vector<int64_t> i1 = SliceIndices(6, 1, kMax, 2);
  const std::vector<int64_t> i2 = SliceIndices(7, -1, -kMax, -2);
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{static_cast<int64_t>(i0.size()),
                                            static_cast<int64_t>(i1.size()),
                                            static_cast<int64_t>(i2.size())}));
  EXPECT_EQ(r->types[0], F32(ir::ShapeFromDims(y.dims())));
  for (size_t a = 0; a < i0.size(); ++a)
    for (size_t b = 0; b < i1.size(); ++b)
      for (size_t c = 0; c < i2.size(); ++c)
        ASSERT_EQ(At<float>(y, Offset(y.dims(), {int64_t(a), int64_t(b), int64_t(c)})),
                  At<float>(x, Offset(x.dims(), {i0[a], i1[b], i2[c]})));
  // Empty result and default axes/steps.
  r = RunNode("Slice", {In(x), In(I64({3})), In(I64({1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{0, 6, 7}));
  // Non-constant starts: only the sliced axis is unknown; symbolic dims elsewhere survive.
  auto t = InferNode("Slice", {Declared(Tensor(), F32({Dim::Symbol("N"), 6})), In(I64({1})),
                               In(I64({3})), Const(I64({1}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], F32({Dim::Symbol("N"), Dim()}));
  EXPECT_FALSE(RunNode("Slice", {In(x), In(I64({0})), In(I64({1})), In(I64({0})), In(I64({0}))}).ok());
  EXPECT_FALSE(RunNode("Slice", {In(x), In(I64({0, 0})), In(I64({1}))}).ok());
}

TEST(TensorKernelsTest, SqueezeAndUnsqueeze) {
  Tensor x = RandomFloat({1, 3, 1, 2}, 12);
  auto r = RunNode("Squeeze", {In(x)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r->types[0], F32({3, 2}));
  r = RunNode("Squeeze", {In(x), Const(I64({-2}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_FALSE(RunNode("Squeeze", {In(x), In(I64({1}))}).ok());  // size 3
  // Squeeze without axes on a symbolic dim: the rank cannot be known.
  auto t = InferNode("Squeeze", {Declared(Tensor(), F32({Dim::Symbol("N"), 1}))});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)[0].has_rank());
  r = RunNode("Unsqueeze", {In(RandomFloat({3, 2}, 13)), Const(I64({-1, 0}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{1, 3, 2, 1}));
  EXPECT_EQ(r->types[0], F32({1, 3, 2, 1}));
  EXPECT_FALSE(RunNode("Unsqueeze", {In(RandomFloat({3}, 13)), In(I64({0, 0}))}).ok());
  EXPECT_FALSE(RunNode("Unsqueeze", {In(RandomFloat({3}, 13)), In(I64({3}))}).ok());
}

TEST(TensorKernelsTest, ExpandBroadcastsBothWays) {
  Tensor x = RandomInt32({3, 1}, 14);
  auto r = RunNode("Expand", {In(x), Const(I64({2, 1, 4}))});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r->types[0], TensorType(DType::kInt32, Shape{2, 3, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) ASSERT_EQ(At<int32_t>(y, (i * 3 + j) * 4 + k), At<int32_t>(x, j));
  r = RunNode("Expand", {In(x), In(I64({1}))});  // shape smaller than the input
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(RunNode("Expand", {In(x), In(I64({2, 4}))}).ok());
}

TEST(TensorKernelsTest, IdentityShapeAndSize) {
  Tensor x = RandomFloat({2, 3, 4, 5}, 15);
  auto r = RunNode("Identity", {In(x)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outputs[0].BitwiseEquals(x));
  r = RunNode("Shape", {In(x)}, {{"start", Attribute(int64_t{1})}, {"end", Attribute(int64_t{-1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r->types[0], TensorType(DType::kInt64, Shape{2}));
  r = RunNode("Shape", {In(x)}, {{"start", Attribute(int64_t{3})}, {"end", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].num_elements(), 0);
  r = RunNode("Shape", {In(x)}, {{"start", Attribute(int64_t{-10})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{2, 3, 4, 5}));
  r = RunNode("Size", {In(x)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].GetAsInt64(0), 120);
  EXPECT_EQ(r->types[0], TensorType(DType::kInt64, Shape{}));
}

TEST(TensorKernelsTest, PadModesOnOneAxis) {
  Tensor x = Vec<float>({3}, {1, 2, 3});
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"reflect", {2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2}},
      {"wrap", {2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2}},
      {"edge", {1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3}},
      {"constant", {7, 7, 7, 7, 7, 1, 2, 3, 7, 7, 7, 7, 7}}};
  for (const auto& [mode, want] : cases) {
    auto r = RunNode("Pad", {In(x), Const(I64({5, 5})), In(Tensor::Scalar<float>(7))},
                     {{"mode", Attribute(mode)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(r->outputs[0]), want) << mode;
    EXPECT_EQ(r->types[0], F32({13}));
  }
}

TEST(TensorKernelsTest, PadAxesNegativePadsAndDtypes) {
  // int64 data, pads on axis -1 only: crop 1 at the front, add 2 at the back (reflect).
  Tensor x = Vec<int64_t>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto r = RunNode("Pad", {In(x), Const(I64({-1, 2})), Omitted(), Const(I64({-1}))},
                   {{"mode", Attribute("reflect")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kInt64, Shape{2, 5}));
  // Cropped rows [2,3,4] and [6,7,8], reflected: 2 3 4 3 2 / 6 7 8 7 6.
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{2, 3, 4, 3, 2, 6, 7, 8, 7, 6}));
  // 2-D constant pad with default value 0 on a bool tensor.
  Tensor b = Vec<bool>({1, 2}, {true, true});
  r = RunNode("Pad", {In(b), Const(I64({1, 0, 0, 1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{0, 0, 0, 1, 1, 0}));
  // Edge padding of an empty axis has nothing to copy.
  EXPECT_FALSE(RunNode("Pad", {In(Tensor(DType::kFloat32, {0})), In(I64({1, 1}))},
                       {{"mode", Attribute("edge")}}).ok());
  EXPECT_FALSE(RunNode("Pad", {In(x), In(I64({1, 1}))}).ok());  // 2 values for rank 2
  EXPECT_FALSE(RunNode("Pad", {In(x), In(I64({0, -5, 0, 0}))}).ok());
  EXPECT_FALSE(RunNode("Pad", {In(x), In(I64({0, 0, 0, 0}))}, {{"mode", Attribute("mirror")}}).ok());
}

TEST(TensorKernelsTest, TileRepeatsEveryAxis) {
  Tensor x = RandomInt32({2, 3}, 16);
  auto r = RunNode("Tile", {In(x), Const(I64({3, 2}))});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(r->types[0], TensorType(DType::kInt32, Shape{6, 6}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j) ASSERT_EQ(At<int32_t>(y, i * 6 + j), At<int32_t>(x, (i % 2) * 3 + j % 3));
  r = RunNode("Tile", {In(x), In(I64({0, 1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{0, 3}));
  EXPECT_FALSE(RunNode("Tile", {In(x), In(I64({2}))}).ok());
}

}  // namespace
}  // namespace ottr::testing
