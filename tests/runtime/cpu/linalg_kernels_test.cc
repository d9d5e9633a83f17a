// Tests of the MatMul and Gemm schemas, shape functions and CPU kernels against naive references
// written out here (double accumulation, or exact integer arithmetic).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "runtime/cpu/gemm.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

// Converts a tensor elementwise to `dtype` (through double).
Tensor Convert(const Tensor& t, DType dtype) {
  Tensor out(dtype, t.dims());
  ir::VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        out.data<T>()[i] = ir::FromDouble<T>(t.GetAsDouble(i));
      }
    }
  });
  return out;
}

Tensor RandomOf(DType dtype, std::vector<int64_t> dims, uint64_t seed) {
  if (ir::IsInteger(dtype)) return Convert(RandomInt64(std::move(dims), seed, -50, 50), dtype);
  return Convert(RandomFloat(std::move(dims), seed), dtype);
}

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual.GetAsDouble(i), expected[i], tol * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

absl::StatusOr<std::unique_ptr<ir::Graph>> InferText(const std::string& text) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  if (!s.ok()) return s;
  return std::move(*g);
}

std::string TypeOf(const ir::Graph& g, const std::string& name) {
  return g.FindValue(name)->type().ToString();
}

// NumPy matmul in double: broadcast batch dims, 1-D operands promoted and their dim dropped.
std::vector<double> NaiveMatMul(const Tensor& a, const Tensor& b, std::vector<int64_t>* out_dims) {
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  const bool av = ad.size() == 1, bv = bd.size() == 1;
  if (av) ad.insert(ad.begin(), 1);
  if (bv) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), rank - ab.size(), 1);
  bb.insert(bb.begin(), rank - bb.size(), 1);
  std::vector<int64_t> batch(rank);
  for (size_t d = 0; d < rank; ++d) batch[d] = std::max(ab[d], bb[d]);
  *out_dims = batch;
  if (!av) out_dims->push_back(m);
  if (!bv) out_dims->push_back(n);
  int64_t nb = 1;
  for (int64_t x : batch) nb *= x;
  std::vector<double> out;
  for (int64_t i = 0; i < nb; ++i) {
    // Decompose i over batch, then index each operand (size-1 dims broadcast).
    int64_t rem = i, ao = 0, bo = 0, as = 1, bs = 1;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ao += (ab[d] == 1 ? 0 : idx) * as;
      bo += (bb[d] == 1 ? 0 : idx) * bs;
      as *= ab[d];
      bs *= bb[d];
    }
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.GetAsDouble(ao * m * k + r * k + p) * b.GetAsDouble(bo * k * n + p * n + c);
        }
        out.push_back(s);
      }
    }
  }
  return out;
}

