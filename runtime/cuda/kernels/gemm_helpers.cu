#include "runtime/cuda/kernels/gemm_helpers.h"

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

}  // namespace

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
