#include "runtime/cuda/cudnn_graph_conv.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_status.h"

// The HANDLE attributes of the operation graph and the execution plan are marked deprecated in
// cuDNN 9 (in favour of device properties) but remain the documented way to bind a handle.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ottr::cuda {
namespace {

constexpr int kMaxCandidates = 12;
constexpr int kTimedRuns = 5;
enum Uid : int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kConvOut = 5, kBiasOut = 6 };

absl::StatusOr<BackendDesc> NewDesc(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d = nullptr;
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendCreateDescriptor(t, &d));
  return BackendDesc(d);
}

#define OTTR_SET(desc, attr, type, count, ptr) \
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendSetAttribute((desc), (attr), (type), (count), (ptr)))

// Strides of packed dims [N, C, spatial...]: row-major, or channels-last (C innermost, then the
// spatial axes from the last, then N).
std::vector<int64_t> Strides(const std::vector<int64_t>& dims, bool channels_last) {
  const size_t r = dims.size();
  std::vector<int64_t> s(r, 1);
  std::vector<size_t> inner_first;
  if (channels_last && r >= 3) {
    inner_first.push_back(1);
    for (size_t i = r - 1; i >= 2; --i) inner_first.push_back(i);
    inner_first.push_back(0);
  } else {
    for (size_t i = r; i-- > 0;) inner_first.push_back(i);
  }
  int64_t stride = 1;
  for (size_t i : inner_first) {
    s[i] = stride;
    stride *= std::max<int64_t>(dims[i], 1);
  }
  return s;
}

absl::StatusOr<BackendDesc> TensorDesc(int64_t uid, cudnnDataType_t t, const std::vector<int64_t>& dims,
                                       bool channels_last, bool is_virtual) {
  OTTR_ASSIGN_OR_RETURN(BackendDesc d, NewDesc(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const std::vector<int64_t> strides = Strides(dims, channels_last);
  const int64_t alignment = 16;
  const bool virt = is_virtual;
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data());
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data());
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  OTTR_SET(d.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(d.get()));
  return d;
}

int64_t ElementBytes(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT ? 4 : 2; }

int64_t Count(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

// Everything a plan refers to, kept alive with it.
struct Graph {
  std::vector<BackendDesc> keep;
  BackendDesc op_graph;
};

absl::StatusOr<Graph> BuildGraph(cudnnHandle_t handle, const GraphConvSpec& s) {
  Graph g;
  const bool cl = s.channels_last;
  OTTR_ASSIGN_OR_RETURN(BackendDesc x, TensorDesc(kX, s.io_type, s.x, cl, false));
  OTTR_ASSIGN_OR_RETURN(BackendDesc w, TensorDesc(kW, s.io_type, s.w, cl, false));
  OTTR_ASSIGN_OR_RETURN(BackendDesc y, TensorDesc(kY, s.io_type, s.y, cl, false));
  OTTR_ASSIGN_OR_RETURN(BackendDesc conv, NewDesc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t nd = static_cast<int64_t>(s.pad.size());
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd);
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nd, s.dilation.data());
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nd, s.stride.data());
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nd, s.pad.data());
    OTTR_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nd, s.pad.data());
    OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(conv.get()));
  }
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<cudnnBackendDescriptor_t> ops;
  cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  switch (s.kind) {
    case GraphConvKind::kForward: {
      // conv -> [+ bias] -> [relu] -> y, the intermediate values virtual (float32, never stored).
      OTTR_ASSIGN_OR_RETURN(BackendDesc op, NewDesc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR));
      cudnnBackendDescriptor_t out = yd;
      if (s.bias || s.relu) {
        OTTR_ASSIGN_OR_RETURN(BackendDesc virt, TensorDesc(kConvOut, CUDNN_DATA_FLOAT, s.y, cl, true));
        out = virt.get();
        g.keep.push_back(std::move(virt));
      }
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(op.get()));
      ops.push_back(op.get());
      g.keep.push_back(std::move(op));
      // One pointwise node: `mode` of `in` (and `b`) into `dst`.
      auto pointwise = [&](cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t in, cudnnBackendDescriptor_t b,
                           cudnnBackendDescriptor_t dst) -> absl::Status {
        OTTR_ASSIGN_OR_RETURN(BackendDesc pw, NewDesc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
        const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        OTTR_SET(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        OTTR_SET(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
        OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(pw.get()));
        OTTR_ASSIGN_OR_RETURN(BackendDesc pop, NewDesc(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
        cudnnBackendDescriptor_t pwd = pw.get();
        OTTR_SET(pop.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
        OTTR_SET(pop.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in);
        if (b != nullptr) OTTR_SET(pop.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        OTTR_SET(pop.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dst);
        OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(pop.get()));
        ops.push_back(pop.get());
        g.keep.push_back(std::move(pw));
        g.keep.push_back(std::move(pop));
        return absl::OkStatus();
      };
      if (s.bias) {
        std::vector<int64_t> bdims(s.y.size(), 1);
        bdims[1] = s.y[1];
        OTTR_ASSIGN_OR_RETURN(BackendDesc b, TensorDesc(kBias, s.io_type, bdims, cl, false));
        cudnnBackendDescriptor_t dst = yd;
        if (s.relu) {
          OTTR_ASSIGN_OR_RETURN(BackendDesc virt, TensorDesc(kBiasOut, CUDNN_DATA_FLOAT, s.y, cl, true));
          dst = virt.get();
          g.keep.push_back(std::move(virt));
        }
        OTTR_RETURN_IF_ERROR(pointwise(CUDNN_POINTWISE_ADD, out, b.get(), dst));
        g.keep.push_back(std::move(b));
        out = dst;
      }
      if (s.relu) OTTR_RETURN_IF_ERROR(pointwise(CUDNN_POINTWISE_RELU_FWD, out, nullptr, yd));
      break;
    }
    case GraphConvKind::kBackwardData: {
      OTTR_ASSIGN_OR_RETURN(BackendDesc op, NewDesc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR));
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(op.get()));
      ops.push_back(op.get());
      g.keep.push_back(std::move(op));
      break;
    }
    case GraphConvKind::kBackwardFilter: {
      OTTR_ASSIGN_OR_RETURN(BackendDesc op,
                            NewDesc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR));
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &cd);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      OTTR_SET(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(op.get()));
      ops.push_back(op.get());
      g.keep.push_back(std::move(op));
      break;
    }
  }
  OTTR_ASSIGN_OR_RETURN(g.op_graph, NewDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  OTTR_SET(g.op_graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<int64_t>(ops.size()), ops.data());
  OTTR_SET(g.op_graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(g.op_graph.get()));
  g.keep.push_back(std::move(x));
  g.keep.push_back(std::move(w));
  g.keep.push_back(std::move(y));
  g.keep.push_back(std::move(conv));
  return g;
}

