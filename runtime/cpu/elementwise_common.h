// Element-type helpers shared by the elementwise and activation CPU kernels: the type a kernel
// computes in, loads/stores through it, and contiguous unary loops.
//
// Half types (float16, bfloat16) are computed in float and rounded once on store; every other
// type computes in itself, so double stays double and integers stay exact.
#ifndef OTTR_RUNTIME_CPU_ELEMENTWISE_COMMON_H_
#define OTTR_RUNTIME_CPU_ELEMENTWISE_COMMON_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "ir/tensor.h"

// The element helpers below (Select, the fast float functions) are forced inline: a loop that
// calls one out of line cannot be vectorised, and GCC's inliner gives up on them in large
// translation units (measured: Elu's backward ran ~40x slower when FastExp stayed a call).
#define OTTR_EW_INLINE [[gnu::always_inline]] inline

namespace ottr::runtime::cpu::ew {

using ir::BFloat16;
using ir::Half;

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// float, double, float16, bfloat16.
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;
// Signed and unsigned integers, not bool.
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
inline constexpr bool kIsSignedInt = kIsInt<T> && std::is_signed_v<T>;
// Every numeric type (not bool, not void).
template <typename T>
inline constexpr bool kIsNumeric = kIsFloat<T> || kIsInt<T>;

// The type arithmetic on T happens in.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Half> {
  using type = float;
};
template <>
struct ComputeTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
inline ComputeType<T> Load(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return ir::HalfToFloat(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ir::BFloat16ToFloat(v);
  } else {
    return v;
  }
}
template <typename T>
inline T Store(ComputeType<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    return ir::FloatToHalf(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ir::FloatToBFloat16(v);
  } else {
    return v;
  }
}

// Integer arithmetic that wraps modulo 2^bits like ONNX Runtime and NumPy instead of signed
// overflow (undefined behaviour in C++). W is wide enough that integer promotion of the operands
// cannot overflow `int` (uint16 * uint16 would).
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
template <typename T>
inline T WrapAdd(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
}
template <typename T>
inline T WrapSub(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b));
}
template <typename T>
inline T WrapMul(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
}
template <typename T>
inline T WrapNeg(T a) {
  return static_cast<T>(WrapType<T>(0) - static_cast<WrapType<T>>(a));
}

// c ? a : b. For float and double the choice is a bitwise blend rather than a branch: with the
// default -ftrapping-math, GCC will not if-convert a floating-point `?:` whose operands involve
// arithmetic, so a loop containing one would not be vectorised. Both a and b are evaluated.
template <typename T>
OTTR_EW_INLINE T Select(bool c, T a, T b) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using I = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
    const I mask = I(0) - static_cast<I>(c);
    return std::bit_cast<T>((std::bit_cast<I>(a) & mask) | (std::bit_cast<I>(b) & ~mask));
  } else {
    return c ? a : b;
  }
}

// exp(x) in float without a library call, so loops using it vectorise. Range reduction
// x = n ln2 + r with |r| <= ln2/2 (n by the 1.5 * 2^23 rounding trick, ln2 split in a 12-bit
// high part and a low part so n * ln2_hi is exact), e^r by its Taylor series to r^7 (truncation
// error < 2^-27), and 2^n applied in two halves so results between FLT_MAX and the smallest
// subnormal come out right. Within 2 ulp of exp over the float range (tested); +inf above 89,
// 0 below -104, NaN for NaN.
OTTR_EW_INLINE float FastExp(float x) {
  x = Select(x < -104.0f, -104.0f, x);
  x = Select(x > 89.0f, 89.0f, x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float fn = t - kRound;
  const float r = (x - fn * 0.693145751953125f) - fn * 1.428606765330187045e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n1 = n >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n - n1 + 127) << 23);
  return p * s1 * s2;
}

// exp(x) - 1 in float, accurate near 0 (no cancellation): with x = n ln2 + r as in FastExp,
// e^x - 1 = 2^n (e^r - 1) + (2^n - 1), where e^r - 1 = r + r^2 (1/2 + r/6 + ...) keeps full
// relative precision for small r. Within 3 ulp (tested); x is clamped to [-88, 88] (results -1
// and 1.6e38; callers that need larger inputs must not use it).
OTTR_EW_INLINE float FastExpm1(float x) {
  x = Select(x < -88.0f, -88.0f, x);
  x = Select(x > 88.0f, 88.0f, x);
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float fn = t - kRound;
  const float r = (x - fn * 0.693145751953125f) - fn * 1.428606765330187045e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  const float q = p * r * r + r;  // e^r - 1
  const float s = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  return s * q + (s - 1.0f);
}