void CheckMatMul(const Tensor& a, const Tensor& b, double tol) {
  auto r = RunSingleNode("MatMul", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int64_t> dims;
  const std::vector<double> want = NaiveMatMul(a, b, &dims);
  EXPECT_EQ((*r)[0].dims(), dims);
  EXPECT_EQ((*r)[0].dtype(), a.dtype());
  ExpectNear((*r)[0], want, tol);
}

// ---------------------------------------------------------------------------------------------
// MatMul

TEST(MatMulTest, MatchesNaiveOnMatricesAndVectors) {
  CheckMatMul(RandomFloat({7, 33}, 1), RandomFloat({33, 129}, 2), 1e-5);
  CheckMatMul(RandomFloat({130, 300}, 3), RandomFloat({300, 70}, 4), 1e-5);  // blocked path
  CheckMatMul(RandomFloat({5}, 5), RandomFloat({5}, 6), 1e-5);               // -> scalar []
  CheckMatMul(RandomFloat({5}, 7), RandomFloat({2, 5, 3}, 8), 1e-5);         // -> [2,3]
  CheckMatMul(RandomFloat({2, 3, 4, 5}, 9), RandomFloat({5}, 10), 1e-5);     // -> [2,3,4]
  CheckMatMul(RandomFloat({1, 64}, 11), RandomFloat({64, 40}, 12), 1e-5);    // GEMV row
  CheckMatMul(RandomFloat({40, 64}, 13), RandomFloat({64, 1}, 14), 1e-5);    // GEMV column
}

TEST(MatMulTest, BroadcastsBatchDims) {
  CheckMatMul(RandomFloat({2, 1, 3, 4}, 15), RandomFloat({5, 4, 6}, 16), 1e-5);  // [2,5,3,6]
  CheckMatMul(RandomFloat({3, 4}, 17), RandomFloat({2, 4, 6}, 18), 1e-5);        // A shared
  CheckMatMul(RandomFloat({2, 3, 3, 4}, 19), RandomFloat({4, 6}, 20), 1e-5);     // B shared
  CheckMatMul(RandomFloat({3, 4}, 21), RandomFloat({1, 1, 4, 6}, 22), 1e-5);     // [1,1,3,6]
  CheckMatMul(RandomFloat({4, 1, 2, 3}, 23), RandomFloat({1, 5, 3, 2}, 24), 1e-5);
}

TEST(MatMulTest, ThreadCountDoesNotChangeResults) {
  // Batched (parallel over batches) and folded (one threaded GEMM) paths.
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {RandomFloat({6, 128, 130}, 1), RandomFloat({6, 130, 127}, 2)},
      {RandomFloat({3, 100, 300}, 3), RandomFloat({300, 200}, 4)}};
  for (const auto& [a, b] : cases) {
    std::vector<Tensor> outs;
    for (int threads : {1, 2, 5}) {
      runtime::cpu::SetGemmMaxThreads(threads);
      auto r = RunSingleNode("MatMul", {a, b});
      ASSERT_TRUE(r.ok()) << r.status();
      outs.push_back((*r)[0]);
    }
    runtime::cpu::SetGemmMaxThreads(0);
    EXPECT_TRUE(outs[1].BitwiseEquals(outs[0]));
    EXPECT_TRUE(outs[2].BitwiseEquals(outs[0]));
    std::vector<int64_t> dims;
    ExpectNear(outs[0], NaiveMatMul(a, b, &dims), 1e-5);
  }
}

TEST(MatMulTest, EveryElementType) {
  for (DType t : {DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    CheckMatMul(RandomOf(t, {2, 6, 9}, 30), RandomOf(t, {9, 5}, 31),
                t == DType::kFloat64 ? 1e-12 : (t == DType::kFloat16 ? 2e-3 : 2e-2));
  }
  for (DType t : {DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt64}) {
    Tensor a = t == DType::kUInt32 || t == DType::kUInt64
                   ? Convert(RandomInt64({3, 4, 7}, 32, 0, 90), t)
                   : RandomOf(t, {3, 4, 7}, 32);
    Tensor b = t == DType::kUInt32 || t == DType::kUInt64
                   ? Convert(RandomInt64({7, 2}, 33, 0, 90), t)
                   : RandomOf(t, {7, 2}, 33);
    CheckMatMul(a, b, 0.0);
  }
}

TEST(MatMulTest, Int32WrapsAroundLikeNumPy) {
  Tensor a = Tensor::FromVector<int32_t>({1, 2}, {1 << 30, 1 << 30});
  Tensor b = Tensor::FromVector<int32_t>({2, 1}, {4, 1});
  auto r = RunSingleNode("MatMul", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  // 2^32 + 2^30 modulo 2^32.
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 1 << 30);
}

TEST(MatMulTest, EmptyAndZeroInnerDims) {
  auto r = RunSingleNode("MatMul", {RandomFloat({0, 4}, 40), RandomFloat({4, 3}, 41)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{0, 3}));
  r = RunSingleNode("MatMul", {Tensor(DType::kFloat32, {2, 0}), Tensor(DType::kFloat32, {0, 3})});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], std::vector<double>(6, 0.0), 0.0);
}