// The engine configurations heuristics mode A offers, best first (at most kMaxCandidates).
absl::StatusOr<std::vector<BackendDesc>> EngineConfigs(const Graph& g) {
  OTTR_ASSIGN_OR_RETURN(BackendDesc heur, NewDesc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  cudnnBackendDescriptor_t og = g.op_graph.get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  OTTR_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
  OTTR_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(heur.get()));
  int64_t count = 0;
  OTTR_CUDA_RETURN_IF_ERROR(
      cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  count = std::min<int64_t>(count, kMaxCandidates);
  std::vector<BackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    OTTR_ASSIGN_OR_RETURN(BackendDesc c, NewDesc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(c.get());
    cfgs.push_back(std::move(c));
  }
  int64_t returned = 0;
  if (count > 0) {
    OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()));
  }
  cfgs.resize(std::min<int64_t>(returned, count));
  return cfgs;
}

// "" when the configuration's engine is acceptable, else why not.
std::string Rejects(cudnnBackendDescriptor_t cfg, cudnnDataType_t io) {
  auto engine = NewDesc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!engine.ok()) return "no engine descriptor";
  cudnnBackendDescriptor_t e = engine->get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS) {
    return "engine not readable";
  }
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS) {
    return "numerical notes not readable";
  }
  for (int64_t i = 0; i < count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return "nondeterministic";
    if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return "reduced-precision reduction";
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS && io == CUDNN_DATA_FLOAT) return "down-converts float32";
  }
  return "";
}

struct Plan {
  BackendDesc desc;
  int64_t workspace = 0;
};

absl::StatusOr<Plan> MakePlan(cudnnHandle_t handle, cudnnBackendDescriptor_t cfg) {
  Plan p;
  OTTR_ASSIGN_OR_RETURN(p.desc, NewDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  OTTR_SET(p.desc.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  OTTR_SET(p.desc.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(p.desc.get()));
  int64_t n = 0;
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendGetAttribute(p.desc.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                     CUDNN_TYPE_INT64, 1, &n, &p.workspace));
  return p;
}

absl::Status Execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, bool bias, const void* x, const void* w,
                     const void* y, const void* b, void* workspace) {
  OTTR_ASSIGN_OR_RETURN(BackendDesc vp, NewDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  int64_t uids[4] = {kX, kW, kY, kBias};
  void* ptrs[4] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y), const_cast<void*>(b)};
  const int64_t n = bias ? 4 : 3;
  OTTR_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  OTTR_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  OTTR_SET(vp.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendFinalize(vp.get()));
  OTTR_CUDA_RETURN_IF_ERROR(cudnnBackendExecute(handle, plan, vp.get()));
  return absl::OkStatus();
}

