// CPU kernels of the tensor and reduction families' ottr backward ops: SliceGrad, PadGrad,
// GatherGrad, GatherElementsGrad (each checked as the adjoint of its forward op,
// <Op(x), dY> = <x, OpGrad(dY)>, and against hand-computed values) and ReduceProdGrad, in float32,
// float64 and the half types, plus their run-time errors.
#include <cmath>

#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>({n}, v);
}

Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::FromVector<float>(std::move(dims), v);
}

// Element type conversion through double (for the half-type tests).
Tensor Converted(const Tensor& t, DType to) {
  Tensor out(to, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.GetAsDouble(i);
    ir::VisitDType(to, [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) out.data<T>()[i] = ir::FromDouble<T>(v);
    });
  }
  return out;
}

double Dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.GetAsDouble(i) * b.GetAsDouble(i);
  return s;
}

Tensor Run1(const std::string& op, const std::vector<Tensor>& inputs,
            const std::map<std::string, Attribute>& attrs = {}, const std::string& domain = "") {
  absl::StatusOr<std::vector<Tensor>> out = RunSingleNode(op, inputs, attrs, 1, domain);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

// Checks <Forward(x), dY> = <x, Backward(dY)> for random x and dY (float64).
void ExpectAdjoint(const std::string& op, const std::vector<Tensor>& fwd_rest,
                   const std::map<std::string, Attribute>& fwd_attrs, const std::string& grad_op,
                   const std::vector<Tensor>& grad_rest,
                   std::map<std::string, Attribute> grad_attrs, std::vector<int64_t> x_dims,
                   uint64_t seed) {
  SCOPED_TRACE(op);
  Tensor x = Converted(RandomFloat(x_dims, seed), DType::kFloat64);
  std::vector<Tensor> fwd_in = {x};
  fwd_in.insert(fwd_in.end(), fwd_rest.begin(), fwd_rest.end());
  Tensor y = Run1(op, fwd_in, fwd_attrs);
  ASSERT_TRUE(y.defined());
  Tensor dy = Converted(RandomFloat(y.dims(), seed + 1), DType::kFloat64);
  std::vector<Tensor> grad_in = {dy};
  grad_in.insert(grad_in.end(), grad_rest.begin(), grad_rest.end());
  grad_attrs["shape"] = Attribute(x_dims);
  Tensor dx = Run1(grad_op, grad_in, grad_attrs, "ottr");
  ASSERT_TRUE(dx.defined());
  ASSERT_EQ(dx.dims(), x.dims());
  EXPECT_NEAR(Dot(y, dy), Dot(x, dx), 1e-12 * (1 + std::abs(Dot(y, dy))));
}

TEST(SliceGradKernelTest, IsTheAdjointOfSlice) {
  const std::vector<Tensor> args = {I64({-1, 0, 1}), I64({-100, 7, 4}), I64({0, 1, -1}),
                                    I64({-2, 3, 1})};
  ExpectAdjoint("Slice", args, {}, "SliceGrad", args, {}, {7, 8, 5}, 1);
  const std::vector<Tensor> plain = {I64({1}), I64({3})};
  ExpectAdjoint("Slice", plain, {}, "SliceGrad", plain, {}, {4, 2}, 2);
}

TEST(SliceGradKernelTest, WritesIntoZerosWithNegativeSteps) {
  // x[4] sliced [3:0:-2] -> positions 3, 1.
  Tensor dx = Run1("SliceGrad", {F32({2}, {5.0f, 7.0f}), I64({3}), I64({0}), I64({0}), I64({-2})},
                   {{"shape", Attribute(std::vector<int64_t>{4})}}, "ottr");
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.dtype(), DType::kFloat32);
  const std::vector<float> want = {0, 7, 0, 5};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dx.data<float>()[i], want[i]) << i;
}

TEST(SliceGradKernelTest, NonFloatGradientIsAnError) {
  absl::StatusOr<std::vector<Tensor>> out = RunSingleNode(
      "SliceGrad", {Tensor::FromVector<int32_t>({2, 1}, {3, -4}), I64({0, 2}), I64({2, 3})},
      {{"shape", Attribute(std::vector<int64_t>{2, 3})}}, 1, "ottr");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("float"), std::string::npos) << out.status();
}

TEST(SliceGradKernelTest, MismatchedGradientIsAnError) {
  absl::StatusOr<std::vector<Tensor>> out =
      RunSingleNode("SliceGrad", {RandomFloat({3}, 3), I64({0}), I64({2})},
                    {{"shape", Attribute(std::vector<int64_t>{5})}}, 1, "ottr");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("does not match"), std::string::npos) << out.status();
}

