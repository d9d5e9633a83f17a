// Forward activations over contiguous tensors and PRelu with broadcasting; formulas as
// runtime/cpu/activation_kernels.cc (arranged so exp never overflows on the branch that is kept:
// Sigmoid, Softplus, Mish, Gelu-tanh), computed in float for float16/bfloat16/float and in double
// for double with CUDA's libdevice math.
#include "runtime/cuda/kernels/activation.h"

#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

// An activation without attributes.
#define OTTR_ACTIVATION_(Name, supported, expr)                    \
  struct Name : OpBase {                                           \
    explicit Name(const ActivationParams&) {}                      \
    template <typename T>                                          \
    static constexpr bool Supports() { return supported; }         \
    template <typename C>                                          \
    __device__ __forceinline__ C operator()(C x) const {         \
      return expr;                                                 \
    }                                                              \
  };

template <typename C>
__device__ __forceinline__ C HardSigmoid(C x, C alpha, C beta) {
  const C v = alpha * x + beta;
  const C lo = v < C(0) ? C(0) : v;
  return lo > C(1) ? C(1) : lo;  // NaN stays NaN
}

template <typename C>
__device__ __forceinline__ C Sigmoid(C x) {
  const C e = MExp(-MFabs(x));  // in (0, 1]: never overflows
  const C r = C(1) / (C(1) + e);
  return x >= C(0) ? r : e * r;
}

// NaN stays NaN (x < 0 is false), as with NumPy's maximum(x, 0).
OTTR_ACTIVATION_(ReluOp, kIsFloat<T> || kIsSignedInt<T>, x < C(0) ? C(0) : x)
OTTR_ACTIVATION_(SigmoidOp, kIsFloat<T>, Sigmoid(x))
OTTR_ACTIVATION_(TanhOp, kIsFloat<T>, MTanh(x))
// max(x, 0) + log1p(exp(-|x|)) = log(1 + e^x) without overflow.
OTTR_ACTIVATION_(SoftplusOp, kIsFloat<T>, (x > C(0) ? x : C(0)) + MLog1p(MExp(-MFabs(x))))
OTTR_ACTIVATION_(SoftsignOp, kIsFloat<T>, x / (C(1) + MFabs(x)))
// alpha = 1/6, beta = 1/2 are fixed by the spec.
OTTR_ACTIVATION_(HardSwishOp, kIsFloat<T>, x * HardSigmoid(x, C(1.0 / 6.0), C(0.5)))
// x Φ(x), Φ(x) = erfc(−x/√2) / 2: no cancellation in the left tail.
OTTR_ACTIVATION_(GeluOp, kIsFloat<T>, C(0.5) * x * MErfc(x * C(-0.7071067811865476)))
#undef OTTR_ACTIVATION_

// x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2); past x = 20 the factor is 1.
struct MishOp : OpBase {
  explicit MishOp(const ActivationParams&) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    const C e = MExp(x > C(20) ? C(20) : x);
    const C n = e * (e + C(2));
    return x > C(20) ? x : x * n / (n + C(2));
  }
};

// x σ(2u), u = √(2/π) (x + 0.044715 x³): (1 + tanh u) / 2 = σ(2u) without cancellation.
struct GeluTanhOp : OpBase {
  explicit GeluTanhOp(const ActivationParams&) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
    const C e = MExp(C(-2) * MFabs(u));
    const C r = C(1) / (C(1) + e);
    return x * (u >= C(0) ? r : e * r);
  }
};

// Activations with attributes: the float attribute converted to the compute type.
struct LeakyReluOp : OpBase {
  explicit LeakyReluOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
  float alpha;
};

struct EluOp : OpBase {
  explicit EluOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return x > C(0) ? x : C(alpha) * MExpm1(x);
  }
  float alpha;
};

struct SeluOp : OpBase {
  explicit SeluOp(const ActivationParams& p) : alpha(p.alpha), gamma(p.gamma) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return C(gamma) * (x > C(0) ? x : C(alpha) * MExpm1(x));
  }
  float alpha;
  float gamma;
};

// max(0, x) + min(0, alpha (exp(x / alpha) - 1)); the second term is 0 exactly for x >= 0.
struct CeluOp : OpBase {
  explicit CeluOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return x > C(0) ? x : C(alpha) * MExpm1(x / C(alpha));
  }
  float alpha;
};

struct HardSigmoidOp : OpBase {
  explicit HardSigmoidOp(const ActivationParams& p) : alpha(p.alpha), beta(p.beta) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return HardSigmoid(x, C(alpha), C(beta));
  }
  float alpha;
  float beta;
};

struct ThresholdedReluOp : OpBase {
  explicit ThresholdedReluOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename T>
  static constexpr bool Supports() { return kIsFloat<T>; }
  template <typename C>
  __device__ __forceinline__ C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
  float alpha;
};

template <typename Op, typename T>
cudaError_t ActivationEntry(const void* x, void* y, int64_t n, const ActivationParams& p,
                            cudaStream_t stream) {
  return LaunchFlatUnary<Op, T, T>(x, y, n, Op(p), stream);
}

template <typename Op>
ActivationFn Entry(int type) {
  ActivationFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Op::template Supports<T>()) fn = &ActivationEntry<Op, T>;
  });
  return fn;
}

// y = x < 0 ? slope x : x; signed integers wrap, unsigned ones are never negative.
struct PReluOp : RawOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T x, T slope) const {
    if constexpr (kIsSignedInt<T>) {
      return x < 0 ? WrapMul(slope, x) : x;
    } else if constexpr (kIsInt<T>) {
      return x;
    } else {
      const ComputeType<T> v = Load(x);
      return Store<T>(v < 0 ? Load(slope) * v : v);
    }
  }
};

}  // namespace

ActivationFn FindActivation(ActivationOp op, int type) {
  switch (op) {
    case ActivationOp::kRelu: return Entry<ReluOp>(type);
    case ActivationOp::kLeakyRelu: return Entry<LeakyReluOp>(type);
    case ActivationOp::kSigmoid: return Entry<SigmoidOp>(type);
    case ActivationOp::kTanh: return Entry<TanhOp>(type);
    case ActivationOp::kGelu: return Entry<GeluOp>(type);
    case ActivationOp::kGeluTanh: return Entry<GeluTanhOp>(type);
    case ActivationOp::kSoftplus: return Entry<SoftplusOp>(type);
    case ActivationOp::kSoftsign: return Entry<SoftsignOp>(type);
    case ActivationOp::kElu: return Entry<EluOp>(type);
    case ActivationOp::kSelu: return Entry<SeluOp>(type);
    case ActivationOp::kCelu: return Entry<CeluOp>(type);
    case ActivationOp::kHardSigmoid: return Entry<HardSigmoidOp>(type);
    case ActivationOp::kHardSwish: return Entry<HardSwishOp>(type);
    case ActivationOp::kThresholdedRelu: return Entry<ThresholdedReluOp>(type);
    case ActivationOp::kMish: return Entry<MishOp>(type);
  }
  return nullptr;
}

BinaryFn FindPRelu(int type) {
  BinaryFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsNumeric<T>) fn = &BinaryEntry<PReluOp, T, T, T>;
  });
  return fn;
}

}  // namespace ottr::cuda::kernels
