// Unary math (Neg, Abs, Sign, Erf, Sqrt, Exp, Log, Reciprocal, Ceil, Floor, Round, Sin, Cos),
// Not and Clip over contiguous tensors, with the element types and formulas of
// runtime/cpu/elementwise_kernels.cc. Float math uses CUDA's libdevice functions (exp, sin, ...
// within 1-2 ulp; sqrt, ceil, floor, rint and division exact), so results can differ from the
// CPU's in the last bit.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

struct NegOp : OpBase {
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T> || kIsSignedInt<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    if constexpr (kIsInt<C>) return WrapNeg(x); else return -x;
  }
};
struct AbsOp : OpBase {
  template <typename T>
  static constexpr bool Supports() { return kIsNumeric<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    if constexpr (kIsSignedInt<C>) {
      return x < 0 ? WrapNeg(x) : x;
    } else if constexpr (kIsInt<C>) {
      return x;
    } else {
      return MFabs(x);
    }
  }
};
struct SignOp : OpBase {
  template <typename T>
  static constexpr bool Supports() { return kIsNumeric<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    if constexpr (kIsFloat<C>) {
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // keeps NaN and signed zero
    } else if constexpr (kIsSignedInt<C>) {
      return static_cast<C>((x > 0) - (x < 0));
    } else {
      return static_cast<C>(x != 0);
    }
  }
};
struct ErfOp : OpBase {
  template <typename T>
  static constexpr bool Supports() { return kIsNumeric<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    if constexpr (kIsFloat<C>) {
      return MErf(x);
    } else {
      return ConvertElement<C>(erf(static_cast<double>(x)));
    }
  }
};

#define OTTR_FLOAT_UNARY_OP_(Name, expr)                     \
  struct Name : OpBase {                                     \
    template <typename T>                                    \
    static constexpr bool Supports() { return kIsFloat<T>; } \
    template <typename C>                                    \
    __device__ __forceinline__ C operator()(C x) const {   \
      return expr;                                           \
    }                                                        \
  };
OTTR_FLOAT_UNARY_OP_(SqrtOp, MSqrt(x))
OTTR_FLOAT_UNARY_OP_(ExpOp, MExp(x))
OTTR_FLOAT_UNARY_OP_(LogOp, MLog(x))
OTTR_FLOAT_UNARY_OP_(ReciprocalOp, C(1) / x)
OTTR_FLOAT_UNARY_OP_(CeilOp, MCeil(x))
OTTR_FLOAT_UNARY_OP_(FloorOp, MFloor(x))
OTTR_FLOAT_UNARY_OP_(RoundOp, MRint(x))
OTTR_FLOAT_UNARY_OP_(SinOp, MSin(x))
OTTR_FLOAT_UNARY_OP_(CosOp, MCos(x))
#undef OTTR_FLOAT_UNARY_OP_

struct NotOp : OpBase {
  template <typename T>
  static constexpr bool Supports() { return std::is_same<T, bool>::value; }
  __device__ __forceinline__ bool operator()(bool x) const { return !x; }
};

template <typename Op, typename T>
cudaError_t UnaryEntry(const void* in, void* out, int64_t n, cudaStream_t stream) {
  return LaunchFlatUnary<Op, T, T>(in, out, n, Op{}, stream);
}

template <typename Op>
UnaryFn Entry(int type) {
  UnaryFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Op::template Supports<T>()) fn = &UnaryEntry<Op, T>;
  });
  return fn;
}

// min(max(x, lo), hi) with the bounds read from device memory once per thread: with lo > hi
// every element becomes hi; NaN stays NaN. A missing bound is -inf / +inf (the type's lowest /
// highest value for integers).
template <typename T>
struct ClipOp : OpBase {
  using C = ComputeType<T>;
  const T* lo_ptr = nullptr;
  const T* hi_ptr = nullptr;
  C lo = C(0);  // set by Init()
  C hi = C(0);
  __device__ __forceinline__ void Init() {
    if constexpr (kIsFloat<C>) {
      lo = lo_ptr != nullptr ? Load(*lo_ptr) : -std::numeric_limits<C>::infinity();
      hi = hi_ptr != nullptr ? Load(*hi_ptr) : std::numeric_limits<C>::infinity();
    } else {
      lo = lo_ptr != nullptr ? *lo_ptr : std::numeric_limits<C>::lowest();
      hi = hi_ptr != nullptr ? *hi_ptr : std::numeric_limits<C>::max();
    }
  }
  __device__ __forceinline__ C operator()(C v) const {
    const C t = v < lo ? lo : v;
    return t > hi ? hi : t;
  }
};

template <typename T>
cudaError_t ClipEntry(const void* x, const void* lo, const void* hi, void* out, int64_t n,
                      cudaStream_t stream) {
  ClipOp<T> op;
  op.lo_ptr = static_cast<const T*>(lo);
  op.hi_ptr = static_cast<const T*>(hi);
  return LaunchFlatUnary<ClipOp<T>, T, T>(x, out, n, op, stream);
}

}  // namespace

UnaryFn FindUnary(UnaryOp op, int type) {
  switch (op) {
    case UnaryOp::kNeg: return Entry<NegOp>(type);
    case UnaryOp::kAbs: return Entry<AbsOp>(type);
    case UnaryOp::kSign: return Entry<SignOp>(type);
    case UnaryOp::kErf: return Entry<ErfOp>(type);
    case UnaryOp::kSqrt: return Entry<SqrtOp>(type);
    case UnaryOp::kExp: return Entry<ExpOp>(type);
    case UnaryOp::kLog: return Entry<LogOp>(type);
    case UnaryOp::kReciprocal: return Entry<ReciprocalOp>(type);
    case UnaryOp::kCeil: return Entry<CeilOp>(type);
    case UnaryOp::kFloor: return Entry<FloorOp>(type);
    case UnaryOp::kRound: return Entry<RoundOp>(type);
    case UnaryOp::kSin: return Entry<SinOp>(type);
    case UnaryOp::kCos: return Entry<CosOp>(type);
    case UnaryOp::kNot: return Entry<NotOp>(type);
  }
  return nullptr;
}

ClipFn FindClip(int type) {
  ClipFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsNumeric<T>) fn = &ClipEntry<T>;
  });
  return fn;
}

}  // namespace ottr::cuda::kernels
