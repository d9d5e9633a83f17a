#include "runtime/cuda/lt_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/gemm_helpers.h"
#include "runtime/cuda/kernels/small_gemm.h"

namespace ottr::cuda {
namespace {

absl::StatusOr<cudaDataType_t> CudaType(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return CUDA_R_32F;
    case ir::DType::kFloat16: return CUDA_R_16F;
    case ir::DType::kBFloat16: return CUDA_R_16BF;
    case ir::DType::kFloat64: return CUDA_R_64F;
    default: return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM of ", ir::DTypeName(t)));
  }
}

cublasLtEpilogue_t LtEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kDefault: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::kReluAuxBias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case GemmEpilogue::kGeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDRelu: return CUBLASLT_EPILOGUE_DRELU;
    case GemmEpilogue::kDReluBgrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case GemmEpilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kDGeluBgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::kBgradA: return CUBLASLT_EPILOGUE_BGRADA;
    case GemmEpilogue::kBgradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool HasBias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kReluBias || e == GemmEpilogue::kReluAuxBias ||
         e == GemmEpilogue::kGeluBias || e == GemmEpilogue::kGeluAuxBias ||
         e == GemmEpilogue::kDReluBgrad || e == GemmEpilogue::kDGeluBgrad ||
         e == GemmEpilogue::kBgradA || e == GemmEpilogue::kBgradB;
}

bool HasAux(GemmEpilogue e) {
  return e == GemmEpilogue::kReluAuxBias || e == GemmEpilogue::kGeluAuxBias || e == GemmEpilogue::kDRelu ||
         e == GemmEpilogue::kDReluBgrad || e == GemmEpilogue::kDGelu || e == GemmEpilogue::kDGeluBgrad;
}

std::optional<kernels::SmallGemmEpilogue> OttrEpilogue(GemmEpilogue e) {
  using K = kernels::SmallGemmEpilogue;
  switch (e) {
    case GemmEpilogue::kDefault: return K::kNone;
    case GemmEpilogue::kBias: return K::kBias;
    case GemmEpilogue::kReluBias: return K::kReluBias;
    case GemmEpilogue::kReluAuxBias: return K::kReluAuxBias;
    case GemmEpilogue::kDRelu: return K::kDRelu;
    case GemmEpilogue::kDReluBgrad: return K::kDReluBgrad;
    case GemmEpilogue::kBgradB: return K::kBgradA;  // cuBLASLt's B is our A (lt_gemm.h)
    default: return std::nullopt;
  }
}

// ottr's kernel's arguments for `c` (pointers as LtGemm::Run takes them).
kernels::SmallGemmArgs OttrArgs(const GemmConfig& c, const void* a, const void* b, void* d, const void* bias,
                                void* aux, void* workspace, void* counters = nullptr) {
  kernels::SmallGemmArgs p;
  p.trans_a = c.trans_a;
  p.trans_b = c.trans_b;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.lda = c.lda;
  p.ldb = c.ldb;
  p.ldc = c.ldc;
  p.alpha = c.alpha;
  p.epilogue = OttrEpilogue(c.epilogue).value_or(kernels::SmallGemmEpilogue::kNone);
  p.mask_row_bytes = c.aux_ld / 8;
  p.a = static_cast<const float*>(a);
  p.b = static_cast<const float*>(b);
  p.d = static_cast<float*>(d);
  using K = kernels::SmallGemmEpilogue;
  switch (p.epilogue) {
    case K::kBias:
    case K::kReluBias: p.bias = static_cast<const float*>(bias); break;
    case K::kReluAuxBias:
      p.bias = static_cast<const float*>(bias);
      p.mask_out = static_cast<uint8_t*>(aux);
      break;
    case K::kDRelu: p.mask_in = static_cast<const uint8_t*>(aux); break;
    case K::kDReluBgrad:
      p.mask_in = static_cast<const uint8_t*>(aux);
      p.bias_grad = static_cast<float*>(const_cast<void*>(bias));  // the bias gradient is an output
      p.bias_grad_partial = static_cast<float*>(workspace);
      p.tile_counters = static_cast<unsigned*>(counters);
      break;
    case K::kBgradA: p.bias_grad = static_cast<float*>(const_cast<void*>(bias)); break;  // an output
    case K::kNone: break;
  }
  return p;
}

