// Tests of the blocked GEMM (runtime/cpu/gemm.h) against a naive triple loop in double (or exact
// integer) arithmetic, on every micro-kernel this CPU runs, every transpose combination, odd sizes
// around the register and cache blocks, padded leading dimensions, alpha/beta and threads.
#include "runtime/cpu/gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ir/dtype.h"

namespace ottr::runtime::cpu {
namespace {

// Restores the automatic kernel choice and thread count after each test.
class GemmTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetGemmIsa(GemmIsa::kAuto);
    SetGemmMaxThreads(0);
  }
};

// The instruction sets this CPU runs (the baseline always).
std::vector<GemmIsa> AvailableIsas() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::kBaseline, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (SetGemmIsa(isa)) out.push_back(isa);
  }
  SetGemmIsa(GemmIsa::kAuto);
  return out;
}

template <typename T>
std::vector<T> RandomVector(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// One problem with its stored operands (row strides padded by a few elements).
template <typename T>
struct Case {
  bool ta, tb;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  std::vector<T> a, b, c;

  Case(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, std::mt19937_64& rng, int pad = 3)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_) {
    lda = (ta ? m : k) + pad;
    ldb = (tb ? k : n) + pad + 1;
    ldc = n + pad + 2;
    a = RandomVector<T>(static_cast<size_t>((ta ? k : m) * lda), rng);
    b = RandomVector<T>(static_cast<size_t>((tb ? n : k) * ldb), rng);
    c = RandomVector<T>(static_cast<size_t>(m * ldc), rng);
  }
  double A(int64_t i, int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  double B(int64_t p, int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }
};

// Checks c_out against alpha * op(A) op(B) + beta * c_in computed in double, with a bound
// proportional to the sum of |terms| (the worst-case rounding of a length-k dot product), and
// that the padding between rows of C is untouched.
template <typename T>
void ExpectMatches(const Case<T>& cs, double alpha, double beta, const std::vector<T>& c_in,
                   const std::vector<T>& c_out, double eps) {
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double sum = 0.0;
      double mag = 0.0;
      for (int64_t p = 0; p < cs.k; ++p) {
        sum += cs.A(i, p) * cs.B(p, j);
        mag += std::fabs(cs.A(i, p) * cs.B(p, j));
      }
      const double cin = c_in[i * cs.ldc + j];
      const double want = alpha * sum + (beta == 0.0 ? 0.0 : beta * cin);
      const double cmag = beta == 0.0 ? 0.0 : std::fabs(beta * cin);
      const double bound = eps * (2.0 * (cs.k + 2) * (std::fabs(alpha) * mag + cmag) + 1.0);
      ASSERT_NEAR(c_out[i * cs.ldc + j], want, bound)
          << "at (" << i << "," << j << ") of m=" << cs.m << " n=" << cs.n << " k=" << cs.k
          << " ta=" << cs.ta << " tb=" << cs.tb << " alpha=" << alpha << " beta=" << beta
          << " kernel " << GemmKernelName(sizeof(T) == 8);
    }
    for (int64_t j = cs.n; j < cs.ldc; ++j) {
      ASSERT_EQ(c_out[i * cs.ldc + j], c_in[i * cs.ldc + j]) << "padding of C row " << i;
    }
  }
}

template <typename T>
void RunCase(Case<T>& cs, double alpha, double beta, double eps) {
  std::vector<T> c_in = cs.c;
  if (beta == 0.0) {
    // beta == 0 must not read C: NaN there must not reach the result.
    for (int64_t i = 0; i < cs.m; ++i) {
      for (int64_t j = 0; j < cs.n; ++j) c_in[i * cs.ldc + j] = std::numeric_limits<T>::quiet_NaN();
    }
  }
  std::vector<T> c_out = c_in;
  Gemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, static_cast<T>(alpha), cs.a.data(), cs.lda, cs.b.data(),
       cs.ldb, static_cast<T>(beta), c_out.data(), cs.ldc);
  ExpectMatches(cs, alpha, beta, c_in, c_out, eps);
}