// tanh(x) = -m / (2 + m) with m = expm1(-2|x|) in (-1, 0], sign restored; within 4 ulp.
OTTR_EW_INLINE float FastTanh(float x) {
  const float m = FastExpm1(-2.0f * std::fabs(x));
  return std::copysign(-m / (2.0f + m), x);
}

// e^(hi + lo) in float where hi + lo is not representable as one float: n is chosen from hi + lo,
// but n ln2_hi is subtracted from hi alone (exactly: hi and n ln2_hi are multiples of 2^-22 and
// the difference is small) before lo is added, so hi's low bits are not lost to a rounding of
// the sum. Requires |lo| <= 4 and hi a multiple of 2^-22 (e.g. minus the square of a float with a
// 12-bit mantissa >= 2^-5); otherwise as FastExp.
OTTR_EW_INLINE float FastExpSum(float hi, float lo) {
  const float sum = hi + lo;
  const bool below = sum < -104.0f;
  const bool above = sum > 89.0f;
  hi = Select(below, -104.0f, Select(above, 89.0f, hi));
  lo = Select(below | above, 0.0f, lo);
  constexpr float kRound = 12582912.0f;
  const float t = (hi + lo) * 1.44269504088896341f + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float fn = t - kRound;
  const float r = ((hi - fn * 0.693145751953125f) + lo) - fn * 1.428606765330187045e-6f;
  // |r| <= ln2/2 + 1 ulp of the sum: the series to r^7 as in FastExp.
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n1 = n >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n - n1 + 127) << 23);
  return p * s1 * s2;
}

// erfc(z) for z >= 0 (or NaN) in float: erfc(z) = t e^(−z² + P) with t = 2 / (2 + z), where
// P = log(erfc(z) e^(z²) / t) is smooth in u = 2t − 1 = (2 − z) / (2 + z) ∈ (−1, 1] over all of
// z >= 0 and vanishes at z = 0 (u = 1). So P = (u − 1) R(u) = −z t R(u), R of degree 11 fitted by
// least squares on Chebyshev nodes in 60-digit arithmetic (|error of P| < 1.6e-8); erfc(0) = 1
// exactly. z² is split as zh² + zl (z + zh) with zh the top 12 bits of z, so e^(−z²) keeps full
// relative precision far into the tail. Within 6 ulp of erfc down to FLT_MIN (tested); z > 10.5
// gives 0 (erfc(10.5) < 2^-150).
OTTR_EW_INLINE float FastErfcNonNegative(float z) {
  z = Select(z > 10.5f, 10.5f, z);
  const float t = 2.0f / (2.0f + z);
  const float u = (2.0f - z) * (0.5f * t);
  float r = 2.7077850006055e-5f;
  r = r * u + -6.3031033910566521e-5f;
  r = r * u + -1.3626384576703366e-4f;
  r = r * u + 4.4527147891228947e-4f;
  r = r * u + 3.0874825668366116e-4f;
  r = r * u + -1.9877859345836209e-3f;
  r = r * u + -2.4110592235481589e-4f;
  r = r * u + 8.5711183638261739e-3f;
  r = r * u + -1.2977948107774987e-3f;
  r = r * u + -4.8192042320167796e-2f;
  r = r * u + -8.4910666284495612e-4f;
  r = r * u + 0.67179407845916942f;
  const float p = -(z * t) * r;
  const float zh = std::bit_cast<float>(std::bit_cast<uint32_t>(z) & 0xfffff000u);
  const float zl = z - zh;
  return t * FastExpSum(-(zh * zh), p - zl * (z + zh));
}

// erfc(x) = 2 − erfc(−x) for x < 0.
OTTR_EW_INLINE float FastErfc(float x) {
  const float r = FastErfcNonNegative(std::fabs(x));
  return Select(x < 0.0f, 2.0f - r, r);
}

// erf(x) in float: x Q(x²) for |x| < 1, with Q (degree 6) fitted like P above to erf(x)/x over
// x² in [0, 1] (relative fit error < 1.4e-9), and ±(1 − erfc(|x|)) beyond, where erfc(|x|) <
// 0.16 so nothing cancels. Within 4 ulp (tested); odd, ±1 at ±inf, NaN for NaN.
OTTR_EW_INLINE float FastErf(float x) {
  const float a = std::fabs(x);
  const float s = x * x;
  float q = 7.8824971100866636e-5f;
  q = q * s + -8.018854992786387e-4f;
  q = q * s + 5.1893119426866177e-3f;
  q = q * s + -2.6854328796067244e-2f;
  q = q * s + 0.11283597463488053f;
  q = q * s + -0.37612626903580438f;
  q = q * s + 1.1283791658815026f;
  return Select(a < 1.0f, x * q, std::copysign(1.0f - FastErfcNonNegative(a), x));
}

