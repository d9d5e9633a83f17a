// Tests of the reductions and ArgMax/ArgMin (reduction_ops.cc / reduction_kernels.cc) against
// direct loops: every reduction on random data, axes forms, keepdims, noop_with_empty_axes, empty
// sets, integer and half types, symbolic dims and errors.
#include <cmath>
#include <functional>
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

// Reference for a [A,B,C] float tensor reduced over axis 1: f folds the B values of each (a, c).
std::vector<double> ReduceAxis1(const Tensor& x, const std::function<double(const std::vector<double>&)>& f) {
  const int64_t A = x.dim(0), B = x.dim(1), C = x.dim(2);
  std::vector<double> out;
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t c = 0; c < C; ++c) {
      std::vector<double> v;
      for (int64_t b = 0; b < B; ++b) v.push_back(x.GetAsDouble((a * B + b) * C + c));
      out.push_back(f(v));
    }
  }
  return out;
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

TEST(ReductionKernelsTest, EveryReductionMatchesReference) {
  // Positive inputs so LogSum is defined.
  Tensor x = RandomFloat({3, 4, 5}, 21, 0.1f, 2.0f);
  const std::vector<std::pair<std::string, std::function<double(const std::vector<double>&)>>> ops = {
      {"ReduceSum", Sum},
      {"ReduceMean", [](const std::vector<double>& v) { return Sum(v) / v.size(); }},
      {"ReduceMax", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }},
      {"ReduceMin", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }},
      {"ReduceProd", [](const std::vector<double>& v) { double p = 1; for (double x : v) p *= x; return p; }},
      {"ReduceL1", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += std::fabs(x); return s; }},
      {"ReduceL2", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x * x; return std::sqrt(s); }},
      {"ReduceSumSquare", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x * x; return s; }},
      {"ReduceLogSum", [](const std::vector<double>& v) { return std::log(Sum(v)); }},
      {"ReduceLogSumExp", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += std::exp(x); return std::log(s); }},
  };
  for (const auto& [op, f] : ops) {
    auto r = RunNode(op, {In(x), Const(I64({-2}))}, {{"keepdims", Attribute(int64_t{0})}});
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{3, 5})) << op;
    const std::vector<double> want = ReduceAxis1(x, f);
    const std::vector<double> got = Values(r->outputs[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << op;
  }
}

