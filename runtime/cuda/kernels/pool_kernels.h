// Pooling kernels of the CUDA executor (plain C++ interface, no abseil: included by
// pool_kernels.cu and runtime/cuda/conv_pool_ops.cc): MaxPool (with optional Indices),
// AveragePool, LpPool, the global pools, and the ottr-domain backward ops MaxPoolGrad,
// AveragePoolGrad, LpPoolGrad. Types are ONNX dtype codes.
//
// Semantics are the CPU reference's (runtime/cpu/conv_pool_kernels.cc,
// conv_pool_grad_kernels.cc, conv_pool_common.h), for any number of spatial axes: the window of
// output position o on axis d covers the image indices o·stride − pad_begin + j·dilation
// (j < kernel); taps outside the image are skipped; ceil_mode is already folded into
// `positions` by the geometry resolution (ir/ops/conv_pool_geometry.h).
//   MaxPool: the first maximum in row-major tap order, or the first NaN when there is one; a
//     window entirely in the padding gives −inf (the lowest value for integers) and index −1.
//     Indices are flattened over the whole input: plane · image_size + the row-major (or, with
//     storage_order 1, column-major) spatial index.
//   AveragePool: Σ taps / count, count = the taps inside the image, or with count_include_pad
//     the taps inside the padded image (index < image + pad_end); 0 taps: NaN. Sums in double.
//   LpPool: (Σ |x|^p)^(1/p), in double.
//   Backward ops gather: each dX element loops over the windows that contain it in increasing
//     output order (no atomics, deterministic): MaxPoolGrad re-finds each window's argmax from
//     X, AveragePoolGrad adds dY / count, LpPoolGrad adds dY · sign(x)|x|^(p−1) / Y^(p−1)
//     (nothing where Y = 0).
//   Fast path of MaxPool and MaxPoolGrad (same results): 2-D (or 1-D) windows that tile the
//     image (kernel == stride, dilation 1, no begin padding, floor mode): one thread per window,
//     2x2 windows of even-width rows read (and written) as aligned pairs; MaxPoolGrad writes each
//     dX element once (dY at the argmax, 0 elsewhere and past the last full window).
// These kernels neither allocate nor synchronise (CUDA Graph capturable).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_POOL_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_POOL_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

constexpr int kPoolMaxDims = 8;

// One resolved pooling window geometry over `planes` = N · C planes of `image` elements each.
struct PoolGeometry {
  int nd = 0;
  int64_t planes = 0;
  int64_t image[kPoolMaxDims] = {};
  int64_t positions[kPoolMaxDims] = {};
  int64_t kernel[kPoolMaxDims] = {};
  int64_t stride[kPoolMaxDims] = {};
  int64_t dilation[kPoolMaxDims] = {};
  int64_t pad_begin[kPoolMaxDims] = {};
  int64_t pad_end[kPoolMaxDims] = {};
};

// MaxPool and its Indices take every float type and the integer types; the rest float types.
bool MaxPoolSupported(int dtype);
bool FloatPoolSupported(int dtype);

// y and indices may each be null (an output nobody reads).
cudaError_t MaxPool(int dtype, const PoolGeometry& g, bool column_major, const void* x, void* y,
                    int64_t* indices, cudaStream_t s);
// relu_mask: dX is also 0 where X <= 0 (or NaN): ottr::MaxPoolGrad's relu_mask, the gradient of
// the Relu that produced X folded in (ReluGrad's Select(x > 0, dx, 0)).
cudaError_t MaxPoolGrad(int dtype, const PoolGeometry& g, const void* dy, const void* x, void* dx, bool relu_mask,
                        cudaStream_t s);
// Channels-last MaxPool / MaxPoolGrad (layout NHWC, ir/ops/channels_last.h): tensors
// [N, spatial..., channels] with g.planes = N; the same windows and argmax rule per channel (the
// tiled fast path applies alike). No Indices: they index the channels-first tensor.
cudaError_t MaxPoolChannelsLast(int dtype, const PoolGeometry& g, int64_t channels, const void* x, void* y,
                                cudaStream_t s);
cudaError_t MaxPoolGradChannelsLast(int dtype, const PoolGeometry& g, int64_t channels, const void* dy,
                                    const void* x, void* dx, bool relu_mask, cudaStream_t s);
cudaError_t AveragePool(int dtype, const PoolGeometry& g, bool count_include_pad, const void* x,
                        void* y, cudaStream_t s);
cudaError_t AveragePoolGrad(int dtype, const PoolGeometry& g, bool count_include_pad,
                            const void* dy, void* dx, cudaStream_t s);
cudaError_t LpPool(int dtype, const PoolGeometry& g, int64_t p, const void* x, void* y,
                   cudaStream_t s);
cudaError_t LpPoolGrad(int dtype, const PoolGeometry& g, int64_t p, const void* dy, const void* x,
                       const void* y, void* dx, cudaStream_t s);

// GlobalAveragePool / GlobalMaxPool / GlobalLpPool: each of `planes` contiguous runs of `size`
// elements reduced to one value (one warp per plane, fixed-order tree: deterministic). Average
// and Lp sum in double; Max propagates NaN.
enum class GlobalPoolKind : int { kAverage = 0, kMax = 1, kLp = 2 };
cudaError_t GlobalPool(int dtype, GlobalPoolKind kind, int64_t p, int64_t planes, int64_t size,
                       const void* x, void* y, cudaStream_t s);

// y[n, c, s] += bias[c] over [batch, channels, spatial] (the convolutions' bias; float types;
// four elements a thread when spatial is a multiple of 4).
cudaError_t AddChannelBias(int dtype, int64_t batch, int64_t channels, int64_t spatial,
                           const void* bias, void* y, cudaStream_t s);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_POOL_KERNELS_H_