TEST(MatMulTest, BadShapesAreErrors) {
  auto r = RunSingleNode("MatMul", {RandomFloat({2, 3}, 1), RandomFloat({4, 5}, 2)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inner dimensions"), std::string::npos) << r.status();
  r = RunSingleNode("MatMul", {RandomFloat({2, 2, 3}, 1), RandomFloat({3, 3, 5}, 2)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("batch"), std::string::npos) << r.status();
  r = RunSingleNode("MatMul", {RandomFloat({}, 1), RandomFloat({3}, 2)});
  EXPECT_FALSE(r.ok());
  r = RunSingleNode("MatMul",
                    {RandomFloat({2, 3}, 1), Convert(RandomFloat({3, 2}, 2), DType::kFloat64)});
  EXPECT_FALSE(r.ok());
  r = RunSingleNode("MatMul", {Tensor(DType::kBool, {2, 2}), Tensor(DType::kBool, {2, 2})});
  EXPECT_FALSE(r.ok());
}

TEST(MatMulTest, SymbolicDimsFlowThroughShapeInference) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,T,784]
    input %w : f32[784,512]
    input %v : f32[512]
    input %b : f32[B,1,5,7]
    input %c : f32[S,7,2]
    input %u : f32[*]
    %y : f32[*] = MatMul(%x, %w) origin "mm"
    %z : f32[*] = MatMul(%y, %v) origin "mv"
    %q : f32[*] = MatMul(%b, %c) origin "bb"
    %r : f32[*] = MatMul(%u, %w) origin "unk"
    output %y, %z, %q, %r
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f32[N,T,512]");
  EXPECT_EQ(TypeOf(**g, "z"), "f32[N,T]");
  EXPECT_EQ(TypeOf(**g, "q"), "f32[B,S,5,2]");
  EXPECT_EQ(TypeOf(**g, "r"), "f32[*]");
  auto bad = InferText(R"(graph "g" {
    input %x : f32[N,784]
    input %w : f32[783,512]
    %y : f32[*] = MatMul(%x, %w) origin "mm"
    output %y
  })");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'mm'"), std::string::npos) << bad.status();
}

// ---------------------------------------------------------------------------------------------
// Gemm

// alpha * op(A) op(B) + beta * broadcast(C) in double.
std::vector<double> NaiveGemm(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb,
                              double alpha, double beta) {
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> out;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        s += a.GetAsDouble(ta ? p * m + i : i * k + p) * b.GetAsDouble(tb ? j * k + p : p * n + j);
      }
      double cv = 0.0;
      if (c != nullptr) {
        const auto& cd = c->dims();
        const int64_t rows = cd.size() == 2 ? cd[0] : 1;
        const int64_t cols = cd.empty() ? 1 : cd.back();
        cv = c->GetAsDouble((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j));
      }
      out.push_back(alpha * s + beta * cv);
    }
  }
  return out;
}

TEST(GemmOpTest, TransposesAlphaBetaAndEveryBiasBroadcast) {
  const int64_t m = 9, n = 13, k = 17;
  uint64_t seed = 100;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    Tensor a = RandomFloat(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, ++seed);
    Tensor b = RandomFloat(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, ++seed);
    const std::vector<std::vector<int64_t>> c_shapes = {{}, {1}, {n}, {1, n}, {m, 1}, {m, n}};
    for (const auto& cs : c_shapes) {
      Tensor c = RandomFloat(cs, ++seed);
      std::map<std::string, Attribute> attrs = {{"transA", Attribute(int64_t{ta})},
                                                {"transB", Attribute(int64_t{tb})},
                                                {"alpha", Attribute(0.5f)},
                                                {"beta", Attribute(-1.5f)}};
      auto r = RunSingleNode("Gemm", {a, b, c}, attrs);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{m, n}));
      ExpectNear((*r)[0], NaiveGemm(a, b, &c, ta, tb, 0.5, -1.5), 1e-5);
    }
    auto r = RunSingleNode(
        "Gemm", {a, b}, {{"transA", Attribute(int64_t{ta})}, {"transB", Attribute(int64_t{tb})}});
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectNear((*r)[0], NaiveGemm(a, b, nullptr, ta, tb, 1.0, 0.0), 1e-5);
  }
}

