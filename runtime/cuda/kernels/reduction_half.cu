// Reduce* on float16 and bfloat16 (accumulated in float).
#include "runtime/cuda/kernels/reduction_impl.cuh"

namespace ottr::cuda::kernels {

cudaError_t LaunchReduceHalf(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t s) {
  if (p.dtype == 10) return reduce_impl::DispatchKind<__half>(p, x, y, ws, s);
  if (p.dtype == 16) return reduce_impl::DispatchKind<__nv_bfloat16>(p, x, y, ws, s);
  return cudaErrorInvalidValue;
}

}  // namespace ottr::cuda::kernels
