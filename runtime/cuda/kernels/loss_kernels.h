// Classification-loss kernels (plain C++ interface, no abseil: included by loss_kernels.cu and
// runtime/cuda/loss_ops.cc). Types are ONNX codes; labels are int32 or int64 (`labels64`).
//
// Out-of-range labels: a kernel cannot raise an error, and clamping would train on a wrong
// class silently. A label that is neither ignore_index nor in [0, C) therefore makes its loss
// NaN (and with it a sum/mean loss) and its gradient row NaN, so the executor's NaN guard
// reports it; the CPU reference reports the same input as an InvalidArgument error.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_LOSS_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_LOSS_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

// ---------------------------------------------------------------------------------------------
// ottr::SoftmaxCrossEntropy(logits [N, C], labels [N]) -> (loss [], log_prob [N, C])
//   log_prob = log_softmax(logits) (the row's log-sum-exp in double);
//   loss = mean over rows with label != ignore_index of
//          (1 - ε) · (−log_prob[i, y_i]) + ε / C · Σ_c (−log_prob[i, c])      (0/0 = NaN).
// The mean is deterministic: for small N one kernel (one block) does everything; otherwise
// per-block partial sums go to `workspace` and a one-block kernel adds them in a fixed order.
// `log_prob` may be null (not needed). dtype: float32/float16/bfloat16/float64. `ld` (>= c; 0: c):
// the row length of logits and log_prob.
int64_t SceForwardWorkspaceBytes(int64_t n, int64_t c);
cudaError_t LaunchSceForward(int dtype, const void* logits, const void* labels, bool labels64,
                             void* loss, void* log_prob, int64_t n, int64_t c,
                             int64_t ignore_index, float label_smoothing, void* workspace,
                             cudaStream_t stream, int64_t ld = 0);

// ottr::SoftmaxCrossEntropyWithGrad(logits, labels, dloss) -> (loss, dlogits): the forward
// above, without log_prob, writing dlogits as SoftmaxCrossEntropyGrad would from that log_prob,
// rounded to the logits' type and then to `grad_dtype` (the logits' type, or bf16/f16 for float32
// logits). One launch: a grid of one block counts the labels itself; a larger grid, given
// `counters` (SceWithGradCounterBytes of zeros, left zero), is a cooperative launch whose blocks
// count the labels together, wait for each other, and the last of which adds the loss partials.
// Without counters a larger grid takes three: a one-block kernel for dloss / count, the forward,
// and its finalize.
// `ld` (>= c; 0: c): the row length of logits and dlogits, whose columns c..ld-1 are not classes
// (the padding of a GEMM, ottr::SoftmaxCrossEntropyWithGrad's `classes`) and get zero gradients.
// `dbias` (optional, float32 logits and dlogits only; fuse-sce-bgrad): also the column sums of
// dlogits, dbias[j] = Σ_i dlogits[i, j] over all `ld` columns (the bias gradient of the GEMM
// before), in the same launch: each block sums its rows into its row of `bias_workspace`
// (SceBiasGradWorkspaceBytes), then, with several blocks (counters required), the blocks wait for
// each other and a warp per column adds the blocks' rows in a fixed order; rounded once to
// float32. Deterministic for a given grid.
int64_t SceWithGradWorkspaceBytes(int64_t n, int64_t c);
int64_t SceWithGradCounterBytes(int64_t n, int64_t ld);
int64_t SceBiasGradWorkspaceBytes(int64_t n, int64_t ld);
cudaError_t LaunchSceWithGrad(int dtype, int grad_dtype, int dloss_dtype, const void* logits, const void* labels,
                              bool labels64, const void* dloss, void* loss, void* dlogits, int64_t n, int64_t c,
                              int64_t ignore_index, float label_smoothing, void* workspace, cudaStream_t stream,
                              void* counters = nullptr, int64_t ld = 0, float* dbias = nullptr,
                              void* bias_workspace = nullptr, const void* count = nullptr);
// ottr::CountLabels: count [int64 scalar] = the number of labels [n] that are not ignore_index;
// one block. Given to LaunchSceWithGrad as `count` (a device int64 scalar, with counters), the
// grid takes dloss / count from it: its blocks no longer count the labels together and wait for
// each other, so the launch is cooperative only for the column sums.
cudaError_t LaunchCountLabels(const void* labels, bool labels64, int64_t n, int64_t ignore_index, void* count,
                              cudaStream_t stream);

