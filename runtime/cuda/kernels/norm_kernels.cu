// Normalisation kernels (see norm_kernels.h for the contracts and the math).
//
// Layouts:
//   LayerNorm (fwd/bwd rows): a row of <= 1024 columns lives in the registers of 4..32 lanes
//     (two-pass mean/variance from registers); longer rows use one block per row.
//   LayerNorm dScale/dBias: 32-column x 8-row tiles per chunk of rows -> partials [chunk, col]
//     in the workspace -> a fixed-order sum over chunks (no atomics).
//   BatchNorm: shifted sums (x − K, K = the channel's first element) in double per
//     (chunk, channel) block, finalised per channel, then an elementwise pass (16-byte vectors
//     when the spatial size allows).
//   Group/InstanceNorm: one block per (sample, group): statistics, then the elementwise pass.
#include "runtime/cuda/kernels/norm_kernels.h"

#include "runtime/cuda/kernels/norm_common.cuh"

namespace ottr::cuda::kernels {
namespace {

using nl::ComputeT;
using nl::FromC;
using nl::IndexDiv;
using nl::LoadAny;
using nl::StoreAny;
using nl::ToC;

constexpr int kRowBlock = 512;

__device__ __forceinline__ int64_t MapIndex(const BroadcastMap& m, int64_t i) {
  int64_t out = 0;
#pragma unroll
  for (int d = BroadcastMap::kMaxRank - 1; d >= 0; --d) {
    if (d < m.rank) {
      const int64_t q = i / m.dims[d];
      out += (i - q * m.dims[d]) * m.strides[d];
      i = q;
    }
  }
  return out;
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <int N, typename... P>
bool Aligned(const P*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % (N * sizeof(P)) == 0) && ...);
}

// =============================================================================================
// LayerNormalization forward.

// C: the compute type, ComputeT<T> or double for a float64 stash_type (see LayerNormTyped).
template <typename T, typename C, int kWidth, int kPerLane>
__global__ void __launch_bounds__(256)
    LayerNormWarpKernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                        T* __restrict__ y, void* mean_out, void* inv_out, int stats_dtype, int64_t rows, int cols,
                        float eps, bool by_column, BroadcastMap smap, BroadcastMap bmap) {
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = threadIdx.x & (kWidth - 1);
  const int sub = (threadIdx.x & 31) / kWidth;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += num_warps * kRowsPerWarp) {
    const int64_t row = first + sub;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * static_cast<int64_t>(cols);
    C v[kPerLane];
    C s = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      v[k] = valid && idx < cols ? ToC(x[off + idx]) : C(0);
      s += v[k];
    }
    const C mean = nl::WarpSum<kWidth>(s) / static_cast<C>(cols);
    C q = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if (k * kWidth + lane < cols) {
        const C d = v[k] - mean;
        q += d * d;
      }
    }
    const C var = nl::WarpSum<kWidth>(q) / static_cast<C>(cols);
    const C inv = C(1) / nl::Sqrt(var + static_cast<C>(eps));
    if (!valid) continue;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      if (idx >= cols) continue;
      const int64_t i = off + idx;
      C out = (v[k] - mean) * inv * ToC(scale[by_column ? idx : MapIndex(smap, i)]);
      if (bias != nullptr) out += ToC(bias[by_column ? idx : MapIndex(bmap, i)]);
      y[i] = FromC<T>(out);
    }
    if (lane == 0) {
      if (mean_out != nullptr) StoreAny(mean_out, stats_dtype, row, mean);
      if (inv_out != nullptr) StoreAny(inv_out, stats_dtype, row, inv);
    }
  }
}

template <typename T, typename C>
__global__ void __launch_bounds__(kRowBlock)
    LayerNormBlockKernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                         T* __restrict__ y, void* mean_out, void* inv_out, int stats_dtype, int64_t rows, int64_t cols,
                         float eps, bool by_column, BroadcastMap smap, BroadcastMap bmap) {
  __shared__ C sm[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * cols;
    C s = 0;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) s += ToC(x[off + k]);
    const C mean = nl::BlockSum(s, sm) / static_cast<C>(cols);
    C q = 0;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const C d = ToC(x[off + k]) - mean;
      q += d * d;
    }
    const C var = nl::BlockSum(q, sm) / static_cast<C>(cols);
    const C inv = C(1) / nl::Sqrt(var + static_cast<C>(eps));
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const int64_t i = off + k;
      C out = (ToC(x[i]) - mean) * inv * ToC(scale[by_column ? k : MapIndex(smap, i)]);
      if (bias != nullptr) out += ToC(bias[by_column ? k : MapIndex(bmap, i)]);
      y[i] = FromC<T>(out);
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) StoreAny(mean_out, stats_dtype, row, mean);
      if (inv_out != nullptr) StoreAny(inv_out, stats_dtype, row, inv);
    }
  }
}

template <typename T, typename C, int kWidth, int kPerLane>
void LaunchLnWarp(const LayerNormArgs& a, const T* x, const T* scale, const T* bias, T* y, void* mean, void* inv,
                  cudaStream_t s) {
  constexpr int kRowsPerBlock = (256 / 32) * (32 / kWidth);
  const int grid = nl::GridFor(a.rows, kRowsPerBlock, nl::SmCount() * 8);
  LayerNormWarpKernel<T, C, kWidth, kPerLane><<<grid, 256, 0, s>>>(x, scale, bias, y, mean, inv, a.stats_dtype,
                                                                     a.rows, static_cast<int>(a.cols), a.epsilon,
                                                                     a.params_by_column, a.scale_map, a.bias_map);
}

