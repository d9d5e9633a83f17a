// Tests of the elementwise ops: schema/shape functions and CPU kernels, beyond the ONNX
// conformance cases (other dtypes, broadcasting, symbolic shapes, edge and error cases).
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/tensor.h"
#include "runtime/cpu/elementwise_common.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::BFloat16;
using ir::Dim;
using ir::DType;
using ir::Half;
using ir::Shape;
using ir::Tensor;
using ir::TensorType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T>
Tensor T_(std::vector<int64_t> dims, std::vector<T> v) {
  return Tensor::FromVector<T>(std::move(dims), v);
}
Tensor F32(std::vector<int64_t> dims, std::vector<float> v) { return T_<float>(dims, v); }
Tensor F16(std::vector<int64_t> dims, const std::vector<float>& v) {
  std::vector<Half> h;
  for (float f : v) h.push_back(ir::FloatToHalf(f));
  return T_<Half>(dims, h);
}
Tensor BF16(std::vector<int64_t> dims, const std::vector<float>& v) {
  std::vector<BFloat16> h;
  for (float f : v) h.push_back(ir::FloatToBFloat16(f));
  return T_<BFloat16>(dims, h);
}
Tensor Bool(std::vector<int64_t> dims, std::vector<bool> v) {
  Tensor t(DType::kBool, dims);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

// Runs `op` on the inputs and returns output 0 (fails the test on error).
Tensor RunOp(const std::string& op, const std::vector<Tensor>& in,
           const std::map<std::string, Attribute>& attrs = {}) {
  absl::StatusOr<std::vector<Tensor>> r = RunSingleNode(op, in, attrs);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

absl::Status RunStatus(const std::string& op, const std::vector<Tensor>& in,
                       const std::map<std::string, Attribute>& attrs = {}) {
  return RunSingleNode(op, in, attrs).status();
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}
std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.GetAsDouble(i));
  return out;
}

// Static output type of a one-node graph whose inputs have the given declared types.
absl::StatusOr<TensorType> InferType(const std::string& op, const std::vector<TensorType>& in,
                                     const std::map<std::string, Attribute>& attrs = {}) {
  ir::Graph g("infer");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  ir::NodeSpec spec{op, "", {}, {"out"}, attrs, "n0"};
  for (size_t i = 0; i < in.size(); ++i) {
    absl::StatusOr<ir::Value*> v = g.AddInput("in" + std::to_string(i), in[i]);
    if (!v.ok()) return v.status();
    spec.inputs.push_back(*v);
  }
  absl::StatusOr<ir::Node*> n = g.AddNode(std::move(spec));
  if (!n.ok()) return n.status();
  absl::Status s = ir::OpRegistry::Global().CheckNode(**n, ir::kMaxOnnxOpset);
  if (!s.ok()) return s;
  s = ir::InferGraphShapes(ir::OpRegistry::Global(), g);
  if (!s.ok()) return s;
  return (*n)->output(0)->type();
}

// ---- shape functions ------------------------------------------------------------------------

TEST(ElementwiseShapeTest, SymbolicDimsFlowThroughBroadcast) {
  const TensorType a(DType::kFloat32, Shape{Dim::Symbol("N"), 1, 8});
  const TensorType b(DType::kFloat32, Shape{4, 1});
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Sum"}) {
    absl::StatusOr<TensorType> t = InferType(op, {a, b});
    ASSERT_TRUE(t.ok()) << op << ": " << t.status();
    EXPECT_EQ(*t, TensorType(DType::kFloat32, Shape{Dim::Symbol("N"), 4, 8})) << op;
  }
  absl::StatusOr<TensorType> t = InferType("Less", {a, b});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kBool, Shape{Dim::Symbol("N"), 4, 8}));
  t = InferType("Where", {TensorType(DType::kBool, Shape{Dim::Symbol("B"), 1}),
                          TensorType(DType::kInt64, Shape{3}), TensorType(DType::kInt64, Shape{})});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kInt64, Shape{Dim::Symbol("B"), 3}));
}

TEST(ElementwiseShapeTest, UnknownRankStaysUnknown) {
  absl::StatusOr<TensorType> t =
      InferType("Add", {TensorType(DType::kFloat32, std::nullopt), TensorType(DType::kFloat32, Shape{3})});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kFloat32, std::nullopt));
}