TEST_F(GemmTest, FloatMatchesNaiveOnSmallOddSizesEveryKernelAndTranspose) {
  std::mt19937_64 rng(1);
  const int64_t sizes[] = {1, 2, 7, 33, 129};
  for (GemmIsa isa : AvailableIsas()) {
    ASSERT_TRUE(SetGemmIsa(isa));
    for (int t = 0; t < 4; ++t) {
      for (int64_t m : sizes) {
        for (int64_t n : sizes) {
          for (int64_t k : sizes) {
            Case<float> cs(t & 1, t & 2, m, n, k, rng);
            const double alpha = (m + n + k) % 2 ? 1.0 : -0.75;
            const double beta = (m * n + k) % 3 == 0 ? 0.0 : ((m + k) % 2 ? 1.0 : 0.5);
            RunCase(cs, alpha, beta, 6e-8);
          }
        }
      }
    }
  }
}

TEST_F(GemmTest, FloatMatchesNaiveOnLargeSizesAcrossCacheBlocks) {
  std::mt19937_64 rng(2);
  // 513 crosses the k block (256) twice and the m block; 257/300 leave partial tiles everywhere.
  const int64_t shapes[][3] = {{513, 33, 129},  {7, 513, 513}, {129, 129, 513}, {513, 300, 7},
                               {257, 513, 300}, {1, 513, 513}, {513, 1, 513}};
  for (GemmIsa isa : AvailableIsas()) {
    ASSERT_TRUE(SetGemmIsa(isa));
    for (int t = 0; t < 4; ++t) {
      for (const auto& s : shapes) {
        Case<float> cs(t & 1, t & 2, s[0], s[1], s[2], rng);
        RunCase(cs, t == 3 ? 2.0 : 1.0, t == 1 ? 0.0 : 0.5, 6e-8);
      }
    }
  }
}

TEST_F(GemmTest, DoubleMatchesNaive) {
  std::mt19937_64 rng(3);
  const int64_t sizes[] = {1, 7, 33, 129};
  for (GemmIsa isa : AvailableIsas()) {
    ASSERT_TRUE(SetGemmIsa(isa));
    for (int t = 0; t < 4; ++t) {
      for (int64_t m : sizes) {
        for (int64_t n : sizes) {
          for (int64_t k : sizes) {
            Case<double> cs(t & 1, t & 2, m, n, k, rng);
            RunCase(cs, 1.25, (m + n) % 2 ? 0.0 : -1.0, 1.2e-16);
          }
        }
      }
    }
    Case<double> big(true, false, 300, 513, 270, rng);
    RunCase(big, 1.0, 1.0, 1.2e-16);
  }
}

TEST_F(GemmTest, KZeroScalesC) {
  std::mt19937_64 rng(4);
  Case<float> cs(false, false, 5, 6, 0, rng);
  RunCase(cs, 1.0, 0.5, 0.0);
  Case<float> zero(false, true, 5, 6, 0, rng);
  RunCase(zero, 1.0, 0.0, 0.0);
  // m == 0 and n == 0 touch nothing.
  std::vector<float> c = {1.0f, 2.0f};
  Gemm(false, false, 0, 2, 3, 1.0f, nullptr, 3, nullptr, 2, 0.0f, c.data(), 2);
  Gemm(false, false, 1, 0, 3, 1.0f, nullptr, 3, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1.0f, 2.0f}));
}

TEST_F(GemmTest, ResultsDoNotDependOnThreadCount) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 4; ++t) {
    Case<float> cs(t & 1, t & 2, 301, 517, 400, rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3, 4, 7}) {
      SetGemmMaxThreads(threads);
      std::vector<float> c = cs.c;
      Gemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.5f, cs.a.data(), cs.lda, cs.b.data(), cs.ldb, 0.25f,
           c.data(), cs.ldc);
      results.push_back(std::move(c));
    }
    for (size_t r = 1; r < results.size(); ++r) {
      ASSERT_EQ(results[r], results[0]) << "thread setting " << r << " differs, t=" << t;
    }
    ExpectMatches(cs, 1.5, 0.25, cs.c, results[0], 6e-8);
  }
}

