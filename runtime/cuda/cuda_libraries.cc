#include "runtime/cuda/cuda_libraries.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_status.h"

namespace ottr::cuda {

bool FollowsOneKernel(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusActive) return status == cudaStreamCaptureStatusNone;
  cudaGraphNodeType type;
  return n == 1 && cudaGraphNodeGetType(deps[0], &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
}

absl::StatusOr<std::unique_ptr<CudaLibraries>> CudaLibraries::Create(bool tf32,
                                                                     std::string algo_cache_file) {
  auto libs = std::unique_ptr<CudaLibraries>(new CudaLibraries());
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&libs->device_));
  cudaDeviceProp prop;
  OTTR_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, libs->device_));
  libs->device_name_ = prop.name;
  libs->cc_major_ = prop.major;
  libs->cc_minor_ = prop.minor;
  libs->tf32_ = tf32;
  cublasLtHandle_t lt;
  OTTR_CUDA_RETURN_IF_ERROR(cublasLtCreate(&lt));
  libs->lt_ = LtHandle(lt);
  libs->cache_file_ = std::move(algo_cache_file);
  if (!libs->cache_file_.empty()) {
    std::ifstream in(libs->cache_file_);
    std::string header;
    if (in && std::getline(in, header) && header == libs->VersionTag()) {
      std::string key, value;
      while (std::getline(in, key) && std::getline(in, value)) libs->algos_[key] = value;
    }
    // A missing file, or one written for another library version or device, starts empty.
  }
  return libs;
}

CudaLibraries::~CudaLibraries() = default;

absl::StatusOr<cublasHandle_t> CudaLibraries::blas() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!blas_created_) {
    cublasHandle_t h;
    OTTR_CUDA_RETURN_IF_ERROR(cublasCreate_v2(&h));
    blas_ = BlasHandle(h);
    blas_created_ = true;
  }
  return blas_.get();
}

absl::StatusOr<cudnnHandle_t> CudaLibraries::dnn() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dnn_created_) {
    cudnnHandle_t h;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreate(&h));
    dnn_ = DnnHandle(h);
    dnn_created_ = true;
  }
  return dnn_.get();
}

std::string CudaLibraries::VersionTag() const {
  return absl::StrCat("ottr-algo-cache 1 cublasLt ", cublasLtGetVersion(), " cudnn ",
                      cudnnGetVersion(), " device '", device_name_, "' sm_", cc_major_, cc_minor_);
}

namespace {
// Choices made in this process, shared by every executor (keyed by the version tag too): two
// executors compiling the same shape use the same algorithm, so their results agree bit for bit
// even though autotuning by timing could pick differently each time.
struct ProcessAlgoCache {
  std::mutex mu;
  std::map<std::string, std::string> algos;
};
ProcessAlgoCache& ProcessCache() {
  static ProcessAlgoCache* cache = new ProcessAlgoCache();
  return *cache;
}
}  // namespace

void CudaLibraries::ClearProcessCacheForTesting() {
  ProcessAlgoCache& shared = ProcessCache();
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.algos.clear();
}

int CudaLibraries::ShareChoicesWithProgrammaticLaunchesForTesting() {
  ProcessAlgoCache& shared = ProcessCache();
  std::lock_guard<std::mutex> lock(shared.mu);
  std::vector<std::pair<std::string, std::string>> shared_choices;
  for (const auto& [key, value] : shared.algos) {
    if (absl::EndsWith(key, " ottr2")) shared_choices.emplace_back(key + " pdl", value);
  }
  for (auto& [key, value] : shared_choices) shared.algos[key] = std::move(value);
  return static_cast<int>(shared_choices.size());
}

bool CudaLibraries::LookupAlgo(const std::string& key, std::string* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    ProcessAlgoCache& shared = ProcessCache();
    std::lock_guard<std::mutex> shared_lock(shared.mu);
    auto s = shared.algos.find(VersionTag() + "\n" + key);
    if (s == shared.algos.end()) {
      ++misses_;
      return false;
    }
    it = algos_.emplace(key, s->second).first;
  }
  ++hits_;
  *value = it->second;
  return true;
}

void CudaLibraries::StoreAlgo(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  {
    ProcessAlgoCache& shared = ProcessCache();
    std::lock_guard<std::mutex> shared_lock(shared.mu);
    shared.algos[VersionTag() + "\n" + key] = value;
  }
  algos_[key] = std::move(value);
}

void CudaLibraries::CountAlgoSearch() {
  std::lock_guard<std::mutex> lock(mu_);
  ++searches_;
}

int64_t CudaLibraries::algo_searches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return searches_;
}

absl::Status CudaLibraries::Save() const {
  if (cache_file_.empty()) return absl::OkStatus();
  std::ostringstream out;
  out << VersionTag() << "\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : algos_) out << k << "\n" << v << "\n";
  }
  return importer::WriteFileAtomically(cache_file_, out.str());
}

}  // namespace ottr::cuda
