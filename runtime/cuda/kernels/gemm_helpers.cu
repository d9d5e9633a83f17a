#include "runtime/cuda/kernels/gemm_helpers.h"

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/kernels/pdl.cuh"

namespace ottr::cuda::kernels {
namespace {

template <typename T>
__global__ void BroadcastKernel(const T* c, T* d, int64_t m, int64_t n, int64_t rs, int64_t cs) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, col = i % n;
    d[i] = c[r * rs + col * cs];
  }
}

// Four consecutive elements of a row a thread (n % 4 == 0, 16-byte aligned rows), else one.
template <bool kVec>
__global__ void SumKSlicesKernel(const float* __restrict__ partial, int slices, float* __restrict__ d, int64_t m,
                                 int64_t n, int64_t ldd) {
  WaitForPriorGrids();  // pdl.cuh
  LetDependentsLaunch();
  constexpr int kW = kVec ? 4 : 1;
  const int64_t per_row = n / kW, total = m * per_row, mn = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, col = (i - r * per_row) * kW;
    const float* p = partial + r * n + col;
    if constexpr (kVec) {
      float4 t = __ldcs(reinterpret_cast<const float4*>(p));
      for (int s = 1; s < slices; ++s) {
        const float4 u = __ldcs(reinterpret_cast<const float4*>(p + s * mn));
        t.x += u.x;
        t.y += u.y;
        t.z += u.z;
        t.w += u.w;
      }
      *reinterpret_cast<float4*>(d + r * ldd + col) = t;
    } else {
      float t = __ldcs(p);
      for (int s = 1; s < slices; ++s) t += __ldcs(p + s * mn);
      d[r * ldd + col] = t;
    }
  }
}

}  // namespace

cudaError_t SumKSlices(const float* partial, int slices, float* d, int64_t m, int64_t n, int64_t ldd,
                       cudaStream_t stream, bool programmatic) {
  if (m == 0 || n == 0) return cudaSuccess;
  const bool vec = n % 4 == 0 && ldd % 4 == 0 && reinterpret_cast<uintptr_t>(partial) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(d) % 16 == 0;
  const int64_t work = m * (vec ? n / 4 : n);
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 4096));
  const cudaError_t e = LaunchKernel(programmatic, vec ? SumKSlicesKernel<true> : SumKSlicesKernel<false>,
                                     dim3(blocks), dim3(threads), 0, stream, partial, slices, d, m, n, ldd);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t BroadcastToMatrix(const void* c, void* d, int64_t m, int64_t n, int64_t row_stride,
                              int64_t col_stride, int elem_bytes, cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 65535));
  switch (elem_bytes) {
    case 2: BroadcastKernel<<<blocks, threads, 0, stream>>>(static_cast<const uint16_t*>(c), static_cast<uint16_t*>(d), m, n, row_stride, col_stride); break;
    case 4: BroadcastKernel<<<blocks, threads, 0, stream>>>(static_cast<const uint32_t*>(c), static_cast<uint32_t*>(d), m, n, row_stride, col_stride); break;
    case 8: BroadcastKernel<<<blocks, threads, 0, stream>>>(static_cast<const uint64_t*>(c), static_cast<uint64_t*>(d), m, n, row_stride, col_stride); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ottr::cuda::kernels