absl::StatusOr<LtLayout> MakeLayout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                                    int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  LtLayout layout(l);
  if (batch > 1) {
    int32_t b = static_cast<int32_t>(batch);
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)));
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                               &stride, sizeof(stride)));
  }
  return layout;
}

int32_t AlgoConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int32_t v = 0;
  size_t written = 0;
  uint32_t u = 0;
  if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME || attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) {
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &u, sizeof(u), &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return static_cast<int32_t>(u);
  }
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
  return v;
}

std::string DescribeAlgo(const cublasLtMatmulHeuristicResult_t& r) {
  return absl::StrCat("id ", AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_ID), " tile ",
                      AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID), " splitk ",
                      AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), " red ",
                      AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), " stages ",
                      AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), " cluster ",
                      AlgoConfig(r.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), " ws ", r.workspaceSize);
}

}  // namespace

bool OttrGemmEligible(const GemmConfig& c, bool tf32) {
  if (const char* env = std::getenv("OTTR_SMALL_GEMM"); env != nullptr && std::string(env) == "0") return false;
  return tf32 && c.dtype == ir::DType::kFloat32 && c.OutType() == ir::DType::kFloat32 && c.batch <= 1 &&
         c.beta == 0.0f && OttrEpilogue(c.epilogue).has_value() && c.m > 0 && c.n > 0 && c.k > 0 &&
         c.m * c.n * c.k <= kOttrGemmMaxMacs;
}

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(CudaLibraries& libs, const GemmConfig& cfg) {
  auto g = std::unique_ptr<LtGemm>(new LtGemm());
  g->libs_ = &libs;
  g->config_ = cfg;
  GemmConfig& c = g->config_;
  // Row-major leading dims default to packed.
  if (c.lda == 0) c.lda = c.trans_a ? c.m : c.k;
  if (c.ldb == 0) c.ldb = c.trans_b ? c.k : c.n;
  if (c.ldc == 0) c.ldc = c.n;
  OTTR_ASSIGN_OR_RETURN(cudaDataType_t t, CudaType(c.dtype));
  OTTR_ASSIGN_OR_RETURN(cudaDataType_t out_t, CudaType(c.OutType()));
  if (c.OutType() != c.dtype &&
      !(c.OutType() == ir::DType::kFloat32 && (c.dtype == ir::DType::kBFloat16 || c.dtype == ir::DType::kFloat16))) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM of ", ir::DTypeName(c.dtype), " operands into ",
                                                 ir::DTypeName(c.OutType())));
  }
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (c.dtype == ir::DType::kFloat64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if (c.dtype == ir::DType::kFloat32 && libs.tf32()) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  cublasLtMatmulDesc_t desc;
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc, compute, scale));
  g->desc_ = LtMatmulDesc(desc);
  // Dᵀ[N,M] = op(B)ᵀ · op(A)ᵀ in column-major: cuBLASLt's A is our B, its B is our A.
  const cublasOperation_t op_a = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epi = LtEpilogue(c.epilogue);
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (HasBias(c.epilogue)) {
    // The bias (or bias gradient) vector has D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
    OTTR_CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_t, sizeof(out_t)));
  }
  if (HasAux(c.epilogue)) {
    const int64_t ld = c.aux_ld;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  // Column-major layouts of the three buffers (see the header comment).
  OTTR_ASSIGN_OR_RETURN(g->a_layout_, MakeLayout(t, c.trans_b ? c.k : c.n, c.trans_b ? c.n : c.k, c.ldb,
                                                 c.batch, c.stride_b));
  OTTR_ASSIGN_OR_RETURN(g->b_layout_, MakeLayout(t, c.trans_a ? c.m : c.k, c.trans_a ? c.k : c.m, c.lda,
                                                 c.batch, c.stride_a));
  OTTR_ASSIGN_OR_RETURN(g->d_layout_, MakeLayout(out_t, c.n, c.m, c.ldc, c.batch, c.stride_c));

  using Kernel = GemmConfig::Kernel;
  const bool ottr = c.kernel != Kernel::kCublasLt && OttrGemmEligible(c, libs.tf32());
  if (c.kernel == Kernel::kOttr && !ottr) {
    return absl::UnimplementedError("ottr's small TF32 GEMM cannot run this GEMM (OttrGemmEligible)");
  }
  // "ottr2": the version of ottr's kernel set, so a cache from before it re-times these shapes
  // (2: DRELU_BGRAD adds its partial bias gradients in the same launch).
  const std::string key = absl::StrCat(
      "gemm ", ir::DTypeName(c.dtype), c.OutType() != c.dtype ? absl::StrCat("->", ir::DTypeName(c.OutType())) : "",
      " ", static_cast<int>(compute), " t", c.trans_a, c.trans_b,
      " m", c.m, " n", c.n, " k", c.k, " ld", c.lda, ",", c.ldb, ",", c.ldc, " b", c.batch, " s",
      c.stride_a, ",", c.stride_b, ",", c.stride_c, " e", static_cast<int>(epi), " beta", c.beta != 0.0f,
      " aux", c.aux_ld, ottr ? " ottr2" : "", ottr && libs.programmatic() ? " pdl" : "");
  if (c.slices > 1) {  // forced parts of k: the heuristic's first algorithm for them, untimed
    if (c.dtype != ir::DType::kFloat32 || c.OutType() != ir::DType::kFloat32 || c.batch > 1 || c.beta != 0.0f ||
        c.epilogue != GemmEpilogue::kDefault || c.kernel == Kernel::kOttr || c.k % c.slices != 0 ||
        (c.k / c.slices) % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("k in ", c.slices, " slices needs float32 without epilogue, "
                                                     "beta 0, one matrix and k / slices a multiple of 4: ", key));
    }
    OTTR_RETURN_IF_ERROR(g->MakeSliceLayouts(c.slices, &g->slice_a_layout_, &g->slice_b_layout_, &g->slice_d_layout_));
    cublasLtMatmulPreference_t pref;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    LtPreference pref_owner(pref);
    const uint64_t max_ws = kMaxGemmWorkspace;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                   &max_ws, sizeof(max_ws)));
    cublasLtMatmulHeuristicResult_t r = {};
    int n = 0;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(libs.lt(), desc, g->slice_a_layout_.get(),
                                                             g->slice_b_layout_.get(), g->slice_d_layout_.get(),
                                                             g->slice_d_layout_.get(), pref, 1, &r, &n));
    if (n == 0) return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for the slices of ", key));
    g->slices_ = c.slices;
    g->algo_ = r.algo;
    g->workspace_bytes_ = g->SlicePartialBytes(c.slices) + static_cast<int64_t>(r.workspaceSize);
    return g;
  }
  // Forced kernels or parts of k neither read nor write the cache.
  const bool cached_choice = c.kernel == Kernel::kAuto;
  std::string cached;
  constexpr char kOttrValue[] = "ottr-config ";
  constexpr char kSlicesValue[] = "kslices ";
  if (cached_choice && libs.LookupAlgo(key, &cached)) {
    if (ottr && cached.rfind(kOttrValue, 0) == 0) {
      g->ottr_config_ = std::atoi(cached.c_str() + sizeof(kOttrValue) - 1);
      if (g->ottr_config_ >= 0 && g->ottr_config_ < kernels::SmallGemmConfigCount()) {
        OTTR_CUDA_RETURN_IF_ERROR(kernels::PrepareSmallGemm(g->ottr_config_, c.trans_a, c.trans_b));
        g->workspace_bytes_ = kernels::SmallGemmWorkspaceBytes(g->ottr_config_, OttrArgs(c, {}, {}, {}, {}, {}, {}));
        g->counter_bytes_ = kernels::SmallGemmCounterBytes(g->ottr_config_, OttrArgs(c, {}, {}, {}, {}, {}, {}));
        return g;
      }
      g->ottr_config_ = -1;
    } else {
      // "kslices S " before the algorithm: k in S parts (LtGemm::slices_).
      int slices = 1;
      if (cached.rfind(kSlicesValue, 0) == 0 && g->SlicesEligible()) {
        const size_t space = cached.find(' ', sizeof(kSlicesValue) - 1);
        slices = std::atoi(cached.c_str() + sizeof(kSlicesValue) - 1);
        cached = space == std::string::npos ? std::string() : cached.substr(space + 1);
      }
      if (cached.size() == 2 * sizeof(cublasLtMatmulAlgo_t) + 16 + 1 && slices >= 1 && slices <= 8) {
        std::string raw = absl::HexStringToBytes(cached.substr(0, 2 * sizeof(cublasLtMatmulAlgo_t)));
        std::memcpy(&g->algo_, raw.data(), sizeof(g->algo_));
        g->workspace_bytes_ = std::stoll(cached.substr(2 * sizeof(cublasLtMatmulAlgo_t) + 1), nullptr, 16);
        if (slices > 1) {
          OTTR_RETURN_IF_ERROR(
              g->MakeSliceLayouts(slices, &g->slice_a_layout_, &g->slice_b_layout_, &g->slice_d_layout_));
          g->slices_ = slices;
        }
        return g;
      }
    }
  }
  cublasLtMatmulHeuristicResult_t results[kMaxAutotuneCandidates] = {};
  int found = 0;
  if (c.kernel != Kernel::kOttr) {
    cublasLtMatmulPreference_t pref;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    LtPreference pref_owner(pref);
    const uint64_t max_ws = kMaxGemmWorkspace;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    int candidates = kAutotuneCandidates;
    if (const char* env = std::getenv("OTTR_GEMM_CANDIDATES")) {
      candidates = std::clamp(std::atoi(env), 1, kMaxAutotuneCandidates);
    }
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(libs.lt(), desc, g->a_layout_.get(),
                                                             g->b_layout_.get(), g->d_layout_.get(),
                                                             g->d_layout_.get(), pref, candidates,
                                                             results, &found));
  }
  if (found == 0 && !ottr) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for ", key));
  }
  if (found > 0) {
    g->algo_ = results[0].algo;
    g->workspace_bytes_ = static_cast<int64_t>(results[0].workspaceSize);
  }
  if (found > 1 || ottr) OTTR_RETURN_IF_ERROR(g->Autotune(results, found, ottr));
  if (c.kernel == Kernel::kOttr && g->ottr_config_ < 0) {
    return absl::InternalError(absl::StrCat("ottr's small TF32 GEMM did not run for ", key));
  }
  if (std::getenv("OTTR_LOG_GEMM_ALGOS") != nullptr) {
    std::fprintf(stderr, "gemm %s: %d candidates, chose %s\n", key.c_str(), found,
                 g->ottr_config_ >= 0 ? absl::StrCat("ottr config ", g->ottr_config_).c_str()
                 : g->slices_ > 1     ? absl::StrCat("k in ", g->slices_, " slices").c_str()
                                      : absl::StrCat("#", g->chosen_).c_str());
  }
  if (g->ottr_config_ >= 0) {
    g->workspace_bytes_ = kernels::SmallGemmWorkspaceBytes(g->ottr_config_, OttrArgs(c, {}, {}, {}, {}, {}, {}));
    g->counter_bytes_ = kernels::SmallGemmCounterBytes(g->ottr_config_, OttrArgs(c, {}, {}, {}, {}, {}, {}));
    if (cached_choice) libs.StoreAlgo(key, absl::StrCat(kOttrValue, g->ottr_config_));
    return g;
  }
  if (cached_choice) {
    libs.StoreAlgo(key, absl::StrCat(g->slices_ > 1 ? absl::StrCat(kSlicesValue, g->slices_, " ") : "",
                                     absl::BytesToHexString(absl::string_view(
                                         reinterpret_cast<const char*>(&g->algo_), sizeof(g->algo_))),
                                     " ", absl::Hex(g->workspace_bytes_, absl::kZeroPad16)));
  }
  return g;
}

