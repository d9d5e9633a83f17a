// Reduce* on 32- and 64-bit integers.
#include "runtime/cuda/kernels/reduction_impl.cuh"

namespace ottr::cuda::kernels {

cudaError_t LaunchReduceInt(const ReducePlan& p, const void* x, void* y, void* ws, cudaStream_t s) {
  switch (p.dtype) {
    case 6: return reduce_impl::DispatchKind<int32_t>(p, x, y, ws, s);
    case 7: return reduce_impl::DispatchKind<int64_t>(p, x, y, ws, s);
    case 12: return reduce_impl::DispatchKind<uint32_t>(p, x, y, ws, s);
    case 13: return reduce_impl::DispatchKind<uint64_t>(p, x, y, ws, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ottr::cuda::kernels
