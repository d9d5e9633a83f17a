#include "runtime/cuda/cuda_ops.h"

namespace ottr::cuda {

void RegisterConvPoolCudaOps(CudaOpRegistry& r) {}

}  // namespace ottr::cuda
