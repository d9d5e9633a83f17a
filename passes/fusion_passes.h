// The GEMM fusion passes of the training step (ir/fused_gemm.h has the node they make). They run
// after autodiff and the optimizer, in this order, when TrainingSpec::fuse_epilogues is set:
//
//   fuse-gemm-epilogue    forward: Gemm/MatMul + bias Add [+ Relu | tanh Gelu] -> one FusedGemm
//                         (bias, relu_bias, gelu_bias, gelu_aux_bias)
//   fuse-gemm-dact-bgrad  backward through the activation: dX = Gemm(dY, W) read only by
//                         ReluGrad/GeluGrad of a fused forward, plus that layer's bias gradient
//                         ReduceSum -> one FusedGemm drelu_bgrad / dgelu_bgrad (or drelu / dgelu
//                         without a bias gradient); the forward becomes relu_aux_bias to write
//                         the mask. Removes the activation backward and the ReduceSum.
//   fuse-gemm-bgrad       a bias gradient ReduceSum left over (e.g. of the last layer) goes into
//                         the weight-gradient GEMM that reads the same dY: bgrada / bgradb.
//                         Removes the ReduceSum.
//
// dact-bgrad runs before bgrad because it removes two kernels per layer where bgrad removes one.
// Each pass writes a remark per candidate (Pass::remarks): what it fused, or why it declined.
#ifndef OTTR_PASSES_FUSION_PASSES_H_
#define OTTR_PASSES_FUSION_PASSES_H_

#include <memory>

#include "passes/pass.h"

namespace ottr::passes {

std::unique_ptr<Pass> CreateFuseGemmEpiloguePass();
std::unique_ptr<Pass> CreateFuseGemmDActBgradPass();
std::unique_ptr<Pass> CreateFuseGemmBgradPass();

}  // namespace ottr::passes

#endif  // OTTR_PASSES_FUSION_PASSES_H_