TEST(PadGradKernelTest, IsTheAdjointOfPadInEveryMode) {
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    SCOPED_TRACE(mode);
    const Tensor pads = I64({2, -1, 3, 1, 2, -2});
    ExpectAdjoint("Pad", {pads}, {{"mode", Attribute(mode)}}, "PadGrad", {pads},
                  {{"mode", Attribute(mode)}}, {4, 5, 6}, 10);
    // With axes (Pad-18): only the last axis.
    const Tensor axes = I64({-1});
    const Tensor pads1 = I64({3, 4});
    ExpectAdjoint("Pad", {pads1, Tensor(), axes}, {{"mode", Attribute(mode)}}, "PadGrad",
                  {pads1, axes}, {{"mode", Attribute(mode)}}, {2, 4}, 11);
  }
}

TEST(PadGradKernelTest, EdgeAccumulatesRepeatedSources) {
  // edge pad of [a, b] by (2, 1): [a, a, a, b, b] -> da = dy0 + dy1 + dy2, db = dy3 + dy4.
  Tensor dx =
      Run1("PadGrad", {F32({5}, {1, 2, 4, 8, 16}), I64({2, 1})},
           {{"mode", Attribute("edge")}, {"shape", Attribute(std::vector<int64_t>{2})}}, "ottr");
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.data<float>()[0], 7.0f);
  EXPECT_EQ(dx.data<float>()[1], 24.0f);
}

TEST(PadGradKernelTest, HalfTypesAccumulateInFloat) {
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    Tensor dy = Converted(F32({5}, {1, 2, 4, 8, 16}), t);
    Tensor dx =
        Run1("PadGrad", {dy, I64({2, 1})},
             {{"mode", Attribute("edge")}, {"shape", Attribute(std::vector<int64_t>{2})}}, "ottr");
    ASSERT_TRUE(dx.defined());
    EXPECT_EQ(dx.dtype(), t);
    EXPECT_EQ(dx.GetAsDouble(0), 7.0);
    EXPECT_EQ(dx.GetAsDouble(1), 24.0);
  }
}

TEST(PadGradKernelTest, BadPadsAreAnError) {
  absl::StatusOr<std::vector<Tensor>> out = RunSingleNode(
      "PadGrad", {RandomFloat({4}, 4), I64({1, 1, 1})},
      {{"mode", Attribute("reflect")}, {"shape", Attribute(std::vector<int64_t>{2})}}, 1, "ottr");
  EXPECT_FALSE(out.ok());
}

TEST(GatherGradKernelTest, IsTheAdjointOfGather) {
  const Tensor idx = Tensor::FromVector<int64_t>({2, 3}, {0, -1, 3, 3, 1, 0});
  ExpectAdjoint("Gather", {idx}, {{"axis", Attribute(1)}}, "GatherGrad", {idx},
                {{"axis", Attribute(1)}}, {2, 4, 3}, 20);
  const Tensor idx32 = Tensor::FromVector<int32_t>({4}, {2, 2, -3, 1});
  ExpectAdjoint("Gather", {idx32}, {}, "GatherGrad", {idx32}, {}, {3, 2}, 21);
}

TEST(GatherGradKernelTest, RepeatedIndicesAccumulate) {
  // data [3], indices [2, 2, 0]: dx = [dy2, 0, dy0 + dy1].
  Tensor dx =
      Run1("GatherGrad", {F32({3}, {1, 2, 4}), Tensor::FromVector<int64_t>({3}, {2, -1, 0})},
           {{"shape", Attribute(std::vector<int64_t>{3})}}, "ottr");
  ASSERT_TRUE(dx.defined());
  const std::vector<float> want = {4, 0, 3};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(dx.data<float>()[i], want[i]) << i;
}

TEST(GatherGradKernelTest, Float16) {
  Tensor dx =
      Run1("GatherGrad",
           {Converted(F32({2, 2}, {1, 2, 3, 4}), DType::kFloat16),
            Tensor::FromVector<int64_t>({2}, {1, 1})},
           {{"axis", Attribute(1)}, {"shape", Attribute(std::vector<int64_t>{2, 3})}}, "ottr");
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.dtype(), DType::kFloat16);
  const std::vector<double> want = {0, 3, 0, 0, 7, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dx.GetAsDouble(i), want[i]) << i;
}

