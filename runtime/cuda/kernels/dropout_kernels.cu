// Dropout kernels (see dropout_kernels.h). Elements are handled in groups of four, one Philox
// call per group; groups are loaded and stored as one vector when the pointers allow.
#include "runtime/cuda/kernels/dropout_kernels.h"

#include "runtime/cuda/kernels/norm_common.cuh"

namespace ottr::cuda::kernels {
namespace {

using nl::ComputeT;
using nl::FromC;
using nl::ToC;

// Philox4x32-10: 10 rounds of the 4x32 round function with the Weyl key schedule.
__device__ __forceinline__ uint4 Philox(uint4 c, uint2 k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(kM0, c.x), lo0 = kM0 * c.x;
    const uint32_t hi1 = __umulhi(kM1, c.z), lo1 = kM1 * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += kW0;
    k.y += kW1;
  }
  return c;
}

template <typename T>
struct alignas(sizeof(T) * 4) Vec4 {
  T v[4];
};

struct Launch {
  bool drop;                 // training and ratio != 0
  bool bad;                  // drop with ratio outside [0, 1)
  double scale;              // 1 / (1 − ratio)
  unsigned long long keep;   // keep iff the 32-bit draw r >= keep (= ceil(ratio · 2^32))
};

__device__ __forceinline__ Launch ReadScalars(const DropoutScalars& s) {
  Launch l;
  const double ratio = s.ratio != nullptr ? nl::LoadAny(s.ratio, s.ratio_dtype, 0) : s.ratio_value;
  const bool training = s.training != nullptr ? *s.training : s.training_value;
  l.drop = training && ratio != 0.0;
  l.bad = l.drop && !(ratio >= 0.0 && ratio < 1.0);
  l.scale = 1.0 / (1.0 - ratio);
  l.keep = l.bad ? 0ull : static_cast<unsigned long long>(ceil(ratio * 4294967296.0));
  return l;
}

template <typename T>
__global__ void DropoutKernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64_t n,
                              DropoutScalars s, uint2 key, DropoutState* state, bool vec) {
  using C = ComputeT<T>;
  __shared__ unsigned long long launch;
  if (threadIdx.x == 0) launch = *reinterpret_cast<volatile unsigned long long*>(&state->launches);
  __syncthreads();
  const Launch l = ReadScalars(s);
  const C scale = static_cast<C>(l.scale);
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i0 = 4 * g;
    const bool full = vec && i0 + 4 <= n;
    T in[4];
    if (full) {
      const Vec4<T> v = *reinterpret_cast<const Vec4<T>*>(x + i0);
#pragma unroll
      for (int j = 0; j < 4; ++j) in[j] = v.v[j];
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) in[j] = i0 + j < n ? x[i0 + j] : T();
    }
    T out[4];
    bool keep[4] = {true, true, true, true};
    if (!l.drop) {
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = in[j];
    } else {
      const uint4 r = Philox(make_uint4(static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                                        static_cast<uint32_t>(launch), static_cast<uint32_t>(launch >> 32)),
                             key);
      const uint32_t rr[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        keep[j] = rr[j] >= l.keep;
        const C v = keep[j] ? ToC(in[j]) * scale : C(0);
        out[j] = FromC<T>(l.bad ? nl::QuietNaN<C>() : v);
      }
    }
    if (full) {
      Vec4<T> v;
#pragma unroll
      for (int j = 0; j < 4; ++j) v.v[j] = out[j];
      *reinterpret_cast<Vec4<T>*>(y + i0) = v;
      if (mask != nullptr) {
        *reinterpret_cast<uchar4*>(mask + i0) = make_uchar4(keep[0], keep[1], keep[2], keep[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (i0 + j < n) {
          y[i0 + j] = out[j];
          if (mask != nullptr) mask[i0 + j] = keep[j];
        }
      }
    }
  }
  // The last block to finish advances the launch counter (every block has read it by then).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned int done = atomicAdd(&state->blocks_done, 1u);
    if (done == gridDim.x - 1) {
      state->launches = launch + 1;
      state->blocks_done = 0;
      __threadfence();
    }
  }
}

template <typename T>
__global__ void DropoutGradKernel(const T* __restrict__ dy, const bool* __restrict__ mask, T* __restrict__ dx,
                                  int64_t n, DropoutScalars s, bool vec) {
  using C = ComputeT<T>;
  const Launch l = ReadScalars(s);
  const C scale = static_cast<C>(l.scale);
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i0 = 4 * g;
    if (vec && i0 + 4 <= n) {
      const Vec4<T> d = *reinterpret_cast<const Vec4<T>*>(dy + i0);
      Vec4<T> o;
      if (!l.drop) {
        o = d;
      } else {
        const uchar4 m = *reinterpret_cast<const uchar4*>(mask + i0);
        const bool keep[4] = {m.x != 0, m.y != 0, m.z != 0, m.w != 0};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o.v[j] = FromC<T>(l.bad ? nl::QuietNaN<C>() : keep[j] ? ToC(d.v[j]) * scale : C(0));
        }
      }
      *reinterpret_cast<Vec4<T>*>(dx + i0) = o;
    } else {
      for (int64_t i = i0; i < i0 + 4 && i < n; ++i) {
        if (!l.drop) {
          dx[i] = dy[i];
        } else {
          dx[i] = FromC<T>(l.bad ? nl::QuietNaN<C>() : mask[i] ? ToC(dy[i]) * scale : C(0));
        }
      }
    }
  }
}

bool Aligned16(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

cudaError_t LaunchDropout(int dtype, const void* x, void* y, bool* mask, int64_t n, const DropoutScalars& s,
                          uint64_t seed, DropoutState* state, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const int grid = nl::GridFor(nl::CeilDiv(n, 4), 256, nl::SmCount() * 8);
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = Aligned16(x, 4 * sizeof(T)) && Aligned16(y, 4 * sizeof(T)) && (mask == nullptr || Aligned16(mask, 4));
    DropoutKernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), mask, n, s, key, state,
                                               vec);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchDropoutGrad(int dtype, const void* dy, const bool* mask, void* dx, int64_t n, const DropoutScalars& s,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int grid = nl::GridFor(nl::CeilDiv(n, 4), 256, nl::SmCount() * 8);
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = Aligned16(dy, 4 * sizeof(T)) && Aligned16(dx, 4 * sizeof(T)) && Aligned16(mask, 4);
    DropoutGradKernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(dy), mask, static_cast<T*>(dx), n, s, vec);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ottr::cuda::kernels
