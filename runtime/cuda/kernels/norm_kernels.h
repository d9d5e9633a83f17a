// Normalisation kernels: LayerNormalization, BatchNormalization, Instance/GroupNormalization and
// their ottr-domain backward ops (plain C++ interface, no abseil: included by norm_kernels.cu and
// runtime/cuda/normalization_ops.cc). Types are ONNX codes; data types are float32, float16,
// bfloat16 (computed in float) and float64 (in double). Parameter and statistics tensors may
// have their own float types (`*_dtype`). Reductions are fixed trees (deterministic); sums over
// many elements are accumulated in double.
//
// Math (see ir/grads/normalization_grads.cc): over a group of M elements normalised together,
// x̂ = (x − μ) σ⁻¹ with σ⁻¹ = 1 / sqrt(var + ε) (population variance), y = s x̂ + b, and
//   g = dy s,  dx = σ⁻¹ (g − mean(g) − x̂ mean(g x̂)),  ds = Σ dy x̂,  db = Σ dy.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_NORM_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_NORM_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

// Maps a flat index over `dims` (row-major, rank <= kMaxRank) to the flat index of a tensor
// that broadcasts to `dims`: Σ_d idx_d · strides[d], with stride 0 on broadcast dims.
struct BroadcastMap {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

// ---------------------------------------------------------------------------------------------
// LayerNormalization-17 over rows = prod(dims[:axis]), cols = prod(dims[axis:]):
//   Mean = mean(x), InvStdDev = 1 / sqrt(var(x) + ε), Y = (x − Mean) InvStdDev Scale + B.
// Scale/B (type `dtype`, B may be null) are indexed by column when `params_by_column` (both
// hold exactly the normalised dims), else through scale_map / bias_map over X's flat index.
// Mean / InvStdDev (type `stats_dtype`, [rows]) may be null; a float64 stats_dtype (stash_type)
// computes the row in double. cols <= 1024: a row in registers (1..32 lanes); larger: one block
// per row.
struct LayerNormArgs {
  int dtype = 1;
  int stats_dtype = 1;
  int64_t rows = 0, cols = 0;
  float epsilon = 1e-5f;
  bool params_by_column = true;
  BroadcastMap scale_map, bias_map;
};
cudaError_t LaunchLayerNorm(const LayerNormArgs& a, const void* x, const void* scale, const void* bias,
                            void* y, void* mean, void* inv_std, cudaStream_t stream);

// ottr::LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) -> (dX, [dScale], [dBias]).
// scale is indexed by column: directly when `scale_by_column`, else through scale_map over the
// normalised dims' flat index. mean / inv_std (type `stats_dtype`, one per row) may be null:
// then they are recomputed. dScale / dBias ([cols], type `dtype`) are column sums over the rows:
// per-chunk partials in the workspace, then a fixed-order sum.
struct LayerNormGradArgs {
  int dtype = 1;
  int stats_dtype = 1;
  int64_t rows = 0, cols = 0;
  float epsilon = 1e-5f;
  bool scale_by_column = true;
  BroadcastMap scale_map;
};
int64_t LayerNormGradWorkspaceBytes(const LayerNormGradArgs& a);
cudaError_t LaunchLayerNormGrad(const LayerNormGradArgs& a, const void* dy, const void* x, const void* scale,
                                const void* mean, const void* inv_std, void* dx, void* dscale, void* dbias,
                                void* workspace, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// BatchNormalization-15 on X [N, C, S...] (spatial = prod of the dims after C):
//   inference: Y = (x − input_mean) · scale / sqrt(input_var + ε) + B;
//   training: the batch mean and population variance per channel instead, and
//     running_mean = input_mean · momentum + mean · (1 − momentum) (same for var; either may be
//     null). Batch statistics: shifted sums in double per (channel, chunk), then per channel.
struct BatchNormArgs {
  int dtype = 1;
  int64_t n = 0, c = 0, spatial = 1;
  float epsilon = 1e-5f, momentum = 0.9f;
  bool training = false;
  int scale_dtype = 1, bias_dtype = 1, mean_dtype = 1, var_dtype = 1;
};
int64_t BatchNormWorkspaceBytes(const BatchNormArgs& a);
cudaError_t LaunchBatchNorm(const BatchNormArgs& a, const void* x, const void* scale, const void* bias,
                            const void* in_mean, const void* in_var, void* y, void* running_mean,
                            void* running_var, void* workspace, cudaStream_t stream);

// ottr::BatchNormalizationGrad(dY, X, scale, [mean, var]) -> (dX, [dScale], [dB]).
// `fixed`: mean/var are given (inference statistics): dX = dY · scale · σ⁻¹. Otherwise the
// batch statistics: dX = scale σ⁻¹ (dY − dB / M − x̂ dScale / M), M = N · spatial.
// dScale / dB ([C], type `dparam_dtype`) may be null, as may dX.
struct BatchNormGradArgs {
  int dtype = 1;
  int64_t n = 0, c = 0, spatial = 1;
  float epsilon = 1e-5f;
  bool fixed = false;
  int scale_dtype = 1, mean_dtype = 1, var_dtype = 1, dparam_dtype = 1;
};
int64_t BatchNormGradWorkspaceBytes(const BatchNormGradArgs& a);
cudaError_t LaunchBatchNormGrad(const BatchNormGradArgs& a, const void* dy, const void* x, const void* scale,
                                const void* mean, const void* var, void* dx, void* dscale, void* dbias,
                                void* workspace, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// GroupNormalization-18/21 and InstanceNormalization-6 (groups = C) on X [N, C, S...]: per
// (sample, group of C / groups channels) Y = (x − μ) σ⁻¹ · scale + bias, where scale / bias are
// per channel or per group (`*_per_group`). One block per (sample, group).
struct GroupNormArgs {
  int dtype = 1;
  int64_t n = 0, c = 0, spatial = 1, groups = 1;
  float epsilon = 1e-5f;
  int scale_dtype = 1, bias_dtype = 1;
  bool scale_per_group = false, bias_per_group = false;
};
cudaError_t LaunchGroupNorm(const GroupNormArgs& a, const void* x, const void* scale, const void* bias, void* y,
                            cudaStream_t stream);

// ottr::GroupNormalizationGrad(dY, X, scale) -> (dX, [dScale [C]], [dBias [C]]) (per-channel
// parameter gradients of type `dparam_dtype`; any of the three outputs may be null).
struct GroupNormGradArgs {
  int dtype = 1;
  int64_t n = 0, c = 0, spatial = 1, groups = 1;
  float epsilon = 1e-5f;
  int scale_dtype = 1, dparam_dtype = 1;
  bool scale_per_group = false;
};
int64_t GroupNormGradWorkspaceBytes(const GroupNormGradArgs& a);
cudaError_t LaunchGroupNormGrad(const GroupNormGradArgs& a, const void* dy, const void* x, const void* scale,
                                void* dx, void* dscale, void* dbias, void* workspace, cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_NORM_KERNELS_H_
