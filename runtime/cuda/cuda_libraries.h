// Per-executor CUDA state shared by every op: the device, the cuBLASLt and cuDNN handles, the
// TF32 policy and the caches of algorithm choices keyed by shape (optionally persisted in a file
// that is ignored when the library version or the device differ).
#ifndef OTTR_RUNTIME_CUDA_CUDA_LIBRARIES_H_
#define OTTR_RUNTIME_CUDA_CUDA_LIBRARIES_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace ottr::cuda {

// Move-only owner of a library handle or descriptor; `Destroy` runs once on the held value.
template <typename T, auto Destroy>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h), owned_(true) {}
  Handle(Handle&& o) noexcept : h_(o.h_), owned_(o.owned_) { o.owned_ = false; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Reset();
      h_ = o.h_;
      owned_ = o.owned_;
      o.owned_ = false;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Reset(); }
  T get() const { return h_; }
  void Reset() {
    if (owned_) Destroy(h_);
    owned_ = false;
  }

 private:
  T h_{};
  bool owned_ = false;
};

using LtHandle = Handle<cublasLtHandle_t, cublasLtDestroy>;
using LtMatmulDesc = Handle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = Handle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = Handle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;
using DnnHandle = Handle<cudnnHandle_t, cudnnDestroy>;
using BlasHandle = Handle<cublasHandle_t, cublasDestroy_v2>;
using Stream = Handle<cudaStream_t, cudaStreamDestroy>;
using Event = Handle<cudaEvent_t, cudaEventDestroy>;
using GraphExec = Handle<cudaGraphExec_t, cudaGraphExecDestroy>;
using CudaGraph = Handle<cudaGraph_t, cudaGraphDestroy>;

// Whether the next launch on `stream` follows exactly one kernel, so it may be launched
// programmatically (kernels/pdl.cuh): while capturing, the stream's dependency set is that one
// kernel node (a programmatic edge joins kernel nodes only; after a memset, a copy or a join of
// streams the launch stays ordinary); outside a capture, true (the stream orders it).
bool FollowsOneKernel(cudaStream_t stream);

class CudaLibraries {
 public:
  // Uses the current device. `algo_cache_file` ("" = none) is read now and written by Save().
  static absl::StatusOr<std::unique_ptr<CudaLibraries>> Create(bool tf32,
                                                               std::string algo_cache_file = "");
  ~CudaLibraries();

  int device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  bool tf32() const { return tf32_; }
  // The executor launches ottr's kernels programmatically (CudaExecutorOptions::
  // programmatic_launch on a device that has it): LtGemm then times ottr's GEMM so launched.
  bool programmatic() const { return programmatic_; }
  void set_programmatic(bool on) { programmatic_ = on; }
  cublasLtHandle_t lt() const { return lt_.get(); }
  // cuDNN is created on first use (models without convolutions never load it).
  absl::StatusOr<cudnnHandle_t> dnn();
  // cuBLAS (grouped GEMMs: ottr::GroupedGemm) is created on first use, in host pointer mode;
  // callers set its stream and workspace before each call.
  absl::StatusOr<cublasHandle_t> blas();

  // Algorithm cache: opaque values (serialised algorithm records) by shape key. The key must
  // contain everything the choice depends on; the library version and device are added here.
  // A miss in this instance's map consults the choices made by every instance in this process
  // (same library versions and device), so all executors of a process agree.
  bool LookupAlgo(const std::string& key, std::string* value) const;
  static void ClearProcessCacheForTesting();
  // Every choice this process made for ottr's small GEMM (keys ending " ottr2") also under the key
  // a programmatic executor looks up (" pdl" appended, LtGemm::Create), replacing what is there,
  // so a programmatic executor compiled after it launches the same kernels. Returns how many.
  static int ShareChoicesWithProgrammaticLaunchesForTesting();
  void StoreAlgo(const std::string& key, std::string value);
  int64_t cache_hits() const { return hits_; }
  int64_t cache_misses() const { return misses_; }
  // Algorithm searches (autotuning or heuristic queries after a cache miss): a second compile of
  // the same shape must run none. Ops that search call CountAlgoSearch().
  void CountAlgoSearch();
  int64_t algo_searches() const;
  // Writes the cache file (temporary file + rename); no-op without one.
  absl::Status Save() const;
  // "cublasLt 130100 cudnn 91900 device 'NVIDIA H200' sm_90": what invalidates cached choices.
  std::string VersionTag() const;

 private:
  CudaLibraries() = default;
  int device_ = 0;
  std::string device_name_;
  int cc_major_ = 0, cc_minor_ = 0;
  bool tf32_ = true;
  bool programmatic_ = false;
  LtHandle lt_;
  DnnHandle dnn_;
  bool dnn_created_ = false;
  BlasHandle blas_;
  bool blas_created_ = false;
  std::string cache_file_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::string> algos_;  // filled from the process cache on lookup
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
  int64_t searches_ = 0;
};

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_CUDA_LIBRARIES_H_
