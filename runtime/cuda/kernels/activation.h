// CUDA kernels of the activation ops and their ottr-domain backward ops (plain C++ interface;
// formulas as in runtime/cpu/activation_kernels.cc and activation_grad_kernels.cc, which are the
// reference). Element types are ONNX codes; every op takes float32, float16, bfloat16 (computed in
// float) and float64, Relu also the signed integers.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_ACTIVATION_H_
#define OTTR_RUNTIME_CUDA_KERNELS_ACTIVATION_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/kernels/elementwise.h"

namespace ottr::cuda::kernels {

enum class ActivationOp : int {
  kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kSoftplus, kSoftsign, kElu, kSelu, kCelu,
  kHardSigmoid, kHardSwish, kThresholdedRelu, kMish,
};

// The attributes an op uses (the others are ignored).
struct ActivationParams {
  float alpha = 0.0f;
  float beta = 0.0f;
  float gamma = 0.0f;
};

// y = f(x) over n contiguous elements.
using ActivationFn = cudaError_t (*)(const void* x, void* y, int64_t n, const ActivationParams& p,
                                     cudaStream_t stream);
ActivationFn FindActivation(ActivationOp op, int type);  // activation.cu

// dX = F(dY, Z) over n contiguous elements, Z = Y for Relu, Sigmoid and Tanh, X otherwise (the
// backward op of `op`, e.g. kRelu -> ottr::ReluGrad, kGeluTanh -> GeluGrad{approximate=tanh}).
using ActivationGradFn = cudaError_t (*)(const void* dy, const void* z, void* dx, int64_t n,
                                         const ActivationParams& p, cudaStream_t stream);
ActivationGradFn FindActivationGrad(ActivationOp op, int type);  // activation_grad.cu

// PRelu(x, slope) with broadcasting (numeric types): operand 0 = x, 1 = slope.
BinaryFn FindPRelu(int type);  // activation.cu

// PReluGrad(dY, X, slope) -> (dX, dSlope), float types.
// dX = dY · (X > 0 ? 1 : slope) over the broadcast output (plan operands: dY, X, slope).
using PReluGradDxFn = cudaError_t (*)(const IndexPlan<3>& plan, const void* dy, const void* x,
                                      const void* slope, void* dx, cudaStream_t stream);
PReluGradDxFn FindPReluGradDx(int type);  // activation_grad.cu

// dSlope[k] = Σ_r dY[o(k, r)] · (X[x(k, r)] > 0 ? 0 : X[x(k, r)]) summed in double, where output
// element o(k, r) = Σ kept index_d · out_stride_d + Σ reduced index_d · out_stride_d over slope's
// element k (the kept dims, row-major as slope is stored) and reduction index r (the dims slope is
// broadcast along). Deterministic, no atomics: for short reductions one thread sums each slope
// element in order; otherwise `chunks` blocks per slope element each reduce a contiguous range
// of r to one partial sum (written to the workspace when chunks > 1, then added in order by a
// second kernel).
struct SlopeReducePlan {
  int64_t slope_elements = 0;   // K
  int64_t reduce_elements = 0;  // R
  bool thread_per_slope = true;
  int64_t chunks = 1;           // partial sums per slope element (blocks path)
  int kept_rank = 0;            // innermost first
  int reduced_rank = 0;         // innermost first
  FastDivisor kept_dims[kMaxRank];
  int64_t kept_out_stride[kMaxRank] = {};
  int64_t kept_x_stride[kMaxRank] = {};
  FastDivisor reduced_dims[kMaxRank];
  int64_t reduced_out_stride[kMaxRank] = {};
  int64_t reduced_x_stride[kMaxRank] = {};
};
// Bytes of device workspace the reduction needs (0 when chunks == 1).
inline int64_t SlopeReduceWorkspaceBytes(const SlopeReducePlan& p) {
  return !p.thread_per_slope && p.chunks > 1 ? p.slope_elements * p.chunks * static_cast<int64_t>(sizeof(double)) : 0;
}
using PReluGradSlopeFn = cudaError_t (*)(const SlopeReducePlan& plan, const void* dy, const void* x,
                                         void* dslope, void* workspace, cudaStream_t stream);
PReluGradSlopeFn FindPReluGradSlope(int type);  // activation_grad.cu

// ReluGradBiasGrad(dY, Y) -> (dX, dB) over a row-major [rows, cols] (ir/ops/fused_ops.cc): dX as
// ReluGrad, dB[c] = Σ_r dX[r, c] summed in float (double for double dY) and rounded once to the
// bias type (dY's, or float32 for 16-bit dY). One kernel: row blocks write per-column partials
// to the workspace and the last block of each column strip adds them in order (deterministic);
// `counters` (strips of them, zero before the first launch) are left zero by every launch.
// With `transposed` the kernel also writes dXᵀ, [cols, rows] row-major (the K-major operand of a
// weight-gradient GEMM, passes/kmajor_gemm.cc), through a shared-memory tile; dX itself may then
// be null (nobody reads it: not written at all).
struct ReluBiasGradPlan {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rows_per_block = 0;
  int64_t strips = 0;      // column strips of 32 x (16 / element size) columns
  int64_t row_blocks = 0;  // partials per column
  int64_t acc_bytes = 4;   // bytes of one partial
  bool transposed = false;
};
ReluBiasGradPlan MakeReluBiasGradPlan(int type, int64_t rows, int64_t cols,
                                      bool transposed = false);  // activation_grad.cu
inline int64_t ReluBiasGradWorkspaceBytes(const ReluBiasGradPlan& p) { return p.row_blocks * p.cols * p.acc_bytes; }
// `programmatic`: launched so it may start while the kernel before it ends (kernels/pdl.cuh).
using ReluBiasGradFn = cudaError_t (*)(const ReluBiasGradPlan& p, const void* dy, const void* y, void* dx,
                                       void* db, void* dxt, void* workspace, unsigned* counters,
                                       cudaStream_t stream, bool programmatic);
ReluBiasGradFn FindReluGradBiasGrad(int type, int bias_type);  // activation_grad.cu; null if unsupported

// LinearReluGrad(dZ, W, Y) -> (dX, dB[, dW, dBz]), float32 (ir/ops/fused_ops.cc): dZ [rows, k],
// W [k, cols], Y / dX [rows, cols] row-major, k <= 16. One kernel over Y (activation_grad.cu):
// row blocks write partial sums to the workspace and each column strip's last block adds them in
// order (deterministic); `counters` (strips of them, zero before the first launch) are left zero.
// dX must not alias Y's rows of another block: in place (dX == Y) is allowed, each element being
// read before the same thread writes it.
struct LinearReluGradPlan {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t k = 0;
  int kp = 0;              // k rounded up to the kernel's size (4, 8, 12, 16); 0: unsupported
  bool weight_grad = false;  // dW and dBz too
  // dW on the tensor cores (mma.sync TF32, float32 accumulation): TF32 steps only (the dW the
  // TF32 GEMM it replaces would make); dX, dB and dBz stay float32.
  bool tc = false;
  int64_t weight_rows = 0;  // dW's and dBz's rows written (the first ones; ottr's {weight_rows})
  int64_t rows_per_block = 0;
  int64_t strips = 0;      // column strips of 64
  int64_t row_blocks = 0;
};
LinearReluGradPlan MakeLinearReluGradPlan(int64_t rows, int64_t cols, int64_t k, bool weight_grad, bool tc = false);
int64_t LinearReluGradWorkspaceBytes(const LinearReluGradPlan& p);
cudaError_t LaunchLinearReluGrad(const LinearReluGradPlan& p, const float* dz, const float* w, const float* y,
                                 float* dx, float* db, float* dw, float* dbz, void* workspace, unsigned* counters,
                                 cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_ACTIVATION_H_
