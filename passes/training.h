// The training pipeline: turns an imported forward graph into one training-step graph
// (forward, loss, backward, gradient clipping, optimizer update), as a list of passes so that
// `ottr passes` can dump each stage.
//
// Conventions of the step graph:
//   input  %labels       the loss's labels (i64[N] for cross-entropy, like the output for MSE)
//   input  %ottr.lr      f32[] learning rate of this step (schedules run on the host)
//   init   %ottr.step    i64[] steps taken so far; the step updates it to step + 1
//   output %loss         f32[] the loss of this batch, then the model's outputs
//   init   %<param>.m / .v / .momentum_buffer   optimizer state (zeros), updated by the step
//   update %<param> <- new value, and likewise each state
// With loss scaling (passes/loss_scaling.h):
//   init   %ottr.loss_scale             the loss's type, []: the gradient seed (d loss = scale)
//   init   %ottr.loss_scale.good_steps  i64[]: finite steps since the scale last changed (dynamic)
#ifndef OTTR_PASSES_TRAINING_H_
#define OTTR_PASSES_TRAINING_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace ottr::passes {

inline constexpr char kLabelsInput[] = "labels";
inline constexpr char kLossOutput[] = "loss";
inline constexpr char kLrInput[] = "ottr.lr";
inline constexpr char kStepState[] = "ottr.step";
inline constexpr char kLossScaleState[] = "ottr.loss_scale";
inline constexpr char kGoodStepsState[] = "ottr.loss_scale.good_steps";

struct LossSpec {
  enum class Kind { kModelOutput, kSoftmaxCrossEntropy, kMse };
  Kind kind = Kind::kSoftmaxCrossEntropy;
  // The model output holding the loss (kModelOutput) or the logits / predictions; "" = the
  // model's only output.
  std::string output;
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
};

struct OptimizerSpec {
  enum class Kind { kSgd, kAdam, kAdamW };
  Kind kind = Kind::kAdam;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // AdamW's default 0.01 is applied by the CLI
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float max_grad_norm = 0.0f;  // > 0: clip gradients by their global L2 norm
};