TEST(ElementwiseShapeTest, RejectsBadShapesAndTypes) {
  absl::StatusOr<TensorType> t = InferType(
      "Add", {TensorType(DType::kFloat32, Shape{2, 3}), TensorType(DType::kFloat32, Shape{4})});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("n0"), std::string::npos) << t.status();
  // Mixed element types.
  EXPECT_FALSE(InferType("Mul", {TensorType(DType::kFloat32, Shape{2}),
                                 TensorType(DType::kInt64, Shape{2})}).ok());
  // And takes bool; Sqrt takes floats; Neg takes signed types; Where's condition is bool.
  EXPECT_FALSE(InferType("And", {TensorType(DType::kInt32, Shape{2}),
                                 TensorType(DType::kInt32, Shape{2})}).ok());
  EXPECT_FALSE(InferType("Sqrt", {TensorType(DType::kInt32, Shape{2})}).ok());
  EXPECT_FALSE(InferType("Neg", {TensorType(DType::kUInt8, Shape{2})}).ok());
  EXPECT_FALSE(InferType("Where", {TensorType(DType::kFloat32, Shape{2}),
                                   TensorType(DType::kFloat32, Shape{2}),
                                   TensorType(DType::kFloat32, Shape{2})}).ok());
  // Clip bounds are scalars.
  EXPECT_FALSE(InferType("Clip", {TensorType(DType::kFloat32, Shape{2}),
                                  TensorType(DType::kFloat32, Shape{2})}).ok());
}

TEST(ElementwiseShapeTest, PowKeepsBaseTypeAndCastUsesTo) {
  absl::StatusOr<TensorType> t = InferType(
      "Pow", {TensorType(DType::kInt32, Shape{Dim::Symbol("N")}), TensorType(DType::kFloat32, Shape{})});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kInt32, Shape{Dim::Symbol("N")}));
  t = InferType("Cast", {TensorType(DType::kFloat32, Shape{Dim::Symbol("N"), 2})},
                {{"to", Attribute(int64_t{7})}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kInt64, Shape{Dim::Symbol("N"), 2}));
  t = InferType("CastLike", {TensorType(DType::kFloat32, Shape{3}), TensorType(DType::kFloat16, Shape{})});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, TensorType(DType::kFloat16, Shape{3}));
  // float8 (17) is not an ottr element type: Unimplemented, not a crash.
  t = InferType("Cast", {TensorType(DType::kFloat32, Shape{3})}, {{"to", Attribute(int64_t{17})}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
}

// ---- arithmetic -----------------------------------------------------------------------------

TEST(ElementwiseKernelTest, AddBroadcastMatchesNaive) {
  const Tensor a = RandomFloat({2, 3, 4}, 1);
  const Tensor b = RandomFloat({3, 1}, 2);
  const Tensor y = RunOp("Add", {a, b});
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 3, 4}));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(y.data<float>()[i * 12 + j * 4 + k],
                  a.data<float>()[i * 12 + j * 4 + k] + b.data<float>()[j]);
      }
    }
  }
}

TEST(ElementwiseKernelTest, SubMulDivFloat) {
  const Tensor a = RandomFloat({5, 6}, 3);
  const Tensor b = RandomFloat({6}, 4, 0.5f, 2.0f);
  const Tensor sub = RunOp("Sub", {a, b});
  const Tensor mul = RunOp("Mul", {a, b});
  const Tensor div = RunOp("Div", {a, b});
  for (int i = 0; i < 30; ++i) {
    const float x = a.data<float>()[i], z = b.data<float>()[i % 6];
    EXPECT_EQ(sub.data<float>()[i], x - z);
    EXPECT_EQ(mul.data<float>()[i], x * z);
    EXPECT_EQ(div.data<float>()[i], x / z);
  }
}

TEST(ElementwiseKernelTest, IntegerArithmeticWraps) {
  EXPECT_EQ(Values<int8_t>(RunOp("Add", {T_<int8_t>({2}, {127, -128}), T_<int8_t>({2}, {1, -1})})),
            (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(Values<int32_t>(RunOp("Mul", {T_<int32_t>({1}, {1 << 30}), T_<int32_t>({1}, {4})})),
            (std::vector<int32_t>{0}));
  EXPECT_EQ(Values<uint16_t>(RunOp("Mul", {T_<uint16_t>({1}, {65535}), T_<uint16_t>({1}, {65535})})),
            (std::vector<uint16_t>{1}));
  EXPECT_EQ(Values<uint8_t>(RunOp("Sub", {T_<uint8_t>({1}, {0}), T_<uint8_t>({1}, {1})})),
            (std::vector<uint8_t>{255}));
  EXPECT_EQ(Values<int64_t>(RunOp("Neg", {T_<int64_t>({2}, {std::numeric_limits<int64_t>::min(), 5})})),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -5}));
}

