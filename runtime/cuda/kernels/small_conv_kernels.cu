#include "runtime/cuda/kernels/small_conv_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/kernels/tensor_common.cuh"

namespace ottr::cuda::kernels {
namespace {

using tensor_impl::GridFor;
using tensor_impl::TypeTag;

constexpr int kThreads = 256;
// Filter gradient: at most this many blocks of partials (4 per SM of an H200), and at least
// kMinTiles tiles of output rows per block.
constexpr int64_t kMaxBlocks = 528;
constexpr int64_t kMinTiles = 2;

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

template <typename T>
__device__ __forceinline__ float ToF(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

template <typename T>
__device__ __forceinline__ T FromF(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

// A tile of up to R consecutive output rows of one image, and the input rows they read staged in
// shared memory as float with the padding written as zeros: stage_rows = (R − 1)·stride +
// (kh − 1)·dilation + 1 rows of span = (ow − 1)·stride + (kw − 1)·dilation + 1 columns starting
// at row oy0·stride − pad and column −pad, C values each. Every tap is then a shared-memory read
// without bounds checks, one staging (and two barriers) serves R rows, and the threads have
// R · ow · K / V independent outputs to overlap their latencies.
struct Tiling {
  int rows;        // R: output rows per tile
  int per_image;   // tiles per image: ceil(oh / R)
  int span;        // staged columns
  int stage_rows;  // staged input rows
  int size;        // floats staged: stage_rows · span · C
};

constexpr int kMaxStage = 4096;  // floats (16 KiB)

__host__ __device__ inline Tiling TilingOf(const SmallConvGeometry& g) {
  Tiling t;
  t.span = static_cast<int>((g.ow - 1) * g.stride_w + (g.kw - 1) * g.dil_w + 1);
  for (t.rows = static_cast<int>(g.oh < 8 ? g.oh : 8); t.rows > 1; --t.rows) {
    const int64_t stage_rows = (t.rows - 1) * g.stride_h + (g.kh - 1) * g.dil_h + 1;
    if (stage_rows * t.span * g.c <= kMaxStage) break;
  }
  t.stage_rows = static_cast<int>((t.rows - 1) * g.stride_h + (g.kh - 1) * g.dil_h + 1);
  t.size = t.stage_rows * t.span * static_cast<int>(g.c);
  t.per_image = static_cast<int>((g.oh + t.rows - 1) / t.rows);
  return t;
}

template <typename T>
__device__ __forceinline__ void StageTile(const T* __restrict__ x, const SmallConvGeometry& g, const Tiling& tl,
                                          int n, int oy0, float* __restrict__ stage) {
  const int cc = static_cast<int>(g.c), w = static_cast<int>(g.w), h = static_cast<int>(g.h);
  const int iy0 = oy0 * static_cast<int>(g.stride_h) - static_cast<int>(g.pad_h);
  const int ix0 = -static_cast<int>(g.pad_w);
  const int per_row = tl.span * cc;
  const T* xn = x + static_cast<int64_t>(n) * h * w * cc;
  for (int i = threadIdx.x; i < tl.size; i += blockDim.x) {
    const int r = i / per_row, rest = i - r * per_row;
    const int col = rest / cc, c = rest - col * cc;
    const int iy = iy0 + r, ix = ix0 + col;
    stage[i] = iy >= 0 && iy < h && ix >= 0 && ix < w ? ToF(xn[(static_cast<int64_t>(iy) * w + ix) * cc + c]) : 0.0f;
  }
}

// The taps of output (row r of the tile, column ox) from the staged rows. KH, KW, C > 0: the
// window at compile time.
template <int KH, int KW, int C>
__device__ __forceinline__ void ReadTaps(const float* __restrict__ stage, const SmallConvGeometry& g,
                                         const Tiling& tl, int r, int ox, float* t) {
  const int kh = KH > 0 ? KH : static_cast<int>(g.kh);
  const int kw = KW > 0 ? KW : static_cast<int>(g.kw);
  const int cc = C > 0 ? C : static_cast<int>(g.c);
  const int row0 = r * static_cast<int>(g.stride_h), col0 = ox * static_cast<int>(g.stride_w);
  const int dh = static_cast<int>(g.dil_h), dw = static_cast<int>(g.dil_w);
#pragma unroll
  for (int a = 0; a < (KH > 0 ? KH : kSmallConvTaps); ++a) {
    if (KH == 0 && a >= kh) break;
#pragma unroll
    for (int b = 0; b < (KW > 0 ? KW : kSmallConvTaps); ++b) {
      if (KW == 0 && b >= kw) break;
      const float* p = stage + ((row0 + a * dh) * tl.span + col0 + b * dw) * cc;
#pragma unroll
      for (int c = 0; c < (C > 0 ? C : kSmallConvTaps); ++c) {
        if (C == 0 && c >= cc) break;
        const int j = (a * kw + b) * cc + c;
        if (j < kSmallConvTaps) t[j] = p[c];
      }
    }
  }
}

// Grid-stride over tiles: the block stages the tile's input, then thread (kg = tid % groups,
// slot = tid / groups) computes V consecutive channels kg·V.. of the tile's outputs slot,
// slot + slots, ... (row-major over rows × columns), from its weights in registers (loaded once,
// when V · taps <= 64; else from shared memory), and writes each as one vector.
template <typename T, int KH, int KW, int C, int V>
__global__ void __launch_bounds__(kThreads)
    SmallConvForwardKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                           T* __restrict__ y, SmallConvGeometry g, bool relu) {
  constexpr int kTaps = (KH > 0 && KW > 0 && C > 0) ? KH * KW * C : kSmallConvTaps;
  constexpr bool kWeightsInRegisters = KH > 0 && KW > 0 && C > 0 && V * kTaps <= 64;
  extern __shared__ float smem[];
  const int taps = static_cast<int>(g.kh * g.kw * g.c);
  const int K = static_cast<int>(g.k);
  float* sw = smem;                // [k][kh][kw][c]
  float* stage = smem + K * taps;  // the staged input rows
  const Tiling tl = TilingOf(g);
  for (int i = threadIdx.x; i < K * taps; i += blockDim.x) sw[i] = ToF(w[i]);
  __syncthreads();
  const int groups = K / V;
  const int slots = blockDim.x / groups;
  const int kg = threadIdx.x % groups, slot = threadIdx.x / groups;
  float wr[kWeightsInRegisters ? V : 1][kWeightsInRegisters ? kTaps : 1];
  float br[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int k = (kg * V + v) % K;
    br[v] = bias != nullptr ? ToF(bias[k]) : 0.0f;
    if constexpr (kWeightsInRegisters) {
#pragma unroll
      for (int j = 0; j < kTaps; ++j) wr[v][j] = sw[k * taps + j];
    }
  }
  const int ow = static_cast<int>(g.ow), oh = static_cast<int>(g.oh);
  const int tiles = static_cast<int>(g.n) * tl.per_image;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int n = tile / tl.per_image, oy0 = (tile - n * tl.per_image) * tl.rows;
    const int rows = min(tl.rows, oh - oy0);
    __syncthreads();  // the previous tile's taps are read
    StageTile(x, g, tl, n, oy0, stage);
    __syncthreads();
    if (slot >= slots) continue;
    Packed<T, V>* yt = reinterpret_cast<Packed<T, V>*>(y + (static_cast<int64_t>(n) * oh + oy0) * ow * K);
    for (int item = slot; item < rows * ow; item += slots) {
      const int r = item / ow, ox = item - r * ow;
      float t[kSmallConvTaps];
      ReadTaps<KH, KW, C>(stage, g, tl, r, ox, t);
      Packed<T, V> out;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float acc = br[v];
#pragma unroll
        for (int j = 0; j < kTaps; ++j) {
          if (kTaps == kSmallConvTaps && j >= taps) break;
          if constexpr (kWeightsInRegisters) {
            acc += t[j] * wr[v][j];
          } else {
            acc += t[j] * sw[(kg * V + v) * taps + j];
          }
        }
        out.v[v] = FromF<T>(relu && acc < 0.0f ? 0.0f : acc);
      }
      yt[item * groups + kg] = out;
    }
  }
}

// Block b sums tiles [b·tiles_per_block, (b+1)·tiles_per_block) into partial[b][k][kh][kw][c]:
// per tile the block stages the input rows, each thread reads its outputs' dY as V-vectors and
// the taps from shared memory into V · taps register accumulators; then the slots are reduced in
// a fixed order (shared memory).
template <typename T, int KH, int KW, int C, int V>
__global__ void __launch_bounds__(kThreads)
    SmallConvFilterPartialKernel(const T* __restrict__ dy, const T* __restrict__ x, float* __restrict__ partial,
                                 SmallConvGeometry g, int64_t tiles_per_block) {
  extern __shared__ float smem[];  // [slots][k][taps] for the reduction, then the staged rows
  constexpr int kTaps = (KH > 0 && KW > 0 && C > 0) ? KH * KW * C : kSmallConvTaps;
  const int taps = static_cast<int>(g.kh * g.kw * g.c);
  const int K = static_cast<int>(g.k);
  const int groups = K / V;
  const int slots = blockDim.x / groups;
  const int kg = threadIdx.x % groups, slot = threadIdx.x / groups;
  float* red = smem;
  float* stage = smem + slots * K * taps;
  const Tiling tl = TilingOf(g);
  const int tiles = static_cast<int>(g.n) * tl.per_image;
  const int begin = static_cast<int>(blockIdx.x * tiles_per_block);
  const int end = min(tiles, static_cast<int>(begin + tiles_per_block));
  const int ow = static_cast<int>(g.ow), oh = static_cast<int>(g.oh);
  float acc[V][kTaps];
#pragma unroll
  for (int v = 0; v < V; ++v) {
#pragma unroll
    for (int j = 0; j < kTaps; ++j) acc[v][j] = 0.0f;
  }
  for (int tile = begin; tile < end; ++tile) {
    const int n = tile / tl.per_image, oy0 = (tile - n * tl.per_image) * tl.rows;
    const int rows = min(tl.rows, oh - oy0);
    __syncthreads();
    StageTile(x, g, tl, n, oy0, stage);
    __syncthreads();
    if (slot >= slots) continue;
    const Packed<T, V>* dyt = reinterpret_cast<const Packed<T, V>*>(dy + (static_cast<int64_t>(n) * oh + oy0) * ow * K);
    for (int item = slot; item < rows * ow; item += slots) {
      const int r = item / ow, ox = item - r * ow;
      const Packed<T, V> d = dyt[item * groups + kg];
      float t[kSmallConvTaps];
      ReadTaps<KH, KW, C>(stage, g, tl, r, ox, t);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float dv = ToF(d.v[v]);
#pragma unroll
        for (int j = 0; j < kTaps; ++j) acc[v][j] += dv * t[j];
      }
    }
  }
  __syncthreads();
  if (slot < slots) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
#pragma unroll
      for (int j = 0; j < kTaps; ++j) {
        if (j < taps) red[(slot * K + kg * V + v) * taps + j] = acc[v][j];
      }
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < K * taps; t += blockDim.x) {
    float sum = 0.0f;
    for (int si = 0; si < slots; ++si) sum += red[si * K * taps + t];
    partial[blockIdx.x * static_cast<int64_t>(K * taps) + t] = sum;
  }
}

