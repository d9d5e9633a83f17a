// Tests of the CUDA elementwise and activation ops (runtime/cuda/elementwise_ops.cc,
// activation_ops.cc, kernels/elementwise*.cu, kernels/activation*.cu).
//
// Without a device: the broadcast plans (dim collapsing, magic-number division) and the registry.
// With one (CudaElementwiseTest, label gpu): every op on every element type it takes, on random
// inputs (never all zero) and on the shapes that pick each kernel path (same shape, scalar
// operand, bias row, column, general rank up to 8, packs with and without a tail, empty), against
// the CPU reference. Many nodes go into one graph, run once on the CPU executor and once on the
// CUDA executor (which poisons its arena, so an element a kernel fails to write shows up).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/tensor.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"
#include "tests/test_util.h"

#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/elementwise_plan.h"
#endif

namespace ottr::testing {
namespace {

#ifdef OTTR_HAVE_CUDA

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Attrs = std::map<std::string, Attribute>;

const std::string kOttr(ir::kOttrDomain);

// ---- Plans (no device needed) -----------------------------------------------------------------

uint64_t DivideLikeTheKernel(uint64_t n, const cuda::kernels::FastDivisor& d) {
  const uint64_t hi = static_cast<uint64_t>((static_cast<unsigned __int128>(n) * d.magic) >> 64);
  return (hi + n) >> d.shift;
}

TEST(CudaElementwisePlanTest, FastDivisorIsExact) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> divisors = {1, 2, 3, 5, 7, 10, 31, 32, 33, 255, 256, 1000, 4096, 65535,
                                    1000003, (uint64_t{1} << 31) - 1, uint64_t{1} << 31,
                                    (uint64_t{1} << 40) + 7};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % 100000);
  for (int i = 0; i < 50; ++i) divisors.push_back(1 + (rng() >> 20));
  for (uint64_t d : divisors) {
    const cuda::kernels::FastDivisor f = cuda::kernels::MakeFastDivisor(d);
    std::vector<uint64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, (uint64_t{1} << 63) - 1,
                                (uint64_t{1} << 62) + 12345, (uint64_t{1} << 32) + 1};
    for (int i = 0; i < 200; ++i) ns.push_back(rng() >> 1);
    for (int i = 0; i < 200; ++i) ns.push_back(rng() % (1 << 24));
    for (uint64_t n : ns) {
      ASSERT_EQ(DivideLikeTheKernel(n, f), n / d) << "n = " << n << ", d = " << d;
    }
  }
}

