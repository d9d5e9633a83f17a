// Reduce* on 8-bit integers and bool (ReduceMax = any, ReduceMin = all).
#include "runtime/cuda/kernels/reduction_impl.cuh"

namespace ottr::cuda::kernels {

cudaError_t LaunchReduceSmallInt(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t s) {
  switch (p.dtype) {
    case 2: return reduce_impl::DispatchKind<uint8_t>(p, x, y, ws, s);
    case 3: return reduce_impl::DispatchKind<int8_t>(p, x, y, ws, s);
    case 9: return reduce_impl::DispatchKind<bool>(p, x, y, ws, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ottr::cuda::kernels
