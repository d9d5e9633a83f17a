// Indexing kernels: Gather, ottr::GatherGrad, GatherElements, ScatterElements and
// ottr::GatherElementsGrad. See tensor_kernels.h.
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/kernels/tensor_common.cuh"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::FloatAcc;
using tensor_impl::FromAcc;
using tensor_impl::GridFor;
using tensor_impl::kIsFloatLike;
using tensor_impl::kIsHalfLike;
using tensor_impl::ToAcc;
using tensor_impl::VisitDtype;
using tensor_impl::VisitFloatDtype;
using tensor_impl::VisitWidth;

constexpr int kThreads = 256;

// Calls f(TypeTag<Idx>{}) for int32 / int64 indices.
template <typename F>
cudaError_t VisitIndex(bool idx64, F&& f) {
  if (idx64) return f(tensor_impl::TypeTag<int64_t>{});
  return f(tensor_impl::TypeTag<int32_t>{});
}

// ---- Gather --------------------------------------------------------------------------------

template <typename E, typename Idx, typename I>
__global__ void __launch_bounds__(kThreads)
    GatherKernel(const E* __restrict__ data, const Idx* __restrict__ idx, E* __restrict__ out,
                 I total, I n, I m, I inner) {
  for (I e = static_cast<I>(blockIdx.x) * kThreads + static_cast<I>(threadIdx.x); e < total;
       e += static_cast<I>(gridDim.x) * kThreads) {
    const I t = e / inner;
    const I i = e - t * inner;
    const I o = t / m;
    const I j = t - o * m;
    int64_t v = static_cast<int64_t>(idx[j]);
    if (v < 0) v += n;
    out[e] = (v < 0 || v >= n) ? E{} : data[(o * n + static_cast<I>(v)) * inner + i];
  }
}

// ---- GatherGrad ------------------------------------------------------------------------------

constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int KeyBits(int64_t n) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= n) ++bits;  // keys in [0, n]
  return bits;
}

struct GatherGradLayout {
  unsigned* keys_in;
  unsigned* vals_in;
  unsigned* keys_out;
  unsigned* vals_out;
  unsigned* row_start;
  unsigned* row_end;
  void* temp;
  size_t temp_bytes;
};

size_t SortTempBytes(int64_t m, int64_t n) {
  size_t temp = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const unsigned*>(nullptr),
                                  static_cast<unsigned*>(nullptr), static_cast<const unsigned*>(nullptr),
                                  static_cast<unsigned*>(nullptr), static_cast<int>(m), 0, KeyBits(n));
  return temp;
}

GatherGradLayout Carve(void* ws, int64_t m, int64_t n) {
  char* p = static_cast<char*>(ws);
  GatherGradLayout l;
  const size_t mb = AlignUp(static_cast<size_t>(m) * 4), nb = AlignUp(static_cast<size_t>(n) * 4);
  l.keys_in = reinterpret_cast<unsigned*>(p);
  l.vals_in = reinterpret_cast<unsigned*>(p + mb);
  l.keys_out = reinterpret_cast<unsigned*>(p + 2 * mb);
  l.vals_out = reinterpret_cast<unsigned*>(p + 3 * mb);
  l.row_start = reinterpret_cast<unsigned*>(p + 4 * mb);
  l.row_end = reinterpret_cast<unsigned*>(p + 4 * mb + nb);
  l.temp = p + 4 * mb + 2 * nb;
  l.temp_bytes = SortTempBytes(m, n);
  return l;
}

// keys = the wrapped index (n for one out of range, which no dx row reads), vals = position.
template <typename Idx>
__global__ void __launch_bounds__(kThreads)
    GatherGradKeysKernel(const Idx* __restrict__ idx, unsigned* __restrict__ keys,
                         unsigned* __restrict__ vals, int64_t m, int64_t n) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; j < m;
       j += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t v = static_cast<int64_t>(idx[j]);
    if (v < 0) v += n;
    keys[j] = (v < 0 || v >= n) ? static_cast<unsigned>(n) : static_cast<unsigned>(v);
    vals[j] = static_cast<unsigned>(j);
  }
}

