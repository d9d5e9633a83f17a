// Device-side building blocks of the elementwise and activation kernels: element types and the
// type each computes in, conversions with the CPU reference's semantics, 16-byte packs, broadcast
// offsets from an IndexPlan, and the kernel templates with their launchers. Included only by the
// .cu files of this folder (nvcc); the interface is elementwise.h / activation.h.
//
// An op is a functor. By default the kernels load each operand into its compute type (float for
// float16/bfloat16, the type itself otherwise), call op(x...) and round the result to the output
// type once; an op derived from RawOp sees and returns storage values (Cast, Where, Pow's mixed
// forms). Init() runs once per thread before the loop (Clip reads its bounds there).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_DEVICE_H_
#define OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_DEVICE_H_

#ifndef __CUDACC__
#error "elementwise_device.h is for .cu files only"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/cuda/kernels/elementwise.h"

namespace ottr::cuda::kernels {

inline constexpr int kThreads = 256;

// ---- Element types --------------------------------------------------------------------------

template <typename T>
inline constexpr bool kIsHalf = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point<T>::value || kIsHalf<T>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral<T>::value && !std::is_same<T, bool>::value;
template <typename T>
inline constexpr bool kIsSignedInt = kIsInt<T> && std::is_signed<T>::value;
template <typename T>
inline constexpr bool kIsNumeric = kIsFloat<T> || kIsInt<T>;

template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<__half> {
  using type = float;
};
template <>
struct ComputeTypeOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
__device__ __forceinline__ ComputeType<T> Load(T v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __half2float(v);
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// v (a compute value, or already an O) rounded to O once.
template <typename O, typename S>
__device__ __forceinline__ O Store(S v) {
  if constexpr (std::is_same<O, S>::value) {
    return v;
  } else if constexpr (std::is_same<O, __half>::value) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same<O, __nv_bfloat16>::value) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<O>(v);
  }
}

// Integer arithmetic modulo 2^bits (signed overflow is undefined in C++), as on the CPU.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
template <typename T>
__device__ __forceinline__ T WrapAdd(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
}
template <typename T>
__device__ __forceinline__ T WrapSub(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b));
}
template <typename T>
__device__ __forceinline__ T WrapMul(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
}
template <typename T>
__device__ __forceinline__ T WrapNeg(T a) {
  return static_cast<T>(WrapType<T>(0) - static_cast<WrapType<T>>(a));
}

// ---- Math in float or double (explicit overloads: no silent promotion to double) ------------

#define OTTR_MATH_(Name, ffn, dfn)                                              \
  __device__ __forceinline__ float Name(float x) { return ffn(x); }          \
  __device__ __forceinline__ double Name(double x) { return dfn(x); }
OTTR_MATH_(MExp, expf, exp)
OTTR_MATH_(MExpm1, expm1f, expm1)
OTTR_MATH_(MLog, logf, log)
OTTR_MATH_(MLog1p, log1pf, log1p)
OTTR_MATH_(MErf, erff, erf)
OTTR_MATH_(MErfc, erfcf, erfc)
OTTR_MATH_(MTanh, tanhf, tanh)
OTTR_MATH_(MSqrt, sqrtf, sqrt)
OTTR_MATH_(MSin, sinf, sin)
OTTR_MATH_(MCos, cosf, cos)
OTTR_MATH_(MCeil, ceilf, ceil)
OTTR_MATH_(MFloor, floorf, floor)
OTTR_MATH_(MRint, rintf, rint)  // round half to even, like nearbyint in the default mode
OTTR_MATH_(MFabs, fabsf, fabs)
#undef OTTR_MATH_
__device__ __forceinline__ float MPow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double MPow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float MFmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double MFmod(double x, double y) { return fmod(x, y); }

// ---- Conversions (runtime/cpu/elementwise_common.h ConvertElement) ---------------------------

// Float -> integer: truncation toward zero; out-of-range values saturate, NaN gives 0.
template <typename D, typename F>
__device__ __forceinline__ D SaturatingTruncate(F v) {
  if (v != v) return D(0);
  constexpr int kDigits = std::numeric_limits<D>::digits;
  constexpr F kLimit = F(2) * static_cast<F>(uint64_t{1} << (kDigits - 1));  // 2^digits, exact
  if (v >= kLimit) return std::numeric_limits<D>::max();
  if constexpr (std::is_signed<D>::value) {
    if (v <= -kLimit) return std::numeric_limits<D>::min();
  } else {
    if (v <= F(-1)) return D(0);
  }
  return static_cast<D>(v);
}