TEST(ElementwiseKernelTest, IntegerDivisionTruncatesTowardZero) {
  EXPECT_EQ(Values<int32_t>(RunOp("Div", {T_<int32_t>({4}, {7, -7, 7, -7}), T_<int32_t>({4}, {2, 2, -2, -2})})),
            (std::vector<int32_t>{3, -3, -3, 3}));
  EXPECT_EQ(Values<uint64_t>(RunOp("Div", {T_<uint64_t>({2}, {~uint64_t{0}, 9}), T_<uint64_t>({}, {2})})),
            (std::vector<uint64_t>{~uint64_t{0} / 2, 4}));
  EXPECT_EQ(Values<int8_t>(RunOp("Div", {T_<int8_t>({1}, {-128}), T_<int8_t>({1}, {-1})})),
            (std::vector<int8_t>{-128}));
  const absl::Status s = RunStatus("Div", {T_<int32_t>({2}, {1, 2}), T_<int32_t>({2}, {1, 0})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("division by zero"), std::string::npos) << s;
  // Float division by zero is IEEE.
  const Tensor f = RunOp("Div", {F32({2}, {1, -1}), F32({}, {0})});
  EXPECT_EQ(Values<float>(f), (std::vector<float>{kInf, -kInf}));
}

TEST(ElementwiseKernelTest, ModFollowsDivisorOrDividendSign) {
  const Tensor a = T_<int32_t>({4}, {7, -7, 7, -7});
  const Tensor b = T_<int32_t>({4}, {3, 3, -3, -3});
  EXPECT_EQ(Values<int32_t>(RunOp("Mod", {a, b})), (std::vector<int32_t>{1, 2, -2, -1}));
  EXPECT_EQ(Values<int32_t>(RunOp("Mod", {a, b}, {{"fmod", Attribute(int64_t{1})}})),
            (std::vector<int32_t>{1, -1, 1, -1}));
  const Tensor fa = F32({4}, {5.5f, -5.5f, 5.5f, -5.5f});
  const Tensor fb = F32({4}, {2, 2, -2, -2});
  EXPECT_EQ(Values<float>(RunOp("Mod", {fa, fb}, {{"fmod", Attribute(int64_t{1})}})),
            (std::vector<float>{1.5f, -1.5f, 1.5f, -1.5f}));
  EXPECT_EQ(Values<float>(RunOp("Mod", {fa, fb})), (std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f}));
  EXPECT_EQ(Values<uint8_t>(RunOp("Mod", {T_<uint8_t>({2}, {200, 7}), T_<uint8_t>({}, {6})})),
            (std::vector<uint8_t>{2, 1}));
  EXPECT_FALSE(RunStatus("Mod", {T_<int64_t>({1}, {3}), T_<int64_t>({1}, {0})}).ok());
}

TEST(ElementwiseKernelTest, PowMixedTypes) {
  // int ^ int: exact, wrapping; negative exponents truncate the true value.
  EXPECT_EQ(Values<int64_t>(RunOp("Pow", {T_<int64_t>({4}, {3, -2, 2, 1}), T_<int64_t>({4}, {4, 3, 62, -5})})),
            (std::vector<int64_t>{81, -8, int64_t{1} << 62, 1}));
  EXPECT_EQ(Values<int32_t>(RunOp("Pow", {T_<int32_t>({3}, {2, -1, 5}), T_<int32_t>({3}, {-1, -3, 0})})),
            (std::vector<int32_t>{0, -1, 1}));
  EXPECT_EQ(Values<int8_t>(RunOp("Pow", {T_<int8_t>({1}, {2}), T_<int8_t>({1}, {7})})),
            (std::vector<int8_t>{-128}));
  // float ^ int and int ^ float.
  EXPECT_EQ(Values<float>(RunOp("Pow", {F32({3}, {2, -3, 0.5f}), T_<int64_t>({3}, {3, 2, -2})})),
            (std::vector<float>{8, 9, 4}));
  EXPECT_EQ(Values<int32_t>(RunOp("Pow", {T_<int32_t>({3}, {2, 9, 10}), F32({3}, {0.5f, 0.5f, 2})})),
            (std::vector<int32_t>{1, 3, 100}));
  EXPECT_EQ(Values<float>(RunOp("Pow", {F32({3}, {2, -3, 9}), T_<uint8_t>({}, {2})})),
            (std::vector<float>{4, 9, 81}));
  // float ^ float, with the scalar-square fast path and the general path.
  const Tensor x = RandomFloat({7, 3}, 5, 0.1f, 3.0f);
  const Tensor sq = RunOp("Pow", {x, F32({1, 1}, {2})});
  ASSERT_EQ(sq.dims(), (std::vector<int64_t>{7, 3}));
  const Tensor e = RandomFloat({3}, 6, -2.0f, 2.0f);
  const Tensor g = RunOp("Pow", {x, e});
  for (int i = 0; i < 21; ++i) {
    const float v = x.data<float>()[i];
    EXPECT_EQ(sq.data<float>()[i], v * v);
    EXPECT_FLOAT_EQ(g.data<float>()[i], std::pow(v, e.data<float>()[i % 3]));
  }
  // Half base.
  const Tensor h = RunOp("Pow", {F16({2}, {1.5f, 3}), F16({2}, {2, -1})});
  EXPECT_FLOAT_EQ(ir::HalfToFloat(h.data<Half>()[0]), 2.25f);
  EXPECT_NEAR(ir::HalfToFloat(h.data<Half>()[1]), 1.0f / 3, 1e-3);
}

