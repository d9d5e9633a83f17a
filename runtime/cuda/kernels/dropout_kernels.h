// Dropout-13 and ottr::DropoutGrad kernels (plain C++ interface, no abseil: included by
// dropout_kernels.cu and runtime/cuda/normalization_ops.cc).
//
// Random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011), keyed by a 64-bit seed fixed when the op is compiled; the counter is
// (element group, launch number). The launch number lives in a DropoutState in device memory
// that the op allocates (zeroed) at compile time; the last block of each launch increments it,
// so a replayed CUDA Graph draws a new mask every step while each step stays reproducible
// from (seed, step).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_DROPOUT_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_DROPOUT_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

// Device-side RNG state of one Dropout node (zero-initialise it once).
struct DropoutState {
  unsigned long long launches;  // Philox counter words 2-3 of the next launch
  unsigned int blocks_done;     // last-block detection; back to 0 after every launch
  unsigned int pad;
};

// The ratio and training_mode of a launch: from device memory when the pointer is set (the
// inputs are not compile-time constants), else the host value.
struct DropoutScalars {
  const void* ratio = nullptr;  // scalar of float type `ratio_dtype` (ONNX code)
  int ratio_dtype = 1;
  double ratio_value = 0.5;
  const bool* training = nullptr;
  bool training_value = false;
};

// Dropout: with training and ratio > 0, keep_i = (u_i >= ratio) for u_i uniform in [0, 1),
// y_i = keep_i ? x_i / (1 − ratio) : 0, mask_i = keep_i; otherwise y = x and mask = true.
// A ratio outside [0, 1) in training mode makes y NaN (the CPU reference raises an error).
// `mask` may be null. dtype: float32/float16/bfloat16/float64.
cudaError_t LaunchDropout(int dtype, const void* x, void* y, bool* mask, int64_t n, const DropoutScalars& s,
                          uint64_t seed, DropoutState* state, cudaStream_t stream);

// DropoutGrad: training with ratio > 0: dx = mask ? dy / (1 − ratio) : 0; otherwise dx = dy.
cudaError_t LaunchDropoutGrad(int dtype, const void* dy, const bool* mask, void* dx, int64_t n,
                              const DropoutScalars& s, cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_DROPOUT_KERNELS_H_