// dw[t] = Σ_b partial[b][t]: one warp per t, lanes stride the blocks, then a fixed butterfly.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SmallConvFilterSumKernel(const float* __restrict__ partial, T* __restrict__ dw, int64_t blocks, int64_t outputs) {
  const int lane = threadIdx.x & 31;
  const int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (t >= outputs) return;
  float sum = 0.0f;
  for (int64_t b = lane; b < blocks; b += 32) sum += partial[b * outputs + t];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) dw[t] = FromF<T>(sum);
}

template <typename F>
cudaError_t VisitSmallConvDtype(int dtype, F&& f) {
  switch (dtype) {
    case 1: return f(TypeTag<float>{});
    case 10: return f(TypeTag<__half>{});
    case 16: return f(TypeTag<__nv_bfloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

int64_t Blocks(const SmallConvGeometry& g) {
  const int64_t tiles = g.n * TilingOf(g).per_image;
  return std::max<int64_t>(1, std::min<int64_t>(kMaxBlocks, (tiles + kMinTiles - 1) / kMinTiles));
}

// Calls f(kernel) with the window's variant of `Kernel` (3x3x1, 3x3x3, 5x5x1 unrolled, else the
// run-time one) and V = 4 output channels a thread when K is a multiple of 4 and the output
// (forward) or dY (filter gradient) is aligned for it, else 1.
#define OTTR_SMALL_CONV_WINDOW(g, f, Kernel, T, V)                                  \
  ((g).kh == 3 && (g).kw == 3 && (g).c == 1   ? f(Kernel<T, 3, 3, 1, V>)             \
   : (g).kh == 3 && (g).kw == 3 && (g).c == 3 ? f(Kernel<T, 3, 3, 3, V>)             \
   : (g).kh == 5 && (g).kw == 5 && (g).c == 1 ? f(Kernel<T, 5, 5, 1, V>)             \
                                              : f(Kernel<T, 0, 0, 0, V>))
#define OTTR_SMALL_CONV_VISIT(g, vec, f, Kernel, T) \
  ((vec) ? OTTR_SMALL_CONV_WINDOW(g, f, Kernel, T, 4) : OTTR_SMALL_CONV_WINDOW(g, f, Kernel, T, 1))

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Threads of a filter-gradient block: whole multiples of the K / V channel groups, as many column
// groups as fit kThreads and the default 48 KiB of dynamic shared memory (the block reduction
// holds K · taps floats per column group).
int FilterThreads(const SmallConvGeometry& g, int v) {
  const int64_t kgroups = g.k / v;
  const int64_t by_shared = ((int64_t{48} << 10) / static_cast<int64_t>(sizeof(float)) - TilingOf(g).size) /
                            (g.k * g.kh * g.kw * g.c);
  const int64_t cgroups = std::max<int64_t>(1, std::min(kThreads / kgroups, by_shared));
  return static_cast<int>(cgroups * kgroups);
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    FlipFilterKernel(const E* __restrict__ w, E* __restrict__ out, int k, int c, int kh, int kw, bool channels_last) {
  const int total = k * c * kh * kw;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    // i indexes w: [k][c][r][s] channels-first, [k][r][s][c] channels-last.
    int ki, ci, r, s;
    if (channels_last) {
      ci = i % c;
      s = (i / c) % kw;
      r = (i / (c * kw)) % kh;
      ki = i / (c * kw * kh);
      out[((ci * kh + (kh - 1 - r)) * kw + (kw - 1 - s)) * k + ki] = w[i];
    } else {
      s = i % kw;
      r = (i / kw) % kh;
      ci = (i / (kw * kh)) % c;
      ki = i / (kw * kh * c);
      out[((ci * k + ki) * kh + (kh - 1 - r)) * kw + (kw - 1 - s)] = w[i];
    }
  }
}

}  // namespace

cudaError_t FlipFilterForDataGrad(int elem_bytes, int64_t k, int64_t c, int64_t kh, int64_t kw, bool channels_last,
                                  const void* w, void* out, cudaStream_t s) {
  const int64_t total = k * c * kh * kw;
  if (total == 0) return cudaSuccess;
  if (total >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const unsigned grid = GridFor(total, kThreads);
  if (elem_bytes == 4) {
    FlipFilterKernel<uint32_t><<<grid, kThreads, 0, s>>>(static_cast<const uint32_t*>(w), static_cast<uint32_t*>(out),
                                                         static_cast<int>(k), static_cast<int>(c), static_cast<int>(kh),
                                                         static_cast<int>(kw), channels_last);
  } else if (elem_bytes == 2) {
    FlipFilterKernel<uint16_t><<<grid, kThreads, 0, s>>>(static_cast<const uint16_t*>(w), static_cast<uint16_t*>(out),
                                                         static_cast<int>(k), static_cast<int>(c), static_cast<int>(kh),
                                                         static_cast<int>(kw), channels_last);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool SmallConvSupported(int dtype, const SmallConvGeometry& g) {
  if (dtype != 1 && dtype != 10 && dtype != 16) return false;
  return g.k >= 1 && g.k <= kSmallConvMaxK && g.c >= 1 && g.c <= kSmallConvMaxC && g.kh >= 1 && g.kw >= 1 &&
         g.c * g.kh * g.kw <= kSmallConvTaps && g.stride_h >= 1 && g.stride_w >= 1 && g.dil_h >= 1 && g.dil_w >= 1 &&
         g.n * g.oh * g.ow * g.k < (int64_t{1} << 31) && g.n * g.h * g.w * g.c < (int64_t{1} << 31) &&
         // the staged input rows (16 KiB at most) and one K · taps block (32 KiB at most, by the
         // bounds above) fit the default 48 KiB of dynamic shared memory
         (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dil_w + 1 <= kMaxStage && TilingOf(g).size <= kMaxStage;
}

cudaError_t SmallConvForward(int dtype, const SmallConvGeometry& g, const void* x, const void* w, const void* bias,
                             bool relu, void* y, cudaStream_t s) {
  if (!SmallConvSupported(dtype, g)) return cudaErrorInvalidValue;
  const int64_t total = g.n * g.oh * g.ow * g.k;
  if (total == 0) return cudaSuccess;
  const size_t shared = static_cast<size_t>(g.k * g.kh * g.kw * g.c + TilingOf(g).size) * sizeof(float);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(g.n * TilingOf(g).per_image, 8192));
  return VisitSmallConvDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const bool vec = g.k % 4 == 0 && Aligned(y, 4 * sizeof(T));
    auto launch = [&](auto kernel) -> cudaError_t {
      kernel<<<grid, kThreads, shared, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                            static_cast<const T*>(bias), static_cast<T*>(y), g, relu);
      return cudaGetLastError();
    };
    return OTTR_SMALL_CONV_VISIT(g, vec, launch, SmallConvForwardKernel, T);
  });
}

int64_t SmallConvFilterGradWorkspace(const SmallConvGeometry& g) {
  return Blocks(g) * g.k * g.kh * g.kw * g.c * static_cast<int64_t>(sizeof(float));
}

cudaError_t SmallConvFilterGrad(int dtype, const SmallConvGeometry& g, const void* dy, const void* x, void* dw,
                                void* workspace, cudaStream_t s) {
  if (!SmallConvSupported(dtype, g)) return cudaErrorInvalidValue;
  const int64_t outputs = g.k * g.kh * g.kw * g.c;
  const int64_t blocks = Blocks(g);
  const int64_t tiles = g.n * TilingOf(g).per_image;
  const int64_t tiles_per_block = (tiles + blocks - 1) / blocks;
  float* partial = static_cast<float*>(workspace);
  return VisitSmallConvDtype(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const bool vec = g.k % 4 == 0 && Aligned(dy, 4 * sizeof(T));
    const int threads = FilterThreads(g, vec ? 4 : 1);
    const size_t shared = (static_cast<size_t>(threads / (g.k / (vec ? 4 : 1))) * static_cast<size_t>(g.k) *
                               static_cast<size_t>(g.kh * g.kw * g.c) +
                           static_cast<size_t>(TilingOf(g).size)) *
                          sizeof(float);
    auto launch = [&](auto kernel) -> cudaError_t {
      kernel<<<static_cast<unsigned>(blocks), threads, shared, s>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), partial, g, tiles_per_block);
      return cudaGetLastError();
    };
    const cudaError_t e = OTTR_SMALL_CONV_VISIT(g, vec, launch, SmallConvFilterPartialKernel, T);
    if (e != cudaSuccess) return e;
    SmallConvFilterSumKernel<T><<<GridFor(outputs * 32, kThreads), kThreads, 0, s>>>(partial, static_cast<T*>(dw),
                                                                                       blocks, outputs);
    return cudaGetLastError();
  });
}

}  // namespace ottr::cuda::kernels
