// ArgMax / ArgMin along the middle axis of [outer, len, inner] (see reduction_kernels.h).
//
// inner == 1: the axis is contiguous; a warp (len <= 4096) or a 256-thread block scans each row.
// inner > 1: a (32 x 8) block, threads along the contiguous inner positions (coalesced), the 8
// rows of the block splitting the axis. Candidates (value, index) combine with the CPU reference's
// order (NaN first, then larger for ArgMax / smaller for ArgMin) and break ties on the index (the
// smaller, or the larger with select_last_index), so the result does not depend on the order of
// combination and equals the CPU's sequential scan.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda/kernels/reduction_impl.cuh"
#include "runtime/cuda/kernels/reduction_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using reduce_impl::kIsFloat;
using reduce_impl::ShflXor;
using reduce_impl::Widen;

template <typename T>
using ArgValue = std::conditional_t<reduce_impl::IsHalfLike<T>::value, float, T>;

template <typename T>
struct Cand {
  ArgValue<T> v;
  int64_t i;  // -1: no candidate yet
};

// The better of two candidates.
template <typename T>
__device__ __forceinline__ Cand<T> Pick(Cand<T> a, Cand<T> b, bool is_max, bool last) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  int c;  // -1: a comes first in the best-first order, 1: b does, 0: tie
  if constexpr (kIsFloat<T>) {
    const bool an = isnan(a.v), bn = isnan(b.v);
    if (an || bn) {
      c = an && bn ? 0 : (an ? -1 : 1);
    } else if (a.v == b.v) {
      c = 0;
    } else {
      c = (is_max ? a.v > b.v : a.v < b.v) ? -1 : 1;
    }
  } else {
    c = a.v == b.v ? 0 : ((is_max ? a.v > b.v : a.v < b.v) ? -1 : 1);
  }
  if (c < 0) return a;
  if (c > 0) return b;
  return (last ? a.i > b.i : a.i < b.i) ? a : b;
}

template <typename T>
__device__ __forceinline__ Cand<T> WarpPick(Cand<T> a, bool is_max, bool last) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    Cand<T> o{ShflXor(a.v, mask), ShflXor(a.i, mask)};
    a = Pick<T>(a, o, is_max, last);
  }
  return a;
}

template <typename T>
__global__ void __launch_bounds__(256) ArgRowKernel(const T* __restrict__ x, int64_t* __restrict__ y,
                                                    int64_t rows, int64_t len, bool is_max,
                                                    bool last, bool block_unit) {
  int64_t row;
  int tid, nt;
  if (block_unit) {
    row = blockIdx.x;
    tid = threadIdx.x;
    nt = blockDim.x;
  } else {
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    tid = threadIdx.x & 31;
    nt = 32;
  }
  const bool active = row < rows;
  Cand<T> c{ArgValue<T>(0), -1};
  if (active) {
    const T* p = x + row * len;
    for (int64_t k = tid; k < len; k += nt) c = Pick<T>(c, Cand<T>{Widen(p[k]), k}, is_max, last);
  }
  c = WarpPick<T>(c, is_max, last);
  if (block_unit) {
    __shared__ ArgValue<T> sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      sv[warp] = c.v;
      si[warp] = c.i;
    }
    __syncthreads();
    if (warp == 0) {
      c = lane < static_cast<int>(blockDim.x >> 5) ? Cand<T>{sv[lane], si[lane]} : Cand<T>{ArgValue<T>(0), -1};
      c = WarpPick<T>(c, is_max, last);
    }
  }
  if (active && tid == 0) y[row] = c.i;
}

template <typename T>
__global__ void __launch_bounds__(256) ArgColumnKernel(const T* __restrict__ x, int64_t* __restrict__ y,
                                                       int64_t len, int64_t inner,
                                                       int64_t tiles, bool is_max, bool last) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t o = blockIdx.x / tiles;
  const int64_t i = (blockIdx.x - o * tiles) * 32 + tx;
  Cand<T> c{ArgValue<T>(0), -1};
  if (i < inner) {
    const T* p = x + o * len * inner + i;
    for (int64_t k = ty; k < len; k += 8) c = Pick<T>(c, Cand<T>{Widen(p[k * inner]), k}, is_max, last);
  }
  __shared__ ArgValue<T> sv[8][32];
  __shared__ int64_t si[8][32];
  sv[ty][tx] = c.v;
  si[ty][tx] = c.i;
  __syncthreads();
  if (ty == 0 && i < inner) {
    for (int t = 1; t < 8; ++t) c = Pick<T>(c, Cand<T>{sv[t][tx], si[t][tx]}, is_max, last);
    y[o * inner + i] = c.i;
  }
}

template <typename T>
cudaError_t Launch(bool is_max, bool last, const void* xv, int64_t* y, int64_t outer, int64_t len,
                   int64_t inner, cudaStream_t s) {
  const T* x = static_cast<const T*>(xv);
  if (inner == 1) {
    const bool block_unit = len > 4096;
    const int64_t blocks = block_unit ? outer : (outer + 7) / 8;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    ArgRowKernel<T><<<static_cast<unsigned>(blocks), 256, 0, s>>>(x, y, outer, len, is_max, last, block_unit);
  } else {
    const int64_t tiles = (inner + 31) / 32;
    if (outer * tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
    ArgColumnKernel<T><<<static_cast<unsigned>(outer * tiles), dim3(32, 8), 0, s>>>(x, y, len, inner, tiles, is_max, last);
  }
  return cudaGetLastError();
}

}  // namespace

bool ArgReduceSupported(int dtype) {
  switch (dtype) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 10: case 11: case 12: case 13: case 16:
      return true;
    default:
      return false;
  }
}

cudaError_t LaunchArgReduce(int dtype, bool is_max, bool select_last, const void* x, int64_t* y,
                            int64_t outer, int64_t len, int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  if (len <= 0) return cudaErrorInvalidValue;
  switch (dtype) {
    case 1: return Launch<float>(is_max, select_last, x, y, outer, len, inner, stream);
    case 2: return Launch<uint8_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 3: return Launch<int8_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 4: return Launch<uint16_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 5: return Launch<int16_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 6: return Launch<int32_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 7: return Launch<int64_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 10: return Launch<__half>(is_max, select_last, x, y, outer, len, inner, stream);
    case 11: return Launch<double>(is_max, select_last, x, y, outer, len, inner, stream);
    case 12: return Launch<uint32_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 13: return Launch<uint64_t>(is_max, select_last, x, y, outer, len, inner, stream);
    case 16: return Launch<__nv_bfloat16>(is_max, select_last, x, y, outer, len, inner, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ottr::cuda::kernels
