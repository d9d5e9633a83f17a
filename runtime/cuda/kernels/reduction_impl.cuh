// Templates behind reduction_kernels.h, included by the per-dtype reduction_*.cu files (CUDA only).
// See reduction_kernels.h for the plan, the strategies and the accumulation rules.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_IMPL_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_IMPL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/cuda/kernels/reduction_kernels.h"

namespace ottr::cuda::kernels::reduce_impl {

// ---- element types -------------------------------------------------------------------------

template <typename T>
struct IsHalfLike : std::false_type {};
template <>
struct IsHalfLike<__half> : std::true_type {};
template <>
struct IsHalfLike<__nv_bfloat16> : std::true_type {};

template <typename T>
constexpr bool kIsFloat = std::is_floating_point<T>::value || IsHalfLike<T>::value;

// float16/bfloat16 -> float; other types unchanged.
template <typename T>
__device__ __forceinline__ auto Widen(T v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __half2float(v);
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// A float/double result rounded to the float type T.
template <typename T, typename F>
__device__ __forceinline__ T NarrowFloat(F v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// double -> integer T truncating toward zero and saturating, NaN -> 0 (the CPU reference's
// SaturatingFromDouble).
template <typename T>
__device__ __forceinline__ T SaturateFromDouble(double v) {
  if constexpr (std::is_same<T, bool>::value) {
    return v != 0.0;
  } else {
    if (isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

template <typename F>
struct LsePair {
  F m;  // running max
  F s;  // sum of exp(x - m)
};

template <typename F>
__device__ __forceinline__ F Exp(F v) {
  if constexpr (std::is_same<F, float>::value) {
    return expf(v);
  } else {
    return exp(v);
  }
}
template <typename F>
__device__ __forceinline__ F Log(F v) {
  if constexpr (std::is_same<F, float>::value) {
    return logf(v);
  } else {
    return log(v);
  }
}
template <typename F>
__device__ __forceinline__ F Sqrt(F v) {
  if constexpr (std::is_same<F, float>::value) {
    return sqrtf(v);
  } else {
    return sqrt(v);
  }
}

// ---- the reduction operations ---------------------------------------------------------------

template <typename T, ReduceKind K>
struct Reducer {
  static constexpr bool kFloatT = kIsFloat<T>;
  static constexpr bool kIntInDouble =
      !kFloatT && (K == ReduceKind::kL2 || K == ReduceKind::kLogSum || K == ReduceKind::kLogSumExp);
  static constexpr bool kExtremum = K == ReduceKind::kMax || K == ReduceKind::kMin;
  using FloatAcc = std::conditional_t<std::is_same<T, double>::value, double, float>;
  using Scalar = std::conditional_t<
      kFloatT, FloatAcc,
      std::conditional_t<kIntInDouble, double, std::conditional_t<kExtremum, T, uint64_t>>>;
  static constexpr bool kLse = K == ReduceKind::kLogSumExp;
  using Acc = std::conditional_t<kLse, LsePair<Scalar>, Scalar>;
  static constexpr bool kFloatMath = kFloatT || kIntInDouble;  // Scalar is float or double

  __device__ __forceinline__ static Acc Init() {
    if constexpr (kLse) {
      return Acc{-std::numeric_limits<Scalar>::infinity(), Scalar(0)};
    } else if constexpr (K == ReduceKind::kProd) {
      return Scalar(1);
    } else if constexpr (K == ReduceKind::kMax) {
      if constexpr (kFloatT) {
        return -std::numeric_limits<Scalar>::infinity();
      } else {
        return std::numeric_limits<T>::lowest();
      }
    } else if constexpr (K == ReduceKind::kMin) {
      if constexpr (kFloatT) {
        return std::numeric_limits<Scalar>::infinity();
      } else {
        return std::numeric_limits<T>::max();
      }
    } else {
      return Scalar(0);
    }
  }

  // The element as a Scalar (integers convert modulo 2^64 for the 64-bit sums).
  __device__ __forceinline__ static Scalar Lift(T x) {
    if constexpr (kFloatT) {
      return static_cast<Scalar>(Widen(x));
    } else {
      return static_cast<Scalar>(x);
    }
  }

  __device__ __forceinline__ static Scalar MaxOf(Scalar a, Scalar b) {
    if constexpr (kFloatMath) {
      if (isnan(a)) return a;
      return (isnan(b) || b > a) ? b : a;
    } else if constexpr (std::is_same<Scalar, bool>::value) {
      return a || b;
    } else {
      return b > a ? b : a;
    }
  }
  __device__ __forceinline__ static Scalar MinOf(Scalar a, Scalar b) {
    if constexpr (kFloatMath) {
      if (isnan(a)) return a;
      return (isnan(b) || b < a) ? b : a;
    } else if constexpr (std::is_same<Scalar, bool>::value) {
      return a && b;
    } else {
      return b < a ? b : a;
    }
  }

  __device__ __forceinline__ static Acc Combine(Acc a, Acc b) {
    if constexpr (kLse) {
      if (isnan(a.m) || isnan(b.m)) return Acc{a.m + b.m, Scalar(0)};
      const Scalar m = a.m > b.m ? a.m : b.m;
      if (isinf(m)) return Acc{m, Scalar(0)};  // all -inf (or empty), or a +inf
      return Acc{m, a.s * Exp(a.m - m) + b.s * Exp(b.m - m)};
    } else if constexpr (K == ReduceKind::kProd) {
      return a * b;
    } else if constexpr (K == ReduceKind::kMax) {
      return MaxOf(a, b);
    } else if constexpr (K == ReduceKind::kMin) {
      return MinOf(a, b);
    } else {
      return a + b;
    }
  }

  __device__ __forceinline__ static Acc Apply(Acc a, T x) {
    const Scalar v = Lift(x);
    if constexpr (kLse) {
      return Combine(a, Acc{v, Scalar(1)});
    } else if constexpr (K == ReduceKind::kSumSquare || K == ReduceKind::kL2) {
      return a + v * v;
    } else if constexpr (K == ReduceKind::kL1) {
      if constexpr (kFloatMath) {
        return a + (v < Scalar(0) ? -v : v);
      } else if constexpr (std::is_signed<T>::value) {
        return a + (x < T(0) ? uint64_t{0} - v : v);
      } else {
        return a + v;
      }
    } else {
      return Combine(a, v);
    }
  }

  __device__ __forceinline__ static T Finalize(Acc a, int64_t count) {
    if constexpr (kLse) {
      const Scalar r = isinf(a.m) ? a.m : a.m + Log(a.s);  // NaN stays NaN
      return Store(r);
    } else if constexpr (K == ReduceKind::kL2) {
      return Store(Sqrt(a));
    } else if constexpr (K == ReduceKind::kLogSum) {
      return Store(Log(a));
    } else if constexpr (K == ReduceKind::kMean) {
      if constexpr (kFloatT) {
        return Store(a / static_cast<Scalar>(count));  // 0/0 = NaN for an empty set
      } else {
        if (count == 0) return T(0);
        if constexpr (std::is_signed<T>::value) {
          return static_cast<T>(static_cast<int64_t>(a) / count);
        } else {
          return static_cast<T>(a / static_cast<uint64_t>(count));
        }
      }
    } else {
      return Store(a);
    }
  }

  __device__ __forceinline__ static T Store(Scalar r) {
    if constexpr (kFloatT) {
      return NarrowFloat<T>(r);
    } else if constexpr (kIntInDouble) {
      return SaturateFromDouble<T>(r);
    } else {
      return static_cast<T>(r);  // 64-bit wrap-around truncated to T
    }
  }
};

template <typename T, ReduceKind K>
constexpr bool KindSupported() {
  if constexpr (std::is_same<T, bool>::value) {
    return K == ReduceKind::kMax || K == ReduceKind::kMin;
  } else {
    return true;
  }
}

// ---- warp and block combination (fixed trees: deterministic) --------------------------------

template <typename A>
struct IsLse : std::false_type {};
template <typename F>
struct IsLse<LsePair<F>> : std::true_type {};

template <typename A>
__device__ __forceinline__ A ShflXor(A v, int mask) {
  if constexpr (IsLse<A>::value) {
    return A{ShflXor(v.m, mask), ShflXor(v.s, mask)};
  } else if constexpr (std::is_same<A, float>::value || std::is_same<A, double>::value ||
                       std::is_same<A, long long>::value ||
                       std::is_same<A, unsigned long long>::value || std::is_same<A, int>::value ||
                       std::is_same<A, unsigned int>::value || std::is_same<A, long>::value ||
                       std::is_same<A, unsigned long>::value) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  } else {
    // bool, 8-bit and 16-bit integers travel as int.
    return static_cast<A>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), mask));
  }
}

template <typename R>
__device__ __forceinline__ typename R::Acc WarpReduce(typename R::Acc a) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) a = R::Combine(a, ShflXor(a, mask));
  return a;
}

