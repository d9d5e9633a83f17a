// Data-movement kernels: strided copies (Expand, Tile, Slice, Transpose), the tiled transpose,
// Concat/Split, Fill, WriteInt64s and Trilu. See tensor_kernels.h.
#include <algorithm>
#include <cstring>

#include "runtime/cuda/kernels/tensor_common.cuh"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::GridFor;
using tensor_impl::VisitWidth;

constexpr int kThreads = 256;

// I: int32_t when every offset fits (StridedCopyParams::index32), else int64_t.
template <typename E, typename I>
__global__ void __launch_bounds__(kThreads)
    StridedCopyKernel(const E* __restrict__ src, E* __restrict__ dst, StridedCopyParams p) {
  const I n = static_cast<I>(p.numel);
  for (I i = static_cast<I>(blockIdx.x) * kThreads + static_cast<I>(threadIdx.x); i < n;
       i += static_cast<I>(gridDim.x) * kThreads) {
    I rem = i, off = static_cast<I>(p.offset);
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 1; --d) {
      if (d < p.rank) {
        const I dim = static_cast<I>(p.dims[d]);
        const I q = rem / dim;
        off += (rem - q * dim) * static_cast<I>(p.strides[d]);
        rem = q;
      }
    }
    off += rem * static_cast<I>(p.strides[0]);
    dst[i] = src[off];
  }
}

template <typename E, typename I>
__global__ void __launch_bounds__(256)
    TransposeTileKernel(const E* __restrict__ src, E* __restrict__ dst, TransposeTileParams p) {
  __shared__ E tile[32][33];
  const I rows = static_cast<I>(p.rows), cols = static_cast<I>(p.cols);
  const I tiles_r = (rows + 31) / 32;
  const I c0 = static_cast<I>(blockIdx.x) * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (I b = blockIdx.z; b < static_cast<I>(p.batch); b += gridDim.z) {
    I in_base = 0, out_base = 0, rem = b;
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 0; --d) {
      if (d < p.num_batch) {
        const I dim = static_cast<I>(p.batch_dims[d]);
        const I q = rem / dim;
        const I c = rem - q * dim;
        in_base += c * static_cast<I>(p.batch_in_strides[d]);
        out_base += c * static_cast<I>(p.batch_out_strides[d]);
        rem = q;
      }
    }
    for (I tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
      const I r0 = tr * 32;
#pragma unroll
      for (int j = ty; j < 32; j += 8) {
        const I r = r0 + j, c = c0 + tx;
        if (r < rows && c < cols) tile[j][tx] = src[in_base + r * static_cast<I>(p.in_row_stride) + c];
      }
      __syncthreads();
#pragma unroll
      for (int j = ty; j < 32; j += 8) {
        const I c = c0 + j, r = r0 + tx;
        if (r < rows && c < cols) dst[out_base + c * static_cast<I>(p.out_col_stride) + r] = tile[tx][j];
      }
      __syncthreads();
    }
  }
}

// blockIdx.y = part. kSplit: big -> parts, else parts -> big.
template <typename E, typename I, bool kSplit>
__global__ void __launch_bounds__(kThreads) PartsKernel(E* __restrict__ big, PartsParams p) {
  const int k = blockIdx.y;
  E* part = static_cast<E*>(p.part[k]);
  const I block = static_cast<I>(p.block[k]);
  if (part == nullptr || block == 0) return;
  const I n = static_cast<I>(p.outer) * block;
  const I big_block = static_cast<I>(p.big_block), offset = static_cast<I>(p.offset[k]);
  for (I e = static_cast<I>(blockIdx.x) * kThreads + static_cast<I>(threadIdx.x); e < n;
       e += static_cast<I>(gridDim.x) * kThreads) {
    const I o = e / block;
    const I bi = o * big_block + offset + (e - o * block);
    if constexpr (kSplit) {
      part[e] = big[bi];
    } else {
      big[bi] = part[e];
    }
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads) FillKernel(E* __restrict__ dst, int64_t n, E v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    dst[i] = v;
  }
}

struct Int64Values {
  int64_t v[kMaxInt64Values];
};
__global__ void WriteInt64sKernel(int64_t* __restrict__ dst, Int64Values v, int n) {
  // Static indices keep the values in the parameter bank (no local-memory copy).
#pragma unroll
  for (int j = 0; j < kMaxInt64Values; ++j) {
    if (j == static_cast<int>(threadIdx.x) && j < n) dst[j] = v.v[j];
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    TriluKernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t rows, int64_t cols,
                bool upper, int64_t k_value, const int64_t* __restrict__ k_ptr) {
  const int64_t k = k_ptr != nullptr ? *k_ptr : k_value;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / cols;
    const int64_t c = i - t * cols;
    const int64_t r = t % rows;
    const bool keep = upper ? (c - r >= k) : (c - r <= k);
    y[i] = keep ? x[i] : E{};
  }
}

}  // namespace

