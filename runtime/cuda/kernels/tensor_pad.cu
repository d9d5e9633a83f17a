// Pad (all modes), ottr::PadGrad and ottr::SliceGrad. See tensor_kernels.h.
#include <cstring>

#include "runtime/cuda/kernels/tensor_common.cuh"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::FloatAcc;
using tensor_impl::FromAcc;
using tensor_impl::GridFor;
using tensor_impl::ToAcc;
using tensor_impl::VisitFloatDtype;
using tensor_impl::VisitWidth;

constexpr int kThreads = 256;

// The input index along one axis for output position c, or -1 for the constant value.
template <PadMode M, typename I>
__device__ __forceinline__ I PadSource(I c, I pad_begin, I len, I crop) {
  const I j = c - pad_begin;
  if (j >= 0 && j < len) return crop + j;
  if constexpr (M == PadMode::kConstant) {
    return -1;
  } else if constexpr (M == PadMode::kEdge) {
    return crop + (j < 0 ? I(0) : len - 1);
  } else if constexpr (M == PadMode::kWrap) {
    return crop + ((j % len) + len) % len;
  } else {
    // reflect: a triangle wave of period 2 (len - 1) (NumPy's 'reflect').
    if (len == 1) return crop;
    const I period = 2 * (len - 1);
    I m = ((j % period) + period) % period;
    if (m >= len) m = period - m;
    return crop + m;
  }
}

template <typename E, typename I, PadMode M>
__global__ void __launch_bounds__(kThreads)
    PadKernel(const E* __restrict__ src, const unsigned char* __restrict__ value_ptr,
              E* __restrict__ dst, PadParams p) {
  // The pad element: the value's bytes repeated across the (possibly widened) element.
  E pad;
  {
    unsigned char bytes[sizeof(E)];
#pragma unroll
    for (int b = 0; b < static_cast<int>(sizeof(E)); ++b) {
      const int vb = b % p.value_bytes;
      bytes[b] = value_ptr != nullptr ? value_ptr[vb] : p.value[vb];
    }
    memcpy(&pad, bytes, sizeof(E));
  }
  const I n = static_cast<I>(p.numel);
  for (I i = static_cast<I>(blockIdx.x) * kThreads + static_cast<I>(threadIdx.x); i < n;
       i += static_cast<I>(gridDim.x) * kThreads) {
    I rem = i, off = 0;
    bool is_pad = false;
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 0; --d) {
      if (d < p.rank) {
        const I dim = static_cast<I>(p.out_dims[d]);
        const I q = rem / dim;
        const I c = rem - q * dim;
        rem = q;
        const I si = PadSource<M, I>(c, static_cast<I>(p.pad_begin[d]), static_cast<I>(p.len[d]),
                                     static_cast<I>(p.crop[d]));
        if (si < 0) {
          is_pad = true;
        } else {
          off += si * static_cast<I>(p.in_strides[d]);
        }
      }
    }
    dst[i] = is_pad ? pad : src[off];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    PadGradKernel(const T* __restrict__ dy, T* __restrict__ dx, PadGradParams p) {
  using A = FloatAcc<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < p.numel;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t beg[kTensorMaxDims], end[kTensorMaxDims], cur[kTensorMaxDims];
    int64_t rem = i;
    bool empty = false;
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 0; --d) {
      if (d < p.rank) {
        const int64_t q = rem / p.x_dims[d];
        const int64_t c = rem - q * p.x_dims[d];
        rem = q;
        beg[d] = p.offsets[d][c];
        end[d] = p.offsets[d][c + 1];
        cur[d] = beg[d];
        empty |= beg[d] == end[d];
      }
    }
    A acc = A(0);
    if (!empty) {
      // Odometer over the per-axis position lists, last axis fastest: increasing dy offsets.
      bool done = false;
      while (!done) {
        int64_t off = 0;
#pragma unroll
        for (int d = 0; d < kTensorMaxDims; ++d) {
          if (d < p.rank) off += p.lists[d][cur[d]] * p.dy_strides[d];
        }
        acc += static_cast<A>(ToAcc(dy[off]));
        done = true;
#pragma unroll
        for (int d = kTensorMaxDims - 1; d >= 0; --d) {
          if (d < p.rank && done) {
            if (++cur[d] < end[d]) {
              done = false;
            } else {
              cur[d] = beg[d];
            }
          }
        }
      }
    }
    dx[i] = FromAcc<T>(acc);
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    SliceGradKernel(const E* __restrict__ dy, E* __restrict__ dx, SliceGradParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < p.numel;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t rem = i, off = 0;
    bool hit = true;
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 0; --d) {
      if (d < p.rank) {
        const int64_t q = rem / p.x_dims[d];
        const int64_t c = rem - q * p.x_dims[d];
        rem = q;
        const int64_t step = p.step[d];
        const int64_t dist = step > 0 ? c - p.start[d] : p.start[d] - c;
        const int64_t st = step > 0 ? step : -step;
        if (dist < 0 || dist % st != 0 || dist / st >= p.count[d]) {
          hit = false;
        } else {
          off += (dist / st) * p.dy_strides[d];
        }
      }
    }
    dx[i] = hit ? dy[off] : E{};
  }
}

}  // namespace