// Combines the (already warp-reduced) values of every warp of the block; the result is valid in
// thread 0. All threads of the block must call it.
template <typename R>
__device__ __forceinline__ typename R::Acc BlockReduce(typename R::Acc a) {
  using Acc = typename R::Acc;
  __shared__ Acc partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = (blockDim.x + 31) >> 5;
  if (lane == 0) partial[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < num_warps ? partial[lane] : R::Init();
    a = WarpReduce<R>(a);
  }
  __syncthreads();  // `partial` may be reused by a later call
  return a;
}

// ---- index maps --------------------------------------------------------------------------

// Offset in the input of index `i` (< the product of dims) decomposed row-major over
// dims[0..n) with `strides`. The outermost dim needs no division, so one dim costs none.
__device__ __forceinline__ int64_t DecomposeOffset(int64_t i, int n, const int64_t* dims,
                                                   const int64_t* strides) {
  if (n == 0) return 0;
  int64_t off = 0;
#pragma unroll
  for (int d = kReduceMaxDims - 1; d >= 1; --d) {
    if (d < n) {
      const int64_t q = i / dims[d];
      off += (i - q * dims[d]) * strides[d];
      i = q;
    }
  }
  return off + i * strides[0];
}

// ---- kernels -------------------------------------------------------------------------------

