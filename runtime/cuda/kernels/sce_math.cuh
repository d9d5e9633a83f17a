// The softmax cross-entropy's per-element math shared by the loss kernels (loss_kernels.cu) and
// the fused classifier head (linear_sce_relu_grad.cu), so both round as the CPU reference does.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_SCE_MATH_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_SCE_MATH_CUH_

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/kernels/norm_common.cuh"

namespace ottr::cuda::kernels::sce {

using nl::ComputeT;
using nl::FromC;
using nl::ToC;

__device__ __forceinline__ double NaN() { return __longlong_as_double(0x7ff8000000000000LL); }

// exp in the compute type: expf for float32 and the 16-bit types (within 2 ulp), exp for double.
// The SCE kernels take their exponentials this way (sums in double): on the H200 the double exp
// of every element twice made the fused loss and gradient on [4096, 1000] take 33 µs, compute
// bound on FP64. Its error is below the rounding of log_prob to float32 (|lp| · 2^-24 relative).
template <typename C>
__device__ __forceinline__ C ExpC(C x) {
  if constexpr (std::is_same_v<C, double>) {
    return exp(x);
  } else {
    return expf(x);
  }
}

// dlogits[i, j] of a row with label y, from its rounded log_prob `l`.
template <typename T, typename G>
__device__ __forceinline__ G SceGradAt(double l, int64_t j, int64_t y, int64_t c, int64_t ignore, double eps,
                                       double scale) {
  double v;
  if (y == ignore) {
    v = 0.0;
  } else if (y < 0 || y >= c) {
    v = NaN();
  } else {
    const double target = (j == y ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
    v = (static_cast<double>(ExpC(static_cast<ComputeT<T>>(l))) - target) * scale;
  }
  return FromC<G>(ToC(FromC<T>(v)));
}

}  // namespace ottr::cuda::kernels::sce

#endif  // OTTR_RUNTIME_CUDA_KERNELS_SCE_MATH_CUH_
