// Softmax-family kernels (see softmax_kernels.h). Three layouts, each templated on the kind so
// the hot loops carry no run-time branch on it:
//   - SoftmaxWarpKernel: inner == 1, n <= 1024. A row lives in the registers of kWidth lanes
//     (kWidth = 4..32, several rows per warp when n is small), each lane holding kPerLane
//     elements at stride kWidth (coalesced loads); max/sum by warp butterflies; one read and
//     one write per element.
//   - SoftmaxBlockKernel: inner == 1, n > 1024. One block per row, block reductions, the row
//     re-read from L2 for each pass.
//   - SoftmaxColumnKernel: inner > 1. One thread per (outer, inner) column walking the axis at
//     stride inner (coalesced across threads).
// Reductions are fixed trees: results are run-to-run deterministic.
#include "runtime/cuda/kernels/softmax_kernels.h"

#include <climits>

#include "runtime/cuda/kernels/norm_common.cuh"

namespace ottr::cuda::kernels {
namespace {

using nl::ComputeT;
using nl::FromC;
using nl::ToC;

constexpr int kWarpBlock = 256;
constexpr int kRowBlock = 512;

using nl::Exp;
using nl::Log;

template <SoftmaxKind K>
constexpr bool kIsBackward = K == SoftmaxKind::kSoftmaxGrad || K == SoftmaxKind::kLogSoftmaxGrad;

// (value, index) argmax step: NaN never wins; ties go to the smaller index.
template <typename C>
__device__ __forceinline__ void ArgMaxStep(C v, int64_t i, C& best, int64_t& bi) {
  if (v > best || (v == best && i < bi)) {
    best = v;
    bi = i;
  }
}

template <SoftmaxKind K, typename T, int kWidth, int kPerLane>
__global__ void __launch_bounds__(kWarpBlock)
    SoftmaxWarpKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                      int64_t rows, int n) {
  using C = ComputeT<T>;
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = threadIdx.x & (kWidth - 1);
  const int sub = (threadIdx.x & 31) / kWidth;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  // The loop bound is uniform across the warp, so every lane reaches every shuffle.
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += num_warps * kRowsPerWarp) {
    const int64_t row = first + sub;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * static_cast<int64_t>(n);
    C va[kPerLane];
    C vb[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      const bool in = valid && idx < n;
      va[k] = in ? ToC(a[off + idx]) : C(0);
      if constexpr (kIsBackward<K>) vb[k] = in ? ToC(b[off + idx]) : C(0);
    }
    if constexpr (K == SoftmaxKind::kSoftmax || K == SoftmaxKind::kLogSoftmax) {
      C m = -std::numeric_limits<C>::infinity();
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * kWidth + lane < n) m = max(m, va[k]);
      }
      m = nl::WarpMax<kWidth>(m);
      C s = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * kWidth + lane < n) {
          const C e = Exp(va[k] - m);
          s += e;
          if constexpr (K == SoftmaxKind::kSoftmax) va[k] = e;
        }
      }
      s = nl::WarpSum<kWidth>(s);
      if (!valid) continue;
      if constexpr (K == SoftmaxKind::kSoftmax) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int idx = k * kWidth + lane;
          if (idx < n) out[off + idx] = FromC<T>(va[k] / s);
        }
      } else {
        const C shift = m + Log(s);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int idx = k * kWidth + lane;
          if (idx < n) out[off + idx] = FromC<T>(va[k] - shift);
        }
      }
    } else if constexpr (K == SoftmaxKind::kHardmax) {
      C best = -std::numeric_limits<C>::infinity();
      int64_t bi = LLONG_MAX;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int idx = k * kWidth + lane;
        if (idx < n) ArgMaxStep(va[k], idx, best, bi);
      }
#pragma unroll
      for (int o = kWidth / 2; o > 0; o >>= 1) {
        const C ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        ArgMaxStep(ob, oi, best, bi);
      }
      if (!valid) continue;
      if (isnan(ToC(a[off]))) bi = 0;  // the reference's scan keeps a NaN first element
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int idx = k * kWidth + lane;
        if (idx < n) out[off + idx] = FromC<T>(idx == bi ? C(1) : C(0));
      }
    } else {
      C s = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          s += va[k] * vb[k];  // padding is 0
        } else {
          s += va[k];
        }
      }
      s = nl::WarpSum<kWidth>(s);
      if (!valid) continue;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int idx = k * kWidth + lane;
        if (idx >= n) continue;
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          out[off + idx] = FromC<T>(vb[k] * (va[k] - s));
        } else {
          out[off + idx] = FromC<T>(va[k] - Exp(vb[k]) * s);
        }
      }
    }
  }
}