// kRow: see reduction_kernels.h. A unit is (output o, split s) and reduces the flattened reduced
// positions [s * chunk, min((s + 1) * chunk, count)) of output o, position j being element
// j % inner of segment j / inner.
template <typename T, ReduceKind K, bool kVec>
__global__ void __launch_bounds__(kReduceBlockThreads)
    RowKernel(const T* __restrict__ x, T* __restrict__ y,
              typename Reducer<T, K>::Acc* __restrict__ partial, ReducePlan p) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  int64_t unit;
  int tid, nt;
  if (p.block_unit) {
    unit = blockIdx.x;
    tid = threadIdx.x;
    nt = blockDim.x;
  } else {
    unit = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    tid = threadIdx.x & 31;
    nt = 32;
  }
  const bool active = unit < p.num_out * p.splits;
  Acc acc = R::Init();
  int64_t o = 0, s = 0;
  if (active) {
    o = unit / p.splits;
    s = unit - o * p.splits;
    const int64_t base = DecomposeOffset(o, p.num_kept, p.kept_dims, p.kept_strides);
    const int64_t j0 = s * p.chunk;
    const int64_t j1 = min(j0 + p.chunk, p.count);
    const int64_t len = p.inner;
    if constexpr (kVec) {
      // float4 units over the flattened positions, tracking (segment, unit within it), so that
      // rows shorter than the unit's span keep every thread busy; four loads in flight per step.
      // len, j0 and j1 are multiples of 4 elements (plan.vec == 4).
      const int64_t len4 = len >> 2, q1 = j1 >> 2;
      int64_t q = (j0 >> 2) + tid;
      int64_t seg = q / len4, l = q - seg * len4;
      const int64_t dseg = nt / len4, dl = nt - dseg * len4;
      auto row_of = [&](int64_t sg) {
        return reinterpret_cast<const float4*>(x + base + DecomposeOffset(sg, p.num_red, p.red_dims, p.red_strides));
      };
      const float4* row = row_of(seg);
      auto at = [&]() {
        const float4* v = row + l;
        l += dl;
        const int64_t next = seg + dseg + (l >= len4 ? 1 : 0);
        if (l >= len4) l -= len4;
        if (next != seg) {
          seg = next;
          row = row_of(seg);
        }
        return v;
      };
      Acc a1 = R::Init(), a2 = R::Init(), a3 = R::Init();
      for (; q + 3 * static_cast<int64_t>(nt) < q1; q += 4 * static_cast<int64_t>(nt)) {
        const float4* p0 = at();
        const float4* p1 = at();
        const float4* p2 = at();
        const float4* p3 = at();
        const float4 v0 = *p0, v1 = *p1, v2 = *p2, v3 = *p3;
        acc = R::Apply(R::Apply(R::Apply(R::Apply(acc, v0.x), v1.x), v2.x), v3.x);
        a1 = R::Apply(R::Apply(R::Apply(R::Apply(a1, v0.y), v1.y), v2.y), v3.y);
        a2 = R::Apply(R::Apply(R::Apply(R::Apply(a2, v0.z), v1.z), v2.z), v3.z);
        a3 = R::Apply(R::Apply(R::Apply(R::Apply(a3, v0.w), v1.w), v2.w), v3.w);
      }
      for (; q < q1; q += nt) {
        const float4 v = *at();
        acc = R::Apply(acc, v.x);
        a1 = R::Apply(a1, v.y);
        a2 = R::Apply(a2, v.z);
        a3 = R::Apply(a3, v.w);
      }
      acc = R::Combine(R::Combine(acc, a1), R::Combine(a2, a3));
    } else if (len >= 32 || p.num_red == 0) {
      // Whole rows: threads stride along each contiguous segment.
      for (int64_t seg = j0 / len; seg * len < j1; ++seg) {
        const T* row = x + base + DecomposeOffset(seg, p.num_red, p.red_dims, p.red_strides);
        const int64_t lb = max(j0 - seg * len, int64_t{0});
        const int64_t le = min(j1 - seg * len, len);
#pragma unroll 4
        for (int64_t l = lb + tid; l < le; l += nt) acc = R::Apply(acc, row[l]);
      }
    } else {
      // Short segments: threads stride over the flattened positions, tracking (segment, l).
      int64_t j = j0 + tid;
      int64_t seg = j / len, l = j - seg * len;
      const int64_t dseg = nt / len, dl = nt - dseg * len;
      for (; j < j1; j += nt) {
        acc = R::Apply(acc, x[base + DecomposeOffset(seg, p.num_red, p.red_dims, p.red_strides) + l]);
        seg += dseg;
        l += dl;
        if (l >= len) {
          l -= len;
          ++seg;
        }
      }
    }
  }
  acc = WarpReduce<R>(acc);
  if (p.block_unit) acc = BlockReduce<R>(acc);
  if (active && tid == 0) {
    if (p.splits == 1) {
      y[o] = R::Finalize(acc, p.count);
    } else {
      partial[o * p.splits + s] = acc;
    }
  }
}

