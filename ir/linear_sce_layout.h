// Sizes shared by the IR, the fusion passes and the CUDA kernels, with no dependencies so that
// .cu files include it too: the ReLU bit mask's row (ir/fused_gemm.h describes the mask) and the
// shared memory of the ottr::LinearSoftmaxCrossEntropyWithGrad kernel
// (runtime/cuda/kernels/loss_kernels.h), which fuse-linear-sce checks before it makes the node.
#ifndef OTTR_IR_LINEAR_SCE_LAYOUT_H_
#define OTTR_IR_LINEAR_SCE_LAYOUT_H_

#include <cstdint>

namespace ottr::ir {

// Bytes of one row of the ReLU mask of a [M, N] output: RoundUp(N, 128) bits.
constexpr int64_t ReluMaskRowBytes(int64_t n) { return (n + 127) / 128 * 16; }

// The fused classifier + loss + data-gradient kernel: at most this many classes (a class per
// lane of a warp), kLinearSceWarps warps per block, and a block's shared memory within
// kLinearSceMaxSmemBytes.
inline constexpr int kLinearSceMaxClasses = 32;
inline constexpr int kLinearSceWarps = 4;
inline constexpr int64_t kLinearSceMaxSmemBytes = 200 * 1024;

// The SoftmaxCrossEntropy kernels (runtime/cuda/kernels/loss_kernels.cu) run rows of `ld`
// elements as one block of kSceBlockThreads threads, which counts the labels itself, up to
// SceOneBlockRows rows: a warp per 32 / width rows (width = ld rounded up to a power of two in
// [4, 32] lanes), `passes` passes of the block's warps; rows of more than 1024 elements a block
// each, in one block up to 4 rows. A larger grid's blocks count the labels together and wait for
// each other, unless ottr::CountLabels counted them before (count-labels-early adds it there).
inline constexpr int kSceBlockThreads = 512;
constexpr int64_t SceOneBlockRows(int64_t ld, int64_t passes = 4) {
  if (ld > 1024) return 4;
  int64_t width = 4;
  while (width < ld && width < 32) width *= 2;
  return passes * (kSceBlockThreads / 32) * (32 / width);
}

// fuse-linear-sce makes the node for at most this many rows: there each block of the kernel counts
// the labels itself and the three or four nodes it replaces are short dependent launches (batch
// 128: 49.9 against 53.6 µs per step). Above, the cooperative grid with a row per warp (or four)
// is latency bound and slower than the GEMMs and kernels it replaces (H200, the small MLP at
// batch 8192: 54.6 µs for the head kernel, the step 238.7 against 224.1 µs).
inline constexpr int64_t kLinearSceFuseMaxRows = 1024;

// A block's dynamic shared memory: the weight's `classes` rows of K floats, `rows` rows of x per
// warp (the rows a warp works on together), with `col_sums` a row of per-warp column sums of dx,
// and with `mask_ld` > 0 `rows` mask rows per warp.
constexpr int64_t LinearSceSmemBytes(int64_t classes, int64_t k, int64_t mask_ld, bool col_sums, int rows = 1) {
  return (classes + kLinearSceWarps * (rows + (col_sums ? 1 : 0))) * k * 4 + kLinearSceWarps * rows * mask_ld;
}

// Whether the kernel takes `classes` classes of K features, a row per warp (a mask row counted in
// every case); it works on more rows per warp where those fit as well.
constexpr bool LinearSceFits(int64_t classes, int64_t k, bool col_sums) {
  return classes >= 1 && classes <= kLinearSceMaxClasses && k >= 0 &&
         LinearSceSmemBytes(classes, k, ReluMaskRowBytes(k), col_sums) <= kLinearSceMaxSmemBytes;
}

// ottr::LinearSceReluGrad's CUDA kernel (runtime/cuda/kernels/linear_sce_relu_grad.cu): N columns
// of Y in 16 warps of 8·NT columns (NT = 1, 2, 4: a tile of 64 rows of 512 floats fills most of
// an SM's shared memory) and at most 16 classes (two MMA tiles); fuse-linear-sce-relu-grad checks
// it before it makes the node.
constexpr bool LinearSceReluGradFits(int64_t cols, int64_t k) {
  return (cols == 128 || cols == 256 || cols == 512) && k >= 1 && k <= 16;
}

}  // namespace ottr::ir

#endif  // OTTR_IR_LINEAR_SCE_LAYOUT_H_