// Each run of equal sorted keys r < n is rows [row_start[r], row_end[r]) of the sorted pairs.
__global__ void __launch_bounds__(kThreads)
    GatherGradBoundsKernel(const unsigned* __restrict__ keys, unsigned* __restrict__ row_start,
                           unsigned* __restrict__ row_end, int64_t m, int64_t n) {
  for (int64_t q = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; q < m;
       q += static_cast<int64_t>(gridDim.x) * kThreads) {
    const unsigned k = keys[q];
    if (k >= static_cast<unsigned>(n)) continue;
    if (q == 0 || keys[q - 1] != k) row_start[k] = static_cast<unsigned>(q);
    if (q == m - 1 || keys[q + 1] != k) row_end[k] = static_cast<unsigned>(q + 1);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    GatherGradSumKernel(const T* __restrict__ dy, const unsigned* __restrict__ vals,
                        const unsigned* __restrict__ row_start, const unsigned* __restrict__ row_end,
                        T* __restrict__ dx, int64_t total, int64_t n, int64_t m, int64_t inner) {
  using A = FloatAcc<T>;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = e / inner;
    const int64_t i = e - t * inner;
    const int64_t o = t / n;
    const int64_t r = t - o * n;
    const unsigned b = row_start[r], en = row_end[r];
    A acc = A(0);
    for (unsigned q = b; q < en; ++q) acc += static_cast<A>(ToAcc(dy[(o * m + vals[q]) * inner + i]));
    dx[e] = FromAcc<T>(acc);
  }
}

// ---- GatherElements / ScatterElements / GatherElementsGrad ----------------------------------

template <typename E, typename Idx>
__global__ void __launch_bounds__(kThreads)
    GatherElementsKernel(const E* __restrict__ data, const Idx* __restrict__ idx, E* __restrict__ out,
                         ElementsParams p) {
  const int64_t n = p.data_dims[p.axis];
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < p.idx_numel;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t rem = k, off = 0;
#pragma unroll
    for (int d = kTensorMaxDims - 1; d >= 0; --d) {
      if (d < p.rank) {
        const int64_t q = rem / p.idx_dims[d];
        const int64_t c = rem - q * p.idx_dims[d];
        rem = q;
        if (d != p.axis) off += c * p.data_strides[d];
      }
    }
    int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0) v += n;
    out[k] = (v < 0 || v >= n) ? E{} : data[off + v * p.data_strides[p.axis]];
  }
}

// For data element e: whether its off-axis coordinates lie inside the index dims, the offset of
// its index line and its coordinate on the axis.
struct LinePos {
  bool in_range;
  int64_t line;
  int64_t c_axis;
};
__device__ __forceinline__ LinePos FindLine(int64_t e, const ElementsParams& p) {
  LinePos lp{true, 0, 0};
  int64_t rem = e;
#pragma unroll
  for (int d = kTensorMaxDims - 1; d >= 0; --d) {
    if (d < p.rank) {
      const int64_t q = rem / p.data_dims[d];
      const int64_t c = rem - q * p.data_dims[d];
      rem = q;
      if (d == p.axis) {
        lp.c_axis = c;
      } else {
        if (c >= p.idx_dims[d]) lp.in_range = false;
        lp.line += c * p.idx_strides[d];
      }
    }
  }
  return lp;
}

// a (op) b as the CPU's Combine: floats in float (float16/bfloat16) or natively, integers with
// two's-complement wrap-around, bool as or (add, max) / and (mul, min).
template <typename T>
__device__ __forceinline__ T ScatterCombine(T a, T b, int r) {
  if constexpr (std::is_same<T, bool>::value) {
    return (r == 1 || r == 3) ? (a || b) : (a && b);
  } else if constexpr (kIsFloatLike<T>) {
    const auto x = ToAcc(a), y = ToAcc(b);
    switch (r) {
      case 1: return FromAcc<T>(x + y);
      case 2: return FromAcc<T>(x * y);
      case 3: return (isnan(x) || x >= y) ? a : b;
      case 4: return (isnan(x) || x <= y) ? a : b;
      default: return b;
    }
  } else {
    switch (r) {
      case 1: return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case 2: return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case 3: return a > b ? a : b;
      case 4: return a < b ? a : b;
      default: return b;
    }
  }
}