// ONNX LayerNormalization-17: stash_type is the type of Mean/InvStdDev and the precision of
// the statistics' computation, so a float64 stash computes the row in double (as the CPU
// reference does); otherwise in ComputeT<T>.
template <typename T, typename C>
void LayerNormTyped(const LayerNormArgs& a, const void* xv, const void* sv, const void* bv, void* yv, void* mean,
                    void* inv, cudaStream_t s) {
  const T* x = static_cast<const T*>(xv);
  const T* scale = static_cast<const T*>(sv);
  const T* bias = static_cast<const T*>(bv);
  T* y = static_cast<T*>(yv);
  if (a.cols > 1024) {
    const int grid = static_cast<int>(std::min<int64_t>(a.rows, nl::SmCount() * 4));
    LayerNormBlockKernel<T, C><<<grid, kRowBlock, 0, s>>>(x, scale, bias, y, mean, inv, a.stats_dtype, a.rows,
                                                          a.cols, a.epsilon, a.params_by_column, a.scale_map,
                                                          a.bias_map);
    return;
  }
  switch (nl::NextPow2(a.cols)) {
    case 1:
    case 2:
    case 4: LaunchLnWarp<T, C, 4, 1>(a, x, scale, bias, y, mean, inv, s); break;
    case 8: LaunchLnWarp<T, C, 8, 1>(a, x, scale, bias, y, mean, inv, s); break;
    case 16: LaunchLnWarp<T, C, 16, 1>(a, x, scale, bias, y, mean, inv, s); break;
    case 32: LaunchLnWarp<T, C, 32, 1>(a, x, scale, bias, y, mean, inv, s); break;
    case 64: LaunchLnWarp<T, C, 32, 2>(a, x, scale, bias, y, mean, inv, s); break;
    case 128: LaunchLnWarp<T, C, 32, 4>(a, x, scale, bias, y, mean, inv, s); break;
    case 256: LaunchLnWarp<T, C, 32, 8>(a, x, scale, bias, y, mean, inv, s); break;
    case 512: LaunchLnWarp<T, C, 32, 16>(a, x, scale, bias, y, mean, inv, s); break;
    default: LaunchLnWarp<T, C, 32, 32>(a, x, scale, bias, y, mean, inv, s); break;
  }
}

// =============================================================================================
// LayerNormalization backward.

// Per row: statistics (given or recomputed), dX, and (mean, inv_std) into `ws_stats` for the
// column sums. Computed like the CPU reference: statistics cast to the compute type, then
//   x̂ = (x − μ) σ⁻¹, g = dy s, dx = σ⁻¹ (g − Σg / M − x̂ Σ(g x̂) / M).
template <typename T, int kWidth, int kPerLane>
__global__ void __launch_bounds__(256)
    LayerNormGradWarpKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                            const void* mean_in, const void* inv_in, int stats_dtype, T* __restrict__ dx,
                            double* __restrict__ ws_stats, int64_t rows, int cols, float eps, bool by_column,
                            BroadcastMap smap) {
  using C = ComputeT<T>;
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = threadIdx.x & (kWidth - 1);
  const int sub = (threadIdx.x & 31) / kWidth;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += num_warps * kRowsPerWarp) {
    const int64_t row = first + sub;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * static_cast<int64_t>(cols);
    C xv[kPerLane], dv[kPerLane], sv[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      const bool in = valid && idx < cols;
      xv[k] = in ? ToC(x[off + idx]) : C(0);
      dv[k] = in ? ToC(dy[off + idx]) : C(0);
      sv[k] = in ? ToC(scale[by_column ? idx : MapIndex(smap, idx)]) : C(0);
    }
    C mean, inv;
    if (mean_in != nullptr) {
      mean = valid ? static_cast<C>(LoadAny(mean_in, stats_dtype, row)) : C(0);
      inv = valid ? static_cast<C>(LoadAny(inv_in, stats_dtype, row)) : C(0);
    } else {
      C s = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) s += xv[k];
      mean = nl::WarpSum<kWidth>(s) / static_cast<C>(cols);
      C q = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * kWidth + lane < cols) {
          const C d = xv[k] - mean;
          q += d * d;
        }
      }
      const C var = nl::WarpSum<kWidth>(q) / static_cast<C>(cols);
      inv = C(1) / nl::Sqrt(var + static_cast<C>(eps));
    }
    C sum_g = 0, sum_gx = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const C g = dv[k] * sv[k];  // 0 in the padding
      sum_g += g;
      sum_gx += g * ((xv[k] - mean) * inv);
    }
    sum_g = nl::WarpSum<kWidth>(sum_g);
    sum_gx = nl::WarpSum<kWidth>(sum_gx);
    if (!valid) continue;
    if (dx != nullptr) {
      const C mg = sum_g / static_cast<C>(cols), mgx = sum_gx / static_cast<C>(cols);
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int idx = k * kWidth + lane;
        if (idx < cols) dx[off + idx] = FromC<T>(inv * (dv[k] * sv[k] - mg - (xv[k] - mean) * inv * mgx));
      }
    }
    if (lane == 0) {
      ws_stats[2 * row] = mean;
      ws_stats[2 * row + 1] = inv;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    LayerNormGradBlockKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                             const void* mean_in, const void* inv_in, int stats_dtype, T* __restrict__ dx,
                             double* __restrict__ ws_stats, int64_t rows, int64_t cols, float eps, bool by_column,
                             BroadcastMap smap) {
  using C = ComputeT<T>;
  __shared__ C sm[64];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * cols;
    C mean, inv;
    if (mean_in != nullptr) {
      mean = static_cast<C>(LoadAny(mean_in, stats_dtype, row));
      inv = static_cast<C>(LoadAny(inv_in, stats_dtype, row));
    } else {
      C s = 0;
      for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) s += ToC(x[off + k]);
      mean = nl::BlockSum(s, sm) / static_cast<C>(cols);
      C q = 0;
      for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        const C d = ToC(x[off + k]) - mean;
        q += d * d;
      }
      inv = C(1) / nl::Sqrt(nl::BlockSum(q, sm) / static_cast<C>(cols) + static_cast<C>(eps));
    }
    C sum_g = 0, sum_gx = 0;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const C g = ToC(dy[off + k]) * ToC(scale[by_column ? k : MapIndex(smap, k)]);
      sum_g += g;
      sum_gx += g * ((ToC(x[off + k]) - mean) * inv);
    }
    nl::BlockSum2(sum_g, sum_gx, sm);
    if (dx != nullptr) {
      const C mg = sum_g / static_cast<C>(cols), mgx = sum_gx / static_cast<C>(cols);
      for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
        const C s = ToC(scale[by_column ? k : MapIndex(smap, k)]);
        const C xh = (ToC(x[off + k]) - mean) * inv;
        dx[off + k] = FromC<T>(inv * (ToC(dy[off + k]) * s - mg - xh * mgx));
      }
    }
    if (threadIdx.x == 0) {
      ws_stats[2 * row] = mean;
      ws_stats[2 * row + 1] = inv;
    }
  }
}