// kColumn: block (kReduceColumnX, kReduceColumnY); blockIdx.x = batch * tiles_per_batch + tile,
// blockIdx.y = split. Thread (tx, ty) reduces rows ty, ty + 8, ... of its split for the V
// contiguous outputs starting at column (tile * 32 + tx) * V.
template <typename T, ReduceKind K, int V>
__global__ void __launch_bounds__(kReduceColumnX * kReduceColumnY)
    ColumnKernel(const T* __restrict__ x, T* __restrict__ y,
                 typename Reducer<T, K>::Acc* __restrict__ partial, ReducePlan p,
                 int64_t tiles_per_batch) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t b = blockIdx.x / tiles_per_batch;
  const int64_t tile = blockIdx.x - b * tiles_per_batch;
  const int64_t k = (tile * kReduceColumnX + tx) * V;
  const bool col_ok = k < p.inner;  // with V = 4, inner % 4 == 0
  const int64_t s = blockIdx.y;
  Acc acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = R::Init();
  if (col_ok) {
    const T* col = x + DecomposeOffset(b, p.num_kept, p.kept_dims, p.kept_strides) + k;
    const int64_t r0 = s * p.chunk;
    const int64_t r1 = min(r0 + p.chunk, p.count);
    if (p.num_red == 1) {
      const int64_t stride = p.red_strides[0];
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += kReduceColumnY) {
        if constexpr (V == 4) {
          const float4 v = *reinterpret_cast<const float4*>(col + r * stride);
          acc[0] = R::Apply(acc[0], v.x);
          acc[1] = R::Apply(acc[1], v.y);
          acc[2] = R::Apply(acc[2], v.z);
          acc[3] = R::Apply(acc[3], v.w);
        } else {
          acc[0] = R::Apply(acc[0], col[r * stride]);
        }
      }
    } else {
      for (int64_t r = r0 + ty; r < r1; r += kReduceColumnY) {
        const int64_t off = DecomposeOffset(r, p.num_red, p.red_dims, p.red_strides);
        if constexpr (V == 4) {
          const float4 v = *reinterpret_cast<const float4*>(col + off);
          acc[0] = R::Apply(acc[0], v.x);
          acc[1] = R::Apply(acc[1], v.y);
          acc[2] = R::Apply(acc[2], v.z);
          acc[3] = R::Apply(acc[3], v.w);
        } else {
          acc[0] = R::Apply(acc[0], col[off]);
        }
      }
    }
  }
  __shared__ Acc sm[kReduceColumnY][kReduceColumnX * V];
