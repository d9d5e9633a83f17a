#include "runtime/cuda/kernels/pool_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "runtime/cuda/kernels/tensor_common.cuh"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::FloatAcc;
using tensor_impl::FromAcc;
using tensor_impl::GridFor;
using tensor_impl::ToAcc;
using tensor_impl::TypeTag;

constexpr int kThreads = 256;

// ND > 0: the number of spatial axes known at compile time (loops unroll); 0: g.nd at run time.
template <int ND>
__device__ __forceinline__ int Axes(const PoolGeometry& g) {
  return ND > 0 ? ND : g.nd;
}

// Row-major coordinates of flat index `flat` over dims[0..nd).
template <int ND>
__device__ __forceinline__ void Unflatten(const PoolGeometry& g, int64_t flat, const int64_t* dims, int64_t* pos) {
  for (int d = Axes<ND>(g) - 1; d >= 0; --d) {
    pos[d] = flat % dims[d];
    flat /= dims[d];
  }
}

template <int ND>
__device__ __forceinline__ int64_t Flatten(const PoolGeometry& g, const int64_t* pos, const int64_t* dims) {
  int64_t flat = 0;
  for (int d = 0; d < Axes<ND>(g); ++d) flat = flat * dims[d] + pos[d];
  return flat;
}

// The window of output position `pos`: per axis the first image index `start` (maybe in the
// padding) and the taps j in [lo, hi) that fall inside the image.
struct Window {
  int64_t start[kPoolMaxDims];
  int64_t lo[kPoolMaxDims];
  int64_t hi[kPoolMaxDims];
  bool empty;
};

template <int ND>
__device__ __forceinline__ void SetWindow(const PoolGeometry& g, const int64_t* pos, Window& w) {
  w.empty = false;
  for (int d = 0; d < Axes<ND>(g); ++d) {
    const int64_t st = pos[d] * g.stride[d] - g.pad_begin[d];
    const int64_t dil = g.dilation[d];
    const int64_t lo = st < 0 ? (-st + dil - 1) / dil : 0;
    const int64_t rem = g.image[d] - st;
    int64_t hi = rem <= 0 ? 0 : (rem + dil - 1) / dil;
    if (hi > g.kernel[d]) hi = g.kernel[d];
    w.start[d] = st;
    w.lo[d] = lo;
    w.hi[d] = hi;
    if (lo >= hi) w.empty = true;
  }
}

// Taps inside the image.
template <int ND>
__device__ __forceinline__ int64_t InsideCount(const PoolGeometry& g, const Window& w) {
  if (w.empty) return 0;
  int64_t n = 1;
  for (int d = 0; d < Axes<ND>(g); ++d) n *= w.hi[d] - w.lo[d];
  return n;
}

// Taps inside the padded image (index < image + pad_end; every tap is >= -pad_begin).
template <int ND>
__device__ __forceinline__ int64_t PaddedCount(const PoolGeometry& g, const Window& w) {
  int64_t n = 1;
  for (int d = 0; d < Axes<ND>(g); ++d) {
    const int64_t rem = g.image[d] + g.pad_end[d] - w.start[d];
    int64_t c = rem <= 0 ? 0 : (rem + g.dilation[d] - 1) / g.dilation[d];
    if (c > g.kernel[d]) c = g.kernel[d];
    n *= c;
  }
  return n;
}

// Calls f(row, col) for every tap of `w` inside the image in row-major tap order: its row-major
// and column-major offsets in the plane.
template <int ND, typename F>
__device__ __forceinline__ void ForTaps(const PoolGeometry& g, const Window& w, F&& f) {
  if (w.empty) return;
  const int nd = Axes<ND>(g);
  int64_t j[kPoolMaxDims];
  for (int d = 0; d < nd; ++d) j[d] = w.lo[d];
  for (;;) {
    int64_t row = 0, col = 0, col_stride = 1;
    for (int d = 0; d < nd; ++d) {
      const int64_t i = w.start[d] + j[d] * g.dilation[d];
      row = row * g.image[d] + i;
      col += i * col_stride;
      col_stride *= g.image[d];
    }
    f(row, col);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++j[d] < w.hi[d]) break;
      j[d] = w.lo[d];
    }
    if (d < 0) return;
  }
}

// Calls f(o, pos) for every output position o (flat, increasing) whose window contains image
// element `c` (coordinates): per axis the positions o with c + pad_begin − o·stride a
// non-negative multiple of the dilation below kernel · dilation.
template <int ND, typename F>
__device__ __forceinline__ void ForWindowsContaining(const PoolGeometry& g, const int64_t* c, F&& f) {
  const int nd = Axes<ND>(g);
  int64_t lo[kPoolMaxDims], hi[kPoolMaxDims], o[kPoolMaxDims];
  for (int d = 0; d < nd; ++d) {
    const int64_t a = c[d] + g.pad_begin[d];  // = o·stride + j·dilation, >= 0
    const int64_t s = g.stride[d];
    int64_t h = a / s;
    if (h > g.positions[d] - 1) h = g.positions[d] - 1;
    const int64_t b = a - (g.kernel[d] - 1) * g.dilation[d];
    const int64_t l = b <= 0 ? 0 : (b + s - 1) / s;
    if (l > h) return;
    lo[d] = l;
    hi[d] = h;
    o[d] = l;
  }
  for (;;) {
    bool hit = true;
    for (int d = 0; d < nd; ++d) hit &= (c[d] + g.pad_begin[d] - o[d] * g.stride[d]) % g.dilation[d] == 0;
    if (hit) f(Flatten<ND>(g, o, g.positions), o);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++o[d] <= hi[d]) break;
      o[d] = lo[d];
    }
    if (d < 0) return;
  }
}