template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    ScatterElementsKernel(const T* __restrict__ data, const Idx* __restrict__ idx,
                          const T* __restrict__ upd, T* __restrict__ out, ElementsParams p, int red) {
  const int64_t n = p.data_dims[p.axis];
  const int64_t len = p.idx_dims[p.axis], stride = p.idx_strides[p.axis];
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < p.data_numel;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    T v = data[e];
    const LinePos lp = FindLine(e, p);
    if (lp.in_range) {
      for (int64_t t = 0; t < len; ++t) {
        const int64_t q = lp.line + t * stride;
        int64_t iv = static_cast<int64_t>(idx[q]);
        if (iv < 0) iv += n;
        if (iv == lp.c_axis) v = red == 0 ? upd[q] : ScatterCombine<T>(v, upd[q], red);
      }
    }
    out[e] = v;
  }
}

template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    GatherElementsGradKernel(const T* __restrict__ dy, const Idx* __restrict__ idx,
                             T* __restrict__ dx, ElementsParams p) {
  using A = FloatAcc<T>;
  const int64_t n = p.data_dims[p.axis];
  const int64_t len = p.idx_dims[p.axis], stride = p.idx_strides[p.axis];
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < p.data_numel;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    A acc = A(0);
    const LinePos lp = FindLine(e, p);
    if (lp.in_range) {
      for (int64_t t = 0; t < len; ++t) {
        const int64_t q = lp.line + t * stride;
        int64_t iv = static_cast<int64_t>(idx[q]);
        if (iv < 0) iv += n;
        if (iv == lp.c_axis) acc += static_cast<A>(ToAcc(dy[q]));
      }
    }
    dx[e] = FromAcc<T>(acc);
  }
}

}  // namespace

cudaError_t Gather(const void* data, const void* indices, bool idx64, void* out, int elem_bytes,
                   int64_t outer, int64_t n, int64_t m, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * m * inner;
  if (total == 0) return cudaSuccess;
  const bool index32 = total < (int64_t{1} << 30) && outer * n * inner < (int64_t{1} << 30);
  const unsigned grid = GridFor(total, kThreads);
  return VisitWidth(elem_bytes, [&](auto wtag) -> cudaError_t {
    using E = typename decltype(wtag)::type;
    return VisitIndex(idx64, [&](auto itag) -> cudaError_t {
      using Idx = typename decltype(itag)::type;
      const E* d = static_cast<const E*>(data);
      const Idx* ix = static_cast<const Idx*>(indices);
      E* y = static_cast<E*>(out);
      if (index32) {
        GatherKernel<E, Idx, int32_t><<<grid, kThreads, 0, s>>>(d, ix, y, static_cast<int32_t>(total),
                                                                static_cast<int32_t>(n), static_cast<int32_t>(m),
                                                                static_cast<int32_t>(inner));
      } else {
        GatherKernel<E, Idx, int64_t><<<grid, kThreads, 0, s>>>(d, ix, y, total, n, m, inner);
      }
      return cudaGetLastError();
    });
  });
}

bool GatherGradSupported(int dtype) { return dtype == 1 || dtype == 10 || dtype == 11 || dtype == 16; }

size_t GatherGradWorkspaceBytes(int64_t m, int64_t n) {
  if (m == 0) return 0;
  return 4 * AlignUp(static_cast<size_t>(m) * 4) + 2 * AlignUp(static_cast<size_t>(n) * 4) +
         AlignUp(SortTempBytes(m, n));
}

