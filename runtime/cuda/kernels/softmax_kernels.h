// Softmax, LogSoftmax, Hardmax and their backward ops along one axis (plain C++ interface, no
// abseil: included by softmax_kernels.cu and by runtime/cuda/loss_ops.cc).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_SOFTMAX_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_SOFTMAX_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

enum class SoftmaxKind : int {
  kSoftmax = 0,      // y_k = exp(x_k - m) / Σ_j exp(x_j - m),  m = max_j x_j
  kLogSoftmax,       // y_k = x_k - m - log Σ_j exp(x_j - m)
  kHardmax,          // y_k = 1 for the first k with x_k = max_j x_j (NaNs skipped; a NaN at
                     //       k = 0 selects 0, as the CPU reference's scan), else 0
  kSoftmaxGrad,      // dx_k = y_k (dy_k - Σ_j dy_j y_j)        (a = dY, b = Y)
  kLogSoftmaxGrad,   // dx_k = dy_k - exp(y_k) Σ_j dy_j         (a = dY, b = Y)
};

// Applies `kind` along the middle axis of tensors viewed as [outer, n, inner] (contiguous).
// `a` is X (forward kinds) or dY (backward kinds), `b` is Y for the backward kinds (else
// unused); `out` must not alias them. dtype: ONNX code of float32 / float16 / bfloat16 /
// float64 (float16 and bfloat16 compute in float). Layouts: inner == 1 and n <= 1024 keeps
// each row in registers with 1..32 lanes per row; inner == 1 and n > 1024 uses one block per
// row; inner > 1 one thread per (outer, inner) column. Empty tensors launch nothing.
// Returns cudaErrorInvalidValue for an unsupported dtype, else the launch status.
cudaError_t LaunchSoftmax(SoftmaxKind kind, int dtype, const void* a, const void* b, void* out,
                          int64_t outer, int64_t n, int64_t inner, cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_SOFTMAX_KERNELS_H_