// MaxPool compares floats (float16/bfloat16 widened) in their accumulator type and integers as
// they are.
template <typename T>
using MaxCmp = std::conditional_t<std::is_integral<T>::value, T, FloatAcc<T>>;

template <typename V>
__device__ __forceinline__ bool IsNan(V v) {
  if constexpr (std::is_floating_point<V>::value) {
    return isnan(v);
  } else {
    return false;
  }
}

template <typename T>
__device__ __forceinline__ MaxCmp<T> LoadCmp(T v) {
  if constexpr (std::is_integral<T>::value) {
    return v;
  } else {
    return ToAcc(v);
  }
}

template <typename T>
__device__ __forceinline__ T EmptyMax() {
  if constexpr (std::is_integral<T>::value) {
    return std::numeric_limits<T>::lowest();
  } else {
    return FromAcc<T>(-std::numeric_limits<FloatAcc<T>>::infinity());
  }
}

// ArgMax of the window (the first maximum, or the first NaN): its row-major offset in the plane
// (-1 when the window lies in the padding) and its column-major offset in *col.
// `step`: the distance between consecutive elements of the plane (1; channels-last: C).
template <typename T, int ND>
__device__ __forceinline__ int64_t WindowArgMax(const PoolGeometry& g, const T* src, const Window& w, int64_t* col,
                                                int64_t step = 1) {
  using C = MaxCmp<T>;
  C best{};
  int64_t index = -1;
  int64_t best_col = -1;
  ForTaps<ND>(g, w, [&](int64_t row, int64_t c) {
    const C v = LoadCmp(src[row * step]);
    if (index < 0 || v > best || (IsNan(v) && !IsNan(best))) {
      best = v;
      index = row;
      best_col = c;
    }
  });
  *col = best_col;
  return index;
}

template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    MaxPoolKernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices, PoolGeometry g,
                  int64_t isize, int64_t osize, bool column_major) {
  const int64_t total = g.planes * osize;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / osize;
    int64_t pos[kPoolMaxDims];
    Unflatten<ND>(g, i - plane * osize, g.positions, pos);
    Window w;
    SetWindow<ND>(g, pos, w);
    const T* src = x + plane * isize;
    int64_t col;
    const int64_t index = WindowArgMax<T, ND>(g, src, w, &col);
    if (y != nullptr) y[i] = index < 0 ? EmptyMax<T>() : src[index];
    if (indices != nullptr) indices[i] = index < 0 ? -1 : plane * isize + (column_major ? col : index);
  }
}

template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    MaxPoolGradKernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, PoolGeometry g,
                      int64_t isize, int64_t osize, bool relu_mask) {
  using A = FloatAcc<T>;
  const int64_t total = g.planes * isize;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / isize;
    const int64_t r = i - plane * isize;
    int64_t c[kPoolMaxDims];
    Unflatten<ND>(g, r, g.image, c);
    const T* src = x + plane * isize;
    const T* grad = dy + plane * osize;
    A acc = A(0);
    ForWindowsContaining<ND>(g, c, [&](int64_t o, const int64_t* pos) {
      Window w;
      SetWindow<ND>(g, pos, w);
      int64_t col;
      if (WindowArgMax<T, ND>(g, src, w, &col) == r) acc += ToAcc(grad[o]);
    });
    if (relu_mask && !(ToAcc(x[i]) > A(0))) acc = A(0);
    dx[i] = FromAcc<T>(acc);
  }
}