// ottr::LinearSoftmaxCrossEntropyWithGrad (fuse-linear-sce), float32: the classifier GEMM, the
// loss with its gradient, and the data gradient through the GEMM in one launch, for C <= 32:
//   logits[i, j] = Σ_k x[i, k] · W(j, k) + bias[j]     (W(j, k) = w[j·K + k] with trans_b, w [ldc, K];
//                                                        else w[k·ldc + j], w [K, ldc]; bias may be null)
//   loss, dlogits = as LaunchSceWithGrad from those logits (kept in registers, never stored) of
//              the first c of ldc columns; dlogits rows of ldc floats, zero past c
//   dx[i, k] = Σ_j dlogits[i, j] · W(j, k), zero where `mask` (a ReLU bit mask, ir/fused_gemm.h:
//              row i at mask + i·mask_ld, bit k) is clear, or with relu_x where x[i, k] <= 0
//   dbias[k] = Σ_i dx[i, k] when dbias is not null (per warp in float32, then in double)
// Each block copies W into shared memory and each of its warps a row of x (and of the mask), all
// copies in flight together while the block counts the labels; then a warp per row: its lanes
// split K, a reduce-scatter over the lanes leaves one class's logit per lane (a fixed order:
// deterministic), each lane computes its class's softmax terms and dlogits (sums over the classes
// by a xor tree), the lanes exchange dlogits and write dx. Sums of products are float32 FMA (not
// TF32), the softmax and the loss in double as the SCE kernels do. Up to 1024 rows every block
// counts the labels itself; above, or with dbias, the grid is cooperative and the blocks count
// them together (SceSync counters) and add the column sums' block partials column by column. The
// last block adds the loss partials (fixed order). Shared memory and the bounds: ir/linear_sce_layout.h
// (LinearSceFits: K up to 1400 at 32 classes, 3600 at 10; about half that with dbias).
struct LinearSceArgs {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  const void* labels = nullptr;
  bool labels64 = true;
  const void* dloss = nullptr;
  int dloss_dtype = 1;
  const uint8_t* mask = nullptr;
  int64_t mask_ld = 0;
  bool relu_x = false;
  float* loss = nullptr;
  float* dlogits = nullptr;
  float* dx = nullptr;
  float* dbias = nullptr;
  int64_t n = 0, k = 0;
  int c = 0;    // classes
  int ldc = 0;  // the GEMM's columns (>= c; 0: c)
  bool trans_b = true;
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
  // No earlier launch of the step writes w (LaunchArgs::ready_inputs): a programmatic launch copies
  // it before it waits for the kernel before it (kernels/pdl.cuh).
  bool w_ready = false;
};
int64_t LinearSceWorkspaceBytes(int64_t n, int64_t k, bool col_sums);
int64_t LinearSceCounterBytes();
// `programmatic`: launched so it may start while the kernel before it ends (kernels/pdl.cuh).
cudaError_t LaunchLinearSce(const LinearSceArgs& a, void* workspace, void* counters, cudaStream_t stream,
                            bool programmatic = false);

// ottr::LinearSceReluGrad (fuse-linear-sce-relu-grad; TF32 steps), one cooperative launch
// (linear_sce_relu_grad.cu) over Y [n, cols] (a ReLU's output), W [k, cols], bias [k] (or null):
//   logits = Y·Wᵀ + bias                       TF32 products, float32 sums (the TF32 GEMM's)
//   loss, dZ = SoftmaxCrossEntropyWithGrad of the first c of k columns, dloss / *count
//   dx = (dZ·W) ⊙ [Y > 0]                      float32-level (split TF32 products); may alias Y
//   db = Σ_rows dx, dw = (dZᵀ·Y)[:weight_rows] (TF32 products), dbz = (Σ_rows dZ)[:weight_rows]
// dZ itself is never stored. cols one of 128, 256, 512; 1 <= c <= k <= 16. `grid`:
// LinearSceReluGradGrid's, which sizes the workspace; the sums are deterministic for it.
struct LinearSceReluGradArgs {
  const float* y = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  const void* labels = nullptr;
  bool labels64 = true;
  const void* dloss = nullptr;
  int dloss_dtype = 1;
  const int64_t* count = nullptr;  // ottr::CountLabels' output
  float* loss = nullptr;
  float* dx = nullptr;
  float* db = nullptr;
  float* dw = nullptr;
  float* dbz = nullptr;
  int64_t n = 0;
  int64_t cols = 0;
  int k = 0;
  int c = 0;
  int weight_rows = 0;
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
};
bool LinearSceReluGradFits(int64_t cols, int64_t k);
int LinearSceReluGradGrid(int64_t n, int64_t cols);  // 0: cannot run on this device
int64_t LinearSceReluGradWorkspaceBytes(int grid, int64_t cols, int64_t weight_rows);
int64_t LinearSceReluGradCounterBytes();
cudaError_t LaunchLinearSceReluGrad(const LinearSceReluGradArgs& a, int grid, void* workspace, void* counters,
                                    cudaStream_t stream);

