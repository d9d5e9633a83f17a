// What ottr::MlpStep's CUDA kernel (runtime/cuda/kernels/mlp_step.cu) takes, shared by the IR,
// fuse-mlp-step (passes/fuse_mlp_step.cc) and the kernel; no dependencies, so .cu files include it.
#ifndef OTTR_IR_MLP_STEP_LAYOUT_H_
#define OTTR_IR_MLP_STEP_LAYOUT_H_

#include <cstdint>

namespace ottr::ir {

// Linear layers (a hidden layer at least: the head's backward writes the data gradient of the
// layer below it), classes (the head's 32 x 16 logits tile: two MMA n-tiles).
inline constexpr int kMlpStepMaxLayers = 8;
inline constexpr int64_t kMlpStepMaxClasses = 16;

// The most rows fuse-mlp-step fuses. The kernel's work is a few waves of 32 x 16 output tiles of
// one cooperative grid, one block per SM, with a grid-wide wait between the phases (each
// forward layer, the head, each backward layer, the weight gradients with Adam); it replaces the
// step's dozen-odd launches, each mostly latency at small batches, and loses to cuBLASLt's GEMMs
// once the layers are wide enough to fill the GPU (bench/RESULTS.md 2026-12-06 (3)).
inline constexpr int64_t kMlpStepMaxRows = 512;

constexpr bool MlpStepFits(int64_t layers, int64_t rows, int64_t classes) {
  return layers >= 2 && layers <= kMlpStepMaxLayers && rows >= 1 && rows <= kMlpStepMaxRows && classes >= 1 &&
         classes <= kMlpStepMaxClasses;
}

}  // namespace ottr::ir

#endif  // OTTR_IR_MLP_STEP_LAYOUT_H_