// Block-wide argmax with the ArgMaxStep order; every thread gets the result.
template <typename C>
__device__ int64_t BlockArgMax(C best, int64_t bi, C* sval, int64_t* sidx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const C ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    ArgMaxStep(ob, oi, best, bi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sval[warp] = best;
    sidx[warp] = bi;
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  best = lane < warps ? sval[lane] : -std::numeric_limits<C>::infinity();
  bi = lane < warps ? sidx[lane] : LLONG_MAX;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const C ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    ArgMaxStep(ob, oi, best, bi);
  }
  return bi;
}

template <SoftmaxKind K, typename T>
__global__ void __launch_bounds__(kRowBlock)
    SoftmaxBlockKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                       int64_t rows, int64_t n) {
  using C = ComputeT<T>;
  __shared__ C smem[32];
  __shared__ int64_t sidx[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * n;
    if constexpr (K == SoftmaxKind::kSoftmax || K == SoftmaxKind::kLogSoftmax) {
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = max(m, ToC(a[off + k]));
      m = nl::BlockMax(m, smem);
      C s = 0;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += Exp(ToC(a[off + k]) - m);
      s = nl::BlockSum(s, smem);
      if constexpr (K == SoftmaxKind::kSoftmax) {
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
          out[off + k] = FromC<T>(Exp(ToC(a[off + k]) - m) / s);
        }
      } else {
        const C shift = m + Log(s);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
          out[off + k] = FromC<T>(ToC(a[off + k]) - shift);
        }
      }
    } else if constexpr (K == SoftmaxKind::kHardmax) {
      C best = -std::numeric_limits<C>::infinity();
      int64_t bi = LLONG_MAX;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) ArgMaxStep(ToC(a[off + k]), k, best, bi);
      bi = BlockArgMax(best, bi, smem, sidx);
      if (isnan(ToC(a[off]))) bi = 0;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        out[off + k] = FromC<T>(k == bi ? C(1) : C(0));
      }
    } else {
      C s = 0;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          s += ToC(a[off + k]) * ToC(b[off + k]);
        } else {
          s += ToC(a[off + k]);
        }
      }
      s = nl::BlockSum(s, smem);
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const C d = ToC(a[off + k]), y = ToC(b[off + k]);
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          out[off + k] = FromC<T>(y * (d - s));
        } else {
          out[off + k] = FromC<T>(d - Exp(y) * s);
        }
      }
    }
  }
}

template <SoftmaxKind K, typename T>
__global__ void SoftmaxColumnKernel(const T* __restrict__ a, const T* __restrict__ b,
                                    T* __restrict__ out, int64_t outer, int64_t n, int64_t inner) {
  using C = ComputeT<T>;
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = col / inner, i = col - o * inner;
    const int64_t base = o * n * inner + i;
    if constexpr (K == SoftmaxKind::kSoftmax || K == SoftmaxKind::kLogSoftmax) {
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t k = 0; k < n; ++k) m = max(m, ToC(a[base + k * inner]));
      C s = 0;
      for (int64_t k = 0; k < n; ++k) s += Exp(ToC(a[base + k * inner]) - m);
      if constexpr (K == SoftmaxKind::kSoftmax) {
        for (int64_t k = 0; k < n; ++k) out[base + k * inner] = FromC<T>(Exp(ToC(a[base + k * inner]) - m) / s);
      } else {
        const C shift = m + Log(s);
        for (int64_t k = 0; k < n; ++k) out[base + k * inner] = FromC<T>(ToC(a[base + k * inner]) - shift);
      }
    } else if constexpr (K == SoftmaxKind::kHardmax) {
      C best = -std::numeric_limits<C>::infinity();
      int64_t bi = LLONG_MAX;
      for (int64_t k = 0; k < n; ++k) ArgMaxStep(ToC(a[base + k * inner]), k, best, bi);
      if (isnan(ToC(a[base]))) bi = 0;
      for (int64_t k = 0; k < n; ++k) out[base + k * inner] = FromC<T>(k == bi ? C(1) : C(0));
    } else {
      C s = 0;
      for (int64_t k = 0; k < n; ++k) {
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          s += ToC(a[base + k * inner]) * ToC(b[base + k * inner]);
        } else {
          s += ToC(a[base + k * inner]);
        }
      }
      for (int64_t k = 0; k < n; ++k) {
        const C d = ToC(a[base + k * inner]), y = ToC(b[base + k * inner]);
        if constexpr (K == SoftmaxKind::kSoftmaxGrad) {
          out[base + k * inner] = FromC<T>(y * (d - s));
        } else {
          out[base + k * inner] = FromC<T>(d - Exp(y) * s);
        }
      }
    }
  }
}

