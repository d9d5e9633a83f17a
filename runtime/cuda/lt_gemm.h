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
// cuBLASLt's heuristic and cached in CudaLibraries (and in the --algo-cache file). Small float32
// products under TF32 also time ottr's own TF32 kernel (kernels/small_gemm.h: one launch with its
// epilogue, where cuBLASLt runs a split-K kernel and a reduce) and keep it where it is faster.
#ifndef OTTR_RUNTIME_CUDA_LT_GEMM_H_
#define OTTR_RUNTIME_CUDA_LT_GEMM_H_

#include <cublasLt.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

// Times launches as the executor replays them, for the GEMM autotuners (LtGemm::Autotune, the
// GroupedGemm compile in gemm_ops.cc): scratch buffers filled with 0x3c bytes (1.15e-2 as float32:
// not zeros), a private non-blocking stream and two events. Time() captures kRuns calls of `run`
// into a CUDA graph on that stream, replays it once to warm up and once timed: a small GEMM's
// host-side cost would otherwise dominate, and a candidate's extra kernels (split-K's reduction)
// cost what they cost inside a graph. Compile time only, outside any capture.
class GraphTimer {
 public:
  static constexpr int kRuns = 8;
  GraphTimer();
  ~GraphTimer();  // frees the buffers, the stream and the events; clears a sticky launch error
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;

  bool ok() const { return stream_ != nullptr && start_ != nullptr && stop_ != nullptr; }
  cudaStream_t stream() const { return stream_; }
  // A scratch buffer of max(bytes, 256) bytes, freed with the timer; nullptr when cudaMalloc fails.
  void* Alloc(int64_t bytes);
  // Milliseconds of kRuns calls of run() (true: launched), or -1 when a call, the capture or the
  // replay fails (the error is cleared). `nodes`, when given: the graph nodes one call adds (a
  // kernel, plus any memset or second kernel the library issues for it).
  float Time(const std::function<bool()>& run, size_t* nodes = nullptr);

 private:
  std::vector<void*> buffers_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
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
  // Which kernel runs. kAuto: the fastest of cuBLASLt's candidates and, where it is eligible
  // (OttrGemmEligible), ottr's small TF32 kernel, cached by shape. kCublasLt / kOttr force one and
  // bypass the cache (tests, comparisons); `ottr_config` >= 0 also forces the kernel's configuration
  // (kernels/small_gemm.h: tile and split of K).
  enum class Kernel { kAuto, kCublasLt, kOttr };
  Kernel kernel = Kernel::kAuto;
  int ottr_config = -1;
  // > 1: cuBLASLt runs k in this many equal parts and ottr adds them (tests; kAuto times such
  // parts itself for the GEMMs LtGemm::SlicesEligible takes). Float32, no epilogue, beta 0, one
  // matrix, k / slices a multiple of 4.
  int slices = 0;
};

// Whether ottr's small TF32 kernel can run `c` under the TF32 policy `tf32`: float32 in and out,
// one matrix, beta 0, an epilogue it has (none, bias, relu_bias, relu_aux_bias, drelu,
// drelu_bgrad, and kBgradB: the bias gradient of a weight gradient dYᵀ·X, Σ over K of our A),
// at most kOttrGemmMaxMacs multiply-adds. OTTR_SMALL_GEMM=0 turns it off.
bool OttrGemmEligible(const GemmConfig& c, bool tf32);
inline constexpr int64_t kOttrGemmMaxMacs = int64_t{1} << 27;

// How a product's kernels are launched (LaunchArgs::programmatic and ::ready_inputs).
struct GemmLaunch {
  bool programmatic = false;
  bool a_ready = false, b_ready = false;  // no earlier launch of the step writes A / B
};

class LtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(CudaLibraries& libs, const GemmConfig& c);
  // Workspace the chosen algorithm needs (bytes).
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Counters the chosen kernel uses when Run gets them (CompiledOp::counter_bytes: zero before the
  // first run, left zero by every run), bytes; 0 for cuBLASLt.
  int64_t counter_bytes() const { return counter_bytes_; }
  // Enqueues the product. `d` is also C when beta != 0. `bias` / `aux` as the epilogue needs.
  // `counters`: counter_bytes() of them, or null (ottr's DRELU_BGRAD then adds its partial bias
  // gradients in a second kernel). `launch`: ottr's kernels of the product may start while the
  // kernel before them on `stream` ends (cuBLASLt's never do) and prefetch the ready operands.
  absl::Status Run(const void* a, const void* b, void* d, const void* bias, void* aux, void* workspace,
                   cudaStream_t stream, void* counters = nullptr, const GemmLaunch& launch = {}) const;
  const GemmConfig& config() const { return config_; }
  // The configuration of ottr's small TF32 kernel when it runs this GEMM, else -1 (cuBLASLt).
  int ottr_config() const { return ottr_config_; }

 private:
  LtGemm() = default;
  // Candidates the heuristic proposes on a cache miss; the fastest, timed, is kept and cached.
  // OTTR_GEMM_CANDIDATES=N (1..kMaxAutotuneCandidates) overrides the count.
  static constexpr int kAutotuneCandidates = 8;
  static constexpr int kMaxAutotuneCandidates = 64;
  // Times the `found` candidates (and, when `ottr` is set, every configuration of ottr's kernel that fits)
  // and keeps the fastest.
  absl::Status Autotune(const cublasLtMatmulHeuristicResult_t* results, int found, bool ottr);
  // Whether k-sliced candidates are timed for this GEMM (see MakeSliceLayouts).
  bool SlicesEligible() const;
  // The layouts of `slices` equal parts of k as one strided-batched product into packed partials
  // [slices, m, n] (cuBLASLt's TF32 kernels that read an MN-major operand do not split k
  // themselves: a weight gradient of few output tiles and a long k ran on 60 CTAs of 132 SMs).
  absl::Status MakeSliceLayouts(int slices, LtLayout* a, LtLayout* b, LtLayout* d) const;
  // Bytes of the partials of `slices` parts (256-byte aligned): the front of the workspace.
  int64_t SlicePartialBytes(int slices) const;
  int chosen_ = 0;
  int ottr_config_ = -1;
  // > 1: the product runs as slices_ parts of k into the workspace, then kernels::SumKSlices.
  int slices_ = 1;
  LtLayout slice_a_layout_, slice_b_layout_, slice_d_layout_;
  GemmConfig config_;
  LtMatmulDesc desc_;
  LtLayout a_layout_, b_layout_, d_layout_;
  cublasLtMatmulAlgo_t algo_{};
  int64_t workspace_bytes_ = 0;
  int64_t counter_bytes_ = 0;
  CudaLibraries* libs_ = nullptr;
};

// The largest workspace any GEMM may ask for (cuBLAS recommends 32 MiB on Hopper).
inline constexpr int64_t kMaxGemmWorkspace = 32ll << 20;

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_LT_GEMM_H_
