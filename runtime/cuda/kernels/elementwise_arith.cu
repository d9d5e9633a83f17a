// Add, Sub, Mul, Div and Mod with broadcasting, as runtime/cpu/elementwise_kernels.cc computes
// them: integers wrap modulo 2^bits, integer Div truncates toward zero (INT_MIN / -1 wraps),
// Mod fmod=0 takes the divisor's sign and fmod=1 the dividend's; float16/bfloat16 compute in
// float and round once.
//
// Integer division by zero: the CPU reports it as an error, which a kernel cannot do. The
// compiler rejects a divisor that is a compile-time constant containing zero; a zero that only
// appears at run time gives quotient 0 and remainder 0 (what NumPy returns, with a warning),
// never a trap or an unspecified value.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

struct AddOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C x, C z) const {
    if constexpr (kIsInt<C>) return WrapAdd(x, z); else return x + z;
  }
};
struct SubOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C x, C z) const {
    if constexpr (kIsInt<C>) return WrapSub(x, z); else return x - z;
  }
};
struct MulOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C x, C z) const {
    if constexpr (kIsInt<C>) return WrapMul(x, z); else return x * z;
  }
};
struct DivOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C x, C z) const {
    if constexpr (kIsInt<C>) {
      if (z == 0) return C(0);
      if constexpr (kIsSignedInt<C>) {
        if (z == C(-1)) return WrapNeg(x);  // INT_MIN / -1 wraps
      }
      return static_cast<C>(x / z);
    } else {
      return x / z;
    }
  }
};

template <bool kFmod>
struct ModOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C x, C z) const {
    C r;
    if constexpr (kIsInt<C>) {
      if (z == 0) return C(0);
      if constexpr (kIsSignedInt<C>) {
        if (z == C(-1)) return C(0);  // INT_MIN % -1 is undefined in C++; the remainder is 0
      }
      r = static_cast<C>(x % z);
      if constexpr (kIsSignedInt<C>) {
        if (!kFmod && r != 0 && ((r < 0) != (z < 0))) r = static_cast<C>(r + z);
      }
    } else {
      r = MFmod(x, z);
      if (!kFmod && r != 0 && ((r < 0) != (z < 0))) r += z;
    }
    return r;
  }
};

template <typename Op>
BinaryFn NumericEntry(int type) {
  BinaryFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsNumeric<T>) fn = &BinaryEntry<Op, T, T, T>;
  });
  return fn;
}

}  // namespace

BinaryFn FindArithmetic(BinaryOp op, int a_type, int b_type) {
  if (a_type != b_type) return nullptr;
  switch (op) {
    case BinaryOp::kAdd: return NumericEntry<AddOp>(a_type);
    case BinaryOp::kSub: return NumericEntry<SubOp>(a_type);
    case BinaryOp::kMul: return NumericEntry<MulOp>(a_type);
    case BinaryOp::kDiv: return NumericEntry<DivOp>(a_type);
    case BinaryOp::kMod: return NumericEntry<ModOp<false>>(a_type);
    case BinaryOp::kFmod: return NumericEntry<ModOp<true>>(a_type);
    default: return nullptr;
  }
}

}  // namespace ottr::cuda::kernels