#pragma unroll
  for (int v = 0; v < V; ++v) sm[ty][tx * V + v] = acc[v];
  __syncthreads();
  if (ty == 0 && col_ok) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      Acc a = sm[0][tx * V + v];
#pragma unroll
      for (int t = 1; t < kReduceColumnY; ++t) a = R::Combine(a, sm[t][tx * V + v]);
      const int64_t out = b * p.inner + k + v;
      if (p.splits == 1) {
        y[out] = R::Finalize(a, p.count);
      } else {
        partial[s * p.num_out + out] = a;
      }
    }
  }
}

// Second pass: y[o] = finalize(partial[o * o_stride] (+) ... in split order).
template <typename T, ReduceKind K>
__global__ void CombineKernel(const typename Reducer<T, K>::Acc* __restrict__ partial,
                              T* __restrict__ y, int64_t num_out, int64_t splits,
                              int64_t o_stride, int64_t s_stride, int64_t count) {
  using R = Reducer<T, K>;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < num_out;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    typename R::Acc a = partial[o * o_stride];
    for (int64_t s = 1; s < splits; ++s) a = R::Combine(a, partial[o * o_stride + s * s_stride]);
    y[o] = R::Finalize(a, count);
  }
}

// The second pass with a warp per output, for scalar accumulators and many splits (a thread per
// output reading hundreds of partials one after another is latency bound: a column reduction's
// 64 outputs x 528 splits took ~25 µs): lane l combines splits l, l + 32, ... in order, then a
// fixed butterfly combines the lanes. Deterministic (the order depends only on the plan).
template <typename T, ReduceKind K>
__global__ void __launch_bounds__(kReduceBlockThreads)
    WarpCombineKernel(const typename Reducer<T, K>::Acc* __restrict__ partial, T* __restrict__ y, int64_t num_out,
                      int64_t splits, int64_t o_stride, int64_t s_stride, int64_t count) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; o < num_out; o += warps) {
    Acc a = R::Init();
    for (int64_t s = lane; s < splits; s += 32) a = R::Combine(a, partial[o * o_stride + s * s_stride]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a = R::Combine(a, __shfl_xor_sync(0xffffffffu, a, off));
    if (lane == 0) y[o] = R::Finalize(a, count);
  }
}

// kMap (x != null): y[i] = finalize(x[i]); kFill (x == null): y[i] = finalize(identity).
template <typename T, ReduceKind K>
__global__ void MapKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  using R = Reducer<T, K>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x != nullptr ? R::Finalize(R::Apply(R::Init(), x[i]), 1) : R::Finalize(R::Init(), 0);
  }
}

inline unsigned GridFor(int64_t n, int threads, int64_t cap = 4096) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

