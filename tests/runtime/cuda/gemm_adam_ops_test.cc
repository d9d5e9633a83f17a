// ottr::GemmAdamUpdate on CUDA (kernels/gemm_adam.cu) against the CPU reference
// (runtime/cpu/ottr_training_kernels.cc). The executor poisons its arena with NaN bytes before
// the kernels run, so an element the kernel does not write shows up.
//
// Exact case: A and B hold small integers (random in [-4, 4]; exact in TF32 too), so every partial
// sum of the product and of the bias is an integer below 2^24, exact in float32 in any order: the
// kernel's gradients equal the CPU's, the element arithmetic is the CPU's (round-to-nearest
// intrinsics, no contraction), and p', m', v' must match bit for bit. Both kernels run: TF32 off
// (float32 FMAs) and on (tensor cores).
//
// Random case: A, B uniform floats. TF32 off, the gradient differs from the CPU's by the order of
// k float32 additions: |Δg| <= (k + 2)·2^-24·S with S = Σ_k |a·b| (the bias sums are in double on
// both sides: equal). TF32 on (the tensor-core kernel), each factor is rounded to nearest TF32
// (relative 2^-11 each, so 2^-10 + 2^-22 for the product, exact in float32 after that) and the
// k products are summed by the MMA's float32 adds, taken at twice float32's unit for an adder
// that need not round to nearest: |Δg| <= (2^-10 + 2^-22 + 2·(k + 2)·2^-24)·S.
// m' = m + w1·(g - m) and v' = β2·v + w2·g² move by w1·|Δg| and w2·(2|g| + |Δg|)·|Δg|
// plus their own float32 roundings (4 operations, 2^-24 each, on terms of |m| + w1·|g - m| and
// β2·v + w2·g²); p' is checked against the range Adam in double gives over [g - 2Δg, g + 2Δg]
// (AdamParamRange): the CPU's p' and the GPU's must both lie within it, widened by float32
// rounding (16 units on |p| + |step|).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cuda/cuda_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

// The node's attributes and the lr feed are float32: the kernel computes with these values.
constexpr double kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f, kLr = 1e-2f;
constexpr int64_t kStep = 3;

// g = Aᵀ·B with A [k, m], B [k, n] and, with a bias, its gradient over A ("a", [m]) or B ("b", [n]).
std::string Graph(int64_t k, int64_t m, int64_t n, const std::string& bias, bool decoupled) {
  const std::string w = absl::StrCat("f32[", m, ",", n, "]");
  const std::string b = absl::StrCat("f32[", bias == "a" ? m : n, "]");
  const bool with_bias = !bias.empty();
  std::string s = absl::StrCat("graph \"g\" {\n  opset ai.onnx 17\n  input %lr : f32[]\n  input %s : i64[]\n",
                               "  input %a : f32[", k, ",", m, "]\n  input %b : f32[", k, ",", n, "]\n");
  for (const char* t : {"p", "m", "v"}) {
    absl::StrAppend(&s, "  input %", t, "0 : ", w, "\n");
    if (with_bias) absl::StrAppend(&s, "  input %", t, "1 : ", b, "\n");
  }
  std::string outs, ins;
  for (const char* t : {"p", "m", "v"}) {
    absl::StrAppend(&outs, outs.empty() ? "" : ", ", "%", t, "0.new : ", w);
    absl::StrAppend(&ins, ", %", t, "0");
    if (with_bias) {
      absl::StrAppend(&outs, ", %", t, "1.new : ", b);
      absl::StrAppend(&ins, ", %", t, "1");
    }
  }
  absl::StrAppend(&s, "  ", outs, " = ottr::GemmAdamUpdate(%lr, %s, %a, %b", ins, ") {beta1 = 0.9, beta2 = 0.999, ",
                  "decoupled = ", decoupled ? 1 : 0, ", epsilon = 1e-08, weight_decay = ", decoupled ? "0.01" : "0.0",
                  with_bias ? absl::StrCat(", bias = \"", bias, "\"") : "", "}\n");
  for (const char* t : {"p", "m", "v"}) {
    absl::StrAppend(&s, "  output %", t, "0.new\n");
    if (with_bias) absl::StrAppend(&s, "  output %", t, "1.new\n");
  }
  return s + "}";
}

