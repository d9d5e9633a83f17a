// Optimizer-update kernels (plain C++ interface, no abseil: included by optimizer_kernels.cu and
// runtime/cuda/optimizer_ops.cc, and by the lead's multi-tensor fusion).
//
// ottr::AdamUpdate / ottr::SGDUpdate follow PyTorch's single-tensor torch.optim.Adam/AdamW/SGD
// operation by operation, exactly as the CPU reference (runtime/cpu/ottr_training_kernels.cc):
// element math in the tensor's type with every operation rounded separately (no fused
// multiply-add, so float32 results match the CPU bit for bit), scalar factors computed in
// double from the learning rate and the step read from device memory:
//   Adam:  bc1 = 1 − β1^t, bc2 = 1 − β2^t (double);  step_size = T(lr / bc1),
//          bc2_sqrt = T(sqrt(bc2)), decay = T(1 − lr · wd);
//          AdamW (decoupled): p = p · decay;  Adam: g = g + wd · p   (when wd != 0)
//          m = m + (1 − β1)(g − m)   (lerp);  v = v · β2 + (1 − β2) · g · g
//          p = p − step_size · (m / (sqrt(v) / bc2_sqrt + ε))
//   SGD:   g = g + wd · p (wd != 0); with a momentum buffer b: b = g on step <= 1, else
//          momentum · b + (1 − dampening) · g; g = nesterov ? g + momentum · b : b;
//          p = p − T(lr) · g
// A step < 1 gives bc1 = 0 and so non-finite parameters (the CPU reference rejects it).
// Types: float32 and float64 (all tensors of one update share the type).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

struct AdamHyper {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.0f;
  bool decoupled = false;  // AdamW
};