template <typename T, ReduceKind K>
cudaError_t LaunchTyped(const ReducePlan& p, const void* xv, void* yv, void* ws, cudaStream_t st) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  static_assert(sizeof(Acc) <= kReducePartialBytes, "partial accumulator too large");
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  Acc* partial = static_cast<Acc*>(ws);
  if (p.num_out == 0 || p.strategy == ReduceStrategy::kNone) return cudaSuccess;
  if (p.splits > 1 && ws == nullptr) return cudaErrorInvalidValue;
  switch (p.strategy) {
    case ReduceStrategy::kFill:
      MapKernel<T, K><<<GridFor(p.num_out, kReduceBlockThreads), kReduceBlockThreads, 0, st>>>(
          nullptr, y, p.num_out);
      break;
    case ReduceStrategy::kMap:
      MapKernel<T, K><<<GridFor(p.num_out, kReduceBlockThreads), kReduceBlockThreads, 0, st>>>(
          x, y, p.num_out);
      break;
    case ReduceStrategy::kRow: {
      const int64_t units = p.num_out * p.splits;
      const int64_t blocks = p.block_unit ? units : (units + kReduceWarpsPerBlock - 1) / kReduceWarpsPerBlock;
      if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
      const bool vec = std::is_same<T, float>::value && p.vec == 4 &&
                       reinterpret_cast<uintptr_t>(xv) % 16 == 0;
      if constexpr (std::is_same<T, float>::value) {
        if (vec) {
          RowKernel<T, K, true><<<static_cast<unsigned>(blocks), kReduceBlockThreads, 0, st>>>(x, y, partial, p);
          break;
        }
      }
      RowKernel<T, K, false><<<static_cast<unsigned>(blocks), kReduceBlockThreads, 0, st>>>(x, y, partial, p);
      break;
    }
    case ReduceStrategy::kColumn: {
      const bool vec = std::is_same<T, float>::value && p.vec == 4 &&
                       reinterpret_cast<uintptr_t>(xv) % 16 == 0;
      const int64_t batch = p.num_out / p.inner;
      const dim3 block(kReduceColumnX, kReduceColumnY);
      if (p.splits > 65535) return cudaErrorInvalidConfiguration;
      if constexpr (std::is_same<T, float>::value) {
        if (vec) {
          const int64_t tiles = (p.inner + 4 * kReduceColumnX - 1) / (4 * kReduceColumnX);
          if (batch * tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
          ColumnKernel<T, K, 4><<<dim3(static_cast<unsigned>(batch * tiles), static_cast<unsigned>(p.splits)), block, 0, st>>>(
              x, y, partial, p, tiles);
          break;
        }
      }
      const int64_t tiles = (p.inner + kReduceColumnX - 1) / kReduceColumnX;
      if (batch * tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
      ColumnKernel<T, K, 1><<<dim3(static_cast<unsigned>(batch * tiles), static_cast<unsigned>(p.splits)), block, 0, st>>>(
          x, y, partial, p, tiles);
      break;
    }
    default:
      return cudaErrorInvalidValue;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (p.splits > 1 && (p.strategy == ReduceStrategy::kRow || p.strategy == ReduceStrategy::kColumn)) {
    const bool row = p.strategy == ReduceStrategy::kRow;
    using Acc = typename Reducer<T, K>::Acc;
    if constexpr (std::is_arithmetic<Acc>::value && !std::is_same<Acc, bool>::value) {
      if (p.splits >= 64) {
        WarpCombineKernel<T, K><<<GridFor(p.num_out * 32, kReduceBlockThreads), kReduceBlockThreads, 0, st>>>(
            partial, y, p.num_out, p.splits, row ? p.splits : 1, row ? 1 : p.num_out, p.count);
        return cudaGetLastError();
      }
    }
    CombineKernel<T, K><<<GridFor(p.num_out, kReduceBlockThreads), kReduceBlockThreads, 0, st>>>(
        partial, y, p.num_out, p.splits, row ? p.splits : 1, row ? 1 : p.num_out, p.count);
    e = cudaGetLastError();
  }
  return e;
}

template <typename T>
cudaError_t DispatchKind(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t st) {
#define OTTR_REDUCE_CASE_(KIND)                                    \
  case ReduceKind::KIND:                                           \
    if constexpr (KindSupported<T, ReduceKind::KIND>()) {          \
      return LaunchTyped<T, ReduceKind::KIND>(p, x, y, ws, st);    \
    } else {                                                       \
      return cudaErrorInvalidValue;                                \
    }
  switch (p.kind) {
    OTTR_REDUCE_CASE_(kSum)
    OTTR_REDUCE_CASE_(kMean)
    OTTR_REDUCE_CASE_(kMax)
    OTTR_REDUCE_CASE_(kMin)
    OTTR_REDUCE_CASE_(kProd)
    OTTR_REDUCE_CASE_(kL1)
    OTTR_REDUCE_CASE_(kL2)
    OTTR_REDUCE_CASE_(kLogSum)
    OTTR_REDUCE_CASE_(kLogSumExp)
    OTTR_REDUCE_CASE_(kSumSquare)
  }
#undef OTTR_REDUCE_CASE_
  return cudaErrorInvalidValue;
}

}  // namespace ottr::cuda::kernels::reduce_impl

#endif  // OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_IMPL_CUH_