// ---- Tiled fast path -------------------------------------------------------------------------
// The common pooling geometry (2-D after Normalized, kernel == stride, dilation 1, no begin
// padding, every window inside the image: floor mode): the windows tile the image without
// overlap, so one thread owns one window. MaxPool reads the window once; MaxPoolGrad finds the
// window's argmax and writes every element of the window (dY there, 0 elsewhere), and the blocks
// past the last full window (the rows / columns a floor-mode pool never reads) are written with
// zeros by the threads of the partial blocks: every dX element is written exactly once, with no
// memset or atomics. KH, KW > 0: the kernel extent known at compile time; kVec: each window row
// is read (and, for the gradient, written) as one aligned vector of KW elements.
struct TiledGeometry {
  int64_t planes;
  int64_t h, w;    // image
  int64_t ph, pw;  // positions (windows)
  int64_t kh, kw;  // kernel == stride
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

// Elements [0, kw) of one window row: one aligned vector load with kVec, else kw loads.
template <typename T, int KW, bool kVec>
__device__ __forceinline__ void LoadRow(const T* p, int64_t kw, T* out) {
  if constexpr (kVec) {
    const Packed<T, KW> v = *reinterpret_cast<const Packed<T, KW>*>(p);
#pragma unroll
    for (int b = 0; b < KW; ++b) out[b] = v.v[b];
  } else {
    const int64_t n = KW > 0 ? KW : kw;
    for (int64_t b = 0; b < n; ++b) out[b] = p[b];
  }
}

// The ONNX rule of WindowArgMax (the first maximum in row-major tap order, or the first NaN),
// over the window whose top-left element is `src`; returns its (row, column) within the window.
template <typename T, int KH, int KW, bool kVec>
__device__ __forceinline__ void TiledArgMax(const T* src, const TiledGeometry& g, int64_t* br, int64_t* bc, T* bv) {
  using C = MaxCmp<T>;
  const int64_t kh = KH > 0 ? KH : g.kh;
  const int64_t kw = KW > 0 ? KW : g.kw;
  C best{};
  T best_raw{};
  int64_t r_best = 0, c_best = 0;
  bool first = true;
  for (int64_t a = 0; a < kh; ++a) {
    if constexpr (KW > 0) {
      T row[KW];
      LoadRow<T, KW, kVec>(src + a * g.w, kw, row);
#pragma unroll
      for (int b = 0; b < KW; ++b) {
        const C v = LoadCmp(row[b]);
        if (first || v > best || (IsNan(v) && !IsNan(best))) {
          best = v;
          best_raw = row[b];
          r_best = a;
          c_best = b;
          first = false;
        }
      }
    } else {
      for (int64_t b = 0; b < kw; ++b) {
        const T raw = src[a * g.w + b];
        const C v = LoadCmp(raw);
        if (first || v > best || (IsNan(v) && !IsNan(best))) {
          best = v;
          best_raw = raw;
          r_best = a;
          c_best = b;
          first = false;
        }
      }
    }
  }
  *br = r_best;
  *bc = c_best;
  *bv = best_raw;
}

// I: the thread index type (uint32_t when every index fits, else int64_t).
template <typename T, int KH, int KW, bool kVec, typename I>
__global__ void __launch_bounds__(kThreads)
    TiledMaxPoolKernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices, TiledGeometry g,
                       bool column_major) {
  const I pw = static_cast<I>(g.pw);
  const I osize = static_cast<I>(g.ph * g.pw);
  const I total = static_cast<I>(g.planes) * osize;
  const int64_t isize = g.h * g.w;
  const int64_t kh = KH > 0 ? KH : g.kh;
  const int64_t kw = KW > 0 ? KW : g.kw;
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * kThreads) {
    const I plane = i / osize;
    const I r = i - plane * osize;
    const I oh = r / pw;
    const I ow = r - oh * pw;
    const int64_t top = static_cast<int64_t>(oh) * kh, left = static_cast<int64_t>(ow) * kw;
    const T* src = x + static_cast<int64_t>(plane) * isize + top * g.w + left;
    int64_t br, bc;
    T bv;
    TiledArgMax<T, KH, KW, kVec>(src, g, &br, &bc, &bv);
    if (y != nullptr) y[i] = bv;
    if (indices != nullptr) {
      const int64_t row = top + br, col = left + bc;
      indices[i] = static_cast<int64_t>(plane) * isize + (column_major ? col * g.h + row : row * g.w + col);
    }
  }
}

// Threads over the blocks of kh x kw elements covering the image (the last block row / column
// may be partial: those lie past the last full window and get zeros).
template <typename T, int KH, int KW, bool kVec, typename I>
__global__ void __launch_bounds__(kThreads)
    TiledMaxPoolGradKernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, TiledGeometry g,
                           bool relu_mask) {
  using A = FloatAcc<T>;
  const int64_t kh = KH > 0 ? KH : g.kh;
  const int64_t kw = KW > 0 ? KW : g.kw;
  const I bh = static_cast<I>((g.h + kh - 1) / kh), bw = static_cast<I>((g.w + kw - 1) / kw);
  const I bsize = bh * bw;
  const I total = static_cast<I>(g.planes) * bsize;
  const int64_t isize = g.h * g.w;
  const T zero = FromAcc<T>(A(0));
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * kThreads) {
    const I plane = i / bsize;
    const I r = i - plane * bsize;
    const I ob = r / bw;
    const I cb = r - ob * bw;
    const int64_t top = static_cast<int64_t>(ob) * kh, left = static_cast<int64_t>(cb) * kw;
    const int64_t offset = static_cast<int64_t>(plane) * isize + top * g.w + left;
    T* dst = dx + offset;
    if (static_cast<int64_t>(ob) < g.ph && static_cast<int64_t>(cb) < g.pw) {
      int64_t br, bc;
      T bv;
      TiledArgMax<T, KH, KW, kVec>(x + offset, g, &br, &bc, &bv);
      // 0 + dY, as the reference adds dY into a zero-filled dX (-0 becomes +0).
      const T grad = relu_mask && !(ToAcc(bv) > A(0))
                         ? zero
                         : FromAcc<T>(A(0) + ToAcc(dy[static_cast<int64_t>(plane) * (g.ph * g.pw) +
                                                      static_cast<int64_t>(ob) * g.pw + cb]));
      for (int64_t a = 0; a < kh; ++a) {
        if constexpr (kVec) {
          Packed<T, KW> v;
#pragma unroll
          for (int b = 0; b < KW; ++b) v.v[b] = a == br && b == bc ? grad : zero;
          *reinterpret_cast<Packed<T, KW>*>(dst + a * g.w) = v;
        } else {
          for (int64_t b = 0; b < kw; ++b) dst[a * g.w + b] = a == br && b == bc ? grad : zero;
        }
      }
    } else {
      // A partial block: the rows / columns inside the image.
      const int64_t rows = min(kh, g.h - top), cols = min(kw, g.w - left);
      for (int64_t a = 0; a < rows; ++a) {
        for (int64_t b = 0; b < cols; ++b) dst[a * g.w + b] = zero;
      }
    }
  }
}