// ottr::SoftmaxCrossEntropyGrad(dloss [], log_prob [N, C], labels [N]) -> dlogits [N, C]
//   dlogits[i, j] = dloss / count · (exp(log_prob[i, j]) − (1 − ε) [j == y_i] − ε / C),
//   0 for ignored rows; count = number of rows not ignored; computed in double.
// dloss (type `dloss_dtype`) is read from device memory. Small N·C: one kernel; otherwise a
// one-block kernel first writes dloss / count into `workspace`.
int64_t SceBackwardWorkspaceBytes(int64_t n, int64_t c);
cudaError_t LaunchSceBackward(int dtype, int dloss_dtype, const void* dloss, const void* log_prob,
                              const void* labels, bool labels64, void* dlogits, int64_t n,
                              int64_t c, int64_t ignore_index, float label_smoothing,
                              void* workspace, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// ONNX NegativeLogLikelihoodLoss on log-probabilities [N, C, D] (D = d1·…·dk, 1 for 2-D) with
// labels [N, D] and optional weights [C] (`weights` null = all 1):
//   w_j = 0 if has_ignore and t_j == ignore_index, else weights[t_j];
//   loss_j = −logp[n, t_j, d] · w_j;  none: loss [N, D]; sum: Σ_j loss_j; mean: Σ loss_j / Σ w_j.
// SoftmaxCrossEntropyLoss is LaunchSoftmax(kLogSoftmax, N, C, D) followed by this.
// Sums are in double, deterministic (one block for small N·D, else partials + one block).
enum class LossReduction : int { kNone = 0, kSum = 1, kMean = 2 };

int64_t NllLossWorkspaceBytes(int64_t n, int64_t c, int64_t d);
cudaError_t LaunchNllLoss(int dtype, const void* logp, const void* labels, bool labels64,
                          const void* weights, int weights_dtype, void* loss, int64_t n,
                          int64_t c, int64_t d, LossReduction reduction, bool has_ignore,
                          int64_t ignore_index, void* workspace, cudaStream_t stream);

// ottr::SoftmaxCrossEntropyLossGrad (softmax = true, `logp` = log_prob) and
// ottr::NegativeLogLikelihoodLossGrad (softmax = false, `logp` = the NLL input):
//   c_j = w_j · dloss_j (none), w_j · dloss (sum), w_j · dloss / W (mean), W = Σ_j w_j;
//   SCE: dx[n, c, d] = c_j · (exp(logp[n, c, d]) − [c == t_j]);  NLL: dx = −c_j · [c == t_j];
//   dweights[k] = Σ_{j: t_j = k, not ignored} g_j · (−lp_j), g_j = dloss_j (none) / dloss (sum);
//   mean: dloss / W · Σ_{j: t_j = k} (−lp_j − L / W), L = Σ_j w_j (−lp_j).
// `dx` and `dweights` (type `weights_dtype`) may each be null. dloss: [N, D] for none, else a
// scalar, of type `dloss_dtype`. dweights costs O(C · N · D) label reads (one block per class
// scans every position: deterministic without atomics; weights are rarely trained).
int64_t ClassLossGradWorkspaceBytes(int64_t n, int64_t c, int64_t d);
cudaError_t LaunchClassLossGrad(bool softmax, int dtype, int dloss_dtype, const void* dloss,
                                const void* logp, const void* labels, bool labels64,
                                const void* weights, int weights_dtype, void* dx, void* dweights,
                                int64_t n, int64_t c, int64_t d, LossReduction reduction,
                                bool has_ignore, int64_t ignore_index, void* workspace,
                                cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_LOSS_KERNELS_H_
