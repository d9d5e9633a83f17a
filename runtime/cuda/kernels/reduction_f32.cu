// Reduce* on float32 (the training hot path: float4 loads when aligned).
#include "runtime/cuda/kernels/reduction_impl.cuh"

namespace ottr::cuda::kernels {

cudaError_t LaunchReduceF32(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t s) {
  return reduce_impl::DispatchKind<float>(p, x, y, ws, s);
}

}  // namespace ottr::cuda::kernels
