// Generator and scan kernels: Range, OneHot, CumSum. See tensor_kernels.h.
#include <algorithm>
#include <cmath>

#include "runtime/cuda/kernels/tensor_common.cuh"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::FromAcc;
using tensor_impl::GridFor;
using tensor_impl::kIsFloatLike;
using tensor_impl::kIsHalfLike;
using tensor_impl::ToAcc;
using tensor_impl::VisitDtype;
using tensor_impl::VisitWidth;

constexpr int kThreads = 256;

// ---- Range ---------------------------------------------------------------------------------

// The CPU's formula in the element type; the explicit _rn operations keep the compiler from
// contracting start + i * delta into an FMA, which the CPU does not do.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RangeKernel(const T* __restrict__ start, const T* __restrict__ delta, T* __restrict__ out, int64_t n) {
  const T s = *start, d = *delta;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    if constexpr (kIsHalfLike<T>) {
      out[i] = FromAcc<T>(__fadd_rn(ToAcc(s), __fmul_rn(static_cast<float>(i), ToAcc(d))));
    } else if constexpr (std::is_same<T, float>::value) {
      out[i] = __fadd_rn(s, __fmul_rn(static_cast<float>(i), d));
    } else if constexpr (std::is_same<T, double>::value) {
      out[i] = __dadd_rn(s, __dmul_rn(static_cast<double>(i), d));
    } else {
      out[i] = static_cast<T>(static_cast<uint64_t>(s) + static_cast<uint64_t>(i) * static_cast<uint64_t>(d));
    }
  }
}

// ---- OneHot --------------------------------------------------------------------------------

__device__ __forceinline__ double LoadAsDouble(const void* p, int64_t i, int dtype) {
  switch (dtype) {
    case 1: return static_cast<const float*>(p)[i];
    case 2: return static_cast<const uint8_t*>(p)[i];
    case 3: return static_cast<const int8_t*>(p)[i];
    case 4: return static_cast<const uint16_t*>(p)[i];
    case 5: return static_cast<const int16_t*>(p)[i];
    case 6: return static_cast<const int32_t*>(p)[i];
    case 7: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case 10: return __half2float(static_cast<const __half*>(p)[i]);
    case 11: return static_cast<const double*>(p)[i];
    case 12: return static_cast<const uint32_t*>(p)[i];
    case 13: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case 16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return nan("");
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    OneHotKernel(const void* __restrict__ indices, int idx_dtype, const E* __restrict__ values,
                 E* __restrict__ out, int64_t total, int64_t depth, int64_t inner) {
  const E off = values[0], on = values[1];
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = e / inner;
    const int64_t i = e - t * inner;
    const int64_t o = t / depth;
    const int64_t d = t - o * depth;
    const double v = LoadAsDouble(indices, o * inner + i, idx_dtype);
    bool hit = false;
    if (isfinite(v)) {
      int64_t k = static_cast<int64_t>(v);  // truncates toward zero, as the CPU's cast
      if (k < 0) k += depth;
      hit = k == d;
    }
    out[e] = hit ? on : off;
  }
}

// ---- CumSum --------------------------------------------------------------------------------

template <typename T>
using ScanAcc = std::conditional_t<kIsFloatLike<T>, double, uint64_t>;

template <typename T>
__device__ __forceinline__ ScanAcc<T> ScanLift(T v) {
  if constexpr (kIsFloatLike<T>) {
    return static_cast<double>(ToAcc(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}
template <typename T>
__device__ __forceinline__ T ScanStore(ScanAcc<T> a) {
  if constexpr (kIsFloatLike<T>) {
    return FromAcc<T>(a);
  } else {
    return static_cast<T>(a);
  }
}

// One thread per (outer, inner) line, sequential along the axis.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    CumSumLineKernel(const T* __restrict__ x, T* __restrict__ y, int64_t lines, int64_t len,
                     int64_t inner, bool exclusive, bool reverse) {
  using A = ScanAcc<T>;
  for (int64_t line = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; line < lines;
       line += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t o = line / inner;
    const int64_t i = line - o * inner;
    A acc = A(0);
    for (int64_t step = 0; step < len; ++step) {
      const int64_t k = reverse ? len - 1 - step : step;
      const int64_t pos = (o * len + k) * inner + i;
      const A v = ScanLift(x[pos]);
      if (!exclusive) acc += v;
      y[pos] = ScanStore<T>(acc);
      if (exclusive) acc += v;
    }
  }
}

// inner == 1: one block per row; tiles of kScanItems · kThreads positions in scan order, each
// thread scanning kScanItems consecutive ones, then warp shuffles and the warp totals.
constexpr int kScanItems = 4;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    CumSumRowKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t len,
                    bool exclusive, bool reverse) {
  using A = ScanAcc<T>;
  __shared__ A warp_total[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    A carry = A(0);
    for (int64_t t0 = 0; t0 < len; t0 += static_cast<int64_t>(kScanItems) * kThreads) {
      A incl[kScanItems];
      A run = A(0);
#pragma unroll
      for (int u = 0; u < kScanItems; ++u) {
        const int64_t q = t0 + static_cast<int64_t>(threadIdx.x) * kScanItems + u;
        const A v = q < len ? ScanLift(xr[reverse ? len - 1 - q : q]) : A(0);
        run += v;
        incl[u] = run;
      }
      // Inclusive scan of the thread totals within the warp.
      A scan = run;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const A nb = __shfl_up_sync(0xffffffffu, scan, off);
        if (lane >= off) scan += nb;
      }
      A before = __shfl_up_sync(0xffffffffu, scan, 1);  // exclusive prefix of this thread
      if (lane == 0) before = A(0);
      if (lane == 31) warp_total[warp] = scan;
      __syncthreads();
      A warp_prefix = A(0), tile_total = A(0);
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) {
        if (w < warp) warp_prefix += warp_total[w];
        tile_total += warp_total[w];
      }
      const A base = carry + warp_prefix + before;
#pragma unroll
      for (int u = 0; u < kScanItems; ++u) {
        const int64_t q = t0 + static_cast<int64_t>(threadIdx.x) * kScanItems + u;
        if (q < len) {
          const A value = exclusive ? (u == 0 ? base : base + incl[u - 1]) : base + incl[u];
          yr[reverse ? len - 1 - q : q] = ScanStore<T>(value);
        }
      }
      carry += tile_total;
      __syncthreads();  // warp_total is rewritten by the next tile
    }
  }
}

}  // namespace