// ---- Channels-last (NHWC) ---------------------------------------------------------------------
// Thread i owns element i of the output (forward) or of dX (backward) in [N, spatial..., C] order,
// so the threads of a warp take consecutive channels of one position: every load and store is
// coalesced. The windows and the argmax rule are the channels-first kernels' (element (n, s, c) of
// the plane (n, c) sits at (n · size + s) · C + c).
template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    MaxPoolNhwcKernel(const T* __restrict__ x, T* __restrict__ y, PoolGeometry g, int64_t isize, int64_t osize,
                      int64_t channels) {
  const int64_t total = g.planes * osize * channels;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t c = i % channels, rest = i / channels;
    const int64_t n = rest / osize;
    int64_t pos[kPoolMaxDims];
    Unflatten<ND>(g, rest - n * osize, g.positions, pos);
    Window w;
    SetWindow<ND>(g, pos, w);
    const T* src = x + n * isize * channels + c;
    int64_t col;
    const int64_t index = WindowArgMax<T, ND>(g, src, w, &col, channels);
    y[i] = index < 0 ? EmptyMax<T>() : src[index * channels];
  }
}

template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    MaxPoolGradNhwcKernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, PoolGeometry g,
                          int64_t isize, int64_t osize, int64_t channels, bool relu_mask) {
  using A = FloatAcc<T>;
  const int64_t total = g.planes * isize * channels;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t c = i % channels, rest = i / channels;
    const int64_t n = rest / isize;
    const int64_t r = rest - n * isize;
    int64_t at[kPoolMaxDims];
    Unflatten<ND>(g, r, g.image, at);
    const T* src = x + n * isize * channels + c;
    const T* grad = dy + n * osize * channels + c;
    A acc = A(0);
    ForWindowsContaining<ND>(g, at, [&](int64_t o, const int64_t* pos) {
      Window w;
      SetWindow<ND>(g, pos, w);
      int64_t col;
      if (WindowArgMax<T, ND>(g, src, w, &col, channels) == r) acc += ToAcc(grad[o * channels]);
    });
    if (relu_mask && !(ToAcc(x[i]) > A(0))) acc = A(0);
    dx[i] = FromAcc<T>(acc);
  }
}

// The tiled fast path channels-last: one thread per (window, channel); t.planes = N. The argmax
// rule of TiledArgMax over elements `col_step` apart within a row and `row_step` between rows.
template <typename T, int K>
__device__ __forceinline__ void StridedArgMax(const T* src, int64_t row_step, int64_t col_step, int64_t kh,
                                              int64_t kw, int64_t* br, int64_t* bc, T* bv) {
  using C = MaxCmp<T>;
  const int64_t nh = K > 0 ? K : kh, nw = K > 0 ? K : kw;
  C best{};
  T best_raw{};
  int64_t r_best = 0, c_best = 0;
  bool first = true;
#pragma unroll
  for (int64_t a = 0; a < nh; ++a) {
#pragma unroll
    for (int64_t b = 0; b < nw; ++b) {
      const T raw = src[a * row_step + b * col_step];
      const C v = LoadCmp(raw);
      if (first || v > best || (IsNan(v) && !IsNan(best))) {
        best = v;
        best_raw = raw;
        r_best = a;
        c_best = b;
        first = false;
      }
    }
  }
  *br = r_best;
  *bc = c_best;
  *bv = best_raw;
}

template <typename T, int K, typename I>
__global__ void __launch_bounds__(kThreads)
    TiledMaxPoolNhwcKernel(const T* __restrict__ x, T* __restrict__ y, TiledGeometry g, I channels) {
  const I pw = static_cast<I>(g.pw), ph = static_cast<I>(g.ph);
  const I total = static_cast<I>(g.planes) * ph * pw * channels;
  const int64_t kh = K > 0 ? K : g.kh, kw = K > 0 ? K : g.kw;
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * kThreads) {
    const I c = i % channels;
    I r = i / channels;
    const I ow = r % pw;
    r /= pw;
    const I oh = r % ph;
    const I n = r / ph;
    const int64_t base = ((static_cast<int64_t>(n) * g.h + oh * kh) * g.w + ow * kw) * channels + c;
    int64_t br, bc;
    T bv;
    StridedArgMax<T, K>(x + base, g.w * channels, channels, kh, kw, &br, &bc, &bv);
    y[i] = bv;
  }
}