TEST(ElementwiseKernelTest, HalfAndBFloat16ComputeThroughFloat) {
  const Tensor a = F16({3}, {1.5f, -2.25f, 1000});
  const Tensor b = F16({3}, {0.25f, 4, 24});
  const Tensor y = RunOp("Add", {a, b});
  ASSERT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(AsDoubles(y), (std::vector<double>{1.75, 1.75, 1024}));
  const Tensor m = RunOp("Mul", {BF16({2}, {3, -0.5f}), BF16({}, {2})});
  ASSERT_EQ(m.dtype(), DType::kBFloat16);
  EXPECT_EQ(AsDoubles(m), (std::vector<double>{6, -1}));
}

TEST(ElementwiseKernelTest, EmptyTensorsBroadcast) {
  const Tensor y = RunOp("Add", {F32({0, 3}, {}), F32({3}, {1, 2, 3})});
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{0, 3}));
  // No elements are computed, so a zero divisor does not matter.
  const Tensor d = RunOp("Div", {T_<int32_t>({0}, {}), T_<int32_t>({1}, {0})});
  EXPECT_EQ(d.dims(), (std::vector<int64_t>{0}));
  const Tensor s = RunOp("Sqrt", {F32({2, 0}, {})});
  EXPECT_EQ(s.dims(), (std::vector<int64_t>{2, 0}));
}

TEST(ElementwiseKernelTest, RankZeroInputs) {
  const Tensor y = RunOp("Sub", {F32({}, {5}), F32({}, {7})});
  EXPECT_TRUE(y.dims().empty());
  EXPECT_EQ(y.data<float>()[0], -2.0f);
}