TEST(ReductionKernelsTest, AxesFormsAndKeepdims) {
  Tensor x = RandomFloat({2, 3, 4}, 22);
  // No axes input: all axes, keepdims default 1.
  auto r = RunNode("ReduceSum", {In(x)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{1, 1, 1}));
  double total = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) total += x.data<float>()[i];
  EXPECT_NEAR(r->outputs[0].GetAsDouble(0), total, 1e-5);
  // Empty axes input without noop: all axes; with noop: the input unchanged.
  r = RunNode("ReduceMax", {In(x), Const(Tensor(DType::kInt64, {0}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].rank(), 0);
  r = RunNode("ReduceSum", {In(x), Const(Tensor(DType::kInt64, {0}))},
              {{"noop_with_empty_axes", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->outputs[0].BitwiseEquals(x));
  // noop for a non-trivial reduction: reducing over no axes is elementwise (x² here).
  r = RunNode("ReduceSumSquare", {In(x)}, {{"noop_with_empty_axes", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), x.dims());
  EXPECT_FLOAT_EQ(r->outputs[0].data<float>()[5], x.data<float>()[5] * x.data<float>()[5]);
  // Two axes, one negative, keepdims.
  r = RunNode("ReduceMean", {In(x), Const(I64({0, -1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat32, Shape{1, 3, 1}));
  double m = 0;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 4; ++c) m += x.data<float>()[(a * 3 + 1) * 4 + c];
  EXPECT_NEAR(r->outputs[0].GetAsDouble(1), m / 8, 1e-6);
  EXPECT_FALSE(RunNode("ReduceSum", {In(x), In(I64({3}))}).ok());
  EXPECT_FALSE(RunNode("ReduceSum", {In(x), In(I64({1, -2}))}).ok());
}

TEST(ReductionKernelsTest, EmptySetsGiveIdentities) {
  Tensor x(DType::kFloat32, {2, 0, 4});
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, double>> cases = {
      {"ReduceSum", 0}, {"ReduceProd", 1}, {"ReduceMax", -inf}, {"ReduceMin", inf},
      {"ReduceL1", 0},  {"ReduceL2", 0},   {"ReduceSumSquare", 0}, {"ReduceLogSum", -inf},
      {"ReduceLogSumExp", -inf}};
  for (const auto& [op, want] : cases) {
    auto r = RunNode(op, {In(x), Const(I64({1}))});
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    ASSERT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{2, 1, 4})) << op;
    for (double v : Values(r->outputs[0])) EXPECT_EQ(v, want) << op;
  }
  auto r = RunNode("ReduceMean", {In(x), Const(I64({1}))});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r->outputs[0].GetAsDouble(0)));
  // Integer max of nothing is the lowest value; reducing a non-empty axis of an empty tensor
  // gives an empty output.
  r = RunNode("ReduceMax", {In(Tensor(DType::kInt32, {0, 3})), Const(I64({0}))},
              {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), std::vector<double>(3, std::numeric_limits<int32_t>::lowest()));
  r = RunNode("ReduceSum", {In(Tensor(DType::kFloat32, {0, 3})), Const(I64({1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{0, 1}));
}

TEST(ReductionKernelsTest, IntegerHalfAndBoolTypes) {
  // int64 sums are exact beyond 2^53.
  Tensor big = Vec<int64_t>({2}, {(int64_t{1} << 60) + 1, 3});
  auto r = RunNode("ReduceSum", {In(big)}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].data<int64_t>()[0], (int64_t{1} << 60) + 4);
  // int32 mean truncates toward zero; L1 of negatives.
  Tensor i = Vec<int32_t>({2, 3}, {-7, 2, -4, 5, 5, 6});
  r = RunNode("ReduceMean", {In(i), Const(I64({1}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{-3, 5}));
  r = RunNode("ReduceL1", {In(i), Const(I64({1}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{13, 16}));
  r = RunNode("ReduceProd", {In(i), Const(I64({0}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{-35, 10, -24}));
  // uint8 max/min.
  Tensor u = Vec<uint8_t>({4}, {3, 250, 0, 17});
  r = RunNode("ReduceMin", {In(u)}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].GetAsDouble(0), 0);
  // float16 sum accumulates in higher precision: 2048 + 1 + 1 is exact in the result.
  Tensor h(DType::kFloat16, {3});
  for (int k = 0; k < 3; ++k) h.data<ir::Half>()[k] = ir::FloatToHalf(k == 0 ? 2048.0f : 1.0f);
  r = RunNode("ReduceSum", {In(h)}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kFloat16, Shape{}));
  EXPECT_EQ(r->outputs[0].GetAsDouble(0), 2050.0);
  // bool: Max = any, Min = all.
  Tensor b = Vec<bool>({2, 2}, {true, false, false, false});
  r = RunNode("ReduceMax", {In(b), Const(I64({1}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{1, 0}));
  r = RunNode("ReduceMin", {In(b), Const(I64({0}))}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<double>{0, 0}));
  EXPECT_FALSE(RunNode("ReduceSum", {In(b)}).ok());
}

TEST(ReductionKernelsTest, NanPropagatesThroughMaxAndMin) {
  Tensor x = Vec<float>({3}, {1.0f, std::nanf(""), 5.0f});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    auto r = RunNode(op, {In(x)});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isnan(r->outputs[0].GetAsDouble(0))) << op;
  }
}

TEST(ReductionKernelsTest, ShapesWithSymbolsAndUnknownAxes) {
  const TensorType x(DType::kFloat32, Shape{Dim::Symbol("N"), 3, 4});
  auto t = InferNode("ReduceSum", {Declared(Tensor(), x), Const(I64({-1}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0], TensorType(DType::kFloat32, Shape{Dim::Symbol("N"), 3, 1}));
  // Axes not constant, keepdims=0, two axes: the rank is known.
  t = InferNode("ReduceSum", {Declared(Tensor(), x), Declared(Tensor(), TensorType(DType::kInt64, Shape{2}))},
                {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0], TensorType(DType::kFloat32, Shape{Dim()}));
  // Runs with the axes fed at run time.
  auto r = RunNode("ReduceL2", {Declared(RandomFloat({2, 3, 4}, 23), x), In(I64({0, 2}))},
                   {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{3}));
}

TEST(ReductionKernelsTest, ArgMaxArgMinWithTiesAndNan) {
  Tensor x = Vec<float>({2, 4}, {1, 5, 5, 2, 3, std::nanf(""), 0, std::nanf("")});
  auto r = RunNode("ArgMax", {In(x)}, {{"axis", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->types[0], TensorType(DType::kInt64, Shape{2, 1}));
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{1, 1}));  // first max, first NaN
  r = RunNode("ArgMax", {In(x)}, {{"axis", Attribute(int64_t{-1})},
                                  {"select_last_index", Attribute(int64_t{1})},
                                  {"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->outputs[0].dims(), (std::vector<int64_t>{2}));
  Tensor i = Vec<int32_t>({3, 2}, {4, -1, -9, 7, -9, 7});
  r = RunNode("ArgMin", {In(i)}, {{"keepdims", Attribute(int64_t{0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{1, 0}));
  r = RunNode("ArgMin", {In(i)}, {{"select_last_index", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ToInt64Vector(), (std::vector<int64_t>{2, 0}));
  EXPECT_FALSE(RunNode("ArgMax", {In(Tensor(DType::kFloat32, {2, 0}))}, {{"axis", Attribute(int64_t{1})}}).ok());
  EXPECT_FALSE(RunNode("ArgMax", {In(x)}, {{"axis", Attribute(int64_t{2})}}).ok());
}

}  // namespace
}  // namespace ottr::testing
