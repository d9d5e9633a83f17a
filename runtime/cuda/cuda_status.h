// Turns CUDA runtime, cuBLAS(Lt) and cuDNN status codes into absl::Status with the failing
// expression and file:line. Out-of-memory maps to ResourceExhausted; everything else is Internal.
#ifndef OTTR_RUNTIME_CUDA_CUDA_STATUS_H_
#define OTTR_RUNTIME_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "absl/status/status.h"

namespace ottr::cuda {

absl::Status CudaStatus(cudaError_t e, const char* expr, const char* file, int line);
absl::Status CudaStatus(cublasStatus_t e, const char* expr, const char* file, int line);
absl::Status CudaStatus(cudnnStatus_t e, const char* expr, const char* file, int line);

}  // namespace ottr::cuda

// Evaluates `expr` (a cudaError_t, cublasStatus_t or cudnnStatus_t) and returns a Status when it
// failed.
#define OTTR_CUDA_RETURN_IF_ERROR(expr)                                                     \
  do {                                                                                     \
    ::absl::Status _ottr_cuda_status = ::ottr::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__); \
    if (!_ottr_cuda_status.ok()) return _ottr_cuda_status;                                 \
  } while (0)

// After a kernel launch: the launch error (bad configuration, ...) if any.
#define OTTR_CUDA_CHECK_LAUNCH() OTTR_CUDA_RETURN_IF_ERROR(cudaGetLastError())

#endif  // OTTR_RUNTIME_CUDA_CUDA_STATUS_H_