template <SoftmaxKind K, typename T, int kWidth, int kPerLane>
void LaunchWarp(const T* a, const T* b, T* out, int64_t rows, int64_t n, cudaStream_t stream) {
  constexpr int kRowsPerBlock = (kWarpBlock / 32) * (32 / kWidth);
  const int grid = nl::GridFor(rows, kRowsPerBlock, nl::SmCount() * 8);
  SoftmaxWarpKernel<K, T, kWidth, kPerLane><<<grid, kWarpBlock, 0, stream>>>(a, b, out, rows, static_cast<int>(n));
}

template <SoftmaxKind K, typename T>
void LaunchTyped(const void* av, const void* bv, void* outv, int64_t outer, int64_t n, int64_t inner,
                 cudaStream_t stream) {
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  T* out = static_cast<T*>(outv);
  if (inner != 1) {
    const int grid = nl::GridFor(outer * inner, 256, nl::SmCount() * 8);
    SoftmaxColumnKernel<K, T><<<grid, 256, 0, stream>>>(a, b, out, outer, n, inner);
    return;
  }
  const int64_t rows = outer;
  if (n > 1024) {
    const int grid = static_cast<int>(std::min<int64_t>(rows, nl::SmCount() * 4));
    SoftmaxBlockKernel<K, T><<<grid, kRowBlock, 0, stream>>>(a, b, out, rows, n);
    return;
  }
  switch (nl::NextPow2(n)) {
    case 1:
    case 2:
    case 4: LaunchWarp<K, T, 4, 1>(a, b, out, rows, n, stream); break;
    case 8: LaunchWarp<K, T, 8, 1>(a, b, out, rows, n, stream); break;
    case 16: LaunchWarp<K, T, 16, 1>(a, b, out, rows, n, stream); break;
    case 32: LaunchWarp<K, T, 32, 1>(a, b, out, rows, n, stream); break;
    case 64: LaunchWarp<K, T, 32, 2>(a, b, out, rows, n, stream); break;
    case 128: LaunchWarp<K, T, 32, 4>(a, b, out, rows, n, stream); break;
    case 256: LaunchWarp<K, T, 32, 8>(a, b, out, rows, n, stream); break;
    case 512: LaunchWarp<K, T, 32, 16>(a, b, out, rows, n, stream); break;
    default: LaunchWarp<K, T, 32, 32>(a, b, out, rows, n, stream); break;
  }
}

template <SoftmaxKind K>
bool LaunchKind(int dtype, const void* a, const void* b, void* out, int64_t outer, int64_t n,
                int64_t inner, cudaStream_t stream) {
  return nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    LaunchTyped<K, T>(a, b, out, outer, n, inner, stream);
  });
}

}  // namespace

cudaError_t LaunchSoftmax(SoftmaxKind kind, int dtype, const void* a, const void* b, void* out,
                          int64_t outer, int64_t n, int64_t inner, cudaStream_t stream) {
  if (outer <= 0 || n <= 0 || inner <= 0) return cudaSuccess;
  bool ok = false;
  switch (kind) {
    case SoftmaxKind::kSoftmax: ok = LaunchKind<SoftmaxKind::kSoftmax>(dtype, a, b, out, outer, n, inner, stream); break;
    case SoftmaxKind::kLogSoftmax: ok = LaunchKind<SoftmaxKind::kLogSoftmax>(dtype, a, b, out, outer, n, inner, stream); break;
    case SoftmaxKind::kHardmax: ok = LaunchKind<SoftmaxKind::kHardmax>(dtype, a, b, out, outer, n, inner, stream); break;
    case SoftmaxKind::kSoftmaxGrad: ok = LaunchKind<SoftmaxKind::kSoftmaxGrad>(dtype, a, b, out, outer, n, inner, stream); break;
    case SoftmaxKind::kLogSoftmaxGrad: ok = LaunchKind<SoftmaxKind::kLogSoftmaxGrad>(dtype, a, b, out, outer, n, inner, stream); break;
  }
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace ottr::cuda::kernels