// Threads over (kh x kw block, channel) of dX; blocks past the last full window get zeros.
template <typename T, int K, typename I>
__global__ void __launch_bounds__(kThreads)
    TiledMaxPoolGradNhwcKernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                               TiledGeometry g, I channels, bool relu_mask) {
  using A = FloatAcc<T>;
  const int64_t kh = K > 0 ? K : g.kh, kw = K > 0 ? K : g.kw;
  const I bh = static_cast<I>((g.h + kh - 1) / kh), bw = static_cast<I>((g.w + kw - 1) / kw);
  const I total = static_cast<I>(g.planes) * bh * bw * channels;
  const T zero = FromAcc<T>(A(0));
  const int64_t row_step = g.w * channels;
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * kThreads) {
    const I c = i % channels;
    I r = i / channels;
    const I cb = r % bw;
    r /= bw;
    const I ob = r % bh;
    const I n = r / bh;
    const int64_t top = static_cast<int64_t>(ob) * kh, left = static_cast<int64_t>(cb) * kw;
    const int64_t base = ((static_cast<int64_t>(n) * g.h + top) * g.w + left) * channels + c;
    T* dst = dx + base;
    if (static_cast<int64_t>(ob) < g.ph && static_cast<int64_t>(cb) < g.pw) {
      int64_t br, bc;
      T bv;
      StridedArgMax<T, K>(x + base, row_step, channels, kh, kw, &br, &bc, &bv);
      const int64_t o = ((static_cast<int64_t>(n) * g.ph + ob) * g.pw + cb) * channels + c;
      // 0 + dY, as the reference (-0 -> +0); with relu_mask 0 unless the chosen X is > 0.
      const T grad = relu_mask && !(ToAcc(bv) > A(0)) ? zero : FromAcc<T>(A(0) + ToAcc(dy[o]));
#pragma unroll
      for (int64_t a = 0; a < (K > 0 ? K : kh); ++a) {
#pragma unroll
        for (int64_t b = 0; b < (K > 0 ? K : kw); ++b) dst[a * row_step + b * channels] = a == br && b == bc ? grad : zero;
      }
    } else {
      const int64_t rows = min(kh, g.h - top), cols = min(kw, g.w - left);
      for (int64_t a = 0; a < rows; ++a) {
        for (int64_t b = 0; b < cols; ++b) dst[a * row_step + b * channels] = zero;
      }
    }
  }
}

// AveragePool (lp = false) or LpPool, summed in double.
template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    AverageOrLpPoolKernel(const T* __restrict__ x, T* __restrict__ y, PoolGeometry g, int64_t isize, int64_t osize,
                          bool lp, double p, bool count_include_pad) {
  const int64_t total = g.planes * osize;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / osize;
    int64_t pos[kPoolMaxDims];
    Unflatten<ND>(g, i - plane * osize, g.positions, pos);
    Window w;
    SetWindow<ND>(g, pos, w);
    const T* src = x + plane * isize;
    double sum = 0.0;
    ForTaps<ND>(g, w, [&](int64_t row, int64_t) {
      const double v = static_cast<double>(ToAcc(src[row]));
      sum += !lp ? v : p == 2.0 ? v * v : pow(fabs(v), p);
    });
    double out;
    if (lp) {
      out = p == 2.0 ? sqrt(sum) : pow(sum, 1.0 / p);
    } else {
      const int64_t count = count_include_pad ? PaddedCount<ND>(g, w) : InsideCount<ND>(g, w);
      out = count == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(count);
    }
    y[i] = FromAcc<T>(out);
  }
}

template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    AveragePoolGradKernel(const T* __restrict__ dy, T* __restrict__ dx, PoolGeometry g, int64_t isize,
                          int64_t osize, bool count_include_pad) {
  using A = FloatAcc<T>;
  const int64_t total = g.planes * isize;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / isize;
    int64_t c[kPoolMaxDims];
    Unflatten<ND>(g, i - plane * isize, g.image, c);
    const T* grad = dy + plane * osize;
    A acc = A(0);
    ForWindowsContaining<ND>(g, c, [&](int64_t o, const int64_t* pos) {
      Window w;
      SetWindow<ND>(g, pos, w);
      // The window contains this element, so it has at least one tap inside the image.
      const int64_t count = count_include_pad ? PaddedCount<ND>(g, w) : InsideCount<ND>(g, w);
      const A inv = A(1) / static_cast<A>(count);
      acc += ToAcc(grad[o]) * inv;
    });
    dx[i] = FromAcc<T>(acc);
  }
}

template <typename T, int ND>
__global__ void __launch_bounds__(kThreads)
    LpPoolGradKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ dx,
                     PoolGeometry g, int64_t isize, int64_t osize, double p) {
  using A = FloatAcc<T>;
  const int64_t total = g.planes * isize;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / isize;
    int64_t c[kPoolMaxDims];
    Unflatten<ND>(g, i - plane * isize, g.image, c);
    const T* grad = dy + plane * osize;
    const T* out = y + plane * osize;
    const double v = static_cast<double>(ToAcc(x[i]));
    // sign(x) |x|^(p-1)
    const double d = p == 1.0 ? (v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0) : p == 2.0 ? v : copysign(pow(fabs(v), p - 1.0), v);
    A acc = A(0);
    ForWindowsContaining<ND>(g, c, [&](int64_t o, const int64_t*) {
      const double yo = static_cast<double>(ToAcc(out[o]));
      if (!(yo > 0.0)) return;  // y = 0: a subgradient of 0
      const double scale = static_cast<double>(ToAcc(grad[o])) / (p == 2.0 ? yo : pow(yo, p - 1.0));
      acc += static_cast<A>(scale * d);
    });
    dx[i] = FromAcc<T>(acc);
  }
}

