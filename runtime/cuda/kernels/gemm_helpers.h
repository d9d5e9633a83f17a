// Small device helpers of the GEMM ops (plain C++ interface, no abseil: included by .cu files).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_GEMM_HELPERS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_GEMM_HELPERS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

// d[i, j] = c[i * row_stride + j * col_stride] for an M x N output (row/col strides 0 broadcast).
// `elem_bytes` is 2, 4 or 8.
cudaError_t BroadcastToMatrix(const void* c, void* d, int64_t m, int64_t n, int64_t row_stride,
                              int64_t col_stride, int elem_bytes, cudaStream_t stream);

// d[i, j] = Σ_s partial[s·m·n + i·n + j] for s = 0..slices-1 in that order (float32; d's rows
// `ldd` apart, the partials packed): the sum of a GEMM's k-slices (LtGemm), deterministic.
// `programmatic`: launched so it may start while the kernel before it ends (kernels/pdl.cuh).
cudaError_t SumKSlices(const float* partial, int slices, float* d, int64_t m, int64_t n, int64_t ldd,
                       cudaStream_t stream, bool programmatic = false);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_GEMM_HELPERS_H_