// dScale[col] = Σ_rows dy x̂, dBias[col] = Σ_rows dy over one chunk of rows per blockIdx.y;
// block = 32 columns x 8 rows. With one chunk the outputs are written directly.
template <typename T>
__global__ void __launch_bounds__(256)
    LayerNormGradColumnKernel(const T* __restrict__ dy, const T* __restrict__ x, const double* __restrict__ stats,
                              int64_t rows, int64_t cols, int64_t rows_per_chunk, double* __restrict__ part,
                              T* ds_out, T* db_out) {
  using C = ComputeT<T>;
  __shared__ double sh_s[8][33];
  __shared__ double sh_b[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(r0 + rows_per_chunk, rows);
  double as = 0, ab = 0;
  if (col < cols) {
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      const C d = ToC(dy[r * cols + col]);
      const C xh = (ToC(x[r * cols + col]) - static_cast<C>(stats[2 * r])) * static_cast<C>(stats[2 * r + 1]);
      as += d * xh;
      ab += d;
    }
  }
  sh_s[ty][tx] = as;
  sh_b[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && col < cols) {
    double s = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      s += sh_s[k][tx];
      b += sh_b[k][tx];
    }
    if (gridDim.y == 1) {
      if (ds_out != nullptr) ds_out[col] = FromC<T>(s);
      if (db_out != nullptr) db_out[col] = FromC<T>(b);
    } else {
      part[(blockIdx.y * cols + col) * 2] = s;
      part[(blockIdx.y * cols + col) * 2 + 1] = b;
    }
  }
}

template <typename T>
__global__ void LayerNormGradFinalKernel(const double* __restrict__ part, int64_t chunks, int64_t cols, T* ds_out,
                                         T* db_out) {
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      s += part[(k * cols + col) * 2];
      b += part[(k * cols + col) * 2 + 1];
    }
    if (ds_out != nullptr) ds_out[col] = FromC<T>(s);
    if (db_out != nullptr) db_out[col] = FromC<T>(b);
  }
}

struct LnGradPlan {
  int64_t chunks = 1, rows_per_chunk = 1;
  int64_t stats_bytes = 0, part_bytes = 0;
};

LnGradPlan PlanLnGrad(int64_t rows, int64_t cols) {
  LnGradPlan p;
  const int64_t col_tiles = std::max<int64_t>(1, nl::CeilDiv(cols, 32));
  int64_t chunks = std::min<int64_t>(64, std::max<int64_t>(1, nl::CeilDiv(2 * nl::SmCount(), col_tiles)));
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, nl::CeilDiv(rows, 32)));
  p.rows_per_chunk = std::max<int64_t>(1, nl::CeilDiv(rows, chunks));
  p.chunks = std::max<int64_t>(1, nl::CeilDiv(rows, p.rows_per_chunk));
  p.stats_bytes = (2 * std::max<int64_t>(rows, 1) * 8 + 255) / 256 * 256;
  p.part_bytes = p.chunks > 1 ? p.chunks * cols * 2 * 8 : 0;
  return p;
}

template <typename T, int kWidth, int kPerLane>
void LaunchLnGradWarp(const LayerNormGradArgs& a, const T* dy, const T* x, const T* scale, const void* mean,
                      const void* inv, T* dx, double* stats, cudaStream_t s) {
  constexpr int kRowsPerBlock = (256 / 32) * (32 / kWidth);
  const int grid = nl::GridFor(a.rows, kRowsPerBlock, nl::SmCount() * 8);
  LayerNormGradWarpKernel<T, kWidth, kPerLane><<<grid, 256, 0, s>>>(dy, x, scale, mean, inv, a.stats_dtype, dx, stats,
                                                                      a.rows, static_cast<int>(a.cols), a.epsilon,
                                                                      a.scale_by_column, a.scale_map);
}