// d truncated to float with the lowest mantissa bit set when inexact ("round to odd"): rounding
// that float to float16/bfloat16 equals rounding d directly (see the CPU version).
__device__ __forceinline__ float DoubleToFloatRoundToOdd(double d) {
  const float f = __double2float_rz(d);
  if (d != d || static_cast<double>(f) == d) return f;
  return __uint_as_float(__float_as_uint(f) | 1u);
}

template <typename D, typename S>
__device__ __forceinline__ D ConvertElement(S v) {
  if constexpr (std::is_same<D, S>::value) {
    return v;
  } else if constexpr (std::is_same<D, bool>::value) {
    if constexpr (kIsHalf<S>) {
      return Load(v) != 0.0f;  // NaN -> true
    } else {
      return v != S(0);
    }
  } else if constexpr (kIsHalf<D>) {
    if constexpr (std::is_same<S, float>::value) {
      return Store<D>(v);
    } else if constexpr (kIsHalf<S>) {
      return Store<D>(Load(v));
    } else {
      return Store<D>(DoubleToFloatRoundToOdd(static_cast<double>(v)));
    }
  } else if constexpr (kIsHalf<S>) {
    return ConvertElement<D, float>(Load(v));
  } else if constexpr (kIsInt<D> && std::is_floating_point<S>::value) {
    return SaturatingTruncate<D>(v);
  } else {
    return static_cast<D>(v);  // int <-> int wraps; int -> float rounds to nearest; float <-> double
  }
}

// ---- Ops ------------------------------------------------------------------------------------

struct OpBase {
  __device__ __forceinline__ void Init() {}
};
// Ops that take and return storage values.
struct RawOp : OpBase {};

template <typename O, typename Op, typename... X>
__device__ __forceinline__ O Apply(const Op& op, X... x) {
  if constexpr (std::is_base_of<RawOp, Op>::value) {
    return op(x...);
  } else {
    return Store<O>(op(Load(x)...));
  }
}

// ---- Packs and offsets ----------------------------------------------------------------------

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per 16-byte pack of the widest type.
template <typename... Ts>
constexpr int PackWidth() {
  return static_cast<int>(16 / std::max({sizeof(Ts)...}));
}

template <int V, typename T>
__device__ __forceinline__ Pack<T, V> LoadPack(const T* p, int64_t off, bool contiguous) {
  if (contiguous) return *reinterpret_cast<const Pack<T, V>*>(p + off);
  Pack<T, V> r;
  const T x = p[off];
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = x;
  return r;
}

__device__ __forceinline__ uint64_t FastDiv(uint64_t n, const FastDivisor& d) {
  return (__umul64hi(n, d.magic) + n) >> d.shift;
}

// off[k] = element offset of operand k for output element i.
template <int N>
__device__ __forceinline__ void PlanOffsets(const IndexPlan<N>& p, int64_t i, int64_t (&off)[N]) {
  if (p.rank == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i * p.strides[0][k];
    return;
  }
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  uint64_t rem = static_cast<uint64_t>(i);
#pragma unroll
  for (int d = 0; d < kMaxRank; ++d) {
    if (d == p.rank - 1) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(rem) * p.strides[d][k];
      break;
    }
    const uint64_t q = FastDiv(rem, p.dims[d]);
    const int64_t r = static_cast<int64_t>(rem - q * p.dims[d].divisor);
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += r * p.strides[d][k];
    rem = q;
  }
}

// ---- Launch geometry ------------------------------------------------------------------------

inline int SmCount() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      n = 132;
    }
    return n;
  }();
  return sms;
}

// Blocks for `work` threads of grid-stride loops: at most 32 blocks of 256 threads per SM (four
// waves at full occupancy), at least 1.
inline unsigned GridFor(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(SmCount()) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap)));
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Whether a plan's innermost dim allows packs of V (rank 1: a scalar tail finishes the rest).
template <int N>
inline bool PlanVectorizable(const IndexPlan<N>& p, int v) {
  return p.rank == 1 || p.dims[0].divisor % static_cast<uint64_t>(v) == 0;
}

