// Tests of the indexing and generator ops (tensor_index_ops.cc / tensor_index_kernels.cc).
#include <cstdint>

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

TEST(TensorIndexKernelsTest, GatherAxisNegativeAndInt32Indices) {
  Tensor x = RandomFloat({3, 4, 2}, 31);
  Tensor idx = Vec<int32_t>({2, 2}, {-1, 0, 2, -4});
  auto r = RunNode("Gather", {In(x), In(idx)}, {{"axis", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = r->outputs[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{3, 2, 2, 2}));
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{3, 2, 2, 2}));
  const int64_t wrapped[4] = {3, 0, 2, 0};
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t c = 0; c < 2; ++c)
        ASSERT_EQ(At<float>(y, (a * 4 + j) * 2 + c), At<float>(x, Offset(x.dims(), {a, wrapped[j], c})));
  // Scalar indices drop the axis; symbolic dims pass through.
  auto t = InferNode("Gather", {Declared(Tensor(), TensorType(DType::kFloat32, Shape{Dim::Symbol("V"), 8})),
                                Declared(Tensor(), TensorType(DType::kInt64, Shape{Dim::Symbol("B"), 5}))});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0], TensorType(DType::kFloat32, Shape{Dim::Symbol("B"), 5, 8}));
  r = RunNode("Gather", {In(x), In(Tensor::Scalar<int64_t>(2))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_FALSE(RunNode("Gather", {In(x), In(I64({3}))}).ok());
  EXPECT_FALSE(RunNode("Gather", {In(x), In(I64({-4}))}).ok());
  EXPECT_FALSE(RunNode("Gather", {In(x), In(Vec<float>({1}, {0}))}).ok());
}

TEST(TensorIndexKernelsTest, GatherElementsAndScatterElements) {
  Tensor x = Vec<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor idx = Vec<int64_t>({2, 2}, {2, -3, 1, 1});
  auto r = RunNode("GatherElements", {In(x), In(idx)}, {{"axis", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{3, 1, 5, 5}));
  r = RunNode("GatherElements", {In(x), In(Vec<int64_t>({1, 3}, {1, 0, 1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{4, 2, 6}));
  EXPECT_FALSE(RunNode("GatherElements", {In(x), In(Vec<int64_t>({1, 1}, {2}))}).ok());
  // Scatter with duplicates on axis 1: none (last wins), add, mul, max, min.
  Tensor updates = Vec<float>({2, 2}, {10, 20, 30, -40});
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"none", {20, 2, 10, 4, -40, 6}},
      {"add", {21, 2, 13, 4, -5, 6}},
      {"mul", {20, 2, 30, 4, -6000, 6}},
      {"max", {20, 2, 10, 4, 30, 6}},
      {"min", {1, 2, 3, 4, -40, 6}}};
  for (const auto& [red, want] : cases) {
    r = RunNode("ScatterElements", {In(x), In(idx), In(updates)},
                {{"axis", Attribute(int64_t{1})}, {"reduction", Attribute(red)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(r->outputs[0]), want) << red;
  }
  // Integer data wraps like two's complement under "add".
  r = RunNode("ScatterElements", {In(Vec<int8_t>({2}, {120, 0})), In(I64({0})),
                                  In(Vec<int8_t>({1}, {10}))},
              {{"reduction", Attribute("add")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].data<int8_t>()[0], static_cast<int8_t>(-126));
  EXPECT_FALSE(RunNode("ScatterElements", {In(x), In(idx), In(Vec<float>({1, 2}, {1, 2}))}).ok());
  EXPECT_FALSE(RunNode("ScatterElements", {In(x), In(Vec<int64_t>({1, 1}, {5})),
                                           In(Vec<float>({1, 1}, {1}))}, {{"axis", Attribute(int64_t{1})}}).ok());
}

TEST(TensorIndexKernelsTest, OneHotAxesAndNegativeIndices) {
  Tensor idx = Vec<int64_t>({2}, {1, -1});
  Tensor values = Vec<float>({2}, {-2, 9});
  auto r = RunNode("OneHot", {In(idx), Const(Tensor::Scalar<int64_t>(3)), In(values)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{2, 3}));
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{-2, 9, -2, -2, -2, 9}));
  r = RunNode("OneHot", {In(Vec<float>({2}, {0, 7})), In(Tensor::Scalar<float>(3)), In(I64({0, 1}))},
              {{"axis", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{1, 0, 0, 0, 0, 0}));  // 7 is out of range
  EXPECT_FALSE(RunNode("OneHot", {In(idx), In(Tensor::Scalar<int64_t>(0)), In(values)}).ok());
}

TEST(TensorIndexKernelsTest, CumSumExclusiveReverse) {
  Tensor x = Vec<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<std::tuple<int64_t, int64_t, std::vector<double>>> cases = {
      {0, 0, {1, 3, 6, 4, 9, 15}},
      {1, 0, {0, 1, 3, 0, 4, 9}},
      {0, 1, {6, 5, 3, 15, 11, 6}},
      {1, 1, {5, 3, 0, 11, 6, 0}}};
  for (const auto& [excl, rev, want] : cases) {
    auto r = RunNode("CumSum", {In(x), In(Tensor::Scalar<int32_t>(-1))},
                     {{"exclusive", Attribute(excl)}, {"reverse", Attribute(rev)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(r->outputs[0]), want) << excl << rev;
  }
  auto r = RunNode("CumSum", {In(Vec<double>({2, 2}, {0.5, 1, 2, 4})), In(Tensor::Scalar<int64_t>(0))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{0.5, 1, 2.5, 5}));
  EXPECT_FALSE(RunNode("CumSum", {In(x), In(Tensor::Scalar<int64_t>(2))}).ok());
}

TEST(TensorIndexKernelsTest, TriluUpperLowerWithK) {
  Tensor x = RandomFloat({2, 3, 4}, 32);
  for (int64_t upper : {0, 1}) {
    for (int64_t k : {-1, 0, 2}) {
      auto r = RunNode("Trilu", {In(x), In(Tensor::Scalar<int64_t>(k))}, {{"upper", Attribute(upper)}});
      ASSERT_TRUE(r.ok()) << r.status();
      for (int64_t m = 0; m < 2; ++m)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 4; ++j) {
            const bool keep = upper ? j - i >= k : j - i <= k;
            const int64_t o = (m * 3 + i) * 4 + j;
            ASSERT_EQ(At<float>(r->outputs[0], o), keep ? At<float>(x, o) : 0.0f);
          }
    }
  }
  EXPECT_FALSE(RunNode("Trilu", {In(RandomFloat({3}, 1))}).ok());
}

TEST(TensorIndexKernelsTest, ConstantConstantOfShapeAndRange) {
  Tensor c = RandomFloat({2, 2}, 33);
  auto r = RunNode("Constant", {}, {{"value", Attribute(c)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->outputs[0].BitwiseEquals(c));
  EXPECT_EQ(r->types[0], c.type());
  r = RunNode("ConstantOfShape", {Const(I64({2, 3}))}, {{"value", Attribute(Vec<int32_t>({1}, {7}))}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kInt32, Shape{2, 3}));
  EXPECT_EQ(Values(r->outputs[0]), std::vector<double>(6, 7));
  r = RunNode("ConstantOfShape", {In(Tensor(DType::kInt64, {0}))});  // scalar 0.0f
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].rank(), 0);
  EXPECT_EQ(r->outputs[0].dtype(), DType::kFloat32);
  // Range with constant inputs has a static length.
  r = RunNode("Range", {Const(Tensor::Scalar<int32_t>(10)), Const(Tensor::Scalar<int32_t>(1)),
                        Const(Tensor::Scalar<int32_t>(-3))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kInt32, Shape{3}));
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{10, 7, 4}));
  r = RunNode("Range", {In(Tensor::Scalar<float>(0.5f)), In(Tensor::Scalar<float>(2.0f)),
                        In(Tensor::Scalar<float>(0.5f))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{Dim()}));
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{0.5, 1.0, 1.5}));
  r = RunNode("Range", {In(Tensor::Scalar<int64_t>(5)), In(Tensor::Scalar<int64_t>(1)),
                        In(Tensor::Scalar<int64_t>(2))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].num_elements(), 0);
  EXPECT_FALSE(RunNode("Range", {In(Tensor::Scalar<int64_t>(0)), In(Tensor::Scalar<int64_t>(1)),
                                 In(Tensor::Scalar<int64_t>(0))}).ok());
  EXPECT_FALSE(RunNode("Range", {Const(Tensor::Scalar<int64_t>(0)), Const(Tensor::Scalar<int64_t>(1)),
                                 Const(Tensor::Scalar<int64_t>(0))}).ok());
}

}  // namespace
}  // namespace ottr::testing