// exp, expm1, tanh, erf and erfc in the compute type: the fast float versions for float (and the half types
// that compute in float), the C library in double.
template <typename C>
OTTR_EW_INLINE C Exp(C x) {
  if constexpr (std::is_same_v<C, float>) return FastExp(x); else return std::exp(x);
}
template <typename C>
OTTR_EW_INLINE C Expm1(C x) {
  if constexpr (std::is_same_v<C, float>) return FastExpm1(x); else return std::expm1(x);
}
template <typename C>
OTTR_EW_INLINE C Tanh(C x) {
  if constexpr (std::is_same_v<C, float>) return FastTanh(x); else return std::tanh(x);
}
template <typename C>
OTTR_EW_INLINE C Erf(C x) {
  if constexpr (std::is_same_v<C, float>) return FastErf(x); else return std::erf(x);
}
template <typename C>
OTTR_EW_INLINE C Erfc(C x) {
  if constexpr (std::is_same_v<C, float>) return FastErfc(x); else return std::erfc(x);
}

// out[i] = Store(f(Load(in[i]))) for i < n; f maps ComputeType<T> to ComputeType<O> (or to O
// directly when O is not a half type). The loops are flattened (f and everything it calls is
// inlined into them) so they vectorise however large f is.
template <typename T, typename O, typename F>
[[gnu::flatten]] inline void UnaryLoop(const T* in, O* out, int64_t n, F&& f) {
  if constexpr (!kIsHalf<T> && !kIsHalf<O>) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Store<O>(f(Load(in[i])));
  }
}

// out[i] = Store(f(Load(a[i]), Load(b[i]))) for i < n: a loop over two contiguous operands of one
// element type, e.g. the activation backward ops dX = F(dY, Z).
template <typename T, typename F>
[[gnu::flatten]] inline void BinaryLoop(const T* a, const T* b, T* out, int64_t n, F&& f) {
  if constexpr (!kIsHalf<T>) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Store<T>(f(Load(a[i]), Load(b[i])));
  }
}

// Float -> integer conversion: truncation toward zero; values past the integer's range saturate
// and NaN gives 0 (ONNX leaves both undefined; C++ makes them undefined behaviour).
template <typename D, typename F>
inline D SaturatingTruncate(F v) {
  if (v != v) return D(0);
  constexpr int kDigits = std::numeric_limits<D>::digits;  // 7 for int8, 64 for uint64
  constexpr F kLimit = F(2) * static_cast<F>(uint64_t{1} << (kDigits - 1));  // 2^digits, exact
  if (v >= kLimit) return std::numeric_limits<D>::max();
  if constexpr (std::is_signed_v<D>) {
    if (v <= -kLimit) return std::numeric_limits<D>::min();
  } else {
    if (v <= F(-1)) return D(0);
  }
  return static_cast<D>(v);
}

// The float nearest to d in the direction of zero, with its lowest mantissa bit set when inexact
// ("round to odd"). Rounding that float to float16/bfloat16 (fewer than 22 mantissa bits) gives
// the same result as rounding d directly, which a plain double -> float -> half chain does not.
float DoubleToFloatRoundToOdd(double d);

// One element of type S converted to D with ONNX Cast semantics (see elementwise_kernels.cc).
template <typename D, typename S>
inline D ConvertElement(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (kIsHalf<S>) {
      return Load(v) != 0.0f;  // NaN -> true, like every non-zero value
    } else {
      return v != S(0);
    }
  } else if constexpr (kIsHalf<D>) {
    if constexpr (std::is_same_v<S, float>) {
      return Store<D>(v);
    } else if constexpr (kIsHalf<S>) {
      return Store<D>(Load(v));
    } else {
      return Store<D>(DoubleToFloatRoundToOdd(static_cast<double>(v)));
    }
  } else if constexpr (kIsHalf<S>) {
    return ConvertElement<D, float>(Load(v));
  } else if constexpr (kIsInt<D> && std::is_floating_point_v<S>) {
    return SaturatingTruncate<D>(v);
  } else {
    return static_cast<D>(v);  // int <-> int wraps; int -> float rounds; float <-> double
  }
}

// x converted to element type `to` (x itself when it already has that type); Unimplemented for
// types without a C++ element type.
absl::StatusOr<ir::Tensor> CastTensor(const ir::Tensor& x, ir::DType to);

}  // namespace ottr::runtime::cpu::ew

#endif  // OTTR_RUNTIME_CPU_ELEMENTWISE_COMMON_H_