TEST(GatherGradKernelTest, OutOfRangeIndexIsAnError) {
  absl::StatusOr<std::vector<Tensor>> out =
      RunSingleNode("GatherGrad", {RandomFloat({2}, 5), Tensor::FromVector<int64_t>({2}, {0, 3})},
                    {{"shape", Attribute(std::vector<int64_t>{3})}}, 1, "ottr");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("out of range"), std::string::npos) << out.status();
}

TEST(GatherGradKernelTest, MismatchedGradientIsAnError) {
  absl::StatusOr<std::vector<Tensor>> out = RunSingleNode(
      "GatherGrad", {RandomFloat({3, 2}, 6), Tensor::FromVector<int64_t>({2}, {0, 1})},
      {{"shape", Attribute(std::vector<int64_t>{3, 2})}}, 1, "ottr");
  EXPECT_FALSE(out.ok());
}

TEST(GatherElementsGradKernelTest, IsTheAdjointOfGatherElements) {
  const Tensor idx = Tensor::FromVector<int64_t>({2, 3}, {0, 3, -1, 2, 2, 0});
  ExpectAdjoint("GatherElements", {idx}, {{"axis", Attribute(-1)}}, "GatherElementsGrad", {idx},
                {{"axis", Attribute(-1)}}, {2, 4}, 30);
  const Tensor idx0 = Tensor::FromVector<int64_t>({3, 2}, {1, 0, 1, 1, 0, 1});
  ExpectAdjoint("GatherElements", {idx0}, {}, "GatherElementsGrad", {idx0}, {}, {2, 3}, 31);
}

TEST(GatherElementsGradKernelTest, BFloat16AndErrors) {
  Tensor dx =
      Run1("GatherElementsGrad",
           {Converted(F32({1, 3}, {1, 2, 4}), DType::kBFloat16),
            Tensor::FromVector<int64_t>({1, 3}, {1, 1, 0})},
           {{"axis", Attribute(1)}, {"shape", Attribute(std::vector<int64_t>{1, 2})}}, "ottr");
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.GetAsDouble(0), 4.0);
  EXPECT_EQ(dx.GetAsDouble(1), 3.0);
  absl::StatusOr<std::vector<Tensor>> bad = RunSingleNode(
      "GatherElementsGrad", {RandomFloat({1, 2}, 7), Tensor::FromVector<int64_t>({1, 2}, {0, 2})},
      {{"axis", Attribute(1)}, {"shape", Attribute(std::vector<int64_t>{1, 2})}}, 1, "ottr");
  EXPECT_FALSE(bad.ok());
}

TEST(ReduceProdGradKernelTest, ProductOfTheOthersWithZeros) {
  // Rows reduced over axis 1: no zero, one zero, two zeros.
  Tensor x = F32({3, 3}, {2, 3, 4, 5, 0, 6, 0, 7, 0});
  Tensor dy = F32({3, 1}, {1, 10, 100});
  Tensor dx = Run1("ReduceProdGrad", {x, dy}, {}, "ottr");
  ASSERT_TRUE(dx.defined());
  const std::vector<float> want = {12, 8, 6, 0, 300, 0, 0, 0, 0};
  for (int i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(dx.data<float>()[i], want[i]) << i;
}

TEST(ReduceProdGradKernelTest, ReducesWhereDyBroadcasts) {
  // dY [1, 2] over x [2, 2]: columns are the groups.
  Tensor x = Converted(F32({2, 2}, {2, 3, 5, 7}), DType::kFloat64);
  Tensor dy = Converted(F32({1, 2}, {1, 2}), DType::kFloat64);
  Tensor dx = Run1("ReduceProdGrad", {x, dy}, {}, "ottr");
  ASSERT_TRUE(dx.defined());
  const std::vector<double> want = {5, 14, 2, 6};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dx.data<double>()[i], want[i]) << i;
}

TEST(ReduceProdGradKernelTest, BadShapesAndTypesAreErrors) {
  EXPECT_FALSE(RunSingleNode("ReduceProdGrad", {RandomFloat({2, 3}, 8), RandomFloat({2, 2}, 9)}, {},
                             1, "ottr")
                   .ok());
  EXPECT_FALSE(
      RunSingleNode("ReduceProdGrad", {RandomFloat({2, 3}, 8), RandomFloat({3}, 9)}, {}, 1, "ottr")
          .ok());
  EXPECT_FALSE(RunSingleNode("ReduceProdGrad",
                             {Tensor::FromVector<int64_t>({2}, {1, 2}),
                              Tensor::FromVector<int64_t>({1}, {1})},
                             {}, 1, "ottr")
                   .ok());
}

}  // namespace
}  // namespace ottr::testing
