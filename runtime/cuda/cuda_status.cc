#include "runtime/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace ottr::cuda {

absl::Status CudaStatus(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(e), " (",
                                       cudaGetErrorString(e), ")");
  return e == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(msg) : absl::InternalError(msg);
}

absl::Status CudaStatus(cublasStatus_t e, const char* expr, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": cuBLAS status ",
                                       static_cast<int>(e));
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (e == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

absl::Status CudaStatus(cudnnStatus_t e, const char* expr, const char* file, int line) {
  if (e == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(file, ":", line, ": ", expr, ": ", cudnnGetErrorString(e));
  if (e == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (e == CUDNN_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(msg);
  return absl::InternalError(msg);
}

}  // namespace ottr::cuda
