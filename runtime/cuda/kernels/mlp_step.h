// ottr::MlpStep's kernel (mlp_step.cu): the whole training step of a small ReLU MLP -- forward,
// softmax cross-entropy, backward and Adam -- in one cooperative launch. Plain C++ interface (no
// abseil), included by the .cu file and by runtime/cuda/optimizer_ops.cc.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_MLP_STEP_H_
#define OTTR_RUNTIME_CUDA_KERNELS_MLP_STEP_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "ir/mlp_step_layout.h"
#include "runtime/cuda/kernels/optimizer_kernels.h"

namespace ottr::cuda::kernels {

// One linear layer: W [out, in] (read as Y·Wᵀ), b [out], their Adam moments, and where the
// updated values go (each may be its input: every element is read before it is written).
struct MlpStepLayer {
  int64_t in = 0, out = 0;
  const float* w = nullptr;
  const float* b = nullptr;
  const float* mw = nullptr;
  const float* mb = nullptr;
  const float* vw = nullptr;
  const float* vb = nullptr;
  float* w_out = nullptr;
  float* b_out = nullptr;
  float* mw_out = nullptr;
  float* mb_out = nullptr;
  float* vw_out = nullptr;
  float* vb_out = nullptr;
};

struct MlpStepArgs {
  int layers = 0;     // ReLU after every layer but the last, whose outputs are the logits
  int64_t batch = 0;  // rows of x and labels
  const float* x = nullptr;
  const void* labels = nullptr;
  bool labels64 = true;
  int64_t ignore_index = -100;
  float* loss = nullptr;  // the mean over the rows whose label is not ignore_index
  MlpStepLayer layer[ir::kMlpStepMaxLayers];
};

// Bytes of workspace (the activations, the data gradients, the loss partials) and of counters (the
// grid's barrier: zero before the first launch, left zero by each) a launch needs.
int64_t MlpStepWorkspaceBytes(const MlpStepArgs& a);
int64_t MlpStepCounterBytes();

// Adam as ottr::AdamUpdateN with `h` and the step's lr / step scalars `s` (no guard, no unscale).
cudaError_t LaunchMlpStep(const MlpStepArgs& a, const AdamHyper& h, const OptimizerScalars& s, void* workspace,
                          void* counters, cudaStream_t stream);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_MLP_STEP_H_
