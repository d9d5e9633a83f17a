// Row-major GEMMs on cuBLASLt: D[M,N] = alpha · op(A)[M,K] · op(B)[K,N] (+ beta · C) with an
// optional epilogue. cuBLASLt is column-major, so the row-major product is computed as its
// transpose Dᵀ = op(B)ᵀ · op(A)ᵀ, which reads the same buffers with no copy: a bias of length N
// becomes cuBLASLt's per-row bias.
//
// D (and C, and the bias / bias gradient / GELU aux) may have another float type than A and B:
// out_dtype f32 with bf16 or f16 A and B (cublasLtMatmul's CUBLAS_COMPUTE_32F type combinations;
// the bias vector takes D's type, cublasLt.h CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
//
// The algorithm is chosen once per shape key (library version, device, m/n/k, transposes, leading
// dimensions, batch and strides, dtypes, compute type, epilogue, pointer alignment) from
// cuBLASLt's heuristic and cached in CudaLibraries (and in the --algo-cache file).
#ifndef OTTR_RUNTIME_CUDA_LT_GEMM_H_
#define OTTR_RUNTIME_CUDA_LT_GEMM_H_

#include <cublasLt.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "runtime/cuda/cuda_libraries.h"

namespace ottr::cuda {

enum class GemmEpilogue {
  kDefault,
  kBias,          // + bias[N]
  kReluBias,      // relu(· + bias)
  kReluAuxBias,   // relu(· + bias), ReLU mask (bits) to aux
  kGeluBias,      // gelu(· + bias)
  kGeluAuxBias,   // gelu(· + bias), pre-activation to aux
  kDRelu,         // · ⊙ relu'(aux)
  kDReluBgrad,    // · ⊙ relu'(aux), bias gradient Σ_rows
  kDGelu,         // · ⊙ gelu'(aux)
  kDGeluBgrad,
  kBgradA,        // bias gradient from A (Σ over K of op(A)... see cuBLASLt docs)
  kBgradB,        // bias gradient from B
};

struct GemmConfig {
  ir::DType dtype = ir::DType::kFloat32;  // A, B (and C, D unless out_dtype is set)
  std::optional<ir::DType> out_dtype;     // C, D, bias, aux; unset: dtype
  ir::DType OutType() const { return out_dtype.value_or(dtype); }
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dims (0 = packed)
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch matrices
  float alpha = 1.0f;
  float beta = 0.0f;  // != 0: D = ... + beta·C where C is D's own buffer (in place)
  GemmEpilogue epilogue = GemmEpilogue::kDefault;
  int64_t aux_ld = 0;  // leading dimension of the aux buffer (epilogues with aux)
};

class LtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(CudaLibraries& libs, const GemmConfig& c);
  // Workspace the chosen algorithm needs (bytes).
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Enqueues the product. `d` is also C when beta != 0. `bias` / `aux` as the epilogue needs.
  absl::Status Run(const void* a, const void* b, void* d, const void* bias, void* aux,
                   void* workspace, cudaStream_t stream) const;
  const GemmConfig& config() const { return config_; }

 private:
  LtGemm() = default;
  // Candidates the heuristic proposes on a cache miss; the fastest, timed, is kept and cached.
  // OTTR_GEMM_CANDIDATES=N (1..kMaxAutotuneCandidates) overrides the count.
  static constexpr int kAutotuneCandidates = 8;
  static constexpr int kMaxAutotuneCandidates = 64;
  absl::Status Autotune(const cublasLtMatmulHeuristicResult_t* results, int found);
  int chosen_ = 0;
  GemmConfig config_;
  LtMatmulDesc desc_;
  LtLayout a_layout_, b_layout_, d_layout_;
  cublasLtMatmulAlgo_t algo_{};
  int64_t workspace_bytes_ = 0;
  CudaLibraries* libs_ = nullptr;
};

// The largest workspace any GEMM may ask for (cuBLAS recommends 32 MiB on Hopper).
inline constexpr int64_t kMaxGemmWorkspace = 32ll << 20;

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_LT_GEMM_H_