struct SgdHyper {
  float momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

// Per-step scalars in device memory: the learning rate (float32/float64 scalar) and the 1-based
// step (int64/int32 scalar). Types are ONNX codes.
struct OptimizerScalars {
  const void* lr = nullptr;
  int lr_dtype = 1;
  const void* step = nullptr;
  int step_dtype = 7;
  // Optional guard (ottr::AdamUpdateN / SGDUpdateN with guarded = 1): a float scalar (the loss:
  // not finite skips) or a bool scalar (all gradients finite: false skips). A skipped launch
  // leaves every output equal to its input (a copy only where they are different buffers).
  const void* guard = nullptr;
  int guard_dtype = 1;
  // Optional loss scale S (unscale = 1), a float scalar: each gradient element is multiplied by
  // T(1 / S), the reciprocal computed in double and rounded once (as the CPU reference).
  const void* grad_scale = nullptr;
  int grad_scale_dtype = 1;
};

// Elements per chunk: a chunk is the unit one block updates (256 threads x 2 vectors of 4);
// chunks never straddle tensors. Small enough that a 400K-element tensor spreads over ~200
// blocks.
constexpr int64_t kMultiTensorChunk = 2048;

// One tensor of a multi-tensor update. Outputs may alias their inputs (in-place update: each
// element is read before it is written, by the same thread). Adam: state0 = m, state1 = v (both
// required). SGD: state0 = the momentum buffer (null: no momentum), state1 unused. Pointers
// must stay valid for as long as a captured graph replays the launch.
struct MultiTensorEntry {
  const void* grad = nullptr;
  const void* param = nullptr;
  void* param_out = nullptr;
  const void* state0 = nullptr;
  void* state0_out = nullptr;
  const void* state1 = nullptr;
  void* state1_out = nullptr;
  int64_t numel = 0;
  int64_t first_chunk = 0;  // set by FillChunkOffsets
  // ONNX training ops only: bit k set = tensor k of (param, grad, state0, state1) is float64.
  int32_t f64_mask = 0;
  // ottr N-ary updates with a low-precision copy (ir/optimizer_update.h): the updated parameter is
  // also written to low_out as low_dtype (nl::kBF16 or nl::kF16, round to nearest even), or 0.
  int32_t low_dtype = 0;
  void* low_out = nullptr;
};

// Sets entries[i].first_chunk (prefix sums of ceil(numel / kMultiTensorChunk)) and returns the
// total number of chunks. Host function; call it when building a table.
int64_t FillChunkOffsets(MultiTensorEntry* entries, int num_tensors);

// Multi-tensor updates from a table in device memory (num_tensors entries, first_chunk filled,
// total_chunks = FillChunkOffsets' result): one launch updates every tensor. The table is read
// at run time, so it can be written once after the buffers are placed and then replayed in a
// CUDA Graph. dtype: float32 or float64 (ONNX code), shared by all tensors.
cudaError_t LaunchMultiTensorAdam(const MultiTensorEntry* device_table, int num_tensors, int64_t total_chunks,
                                  int dtype, const AdamHyper& h, const OptimizerScalars& s, cudaStream_t stream);
cudaError_t LaunchMultiTensorSgd(const MultiTensorEntry* device_table, int num_tensors, int64_t total_chunks,
                                 int dtype, const SgdHyper& h, const OptimizerScalars& s, cudaStream_t stream);

// ottr::GemmAdamUpdate (ir/ops/ottr_training_ops.cc) in one launch: the weight gradient
// g = Aᵀ·B (A [k, m], B [k, n], float32, row-major), optionally the bias gradient (bias 0: Σ_k
// of A's rows, [m]; bias 1: of B's rows, [n]; in double, rounded once), and the Adam update of
// the weight [m, n] (tensor 0) and the bias (tensor 1) from them, element arithmetic as
// LaunchPackedAdam. `tf32` off: g's float32 products summed in increasing k, the bias in
// increasing k (32 x 64 tiles); on: g on the TF32 tensor cores (operands rounded to nearest
// TF32), the bias in 8 interleaved parts added in order (32 x 32 tiles). The gradients are never
// stored. Outputs may alias their inputs. For small k (the batch of a weight gradient),
// k <= kGemmAdamMaxK: each block keeps its tile of g in registers and all k rows of its A and B
// columns in shared memory (96 KB at k = 256; 80 KB with the TF32 kernel's padded 32 x 32).
constexpr int64_t kGemmAdamMaxK = 256;
struct GemmAdamArgs {
  const float* a = nullptr;
  const float* b = nullptr;
  int64_t k = 0, m = 0, n = 0;
  int bias = -1;  // -1: none, 0: Σ_k A[k, :], 1: Σ_k B[k, :]
  bool tf32 = false;
  const float* param[2] = {};
  const float* m_in[2] = {};
  const float* v_in[2] = {};
  float* param_out[2] = {};
  float* m_out[2] = {};
  float* v_out[2] = {};
};
cudaError_t LaunchGemmAdam(const GemmAdamArgs& args, const AdamHyper& h, const OptimizerScalars& s,
                           cudaStream_t stream);

// The same updates with the table passed by value as kernel parameters (no device table):
// up to kMaxPackedTensors tensors per launch, more are split over several launches.
// `host_entries` need not have first_chunk filled. Used by the single-tensor ottr ops.
// `programmatic`: launched so it may start while the kernel before it ends (kernels/pdl.cuh).
constexpr int kMaxPackedTensors = 44;
cudaError_t LaunchPackedAdam(const MultiTensorEntry* host_entries, int num_tensors, int dtype, const AdamHyper& h,
                             const OptimizerScalars& s, cudaStream_t stream, bool programmatic = false);
cudaError_t LaunchPackedSgd(const MultiTensorEntry* host_entries, int num_tensors, int dtype, const SgdHyper& h,
                            const OptimizerScalars& s, cudaStream_t stream, bool programmatic = false);

// ottr::AllFinite: *ok = true when no element of the n tensors (float32/float64/float16/bfloat16,
// types as ONNX codes) is a NaN or an infinity. One memset and one multi-tensor launch per
// kMaxPackedTensors tensors; a thread that finds a non-finite element stores false (every writer
// stores the same value, so the race is benign and the result deterministic). No host sync.
struct FiniteCheckEntry {
  const void* data = nullptr;
  int64_t numel = 0;
  int dtype = 1;
};
cudaError_t LaunchAllFinite(const FiniteCheckEntry* host_entries, int num_tensors, bool* ok, cudaStream_t stream);

// ottr::LossScaleUpdate on one thread (torch.amp's _amp_update_scale_, the CPU reference's
// order): reads scale (float32/float64, `scale_dtype`), good (int64) and ok (bool) before writing
// scale_out and good_out, which may alias them.
struct LossScaleHyper {
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};
cudaError_t LaunchLossScaleUpdate(const void* scale, int scale_dtype, const int64_t* good, const bool* ok,
                                  void* scale_out, int64_t* good_out, const LossScaleHyper& h, cudaStream_t stream);

// ai.onnx.preview.training Adam / Adagrad / Momentum over n tensors (one launch per
// kMaxPackedTensors), each element computed in double as the CPU reference
// (runtime/cpu/training_kernels.cc) and rounded once; R (float/double) and T (int64) are read
// from device memory. Entries: param = X, grad = G, state0/state1 = the states (Adam: V, H;
// Adagrad: H; Momentum: V), f64_mask gives each tensor's type (float32 or float64).
enum class OnnxOptimizer : int { kAdam = 0, kAdagrad = 1, kMomentum = 2 };
struct OnnxOptimizerHyper {
  // Adam: alpha, beta, epsilon, norm_coefficient, norm_coefficient_post.
  // Adagrad: decay_factor (in alpha), epsilon, norm_coefficient.
  // Momentum: alpha, beta, norm_coefficient, nesterov.
  double alpha = 0, beta = 0, epsilon = 0, norm_coefficient = 0, norm_coefficient_post = 0;
  bool nesterov = false;
};
cudaError_t LaunchOnnxOptimizer(OnnxOptimizer kind, const MultiTensorEntry* host_entries, int num_tensors,
                                const OnnxOptimizerHyper& h, const void* r, int r_dtype, const void* t,
                                cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_KERNELS_H_
