// ottr::FusedGemm: one GEMM with a cuBLASLt-style epilogue, made by the fusion passes
// (passes/fuse_gemm_epilogue.cc, passes/fuse_gemm_backward.cc) and run by the CPU reference
// (runtime/cpu/fused_gemm_kernels.cc) and by one cublasLtMatmul on CUDA (runtime/cuda/gemm_ops.cc).
//
//   ottr::FusedGemm(A, B, [bias], [aux]) -> (Y, [out1]) {transA = 0, transB = 0, alpha = 1.0,
//                                                       epilogue = "bias", output_type = A's}
// All matrices are row-major, op(A) is [M, K], op(B) is [K, N], P = alpha · op(A) · op(B) [M, N]:
//
//   epilogue        inputs            Y                       out1
//   none            A, B              P                       -
//   bias            A, B, bias[N]     P + bias                -
//   relu_bias       A, B, bias[N]     relu(P + bias)          -
//   relu_aux_bias   A, B, bias[N]     relu(P + bias)          mask u8[M, MaskRowBytes(N)]
//   gelu_bias       A, B, bias[N]     gelu(P + bias)          -
//   gelu_aux_bias   A, B, bias[N]     gelu(P + bias)          pre-activation P + bias [M, N]
//   drelu           A, B, _, mask     P ⊙ [mask]              -
//   drelu_bgrad     A, B, _, mask     P ⊙ [mask]              Σ_i Y[i, :]          [N]
//   dgelu           A, B, _, pre      P ⊙ gelu'(pre)          -
//   dgelu_bgrad     A, B, _, pre      P ⊙ gelu'(pre)          Σ_i Y[i, :]          [N]
//   bgrada          A, B              P                       Σ_k op(A)[:, k]      [M]
//   bgradb          A, B              P                       Σ_k op(B)[k, :]      [N]
//
// Element types. A and B share one float type. Y has the type `output_type` (an ONNX
// TensorProto.DataType code; default A's type), which is A's type or, when A is f16 or bf16, f32:
// the product of 16-bit operands accumulated in float32 and rounded once to float32, where the
// default rounds it once to the 16-bit type (passes/fold_gemm_casts.cc makes these). The bias, the
// GELU pre-activation (aux in and out) and the bias gradients have Y's type: cuBLASLt's bias and
// bias-gradient vectors and its GELU aux take the output matrix's type (cublasLt.h, cuBLAS 13:
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE defaults), and
// bf16/f16 A, B with f32 C, D under CUBLAS_COMPUTE_32F is one of cublasLtMatmul's listed type
// combinations. bgrada / bgradb sum the 16-bit operand and round the sum once to Y's type.
//
// gelu is the tanh approximation (ONNX Gelu with approximate = "tanh"), the one cuBLASLt's GELU
// epilogues compute. bias is [N] or [1, N]. The bias gradients of bgrada/bgradb are not scaled by
// alpha (the passes only make them with alpha = 1).
//
// The ReLU mask is a bit matrix: row i of Y owns MaskRowBytes(N) bytes, bit j (byte j / 8, bit
// j % 8, least significant first) is 1 when the pre-activation Y[i, j] > 0 (ReluGrad's [Y > 0]).
// In cuBLASLt's column-major view the row-major Y[M, N] is an N x M matrix and the mask its
// bit-mask aux with leading dimension RoundUp(N, 128) bits: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
// "must be divisible by 128" for the ReLU bit-mask epilogues (cublasLt.h, cuBLAS 13). Padding bits
// are unspecified. The GELU pre-activation's leading dimension N must be divisible by 8 (same
// header), so the passes only make gelu_aux_bias / dgelu* for N % 8 == 0.
//
// The row-major product is cuBLASLt's transpose, so ottr's A is cuBLASLt's B: bgrada is
// CUBLASLT_EPILOGUE_BGRADB and bgradb is CUBLASLT_EPILOGUE_BGRADA.
#ifndef OTTR_IR_FUSED_GEMM_H_
#define OTTR_IR_FUSED_GEMM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "ir/linear_sce_layout.h"  // ReluMaskRowBytes

namespace ottr::ir {

inline constexpr char kFusedGemmOp[] = "FusedGemm";
// The widest dZ (classes) ottr::LinearReluGrad takes (ir/ops/fused_ops.cc): its CUDA kernel keeps K
// rows of W and K weight-gradient sums per column in registers.
inline constexpr int64_t kLinearReluGradMaxK = 16;
// ottr::GroupedGemm (ir/ops/fused_ops.cc, passes/group_gemms.cc): independent plain products run
// as one grouped launch; at most this many in one node.
inline constexpr char kGroupedGemmOp[] = "GroupedGemm";
inline constexpr int kGroupedGemmMaxProducts = 8;

enum class FusedEpilogue {
  kNone,
  kBias,
  kReluBias,
  kReluAuxBias,
  kGeluBias,
  kGeluAuxBias,
  kDRelu,
  kDReluBgrad,
  kDGelu,
  kDGeluBgrad,
  kBgradA,
  kBgradB,
};

std::optional<FusedEpilogue> ParseFusedEpilogue(absl::string_view name);
const char* FusedEpilogueName(FusedEpilogue e);

// Input 2 is the bias (forward epilogues).
inline bool EpilogueTakesBias(FusedEpilogue e) {
  return e == FusedEpilogue::kBias || e == FusedEpilogue::kReluBias || e == FusedEpilogue::kReluAuxBias ||
         e == FusedEpilogue::kGeluBias || e == FusedEpilogue::kGeluAuxBias;
}
// Input 3 is the forward's aux (ReLU mask or GELU pre-activation).
inline bool EpilogueTakesAux(FusedEpilogue e) {
  return e == FusedEpilogue::kDRelu || e == FusedEpilogue::kDReluBgrad || e == FusedEpilogue::kDGelu ||
         e == FusedEpilogue::kDGeluBgrad;
}
// Output 1 is an aux (mask or pre-activation) for the backward.
inline bool EpilogueWritesAux(FusedEpilogue e) {
  return e == FusedEpilogue::kReluAuxBias || e == FusedEpilogue::kGeluAuxBias;
}
// Output 1 is a bias gradient.
inline bool EpilogueWritesBiasGrad(FusedEpilogue e) {
  return e == FusedEpilogue::kDReluBgrad || e == FusedEpilogue::kDGeluBgrad || e == FusedEpilogue::kBgradA ||
         e == FusedEpilogue::kBgradB;
}
inline bool EpilogueIsRelu(FusedEpilogue e) {
  return e == FusedEpilogue::kReluBias || e == FusedEpilogue::kReluAuxBias || e == FusedEpilogue::kDRelu ||
         e == FusedEpilogue::kDReluBgrad;
}

}  // namespace ottr::ir

#endif  // OTTR_IR_FUSED_GEMM_H_
