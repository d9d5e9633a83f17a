// Direct channels-last convolution kernels for few input channels (plain C++ interface, included
// by small_conv_kernels.cu and runtime/cuda/conv_pool_ops.cc).
//
// Why: a first layer that reads an image of one to a few channels (the benchmark CNN's Conv 1→32
// 3x3) has almost no arithmetic per output, and cuDNN's channels-last kernels run it far below the
// memory bound (measured on the H200, batch 1024, TF32: forward 114 µs and filter gradient 484 µs,
// where writing / reading the 88 MB output once takes ~25 µs). These kernels are memory bound:
//   forward  y[n, p, k] = b[k] + Σ_{r, s, c} x[n, p·stride − pad + (r, s)·dilation, c] · w[k, r, s, c]
//            one thread per output element, k fastest (a warp writes 32 consecutive channels of
//            one position; the x taps it reads are one broadcast each), the weight in shared
//            memory; taps outside the image are skipped (zero padding).
//   filter   dw[k, r, s, c] = Σ_{n, p} dy[n, p, k] · x[n, p·stride − pad + (r, s)·dilation, c]
//            in two deterministic passes: each block sums its contiguous range of positions into
//            per-thread registers (thread = one k), reduces its warps in a fixed order and writes
//            one partial per block; a second kernel adds the block partials in block order. The
//            same bits on every run (no atomics).
// Accumulation in float32 for float32, float16 and bfloat16 (the product of two 16-bit values is
// exact in float32). Requirements (SmallConvSupported): 2-D, group 1, C <= kSmallConvMaxC input
// channels (beyond that cuDNN's tensor-core kernels have enough work per output), C · kh · kw <=
// kSmallConvTaps, K <= 256 output channels.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_SMALL_CONV_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_SMALL_CONV_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

inline constexpr int kSmallConvTaps = 32;    // C · kh · kw
inline constexpr int kSmallConvMaxK = 256;   // output channels
inline constexpr int kSmallConvMaxC = 4;     // input channels

struct SmallConvGeometry {
  int64_t n = 0;
  int64_t h = 0, w = 0, c = 0;    // input image (channels-last)
  int64_t oh = 0, ow = 0, k = 0;  // output
  int64_t kh = 0, kw = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
};

bool SmallConvSupported(int dtype, const SmallConvGeometry& g);

// y [n, oh, ow, k] from x [n, h, w, c], w [k, kh, kw, c], bias [k] or null; `relu`: then
// y = y < 0 ? 0 : y (NaN kept, as Relu).
cudaError_t SmallConvForward(int dtype, const SmallConvGeometry& g, const void* x, const void* w, const void* bias,
                             bool relu, void* y, cudaStream_t s);

// Bytes of float32 block partials SmallConvFilterGrad needs.
int64_t SmallConvFilterGradWorkspace(const SmallConvGeometry& g);
// dw [k, kh, kw, c] from dy [n, oh, ow, k] and x [n, h, w, c]; `workspace` holds the partials.
cudaError_t SmallConvFilterGrad(int dtype, const SmallConvGeometry& g, const void* dy, const void* x, void* dw,
                                void* workspace, cudaStream_t s);

// The data gradient of a stride-1 convolution is a forward convolution of dY with the filter
// transposed (K <-> C) and flipped in space, padded by k − 1 − pad: this writes that filter,
// out[c][k][kh−1−r][kw−1−s] = w[k][c][r][s] in channels-first order, or
// out[c][kh−1−r][kw−1−s][k] = w[k][r][s][c] channels-last (KRSC). `elem_bytes` 2 or 4.
cudaError_t FlipFilterForDataGrad(int elem_bytes, int64_t k, int64_t c, int64_t kh, int64_t kw, bool channels_last,
                                  const void* w, void* out, cudaStream_t s);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_SMALL_CONV_KERNELS_H_
