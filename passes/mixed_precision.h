// "mixed-precision": runs GEMMs and convolutions in a 16-bit float type (bfloat16 or float16)
// with float32 master weights, as PyTorch autocast does.
//
//   before:  %h : f32[64,512] = Gemm(%x, %fc1.weight, %fc1.bias) {transB = 1} origin "fc1"
//            %a : f32[64,512] = Relu(%h)
//   after:   %x.bf16 : bf16[64,784] = Cast(%x) {to = 16} origin "fc1"
//            %fc1.weight.bf16 : bf16[512,784] = Cast(%fc1.weight) {to = 16} origin "fc1"
//            %fc1.bias.bf16 : bf16[512] = Cast(%fc1.bias) {to = 16} origin "fc1"
//            %h.bf16 : bf16[64,512] = Gemm(%x.bf16, %fc1.weight.bf16, %fc1.bias.bf16) {transB = 1} origin "fc1"
//            %h : f32[64,512] = Cast(%h.bf16) {to = 1} origin "fc1"
//            %a : f32[64,512] = Relu(%h)
//
// Policy table (the op decides; everything not listed keeps its type):
//   low type, float32 accumulation   MatMul, Gemm (A, B and the bias C: Gemm has one element
//                                    type), Conv, ConvTranspose (X, W and the bias B)
//   float32                          everything else: softmax, losses, normalisations,
//                                    reductions, elementwise ops, the optimizer
// Every float32 input of a listed node is cast to the low type (one Cast per source value, shared
// by its readers) and its output is cast back to float32 right after, so the value keeps its name
// and float32 type for every reader. Parameters stay float32 initializers: they are the master
// weights the optimizer updates; the low-precision copy is the forward's Cast, recomputed each
// step. Autodiff (which runs after this pass) differentiates through the casts: the gradient of
// Cast is a Cast back (ir/grads/elementwise_grads.cc), so the backward GEMMs/convolutions run in
// the low type too and parameter gradients arrive in float32.
//
// The accumulation in float32 is the kernels' contract: cuBLASLt uses CUBLAS_COMPUTE_32F for
// 16-bit inputs (runtime/cuda/lt_gemm.cc), cuDNN a float compute type, and the CPU reference
// widens to float and rounds the result once (runtime/cpu/gemm.h, conv_pool_kernels.cc).
//
// Declines (a remark each): a node whose origin or output name matches `keep_fp32` (a regex;
// ""= none); a node whose output or inputs are not float32 (integer MatMul, float64, and graphs
// already in a 16-bit type: running the pass twice changes nothing).
//
// Not done here: float16 loss scaling (a float16 step without it can underflow small gradients
// to zero; bfloat16 has float32's exponent range and needs none).
#ifndef OTTR_PASSES_MIXED_PRECISION_H_
#define OTTR_PASSES_MIXED_PRECISION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "passes/pass.h"

namespace ottr::passes {

// `low` is DType::kBFloat16 or DType::kFloat16. A malformed `keep_fp32` regex is InvalidArgument
// when the pass runs.
std::unique_ptr<Pass> CreateMixedPrecisionPass(ir::DType low, std::string keep_fp32 = "");

// "optimizer-low-copies" (passes/optimizer_low_copies.cc): the grouped optimizer update writes
// each parameter's 16-bit copy, kept as state, in place of the forward's Cast of the parameter.
std::unique_ptr<Pass> CreateOptimizerLowCopiesPass();

// A parameter's 16-bit copy kept as state by optimizer-low-copies: state `copy` = Cast(`param`).
struct LowPrecisionCopy {
  std::string param, copy;
  ir::DType dtype = ir::DType::kUndefined;
};
std::vector<LowPrecisionCopy> LowPrecisionCopies(const ir::Graph& step);

// Sets every copy of `step` from its parameter's current value (`get` reads a state, `set` writes
// one): after parameters were set from outside the step (resume, an initialization graph).
absl::Status RefreshLowPrecisionCopies(const ir::Graph& step,
                                       const std::function<absl::StatusOr<ir::Tensor>(const std::string&)>& get,
                                       const std::function<absl::Status(const std::string&, const ir::Tensor&)>& set);

}  // namespace ottr::passes

#endif  // OTTR_PASSES_MIXED_PRECISION_H_