GraphTimer::GraphTimer() {
  if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) stream_ = nullptr;
  if (cudaEventCreate(&start_) != cudaSuccess) start_ = nullptr;
  if (cudaEventCreate(&stop_) != cudaSuccess) stop_ = nullptr;
  cudaGetLastError();
}

GraphTimer::~GraphTimer() {
  cudaGetLastError();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  for (void* p : buffers_) cudaFree(p);
}

void* GraphTimer::Alloc(int64_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<int64_t>(bytes, 256)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  cudaMemset(p, 0x3c, std::max<int64_t>(bytes, 256));
  buffers_.push_back(p);
  return p;
}

float GraphTimer::Time(const std::function<bool()>& run, size_t* nodes) {
  if (nodes != nullptr) *nodes = 0;
  if (!ok() || !run() || cudaStreamSynchronize(stream_) != cudaSuccess) {  // warm-up; skip what fails
    cudaGetLastError();
    return -1;
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool failed = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
  for (int r = 0; r < kRuns && !failed; ++r) failed = !run();
  if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess || graph == nullptr) failed = true;
  if (!failed) {
    size_t count = 0;
    if (nodes != nullptr && cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess) *nodes = count / kRuns;
    failed = cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess;
  }
  float ms = 0;
  if (!failed) {
    failed = cudaGraphLaunch(exec, stream_) != cudaSuccess;  // warm
    failed = failed || cudaEventRecord(start_, stream_) != cudaSuccess || cudaGraphLaunch(exec, stream_) != cudaSuccess ||
             cudaEventRecord(stop_, stream_) != cudaSuccess || cudaEventSynchronize(stop_) != cudaSuccess ||
             cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess;
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (failed) {
    cudaGetLastError();
    return -1;
  }
  return ms;
}

// Times each heuristic candidate (and, with `ottr`, each configuration of ottr's kernel that fits) on
// scratch buffers (compile time, outside any captured graph; the timing captures its own graph on
// a private stream) and keeps the fastest: the heuristic's first choice is often not the fastest
// for epilogue GEMMs. The contents of the scratch buffers do not matter for timing.
absl::Status LtGemm::Autotune(const cublasLtMatmulHeuristicResult_t* results, int found, bool ottr) {
  const GemmConfig& c = config_;
  const int64_t esize = static_cast<int64_t>(ir::DTypeSize(c.dtype));
  const int64_t batch = std::max<int64_t>(c.batch, 1);
  auto span = [&](int64_t rows, int64_t ld, int64_t stride) {
    return (batch > 1 ? stride * (batch - 1) : 0) + rows * ld;
  };
  const int64_t a_bytes = span(c.trans_a ? c.k : c.m, c.lda, c.stride_a) * esize;
  const int64_t b_bytes = span(c.trans_b ? c.n : c.k, c.ldb, c.stride_b) * esize;
  const int64_t out_size = static_cast<int64_t>(ir::DTypeSize(c.OutType()));
  const int64_t d_bytes = span(c.m, c.ldc, c.stride_c) * out_size;
  const int64_t bias_bytes = std::max(c.m, c.n) * out_size;
  const int64_t aux_bytes = HasAux(c.epilogue) ? std::max<int64_t>(c.aux_ld, c.n) * c.m * out_size : 0;
  int64_t ws = 0;
  for (int i = 0; i < found; ++i) ws = std::max<int64_t>(ws, static_cast<int64_t>(results[i].workspaceSize));
  for (int t = 0; ottr && t < kernels::SmallGemmConfigCount(); ++t) {
    ws = std::max(ws, kernels::SmallGemmWorkspaceBytes(t, OttrArgs(c, {}, {}, {}, {}, {}, {})));
  }
  GraphTimer timer;
  auto alloc = [&](int64_t bytes) { return timer.Alloc(bytes); };
  void* a = alloc(a_bytes);
  void* b = alloc(b_bytes);
  void* d = alloc(d_bytes);
  void* bias = alloc(bias_bytes);
  void* aux = alloc(aux_bytes);
  void* workspace = alloc(ws);
  // ottr's kernel's counters, zero as the executor gives them (each launch leaves them zero).
  int64_t counter_bytes = 0;
  for (int t = 0; ottr && t < kernels::SmallGemmConfigCount(); ++t) {
    counter_bytes = std::max(counter_bytes, kernels::SmallGemmCounterBytes(t, OttrArgs(c, {}, {}, {}, {}, {}, {})));
  }
  void* counters = alloc(counter_bytes);
  if (counters != nullptr) cudaMemset(counters, 0, std::max<int64_t>(counter_bytes, 256));
  const cudaStream_t stream = timer.stream();
  const bool ok = a && b && d && bias && aux && workspace && counters && timer.ok();
  constexpr int kRuns = GraphTimer::kRuns;
  size_t nodes = 0;
  auto time_in_graph = [&](const std::function<bool()>& run) { return timer.Time(run, &nodes); };
  const bool log = std::getenv("OTTR_LOG_GEMM_ALGOS") != nullptr;
  float best = -1;
  if (ok) {
    const cublasLtMatmulAlgo_t first = algo_;
    const int64_t first_ws = workspace_bytes_;
    for (int i = 0; i < found; ++i) {
      algo_ = results[i].algo;
      workspace_bytes_ = static_cast<int64_t>(results[i].workspaceSize);
      const float ms = time_in_graph([&] { return Run(a, b, d, bias, aux, workspace, stream).ok(); });
      if (ms < 0) continue;
      if (log) {
        std::fprintf(stderr, "  candidate #%d: %.2f us, %zu nodes (%s)\n", i, ms * 1000.0f / kRuns, nodes,
                     DescribeAlgo(results[i]).c_str());
      }
      if (best < 0 || ms < best) {
        best = ms;
        chosen_ = i;
      }
    }
    algo_ = found > 0 ? results[chosen_].algo : first;
    workspace_bytes_ = found > 0 ? static_cast<int64_t>(results[chosen_].workspaceSize) : first_ws;
    if (best < 0) {  // nothing ran: keep the heuristic's choice
      algo_ = first;
      workspace_bytes_ = first_ws;
    }
    kernels::SmallGemmArgs args = OttrArgs(c, a, b, d, bias, aux, workspace, counters);
    for (int t = 0; ottr && t < kernels::SmallGemmConfigCount(); ++t) {
      if ((c.ottr_config >= 0 && t != c.ottr_config) || !kernels::SmallGemmConfigFits(t, args)) continue;
      if (kernels::PrepareSmallGemm(t, c.trans_a, c.trans_b) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      // As the step launches it: programmatically after the kernel before it, when the executor does.
      const bool pdl = libs_->programmatic();
      const float ms = time_in_graph([&] {
        return kernels::LaunchSmallGemm(t, args, stream, pdl && FollowsOneKernel(stream)) == cudaSuccess;
      });
      if (ms < 0) continue;
      int bm = 0, bn = 0, bk = 0;
      kernels::SmallGemmConfigShape(t, &bm, &bn, &bk);
      if (log) std::fprintf(stderr, "  ottr config %d (%dx%d, bk %d): %.2f us, %zu nodes\n", t, bm, bn, bk, ms * 1000.0f / kRuns, nodes);
      // A forced kernel takes its fastest configuration whatever cuBLASLt did (it timed nothing then).
      if (best < 0 || ms < best) {
        best = ms;
        ottr_config_ = t;
      }
    }
  }
  // k-sliced candidates: each heuristic choice for 2..8 equal parts of k, timed with the sum of
  // the parts (SumKSlices), against the best above. Parts are kept only when they beat the best
  // unsliced kernel by kMinSliceGain: timed alone, near ties say nothing about the step, where the
  // parts' wider kernel and their sum contend with the work beside them (fc1's weight gradient at
  // batch 8192: 8 parts 30.0 us against split-K 30.9 alone, and the ReLU backward beside it went
  // from 33.9 to 51.0 us in the step).
  if (ok && SlicesEligible()) {
    constexpr float kMinSliceGain = 0.9f;
    const float unsliced_best = best;
    const int saved_config = ottr_config_;
    const cublasLtMatmulAlgo_t saved_algo = algo_;
    const int64_t saved_ws = workspace_bytes_;
    int best_slices = 1;
    cublasLtMatmulAlgo_t best_algo = algo_;
    int64_t best_ws = workspace_bytes_;
    void* scratch = nullptr;
    for (int parts : {2, 3, 4, 6, 8}) {
      const int64_t ks = c.k / parts;
      if (c.k % parts != 0 || ks < 512 || ks % 4 != 0) continue;
      LtLayout la, lb, ld;
      if (!MakeSliceLayouts(parts, &la, &lb, &ld).ok()) continue;
      cublasLtMatmulPreference_t pref;
      if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) break;
      LtPreference pref_owner(pref);
      const uint64_t max_ws = kMaxGemmWorkspace;
      cublasLtMatmulHeuristicResult_t r[4] = {};
      int n = 0;
      if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                               sizeof(max_ws)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoGetHeuristic(libs_->lt(), desc_.get(), la.get(), lb.get(), ld.get(), ld.get(), pref, 4,
                                         r, &n) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      if (scratch == nullptr) scratch = alloc(SlicePartialBytes(8) + kMaxGemmWorkspace);
      if (scratch == nullptr) break;
      slices_ = parts;
      slice_a_layout_ = std::move(la);
      slice_b_layout_ = std::move(lb);
      slice_d_layout_ = std::move(ld);
      ottr_config_ = -1;
      for (int i = 0; i < n; ++i) {
        algo_ = r[i].algo;
        workspace_bytes_ = SlicePartialBytes(parts) + static_cast<int64_t>(r[i].workspaceSize);
        const float ms = time_in_graph([&] { return Run(a, b, d, bias, aux, scratch, stream).ok(); });
        if (ms < 0) continue;
        if (log) {
          std::fprintf(stderr, "  k in %d slices, candidate #%d: %.2f us, %zu nodes (%s)\n", parts, i,
                       ms * 1000.0f / kRuns, nodes, DescribeAlgo(r[i]).c_str());
        }
        if ((unsliced_best < 0 || ms < kMinSliceGain * unsliced_best) && (best_slices == 1 || ms < best)) {
          best = ms;
          best_slices = parts;
          best_algo = r[i].algo;
          best_ws = workspace_bytes_;
        }
      }
    }
    slices_ = 1;
    ottr_config_ = saved_config;
    algo_ = saved_algo;
    workspace_bytes_ = saved_ws;
    if (best_slices > 1) {
      OTTR_RETURN_IF_ERROR(MakeSliceLayouts(best_slices, &slice_a_layout_, &slice_b_layout_, &slice_d_layout_));
      slices_ = best_slices;
      ottr_config_ = -1;
      algo_ = best_algo;
      workspace_bytes_ = best_ws;
    }
  }
  return absl::OkStatus();
}

bool LtGemm::SlicesEligible() const {
  const GemmConfig& c = config_;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, libs_->device()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const int64_t tiles = ((c.m + 127) / 128) * ((c.n + 127) / 128);
  return std::getenv("OTTR_NO_KSLICES") == nullptr && c.dtype == ir::DType::kFloat32 &&
         c.OutType() == ir::DType::kFloat32 && c.batch <= 1 && c.beta == 0.0f &&
         c.epilogue == GemmEpilogue::kDefault && tiles <= sms && c.k >= 2048;
}

int64_t LtGemm::SlicePartialBytes(int slices) const {
  return (static_cast<int64_t>(slices) * config_.m * config_.n * 4 + 255) / 256 * 256;
}

absl::Status LtGemm::MakeSliceLayouts(int slices, LtLayout* a, LtLayout* b, LtLayout* d) const {
  const GemmConfig& c = config_;
  const int64_t ks = c.k / slices;
  // As Create's layouts with k -> ks; part i starts ks rows (of an operand stored [k, ·]) or ks
  // columns (stored [·, k]) after part i - 1.
  OTTR_ASSIGN_OR_RETURN(*a, MakeLayout(CUDA_R_32F, c.trans_b ? ks : c.n, c.trans_b ? c.n : ks, c.ldb, slices,
                                       c.trans_b ? ks : ks * c.ldb));
  OTTR_ASSIGN_OR_RETURN(*b, MakeLayout(CUDA_R_32F, c.trans_a ? c.m : ks, c.trans_a ? ks : c.m, c.lda, slices,
                                       c.trans_a ? ks * c.lda : ks));
  OTTR_ASSIGN_OR_RETURN(*d, MakeLayout(CUDA_R_32F, c.n, c.m, c.n, slices, c.m * c.n));
  return absl::OkStatus();
}

absl::Status LtGemm::Run(const void* a, const void* b, void* d, const void* bias, void* aux,
                         void* workspace, cudaStream_t stream, void* counters, const GemmLaunch& launch) const {
  const GemmConfig& c = config_;
  if (ottr_config_ >= 0) {
    kernels::SmallGemmArgs args = OttrArgs(c, a, b, d, bias, aux, workspace, counters);
    args.a_ready = launch.a_ready;
    args.b_ready = launch.b_ready;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSmallGemm(ottr_config_, args, stream, launch.programmatic));
    return absl::OkStatus();
  }
  cublasLtMatmulDesc_t desc = desc_.get();
  if (slices_ > 1) {  // SlicesEligible: float32, no epilogue, beta 0, one matrix
    const int64_t partial_bytes = SlicePartialBytes(slices_);
    float* partial = static_cast<float*>(workspace);
    void* lt_workspace = static_cast<char*>(workspace) + partial_bytes;
    const float alpha = c.alpha, beta = 0.0f;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmul(libs_->lt(), desc, &alpha, b, slice_a_layout_.get(), a,
                                             slice_b_layout_.get(), &beta, partial, slice_d_layout_.get(),
                                             partial, slice_d_layout_.get(), &algo_, lt_workspace,
                                             workspace_bytes_ - partial_bytes, stream));
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::SumKSlices(partial, slices_, static_cast<float*>(d), c.m, c.n, c.ldc, stream, launch.programmatic));
    return absl::OkStatus();
  }
  if (HasBias(c.epilogue)) {
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (HasAux(c.epilogue)) {
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  if (c.dtype == ir::DType::kFloat64) {
    const double alpha = c.alpha, beta = c.beta;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmul(libs_->lt(), desc, &alpha, b, a_layout_.get(), a, b_layout_.get(),
                                             &beta, d, d_layout_.get(), d, d_layout_.get(), &algo_,
                                             workspace, workspace_bytes_, stream));
  } else {
    const float alpha = c.alpha, beta = c.beta;
    OTTR_CUDA_RETURN_IF_ERROR(cublasLtMatmul(libs_->lt(), desc, &alpha, b, a_layout_.get(), a, b_layout_.get(),
                                             &beta, d, d_layout_.get(), d, d_layout_.get(), &algo_,
                                             workspace, workspace_bytes_, stream));
  }
  return absl::OkStatus();
}

}  // namespace ottr::cuda