// Loss scaling (passes/loss_scaling.h): autodiff seeds the loss's gradient with the scale S (a
// state value in device memory), the N-ary optimizer update multiplies every gradient by 1/S, and
// a step whose loss or gradients are not all finite is skipped on the device (parameters,
// optimizer state and %ottr.step unchanged). kDynamic also multiplies S by backoff_factor on such
// a step and by growth_factor after growth_interval finite steps in a row (torch.amp.GradScaler's
// defaults); kStatic keeps S. kAuto is kDynamic for Precision::kFp16 and kNone otherwise.
struct LossScaleSpec {
  enum class Kind { kAuto, kNone, kStatic, kDynamic };
  Kind kind = Kind::kAuto;
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

// Numeric precision of the step. kFp32 and kTf32 differ only in the CUDA executor's TF32 setting
// (float32 GEMMs/convolutions on TF32 tensor cores or not); kBf16 and kFp16 add the
// mixed-precision pass (passes/mixed_precision.h): GEMMs and convolutions in the 16-bit type with
// float32 accumulation, everything else and the parameters (master weights) in float32.
enum class Precision { kFp32, kTf32, kBf16, kFp16 };
const char* PrecisionName(Precision p);  // "fp32", "tf32", "bf16", "fp16"

struct TrainingSpec {
  LossSpec loss;
  OptimizerSpec optimizer;
  std::string freeze;  // regex: initializers whose names match are not trained
  int64_t batch = 0;   // binds the leading dim of the inputs
  std::vector<std::pair<std::string, int64_t>> dims;  // other symbolic dims
  // Keep "<param>.grad" as graph outputs (tests, tooling); with loss scaling they are the scaled
  // gradients (the optimizer unscales them).
  bool expose_gradients = false;
  // Group the per-parameter updates into one N-ary node (group-optimizer-updates): one
  // multi-tensor launch on the GPU, at the cost of keeping every gradient live until it runs.
  // The tools turn it on for the CUDA executor.
  bool multi_tensor_updates = false;
  // With multi_tensor_updates: the grouped updates skip a step whose loss or any gradient is not
  // finite, on the device (nan-guard, passes/loss_scaling.h). `ottr train --device cuda` turns it
  // on (with the grouped update, its default there).
  bool nan_guard = false;
  LossScaleSpec loss_scale;
  // Fuse each linear layer's GEMM with its bias, activation and their gradients into
  // ottr::FusedGemm nodes (passes/fusion_passes.h): one cuBLASLt epilogue launch where there were
  // several kernels. The tools turn it on for the CUDA executor.
  bool fuse_epilogues = false;
  // With fuse_epilogues: a ReluGrad the GEMM epilogues left, and the ReduceSum of its output (a
  // bias gradient), become one ottr::ReluGradBiasGrad kernel (fuse-relu-grad-bgrad) instead of
  // going into the weight gradient's BGRAD epilogue or a separate reduction. Unset: on for
  // bf16/fp16 and TF32 steps (exact float32 keeps the separate kernels). On the H200 it took the
  // bf16 MLP 4096x4 step from 2754.6 to 2656.8 µs (the BGRADA GEMMs' extra kernel gone); TF32
  // steps run as fast with it and with 8 fewer launches (MLP 4096x4 4781.1 against 4795.6 µs,
  // 40 against 48 launches; the small MLP at batch 8192 229.9 against 233.9 µs, 22 against 26;
  // bench/RESULTS.md 2026-12-02 (3)).
  std::optional<bool> fuse_relu_grad_bgrad;
  // With fuse_epilogues: bf16/fp16 GEMMs too large for the activation epilogues otherwise
  // (fuse-gemm-epilogue) keep a following ReLU in the GEMM as RELU_BIAS (no mask; the ReLU's
  // backward reads the output). On the H200 the bf16 4096³ forward took 159.5 µs with it against
  // 158.6 + 13.2 µs for the GEMM and the ReLU kernel; the bf16 MLP 4096x4 step went from 2653 to
  // 2594 µs, fp16 from 2772 to 2714. `--large-relu-epilogue off` to compare.
  bool large_relu_epilogue = true;
  // The same for float32 (TF32) GEMMs above their bound (1e9 multiply-adds): on the H200 the small
  // MLP's 8192 x 512 x 784 forward took 24.6 µs with RELU_BIAS against 24.9 + 6.8 µs for the GEMM
  // and the ReLU kernel, and its step at batch 8192 went from 253.7 to 230.0 µs (2026-12-02).
  // `--large-relu-epilogue-tf32 off` to compare.
  bool large_relu_epilogue_tf32 = true;
  // TF32 steps: fuse-gemm-dact-bgrad leaves a layer's bias gradient to its weight-gradient GEMM
  // (fuse-gemm-bgrad) where that GEMM can take it, instead of DRELU_BGRAD on the data gradient,
  // which is on the backward's critical path (small MLP at batch 128 on the H200: 55.4 -> 52.6 µs).
  // `--tf32-bgrad-in-weight-gemm off` to compare.
  bool tf32_bgrad_in_weight_gemm = true;
  // Run the 2-D convolutions, max pools and the elementwise nodes between them channels-last
  // (nhwc-layout, passes/layout.h), where cuDNN is fastest. The tools turn it on for the CUDA
  // executor.
  bool channels_last = false;
  // With kBf16/kFp16: run the selects and copies between 16-bit GEMMs/convolutions (Relu, MaxPool,
  // their gradients, Transpose, Reshape, ...) in the 16-bit type (narrow-exact-ops, same bits).
  // The tools turn it on for the CUDA executor.
  bool narrow_exact_ops = false;
  // With kTf32: transpose one operand of each large GEMM whose operands are both MN-major (the
  // weight gradients) so TF32 Tensor Cores read it K-major (kmajor-gemm-operands,
  // passes/kmajor_gemm.cc). The tools turn it on for the CUDA executor.
  bool kmajor_gemm_operands = false;
  // Independent plain products (no epilogue) ready at the same point of the step become one
  // ottr::GroupedGemm (group-gemms, passes/group_gemms.cc): one grouped launch on the GPU where it
  // times faster. Off (`--group-gemms on`): cuBLAS's grouped launch was slower than separate
  // GEMMs for every pair measured, and a node run as separate GEMMs loses the two streams'
  // overlap (bench/RESULTS.md 2026-12-05).
  bool group_gemms = false;
  // With fuse_epilogues and a grouped update: a weight gradient of k <= 256 rows (the batch) that
  // only an unguarded float32 Adam update reads becomes, with its bias gradient and that update,
  // one ottr::GemmAdamUpdate (fuse-gemm-adam, passes/fuse_gemm_adam.cc). Off (`--fuse-gemm-adam
  // on`): the first kernel made the small MLP's step at batch 128 slower on the H100 (57.0 against
  // 49.1 µs, bench/RESULTS.md 2026-12-05 (2)); its one-round-trip rewrite is not yet timed.
  bool fuse_gemm_adam = false;
  // With fuse_epilogues, a grouped update and TF32 (no loss scaling, clipping or exposed
  // gradients): the whole step of a small ReLU MLP with softmax cross-entropy and Adam becomes one
  // ottr::MlpStep, one cooperative launch (fuse-mlp-step, passes/fuse_mlp_step.cc). Off
  // (`--fuse-mlp-step on`) until its kernel is measured faster than the step it replaces: it
  // took 60.1 µs against 48.5 for the small MLP at batch 128 on the H100 (bench/RESULTS.md
  // 2026-12-06 (4): its backward phases load operands with k strided, four bytes at a time).
  bool fuse_mlp_step = false;
  // With kBf16/kFp16 and a grouped update: the optimizer writes each parameter's 16-bit copy for
  // the next forward instead of a Cast per parameter per step (optimizer-low-copies,
  // passes/mixed_precision.h). The copies are state: RefreshLowPrecisionCopies after setting
  // parameters from outside. The tools turn it on.
  bool optimizer_low_copies = false;
  // With kBf16/kFp16: zero-pad GEMMs whose k or n is not a multiple of 8 elements (pad-gemm-dims,
  // passes/pad_gemm_dims.cc), so their leading dimensions are 16 bytes; on the H200 this made a
  // bf16 MLP 4100-4096-1001 step 5.5x faster at batch 4096 (`--pad-gemm-dims off` to compare).
  bool pad_gemm_dims = true;
  // With kTf32 and pad_gemm_dims: float32 GEMMs whose k or n is not a multiple of 4 are padded
  // too (TF32 kernels on the GPU want 16-byte rows as well). The tools turn it on for the CUDA
  // executor; the CPU gains nothing from it.
  bool pad_tf32_gemms = false;
  double pad_gemm_min_macs = 1e7;  // GEMMs smaller than this (m·n·k) are not padded
  int64_t pad_gemm_min_rows = 512;  // nor GEMMs of fewer rows (m)
  Precision precision = Precision::kFp32;
  // Regex: with kBf16/kFp16, GEMM/conv nodes whose origin or output name matches stay float32.
  std::string keep_fp32;
  // Pass names BuildTrainingGraph skips (merged into PassManagerOptions::disabled), so tools that
  // only build the step (bench, train) honour --disable-passes.
  std::set<std::string> disabled_passes;
};

// Turns on the passes of the CUDA pipeline (`ottr train` and `ottr bench` on the GPU, the GPU
// tests of that pipeline): multi_tensor_updates, fuse_epilogues, channels_last, narrow_exact_ops,
// kmajor_gemm_operands, pad_tf32_gemms and optimizer_low_copies.
void UseCudaPipeline(TrainingSpec& spec);

// The loss scaling `spec` asks for, kAuto resolved by its precision.
LossScaleSpec::Kind EffectiveLossScale(const TrainingSpec& spec);

// The name of a parameter's gradient value in the step graph.
std::string GradName(const std::string& param);

// Adds the training pipeline's passes, in order, to `pm`:
//   infer-shapes, simplify (constant-folding + cse + dce), mixed-precision (when spec.precision
//   is kBf16 or kFp16), pad-gemm-dims (then, with spec.pad_gemm_dims, the default), append-loss, scale-loss (with loss scaling), autodiff,
//   clip-gradients (when asked), optimizer, batchnorm-statistics, simplify,
//   group-optimizer-updates (when spec.multi_tensor_updates or loss scaling; the latter groups
//   even a single update), nan-guard (spec.nan_guard without loss scaling), unscale-gradients
//   (with loss scaling), fuse-mlp-step (spec.fuse_mlp_step: TF32 steps with spec.fuse_epilogues and
//   spec.multi_tensor_updates, no loss scaling, clipping or exposed gradients; declines guarded
//   updates), fuse-sce-grad, fold-gemm-casts, fuse-gemm-epilogue,
//   narrow-exact-ops (when spec.narrow_exact_ops with bf16/fp16) before the grouping,
//   fuse-gemm-dact-bgrad, fuse-relu-grad-bgrad (spec.fuse_relu_grad_bgrad, unset: bf16/fp16/TF32),
//   fuse-gemm-bgrad, fuse-sce-bgrad, fuse-linear-sce, count-labels-early, fuse-linear-relu-grad (when
//   spec.fuse_epilogues), fuse-linear-sce-relu-grad (with them, TF32 steps),
//   nhwc-layout (when spec.channels_last), kmajor-gemm-operands (when spec.kmajor_gemm_operands with TF32),
//   fuse-conv-activation, fuse-maxpool-relu-grad (when spec.fuse_epilogues), group-gemms (when
//   spec.group_gemms), fuse-gemm-adam (when spec.fuse_gemm_adam with spec.fuse_epilogues and
//   spec.multi_tensor_updates; declines guarded updates), split-optimizer-updates (when
//   spec.multi_tensor_updates; declines guarded updates), optimizer-low-copies (when
//   spec.optimizer_low_copies with bf16/fp16).
absl::Status AddTrainingPasses(PassManager& pm, const TrainingSpec& spec);

// Runs the pipeline on a copy of `forward` and returns the step graph.
absl::StatusOr<std::unique_ptr<ir::Graph>> BuildTrainingGraph(const ir::Graph& forward,
                                                               const TrainingSpec& spec,
                                                               PassManagerOptions options = {});

// The trainable parameters: float initializers not matching `freeze` (a regex; "" = none).
absl::StatusOr<std::vector<ir::Value*>> TrainableParameters(const ir::Graph& g,
                                                            const std::string& freeze);

}  // namespace ottr::passes

#endif  // OTTR_PASSES_TRAINING_H_