TEST_F(GemmTest, ConcurrentCallersGetCorrectResults) {
  // Calls from several threads at once: one gets the pool, the others run serially.
  SetGemmMaxThreads(4);
  std::mt19937_64 rng(6);
  std::vector<Case<float>> cases;
  for (int i = 0; i < 4; ++i) cases.emplace_back(i & 1, false, 200 + i, 300, 250, rng);
  std::vector<std::vector<float>> out(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      out[i] = cases[i].c;
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<float> c = cases[i].c;
        Gemm(cases[i].ta, cases[i].tb, cases[i].m, cases[i].n, cases[i].k, 1.0f, cases[i].a.data(),
             cases[i].lda, cases[i].b.data(), cases[i].ldb, 0.0f, c.data(), cases[i].ldc);
        out[i] = std::move(c);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<float> c_in = cases[i].c;
    ExpectMatches(cases[i], 1.0, 0.0, c_in, out[i], 6e-8);
  }
}

TEST_F(GemmTest, SetGemmIsaRefusesWhatTheCpuLacksAndNamesTheKernel) {
  EXPECT_TRUE(SetGemmIsa(GemmIsa::kBaseline));
  EXPECT_STREQ(GemmKernelName(), "sse2 6x8");
  EXPECT_STREQ(GemmKernelName(true), "sse2 6x4");
  SetGemmIsa(GemmIsa::kAuto);
  const bool avx512 = SetGemmIsa(GemmIsa::kAvx512);
  SetGemmIsa(GemmIsa::kAuto);
  EXPECT_EQ(std::string(GemmKernelName()).rfind(avx512 ? "avx512" : "", 0), 0u);
  SetGemmMaxThreads(3);
  EXPECT_EQ(GemmMaxThreads(), 3);
  SetGemmMaxThreads(0);
  EXPECT_GE(GemmMaxThreads(), 1);
  EXPECT_LE(GemmMaxThreads(), kGemmThreadCap);
}

// ---------------------------------------------------------------------------------------------
// GemmGeneric: other element types.

TEST_F(GemmTest, HalfAndBFloat16ComputeInFloat) {
  std::mt19937_64 rng(7);
  const int64_t m = 9, n = 35, k = 40;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::vector<float> af = RandomVector<float>(m * k, rng);
    const std::vector<float> bf = RandomVector<float>(k * n, rng);
    const std::vector<float> cf = RandomVector<float>(m * n, rng);
    std::vector<ir::Half> ah(m * k), bh(k * n), ch(m * n);
    std::vector<ir::BFloat16> ab(m * k), bb(k * n), cb(m * n);
    for (size_t i = 0; i < af.size(); ++i) {
      ah[i] = ir::FloatToHalf(af[i]);
      ab[i] = ir::FloatToBFloat16(af[i]);
    }
    for (size_t i = 0; i < bf.size(); ++i) {
      bh[i] = ir::FloatToHalf(bf[i]);
      bb[i] = ir::FloatToBFloat16(bf[i]);
    }
    for (size_t i = 0; i < cf.size(); ++i) {
      ch[i] = ir::FloatToHalf(cf[i]);
      cb[i] = ir::FloatToBFloat16(cf[i]);
    }
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    // Stored layouts: A is m x k (or k x m when transposed), B is k x n (or n x k).
    auto a_at = [&](auto& v, int64_t i, int64_t p) { return ta ? v[p * lda + i] : v[i * lda + p]; };
    auto b_at = [&](auto& v, int64_t p, int64_t j) { return tb ? v[j * ldb + p] : v[p * ldb + j]; };
    std::vector<ir::Half> yh = ch;
    std::vector<ir::BFloat16> yb = cb;
    GemmGeneric<ir::Half>(ta, tb, m, n, k, 0.5, ah.data(), lda, bh.data(), ldb, 2.0, yh.data(), n);
    GemmGeneric<ir::BFloat16>(ta, tb, m, n, k, 0.5, ab.data(), lda, bb.data(), ldb, 2.0, yb.data(),
                              n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sh = 0.0, sb = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          sh += double(ir::HalfToFloat(a_at(ah, i, p))) * ir::HalfToFloat(b_at(bh, p, j));
          sb += double(ir::BFloat16ToFloat(a_at(ab, i, p))) * ir::BFloat16ToFloat(b_at(bb, p, j));
        }
        const double want_h = 0.5 * sh + 2.0 * ir::HalfToFloat(ch[i * n + j]);
        const double want_b = 0.5 * sb + 2.0 * ir::BFloat16ToFloat(cb[i * n + j]);
        // One rounding to the storage type: half has 11 significant bits, bfloat16 8.
        ASSERT_NEAR(ir::HalfToFloat(yh[i * n + j]), want_h, 1e-3 * (1 + std::fabs(want_h)));
        ASSERT_NEAR(ir::BFloat16ToFloat(yb[i * n + j]), want_b, 8e-3 * (1 + std::fabs(want_b)));
      }
    }
  }
}