// ---- Kernels --------------------------------------------------------------------------------

// out[i] = op(in[i]) over n contiguous elements.
template <int V, typename Op, typename I, typename O>
__global__ void __launch_bounds__(kThreads)
    FlatUnaryKernel(const I* __restrict__ in, O* __restrict__ out, int64_t n, bool vec, Op op) {
  op.Init();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / V;
    for (int64_t v = t; v < nv; v += step) {
      const Pack<I, V> a = reinterpret_cast<const Pack<I, V>*>(in)[v];
      Pack<O, V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = Apply<O>(op, a.v[j]);
      reinterpret_cast<Pack<O, V>*>(out)[v] = r;
    }
    done = nv * V;
  }
  for (int64_t i = done + t; i < n; i += step) out[i] = Apply<O>(op, in[i]);
}

// out[i] = op(a[i], b[i]) over n contiguous elements (the activation backward ops).
template <int V, typename Op, typename T>
__global__ void __launch_bounds__(kThreads)
    FlatBinaryKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n,
                     bool vec, Op op) {
  op.Init();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / V;
    for (int64_t v = t; v < nv; v += step) {
      const Pack<T, V> x = reinterpret_cast<const Pack<T, V>*>(a)[v];
      const Pack<T, V> y = reinterpret_cast<const Pack<T, V>*>(b)[v];
      Pack<T, V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = Apply<T>(op, x.v[j], y.v[j]);
      reinterpret_cast<Pack<T, V>*>(out)[v] = r;
    }
    done = nv * V;
  }
  for (int64_t i = done + t; i < n; i += step) out[i] = Apply<T>(op, a[i], b[i]);
}

// out[i] = op(a[ia(i)], b[ib(i)]) over a broadcast plan.
template <int V, typename Op, typename A, typename B, typename O>
__global__ void __launch_bounds__(kThreads)
    BinaryKernel(const __grid_constant__ IndexPlan<2> p, const A* __restrict__ a,
                 const B* __restrict__ b, O* __restrict__ out, bool vec, Op op) {
  op.Init();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = p.n / V;
    for (int64_t v = t; v < nv; v += step) {
      const int64_t i = v * V;
      int64_t off[2];
      PlanOffsets(p, i, off);
      const Pack<A, V> x = LoadPack<V>(a, off[0], p.inner_contiguous[0]);
      const Pack<B, V> y = LoadPack<V>(b, off[1], p.inner_contiguous[1]);
      Pack<O, V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = Apply<O>(op, x.v[j], y.v[j]);
      *reinterpret_cast<Pack<O, V>*>(out + i) = r;
    }
    done = nv * V;
  }
  for (int64_t i = done + t; i < p.n; i += step) {
    int64_t off[2];
    PlanOffsets(p, i, off);
    out[i] = Apply<O>(op, a[off[0]], b[off[1]]);
  }
}

// out[i] = op(a[ia(i)], b[ib(i)], c[ic(i)]) over a broadcast plan.
template <int V, typename Op, typename A, typename B, typename C, typename O>
__global__ void __launch_bounds__(kThreads)
    TernaryKernel(const __grid_constant__ IndexPlan<3> p, const A* __restrict__ a,
                  const B* __restrict__ b, const C* __restrict__ c, O* __restrict__ out, bool vec,
                  Op op) {
  op.Init();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = p.n / V;
    for (int64_t v = t; v < nv; v += step) {
      const int64_t i = v * V;
      int64_t off[3];
      PlanOffsets(p, i, off);
      const Pack<A, V> x = LoadPack<V>(a, off[0], p.inner_contiguous[0]);
      const Pack<B, V> y = LoadPack<V>(b, off[1], p.inner_contiguous[1]);
      const Pack<C, V> z = LoadPack<V>(c, off[2], p.inner_contiguous[2]);
      Pack<O, V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = Apply<O>(op, x.v[j], y.v[j], z.v[j]);
      *reinterpret_cast<Pack<O, V>*>(out + i) = r;
    }
    done = nv * V;
  }
  for (int64_t i = done + t; i < p.n; i += step) {
    int64_t off[3];
    PlanOffsets(p, i, off);
    out[i] = Apply<O>(op, a[off[0]], b[off[1]], c[off[2]]);
  }
}