cudaError_t GatherGrad(int dtype, const void* dy, const void* indices, bool idx64, void* dx,
                       int64_t outer, int64_t n, int64_t m, int64_t inner, void* workspace,
                       size_t workspace_bytes, cudaStream_t s) {
  const int64_t total = outer * n * inner;
  if (total == 0) return cudaSuccess;
  return VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (m == 0 || outer == 0 || inner == 0) {
      return cudaMemsetAsync(dx, 0, static_cast<size_t>(total) * sizeof(T), s);
    }
    if (workspace == nullptr || workspace_bytes < GatherGradWorkspaceBytes(m, n)) return cudaErrorInvalidValue;
    const GatherGradLayout l = Carve(workspace, m, n);
    cudaError_t e = VisitIndex(idx64, [&](auto itag) -> cudaError_t {
      using Idx = typename decltype(itag)::type;
      GatherGradKeysKernel<Idx><<<GridFor(m, kThreads), kThreads, 0, s>>>(static_cast<const Idx*>(indices),
                                                                         l.keys_in, l.vals_in, m, n);
      return cudaGetLastError();
    });
    if (e != cudaSuccess) return e;
    size_t temp_bytes = l.temp_bytes;
    e = cub::DeviceRadixSort::SortPairs(l.temp, temp_bytes, l.keys_in, l.keys_out, l.vals_in, l.vals_out,
                                        static_cast<int>(m), 0, KeyBits(n), s);
    if (e != cudaSuccess) return e;
    // row_start and row_end are adjacent: empty ranges [0, 0) for rows no index names.
    e = cudaMemsetAsync(l.row_start, 0, AlignUp(static_cast<size_t>(n) * 4) + static_cast<size_t>(n) * 4, s);
    if (e != cudaSuccess) return e;
    GatherGradBoundsKernel<<<GridFor(m, kThreads), kThreads, 0, s>>>(l.keys_out, l.row_start, l.row_end, m, n);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    GatherGradSumKernel<T><<<GridFor(total, kThreads), kThreads, 0, s>>>(
        static_cast<const T*>(dy), l.vals_out, l.row_start, l.row_end, static_cast<T*>(dx), total, n, m, inner);
    return cudaGetLastError();
  });
}

cudaError_t GatherElements(const ElementsParams& p, const void* data, const void* indices, bool idx64,
                           void* out, int elem_bytes, cudaStream_t s) {
  if (p.idx_numel == 0) return cudaSuccess;
  if (p.rank < 1 || p.rank > kTensorMaxDims) return cudaErrorInvalidValue;
  return VisitWidth(elem_bytes, [&](auto wtag) -> cudaError_t {
    using E = typename decltype(wtag)::type;
    return VisitIndex(idx64, [&](auto itag) -> cudaError_t {
      using Idx = typename decltype(itag)::type;
      GatherElementsKernel<E, Idx><<<GridFor(p.idx_numel, kThreads), kThreads, 0, s>>>(
          static_cast<const E*>(data), static_cast<const Idx*>(indices), static_cast<E*>(out), p);
      return cudaGetLastError();
    });
  });
}

bool ScatterElementsSupported(int dtype) {
  return VisitDtype(dtype, [](auto) { return cudaSuccess; }) == cudaSuccess;
}

cudaError_t ScatterElements(const ElementsParams& p, int dtype, int reduction, const void* data,
                            const void* indices, bool idx64, const void* updates, void* out,
                            cudaStream_t s) {
  if (p.data_numel == 0) return cudaSuccess;
  if (p.rank < 1 || p.rank > kTensorMaxDims || reduction < 0 || reduction > 4) return cudaErrorInvalidValue;
  return VisitDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    return VisitIndex(idx64, [&](auto itag) -> cudaError_t {
      using Idx = typename decltype(itag)::type;
      ScatterElementsKernel<T, Idx><<<GridFor(p.data_numel, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(data), static_cast<const Idx*>(indices), static_cast<const T*>(updates),
          static_cast<T*>(out), p, reduction);
      return cudaGetLastError();
    });
  });
}

bool GatherElementsGradSupported(int dtype) { return dtype == 1 || dtype == 10 || dtype == 11 || dtype == 16; }

cudaError_t GatherElementsGrad(const ElementsParams& p, int dtype, const void* dy, const void* indices,
                               bool idx64, void* dx, cudaStream_t s) {
  if (p.data_numel == 0) return cudaSuccess;
  if (p.rank < 1 || p.rank > kTensorMaxDims) return cudaErrorInvalidValue;
  return VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    return VisitIndex(idx64, [&](auto itag) -> cudaError_t {
      using Idx = typename decltype(itag)::type;
      GatherElementsGradKernel<T, Idx><<<GridFor(p.data_numel, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const Idx*>(indices), static_cast<T*>(dx), p);
      return cudaGetLastError();
    });
  });
}

}  // namespace ottr::cuda::kernels