cudaError_t StridedCopy(const StridedCopyParams& p, const void* src, void* dst, cudaStream_t s) {
  if (p.numel == 0) return cudaSuccess;
  if (p.rank < 1 || p.rank > kTensorMaxDims) return cudaErrorInvalidValue;
  return VisitWidth(p.elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    const unsigned grid = GridFor(p.numel, kThreads);
    if (p.index32) {
      StridedCopyKernel<E, int32_t><<<grid, kThreads, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), p);
    } else {
      StridedCopyKernel<E, int64_t><<<grid, kThreads, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), p);
    }
    return cudaGetLastError();
  });
}

cudaError_t TransposeTiled(const TransposeTileParams& p, const void* src, void* dst, cudaStream_t s) {
  if (p.rows == 0 || p.cols == 0 || p.batch == 0) return cudaSuccess;
  if (p.elem_bytes > 8) return cudaErrorInvalidValue;
  const int64_t total = p.rows * p.cols * p.batch;
  const int64_t grid_x = (p.cols + 31) / 32;
  if (grid_x > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(grid_x),
                  static_cast<unsigned>(std::min<int64_t>((p.rows + 31) / 32, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(p.batch, 65535)));
  const dim3 block(32, 8);
  return VisitWidth(p.elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    if constexpr (sizeof(E) <= 8) {
      // The largest offset is below the element count (+ one tile of slack).
      if (total < (int64_t{1} << 30)) {
        TransposeTileKernel<E, int32_t><<<grid, block, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), p);
      } else {
        TransposeTileKernel<E, int64_t><<<grid, block, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst), p);
      }
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

namespace {
template <bool kSplit>
cudaError_t LaunchParts(const PartsParams& p, void* big, cudaStream_t s) {
  if (p.num_parts == 0 || p.max_part_numel == 0) return cudaSuccess;
  if (p.num_parts > kMaxParts) return cudaErrorInvalidValue;
  const bool index32 = p.outer * p.big_block < (int64_t{1} << 30);
  const dim3 grid(GridFor(p.max_part_numel, kThreads), static_cast<unsigned>(p.num_parts));
  return VisitWidth(p.elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    if (index32) {
      PartsKernel<E, int32_t, kSplit><<<grid, kThreads, 0, s>>>(static_cast<E*>(big), p);
    } else {
      PartsKernel<E, int64_t, kSplit><<<grid, kThreads, 0, s>>>(static_cast<E*>(big), p);
    }
    return cudaGetLastError();
  });
}
}  // namespace

cudaError_t ConcatParts(const PartsParams& p, void* big, cudaStream_t s) { return LaunchParts<false>(p, big, s); }

cudaError_t SplitParts(const PartsParams& p, const void* big, cudaStream_t s) {
  return LaunchParts<true>(p, const_cast<void*>(big), s);
}

cudaError_t Fill(void* dst, int64_t numel, int elem_bytes, uint64_t bits, cudaStream_t s) {
  if (numel == 0) return cudaSuccess;
  // Widen to 16-byte stores when the bytes and the pointer allow (the pattern repeats).
  const int64_t nbytes = numel * elem_bytes;
  if (elem_bytes <= 8 && nbytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    unsigned char pattern[16];
    for (int b = 0; b < 16; ++b) pattern[b] = static_cast<unsigned char>(bits >> (8 * (b % elem_bytes)));
    uint4 v;
    memcpy(&v, pattern, 16);
    FillKernel<uint4><<<GridFor(nbytes / 16, kThreads), kThreads, 0, s>>>(static_cast<uint4*>(dst), nbytes / 16, v);
    return cudaGetLastError();
  }
  return VisitWidth(elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    if constexpr (sizeof(E) <= 8) {
      E v;
      memcpy(&v, &bits, sizeof(E));  // little-endian: the low bytes
      FillKernel<E><<<GridFor(numel, kThreads), kThreads, 0, s>>>(static_cast<E*>(dst), numel, v);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

cudaError_t WriteInt64s(int64_t* dst, const int64_t* values, int n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (n < 0 || n > kMaxInt64Values) return cudaErrorInvalidValue;
  Int64Values v{};
  for (int i = 0; i < n; ++i) v.v[i] = values[i];
  WriteInt64sKernel<<<1, 32, 0, s>>>(dst, v, n);
  return cudaGetLastError();
}

cudaError_t Trilu(const void* x, void* y, int elem_bytes, int64_t mats, int64_t rows, int64_t cols,
                  bool upper, int64_t k_value, const int64_t* k_ptr, cudaStream_t s) {
  const int64_t n = mats * rows * cols;
  if (n == 0) return cudaSuccess;
  return VisitWidth(elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    if constexpr (sizeof(E) <= 8) {
      TriluKernel<E><<<GridFor(n, kThreads), kThreads, 0, s>>>(static_cast<const E*>(x), static_cast<E*>(y), n,
                                                               rows, cols, upper, k_value, k_ptr);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

}  // namespace ottr::cuda::kernels
