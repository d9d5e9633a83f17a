#include "runtime/cpu/elementwise_common.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace ottr::runtime::cpu::ew {
namespace {

// Distance in units of the last place between float `got` and the exact value `want`, measured
// at want's magnitude (the float spacing just below |want|'s binade top).
double Ulps(float got, double want) {
  const double mag = std::fabs(want);
  if (mag < std::numeric_limits<float>::min()) {
    return std::fabs(got - want) / std::numeric_limits<float>::denorm_min();
  }
  int e;
  std::frexp(mag, &e);
  const double ulp = std::ldexp(1.0, e - 24);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Every 97th float in [lo, hi] (about 10^6 points across all binades in range) plus the ends.
template <typename F>
void Sweep(float lo, float hi, F&& check) {
  for (float x = lo; x < hi;) {
    check(x);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    // Step through the bit patterns; negative floats decrease in magnitude as bits decrease.
    if (x < 0) {
      bits = bits > 97 + 0x80000000u ? bits - 97 : 0;
    } else {
      bits += 97;
    }
    std::memcpy(&x, &bits, 4);
  }
  check(hi);
}

TEST(FastMathTest, ExpIsWithinTwoUlp) {
  double worst = 0;
  float worst_x = 0;
  Sweep(-103.0f, 88.7f, [&](float x) {
    const double u = Ulps(FastExp(x), std::exp(static_cast<double>(x)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_EQ(FastExp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(FastExp(1000.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(FastExp(-1000.0f), 0.0f);
  EXPECT_EQ(FastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(FastExp(std::numeric_limits<float>::quiet_NaN())));
  // Subnormal results: exp(-100) = 3.72e-44.
  EXPECT_NEAR(FastExp(-100.0f), 3.7200759760208356e-44, 2e-45);
}

TEST(FastMathTest, Expm1IsWithinThreeUlp) {
  double worst = 0;
  float worst_x = 0;
  Sweep(-88.0f, 88.0f, [&](float x) {
    if (x == 0.0f) return;
    const double u = Ulps(FastExpm1(x), std::expm1(static_cast<double>(x)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 3.0) << "at x = " << worst_x;
  EXPECT_EQ(FastExpm1(0.0f), 0.0f);
  EXPECT_EQ(FastExpm1(1e-30f), 1e-30f);
  EXPECT_EQ(FastExpm1(-1000.0f), -1.0f);
}

TEST(FastMathTest, TanhIsWithinFourUlp) {
  double worst = 0;
  float worst_x = 0;
  Sweep(-20.0f, 20.0f, [&](float x) {
    if (x == 0.0f) return;
    const double u = Ulps(FastTanh(x), std::tanh(static_cast<double>(x)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 4.0) << "at x = " << worst_x;
  EXPECT_EQ(FastTanh(100.0f), 1.0f);
  EXPECT_EQ(FastTanh(-100.0f), -1.0f);
  EXPECT_TRUE(std::signbit(FastTanh(-0.0f)));
  EXPECT_TRUE(std::isnan(FastTanh(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMathTest, ExpSumKeepsTheLowPart) {
  // e^(-(a^2)) with a = 9.25 + 2^-10: hi = -85.5625 (9.25^2, exact), lo = the rest of -a^2.
  const double a = 9.25 + std::ldexp(1.0, -10);
  const double want = std::exp(-a * a);
  const float lo = static_cast<float>(-(a * a) + 85.5625);
  EXPECT_LE(Ulps(FastExpSum(-85.5625f, lo), want), 2.0);
  EXPECT_EQ(FastExpSum(-200.0f, 1.0f), 0.0f);
  EXPECT_EQ(FastExpSum(100.0f, 0.5f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(FastExpSum(0.0f, 0.0f), 1.0f);
}

TEST(FastMathTest, ErfIsWithinFourUlp) {
  double worst = 0;
  float worst_x = 0;
  Sweep(-6.0f, 6.0f, [&](float x) {
    if (x == 0.0f) return;
    const double u = Ulps(FastErf(x), std::erf(static_cast<double>(x)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 4.0) << "at x = " << worst_x;
  EXPECT_EQ(FastErf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(FastErf(-0.0f)));
  EXPECT_EQ(FastErf(1e-30f), static_cast<float>(1e-30 * 1.1283791670955126));
  EXPECT_EQ(FastErf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(FastErf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(FastErf(-30.0f), -1.0f);
  EXPECT_TRUE(std::isnan(FastErf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMathTest, ErfcIsWithinSixUlpIntoTheTail) {
  double worst = 0;
  float worst_x = 0;
  // erfc(9.1) ~ 1e-37: the whole normal range of results, including the left side (up to 2).
  Sweep(-6.0f, 9.1f, [&](float x) {
    const double u = Ulps(FastErfc(x), std::erfc(static_cast<double>(x)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 6.0) << "at x = " << worst_x;
  EXPECT_EQ(FastErfc(11.0f), 0.0f);
  EXPECT_EQ(FastErfc(std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(FastErfc(-std::numeric_limits<float>::infinity()), 2.0f);
  EXPECT_EQ(FastErfc(-30.0f), 2.0f);
  EXPECT_TRUE(std::isnan(FastErfc(std::numeric_limits<float>::quiet_NaN())));
  // Subnormal results stay close: erfc(10) = 2.09e-45 (1.5 denormal steps).
  EXPECT_NEAR(FastErfc(10.0f), 2.088487583762545e-45, 1.5e-45);
}

TEST(SelectTest, PicksBitExactly) {
  EXPECT_EQ(Select(true, 1.5f, -2.0f), 1.5f);
  EXPECT_EQ(Select(false, 1.5f, -2.0f), -2.0f);
  EXPECT_TRUE(std::signbit(Select(true, -0.0, 0.0)));
  EXPECT_TRUE(std::isnan(Select(false, 1.0, std::nan(""))));
  EXPECT_EQ(Select(true, int8_t{-3}, int8_t{4}), -3);
}

TEST(ConvertElementTest, SaturatesAndTruncates) {
  EXPECT_EQ((SaturatingTruncate<int8_t>(127.9f)), 127);
  EXPECT_EQ((SaturatingTruncate<int8_t>(128.0f)), 127);
  EXPECT_EQ((SaturatingTruncate<int8_t>(-128.9f)), -128);
  EXPECT_EQ((SaturatingTruncate<uint64_t>(1.8446744073709552e19)), ~uint64_t{0});
  EXPECT_EQ((SaturatingTruncate<uint64_t>(1.8446744073709550e19)), 18446744073709549568ull);
  EXPECT_EQ((SaturatingTruncate<int64_t>(-9.2233720368547758e18)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ((SaturatingTruncate<uint32_t>(-0.99)), 0u);
  EXPECT_EQ((SaturatingTruncate<int32_t>(std::nan(""))), 0);
  EXPECT_EQ((ConvertElement<int16_t>(ir::FloatToHalf(-7.75f))), -7);
  EXPECT_EQ((ConvertElement<bool>(ir::FloatToBFloat16(-0.0f))), false);
  EXPECT_EQ((ConvertElement<uint8_t>(int32_t{-1})), 255);
}

TEST(ConvertElementTest, DoubleToFloatRoundToOddKeepsStickyBit) {
  EXPECT_EQ(DoubleToFloatRoundToOdd(1.5), 1.5f);  // exact stays exact
  const float f = DoubleToFloatRoundToOdd(1.0 + std::ldexp(1.0, -30));
  EXPECT_EQ(f, std::nextafter(1.0f, 2.0f));  // truncated to 1, lowest bit set
  const float g = DoubleToFloatRoundToOdd(-(1.0 + std::ldexp(1.0, -30)));
  EXPECT_EQ(g, -std::nextafter(1.0f, 2.0f));
  EXPECT_EQ(DoubleToFloatRoundToOdd(1e300), std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isnan(DoubleToFloatRoundToOdd(std::nan(""))));
}

}  // namespace
}  // namespace ottr::runtime::cpu::ew
