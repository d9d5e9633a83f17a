// The GEMM fusion passes of the training step (ir/fused_gemm.h has the node they make). They run
// after autodiff and the optimizer, in this order, when TrainingSpec::fuse_epilogues is set:
//
//   fuse-sce-grad         the loss and its gradient (and the Cast of dlogits) -> one
//                         ottr::SoftmaxCrossEntropyWithGrad (fuse_sce_grad.cc); with the Slice of
//                         a padded classifier GEMM's output and its SliceGrad folded in too
//                         ({classes = K}: the node reads and writes the padded rows)
//   fold-gemm-casts       mixed precision: Cast(to = f32) of a bf16/f16 GEMM's product -> the
//                         GEMM (an ottr::FusedGemm none / bias) writes f32 itself, the bias added
//                         in f32 from the f32 parameter (removes the Casts; fold_gemm_casts.cc)
//   fuse-gemm-epilogue    forward: Gemm/MatMul + bias Add [+ Relu | tanh Gelu] -> one FusedGemm
//                         (bias, relu_bias, gelu_bias, gelu_aux_bias)
//   fuse-gemm-dact-bgrad  backward through the activation: dX = Gemm(dY, W) read only by
//                         ReluGrad/GeluGrad of a fused forward, plus that layer's bias gradient
//                         ReduceSum -> one FusedGemm drelu_bgrad / dgelu_bgrad (or drelu / dgelu
//                         without a bias gradient); the forward becomes relu_aux_bias to write
//                         the mask. Removes the activation backward and the ReduceSum.
//   fuse-relu-grad-bgrad  a ReluGrad left over (the GEMM epilogues declined it) whose output's
//                         bias gradient is a ReduceSum -> one ottr::ReluGradBiasGrad kernel
//                         (fuse_relu_grad_bgrad.cc; TrainingSpec::fuse_relu_grad_bgrad, default
//                         bf16/fp16/TF32)
//   fuse-gemm-bgrad       a bias gradient ReduceSum left over (e.g. of the last layer) goes into
//                         the weight-gradient GEMM that reads the same dY: bgrada / bgradb.
//                         Removes the ReduceSum.
//   fuse-sce-bgrad        a bias gradient ReduceSum of dlogits still left over (a float32 GEMM too
//                         large for TF32 BGRAD) -> a third output of the loss node, summed by the
//                         loss kernel as it writes dlogits (fuse_sce_grad.cc)
//   fuse-linear-sce       a float32 classifier of <= 32 classes, the loss node and the data gradient
//                         GEMM through it (drelu / none) -> one ottr::LinearSoftmaxCrossEntropyWithGrad
//                         (fuse_sce_grad.cc)
//   count-labels-early    a loss node whose kernel runs more than one block reads the labels'
//                         count from an ottr::CountLabels made at the step's start (no grid-wide
//                         barrier in the loss kernel; fuse_sce_grad.cc)
//   fuse-linear-relu-grad what fuse-linear-sce left: a float32 data gradient dZ·W of K <= 16
//                         read only by a ReluGradBiasGrad, and the weight gradient dZᵀ·Y of the
//                         same layer -> one ottr::LinearReluGrad (fuse_linear_relu_grad.cc)
//
// After them (and kmajor-gemm-operands, fuse-conv-activation), with TrainingSpec::group_gemms:
//   group-gemms           plain products (no epilogue) of one float type ready at the same point
//                         of the step -> one ottr::GroupedGemm (group_gemms.cc)
//
// fold-gemm-casts runs first so that the others see the f32 products the Casts hid (the next
// passes take an ottr::FusedGemm none / bias as they take a Gemm / MatMul). dact-bgrad runs before bgrad because it removes two kernels per layer where bgrad removes one.
// Each pass writes a remark per candidate (Pass::remarks): what it fused, or why it declined.
#ifndef OTTR_PASSES_FUSION_PASSES_H_
#define OTTR_PASSES_FUSION_PASSES_H_

#include <memory>

#include "passes/pass.h"

