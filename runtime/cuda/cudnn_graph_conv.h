// One convolution (forward, backward-data or backward-filter, the forward optionally with its
// bias added in the same kernel) through cuDNN's graph (backend) API: an operation graph of one
// convolution node, the engine configurations cuDNN's heuristics offer, each finalized into an
// execution plan and timed, the fastest kept.
//
// Why beside the legacy API (conv_pool_ops.cc): on the H200 with cuDNN 9 the legacy API offers
// only IMPLICIT_GEMM / IMPLICIT_PRECOMP_GEMM for channels-last tensors, well below the Tensor Core
// rate (the benchmark CNN's Conv 32→64 3x3 at batch 1024, TF32: filter gradient 424 µs, data
// gradient 213 µs, where 21.7 GFLOP each take ~60 µs at 350 TFLOP/s); the engines of the graph
// API include cuDNN's Hopper kernels. The legacy path stays for what the graph path does not take
// (float64, float32 without TF32 — exact FMA math —, other than 2-D, padded staging) and as the
// fallback when no plan builds.
//
// Engine selection: heuristics mode A, at most kMaxCandidates configurations; an engine whose
// numerical notes say nondeterministic (replays must give the same bits), or that down-converts
// float32 inputs, or reduces in reduced precision, is skipped; the workspace is bounded. Each plan
// runs on scratch buffers (warm-up, then the median of kTimedRuns); the choice is stored as the
// configuration's rank in the heuristic list under the caller's cache key (the cache file's header
// carries the cuDNN version and the device, so the rank names the same engine when it is read).
#ifndef OTTR_RUNTIME_CUDA_CUDNN_GRAPH_CONV_H_
#define OTTR_RUNTIME_CUDA_CUDNN_GRAPH_CONV_H_

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_libraries.h"

namespace ottr::cuda {

enum class GraphConvKind { kForward, kBackwardData, kBackwardFilter };

struct GraphConvSpec {
  GraphConvKind kind = GraphConvKind::kForward;
  cudnnDataType_t io_type = CUDNN_DATA_FLOAT;  // float, half or bfloat16; float32 accumulation
  bool channels_last = false;                  // NHWC tensors, KRSC filter
  // Channels-first dims: x [N, C, spatial...], w [K, C/group, kernel...], y [N, K, positions...].
  std::vector<int64_t> x, w, y;
  std::vector<int64_t> pad, stride, dilation;  // symmetric pads
  bool bias = false;  // forward only: y = conv(x, w) + bias[k]
  bool relu = false;  // forward only: then y = max(y, 0)
};

using BackendDesc = Handle<cudnnBackendDescriptor_t, cudnnBackendDestroyDescriptor>;

class GraphConv {
 public:
  // Builds and autotunes (or, with a cached choice under `cache_key`, builds that one plan).
  // NotFound when no engine configuration yields a usable plan.
  static absl::StatusOr<std::unique_ptr<GraphConv>> Create(CudaLibraries& libs, const GraphConvSpec& spec,
                                                           int64_t max_workspace, const std::string& cache_key);

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // The chosen plan's measured time (µs, median of the timed runs; also kept in the cache), or
  // -1 when it was not timed (a single candidate, or a cache entry without it).
  float time_us() const { return time_us_; }
  // kForward: (x, w, bias) -> y; kBackwardData: (w, dy) -> dx as (x = dx, w, y = dy);
  // kBackwardFilter: (x, dy) -> dw as (x, w = dw, y = dy). Only enqueues work on `stream`.
  absl::Status Run(const void* x, const void* w, const void* y, const void* bias, void* workspace,
                   cudaStream_t stream) const;

 private:
  GraphConv() = default;
  cudnnHandle_t handle_ = nullptr;
  bool bias_ = false;
  BackendDesc plan_;
  int64_t workspace_bytes_ = 0;
  float time_us_ = -1;
};

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_CUDNN_GRAPH_CONV_H_