template <typename T>
void LayerNormGradTyped(const LayerNormGradArgs& a, const void* dyv, const void* xv, const void* sv, const void* mean,
                        const void* inv, void* dxv, void* dsv, void* dbv, void* workspace, cudaStream_t s) {
  const T* dy = static_cast<const T*>(dyv);
  const T* x = static_cast<const T*>(xv);
  const T* scale = static_cast<const T*>(sv);
  T* dx = static_cast<T*>(dxv);
  const LnGradPlan p = PlanLnGrad(a.rows, a.cols);
  double* stats = static_cast<double*>(workspace);
  double* part = reinterpret_cast<double*>(static_cast<char*>(workspace) + p.stats_bytes);
  if (a.rows > 0 && a.cols > 0) {
    if (a.cols > 1024) {
      const int grid = static_cast<int>(std::min<int64_t>(a.rows, nl::SmCount() * 4));
      LayerNormGradBlockKernel<T><<<grid, kRowBlock, 0, s>>>(dy, x, scale, mean, inv, a.stats_dtype, dx, stats, a.rows,
                                                             a.cols, a.epsilon, a.scale_by_column, a.scale_map);
    } else {
      switch (nl::NextPow2(a.cols)) {
        case 1:
        case 2:
        case 4: LaunchLnGradWarp<T, 4, 1>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 8: LaunchLnGradWarp<T, 8, 1>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 16: LaunchLnGradWarp<T, 16, 1>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 32: LaunchLnGradWarp<T, 32, 1>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 64: LaunchLnGradWarp<T, 32, 2>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 128: LaunchLnGradWarp<T, 32, 4>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 256: LaunchLnGradWarp<T, 32, 8>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        case 512: LaunchLnGradWarp<T, 32, 16>(a, dy, x, scale, mean, inv, dx, stats, s); break;
        default: LaunchLnGradWarp<T, 32, 32>(a, dy, x, scale, mean, inv, dx, stats, s); break;
      }
    }
  }
  T* ds = static_cast<T*>(dsv);
  T* db = static_cast<T*>(dbv);
  if ((ds == nullptr && db == nullptr) || a.cols == 0) return;
  const dim3 grid(static_cast<unsigned>(nl::CeilDiv(a.cols, 32)), static_cast<unsigned>(p.chunks));
  LayerNormGradColumnKernel<T><<<grid, 256, 0, s>>>(dy, x, stats, a.rows, a.cols, p.rows_per_chunk, part, ds, db);
  if (p.chunks > 1) {
    LayerNormGradFinalKernel<T><<<nl::GridFor(a.cols, 256, nl::SmCount() * 4), 256, 0, s>>>(part, p.chunks, a.cols,
                                                                                           ds, db);
  }
}

// =============================================================================================
// BatchNormalization.

// Kernel modes: the sums each (chunk, channel) block accumulates.
constexpr int kBnForward = 0;    // Σ(x − K), Σ(x − K)²
constexpr int kBnGradBatch = 1;  // Σ(x − K), Σ(x − K)², Σdy, Σdy (x − K)
constexpr int kBnGradFixed = 2;  // Σdy, Σdy x̂ (given statistics); also writes dx = dy s σ⁻¹
constexpr int kBnMaxChunks = 256;

template <int kMode>
constexpr int kBnSums = kMode == kBnGradBatch ? 4 : 2;

struct BnParams {
  const void* x = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;  // y or dx
  const void* scale = nullptr;
  const void* bias = nullptr;
  const void* mean = nullptr;
  const void* var = nullptr;
  int scale_dtype = 1, bias_dtype = 1, mean_dtype = 1, var_dtype = 1;
  // Forward: running_mean / running_var; backward: dScale / dB.
  void* out_a = nullptr;
  void* out_b = nullptr;
  int out_a_dtype = 1, out_b_dtype = 1;
  double* partial = nullptr;  // [C, chunks, sums]
  double* coef = nullptr;     // forward: [C, 3] (mean, mul, bias); backward: [C, 5]
  int64_t n = 0, c = 0, spatial = 1, m = 0, chunks = 1, per_chunk = 1;
  IndexDiv sdiv;        // by spatial, dividends < m
  IndexDiv sdiv_total;  // by spatial, dividends < n * c * spatial
  IndexDiv cdiv;        // by c, dividends < n * c
  double eps = 1e-5, momentum = 0.9;
};