TEST(ElementwiseKernelTest, IncompatibleShapesAreAnError) {
  const absl::Status s = RunStatus("Add", {RandomFloat({2, 3}, 1), RandomFloat({2}, 2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// ---- unary ----------------------------------------------------------------------------------

TEST(ElementwiseKernelTest, FloatUnaryMatchesLibm) {
  const Tensor x = RandomFloat({64}, 7, 0.05f, 4.0f);
  const std::vector<std::pair<std::string, double (*)(double)>> ops = {
      {"Sqrt", [](double v) { return std::sqrt(v); }}, {"Exp", [](double v) { return std::exp(v); }},
      {"Log", [](double v) { return std::log(v); }},   {"Reciprocal", [](double v) { return 1 / v; }},
      {"Ceil", [](double v) { return std::ceil(v); }}, {"Floor", [](double v) { return std::floor(v); }},
      {"Sin", [](double v) { return std::sin(v); }},   {"Cos", [](double v) { return std::cos(v); }},
      {"Erf", [](double v) { return std::erf(v); }},   {"Neg", [](double v) { return -v; }}};
  for (const auto& [op, f] : ops) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
      absl::StatusOr<Tensor> xin = runtime::cpu::ew::CastTensor(x, dt);
      ASSERT_TRUE(xin.ok());
      const Tensor y = RunOp(op, {*xin});
      ASSERT_EQ(y.dtype(), dt) << op;
      const double tol = dt == DType::kFloat16 ? 4e-3 : (dt == DType::kFloat32 ? 1e-6 : 1e-14);
      for (int i = 0; i < 64; ++i) {
        const double in = xin->GetAsDouble(i);
        const double want = f(in);
        EXPECT_NEAR(y.GetAsDouble(i), want, tol * std::max(1.0, std::fabs(want)))
            << op << " " << ir::DTypeName(dt) << " at " << in;
      }
    }
  }
}

TEST(ElementwiseKernelTest, RoundIsHalfToEven) {
  EXPECT_EQ(Values<float>(RunOp("Round", {F32({8}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f, 7})})),
            (std::vector<float>{0, 2, 2, -0.0f, -2, 2, -3, 7}));
}

TEST(ElementwiseKernelTest, AbsAndSignOnEveryKind) {
  EXPECT_EQ(Values<int8_t>(RunOp("Abs", {T_<int8_t>({3}, {-5, 0, -128})})),
            (std::vector<int8_t>{5, 0, -128}));
  EXPECT_EQ(Values<uint32_t>(RunOp("Abs", {T_<uint32_t>({2}, {7, 4000000000u})})),
            (std::vector<uint32_t>{7, 4000000000u}));
  EXPECT_EQ(Values<int64_t>(RunOp("Sign", {T_<int64_t>({3}, {-9, 0, 12})})),
            (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(Values<uint8_t>(RunOp("Sign", {T_<uint8_t>({2}, {0, 200})})), (std::vector<uint8_t>{0, 1}));
  const Tensor s = RunOp("Sign", {F32({4}, {-2.5f, 0, 3, kNaN})});
  EXPECT_EQ(s.data<float>()[0], -1);
  EXPECT_EQ(s.data<float>()[1], 0);
  EXPECT_EQ(s.data<float>()[2], 1);
  EXPECT_TRUE(std::isnan(s.data<float>()[3]));
  EXPECT_EQ(AsDoubles(RunOp("Abs", {F16({2}, {-3.5f, 2})})), (std::vector<double>{3.5, 2}));
}

TEST(ElementwiseKernelTest, ErfOnIntegersTruncates) {
  EXPECT_EQ(Values<int32_t>(RunOp("Erf", {T_<int32_t>({3}, {0, 1, 10})})),
            (std::vector<int32_t>{0, 0, 1}));
}

TEST(ElementwiseKernelTest, NotAndLogic) {
  const Tensor a = Bool({4}, {false, false, true, true});
  const Tensor b = Bool({4}, {false, true, false, true});
  EXPECT_EQ(Values<bool>(RunOp("Not", {a})), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(Values<bool>(RunOp("And", {a, b})), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(Values<bool>(RunOp("Or", {a, b})), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(Values<bool>(RunOp("Xor", {a, b})), (std::vector<bool>{false, true, true, false}));
  // Broadcast: [2,1] x [2].
  EXPECT_EQ(Values<bool>(RunOp("And", {Bool({2, 1}, {true, false}), Bool({2}, {true, false})})),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_FALSE(RunStatus("Or", {F32({1}, {1}), F32({1}, {0})}).ok());
}

TEST(ElementwiseKernelTest, UnsupportedTypesAreErrorsNotCrashes) {
  EXPECT_FALSE(RunStatus("Exp", {T_<int32_t>({2}, {1, 2})}).ok());
  EXPECT_FALSE(RunStatus("Add", {Bool({1}, {true}), Bool({1}, {true})}).ok());
  EXPECT_FALSE(RunStatus("Not", {F32({1}, {1})}).ok());
}

// ---- variadic -------------------------------------------------------------------------------

TEST(ElementwiseKernelTest, VariadicBroadcastThreeInputs) {
  const Tensor a = RandomFloat({2, 1, 3}, 11);
  const Tensor b = RandomFloat({4, 1}, 12);
  const Tensor c = RandomFloat({3}, 13);
  const Tensor sum = RunOp("Sum", {a, b, c});
  const Tensor mean = RunOp("Mean", {a, b, c});
  const Tensor mx = RunOp("Max", {a, b, c});
  const Tensor mn = RunOp("Min", {a, b, c});
  ASSERT_EQ(sum.dims(), (std::vector<int64_t>{2, 4, 3}));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 3; ++k) {
        const float x = a.data<float>()[i * 3 + k], y = b.data<float>()[j], z = c.data<float>()[k];
        const int o = i * 12 + j * 3 + k;
        EXPECT_FLOAT_EQ(sum.data<float>()[o], x + y + z);
        EXPECT_FLOAT_EQ(mean.data<float>()[o], (x + y + z) / 3);
        EXPECT_EQ(mx.data<float>()[o], std::max({x, y, z}));
        EXPECT_EQ(mn.data<float>()[o], std::min({x, y, z}));
      }
    }
  }
}

TEST(ElementwiseKernelTest, VariadicOutputShapeFromALaterInput) {
  // The first two inputs span [3]; the third widens the output to [2,3].
  const Tensor a = F32({3}, {1, 5, -2});
  const Tensor b = F32({}, {0.5f});
  const Tensor c = F32({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(Values<float>(RunOp("Sum", {a, b, c})), (std::vector<float>{1.5f, 6.5f, 0.5f, 4.5f, 9.5f, 3.5f}));
  EXPECT_EQ(Values<float>(RunOp("Max", {a, b, c})), (std::vector<float>{1, 5, 2, 3, 5, 5}));
  EXPECT_EQ(Values<float>(RunOp("Mean", {b, a, c})),
            (std::vector<float>{1.5f / 3, 6.5f / 3, 0.5f / 3, 4.5f / 3, 9.5f / 3, 3.5f / 3}));
}

TEST(ElementwiseKernelTest, VariadicSingleInputBroadcastsNothing) {
  const Tensor a = RandomFloat({3, 2}, 14);
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    EXPECT_TRUE(RunOp(op, {a}).BitwiseEquals(a)) << op;
  }
}

TEST(ElementwiseKernelTest, MaxMinIntegersAndNaN) {
  EXPECT_EQ(Values<int8_t>(RunOp("Max", {T_<int8_t>({3}, {-128, 5, 7}), T_<int8_t>({}, {6})})),
            (std::vector<int8_t>{6, 6, 7}));
  EXPECT_EQ(Values<uint64_t>(RunOp("Min", {T_<uint64_t>({2}, {~uint64_t{0}, 1}), T_<uint64_t>({2}, {3, 2})})),
            (std::vector<uint64_t>{3, 1}));
  const Tensor mx = RunOp("Max", {F32({3}, {kNaN, 1, 2}), F32({3}, {0, kNaN, 1})});
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]));
  EXPECT_TRUE(std::isnan(mx.data<float>()[1]));
  EXPECT_EQ(mx.data<float>()[2], 2);
  const Tensor mn = RunOp("Min", {F32({2}, {kNaN, 1}), F32({2}, {0, kNaN})});
  EXPECT_TRUE(std::isnan(mn.data<float>()[0]));
  EXPECT_TRUE(std::isnan(mn.data<float>()[1]));
  EXPECT_EQ(Values<int32_t>(RunOp("Sum", {T_<int32_t>({2}, {1, 2}), T_<int32_t>({2}, {10, 20}),
                                        T_<int32_t>({}, {100})})),
            (std::vector<int32_t>{111, 122}));
  EXPECT_FALSE(RunStatus("Mean", {T_<int32_t>({1}, {1}), T_<int32_t>({1}, {2})}).ok());
  EXPECT_FALSE(RunStatus("Max", {F32({2}, {1, 2}), F32({3}, {1, 2, 3})}).ok());
}

// ---- comparisons and Where ------------------------------------------------------------------

TEST(ElementwiseKernelTest, ComparisonsBroadcastToBool) {
  const Tensor a = T_<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = T_<int64_t>({3}, {2, 2, 7});
  EXPECT_EQ(Values<bool>(RunOp("Equal", {a, b})),
            (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_EQ(Values<bool>(RunOp("Less", {a, b})), (std::vector<bool>{true, false, true, false, false, true}));
  EXPECT_EQ(Values<bool>(RunOp("Greater", {a, b})),
            (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(Values<bool>(RunOp("LessOrEqual", {a, b})),
            (std::vector<bool>{true, true, true, false, false, true}));
  EXPECT_EQ(Values<bool>(RunOp("GreaterOrEqual", {a, b})),
            (std::vector<bool>{false, true, false, true, true, false}));
  // NaN compares unequal and unordered; half compares by value.
  EXPECT_EQ(Values<bool>(RunOp("Equal", {F32({2}, {kNaN, 1}), F32({2}, {kNaN, 1})})),
            (std::vector<bool>{false, true}));
  EXPECT_EQ(Values<bool>(RunOp("Less", {F16({2}, {-1, 2}), F16({}, {0.5f})})),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(Values<bool>(RunOp("Equal", {Bool({2}, {true, false}), Bool({}, {false})})),
            (std::vector<bool>{false, true}));
}

TEST(ElementwiseKernelTest, WhereThreeWayBroadcast) {
  const Tensor c = Bool({2, 1}, {true, false});
  const Tensor x = T_<int64_t>({3}, {1, 2, 3});
  const Tensor y = T_<int64_t>({}, {-1});
  const Tensor w = RunOp("Where", {c, x, y});
  ASSERT_EQ(w.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<int64_t>(w), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));
  const Tensor h = RunOp("Where", {Bool({3}, {false, true, false}), F16({3}, {1, 2, 3}), F16({1}, {9})});
  EXPECT_EQ(AsDoubles(h), (std::vector<double>{9, 2, 9}));
  const Tensor b = RunOp("Where", {Bool({2}, {true, false}), Bool({2}, {false, false}), Bool({2}, {true, true})});
  EXPECT_EQ(Values<bool>(b), (std::vector<bool>{false, true}));
  const Tensor f = RandomFloat({4, 5}, 21);
  const Tensor g = RandomFloat({5}, 22);
  Tensor cond(DType::kBool, {4, 5});
  for (int i = 0; i < 20; ++i) cond.data<bool>()[i] = f.data<float>()[i] > 0;
  const Tensor r = RunOp("Where", {cond, f, g});
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(r.data<float>()[i], f.data<float>()[i] > 0 ? f.data<float>()[i] : g.data<float>()[i % 5]);
  }
  EXPECT_FALSE(RunStatus("Where", {Bool({2}, {true, false}), F32({2}, {1, 2}), F32({3}, {1, 2, 3})}).ok());
}

// ---- Clip -----------------------------------------------------------------------------------

TEST(ElementwiseKernelTest, ClipOptionalBoundsAndIntegers) {
  const Tensor x = F32({5}, {-3, -0.5f, 0.25f, 2, kNaN});
  const Tensor both = RunOp("Clip", {x, F32({}, {-1}), F32({}, {1})});
  EXPECT_EQ(both.data<float>()[0], -1);
  EXPECT_EQ(both.data<float>()[1], -0.5f);
  EXPECT_EQ(both.data<float>()[2], 0.25f);
  EXPECT_EQ(both.data<float>()[3], 1);
  EXPECT_TRUE(std::isnan(both.data<float>()[4]));
  const Tensor only_max = RunOp("Clip", {x, Tensor(), F32({}, {0})});
  EXPECT_EQ(only_max.data<float>()[0], -3);
  EXPECT_EQ(only_max.data<float>()[3], 0);
  const Tensor none = RunOp("Clip", {x});
  EXPECT_EQ(none.data<float>()[0], -3);
  EXPECT_EQ(none.data<float>()[3], 2);
  // int8 with only a min; int64 with both.
  EXPECT_EQ(Values<int8_t>(RunOp("Clip", {T_<int8_t>({3}, {-128, 0, 127}), T_<int8_t>({}, {-5})})),
            (std::vector<int8_t>{-5, 0, 127}));
  EXPECT_EQ(Values<int64_t>(RunOp("Clip", {T_<int64_t>({3}, {-100, 5, 100}), T_<int64_t>({}, {0}),
                                         T_<int64_t>({}, {10})})),
            (std::vector<int64_t>{0, 5, 10}));
  EXPECT_EQ(AsDoubles(RunOp("Clip", {F16({2}, {-7, 7}), F16({}, {-2}), F16({}, {3})})),
            (std::vector<double>{-2, 3}));
}

TEST(ElementwiseKernelTest, ClipMinGreaterThanMaxGivesMax) {
  const Tensor x = RandomFloat({10}, 31, -5, 5);
  const Tensor y = RunOp("Clip", {x, F32({}, {2}), F32({}, {1})});
  for (float v : Values<float>(y)) EXPECT_EQ(v, 1.0f);
}

TEST(ElementwiseKernelTest, ClipBoundsMustBeScalarsOfTheInputType) {
  EXPECT_FALSE(RunStatus("Clip", {F32({2}, {1, 2}), F32({2}, {0, 0})}).ok());
  EXPECT_FALSE(RunStatus("Clip", {F32({2}, {1, 2}), T_<int64_t>({}, {0})}).ok());
  // A one-element [1] bound is accepted (common in exported models).
  EXPECT_EQ(Values<float>(RunOp("Clip", {F32({2}, {-1, 2}), F32({1}, {0})})), (std::vector<float>{0, 2}));
}

// ---- Cast -----------------------------------------------------------------------------------

Tensor CastTo(const Tensor& x, DType to) {
  return RunOp("Cast", {x}, {{"to", Attribute(static_cast<int64_t>(to))}});
}

TEST(CastKernelTest, FloatToIntTruncatesSaturatesAndZeroesNaN) {
  const Tensor x = F32({8}, {2.7f, -2.7f, 0.5f, -0.5f, 1e10f, -1e10f, kNaN, kInf});
  EXPECT_EQ(Values<int32_t>(CastTo(x, DType::kInt32)),
            (std::vector<int32_t>{2, -2, 0, 0, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), 0,
                                  std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(Values<uint8_t>(CastTo(x, DType::kUInt8)), (std::vector<uint8_t>{2, 0, 0, 0, 255, 0, 0, 255}));
  const Tensor big = CastTo(F32({2}, {-9.3e18f, 9.3e18f}), DType::kInt64);
  EXPECT_EQ(Values<int64_t>(big), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                                        std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(Values<int16_t>(CastTo(F16({3}, {-3.75f, 60000, 12.5f}), DType::kInt16)),
            (std::vector<int16_t>{-3, 32767, 12}));
}

TEST(CastKernelTest, BoolConversions) {
  EXPECT_EQ(Values<bool>(CastTo(F32({4}, {0, -0.0f, 0.1f, kNaN}), DType::kBool)),
            (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(Values<float>(CastTo(Bool({2}, {true, false}), DType::kFloat32)), (std::vector<float>{1, 0}));
  EXPECT_EQ(Values<bool>(CastTo(T_<int64_t>({3}, {0, -3, 256}), DType::kBool)),
            (std::vector<bool>{false, true, true}));
  EXPECT_EQ(AsDoubles(CastTo(Bool({2}, {true, false}), DType::kFloat16)), (std::vector<double>{1, 0}));
}

TEST(CastKernelTest, IntegerNarrowingWraps) {
  EXPECT_EQ(Values<int8_t>(CastTo(T_<int32_t>({3}, {300, -129, 127}), DType::kInt8)),
            (std::vector<int8_t>{44, 127, 127}));
  EXPECT_EQ(Values<uint16_t>(CastTo(T_<int64_t>({2}, {-1, 65537}), DType::kUInt16)),
            (std::vector<uint16_t>{65535, 1}));
  EXPECT_EQ(Values<int64_t>(CastTo(T_<uint64_t>({1}, {~uint64_t{0}}), DType::kInt64)),
            (std::vector<int64_t>{-1}));
}

uint16_t HalfBits(const Tensor& t, int i) { return t.data<Half>()[i].bits; }

TEST(CastKernelTest, ToHalfRoundsOnceToNearestEven) {
  // double -> f16 directly: 1 + 2^-11 + 2^-40 is just above the midpoint between 1 and
  // 1 + 2^-10, so it rounds up; double -> float -> half would round to 1 + 2^-11 first (a tie)
  // and then to even (down).
  const double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  const Tensor h = CastTo(T_<double>({5}, {v, 65504.0, 65520.0, -1e300, 1e-9}), DType::kFloat16);
  EXPECT_EQ(HalfBits(h, 0), 0x3c01);
  EXPECT_EQ(HalfBits(h, 1), 0x7bff);  // largest finite half
  EXPECT_EQ(HalfBits(h, 2), 0x7c00);  // rounds to +inf
  EXPECT_EQ(HalfBits(h, 3), 0xfc00);  // -inf
  EXPECT_EQ(HalfBits(h, 4), 0x0000);  // underflows to +0
  const Tensor n = CastTo(F32({3}, {kNaN, kInf, -kInf}), DType::kFloat16);
  EXPECT_TRUE(std::isnan(n.GetAsDouble(0)));
  EXPECT_EQ(n.GetAsDouble(1), std::numeric_limits<double>::infinity());
  EXPECT_EQ(n.GetAsDouble(2), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(AsDoubles(CastTo(T_<int32_t>({3}, {2049, -7, 100000}), DType::kFloat16)),
            (std::vector<double>{2048, -7, std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(AsDoubles(CastTo(T_<int64_t>({2}, {257, -3}), DType::kBFloat16)),
            (std::vector<double>{256, -3}));
}

TEST(CastKernelTest, FromHalfAndBFloat16) {
  const Tensor h = F16({4}, {1.5f, -2, 65504, 0.000061035156f});
  EXPECT_EQ(AsDoubles(CastTo(h, DType::kFloat64)), AsDoubles(h));
  EXPECT_EQ(Values<float>(CastTo(h, DType::kFloat32)),
            (std::vector<float>{1.5f, -2, 65504, 0.000061035156f}));
  EXPECT_EQ(AsDoubles(CastTo(h, DType::kBFloat16)), (std::vector<double>{1.5, -2, 65536, 0.00006103515625}));
  EXPECT_EQ(Values<int64_t>(CastTo(BF16({2}, {-3.5f, 1024}), DType::kInt64)),
            (std::vector<int64_t>{-3, 1024}));
}

TEST(CastKernelTest, EveryPairRoundTripsSmallIntegers) {
  const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                    DType::kBFloat16, DType::kInt8,    DType::kInt16,
                                    DType::kInt32,   DType::kInt64,   DType::kUInt8,
                                    DType::kUInt16,  DType::kUInt32,  DType::kUInt64,
                                    DType::kBool};
  const Tensor src = T_<int64_t>({2, 3}, {0, 1, 2, 3, 5, 100});
  for (DType from : types) {
    absl::StatusOr<Tensor> x = runtime::cpu::ew::CastTensor(src, from);
    ASSERT_TRUE(x.ok());
    for (DType to : types) {
      const Tensor y = CastTo(*x, to);
      ASSERT_EQ(y.dtype(), to);
      ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
      for (int i = 0; i < 6; ++i) {
        const double want = (from == DType::kBool || to == DType::kBool) ? (i != 0) : src.GetAsDouble(i);
        EXPECT_EQ(y.GetAsDouble(i), want) << ir::DTypeName(from) << " -> " << ir::DTypeName(to);
      }
    }
  }
}

TEST(CastKernelTest, CastLikeAndSaturateAttribute) {
  const Tensor x = F32({3}, {1.9f, -1.9f, 3});
  const Tensor y = RunOp("CastLike", {x, T_<int16_t>({}, {0})});
  EXPECT_EQ(Values<int16_t>(y), (std::vector<int16_t>{1, -1, 3}));
  // saturate only matters for float8; accepted.
  const Tensor z = RunOp("Cast", {x}, {{"to", Attribute(int64_t{11})}, {"saturate", Attribute(int64_t{0})}});
  EXPECT_EQ(z.dtype(), DType::kFloat64);
  EXPECT_FLOAT_EQ(static_cast<float>(z.data<double>()[0]), 1.9f);
  // Same type: the output is the input's value.
  EXPECT_TRUE(CastTo(x, DType::kFloat32).BitwiseEquals(x));
}

}  // namespace
}  // namespace ottr::testing
