// ottr's own TF32 GEMM for small products (plain C++ interface, no abseil: included by
// small_gemm.cu and runtime/cuda/lt_gemm.cc).
//
// Why: a float32 GEMM of the small MLP at batch 128 (128 x 512 x 784, 51 M multiply-adds) takes
// cuBLASLt 7.2-7.7 µs inside a CUDA graph at best (a split-K kernel and its reduce kernel, or an
// FFMA kernel, a memset and an epilogue kernel for DRELU_BGRAD; bench/RESULTS.md 2026-12-02), and
// eight of them in a row bound the training step. This kernel does the product and its epilogue in
// one launch: every CTA owns a BM x BN tile of D, its 8 warps split K between them (chunks of 16,
// the next chunk's loads in flight while the current one is multiplied with TF32 m16n16k8
// tensor-core MMAs through nvcuda::wmma; operands rounded to TF32 as they are staged in shared
// memory), and the 8 partial tiles are added in shared memory in warp order before the epilogue.
// No workspace, no second kernel. LtGemm (lt_gemm.h) times the tiles that fit beside cuBLASLt's
// candidates and keeps whichever is fastest for the shape.
//
// Layouts and epilogues are ottr::FusedGemm's (ir/fused_gemm.h): row-major D[M, N] = alpha ·
// op(A)[M, K] · op(B)[K, N], any leading dimensions, any 4-byte-aligned pointers; the epilogues
//   kNone          D = P
//   kBias          D = P + bias[N]
//   kReluBias      D = relu(P + bias)
//   kReluAuxBias   D = relu(P + bias), mask bit j of row i = (P + bias)[i, j] > 0 (row i owns
//                  mask_row_bytes bytes; bit j is byte j / 8, bit j % 8; mask 4-byte aligned)
//   kDRelu         D = P ⊙ [mask bit]
//   kDReluBgrad    D = P ⊙ [mask bit], bias_grad[j] = Σ_i D[i, j] (a tile with BM >= M sums
//                  whole columns itself; smaller tiles write one row of column sums per row tile
//                  to the workspace, and the last tile of each column strip to finish, counted on
//                  a counter of its own, adds them in tile order: one launch, the same bits
//                  whichever tile is last; without counters a second kernel adds them)
//   kBgradA        D = P, bias_grad[i] = Σ_k op(A)[i, k] in float32 (the weight gradient's
//                  bias gradient, ir::FusedEpilogue::kBgradA; cuBLASLt's BGRADB on the transposed
//                  product): the CTAs of the first column strip sum their rows of op(A), K split
//                  over kThreads / BM lanes each added in a fixed tree; K <= 256 · kThreads / BM
// relu is Relu's Select(x < 0, 0, x): -0 and NaN pass through, as on the CPU.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_SMALL_GEMM_H_
#define OTTR_RUNTIME_CUDA_KERNELS_SMALL_GEMM_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

enum class SmallGemmEpilogue : int { kNone, kBias, kReluBias, kReluAuxBias, kDRelu, kDReluBgrad, kBgradA };

struct SmallGemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dimensions, in elements
  float alpha = 1.0f;
  SmallGemmEpilogue epilogue = SmallGemmEpilogue::kNone;
  int64_t mask_row_bytes = 0;  // kReluAuxBias, kDRelu, kDReluBgrad
  const float* a = nullptr;
  const float* b = nullptr;
  float* d = nullptr;
  const float* bias = nullptr;       // the bias epilogues
  uint8_t* mask_out = nullptr;       // kReluAuxBias
  const uint8_t* mask_in = nullptr;  // kDRelu, kDReluBgrad
  float* bias_grad = nullptr;        // kDReluBgrad ([N]), kBgradA ([M])
  // kDReluBgrad with BM < M: one row of column sums per row tile (SmallGemmWorkspaceBytes), added
  // into bias_grad by the last tile of each column strip (with tile_counters) or a second kernel.
  float* bias_grad_partial = nullptr;
  // SmallGemmCounterBytes of zeros (one per column strip), left zero by the launch; or null.
  unsigned* tile_counters = nullptr;
  // No earlier launch of the step writes A / B (LaunchArgs::ready_inputs): a programmatic launch
  // copies their first chunks before it waits for the kernel before it (kernels/pdl.cuh).
  bool a_ready = false, b_ready = false;
};

// The configurations (CTA tile BM x BN, chunk depth BK of K) the kernel is built for; LtGemm
// times those that fit.
int SmallGemmConfigCount();
void SmallGemmConfigShape(int config, int* bm, int* bn, int* bk);
// Whether `config` can run `args`: kDReluBgrad with BM < M needs bias_grad_partial; the grid's
// rows are within limits.
bool SmallGemmConfigFits(int config, const SmallGemmArgs& args);
// Raises the configuration's dynamic shared memory limit (call once before capturing a launch).
// Workspace `config` needs for `args` (the partial bias gradients), bytes.
int64_t SmallGemmWorkspaceBytes(int config, const SmallGemmArgs& args);
// Counters `config` uses for `args` when it is given them (SmallGemmArgs::tile_counters), bytes.
int64_t SmallGemmCounterBytes(int config, const SmallGemmArgs& args);
cudaError_t PrepareSmallGemm(int config, bool trans_a, bool trans_b);
// `programmatic`: launched with programmatic stream serialization (kernels/pdl.cuh), so it may
// start while the kernel before it on `stream` ends.
cudaError_t LaunchSmallGemm(int config, const SmallGemmArgs& args, cudaStream_t stream, bool programmatic = false);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_SMALL_GEMM_H_