// Per-channel results from the channel's sums (K = the shift of the shifted sums).
template <int kMode>
__device__ void BnFinalizeChannel(const BnParams& p, int64_t ch, const double* sums, double k) {
  const double m = static_cast<double>(p.m);
  if constexpr (kMode == kBnForward) {
    const double d = sums[0] / m;
    const double mean = k + d;
    const double var = max(sums[1] / m - d * d, 0.0);
    p.coef[3 * ch] = mean;
    p.coef[3 * ch + 1] = LoadAny(p.scale, p.scale_dtype, ch) / sqrt(var + p.eps);
    p.coef[3 * ch + 2] = LoadAny(p.bias, p.bias_dtype, ch);
    if (p.out_a != nullptr) {
      StoreAny(p.out_a, p.out_a_dtype, ch, LoadAny(p.mean, p.mean_dtype, ch) * p.momentum + mean * (1.0 - p.momentum));
    }
    if (p.out_b != nullptr) {
      StoreAny(p.out_b, p.out_b_dtype, ch, LoadAny(p.var, p.var_dtype, ch) * p.momentum + var * (1.0 - p.momentum));
    }
  } else if constexpr (kMode == kBnGradBatch) {
    const double d = sums[0] / m;
    const double mean = k + d;
    const double var = max(sums[1] / m - d * d, 0.0);
    const double inv = 1.0 / sqrt(var + p.eps);
    const double db = sums[2];
    const double ds = inv * (sums[3] - d * sums[2]);  // Σ dy (x − μ) = Σ dy (x − K) − (μ − K) Σ dy
    if (p.out_a != nullptr) StoreAny(p.out_a, p.out_a_dtype, ch, ds);
    if (p.out_b != nullptr) StoreAny(p.out_b, p.out_b_dtype, ch, db);
    double* c = p.coef + 5 * ch;
    c[0] = LoadAny(p.scale, p.scale_dtype, ch) * inv;
    c[1] = mean;
    c[2] = inv;
    c[3] = db / m;
    c[4] = ds / m;
  } else {
    if (p.out_a != nullptr) StoreAny(p.out_a, p.out_a_dtype, ch, sums[1]);
    if (p.out_b != nullptr) StoreAny(p.out_b, p.out_b_dtype, ch, sums[0]);
  }
}

template <typename T, int kMode>
__global__ void __launch_bounds__(256) BnStatsKernel(BnParams p) {
  using C = ComputeT<T>;
  __shared__ double sm[64];
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.out);
  for (int64_t ch = blockIdx.y; ch < p.c; ch += gridDim.y) {
    const int64_t e0 = static_cast<int64_t>(blockIdx.x) * p.per_chunk;
    const int64_t e1 = min(e0 + p.per_chunk, p.m);
    double k = 0;
    C mu = 0, iv = 0, kdy = 0;
    if constexpr (kMode != kBnGradFixed) {
      if (p.m > 0) k = ToC(x[ch * p.spatial]);
    } else {
      const double inv = 1.0 / sqrt(LoadAny(p.var, p.var_dtype, ch) + p.eps);
      mu = static_cast<C>(LoadAny(p.mean, p.mean_dtype, ch));
      iv = static_cast<C>(inv);
      kdy = static_cast<C>(LoadAny(p.scale, p.scale_dtype, ch) * inv);
    }
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
      const int64_t nn = p.sdiv.Div(e);
      const int64_t i = (nn * p.c + ch) * p.spatial + (e - nn * p.spatial);
      if constexpr (kMode == kBnForward) {
        const double d = static_cast<double>(ToC(x[i])) - k;
        a0 += d;
        a1 += d * d;
      } else if constexpr (kMode == kBnGradBatch) {
        const double d = static_cast<double>(ToC(x[i])) - k;
        const double g = ToC(dy[i]);
        a0 += d;
        a1 += d * d;
        a2 += g;
        a3 += g * d;
      } else {
        const C g = ToC(dy[i]);
        a0 += g;
        a1 += g * ((ToC(x[i]) - mu) * iv);
        if (dx != nullptr) dx[i] = FromC<T>(kdy * g);
      }
    }
    nl::BlockSum2(a0, a1, sm);
    if constexpr (kMode == kBnGradBatch) nl::BlockSum2(a2, a3, sm);
    if (threadIdx.x == 0) {
      const double sums[4] = {a0, a1, a2, a3};
      if (gridDim.x == 1) {
        BnFinalizeChannel<kMode>(p, ch, sums, k);
      } else {
        double* out = p.partial + (ch * p.chunks + blockIdx.x) * kBnSums<kMode>;
        for (int j = 0; j < kBnSums<kMode>; ++j) out[j] = sums[j];
      }
    }
  }
}

template <typename T, int kMode>
__global__ void BnFinalizeKernel(BnParams p) {
  const T* x = static_cast<const T*>(p.x);
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < p.c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sums[4] = {0, 0, 0, 0};
    for (int64_t k = 0; k < p.chunks; ++k) {
      const double* in = p.partial + (ch * p.chunks + k) * kBnSums<kMode>;
      for (int j = 0; j < kBnSums<kMode>; ++j) sums[j] += in[j];
    }
    const double shift = kMode != kBnGradFixed && p.m > 0 ? static_cast<double>(ToC(x[ch * p.spatial])) : 0.0;
    BnFinalizeChannel<kMode>(p, ch, sums, shift);
  }
}

// Inference: coef = (input_mean, scale / sqrt(input_var + ε), B) per channel.
__global__ void BnInferenceCoefKernel(BnParams p) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < p.c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p.coef[3 * ch] = LoadAny(p.mean, p.mean_dtype, ch);
    p.coef[3 * ch + 1] = LoadAny(p.scale, p.scale_dtype, ch) / sqrt(LoadAny(p.var, p.var_dtype, ch) + p.eps);
    p.coef[3 * ch + 2] = LoadAny(p.bias, p.bias_dtype, ch);
  }
}

