// Reduce* on float64 (accumulated in double).
#include "runtime/cuda/kernels/reduction_impl.cuh"

namespace ottr::cuda::kernels {

cudaError_t LaunchReduceF64(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t s) {
  return reduce_impl::DispatchKind<double>(p, x, y, ws, s);
}

}  // namespace ottr::cuda::kernels