TEST(CudaElementwisePlanTest, CollapsesBroadcastDims) {
  using cuda::kernels::IndexPlan;
  using cuda::kernels::MakeIndexPlan;
  std::string error;
  IndexPlan<2> p;
  // Same shapes: one contiguous dim.
  ASSERT_TRUE(MakeIndexPlan<2>({3, 5, 7}, {{3, 5, 7}, {3, 5, 7}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.n, 105);
  EXPECT_EQ(p.dims[0].divisor, 105u);
  EXPECT_EQ(p.strides[0][0], 1);
  EXPECT_EQ(p.strides[0][1], 1);
  // A scalar operand: stride 0.
  ASSERT_TRUE(MakeIndexPlan<2>({4, 6}, {{4, 6}, {}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.strides[0][1], 0);
  EXPECT_TRUE(p.inner_contiguous[0]);
  EXPECT_FALSE(p.inner_contiguous[1]);
  // Bias row [M, N] + [N]: innermost N with strides {1, 1}, then M with strides {N, 0}.
  ASSERT_TRUE(MakeIndexPlan<2>({64, 32}, {{64, 32}, {32}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.dims[0].divisor, 32u);
  EXPECT_EQ(p.dims[1].divisor, 64u);
  EXPECT_EQ(p.strides[1][0], 32);
  EXPECT_EQ(p.strides[1][1], 0);
  EXPECT_TRUE(p.inner_contiguous[1]);
  // [N, C, H, W] + [C, 1, 1]: H and W merge; N is separate from C.
  ASSERT_TRUE(MakeIndexPlan<2>({2, 3, 4, 5}, {{2, 3, 4, 5}, {3, 1, 1}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.dims[0].divisor, 20u);
  EXPECT_EQ(p.dims[1].divisor, 3u);
  EXPECT_EQ(p.dims[2].divisor, 2u);
  EXPECT_EQ(p.strides[0][1], 0);
  EXPECT_EQ(p.strides[1][1], 1);
  EXPECT_EQ(p.strides[2][1], 0);
  EXPECT_EQ(p.strides[2][0], 60);
  // Size-1 output dims vanish.
  ASSERT_TRUE(MakeIndexPlan<2>({1, 8, 1}, {{8, 1}, {1, 1, 1}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.dims[0].divisor, 8u);
  // All ones.
  ASSERT_TRUE(MakeIndexPlan<2>({1, 1}, {{1}, {1, 1}}, &p, &error)) << error;
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.n, 1);
  // Errors: incompatible dims, more than kMaxRank dims after merging.
  EXPECT_FALSE(MakeIndexPlan<2>({4, 6}, {{4, 6}, {5}}, &p, &error));
  EXPECT_NE(error.find("cannot broadcast"), std::string::npos) << error;
  EXPECT_FALSE(MakeIndexPlan<2>({2, 2, 2, 2, 2, 2, 2, 2, 2},
                                {{2, 1, 2, 1, 2, 1, 2, 1, 2}, {1, 2, 1, 2, 1, 2, 1, 2, 1}}, &p,
                                &error));
  EXPECT_NE(error.find("at most 8"), std::string::npos) << error;
}

TEST(CudaElementwiseRegistryTest, EveryOpHasACudaKernel) {
  const std::vector<std::string> onnx_ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal",
      "Ceil", "Floor", "Round", "Sign", "Erf", "Sin", "Cos", "Not", "Sum", "Mean", "Max", "Min",
      "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
      "Clip", "Cast", "CastLike", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Gelu",
      "Softplus", "Softsign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
      "ThresholdedRelu", "Mish"};
  for (const std::string& op : onnx_ops) {
    EXPECT_NE(cuda::CudaOpRegistry::Global().Find("", op), nullptr) << op;
  }
  const std::vector<std::string> grad_ops = {
      "ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "EluGrad", "SeluGrad",
      "CeluGrad", "SoftplusGrad", "HardSigmoidGrad", "HardSwishGrad", "MishGrad", "SoftsignGrad",
      "ThresholdedReluGrad", "PReluGrad"};
  for (const std::string& op : grad_ops) {
    EXPECT_NE(cuda::CudaOpRegistry::Global().Find(kOttr, op), nullptr) << op;
    EXPECT_NE(ir::OpRegistry::Global().Find(kOttr, op), nullptr) << op;
  }
}

// ---- GPU against CPU ----------------------------------------------------------------------------

const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                        DType::kBFloat16};
const std::vector<DType> kIntTypes = {DType::kInt8,  DType::kInt16,  DType::kInt32,
                                      DType::kInt64, DType::kUInt8,  DType::kUInt16,
                                      DType::kUInt32, DType::kUInt64};

std::vector<DType> NumericTypes() {
  std::vector<DType> t = kFloatTypes;
  t.insert(t.end(), kIntTypes.begin(), kIntTypes.end());
  return t;
}

bool IsUnsigned(DType t) {
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64;
}

Tensor Cast(const Tensor& t, DType to) {
  absl::StatusOr<Tensor> r = runtime::cpu::ew::CastTensor(t, to);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor();
}

// Random values of type `t`: floats uniform in [lo, hi), integers uniform in [lo, hi] (clamped
// to [0, hi] for unsigned types), bools 0/1.
Tensor Rand(DType t, std::vector<int64_t> dims, uint64_t seed, double lo = -4, double hi = 4) {
  if (ir::IsFloat(t)) return Cast(RandomFloat(dims, seed, static_cast<float>(lo), static_cast<float>(hi)), t);
  if (t == DType::kBool) return Cast(RandomInt64(dims, seed, 0, 1), t);
  const int64_t l = IsUnsigned(t) ? std::max<int64_t>(0, static_cast<int64_t>(lo)) : static_cast<int64_t>(lo);
  return Cast(RandomInt64(dims, seed, l, static_cast<int64_t>(hi)), t);
}

// Random non-zero divisors: |v| in [1, hi] with a random sign where the type has one.
Tensor RandDivisor(DType t, std::vector<int64_t> dims, uint64_t seed) {
  Tensor mag = RandomFloat(dims, seed, 1.0f, 9.0f);
  std::mt19937_64 rng(seed + 99);
  for (float& v : mag.span<float>()) {
    if (!ir::IsFloat(t)) v = std::floor(v);
    if (!IsUnsigned(t) && (rng() & 1)) v = -v;
  }
  return Cast(mag, t);
}

struct Tolerance {
  double rtol;
  double atol;
};

Tolerance DefaultTolerance(DType t) {
  switch (t) {
    case DType::kFloat32: return {2e-5, 1e-6};
    case DType::kFloat64: return {1e-12, 1e-14};
    case DType::kFloat16: return {2e-3, 2e-5};
    case DType::kBFloat16: return {1.6e-2, 1e-4};
    default: return {0, 0};
  }
}

// Many single-node cases in one graph, run once on each executor.
class Batch {
 public:
  explicit Batch(std::string name) : g_(std::move(name)) {
    g_.set_opset_import("", ir::kMaxOnnxOpset);
    g_.set_opset_import(kOttr, 1);
  }

  // A node `op` over fresh graph inputs (an undefined tensor is an omitted input; inputs whose
  // index is in `initializers` become initializers instead of fed inputs).
  void Add(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
           const std::string& domain = "", int num_outputs = 1, std::vector<int> initializers = {},
           std::optional<Tolerance> tol = std::nullopt) {
    const std::string id = absl::StrCat("n", nodes_++);
    ir::NodeSpec spec{op, domain, {}, {}, attrs, id};
    std::string label = absl::StrCat(id, " ", op, "(");
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        spec.inputs.push_back(nullptr);
        absl::StrAppend(&label, i ? ", " : "", "-");
        continue;
      }
      const std::string name = absl::StrCat(id, "_in", i);
      absl::StrAppend(&label, i ? ", " : "", inputs[i].type().ToString());
      const bool init = std::find(initializers.begin(), initializers.end(), static_cast<int>(i)) != initializers.end();
      absl::StatusOr<ir::Value*> v = init ? g_.AddInitializer(name, inputs[i]) : g_.AddInput(name, inputs[i].type());
      ASSERT_TRUE(v.ok()) << v.status();
      spec.inputs.push_back(*v);
      if (!init) feeds_[name] = inputs[i];
    }
    for (const auto& [k, a] : attrs) absl::StrAppend(&label, ", ", k);
    absl::StrAppend(&label, ")");
    for (int i = 0; i < num_outputs; ++i) spec.output_names.push_back(absl::StrCat(id, "_out", i));
    absl::StatusOr<ir::Node*> n = g_.AddNode(std::move(spec));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_TRUE(ir::OpRegistry::Global().CheckNode(**n, g_.opset(domain)).ok()) << label;
    for (int i = 0; i < num_outputs; ++i) {
      g_.AddOutput((*n)->output(i));
      labels_.push_back(absl::StrCat(label, " output ", i));
      tolerances_.push_back(tol);
    }
  }

  void RunAndCompare() {
    ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g_).ok());
    absl::StatusOr<std::unique_ptr<runtime::cpu::CpuExecutor>> cpu = runtime::cpu::CpuExecutor::Create(g_);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    absl::StatusOr<std::vector<Tensor>> want = (*cpu)->Run(feeds_);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutor>> gpu = cuda::CudaExecutor::Create(g_);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    absl::StatusOr<std::vector<Tensor>> got = (*gpu)->Run(feeds_);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) Compare((*want)[i], (*got)[i], i);
  }

 private:
  void Compare(const Tensor& want, const Tensor& got, size_t i) {
    const std::string& label = labels_[i];
    ASSERT_EQ(want.type(), got.type()) << label;
    if (!ir::IsFloat(want.dtype())) {
      ASSERT_EQ(std::memcmp(want.raw_data(), got.raw_data(), want.nbytes()), 0) << label;
      return;
    }
    const Tolerance tol = tolerances_[i].value_or(DefaultTolerance(want.dtype()));
    const Tensor w = Cast(want, DType::kFloat64), g = Cast(got, DType::kFloat64);
    int reported = 0;
    for (int64_t k = 0; k < w.num_elements(); ++k) {
      const double a = w.data<double>()[k], b = g.data<double>()[k];
      if (std::isnan(a) && std::isnan(b)) continue;
      if (a == b) continue;
      const bool ok = std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(a);
      if (!ok && reported++ < 5) {
        ADD_FAILURE() << label << " element " << k << ": CPU " << a << ", CUDA " << b;
      }
    }
  }

  ir::Graph g_;
  runtime::TensorMap feeds_;
  int nodes_ = 0;
  std::vector<std::string> labels_;
  std::vector<std::optional<Tolerance>> tolerances_;
};

class CudaElementwiseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

// Shape pairs that select each kernel path (see kernels/elementwise.h).
const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> kShapePairs = {
    {{3, 5, 8}, {3, 5, 8}},                               // same shape, packs
    {{3, 5, 7}, {3, 5, 7}},                               // same shape, pack tail
    {{}, {4, 6}},                                         // scalar first
    {{4, 6}, {1}},                                        // scalar second
    {{64, 32}, {32}},                                     // bias row, packs
    {{64, 33}, {33}},                                     // bias row, one element per thread
    {{16, 1}, {16, 8}},                                   // column
    {{2, 3, 4, 5}, {3, 1, 5}},                            // general
    {{4, 1, 6}, {1, 5, 1}},                               // both broadcast
    {{2, 1, 3, 1, 2, 1, 3, 1}, {1, 2, 1, 3, 1, 2, 1, 2}},  // 8 collapsed dims
    {{0, 3}, {3}},                                        // empty
};

TEST_F(CudaElementwiseTest, ArithmeticEveryTypeAndShape) {
  uint64_t seed = 1;
  for (DType t : NumericTypes()) {
    Batch b(absl::StrCat("arith_", ir::DTypeName(t)));
    for (const auto& [sa, sb] : kShapePairs) {
      const Tensor x = Rand(t, sa, ++seed, -50, 50);
      const Tensor y = Rand(t, sb, ++seed, -50, 50);
      for (const char* op : {"Add", "Sub", "Mul"}) b.Add(op, {x, y});
      const Tensor d = RandDivisor(t, sb, ++seed);
      b.Add("Div", {x, d});
      b.Add("Mod", {x, d}, {{"fmod", Attribute(int64_t{0})}});
      if (ir::IsFloat(t)) b.Add("Mod", {x, d}, {{"fmod", Attribute(int64_t{1})}});
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, IntegerWrapAndSpecialQuotients) {
  Batch b("int_special");
  Tensor a(DType::kInt32, {6});
  Tensor d(DType::kInt32, {6});
  const int32_t av[] = {INT32_MIN, INT32_MIN, 7, -7, 7, INT32_MAX};
  const int32_t dv[] = {-1, 1, -2, 2, 3, -1};
  for (int i = 0; i < 6; ++i) a.data<int32_t>()[i] = av[i], d.data<int32_t>()[i] = dv[i];
  b.Add("Div", {a, d});
  b.Add("Mod", {a, d});
  b.Add("Add", {a, a});
  b.Add("Mul", {a, d});
  b.Add("Neg", {a});
  b.Add("Abs", {a});
  b.RunAndCompare();
}

TEST_F(CudaElementwiseTest, IntegerDivisionByZero) {
  // A run-time zero divisor gives 0 (the CPU reports an error instead).
  {
    ir::Graph g("div0");
    g.set_opset_import("", ir::kMaxOnnxOpset);
    ir::Value* x = *g.AddInput("x", ir::TensorType(DType::kInt32, ir::ShapeFromDims({4})));
    ir::Value* y = *g.AddInput("y", ir::TensorType(DType::kInt32, ir::ShapeFromDims({4})));
    ir::Node* q = *g.AddNode({"Div", "", {x, y}, {"q"}, {}, "div"});
    ir::Node* r = *g.AddNode({"Mod", "", {x, y}, {"r"}, {}, "mod"});
    g.AddOutput(q->output(0));
    g.AddOutput(r->output(0));
    ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
    Tensor xv(DType::kInt32, {4}), yv(DType::kInt32, {4});
    const int32_t xs[] = {9, -9, 5, 6}, ys[] = {0, 2, 0, -4};
    for (int i = 0; i < 4; ++i) xv.data<int32_t>()[i] = xs[i], yv.data<int32_t>()[i] = ys[i];
    auto exec = cuda::CudaExecutor::Create(g);
    ASSERT_TRUE(exec.ok()) << exec.status();
    auto out = (*exec)->Run({{"x", xv}, {"y", yv}});
    ASSERT_TRUE(out.ok()) << out.status();
    const int32_t want_q[] = {0, -4, 0, -1}, want_r[] = {0, 1, 0, -2};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ((*out)[0].data<int32_t>()[i], want_q[i]) << i;
      EXPECT_EQ((*out)[1].data<int32_t>()[i], want_r[i]) << i;
    }
  }
  // A compile-time constant divisor holding a zero is an error, as on the CPU.
  {
    ir::Graph g("div0_const");
    g.set_opset_import("", ir::kMaxOnnxOpset);
    Tensor zero(DType::kInt64, {2});
    zero.data<int64_t>()[0] = 3;
    zero.data<int64_t>()[1] = 0;
    ir::Value* x = *g.AddInput("x", ir::TensorType(DType::kInt64, ir::ShapeFromDims({2})));
    ir::Value* y = *g.AddInitializer("y", zero);
    ir::Node* q = *g.AddNode({"Div", "", {x, y}, {"q"}, {}, "div"});
    g.AddOutput(q->output(0));
    ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
    auto exec = cuda::CudaExecutor::Create(g);
    ASSERT_TRUE(exec.ok()) << exec.status();
    auto out = (*exec)->Run({{"x", RandomInt64({2}, 3, 1, 9)}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("division by zero"), std::string::npos) << out.status();
  }
}

TEST_F(CudaElementwiseTest, PowEveryTypePair) {
  uint64_t seed = 100;
  for (DType tb : NumericTypes()) {
    Batch b(absl::StrCat("pow_", ir::DTypeName(tb)));
    for (DType te : NumericTypes()) {
      // Bases in [-4, 4] (floats also fractional); exponents small, integral for integer bases
      // so that truncated results are exact on both sides.
      const Tensor x = Rand(tb, {5, 8}, ++seed, -4, 4);
      Tensor e;
      if (ir::IsFloat(te) && ir::IsFloat(tb)) {
        e = Rand(te, {5, 8}, ++seed, -2, 3);
      } else {
        e = Rand(te, {5, 8}, ++seed, IsUnsigned(te) ? 0 : -2, 5);
        if (ir::IsFloat(te)) e = Cast(Cast(e, DType::kInt64), te);  // integral values
      }
      b.Add("Pow", {x, e});
      b.Add("Pow", {x, Cast(Tensor::Scalar(2.0f), te)});
      b.Add("Pow", {Rand(tb, {4, 1, 6}, ++seed, 0, 4), Cast(Cast(Rand(te, {5, 1}, ++seed, 0, 3), DType::kInt64), te)});
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, ComparisonsAndLogic) {
  uint64_t seed = 300;
  std::vector<DType> types = NumericTypes();
  types.push_back(DType::kBool);
  for (DType t : types) {
    Batch b(absl::StrCat("cmp_", ir::DTypeName(t)));
    for (const auto& [sa, sb] : kShapePairs) {
      // Small integers (also for floats) so that equal pairs occur.
      const Tensor x = Cast(Rand(DType::kInt64, sa, ++seed, 0, 3), t);
      const Tensor y = Cast(Rand(DType::kInt64, sb, ++seed, 0, 3), t);
      for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
        b.Add(op, {x, y});
      }
      if (t == DType::kBool) {
        for (const char* op : {"And", "Or", "Xor"}) b.Add(op, {x, y});
        b.Add("Not", {x});
      }
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, Where) {
  uint64_t seed = 400;
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt8, DType::kInt64,
                  DType::kBool}) {
    Batch b(absl::StrCat("where_", ir::DTypeName(t)));
    const std::vector<std::vector<std::vector<int64_t>>> shapes = {
        {{4, 8}, {4, 8}, {4, 8}}, {{4, 7}, {4, 7}, {}}, {{8}, {3, 8}, {3, 1}},
        {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}}, {{0, 2}, {2}, {1}}, {{1000}, {1000}, {1000}}};
    for (const auto& s : shapes) {
      b.Add("Where", {Rand(DType::kBool, s[0], ++seed), Rand(t, s[1], ++seed), Rand(t, s[2], ++seed)});
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, UnaryMath) {
  uint64_t seed = 500;
  for (DType t : NumericTypes()) {
    Batch b(absl::StrCat("unary_", ir::DTypeName(t)));
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{7, 9}, {1024}, {0}}) {
      Tensor x = Rand(t, dims, ++seed, -6, 6);
      if (ir::IsFloat(t) && x.num_elements() > 8) {
        // Halves and the odd special value: Round's ties, signed zero, infinities, NaN.
        Tensor f = Cast(x, DType::kFloat32);
        const float special[] = {0.5f, 1.5f, -2.5f, -0.0f, 0.0f, INFINITY, -INFINITY, NAN};
        for (int i = 0; i < 8; ++i) f.data<float>()[i] = special[i];
        x = Cast(f, t);
      }
      const bool is_signed = !IsUnsigned(t);
      if (is_signed) b.Add("Neg", {x});
      b.Add("Abs", {x});
      b.Add("Sign", {x});
      b.Add("Erf", {x});
      if (ir::IsFloat(t)) {
        for (const char* op : {"Sqrt", "Exp", "Log", "Reciprocal", "Ceil", "Floor", "Round", "Sin", "Cos"}) {
          b.Add(op, {x});
        }
      }
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, Variadic) {
  uint64_t seed = 600;
  for (DType t : NumericTypes()) {
    Batch b(absl::StrCat("variadic_", ir::DTypeName(t)));
    const std::vector<std::vector<std::vector<int64_t>>> cases = {
        {{5, 8}},
        {{5, 8}, {5, 8}},
        {{5, 7}, {7}, {5, 1}},
        {{3, 1, 4}, {1, 2, 1}, {4}, {3, 2, 4}},
        // 10 inputs: two chunks
        {{4, 8}, {8}, {4, 8}, {4, 1}, {}, {4, 8}, {4, 8}, {1, 8}, {4, 8}, {4, 8}},
        {{0, 3}, {3}},
    };
    for (const auto& c : cases) {
      std::vector<Tensor> in;
      for (const auto& dims : c) in.push_back(Rand(t, dims, ++seed, -20, 20));
      if (ir::IsFloat(t) && in[0].num_elements() > 2) {
        Tensor f = Cast(in[0], DType::kFloat32);
        f.data<float>()[1] = NAN;  // Max/Min propagate NaN
        in[0] = Cast(f, t);
      }
      for (const char* op : {"Sum", "Max", "Min"}) b.Add(op, in);
      if (ir::IsFloat(t)) b.Add("Mean", in);
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, Clip) {
  uint64_t seed = 700;
  for (DType t : NumericTypes()) {
    Batch b(absl::StrCat("clip_", ir::DTypeName(t)));
    const Tensor x = Rand(t, {33, 5}, ++seed, -20, 20);
    const Tensor lo = Cast(Tensor::Scalar(IsUnsigned(t) ? 3.0f : -5.0f), t);
    const Tensor hi = Cast(Tensor::Scalar(7.0f), t);
    b.Add("Clip", {x});
    b.Add("Clip", {x, lo});
    b.Add("Clip", {x, Tensor(), hi});
    b.Add("Clip", {x, lo, hi});
    b.Add("Clip", {x, hi, lo});  // min > max: every element becomes max
    b.Add("Clip", {x, lo, hi}, {}, "", 1, {1, 2});  // bounds as initializers
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, CastEveryPair) {
  std::vector<DType> types = NumericTypes();
  types.push_back(DType::kBool);
  // Floats with fractions, ties, out-of-range values for every integer type, NaN and infinities.
  Tensor f(DType::kFloat64, {40});
  const double fv[] = {0.0, -0.0, 0.4, 0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 3.9, 127.5, 128.0, -129.0,
                       255.9, 256.0, -1.0, 32767.0, 40000.0, 65504.0, 65520.0, 70000.0, -70000.0,
                       2147483647.0, 2147483648.0, -2147483649.0, 4294967296.0, 1e19, -1e19, 3e38,
                       1e300, -1e300, 1e-300, 1e-8, 6e-8, 1.0000001, 0.1, NAN, INFINITY, -INFINITY,
                       12345.678};
  for (int i = 0; i < 40; ++i) f.data<double>()[i] = fv[i];
  uint64_t seed = 800;
  for (DType from : types) {
    Batch b(absl::StrCat("cast_from_", ir::DTypeName(from)));
    Tensor x;
    if (ir::IsFloat(from)) {
      x = Cast(f, from);
    } else if (from == DType::kBool) {
      x = Rand(from, {40}, ++seed);
    } else {
      // The whole range of the type (RandomInt64 over int64, wrapped by the cast) plus extremes.
      Tensor r = RandomInt64({40}, ++seed, INT64_MIN, INT64_MAX);
      r.data<int64_t>()[0] = 0;
      r.data<int64_t>()[1] = -1;
      r.data<int64_t>()[2] = 1;
      r.data<int64_t>()[3] = (int64_t{1} << 53) + 1;  // not representable in double
      x = Cast(r, from);
    }
    for (DType to : types) {
      b.Add("Cast", {x}, {{"to", Attribute(static_cast<int64_t>(ir::DTypeToOnnx(to)))}}, "", 1, {},
            Tolerance{0, 0});
      b.Add("CastLike", {x, Tensor(to, {1})}, {}, "", 1, {}, Tolerance{0, 0});
    }
    b.RunAndCompare();
  }
}

struct ActivationCase {
  std::string op;
  Attrs attrs;
};

std::vector<ActivationCase> ActivationCases() {
  return {
      {"Relu", {}},
      {"LeakyRelu", {}},
      {"LeakyRelu", {{"alpha", Attribute(0.3f)}}},
      {"Sigmoid", {}},
      {"Tanh", {}},
      {"Gelu", {}},
      {"Gelu", {{"approximate", Attribute("tanh")}}},
      {"Softplus", {}},
      {"Softsign", {}},
      {"Elu", {}},
      {"Elu", {{"alpha", Attribute(0.4f)}}},
      {"Selu", {}},
      {"Selu", {{"alpha", Attribute(2.0f)}, {"gamma", Attribute(0.5f)}}},
      {"Celu", {}},
      {"Celu", {{"alpha", Attribute(0.25f)}}},
      {"HardSigmoid", {}},
      {"HardSigmoid", {{"alpha", Attribute(0.5f)}, {"beta", Attribute(0.3f)}}},
      {"HardSwish", {}},
      {"ThresholdedRelu", {}},
      {"ThresholdedRelu", {{"alpha", Attribute(-0.5f)}}},
      {"Mish", {}},
  };
}

// x in [-8, 8] with the branch points and tails in the first elements.
Tensor ActivationInput(DType t, std::vector<int64_t> dims, uint64_t seed) {
  Tensor x = RandomFloat(dims, seed, -8.0f, 8.0f);
  const float special[] = {0.0f,  -0.0f, 1.0f,   -1.0f, 3.0f,   -3.0f,   -0.5f,  20.0f,
                           -20.0f, 21.5f, -30.0f, 45.0f, -45.0f, 100.0f, -100.0f, 1e-4f,
                           -1e-4f, 88.0f, -88.0f, -200.0f};
  for (size_t i = 0; i < std::size(special) && i < static_cast<size_t>(x.num_elements()); ++i) {
    x.data<float>()[i] = special[i];
  }
  return Cast(x, t);
}

TEST_F(CudaElementwiseTest, Activations) {
  uint64_t seed = 900;
  for (DType t : kFloatTypes) {
    Batch b(absl::StrCat("act_", ir::DTypeName(t)));
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{6, 25}, {1000003}, {0, 4}}) {
      const Tensor x = ActivationInput(t, dims, ++seed);
      for (const ActivationCase& c : ActivationCases()) b.Add(c.op, {x}, c.attrs);
    }
    b.RunAndCompare();
  }
  Batch ints("relu_int");
  for (DType t : {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64}) {
    ints.Add("Relu", {Rand(t, {37}, ++seed, -50, 50)});
  }
  ints.RunAndCompare();
}

TEST_F(CudaElementwiseTest, ActivationGrads) {
  uint64_t seed = 1000;
  for (DType t : kFloatTypes) {
    Batch b(absl::StrCat("act_grad_", ir::DTypeName(t)));
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{6, 25}, {4096, 128}, {1000003}, {0, 4}}) {
      const Tensor x = ActivationInput(t, dims, ++seed);
      const Tensor dy = Rand(t, dims, ++seed, -2, 2);
      for (const ActivationCase& c : ActivationCases()) {
        Tensor z = x;
        if (c.op == "Sigmoid") z = Rand(t, dims, ++seed, 0, 1);
        if (c.op == "Tanh") z = Rand(t, dims, ++seed, -1, 1);
        b.Add(c.op + "Grad", {dy, z}, c.attrs, kOttr);
      }
    }
    b.RunAndCompare();
  }
}

TEST_F(CudaElementwiseTest, PReluAndPReluGrad) {
  uint64_t seed = 1100;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3, 4, 5}, {3, 1, 1}},  // per channel
      {{2, 3, 4, 5}, {1}},         // one slope
      {{6, 7}, {6, 7}},            // full: no reduction
      {{4, 5000}, {5000}},         // many slopes, short sums (one thread each)
      {{64, 3, 100}, {3, 1}},      // long sums in chunks
      {{100000}, {}},              // one long sum in chunks
      {{2, 3}, {4, 2, 3}},         // slope larger than X
      {{0, 3}, {3}},               // empty: dSlope = 0
  };
  for (DType t : kFloatTypes) {
    Batch b(absl::StrCat("prelu_", ir::DTypeName(t)));
    for (const auto& [xs, ss] : shapes) {
      const Tensor x = Rand(t, xs, ++seed, -3, 3);
      const Tensor slope = Rand(t, ss, ++seed, -1, 1);
      b.Add("PRelu", {x, slope});
      std::optional<std::vector<int64_t>> out = ir::BroadcastDims(xs, ss);
      const Tensor dy = Rand(t, *out, ++seed, -2, 2);
      // dSlope sums up to 10^5 products: the order differs from the CPU's, so allow a little
      // more than one rounding for float32.
      std::optional<Tolerance> tol;
      if (t == DType::kFloat32) tol = Tolerance{1e-4, 1e-5};
      b.Add("PReluGrad", {dy, x, slope}, {}, kOttr, 2, {}, tol);
    }
    b.RunAndCompare();
  }
  Batch ints("prelu_int");
  for (DType t : kIntTypes) {
    ints.Add("PRelu", {Rand(t, {4, 6}, ++seed, -9, 9), Rand(t, {6}, ++seed, -3, 3)});
  }
  ints.RunAndCompare();
}

TEST_F(CudaElementwiseTest, LargeTensorsUseEveryThread) {
  // More elements than the grid has threads (grid-stride loops), an odd size (pack tail).
  Batch b("large");
  const int64_t n = 132 * 32 * 256 * 4 * 2 + 3;
  const Tensor x = RandomFloat({n}, 1);
  const Tensor y = RandomFloat({n}, 2);
  b.Add("Add", {x, y});
  b.Add("ReluGrad", {x, y}, {}, kOttr);
  b.Add("Relu", {x});
  b.Add("Cast", {x}, {{"to", Attribute(static_cast<int64_t>(DType::kFloat16))}});
  const Tensor m = RandomFloat({n / 1000, 1000}, 3);
  b.Add("Add", {m, RandomFloat({1000}, 4)});
  b.RunAndCompare();
}

// Memory-bound speed of the hot elementwise paths (printed; on an H200 a device-to-device copy
// moves about 4.3 TB/s). The bound checked is loose so that any recent datacenter GPU passes;
// the numbers are for reading.
TEST_F(CudaElementwiseTest, HotPathBandwidth) {
  const int64_t m = 8192, n = 4096;
  ir::Graph g("bandwidth");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  g.set_opset_import(kOttr, 1);
  const ir::TensorType mat(DType::kFloat32, ir::ShapeFromDims({m, n}));
  ir::Value* dy = *g.AddInput("dy", mat);
  ir::Value* y = *g.AddInput("y", mat);
  ir::Value* bias = *g.AddInput("bias", ir::TensorType(DType::kFloat32, ir::ShapeFromDims({n})));
  struct Case {
    const char* op;
    const char* domain;
    std::vector<ir::Value*> in;
    double bytes;
  };
  const double e = static_cast<double>(m * n) * 4;
  const std::vector<Case> cases = {{"ReluGrad", "ottr", {dy, y}, 3 * e},
                                   {"Add", "", {dy, y}, 3 * e},
                                   {"Add", "", {dy, bias}, 2 * e},
                                   {"Relu", "", {y}, 2 * e},
                                   {"Mul", "", {dy, y}, 3 * e}};
  for (size_t i = 0; i < cases.size(); ++i) {
    absl::StatusOr<ir::Node*> node = g.AddNode(
        {cases[i].op, cases[i].domain, cases[i].in, {absl::StrCat("out", i)}, {}, absl::StrCat("n", i)});
    ASSERT_TRUE(node.ok()) << node.status();
    g.AddOutput((*node)->output(0));
  }
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), g).ok());
  auto exec = cuda::CudaExecutor::Create(g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_TRUE((*exec)->Prepare({{"dy", RandomFloat({m, n}, 1)}, {"y", RandomFloat({m, n}, 2)},
                                {"bias", RandomFloat({n}, 3)}}).ok());
  auto times = (*exec)->TimeNodes(20);
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_EQ(times->size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const double us = (*times)[i].second;
    const double tbs = cases[i].bytes / (us * 1e-6) / 1e12;
    std::printf("%-8s %-32s %9.1f us %6.2f TB/s\n", cases[i].op, (*times)[i].first->Describe().c_str(), us, tbs);
    EXPECT_GT(tbs, 1.0) << cases[i].op;
  }
}

#endif  // OTTR_HAVE_CUDA

}  // namespace
}  // namespace ottr::testing