// One warp per plane; lanes stride the plane, then a butterfly over the warp (fixed order).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GlobalPoolKernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t size, int kind, double p) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  for (int64_t plane = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32; plane < planes;
       plane += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* src = x + plane * size;
    if (kind == static_cast<int>(GlobalPoolKind::kMax)) {
      using C = FloatAcc<T>;
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t k = lane; k < size; k += 32) {
        const C v = ToAcc(src[k]);
        if (!isnan(m) && (isnan(v) || v > m)) m = v;
      }
      for (int off = 16; off > 0; off >>= 1) {
        const C o = __shfl_xor_sync(0xffffffffu, m, off);
        if (!isnan(m) && (isnan(o) || o > m)) m = o;
      }
      if (lane == 0) y[plane] = FromAcc<T>(m);
    } else {
      double sum = 0.0;
      for (int64_t k = lane; k < size; k += 32) {
        const double v = static_cast<double>(ToAcc(src[k]));
        sum += kind == static_cast<int>(GlobalPoolKind::kAverage) ? v : pow(fabs(v), p);
      }
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) {
        double r;
        if (kind == static_cast<int>(GlobalPoolKind::kAverage)) {
          r = size == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(size);
        } else {
          r = pow(sum, 1.0 / p);
        }
        y[plane] = FromAcc<T>(r);
      }
    }
  }
}

// V consecutive elements per thread (one aligned vector when V > 1; spatial is a multiple of V,
// so they share one channel). I: the index type (uint32_t when the indices fit in 31 bits).
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kThreads)
    AddChannelBiasKernel(const T* __restrict__ bias, T* __restrict__ y, I vectors, I channels, I spatial_vectors) {
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < vectors;
       i += static_cast<I>(gridDim.x) * kThreads) {
    const I c = (i / spatial_vectors) % channels;
    const auto b = ToAcc(bias[c]);
    Packed<T, V>* p = reinterpret_cast<Packed<T, V>*>(y) + i;
    Packed<T, V> v = *p;
#pragma unroll
    for (int k = 0; k < V; ++k) v.v[k] = FromAcc<T>(ToAcc(v.v[k]) + b);
    *p = v;
  }
}

// A 1-D geometry as a 2-D one of height 1 (so it takes the unrolled 2-D path).
PoolGeometry Normalized(const PoolGeometry& in) {
  if (in.nd != 1) return in;
  PoolGeometry g;
  g.nd = 2;
  g.planes = in.planes;
  g.image[0] = 1;
  g.positions[0] = 1;
  g.kernel[0] = 1;
  g.stride[0] = 1;
  g.dilation[0] = 1;
  g.pad_begin[0] = 0;
  g.pad_end[0] = 0;
  g.image[1] = in.image[0];
  g.positions[1] = in.positions[0];
  g.kernel[1] = in.kernel[0];
  g.stride[1] = in.stride[0];
  g.dilation[1] = in.dilation[0];
  g.pad_begin[1] = in.pad_begin[0];
  g.pad_end[1] = in.pad_end[0];
  return g;
}

bool Valid(const PoolGeometry& g) {
  if (g.nd < 1 || g.nd > kPoolMaxDims || g.planes < 0) return false;
  for (int d = 0; d < g.nd; ++d) {
    if (g.kernel[d] < 1 || g.stride[d] < 1 || g.dilation[d] < 1 || g.image[d] < 0 || g.positions[d] < 0 ||
        g.pad_begin[d] < 0) {
      return false;
    }
  }
  return true;
}

int64_t Size(const int64_t* dims, int nd) {
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) n *= dims[d];
  return n;
}

// Calls f(std::integral_constant<int, ND>) with ND = 2 for two spatial axes, else 0 (run time).
template <typename F>
cudaError_t VisitAxes(const PoolGeometry& g, F&& f) {
  if (g.nd == 2) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 0>{});
}

template <typename F>
cudaError_t VisitMaxDtype(int dtype, F&& f) {
  switch (dtype) {
    case 2: return f(TypeTag<uint8_t>{});
    case 3: return f(TypeTag<int8_t>{});
    case 4: return f(TypeTag<uint16_t>{});
    case 5: return f(TypeTag<int16_t>{});
    case 6: return f(TypeTag<int32_t>{});
    case 7: return f(TypeTag<int64_t>{});
    case 12: return f(TypeTag<uint32_t>{});
    case 13: return f(TypeTag<uint64_t>{});
    default: return tensor_impl::VisitFloatDtype(dtype, f);
  }
}