// Device scratch for the timing runs, freed with it.
class Scratch {
 public:
  ~Scratch() {
    for (void* p : ptrs_) cudaFree(p);
  }
  void* Alloc(int64_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16))) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    ptrs_.push_back(p);
    cudaMemset(p, 0, static_cast<size_t>(std::max<int64_t>(bytes, 16)));
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GraphConv>> GraphConv::Create(CudaLibraries& libs, const GraphConvSpec& spec,
                                                             int64_t max_workspace, const std::string& cache_key) {
  OTTR_ASSIGN_OR_RETURN(cudnnHandle_t handle, libs.dnn());
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle, nullptr));
  OTTR_ASSIGN_OR_RETURN(Graph g, BuildGraph(handle, spec));
  OTTR_ASSIGN_OR_RETURN(std::vector<BackendDesc> cfgs, EngineConfigs(g));
  auto conv = std::unique_ptr<GraphConv>(new GraphConv());
  conv->handle_ = handle;
  conv->bias_ = spec.bias;
  const bool log = std::getenv("OTTR_LOG_CONV_ALGOS") != nullptr;

  std::string cached;
  int64_t rank = -1;
  if (libs.LookupAlgo(cache_key, &cached)) {
    std::vector<std::string> parts = absl::StrSplit(cached, ' ');
    float us = -1;
    if ((parts.size() == 2 || parts.size() == 3) && parts[0] == "graph" && absl::SimpleAtoi(parts[1], &rank) &&
        rank >= 0 && rank < static_cast<int64_t>(cfgs.size()) &&
        (parts.size() == 2 || absl::SimpleAtof(parts[2], &us))) {
      auto plan = MakePlan(handle, cfgs[rank].get());
      if (plan.ok() && plan->workspace <= max_workspace) {
        conv->plan_ = std::move(plan->desc);
        conv->workspace_bytes_ = plan->workspace;
        conv->time_us_ = us;
        return conv;
      }
    }
  }
  libs.CountAlgoSearch();
  // Finalize the acceptable plans.
  std::vector<std::pair<int64_t, Plan>> plans;
  int64_t max_ws = 0;
  for (size_t i = 0; i < cfgs.size(); ++i) {
    const std::string why = Rejects(cfgs[i].get(), spec.io_type);
    if (!why.empty()) {
      if (log) std::fprintf(stderr, "%s: graph engine %zu skipped: %s\n", cache_key.c_str(), i, why.c_str());
      continue;
    }
    auto plan = MakePlan(handle, cfgs[i].get());
    if (!plan.ok() || plan->workspace > max_workspace) {
      if (log) std::fprintf(stderr, "%s: graph engine %zu has no plan within the workspace\n", cache_key.c_str(), i);
      continue;
    }
    max_ws = std::max(max_ws, plan->workspace);
    plans.emplace_back(static_cast<int64_t>(i), std::move(*plan));
  }
  if (plans.empty()) return absl::NotFoundError(absl::StrCat("no cuDNN graph plan for ", cache_key));
  // Time each on scratch buffers.
  Scratch scratch;
  const int64_t es = ElementBytes(spec.io_type);
  void* x = scratch.Alloc(Count(spec.x) * es);
  void* w = scratch.Alloc(Count(spec.w) * es);
  void* y = scratch.Alloc(Count(spec.y) * es);
  void* b = scratch.Alloc(spec.y.size() > 1 ? spec.y[1] * es : es);
  void* ws = scratch.Alloc(max_ws);
  size_t best = 0;
  float best_us = -1;
  if (x != nullptr && w != nullptr && y != nullptr && b != nullptr && ws != nullptr && plans.size() > 1) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (size_t i = 0; i < plans.size(); ++i) {
      if (!Execute(handle, plans[i].second.desc.get(), spec.bias, x, w, y, b, ws).ok()) {
        cudaGetLastError();
        continue;
      }
      std::vector<float> times;
      for (int r = 0; r < kTimedRuns; ++r) {
        cudaEventRecord(start, nullptr);
        const bool ok = Execute(handle, plans[i].second.desc.get(), spec.bias, x, w, y, b, ws).ok();
        cudaEventRecord(stop, nullptr);
        cudaEventSynchronize(stop);
        float ms = 0;
        if (!ok || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) break;
        times.push_back(ms * 1000.0f);
      }
      cudaGetLastError();
      if (times.size() != kTimedRuns) continue;
      std::sort(times.begin(), times.end());
      const float us = times[kTimedRuns / 2];
      if (log) {
        std::fprintf(stderr, "%s: graph engine %lld %.1f us ws %lld\n", cache_key.c_str(),
                     static_cast<long long>(plans[i].first), us, static_cast<long long>(plans[i].second.workspace));
      }
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = i;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (best_us < 0) return absl::NotFoundError(absl::StrCat("no cuDNN graph plan ran for ", cache_key));
  }
  conv->plan_ = std::move(plans[best].second.desc);
  conv->workspace_bytes_ = plans[best].second.workspace;
  conv->time_us_ = best_us;
  libs.StoreAlgo(cache_key, absl::StrCat("graph ", plans[best].first, " ", best_us));
  return conv;
}

absl::Status GraphConv::Run(const void* x, const void* w, const void* y, const void* bias, void* workspace,
                            cudaStream_t stream) const {
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle_, stream));
  return Execute(handle_, plan_.get(), bias_, x, w, y, bias, workspace);
}

}  // namespace ottr::cuda