// ---- Launchers ------------------------------------------------------------------------------

template <typename Op, typename I, typename O>
cudaError_t LaunchFlatUnary(const void* in, void* out, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int V = PackWidth<I, O>();
  const bool vec = Aligned16(in) && Aligned16(out);
  FlatUnaryKernel<V, Op, I, O><<<GridFor(vec ? std::max<int64_t>(n / V, 1) : n), kThreads, 0, stream>>>(
      static_cast<const I*>(in), static_cast<O*>(out), n, vec, op);
  return cudaGetLastError();
}

template <typename Op, typename T>
cudaError_t LaunchFlatBinary(const void* a, const void* b, void* out, int64_t n, Op op,
                             cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int V = PackWidth<T>();
  const bool vec = Aligned16(a) && Aligned16(b) && Aligned16(out);
  FlatBinaryKernel<V, Op, T><<<GridFor(vec ? std::max<int64_t>(n / V, 1) : n), kThreads, 0, stream>>>(
      static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, vec, op);
  return cudaGetLastError();
}

template <typename Op, typename A, typename B, typename O>
cudaError_t LaunchBinary(const IndexPlan<2>& p, const void* a, const void* b, void* out,
                         Op op, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  constexpr int V = PackWidth<A, B, O>();
  const bool vec = PlanVectorizable(p, V) && (!p.inner_contiguous[0] || Aligned16(a)) &&
                   (!p.inner_contiguous[1] || Aligned16(b)) && Aligned16(out);
  BinaryKernel<V, Op, A, B, O><<<GridFor(vec ? std::max<int64_t>(p.n / V, 1) : p.n), kThreads, 0, stream>>>(
      p, static_cast<const A*>(a), static_cast<const B*>(b), static_cast<O*>(out), vec, op);
  return cudaGetLastError();
}

// A BinaryFn for a default-constructed op.
template <typename Op, typename A, typename B, typename O>
cudaError_t BinaryEntry(const IndexPlan<2>& p, const void* a, const void* b, void* out,
                        cudaStream_t stream) {
  return LaunchBinary<Op, A, B, O>(p, a, b, out, Op{}, stream);
}

template <typename Op, typename A, typename B, typename C, typename O>
cudaError_t LaunchTernary(const IndexPlan<3>& p, const void* a, const void* b, const void* c,
                          void* out, Op op, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  constexpr int V = PackWidth<A, B, C, O>();
  const bool vec = PlanVectorizable(p, V) && (!p.inner_contiguous[0] || Aligned16(a)) &&
                   (!p.inner_contiguous[1] || Aligned16(b)) &&
                   (!p.inner_contiguous[2] || Aligned16(c)) && Aligned16(out);
  TernaryKernel<V, Op, A, B, C, O><<<GridFor(vec ? std::max<int64_t>(p.n / V, 1) : p.n), kThreads, 0, stream>>>(
      p, static_cast<const A*>(a), static_cast<const B*>(b), static_cast<const C*>(c),
      static_cast<O*>(out), vec, op);
  return cudaGetLastError();
}

// ---- Host dispatch on ONNX element-type codes -----------------------------------------------

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the C++ type of ONNX code `code`; false for codes without one.
template <typename F>
bool VisitType(int code, F&& f) {
  switch (code) {
    case 1: f(TypeTag<float>{}); return true;
    case 2: f(TypeTag<uint8_t>{}); return true;
    case 3: f(TypeTag<int8_t>{}); return true;
    case 4: f(TypeTag<uint16_t>{}); return true;
    case 5: f(TypeTag<int16_t>{}); return true;
    case 6: f(TypeTag<int32_t>{}); return true;
    case 7: f(TypeTag<int64_t>{}); return true;
    case 9: f(TypeTag<bool>{}); return true;
    case 10: f(TypeTag<__half>{}); return true;
    case 11: f(TypeTag<double>{}); return true;
    case 12: f(TypeTag<uint32_t>{}); return true;
    case 13: f(TypeTag<uint64_t>{}); return true;
    case 16: f(TypeTag<__nv_bfloat16>{}); return true;
    default: return false;
  }
}

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_DEVICE_H_