// The tiled geometry of g (after Normalized) when the fast path applies.
bool Tiled(const PoolGeometry& g, TiledGeometry* t) {
  if (g.nd != 2) return false;
  for (int d = 0; d < 2; ++d) {
    if (g.dilation[d] != 1 || g.pad_begin[d] != 0 || g.kernel[d] != g.stride[d] ||
        g.positions[d] * g.kernel[d] > g.image[d]) {
      return false;
    }
  }
  t->planes = g.planes;
  t->h = g.image[0];
  t->w = g.image[1];
  t->ph = g.positions[0];
  t->pw = g.positions[1];
  t->kh = g.kernel[0];
  t->kw = g.kernel[1];
  return true;
}

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls f(std::integral_constant<int, K>, std::bool_constant<kVec>, TypeTag<I>) for the tiled
// kernel variant: K = 2 for 2x2 windows (kVec when rows are read as aligned pairs: an even width
// and `pointers` aligned to two elements), else K = 0 (the extent at run time); I = uint32_t when
// the `total` thread indices fit in 31 bits.
template <typename T, typename F>
cudaError_t VisitTiledVariant(const TiledGeometry& t, int64_t total, std::initializer_list<const void*> pointers,
                              F&& f) {
  auto with_index = [&](auto k, auto vec) -> cudaError_t {
    if (total < (int64_t{1} << 31)) return f(k, vec, TypeTag<uint32_t>{});
    return f(k, vec, TypeTag<int64_t>{});
  };
  if (t.kh == 2 && t.kw == 2) {
    bool vec = t.w % 2 == 0;
    for (const void* p : pointers) vec = vec && (p == nullptr || Aligned(p, 2 * sizeof(T)));
    if (vec) return with_index(std::integral_constant<int, 2>{}, std::true_type{});
    return with_index(std::integral_constant<int, 2>{}, std::false_type{});
  }
  return with_index(std::integral_constant<int, 0>{}, std::false_type{});
}

}  // namespace

bool MaxPoolSupported(int dtype) {
  return VisitMaxDtype(dtype, [](auto) { return cudaSuccess; }) == cudaSuccess;
}

bool FloatPoolSupported(int dtype) {
  return tensor_impl::VisitFloatDtype(dtype, [](auto) { return cudaSuccess; }) == cudaSuccess;
}

cudaError_t MaxPool(int dtype, const PoolGeometry& geometry, bool column_major, const void* x, void* y,
                    int64_t* indices, cudaStream_t s) {
  if (!Valid(geometry)) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * osize;
  if (total == 0 || (y == nullptr && indices == nullptr)) return cudaSuccess;
  TiledGeometry t;
  const bool tiled = Tiled(g, &t);
  return VisitMaxDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (tiled) {
      return VisitTiledVariant<T>(t, total, {x}, [&](auto k, auto vec, auto index) -> cudaError_t {
        using I = typename decltype(index)::type;
        TiledMaxPoolKernel<T, decltype(k)::value, decltype(k)::value, decltype(vec)::value, I>
            <<<GridFor(total, kThreads), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), indices, t,
                                                           column_major);
        return cudaGetLastError();
      });
    }
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      MaxPoolKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), indices, g, isize, osize, column_major);
      return cudaGetLastError();
    });
  });
}

cudaError_t MaxPoolGrad(int dtype, const PoolGeometry& geometry, const void* dy, const void* x, void* dx,
                        bool relu_mask, cudaStream_t s) {
  if (!Valid(geometry)) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * isize;
  if (total == 0) return cudaSuccess;
  TiledGeometry t;
  const bool tiled = Tiled(g, &t);
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (tiled) {
      // One thread per kh x kw block of the image.
      const int64_t blocks = g.planes * ((t.h + t.kh - 1) / t.kh) * ((t.w + t.kw - 1) / t.kw);
      return VisitTiledVariant<T>(t, blocks, {x, dx}, [&](auto k, auto vec, auto index) -> cudaError_t {
        using I = typename decltype(index)::type;
        TiledMaxPoolGradKernel<T, decltype(k)::value, decltype(k)::value, decltype(vec)::value, I>
            <<<GridFor(blocks, kThreads), kThreads, 0, s>>>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                                            static_cast<T*>(dx), t, relu_mask);
        return cudaGetLastError();
      });
    }
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      MaxPoolGradKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), g, isize, osize, relu_mask);
      return cudaGetLastError();
    });
  });
}

namespace {

// Calls f(std::integral_constant<int, K>, TypeTag<I>): K = 2 for 2x2 windows, else 0; I =
// uint32_t when `total` fits in 31 bits.
template <typename F>
cudaError_t VisitNhwcVariant(const TiledGeometry& t, int64_t total, F&& f) {
  auto with_index = [&](auto k) -> cudaError_t {
    if (total < (int64_t{1} << 31)) return f(k, TypeTag<uint32_t>{});
    return f(k, TypeTag<int64_t>{});
  };
  if (t.kh == 2 && t.kw == 2) return with_index(std::integral_constant<int, 2>{});
  return with_index(std::integral_constant<int, 0>{});
}

}  // namespace

cudaError_t MaxPoolChannelsLast(int dtype, const PoolGeometry& geometry, int64_t channels, const void* x, void* y,
                                cudaStream_t s) {
  if (!Valid(geometry) || channels < 1) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * osize * channels;
  if (total == 0 || y == nullptr) return cudaSuccess;
  TiledGeometry t;
  const bool tiled = Tiled(g, &t);
  return VisitMaxDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (tiled) {
      return VisitNhwcVariant(t, total, [&](auto k, auto index) -> cudaError_t {
        using I = typename decltype(index)::type;
        TiledMaxPoolNhwcKernel<T, decltype(k)::value, I><<<GridFor(total, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(x), static_cast<T*>(y), t, static_cast<I>(channels));
        return cudaGetLastError();
      });
    }
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      MaxPoolNhwcKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), g, isize, osize, channels);
      return cudaGetLastError();
    });
  });
}