namespace ottr::passes {

std::unique_ptr<Pass> CreateFoldGemmCastsPass();
// `large_relu`: 16-bit GEMMs above the activation-epilogue size bound keep a ReLU as RELU_BIAS;
// `large_relu_f32`: float32 (TF32) ones do.
std::unique_ptr<Pass> CreateFuseGemmEpiloguePass(bool large_relu = false, bool large_relu_f32 = false);
// `bgrad_to_weight_gemm`: a float32 layer whose weight-gradient GEMM can take the bias gradient
// (fuse-gemm-bgrad's rules) leaves it there and gets drelu / dgelu (TF32 steps; see the pass).
std::unique_ptr<Pass> CreateFuseGemmDActBgradPass(bool bgrad_to_weight_gemm = false);
std::unique_ptr<Pass> CreateFuseGemmBgradPass();
std::unique_ptr<Pass> CreateFuseReluGradBgradPass();
// passes/fuse_conv.cc: Conv + Relu -> ottr::Conv {activation = "relu"}; MaxPoolGrad + the
// ReluGrad of its input -> ottr::MaxPoolGrad {relu_mask = 1}. They run after nhwc-layout.
std::unique_ptr<Pass> CreateFuseConvActivationPass();
// passes/narrow_exact_ops.cc: selects and copies (Relu, MaxPool, Transpose, ReluGrad, ...) between
// 16-bit producers run in the 16-bit type instead of a float32 round trip (bf16/fp16 steps).
std::unique_ptr<Pass> CreateNarrowExactOpsPass();
std::unique_ptr<Pass> CreateFuseMaxPoolReluGradPass();
// passes/fuse_sce_grad.cc: ottr::SoftmaxCrossEntropy + its SoftmaxCrossEntropyGrad (+ the Cast of
// dlogits to the GEMM type) -> one ottr::SoftmaxCrossEntropyWithGrad, no log_prob in between.
std::unique_ptr<Pass> CreateFuseSceGradPass();
std::unique_ptr<Pass> CreateFuseSceBgradPass();
// fuse-linear-sce: a float32 classifier FusedGemm of <= 32 classes, its SoftmaxCrossEntropyWithGrad
// and the drelu / none FusedGemm of dlogits and the same weight -> one
// ottr::LinearSoftmaxCrossEntropyWithGrad (fuse_sce_grad.cc).
std::unique_ptr<Pass> CreateFuseLinearScePass();
// count-labels-early: an ottr::SoftmaxCrossEntropyWithGrad whose CUDA kernel runs more than one
// block (ir::SceOneBlockRows) reads the labels' count from an ottr::CountLabels of the step's
// labels (its fourth input), made at the start of the step instead of by a grid-wide barrier in
// the loss kernel (fuse_sce_grad.cc).
std::unique_ptr<Pass> CreateCountLabelsEarlyPass();
// passes/fuse_linear_relu_grad.cc: Gemm(dZ, W) (K <= 16) read only by ReluGradBiasGrad(·, Y), with
// the weight gradient dZᵀ·Y (bgrada or plain) -> one ottr::LinearReluGrad (float32).
std::unique_ptr<Pass> CreateFuseLinearReluGradPass();
// passes/fuse_linear_sce_relu_grad.cc: the classifier's FusedGemm (transB, bias / none), its
// counted ottr::SoftmaxCrossEntropyWithGrad and the ottr::LinearReluGrad of its dlogits -> one
// ottr::LinearSceReluGrad (TF32 steps: the products are TF32).
std::unique_ptr<Pass> CreateFuseLinearSceReluGradPass();
// passes/fuse_mlp_step.cc: the whole training step of a small ReLU MLP (its Gemm + Relu chain,
// softmax cross-entropy, autodiff's gradients of them and their one Adam update) -> one
// ottr::MlpStep (TF32 steps: the products are TF32).
std::unique_ptr<Pass> CreateFuseMlpStepPass();
// passes/kmajor_gemm.cc: a large float32 GEMM whose operands both have k as their slow axis (the
// weight gradients Xᵀ·dY) gets one operand transposed first, so TF32 Tensor Cores read it K-major.
std::unique_ptr<Pass> CreateKMajorGemmOperandsPass();
// passes/group_gemms.cc: independent plain products (no epilogue) ready at the same point of the
// step, of one float type -> one ottr::GroupedGemm (a grouped launch on the GPU).
std::unique_ptr<Pass> CreateGroupGemmsPass();
// passes/pad_gemm_dims.cc: a large bf16/fp16 GEMM whose k or n is not a multiple of 8 (with
// `float32`, also a float32 one whose k or n is not a multiple of 4: TF32 on the GPU) gets its
// operands zero-padded (and its product sliced back) on the forward graph, before autodiff;
// GEMMs of fewer than `min_rows` rows (m) or `min_macs` multiply-adds are declined (the defaults
// are measured on the H200: passes/pad_gemm_dims.cc).
inline constexpr double kPadGemmDefaultMinMacs = 1e7;
inline constexpr int64_t kPadGemmDefaultMinRows = 512;
std::unique_ptr<Pass> CreatePadGemmDimsPass(double min_macs = kPadGemmDefaultMinMacs,
                                            int64_t min_rows = kPadGemmDefaultMinRows, bool float32 = false);

// passes/split_optimizer_updates.cc: an unguarded ottr::AdamUpdateN / SGDUpdateN becomes two, the
// parameters whose gradients are made deepest in the step on their own, so the others' update runs
// beside the last weight gradients instead of after them (same numbers, one more launch); not
// when those parameters hold less than a fifth of the elements.
std::unique_ptr<Pass> CreateSplitOptimizerUpdatesPass();

// passes/fuse_gemm_adam.cc: a small-batch weight gradient (k <= 256) that only an unguarded float32
// Adam update reads, with its bias gradient, and that update become one ottr::GemmAdamUpdate (the
// gradients computed and applied in one kernel, never stored).
std::unique_ptr<Pass> CreateFuseGemmAdamPass();

}  // namespace ottr::passes

#endif  // OTTR_PASSES_FUSION_PASSES_H_