// Elementwise pass over [N, C, spatial] in vectors of kVec elements of one channel
// (spatial % kVec == 0). Forward: y = (x − mean) · mul + bias; backward (batch statistics):
// dx = k_dy (dy − mb − x̂ ms), x̂ = (x − mean) σ⁻¹.
template <typename T, int kVec, bool kGrad>
__global__ void BnApplyKernel(BnParams p, int64_t total) {
  using C = ComputeT<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* out = static_cast<T*>(p.out);
  const int64_t vecs = total / kVec;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < vecs;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i0 = v * kVec;
    const int64_t q = p.sdiv_total.Div(i0);
    const int64_t ch = q - p.cdiv.Div(q) * p.c;
    const Vec<T, kVec> xv = *reinterpret_cast<const Vec<T, kVec>*>(x + i0);
    Vec<T, kVec> ov;
    if constexpr (!kGrad) {
      const C mean = static_cast<C>(p.coef[3 * ch]);
      const C mul = static_cast<C>(p.coef[3 * ch + 1]);
      const C bias = static_cast<C>(p.coef[3 * ch + 2]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) ov.v[j] = FromC<T>((ToC(xv.v[j]) - mean) * mul + bias);
    } else {
      const double* c = p.coef + 5 * ch;
      const C kdy = static_cast<C>(c[0]), mu = static_cast<C>(c[1]), iv = static_cast<C>(c[2]);
      const C mb = static_cast<C>(c[3]), ms = static_cast<C>(c[4]);
      const Vec<T, kVec> dv = *reinterpret_cast<const Vec<T, kVec>*>(dy + i0);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const C xh = (ToC(xv.v[j]) - mu) * iv;
        ov.v[j] = FromC<T>(kdy * (ToC(dv.v[j]) - mb - xh * ms));
      }
    }
    *reinterpret_cast<Vec<T, kVec>*>(out + i0) = ov;
  }
}

struct BnPlan {
  int64_t chunks = 1, per_chunk = 1;
};

BnPlan PlanBn(int64_t n, int64_t c, int64_t spatial) {
  BnPlan p;
  const int64_t m = n * spatial;
  int64_t chunks = std::min<int64_t>(kBnMaxChunks, std::max<int64_t>(1, nl::CeilDiv(4 * nl::SmCount(), std::max<int64_t>(c, 1))));
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, nl::CeilDiv(m, 2048)));
  p.per_chunk = std::max<int64_t>(1, nl::CeilDiv(m, chunks));
  p.chunks = std::max<int64_t>(1, nl::CeilDiv(m, p.per_chunk));
  return p;
}

// Workspace: partials [C, chunks, 4] then coef [C, 5] (doubles).
int64_t BnWorkspaceBytes(int64_t n, int64_t c, int64_t spatial) {
  const BnPlan p = PlanBn(n, c, spatial);
  return (p.chunks > 1 ? c * p.chunks * 4 * 8 : 0) + c * 5 * 8 + 256;
}

void BnSetup(BnParams& p, int64_t n, int64_t c, int64_t spatial, void* workspace) {
  const BnPlan plan = PlanBn(n, c, spatial);
  p.n = n;
  p.c = c;
  p.spatial = spatial;
  p.m = n * spatial;
  p.chunks = plan.chunks;
  p.per_chunk = plan.per_chunk;
  p.sdiv = IndexDiv(std::max<int64_t>(spatial, 1), p.m);
  p.sdiv_total = IndexDiv(std::max<int64_t>(spatial, 1), n * c * spatial);
  p.cdiv = IndexDiv(std::max<int64_t>(c, 1), n * c);
  p.partial = static_cast<double*>(workspace);
  p.coef = p.partial + (plan.chunks > 1 ? c * plan.chunks * 4 : 0);
}

template <typename T, int kMode>
void LaunchBnStats(const BnParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.chunks), static_cast<unsigned>(std::min<int64_t>(p.c, 65535)));
  BnStatsKernel<T, kMode><<<grid, 256, 0, s>>>(p);
  if (p.chunks > 1) BnFinalizeKernel<T, kMode><<<nl::GridFor(p.c, 128, 1024), 128, 0, s>>>(p);
}

template <typename T, bool kGrad>
void LaunchBnApply(const BnParams& p, cudaStream_t s) {
  const int64_t total = p.n * p.c * p.spatial;
  if (total == 0) return;
  const bool vec = p.spatial % 4 == 0 && Aligned<4>(static_cast<const T*>(p.x), static_cast<const T*>(p.out)) &&
                   (!kGrad || Aligned<4>(static_cast<const T*>(p.dy)));
  if (vec) {
    BnApplyKernel<T, 4, kGrad><<<nl::GridFor(total / 4, 256, nl::SmCount() * 8), 256, 0, s>>>(p, total);
  } else {
    BnApplyKernel<T, 1, kGrad><<<nl::GridFor(total, 256, nl::SmCount() * 8), 256, 0, s>>>(p, total);
  }
}

// =============================================================================================
// Group / Instance normalisation.

struct GnParams {
  const void* x = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;  // y or dx
  const void* scale = nullptr;
  const void* bias = nullptr;
  int scale_dtype = 1, bias_dtype = 1;
  bool scale_per_group = false, bias_per_group = false;
  double* ws = nullptr;  // backward: [N, C, 2] per-(sample, channel) (Σdy, Σdy x̂)
  int64_t n = 0, c = 0, spatial = 1, groups = 1, cg = 1;
  IndexDiv sdiv;  // by spatial, dividends < cg * spatial
  double eps = 1e-5;
};