cudaError_t MaxPoolGradChannelsLast(int dtype, const PoolGeometry& geometry, int64_t channels, const void* dy,
                                    const void* x, void* dx, bool relu_mask, cudaStream_t s) {
  if (!Valid(geometry) || channels < 1) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * isize * channels;
  if (total == 0) return cudaSuccess;
  TiledGeometry t;
  const bool tiled = Tiled(g, &t);
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (tiled) {
      const int64_t blocks = g.planes * ((t.h + t.kh - 1) / t.kh) * ((t.w + t.kw - 1) / t.kw) * channels;
      return VisitNhwcVariant(t, blocks, [&](auto k, auto index) -> cudaError_t {
        using I = typename decltype(index)::type;
        TiledMaxPoolGradNhwcKernel<T, decltype(k)::value, I><<<GridFor(blocks, kThreads), kThreads, 0, s>>>(
            static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), t, static_cast<I>(channels),
            relu_mask);
        return cudaGetLastError();
      });
    }
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      MaxPoolGradNhwcKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), g, isize, osize, channels,
          relu_mask);
      return cudaGetLastError();
    });
  });
}

namespace {

cudaError_t LaunchAverageOrLp(int dtype, const PoolGeometry& geometry, bool lp, int64_t p, bool count_include_pad,
                              const void* x, void* y, cudaStream_t s) {
  if (!Valid(geometry) || (lp && p < 1)) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * osize;
  if (total == 0) return cudaSuccess;
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      AverageOrLpPoolKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), g, isize, osize, lp, static_cast<double>(p),
          count_include_pad);
      return cudaGetLastError();
    });
  });
}

}  // namespace

cudaError_t AveragePool(int dtype, const PoolGeometry& g, bool count_include_pad, const void* x, void* y,
                        cudaStream_t s) {
  return LaunchAverageOrLp(dtype, g, false, 2, count_include_pad, x, y, s);
}

cudaError_t LpPool(int dtype, const PoolGeometry& g, int64_t p, const void* x, void* y, cudaStream_t s) {
  return LaunchAverageOrLp(dtype, g, true, p, false, x, y, s);
}

cudaError_t AveragePoolGrad(int dtype, const PoolGeometry& geometry, bool count_include_pad, const void* dy,
                            void* dx, cudaStream_t s) {
  if (!Valid(geometry)) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * isize;
  if (total == 0) return cudaSuccess;
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      AveragePoolGradKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<T*>(dx), g, isize, osize, count_include_pad);
      return cudaGetLastError();
    });
  });
}

cudaError_t LpPoolGrad(int dtype, const PoolGeometry& geometry, int64_t p, const void* dy, const void* x,
                       const void* y, void* dx, cudaStream_t s) {
  if (!Valid(geometry) || p < 1) return cudaErrorInvalidValue;
  const PoolGeometry g = Normalized(geometry);
  const int64_t isize = Size(g.image, g.nd), osize = Size(g.positions, g.nd);
  const int64_t total = g.planes * isize;
  if (total == 0) return cudaSuccess;
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    return VisitAxes(g, [&](auto nd) -> cudaError_t {
      LpPoolGradKernel<T, decltype(nd)::value><<<GridFor(total, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(y), static_cast<T*>(dx), g,
          isize, osize, static_cast<double>(p));
      return cudaGetLastError();
    });
  });
}

cudaError_t GlobalPool(int dtype, GlobalPoolKind kind, int64_t p, int64_t planes, int64_t size, const void* x,
                       void* y, cudaStream_t s) {
  if (planes < 0 || size < 0 || (kind == GlobalPoolKind::kLp && p < 1)) return cudaErrorInvalidValue;
  if (planes == 0) return cudaSuccess;
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    // One warp per plane: planes · 32 threads.
    GlobalPoolKernel<T><<<GridFor(planes * 32, kThreads, 65535), kThreads, 0, s>>>(
        static_cast<const T*>(x), static_cast<T*>(y), planes, size, static_cast<int>(kind), static_cast<double>(p));
    return cudaGetLastError();
  });
}

cudaError_t AddChannelBias(int dtype, int64_t batch, int64_t channels, int64_t spatial, const void* bias, void* y,
                           cudaStream_t s) {
  const int64_t total = batch * channels * spatial;
  if (total == 0) return cudaSuccess;
  if (channels < 1 || spatial < 1) return cudaErrorInvalidValue;
  return tensor_impl::VisitFloatDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const int v = (spatial % 4 == 0 && Aligned(y, 4 * sizeof(T))) ? 4 : 1;
    const int64_t vectors = total / v;
    auto launch = [&](auto vec, auto index) -> cudaError_t {
      using I = typename decltype(index)::type;
      AddChannelBiasKernel<T, decltype(vec)::value, I><<<GridFor(vectors, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(bias), static_cast<T*>(y), static_cast<I>(vectors), static_cast<I>(channels),
          static_cast<I>(spatial / v));
      return cudaGetLastError();
    };
    const bool small = total < (int64_t{1} << 31);
    if (v == 4) {
      return small ? launch(std::integral_constant<int, 4>{}, TypeTag<uint32_t>{})
                   : launch(std::integral_constant<int, 4>{}, TypeTag<int64_t>{});
    }
    return small ? launch(std::integral_constant<int, 1>{}, TypeTag<uint32_t>{})
                 : launch(std::integral_constant<int, 1>{}, TypeTag<int64_t>{});
  });
}

}  // namespace ottr::cuda::kernels
