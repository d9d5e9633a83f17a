// ottr::ReduceProdGrad (see reduction_kernels.h). One unit (a warp, or a 256-thread block for
// groups of more than 4096 elements) per group: pass 1 reduces the product of the group's non-zero
// elements and its zero count (in double, fixed combination tree), pass 2 writes dx for every
// element of the group.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda/kernels/reduction_impl.cuh"
#include "runtime/cuda/kernels/reduction_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using reduce_impl::DecomposeOffset;
using reduce_impl::NarrowFloat;
using reduce_impl::ShflXor;
using reduce_impl::Widen;

template <typename T>
__global__ void __launch_bounds__(256) ProdGradKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                      T* __restrict__ dx, ReducePlan p) {
  int64_t g;
  int tid, nt;
  if (p.block_unit) {
    g = blockIdx.x;
    tid = threadIdx.x;
    nt = blockDim.x;
  } else {
    g = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    tid = threadIdx.x & 31;
    nt = 32;
  }
  const bool active = g < p.num_out;
  double prod = 1.0;
  long long zeros = 0;
  int64_t base = 0;
  if (active) {
    base = DecomposeOffset(g, p.num_kept, p.kept_dims, p.kept_strides);
    for (int64_t j = tid; j < p.count; j += nt) {
      const double v = static_cast<double>(Widen(x[base + DecomposeOffset(j, p.num_red, p.red_dims, p.red_strides)]));
      if (v == 0.0) {
        ++zeros;
      } else {
        prod *= v;
      }
    }
  }
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    prod *= ShflXor(prod, mask);
    zeros += ShflXor(zeros, mask);
  }
  if (p.block_unit) {
    __shared__ double sp[32];
    __shared__ long long sz[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      sp[warp] = prod;
      sz[warp] = zeros;
    }
    __syncthreads();
    if (warp == 0) {
      const bool has = lane < static_cast<int>(blockDim.x >> 5);
      prod = has ? sp[lane] : 1.0;
      zeros = has ? sz[lane] : 0;
#pragma unroll
      for (int mask = 16; mask > 0; mask >>= 1) {
        prod *= ShflXor(prod, mask);
        zeros += ShflXor(zeros, mask);
      }
      if (lane == 0) {
        sp[0] = prod;
        sz[0] = zeros;
      }
    }
    __syncthreads();
    prod = sp[0];
    zeros = sz[0];
  }
  if (!active) return;
  const double g_dy = static_cast<double>(Widen(dy[g]));
  for (int64_t j = tid; j < p.count; j += nt) {
    const int64_t off = base + DecomposeOffset(j, p.num_red, p.red_dims, p.red_strides);
    const double v = static_cast<double>(Widen(x[off]));
    double others = 0.0;
    if (zeros == 0) {
      others = prod / v;
    } else if (zeros == 1 && v == 0.0) {
      others = prod;
    }
    dx[off] = NarrowFloat<T>(g_dy * others);
  }
}

template <typename T>
cudaError_t Launch(const ReducePlan& p, const void* x, const void* dy, void* dx, cudaStream_t s) {
  const int64_t blocks = p.block_unit ? p.num_out : (p.num_out + 7) / 8;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  ProdGradKernel<T><<<static_cast<unsigned>(blocks), 256, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), p);
  return cudaGetLastError();
}

}  // namespace

bool ReduceProdGradSupported(int dtype) {
  return dtype == 1 || dtype == 10 || dtype == 11 || dtype == 16;
}

cudaError_t LaunchReduceProdGrad(const ReducePlan& plan, const void* x, const void* dy, void* dx,
                                 cudaStream_t stream) {
  if (plan.num_out == 0 || plan.count == 0) return cudaSuccess;
  switch (plan.dtype) {
    case 1: return Launch<float>(plan, x, dy, dx, stream);
    case 10: return Launch<__half>(plan, x, dy, dx, stream);
    case 11: return Launch<double>(plan, x, dy, dx, stream);
    case 16: return Launch<__nv_bfloat16>(plan, x, dy, dx, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ottr::cuda::kernels