// Mean and 1 / sqrt(var + ε) of p[0, len) (two passes, double accumulation).
template <typename T>
__device__ void GroupStats(const T* p, int64_t len, double eps, double* sm, double* mean, double* inv) {
  double s = 0;
  for (int64_t e = threadIdx.x; e < len; e += blockDim.x) s += ToC(p[e]);
  const double m = nl::BlockSum(s, sm) / static_cast<double>(len);
  double q = 0;
  for (int64_t e = threadIdx.x; e < len; e += blockDim.x) {
    const double d = static_cast<double>(ToC(p[e])) - m;
    q += d * d;
  }
  *mean = m;
  *inv = 1.0 / sqrt(nl::BlockSum(q, sm) / static_cast<double>(len) + eps);
}

template <typename T>
__global__ void __launch_bounds__(256) GroupNormKernel(GnParams p) {
  using C = ComputeT<T>;
  __shared__ double sm[32];
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.out);
  const int64_t len = p.cg * p.spatial;
  for (int64_t region = blockIdx.x; region < p.n * p.groups; region += gridDim.x) {
    const int64_t nn = region / p.groups, g = region - nn * p.groups;
    const int64_t base = (nn * p.c + g * p.cg) * p.spatial;
    double mean, inv;
    GroupStats(x + base, len, p.eps, sm, &mean, &inv);
    const C mc = static_cast<C>(mean), ic = static_cast<C>(inv);
    for (int64_t e = threadIdx.x; e < len; e += blockDim.x) {
      const int64_t ch = g * p.cg + p.sdiv.Div(e);
      const C sc = static_cast<C>(LoadAny(p.scale, p.scale_dtype, p.scale_per_group ? g : ch));
      const C bi = static_cast<C>(LoadAny(p.bias, p.bias_dtype, p.bias_per_group ? g : ch));
      y[base + e] = FromC<T>((ToC(x[base + e]) - mc) * ic * sc + bi);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256) GroupNormGradKernel(GnParams p) {
  using C = ComputeT<T>;
  __shared__ double sm[64];
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.out);
  const int64_t len = p.cg * p.spatial;
  for (int64_t region = blockIdx.x; region < p.n * p.groups; region += gridDim.x) {
    const int64_t nn = region / p.groups, g = region - nn * p.groups;
    const int64_t base = (nn * p.c + g * p.cg) * p.spatial;
    double mean, inv;
    GroupStats(x + base, len, p.eps, sm, &mean, &inv);
    const C mu = static_cast<C>(mean), iv = static_cast<C>(inv);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < p.cg; ++j) {
      const int64_t ch = g * p.cg + j;
      const int64_t off = base + j * p.spatial;
      double ad = 0, adx = 0;
      for (int64_t k = threadIdx.x; k < p.spatial; k += blockDim.x) {
        const C d = ToC(dy[off + k]);
        ad += d;
        adx += d * ((ToC(x[off + k]) - mu) * iv);
      }
      nl::BlockSum2(ad, adx, sm);
      const C s = static_cast<C>(LoadAny(p.scale, p.scale_dtype, p.scale_per_group ? g : ch));
      sum_g += s * ad;
      sum_gx += s * adx;
      if (threadIdx.x == 0 && p.ws != nullptr) {
        p.ws[(nn * p.c + ch) * 2] = ad;
        p.ws[(nn * p.c + ch) * 2 + 1] = adx;
      }
    }
    if (dx == nullptr) continue;
    const C mg = static_cast<C>(sum_g / static_cast<double>(len));
    const C mgx = static_cast<C>(sum_gx / static_cast<double>(len));
    for (int64_t e = threadIdx.x; e < len; e += blockDim.x) {
      const int64_t ch = g * p.cg + p.sdiv.Div(e);
      const C s = static_cast<C>(LoadAny(p.scale, p.scale_dtype, p.scale_per_group ? g : ch));
      const C xh = (ToC(x[base + e]) - mu) * iv;
      dx[base + e] = FromC<T>(iv * (ToC(dy[base + e]) * s - mg - xh * mgx));
    }
  }
}

// dScale[ch] = Σ_n ws[n, ch, 1], dBias[ch] = Σ_n ws[n, ch, 0] (fixed order over n).
__global__ void GroupNormParamGradKernel(const double* __restrict__ ws, int64_t n, int64_t c, void* ds, void* db,
                                         int dtype) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0, b = 0;
    for (int64_t k = 0; k < n; ++k) {
      b += ws[(k * c + ch) * 2];
      s += ws[(k * c + ch) * 2 + 1];
    }
    if (ds != nullptr) StoreAny(ds, dtype, ch, s);
    if (db != nullptr) StoreAny(db, dtype, ch, b);
  }
}

int GnGrid(int64_t regions) { return static_cast<int>(std::min<int64_t>(std::max<int64_t>(regions, 1), nl::SmCount() * 8)); }

}  // namespace