template <typename T>
void CheckIntegerGemm(uint64_t seed, double alpha, double beta, int64_t lo, int64_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  const int64_t m = 5, n = 7, k = 11;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<T> a(m * k), b(k * n), c(m * n);
    for (T& x : a) x = static_cast<T>(dist(rng));
    for (T& x : b) x = static_cast<T>(dist(rng));
    for (T& x : c) x = static_cast<T>(dist(rng));
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    std::vector<T> y = c;
    GemmGeneric<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, y.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        // Exact wrap-around reference in uint64 (two's complement, modulo 2^64, then truncated).
        uint64_t s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const T av = ta ? a[p * lda + i] : a[i * lda + p];
          const T bv = tb ? b[j * ldb + p] : b[p * ldb + j];
          s += static_cast<uint64_t>(static_cast<int64_t>(av)) *
               static_cast<uint64_t>(static_cast<int64_t>(bv));
        }
        T want;
        if (alpha == std::trunc(alpha) && beta == std::trunc(beta)) {
          want = static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(alpha)) * s +
                                static_cast<uint64_t>(static_cast<int64_t>(beta)) *
                                    static_cast<uint64_t>(static_cast<int64_t>(c[i * n + j])));
        } else {
          want = static_cast<T>(alpha * static_cast<double>(static_cast<T>(s)) +
                                beta * static_cast<double>(c[i * n + j]));
        }
        ASSERT_EQ(y[i * n + j], want) << "(" << i << "," << j << ") t=" << t;
      }
    }
  }
}

TEST_F(GemmTest, IntegersAreExactWithWrapAround) {
  CheckIntegerGemm<int32_t>(8, 1.0, 1.0, -1000, 1000);
  CheckIntegerGemm<int32_t>(9, 3.0, -2.0, std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max());  // wraps
  CheckIntegerGemm<int64_t>(10, 1.0, 0.0, -(int64_t{1} << 40), int64_t{1} << 40);
  CheckIntegerGemm<uint32_t>(11, 2.0, 1.0, 0, 4000000000);
  CheckIntegerGemm<uint64_t>(12, 1.0, 1.0, 0, int64_t{1} << 62);
  CheckIntegerGemm<uint8_t>(13, 1.0, 1.0, 0, 255);
  CheckIntegerGemm<int16_t>(14, 1.0, 0.0, -300, 300);
  CheckIntegerGemm<int32_t>(15, 0.5, 0.25, -100, 100);  // non-integral scalars: via double
}

TEST_F(GemmTest, IntegerNonIntegralScaleSaturates) {
  const int8_t a[] = {100, 100};
  const int8_t b[] = {100, 100};
  int8_t c[] = {0};
  GemmGeneric<int8_t>(false, false, 1, 1, 2, 0.5, a, 2, b, 1, 0.0, c, 1);
  // 20000 wraps to 32 in int8 before scaling (the product is computed modulo 2^8).
  EXPECT_EQ(c[0], static_cast<int8_t>(static_cast<int8_t>(20000) * 0.5));
  int32_t a2[] = {1 << 30};
  int32_t b2[] = {1};
  int32_t c2[] = {0};
  GemmGeneric<int32_t>(false, false, 1, 1, 1, 3.5, a2, 1, b2, 1, 0.0, c2, 1);
  EXPECT_EQ(c2[0], std::numeric_limits<int32_t>::max());
}

}  // namespace
}  // namespace ottr::runtime::cpu