cudaError_t Pad(const PadParams& p, const void* src, const void* value_ptr, void* dst, cudaStream_t s) {
  if (p.numel == 0) return cudaSuccess;
  if (p.rank < 1 || p.rank > kTensorMaxDims || p.value_bytes < 1 || p.value_bytes > 8 ||
      p.elem_bytes % p.value_bytes != 0) {
    return cudaErrorInvalidValue;
  }
  const unsigned grid = GridFor(p.numel, kThreads);
  const auto* v = static_cast<const unsigned char*>(value_ptr);
  return VisitWidth(p.elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    const E* x = static_cast<const E*>(src);
    E* y = static_cast<E*>(dst);
#define OTTR_PAD_LAUNCH_(MODE)                                                   \
  if (p.index32) {                                                               \
    PadKernel<E, int32_t, PadMode::MODE><<<grid, kThreads, 0, s>>>(x, v, y, p);  \
  } else {                                                                       \
    PadKernel<E, int64_t, PadMode::MODE><<<grid, kThreads, 0, s>>>(x, v, y, p);  \
  }
    switch (p.mode) {
      case PadMode::kConstant: OTTR_PAD_LAUNCH_(kConstant) break;
      case PadMode::kReflect: OTTR_PAD_LAUNCH_(kReflect) break;
      case PadMode::kEdge: OTTR_PAD_LAUNCH_(kEdge) break;
      case PadMode::kWrap: OTTR_PAD_LAUNCH_(kWrap) break;
      default: return cudaErrorInvalidValue;
    }
#undef OTTR_PAD_LAUNCH_
    return cudaGetLastError();
  });
}

bool PadGradSupported(int dtype) { return dtype == 1 || dtype == 10 || dtype == 11 || dtype == 16; }

cudaError_t PadGrad(const PadGradParams& p, int dtype, const void* dy, void* dx, cudaStream_t s) {
  if (p.numel == 0) return cudaSuccess;
  if (p.rank < 0 || p.rank > kTensorMaxDims) return cudaErrorInvalidValue;
  return VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    PadGradKernel<T><<<GridFor(p.numel, kThreads), kThreads, 0, s>>>(static_cast<const T*>(dy),
                                                                       static_cast<T*>(dx), p);
    return cudaGetLastError();
  });
}

cudaError_t SliceGrad(const SliceGradParams& p, const void* dy, void* dx, cudaStream_t s) {
  if (p.numel == 0) return cudaSuccess;
  if (p.rank < 0 || p.rank > kTensorMaxDims) return cudaErrorInvalidValue;
  return VisitWidth(p.elem_bytes, [&](auto tag) -> cudaError_t {
    using E = typename decltype(tag)::type;
    SliceGradKernel<E><<<GridFor(p.numel, kThreads), kThreads, 0, s>>>(static_cast<const E*>(dy),
                                                                         static_cast<E*>(dx), p);
    return cudaGetLastError();
  });
}

}  // namespace ottr::cuda::kernels