cudaError_t LaunchLayerNorm(const LayerNormArgs& a, const void* x, const void* scale, const void* bias, void* y,
                            void* mean, void* inv_std, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.stats_dtype == nl::kF64) {
      LayerNormTyped<T, double>(a, x, scale, bias, y, mean, inv_std, stream);
    } else {
      LayerNormTyped<T, ComputeT<T>>(a, x, scale, bias, y, mean, inv_std, stream);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t LayerNormGradWorkspaceBytes(const LayerNormGradArgs& a) {
  const LnGradPlan p = PlanLnGrad(a.rows, a.cols);
  return p.stats_bytes + p.part_bytes;
}

cudaError_t LaunchLayerNormGrad(const LayerNormGradArgs& a, const void* dy, const void* x, const void* scale,
                                const void* mean, const void* inv_std, void* dx, void* dscale, void* dbias,
                                void* workspace, cudaStream_t stream) {
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    LayerNormGradTyped<T>(a, dy, x, scale, mean, inv_std, dx, dscale, dbias, workspace, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t BatchNormWorkspaceBytes(const BatchNormArgs& a) { return BnWorkspaceBytes(a.n, a.c, a.spatial); }

cudaError_t LaunchBatchNorm(const BatchNormArgs& a, const void* x, const void* scale, const void* bias,
                            const void* in_mean, const void* in_var, void* y, void* running_mean, void* running_var,
                            void* workspace, cudaStream_t stream) {
  if (a.c == 0) return cudaSuccess;
  BnParams p;
  BnSetup(p, a.n, a.c, a.spatial, workspace);
  p.x = x;
  p.out = y;
  p.scale = scale;
  p.bias = bias;
  p.mean = in_mean;
  p.var = in_var;
  p.scale_dtype = a.scale_dtype;
  p.bias_dtype = a.bias_dtype;
  p.mean_dtype = a.mean_dtype;
  p.var_dtype = a.var_dtype;
  p.out_a = running_mean;
  p.out_b = running_var;
  p.out_a_dtype = a.mean_dtype;
  p.out_b_dtype = a.var_dtype;
  p.eps = a.epsilon;
  p.momentum = a.momentum;
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.training) {
      LaunchBnStats<T, kBnForward>(p, stream);
    } else if (y != nullptr) {
      BnInferenceCoefKernel<<<nl::GridFor(a.c, 128, 1024), 128, 0, stream>>>(p);
    }
    if (y != nullptr) LaunchBnApply<T, false>(p, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t BatchNormGradWorkspaceBytes(const BatchNormGradArgs& a) { return BnWorkspaceBytes(a.n, a.c, a.spatial); }

cudaError_t LaunchBatchNormGrad(const BatchNormGradArgs& a, const void* dy, const void* x, const void* scale,
                                const void* mean, const void* var, void* dx, void* dscale, void* dbias, void* workspace,
                                cudaStream_t stream) {
  if (a.c == 0) return cudaSuccess;
  BnParams p;
  BnSetup(p, a.n, a.c, a.spatial, workspace);
  p.x = x;
  p.dy = dy;
  p.out = dx;
  p.scale = scale;
  p.mean = mean;
  p.var = var;
  p.scale_dtype = a.scale_dtype;
  p.mean_dtype = a.mean_dtype;
  p.var_dtype = a.var_dtype;
  p.out_a = dscale;
  p.out_b = dbias;
  p.out_a_dtype = a.dparam_dtype;
  p.out_b_dtype = a.dparam_dtype;
  p.eps = a.epsilon;
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.fixed) {
      LaunchBnStats<T, kBnGradFixed>(p, stream);  // also writes dx
    } else {
      LaunchBnStats<T, kBnGradBatch>(p, stream);
      if (dx != nullptr) LaunchBnApply<T, true>(p, stream);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchGroupNorm(const GroupNormArgs& a, const void* x, const void* scale, const void* bias, void* y,
                            cudaStream_t stream) {
  if (a.n * a.c * a.spatial == 0) return cudaSuccess;
  GnParams p;
  p.x = x;
  p.out = y;
  p.scale = scale;
  p.bias = bias;
  p.scale_dtype = a.scale_dtype;
  p.bias_dtype = a.bias_dtype;
  p.scale_per_group = a.scale_per_group;
  p.bias_per_group = a.bias_per_group;
  p.n = a.n;
  p.c = a.c;
  p.spatial = a.spatial;
  p.groups = a.groups;
  p.cg = a.c / a.groups;
  p.sdiv = IndexDiv(std::max<int64_t>(a.spatial, 1), p.cg * a.spatial);
  p.eps = a.epsilon;
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    GroupNormKernel<T><<<GnGrid(a.n * a.groups), 256, 0, stream>>>(p);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t GroupNormGradWorkspaceBytes(const GroupNormGradArgs& a) { return std::max<int64_t>(a.n * a.c * 2 * 8, 8); }

cudaError_t LaunchGroupNormGrad(const GroupNormGradArgs& a, const void* dy, const void* x, const void* scale, void* dx,
                                void* dscale, void* dbias, void* workspace, cudaStream_t stream) {
  if (a.c == 0) return cudaSuccess;
  GnParams p;
  p.x = x;
  p.dy = dy;
  p.out = dx;
  p.scale = scale;
  p.scale_dtype = a.scale_dtype;
  p.scale_per_group = a.scale_per_group;
  p.ws = static_cast<double*>(workspace);
  p.n = a.n;
  p.c = a.c;
  p.spatial = a.spatial;
  p.groups = a.groups;
  p.cg = a.c / a.groups;
  p.sdiv = IndexDiv(std::max<int64_t>(a.spatial, 1), p.cg * a.spatial);
  p.eps = a.epsilon;
  const bool want_params = dscale != nullptr || dbias != nullptr;
  const bool ok = nl::DispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.n * a.groups > 0) GroupNormGradKernel<T><<<GnGrid(a.n * a.groups), 256, 0, stream>>>(p);
    if (want_params) {
      GroupNormParamGradKernel<<<nl::GridFor(a.c, 128, 1024), 128, 0, stream>>>(p.ws, a.n, a.c, dscale, dbias,
                                                                               a.dparam_dtype);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ottr::cuda::kernels