TEST(GemmOpTest, LargeDenseLayerShape) {
  // The MLP's first layer with a bias row: X [128,784] * W^T ([512,784], transB) + b [512].
  Tensor x = RandomFloat({128, 784}, 1), w = RandomFloat({512, 784}, 2), b = RandomFloat({512}, 3);
  auto r = RunSingleNode("Gemm", {x, w, b}, {{"transB", Attribute(int64_t{1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaiveGemm(x, w, &b, false, true, 1.0, 1.0), 1e-4);  // k = 784 in float
}

TEST(GemmOpTest, OtherElementTypes) {
  for (DType t : {DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64,
                  DType::kUInt32, DType::kUInt64}) {
    const bool is_unsigned = t == DType::kUInt32 || t == DType::kUInt64;
    Tensor a = is_unsigned ? Convert(RandomInt64({4, 6}, 50, 0, 40), t) : RandomOf(t, {4, 6}, 50);
    Tensor b = is_unsigned ? Convert(RandomInt64({5, 6}, 51, 0, 40), t) : RandomOf(t, {5, 6}, 51);
    Tensor c = is_unsigned ? Convert(RandomInt64({5}, 52, 0, 40), t) : RandomOf(t, {5}, 52);
    const float alpha = ir::IsInteger(t) ? 2.0f : 0.75f;
    auto r = RunSingleNode("Gemm", {a, b, c},
                           {{"transB", Attribute(int64_t{1})}, {"alpha", Attribute(alpha)}});
    ASSERT_TRUE(r.ok()) << ir::DTypeName(t) << ": " << r.status();
    EXPECT_EQ((*r)[0].dtype(), t);
    const double tol = t == DType::kFloat16    ? 2e-3
                       : t == DType::kBFloat16 ? 2e-2
                       : t == DType::kFloat64  ? 1e-12
                                               : 0.0;
    ExpectNear((*r)[0], NaiveGemm(a, b, &c, false, true, alpha, 1.0), tol);
  }
}

TEST(GemmOpTest, OldOpsetsRun) {
  Tensor a = RandomFloat({3, 4}, 1), b = RandomFloat({4, 2}, 2), c = RandomFloat({3, 2}, 3);
  for (int64_t opset : {7, 9, 11, 13}) {
    auto r = RunSingleNode("Gemm", {a, b, c}, {{"beta", Attribute(2.0f)}}, 1, "", opset);
    ASSERT_TRUE(r.ok()) << "opset " << opset << ": " << r.status();
    ExpectNear((*r)[0], NaiveGemm(a, b, &c, false, false, 1.0, 2.0), 1e-6);
  }
}

TEST(GemmOpTest, BetaZeroIgnoresC) {
  Tensor a = RandomFloat({2, 3}, 1), b = RandomFloat({3, 2}, 2);
  Tensor c = Tensor::FromVector<float>({2}, {std::nanf(""), std::nanf("")});
  auto r = RunSingleNode("Gemm", {a, b, c}, {{"beta", Attribute(0.0f)}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaiveGemm(a, b, nullptr, false, false, 1.0, 0.0), 1e-6);
}

TEST(GemmOpTest, BadShapesAreErrors) {
  auto r = RunSingleNode("Gemm", {RandomFloat({2, 3}, 1), RandomFloat({4, 5}, 2)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inner dimensions"), std::string::npos) << r.status();
  r = RunSingleNode("Gemm", {RandomFloat({2, 3}, 1), RandomFloat({3, 5}, 2), RandomFloat({3}, 3)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("broadcast"), std::string::npos) << r.status();
  r = RunSingleNode("Gemm", {RandomFloat({2, 3, 1}, 1), RandomFloat({3, 5}, 2)});
  EXPECT_FALSE(r.ok());
  r = RunSingleNode("Gemm",
                    {RandomFloat({2, 3}, 1), RandomFloat({3, 5}, 2), RandomFloat({2, 5, 1}, 3)});
  EXPECT_FALSE(r.ok());
}

TEST(GemmOpTest, ShapeInferenceWithSymbolsAndTransposes) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,784]
    input %w : f32[512,784]
    input %b : f32[512]
    input %d : f32[N,512]
    %y : f32[*] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
    %dw : f32[*] = Gemm(%d, %x) {transA = 1} origin "dw"
    output %y, %dw
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f32[N,512]");
  EXPECT_EQ(TypeOf(**g, "dw"), "f32[512,784]");
  auto bad = InferText(R"(graph "g" {
    input %x : f32[N,784]
    input %w : f32[512,784]
    input %b : f32[10]
    %y : f32[*] = Gemm(%x, %w, %b) {transB = 1} origin "fc"
    output %y
  })");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fc'"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace ottr::testing
