// Pow(X: T, Y: T1) -> T with broadcasting, every numeric pair, as runtime/cpu/elementwise_kernels.cc:
//   - int ^ int exactly, wrapping like repeated multiplication (negative exponents: the truncated
//     true power, 0 unless |base| == 1);
//   - float ^ float and double ^ double in the base type, float16/bfloat16/float pairs in float;
//   - every other pair (an integer or a double on one side) in double, converted like Cast.
// An exponent of 2 or 1 gives x * x or x, which is what a correctly rounded pow returns (the CPU
// uses glibc's); CUDA's pow is within 2 ulp otherwise. Integer bases with an integral exponent
// are raised by repeated squaring in double, exact below 2^53, so truncation to the integer type
// cannot turn 8.999... into 8.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

template <typename T, typename E>
__device__ __forceinline__ T IntPow(T base, E e) {
  if constexpr (std::is_signed<E>::value) {
    if (e < 0) {
      if (base == 1) return 1;
      if constexpr (std::is_signed<T>::value) {
        if (base == -1) return (e & 1) ? T(-1) : T(1);
      }
      return 0;
    }
  }
  using W = WrapType<T>;
  W result = 1;
  W b = static_cast<W>(base);
  for (uint64_t n = static_cast<uint64_t>(e); n != 0; n >>= 1) {
    if (n & 1) result = static_cast<W>(result * b);
    b = static_cast<W>(b * b);
  }
  return static_cast<T>(result);
}

// x^e in double for an integer-valued x (the base of an integer type).
__device__ __forceinline__ double IntegerBasePow(double x, double e) {
  if (e == 0.5) return sqrt(x);
  if (e == rint(e) && fabs(e) <= 64.0) {
    double result = 1.0, b = x;
    for (uint32_t n = static_cast<uint32_t>(fabs(e)); n != 0; n >>= 1) {
      if (n & 1) result *= b;
      b *= b;
    }
    if (e >= 0.0) return result;
    if (isfinite(result)) return 1.0 / result;
  }
  return pow(x, e);
}

template <typename T, typename E>
struct PowOp : RawOp {
  __device__ __forceinline__ T operator()(T x, E e) const {
    if constexpr (kIsInt<T> && kIsInt<E>) {
      return IntPow(x, e);
    } else if constexpr (std::is_same<T, E>::value && std::is_floating_point<T>::value) {
      if (e == T(2)) return x * x;
      if (e == T(1)) return x;
      return MPow(x, e);
    } else if constexpr (kIsFloat<T> && !std::is_same<T, double>::value && kIsFloat<E> &&
                         !std::is_same<E, double>::value) {
      const float xf = static_cast<float>(Load(x));
      const float ef = static_cast<float>(Load(e));
      const float r = ef == 2.0f ? xf * xf : (ef == 1.0f ? xf : powf(xf, ef));
      return Store<T>(r);
    } else {
      const double xd = static_cast<double>(Load(x));
      const double ed = static_cast<double>(Load(e));
      double r;
      if constexpr (kIsInt<T>) {
        r = IntegerBasePow(xd, ed);
      } else {
        r = ed == 2.0 ? xd * xd : (ed == 1.0 ? xd : pow(xd, ed));
      }
      return ConvertElement<T>(r);
    }
  }
};

}  // namespace

BinaryFn FindPow(int base_type, int exponent_type) {
  BinaryFn fn = nullptr;
  VisitType(base_type, [&](auto base_tag) {
    using T = typename decltype(base_tag)::type;
    if constexpr (kIsNumeric<T>) {
      VisitType(exponent_type, [&](auto exp_tag) {
        using E = typename decltype(exp_tag)::type;
        if constexpr (kIsNumeric<E>) fn = &BinaryEntry<PowOp<T, E>, T, E, T>;
      });
    }
  });
  return fn;
}

}  // namespace ottr::cuda::kernels