// The range of p' that Adam (in double, the kernel's formula) gives for any gradient in [g0, g1]:
// m' is increasing in g, v' takes g² (its least 0 when the interval holds 0), and p' = p - s·m' /
// (√v' / c2 + eps) is bounded by the quotients of the ends of those ranges (interval arithmetic;
// evaluating Adam at g0 and g1 alone is not a bound: m' / √v' is not monotonic in g). `step` is the
// largest |s·m' / denominator|, for the float32 rounding allowance.
struct ParamRange {
  double lo, hi, step;
};
ParamRange AdamParamRange(double p, double g0, double g1, double m, double v, double wd, bool decoupled) {
  const double lr = kLr, t = static_cast<double>(kStep);
  if (wd != 0) {
    if (decoupled) {
      p *= 1 - lr * wd;
    } else {
      g0 += wd * p;
      g1 += wd * p;
    }
  }
  const double m_lo = m + (1 - kBeta1) * (g0 - m), m_hi = m + (1 - kBeta1) * (g1 - m);
  const double sq_lo = g0 <= 0 && g1 >= 0 ? 0.0 : std::min(g0 * g0, g1 * g1), sq_hi = std::max(g0 * g0, g1 * g1);
  const double c2 = std::sqrt(1 - std::pow(kBeta2, t));
  const double d_lo = std::sqrt(kBeta2 * v + (1 - kBeta2) * sq_lo) / c2 + kEps;
  const double d_hi = std::sqrt(kBeta2 * v + (1 - kBeta2) * sq_hi) / c2 + kEps;
  const double s = lr / (1 - std::pow(kBeta1, t));
  const double q[4] = {m_lo / d_lo, m_lo / d_hi, m_hi / d_lo, m_hi / d_hi};
  const double q_lo = *std::min_element(q, q + 4), q_hi = *std::max_element(q, q + 4);
  return {p - s * q_hi, p - s * q_lo, s * std::max(std::abs(q_lo), std::abs(q_hi))};
}

struct Case {
  int64_t k, m, n;
  const char* bias;
  bool decoupled;
  bool exact;
};

class CudaGemmAdamTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGemmAdamTest, MatchesCpu) {
  if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  const Case& c = GetParam();
  auto parsed = ir::ParseGraph(Graph(c.k, c.m, c.n, c.bias, c.decoupled));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::unique_ptr<ir::Graph> g = std::move(*parsed);
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), *g).ok());
  const bool with_bias = std::string(c.bias).size() > 0;
  runtime::TensorMap feeds;
  feeds["lr"] = ir::Tensor::Scalar<float>(static_cast<float>(kLr));
  feeds["s"] = ir::Tensor::Scalar<int64_t>(kStep);
  auto operand = [&](std::vector<int64_t> dims, uint64_t seed) {
    ir::Tensor t = testing::RandomFloat(dims, seed, -4.0f, 4.0f);
    if (c.exact) {
      for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i]);
    }
    return t;
  };
  feeds["a"] = operand({c.k, c.m}, 71);
  feeds["b"] = operand({c.k, c.n}, 72);
  uint64_t seed = 80;
  for (int t = 0; t < (with_bias ? 2 : 1); ++t) {
    const std::vector<int64_t> dims =
        t == 0 ? std::vector<int64_t>{c.m, c.n} : std::vector<int64_t>{std::string(c.bias) == "a" ? c.m : c.n};
    feeds[absl::StrCat("p", t)] = testing::RandomFloat(dims, seed++, -1.0f, 1.0f);
    feeds[absl::StrCat("m", t)] = testing::RandomFloat(dims, seed++, -1.0f, 1.0f);
    feeds[absl::StrCat("v", t)] = testing::RandomFloat(dims, seed++, 0.0f, 4.0f);  // second moments >= 0
  }
  auto cpu = runtime::cpu::CpuExecutor::Create(*g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  const ir::Tensor& a = feeds.at("a");
  const ir::Tensor& b = feeds.at("b");
  const double u = std::ldexp(1.0, -24);
  const double wd = c.decoupled ? 0.01f : 0.0;
  for (const bool tf32 : {false, true}) {
    SCOPED_TRACE(tf32 ? "tf32" : "float32");
    cuda::CudaExecutorOptions o;
    o.tf32 = tf32;
    auto gpu = cuda::CudaExecutor::Create(*g, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (int run = 0; run < 2; ++run) {  // the graph's first replay and a second one
      auto got = (*gpu)->Run(feeds);
      ASSERT_TRUE(got.ok()) << got.status();
      const int n_t = with_bias ? 2 : 1;
      ASSERT_EQ(got->size(), static_cast<size_t>(3 * n_t));
      if (c.exact) {
        for (size_t i = 0; i < got->size(); ++i) {
          EXPECT_TRUE((*got)[i].BitwiseEquals((*want)[i])) << "output " << g->outputs()[i]->name() << " run " << run;
        }
        continue;
      }
      // Tensor t (0: the weight, 1: the bias), element e, whose gradient is gd exactly (in double)
      // and within dg in both kernels' and the CPU's float32: outputs t (p'), n_t + t (m'), 2·n_t + t
      // (v'). True when within the bounds above.
      int bad = 0;
      auto check = [&](int t, int64_t e, double gd, double dg, const std::string& where) {
        const double p = feeds.at(absl::StrCat("p", t)).GetAsDouble(e),
                     m = feeds.at(absl::StrCat("m", t)).GetAsDouble(e),
                     v = feeds.at(absl::StrCat("v", t)).GetAsDouble(e);
        const double gp = (*got)[t].GetAsDouble(e), gm = (*got)[n_t + t].GetAsDouble(e),
                     gv = (*got)[2 * n_t + t].GetAsDouble(e);
        const double wp = (*want)[t].GetAsDouble(e), wm = (*want)[n_t + t].GetAsDouble(e),
                     wv = (*want)[2 * n_t + t].GetAsDouble(e);
        const double g_abs = std::abs(gd) + dg + wd * std::abs(p);
        const double m_bound = (1 - kBeta1) * 2 * dg + 8 * u * (std::abs(m) + (1 - kBeta1) * (g_abs + std::abs(m)));
        const double v_bound =
            (1 - kBeta2) * (2 * g_abs + 2 * dg) * 2 * dg + 8 * u * (kBeta2 * v + (1 - kBeta2) * g_abs * g_abs);
        const ParamRange r = AdamParamRange(p, gd - 2 * dg, gd + 2 * dg, m, v, wd, c.decoupled);
        const double p_lo = r.lo - 16 * u * (std::abs(p) + r.step), p_hi = r.hi + 16 * u * (std::abs(p) + r.step);
        const bool ok = std::abs(gm - wm) <= m_bound && std::abs(gv - wv) <= v_bound && gp >= p_lo && gp <= p_hi &&
                        wp >= p_lo && wp <= p_hi;
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << where << " p' " << gp << " (CPU " << wp << ", range " << p_lo << ".." << p_hi << "), m' "
                        << gm << " (CPU " << wm << ", bound " << m_bound << "), v' " << gv << " (CPU " << wv
                        << ", bound " << v_bound << ")";
        }
      };
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double s = 0, gd = 0;
          for (int64_t q = 0; q < c.k; ++q) {
            const double t = a.GetAsDouble(q * c.m + i) * b.GetAsDouble(q * c.n + j);
            s += std::abs(t);
            gd += t;
          }
          const double rel = tf32 ? std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + 2 * (c.k + 2) * u : (c.k + 2) * u;
          check(0, i * c.n + j, gd, rel * s, absl::StrCat("[", i, ", ", j, "]"));
        }
      }
      // The bias: TF32 off, summed in double in increasing k as on the CPU, the same float32
      // gradient: bit for bit. TF32 on, in double in 8 interleaved parts: the two double sums
      // differ by at most 2·k·2^-53 of S = Σ|x| and each is rounded once to float32 (2^-24 of S):
      // dg = (2^-23 + k·2^-52)·S.
      if (with_bias && !tf32) {
        for (int o = 0; o < 3; ++o) {
          EXPECT_TRUE((*got)[o * n_t + 1].BitwiseEquals((*want)[o * n_t + 1])) << "bias output " << o << " run " << run;
        }
      } else if (with_bias) {
        const bool over_a = std::string(c.bias) == "a";
        const ir::Tensor& x = over_a ? a : b;
        const int64_t cols = over_a ? c.m : c.n;
        for (int64_t j = 0; j < cols; ++j) {
          double s = 0, gd = 0;
          for (int64_t q = 0; q < c.k; ++q) {
            s += std::abs(x.GetAsDouble(q * cols + j));
            gd += x.GetAsDouble(q * cols + j);
          }
          check(1, j, gd, (2 * u + c.k * std::ldexp(1.0, -52)) * s, absl::StrCat("bias [", j, "]"));
        }
      }
      EXPECT_EQ(bad, 0) << "run " << run;
    }
  }
}

// Tiles of 32 x 64 (32 x 32 in TF32), all k rows staged: shapes on and off those multiples, k from
// 7 to the most (TF32: on and off the MMA's 8 rows), rows on and off 16 bytes (the TF32 kernel's
// 16- or 4-byte copies), the batch-128 MLP's first layer, both bias sides, Adam and AdamW.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmAdamTest,
    ::testing::Values(Case{40, 33, 70, "a", false, true}, Case{40, 33, 70, "b", true, true},
                      Case{7, 5, 3, "", false, true}, Case{256, 64, 128, "a", true, true},
                      Case{128, 512, 784, "a", false, false}, Case{100, 70, 129, "b", true, false},
                      Case{32, 12, 512, "", false, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return absl::StrCat("k", c.k, "m", c.m, "n", c.n, std::string(c.bias).empty() ? "" : "_bias_", c.bias,
                          c.decoupled ? "_adamw" : "_adam", c.exact ? "_exact" : "_random");
    });

}  // namespace
}  // namespace ottr