bool RangeSupported(int dtype) {
  return dtype != 9 && VisitDtype(dtype, [](auto) { return cudaSuccess; }) == cudaSuccess;
}

cudaError_t Range(int dtype, const void* start, const void* delta, void* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return VisitDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, bool>::value) {
      return cudaErrorInvalidValue;
    } else {
      RangeKernel<T><<<GridFor(n, kThreads), kThreads, 0, s>>>(static_cast<const T*>(start),
                                                               static_cast<const T*>(delta),
                                                               static_cast<T*>(out), n);
      return cudaGetLastError();
    }
  });
}

bool OneHotIndexSupported(int idx_dtype) { return RangeSupported(idx_dtype); }

cudaError_t OneHot(int idx_dtype, const void* indices, const void* values, int value_bytes, void* out,
                   int64_t outer, int64_t depth, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * depth * inner;
  if (total == 0) return cudaSuccess;
  if (!OneHotIndexSupported(idx_dtype)) return cudaErrorInvalidValue;
  return VisitWidth(value_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    if constexpr (sizeof(E) <= 8) {
      OneHotKernel<E><<<GridFor(total, kThreads), kThreads, 0, s>>>(indices, idx_dtype, static_cast<const E*>(values),
                                                                    static_cast<E*>(out), total, depth, inner);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

bool CumSumSupported(int dtype) { return RangeSupported(dtype); }

cudaError_t CumSum(int dtype, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                   bool exclusive, bool reverse, cudaStream_t s) {
  if (outer * len * inner == 0) return cudaSuccess;
  return VisitDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, bool>::value) {
      return cudaErrorInvalidValue;
    } else {
      const T* xt = static_cast<const T*>(x);
      T* yt = static_cast<T*>(y);
      if (inner == 1 && len >= 256) {
        CumSumRowKernel<T><<<static_cast<unsigned>(std::min<int64_t>(outer, 65535)), kThreads, 0, s>>>(
            xt, yt, outer, len, exclusive, reverse);
      } else {
        CumSumLineKernel<T><<<GridFor(outer * inner, kThreads), kThreads, 0, s>>>(xt, yt, outer * inner, len,
                                                                                  inner, exclusive, reverse);
      }
      return cudaGetLastError();
    }
  });
}

}  // namespace ottr::cuda::kernels
