// Classification-loss kernels (see loss_kernels.h for the math and the contracts).
//
// Every scalar loss is a deterministic reduction: a block adds its rows in a fixed order
// (each warp its rows in sequence, then the warps in order); with one block the same kernel
// writes the loss, otherwise the blocks' partial sums go to the workspace and a one-block
// kernel adds them in block order (the fused loss and gradient, given counters: the last block
// to finish adds them, in the same launch). No floating-point atomics.
#include "runtime/cuda/kernels/loss_kernels.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "ir/linear_sce_layout.h"
#include "runtime/cuda/kernels/norm_common.cuh"
#include "runtime/cuda/kernels/pdl.cuh"
#include "runtime/cuda/kernels/sce_math.cuh"

namespace ottr::cuda::kernels {
namespace {

using nl::ComputeT;
using nl::FromC;
using nl::IndexDiv;
using nl::LoadAny;
using nl::LoadLabel;
using nl::ToC;
using sce::ExpC;
using sce::NaN;
using sce::SceGradAt;

// Upper bound on the blocks of a partial-sum kernel (the workspace holds two doubles each).
constexpr int kMaxPartials = 1024;
constexpr int kSceBlock = ir::kSceBlockThreads;  // launch bound of the SCE forward kernels

// Writes the block's (a, b) totals: the final value when the grid has one block (a, or a / b
// when `divide`, rounded to T; or both into `stats`), else the block's partial.
template <typename T>
__device__ __forceinline__ void WriteBlockResult(double a, double b, bool divide, T* out,
                                                 double* stats, double* partial) {
  if (gridDim.x == 1) {
    if (stats != nullptr) {
      stats[0] = a;
      stats[1] = b;
    } else {
      *out = FromC<T>(divide ? a / b : a);
    }
  } else {
    partial[2 * blockIdx.x] = a;
    partial[2 * blockIdx.x + 1] = b;
  }
}

// The sums of `g` partial pairs for every thread of the block: a fixed assignment (thread t adds
// t, t + blockDim, ...) and a fixed tree, so deterministic. Read through L2 (__ldcg): in a grid's
// last block the partials are other blocks' writes. A block-wide call; `sm` holds >= 64.
__device__ __forceinline__ void SumPartials(const double* partial, int g, double& a, double& b, double* sm) {
  a = 0;
  b = 0;
  // Eight pairs' loads in flight before their adds (the adds in the same order as one by one):
  // with hundreds of blocks a thread's loads one at a time cost a memory latency each.
  const int step = static_cast<int>(blockDim.x);
  int i = threadIdx.x;
  for (; i + 7 * step < g; i += 8 * step) {
    double2 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = __ldcg(reinterpret_cast<const double2*>(partial) + i + u * step);
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      a += v[u].x;
      b += v[u].y;
    }
  }
  for (; i < g; i += step) {
    a += __ldcg(&partial[2 * i]);
    b += __ldcg(&partial[2 * i + 1]);
  }
  nl::BlockSum2(a, b, sm);
}

// Adds `g` partial pairs in block order (one block) and writes as WriteBlockResult does.
template <typename T>
__global__ void FinalizeKernel(const double* __restrict__ partial, int g, bool divide, T* out,
                               double* stats) {
  __shared__ double sm[64];
  double a, b;
  SumPartials(partial, g, a, b, sm);
  if (threadIdx.x == 0) {
    if (stats != nullptr) {
      stats[0] = a;
      stats[1] = b;
    } else {
      *out = FromC<T>(divide ? a / b : a);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ottr::SoftmaxCrossEntropy forward, and ottr::SoftmaxCrossEntropyWithGrad: the same kernels
// with `dx` set also write dlogits from the log_prob values they compute (rounded to T, as the
// log_prob tensor would be), with `scale` = dloss / count (SceScaleSource): the value of
// SoftmaxCrossEntropyGrad rounded to T, then to G (the Cast of a 16-bit step).

// dloss / (number of rows whose label is not ignore_index), for every thread of the block.
__device__ double SceScale(const void* labels, bool l64, int64_t n, int64_t ignore, const void* dloss,
                           int dloss_dtype, double* sm) {
  double count = 0;
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += LoadLabel(labels, l64, i) != ignore ? 1.0 : 0.0;
  count = nl::BlockSum(count, sm);
  return LoadAny(dloss, dloss_dtype, 0) / count;
}

// ottr::CountLabels: one block counts the labels that are not `ignore` (exact in double).
__global__ void CountLabelsKernel(const void* labels, bool l64, int64_t n, int64_t ignore, int64_t* out) {
  __shared__ double sm[32];
  double count = 0;
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += LoadLabel(labels, l64, i) != ignore ? 1.0 : 0.0;
  count = nl::BlockSum(count, sm);
  if (threadIdx.x == 0) *out = static_cast<int64_t>(count);
}

__global__ void SceScaleKernel(const void* labels, bool l64, int64_t n, int64_t ignore, const void* dloss,
                               int dloss_dtype, double* scale_out) {
  __shared__ double sm[32];
  const double scale = SceScale(labels, l64, n, ignore, dloss, dloss_dtype, sm);
  if (threadIdx.x == 0) *scale_out = scale;
}

// The counters of a one-launch grid (SceWithGradCounterBytes; zero between launches).
struct SceSync {
  unsigned arrive;           // blocks that have added their labels to `count`
  unsigned done;             // blocks that have written their partial loss
  unsigned long long count;  // labels that are not ignore_index
  unsigned arrive_cols;      // blocks that have written their column partials (SceBiasGrad)
  unsigned pad;
};

// Where the gradient takes dloss / count from: the device scalar SceScaleKernel wrote; the
// count ottr::CountLabels wrote before the launch (`count` with dloss: no block waits for
// another to count; `sync` then only lets the last block add the loss partials); in a one-block
// grid, the block's own count of the labels before its rows (one launch less); or, in a
// co-resident grid with `sync`, the labels counted by all blocks together (each its share) and
// shared through sync->count once every block has arrived (one launch for the whole loss).
struct SceScaleSource {
  const double* scale = nullptr;   // SceScaleKernel's result
  const void* dloss = nullptr;     // set instead: the block(s) count the labels, or read `count`
  int dloss_dtype = 0;
  SceSync* sync = nullptr;         // with dloss: the grid's counters
  const int64_t* count = nullptr;  // with dloss: the labels' count, made before
};

// Whether a launch with these sources needs every block resident at once: blocks that wait for
// each other's label counts or column sums.
__host__ __device__ inline bool NeedsCooperative(const SceScaleSource& s, bool bias_grad) {
  return s.sync != nullptr && (s.count == nullptr || bias_grad);
}

// The scale for every thread of the block (0 without a gradient); a block-wide call.
__device__ __forceinline__ double ReadSceScale(const SceScaleSource& src, bool has_dx, const void* labels, bool l64,
                                               int64_t n, int64_t ignore, double* sm) {
  if (!has_dx) return 0.0;
  if (src.dloss != nullptr && src.count != nullptr) {
    return LoadAny(src.dloss, src.dloss_dtype, 0) / static_cast<double>(*src.count);
  }
  if (src.dloss != nullptr && src.sync != nullptr) {
    unsigned long long mine = 0;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      mine += LoadLabel(labels, l64, i) != ignore ? 1 : 0;
    }
    const double block = nl::BlockSum(static_cast<double>(mine), sm);  // exact: counts below 2^53
    __shared__ double s_scale;
    if (threadIdx.x == 0) {
      atomicAdd(&src.sync->count, static_cast<unsigned long long>(block));
      __threadfence();
      atomicAdd(&src.sync->arrive, 1u);
      // Every block is resident (a cooperative launch), so waiting for the others ends.
      while (atomicAdd(&src.sync->arrive, 0u) < gridDim.x) __nanosleep(64);
      __threadfence();
      const unsigned long long count = atomicAdd(&src.sync->count, 0ull);
      s_scale = LoadAny(src.dloss, src.dloss_dtype, 0) / static_cast<double>(count);
    }
    __syncthreads();
    return s_scale;
  }
  if (src.dloss != nullptr) {
    const double scale = SceScale(labels, l64, n, ignore, src.dloss, src.dloss_dtype, sm);
    __syncthreads();  // every warp has read `sm` before the caller reuses it
    return scale;
  }
  return *src.scale;
}

// After thread 0 has written the block's partial (WriteBlockResult): with `sync`, the last block
// to get here adds the partials in a fixed order (as FinalizeKernel does, deterministic) and
// clears the counters for the next launch. A block-wide call.
template <typename T>
__device__ __forceinline__ void FinishGrid(SceSync* sync, const double* partial, T* out) {
  if (sync == nullptr || gridDim.x == 1) return;
  __shared__ bool last;
  __shared__ double sm[64];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&sync->done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  double a, b;
  SumPartials(partial, static_cast<int>(gridDim.x), a, b, sm);
  if (threadIdx.x == 0) {
    *out = FromC<T>(a / b);
    // Every other block has passed its waits on `arrive` and `arrive_cols` before it counted
    // itself done.
    sync->arrive = 0;
    sync->done = 0;
    sync->count = 0;
    sync->arrive_cols = 0;
  }
}

// The column sums of dlogits (the bias gradient of the GEMM before the loss, fuse-sce-bgrad):
// every block sums its rows' gradients per column into its row of `partial` ([grid, ld] doubles
// in the workspace); with one block that row is the result, else the blocks wait for each other
// (`sync->arrive_cols`, a cooperative launch) and a warp per column adds the blocks' rows in a
// fixed lane assignment and tree. Rounded once to float32 (`out` [ld]), as ReduceSum's double
// accumulation on the CPU is. Off (`out` null) for every other use of the kernels.
struct SceBiasGrad {
  double* partial = nullptr;
  float* out = nullptr;
};

// After each block's row of `bg.partial` is complete (its own threads wrote it): the result.
// A block-wide call.
__device__ __forceinline__ void FinishBiasGrad(const SceBiasGrad& bg, SceSync* sync, int64_t ld) {
  __syncthreads();
  if (gridDim.x == 1) {
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) bg.out[j] = static_cast<float>(bg.partial[j]);
    return;
  }
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(&sync->arrive_cols, 1u);
    // Every block is resident (a cooperative launch), so waiting for the others ends.
    while (atomicAdd(&sync->arrive_cols, 0u) < gridDim.x) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); j < ld; j += warps) {
    double s = 0;
    unsigned b = lane;
    // Eight loads in flight, then their adds in block order (as one by one).
    for (; b + 7 * 32 < gridDim.x; b += 8 * 32) {
      double v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = __ldcg(&bg.partial[(b + 32 * u) * ld + j]);
#pragma unroll
      for (int u = 0; u < 8; ++u) s += v[u];
    }
    for (; b < gridDim.x; b += 32) s += __ldcg(&bg.partial[b * ld + j]);
    s = nl::WarpSum<32>(s);
    if (lane == 0) bg.out[j] = static_cast<float>(s);
  }
}

// Rows of C <= 1024 in the registers of kWidth lanes (as SoftmaxWarpKernel). The row's
// log-sum-exp and the loss terms are computed in double, as the CPU reference does.
template <typename T, typename G, int kWidth, int kPerLane, bool kBgrad>
__global__ void __launch_bounds__(kSceBlock)
    SceForwardWarpKernel(const T* __restrict__ logits, const void* __restrict__ labels,
                         bool labels64, T* __restrict__ log_prob, T* __restrict__ loss,
                         double* __restrict__ partial, int64_t rows, int c, int64_t ld, int64_t ignore,
                         double eps, G* __restrict__ dx, SceScaleSource scale_src, SceBiasGrad bg) {
  using C = ComputeT<T>;
  __shared__ double s_loss[32];
  __shared__ double s_cnt[32];
  constexpr int kRowsPerWarp = 32 / kWidth;
  const int lane = threadIdx.x & (kWidth - 1);
  const int sub = (threadIdx.x & 31) / kWidth;
  const int warp_in_block = threadIdx.x >> 5;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp_in_block;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const int64_t stride = num_warps * kRowsPerWarp;
  // The row group's logits, loaded one pass ahead where they fit in registers (kPerLane <= 8): the
  // loads of a grid that loops over its rows (one block at batch 128: 4 passes) then overlap the
  // previous pass's math, and the first ones the labels' count.
  constexpr bool kAhead = kPerLane <= 8;
  auto load = [&](int64_t first, C (&v)[kPerLane]) {
    const int64_t row = first + sub;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * ld;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      v[k] = valid && idx < c ? ToC(logits[off + idx]) : C(0);
    }
  };
  C va[kPerLane];
  if constexpr (kAhead) load(warp * kRowsPerWarp, va);
  const double scale = ReadSceScale(scale_src, dx != nullptr, labels, labels64, rows, ignore, s_loss);
  double acc = 0, cnt = 0;  // non-zero only in the first lane of each row group
  float cols[kBgrad ? kPerLane : 1] = {};  // kBgrad: this lane's columns summed over its rows
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += stride) {
    const int64_t row = first + sub;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * ld;
    C next[kAhead ? kPerLane : 1];  // kAhead: the next pass's logits
    if constexpr (kAhead) {
      load(first + stride, next);
    } else {
      load(first, va);
    }
    C m = -std::numeric_limits<C>::infinity();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if (k * kWidth + lane < c) m = max(m, va[k]);
    }
    m = nl::WarpMax<kWidth>(m);
    double s = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if (k * kWidth + lane < c) s += static_cast<double>(ExpC(va[k] - m));
    }
    s = nl::WarpSum<kWidth>(s);
    const double lse = static_cast<double>(m) + log(s);
    const int64_t y = valid ? LoadLabel(labels, labels64, row) : ignore;
    double all = 0, lpy = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = k * kWidth + lane;
      if (idx < c) {
        const T lt = FromC<T>(static_cast<double>(va[k]) - lse);
        if (valid && log_prob != nullptr) log_prob[off + idx] = lt;
        const double l = static_cast<double>(ToC(lt));
        if (valid && dx != nullptr) {
          const G gv = SceGradAt<T, G>(l, idx, y, c, ignore, eps, scale);
          dx[off + idx] = gv;
          if constexpr (kBgrad) cols[k] += static_cast<float>(gv);
        }
        all += l;
        if (idx == y) lpy = l;
      } else if (idx < ld && valid && dx != nullptr) {
        dx[off + idx] = FromC<G>(0.0);  // the padding columns of a wider row
      }
    }
    all = nl::WarpSum<kWidth>(all);
    lpy = nl::WarpSum<kWidth>(lpy);
    if (valid && lane == 0 && y != ignore) {
      acc += (y < 0 || y >= c) ? NaN() : (1.0 - eps) * -lpy + eps / c * -all;
      cnt += 1.0;
    }
    if constexpr (kAhead) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) va[k] = next[k];
    }
  }
  if constexpr (kBgrad) {
    // The row groups of a warp (kWidth < 32) hold the same columns: a fixed xor tree adds them;
    // then the warps add theirs into the block's row in warp order.
#pragma unroll
    for (int off = kWidth; off < 32; off *= 2) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) cols[k] += __shfl_xor_sync(0xffffffffu, cols[k], off);
    }
    constexpr int kCols = kPerLane * kWidth;  // >= ld
    __shared__ double s_cols[kBgrad ? kCols : 1];
    for (int j = threadIdx.x; j < kCols; j += blockDim.x) s_cols[j] = 0;
    const int warps = static_cast<int>(blockDim.x >> 5);
    for (int w = 0; w < warps; ++w) {
      __syncthreads();
      if (warp_in_block == w && sub == 0) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) s_cols[k * kWidth + lane] += static_cast<double>(cols[k]);
      }
    }
    __syncthreads();
    double* row = bg.partial + static_cast<int64_t>(blockIdx.x) * ld;
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) row[j] = s_cols[j];
    FinishBiasGrad(bg, scale_src.sync, ld);
  }
  acc = nl::WarpSum(acc);
  cnt = nl::WarpSum(cnt);
  if ((threadIdx.x & 31) == 0) {
    s_loss[warp_in_block] = acc;
    s_cnt[warp_in_block] = cnt;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0, count = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
      total += s_loss[w];
      count += s_cnt[w];
    }
    WriteBlockResult<T>(total, count, true, loss, nullptr, partial);
  }
  FinishGrid<T>(scale_src.sync, partial, loss);
}

// Rows of C > 1024: one block per row.
template <typename T, typename G, bool kBgrad>
__global__ void __launch_bounds__(kSceBlock)
    SceForwardBlockKernel(const T* __restrict__ logits, const void* __restrict__ labels,
                          bool labels64, T* __restrict__ log_prob, T* __restrict__ loss,
                          double* __restrict__ partial, int64_t rows, int64_t c, int64_t ld, int64_t ignore,
                          double eps, G* __restrict__ dx, SceScaleSource scale_src, SceBiasGrad bg) {
  using C = ComputeT<T>;
  __shared__ C smc[32];
  __shared__ double smd[64];
  double acc = 0, cnt = 0;
  const double scale = ReadSceScale(scale_src, dx != nullptr, labels, labels64, rows, ignore, smd);
  // kBgrad: thread t owns columns t, t + blockDim, ... of the block's row of column sums.
  double* cols = kBgrad ? bg.partial + static_cast<int64_t>(blockIdx.x) * ld : nullptr;
  if constexpr (kBgrad) {
    for (int64_t k = threadIdx.x; k < ld; k += blockDim.x) cols[k] = 0;
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * ld;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x) m = max(m, ToC(x[k]));
    m = nl::BlockMax(m, smc);
    double s = 0;
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
      s += static_cast<double>(ExpC(ToC(x[k]) - m));
    }
    s = nl::BlockSum(s, smd);
    const double lse = static_cast<double>(m) + log(s);
    const int64_t y = LoadLabel(labels, labels64, row);
    double all = 0, lpy = 0;
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
      const T lt = FromC<T>(static_cast<double>(ToC(x[k])) - lse);
      if (log_prob != nullptr) log_prob[row * ld + k] = lt;
      const double l = static_cast<double>(ToC(lt));
      if (dx != nullptr) {
        const G gv = SceGradAt<T, G>(l, k, y, c, ignore, eps, scale);
        dx[row * ld + k] = gv;
        if constexpr (kBgrad) cols[k] += static_cast<double>(static_cast<float>(gv));
      }
      all += l;
      if (k == y) lpy = l;
    }
    if (dx != nullptr) {  // the padding columns of a wider row
      for (int64_t k = c + threadIdx.x; k < ld; k += blockDim.x) dx[row * ld + k] = FromC<G>(0.0);
    }
    nl::BlockSum2(all, lpy, smd);
    if (threadIdx.x == 0 && y != ignore) {
      acc += (y < 0 || y >= c) ? NaN() : (1.0 - eps) * -lpy + eps / static_cast<double>(c) * -all;
      cnt += 1.0;
    }
  }
  if constexpr (kBgrad) FinishBiasGrad(bg, scale_src.sync, ld);
  if (threadIdx.x == 0) WriteBlockResult<T>(acc, cnt, true, loss, nullptr, partial);
  FinishGrid<T>(scale_src.sync, partial, loss);
}

struct SceForwardPlan {
  int width = 32, per_lane = 1;  // warp layout (c <= 1024)
  bool block_rows = false;       // c > 1024
  int threads = 256, grid = 1;
  int smem = 0;  // dynamic shared memory per block (bytes)
};

SceForwardPlan PlanSceForward(int64_t n, int64_t c) {
  SceForwardPlan p;
  if (c > 1024) {
    p.block_rows = true;
    p.threads = kSceBlock;
    p.grid = static_cast<int>(std::min<int64_t>(std::max<int64_t>(n, 1), std::min(kMaxPartials, nl::SmCount() * 4)));
    // A handful of rows: one block, no second kernel.
    if (n <= 4) p.grid = 1;
    return p;
  }
  const int pow2 = nl::NextPow2(std::max<int64_t>(c, 1));
  p.width = std::max(4, std::min(32, pow2));
  p.per_lane = std::max(1, pow2 / 32);
  const int64_t rows_per_warp = 32 / p.width;
  // One block of kSceBlock threads when it needs at most 4 passes over the rows: one launch.
  // OTTR_SCE_SINGLE_PASSES=P sets that number of passes (experiments).
  static const int64_t passes = [] {
    const char* env = std::getenv("OTTR_SCE_SINGLE_PASSES");
    return env != nullptr ? std::max<int64_t>(0, std::atoll(env)) : int64_t{4};
  }();
  if (n <= ir::SceOneBlockRows(c, passes)) {
    p.threads = kSceBlock;
    p.grid = 1;
  } else {
    p.threads = 256;
    p.grid = nl::GridFor(n, static_cast<int>((256 / 32) * rows_per_warp), std::min(kMaxPartials, nl::SmCount() * 8));
  }
  return p;
}

// Launches an SCE forward kernel on p.grid blocks; `cooperative`: every block resident at once
// (the grid capped at what the device holds; the kernels loop over their rows), as the one-launch
// loss and gradient wait for all blocks' label counts.
// `programmatic` (kernels that follow pdl.cuh's rules): it may start while the kernel before it
// ends; cooperative grids never (on an H100 they gained nothing: bench/RESULTS.md "2026-12-07").
template <typename... P, typename... A>
cudaError_t LaunchSce(void (*kernel)(P...), SceForwardPlan p, bool cooperative, cudaStream_t s, bool programmatic,
                      A&&... args) {
  if (cooperative) {
    int per_sm = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, p.smem);
    if (e != cudaSuccess) return e;
    p.grid = std::max(1, std::min(p.grid, per_sm * nl::SmCount()));
  }
  const LaunchMode mode{programmatic && !cooperative, cooperative};
  return LaunchKernel(mode, kernel, dim3(static_cast<unsigned>(p.grid)), dim3(static_cast<unsigned>(p.threads)),
                      static_cast<size_t>(p.smem), s, std::forward<A>(args)...);
}

// Whether the kernels sum dlogits' columns for T and G: float32 logits and gradient only (the
// one case fuse-sce-bgrad creates), which keeps the other instantiations as they were.
template <typename T, typename G>
constexpr bool kHasBgrad = std::is_same_v<T, float> && std::is_same_v<G, float>;

template <typename T, typename G, int kWidth, int kPerLane>
cudaError_t LaunchSceWarp(const SceForwardPlan& p, const T* x, const void* labels, bool l64, T* lp, T* loss,
                          double* partial, int64_t n, int64_t c, int64_t ld, int64_t ignore, double eps, G* dx,
                          const SceScaleSource& scale, const SceBiasGrad& bg, cudaStream_t s) {
  if constexpr (kHasBgrad<T, G>) {
    if (bg.out != nullptr) {
      return LaunchSce(SceForwardWarpKernel<T, G, kWidth, kPerLane, true>, p, NeedsCooperative(scale, true), s, false, x, labels, l64,
                       lp, loss, partial, n, static_cast<int>(c), ld, ignore, eps, dx, scale, bg);
    }
  }
  return LaunchSce(SceForwardWarpKernel<T, G, kWidth, kPerLane, false>, p, NeedsCooperative(scale, false), s, false, x, labels, l64,
                   lp, loss, partial, n, static_cast<int>(c), ld, ignore, eps, dx, scale, bg);
}

// The forward (dx null) or the forward with the gradient (dx, scaled by dloss / count): a grid of
// one block counts the labels itself; a larger one, given `sync` (zeroed counters), counts them
// with all its blocks, which wait for each other (a cooperative launch) and the last of which adds
// the loss partials: one launch; without `sync`, SceScaleKernel writes the scale into
// `scale_slot` first and FinalizeKernel adds the partials after. (Every block of a larger grid
// counting all labels itself was slower on the H200: 16.3 µs for [8192, 10] with 512 blocks,
// against 5.3 + 4.3 µs for the two kernels.)
// `ld`: the row length of logits and dx (>= c; dx columns c..ld-1 are written as zeros).
template <typename T, typename G>
cudaError_t SceForwardTyped(const void* xv, const void* labels, bool l64, void* lossv, void* lpv, int64_t n,
                            int64_t c, int64_t ignore, double eps, double* partial, G* dx, const void* dloss,
                            int dloss_dtype, double* scale_slot, cudaStream_t s, SceSync* sync = nullptr,
                            int64_t ld = 0, SceBiasGrad bg = {}, const int64_t* count = nullptr) {
  if (ld < c) ld = c;
  const T* x = static_cast<const T*>(xv);
  T* loss = static_cast<T*>(lossv);
  T* lp = static_cast<T*>(lpv);
  const SceForwardPlan p = PlanSceForward(n, ld);
  SceScaleSource scale;
  if (dx != nullptr && count != nullptr) {
    scale.dloss = dloss;
    scale.dloss_dtype = dloss_dtype;
    scale.count = count;
    if (p.grid > 1) scale.sync = sync;  // without: FinalizeKernel adds the partials
  } else if (dx != nullptr && (p.grid == 1 || sync != nullptr)) {
    scale.dloss = dloss;
    scale.dloss_dtype = dloss_dtype;
    if (p.grid > 1) scale.sync = sync;
  } else if (dx != nullptr) {
    SceScaleKernel<<<1, 1024, 0, s>>>(labels, l64, n, ignore, dloss, dloss_dtype, scale_slot);
    scale.scale = scale_slot;
  }
  // The column sums need dx, the float32 kernels and, with several blocks, their one launch.
  if (bg.out != nullptr && (dx == nullptr || !kHasBgrad<T, G> || (p.grid > 1 && scale.sync == nullptr))) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = cudaSuccess;
  if (p.block_rows) {
    if (bg.out != nullptr) {
      if constexpr (kHasBgrad<T, G>) {
        err = LaunchSce(SceForwardBlockKernel<T, G, true>, p, NeedsCooperative(scale, true), s, false, x, labels, l64, lp, loss,
                        partial, n, c, ld, ignore, eps, dx, scale, bg);
      }
    } else {
      err = LaunchSce(SceForwardBlockKernel<T, G, false>, p, NeedsCooperative(scale, false), s, false, x, labels, l64, lp, loss,
                      partial, n, c, ld, ignore, eps, dx, scale, bg);
    }
  } else {
#define OTTR_SCE_WARP_(W, P) err = LaunchSceWarp<T, G, W, P>(p, x, labels, l64, lp, loss, partial, n, c, ld, ignore, eps, dx, scale, bg, s)
    switch (p.width * p.per_lane) {
      case 4: OTTR_SCE_WARP_(4, 1); break;
      case 8: OTTR_SCE_WARP_(8, 1); break;
      case 16: OTTR_SCE_WARP_(16, 1); break;
      case 32: OTTR_SCE_WARP_(32, 1); break;
      case 64: OTTR_SCE_WARP_(32, 2); break;
      case 128: OTTR_SCE_WARP_(32, 4); break;
      case 256: OTTR_SCE_WARP_(32, 8); break;
      case 512: OTTR_SCE_WARP_(32, 16); break;
      default: OTTR_SCE_WARP_(32, 32); break;
    }
#undef OTTR_SCE_WARP_
  }
  if (err != cudaSuccess) return err;
  if (p.grid > 1 && scale.sync == nullptr) FinalizeKernel<T><<<1, 256, 0, s>>>(partial, p.grid, true, loss, nullptr);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// ottr::LinearSoftmaxCrossEntropyWithGrad (loss_kernels.h): the classifier GEMM, the loss and
// the data gradient through the GEMM. A block stages the weight ([C, K] floats) in shared memory
// and each warp its row of x and of the mask, all copies in flight at once (cp.async) while the
// block counts the labels; then a warp per row works from shared memory.

constexpr int kLinWarps = ir::kLinearSceWarps;  // 32 blocks for a batch of 128 rows
constexpr int64_t kLinSelfCount = 1024;         // up to this many rows every block counts the labels
constexpr int kLinRows = 4;                     // rows per warp above kLinSelfCount (where they fit)
// The dynamic shared memory of a block (ir::LinearSceSmemBytes): W [C][K] floats, a row of x per
// warp, with column sums a row of them per warp, then a mask row per warp.

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// The warp's sums of z[j] over its 32 lanes, scattered: at each level (lane offset 16, 8, ...) a
// lane keeps the half of its classes picked by its lane bit and adds its partner's copy of them,
// so after log2(kMaxC) levels lane l holds class l >> kShift (kMaxC 32: l; 16: l >> 1, with a last
// level adding the two lanes of each class: both then hold the same bits, a + b == b + a).
// kMaxC - 1 (+1) shuffles where an all-reduce of each class takes 5 kMaxC; a fixed order.
template <int kMaxC>
__device__ __forceinline__ float ReduceClassesOverWarp(float (&z)[kMaxC], int lane) {
  static_assert(kMaxC == 16 || kMaxC == 32, "16 or 32 classes per warp");
  constexpr int kLevels = kMaxC == 32 ? 5 : 4;
#pragma unroll
  for (int level = 0; level < kLevels; ++level) {
    const int o = 16 >> level;
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < kMaxC / 2; ++i) {
      const int half = kMaxC >> (level + 1);
      if (i < half) {
        const float lo = z[i], hi = z[i + half];
        const float keep = upper ? hi : lo;
        const float send = upper ? lo : hi;
        z[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
    }
  }
  float v = z[0];
  if constexpr (kMaxC == 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v;
}

// One row's softmax cross-entropy over a warp whose lanes hold the logit zj of class
// cls = lane >> shift (own: cls < c; first: the class's first lane; the lanes of a class agree bit
// for bit): dlogits of the lane's class and the row's loss terms, the sums over the classes' first
// lanes (a fixed xor tree). LinearSceKernel and LinearSceRowKernel share these formulas.
struct WarpSceRow {
  double all = 0.0, lpy = 0.0;  // Σ_j log p_j and log p_y
  float dl = 0.0f;              // dlogits of class cls (0 where not own)
  bool y_class = false;         // the label is a class (else the row's loss is NaN)

  __device__ __forceinline__ WarpSceRow(float zj, bool own, bool first, int cls, int shift, int64_t y, int c,
                                        int64_t ignore, double eps, double scale) {
    const float m = nl::WarpMax(own ? zj : -std::numeric_limits<float>::infinity());
    const double s = nl::WarpSum(own && first ? static_cast<double>(ExpC(zj - m)) : 0.0);
    const double lse = static_cast<double>(m) + log(s);
    const float lt = static_cast<float>(static_cast<double>(zj) - lse);
    const double l = static_cast<double>(lt);
    all = nl::WarpSum(own && first ? l : 0.0);
    y_class = y >= 0 && y < c;
    lpy = static_cast<double>(__shfl_sync(0xffffffffu, lt, y_class ? static_cast<int>(y) << shift : 0));
    dl = own ? SceGradAt<float, float>(l, cls, y, c, ignore, eps, scale) : 0.0f;
  }
  // The row's loss (a counted row: its label is not the ignored index).
  __device__ __forceinline__ double Loss(double eps, int c) const {
    return !y_class ? NaN() : (1.0 - eps) * -lpy + eps / c * -all;
  }
};

// kMaxC >= c classes in registers. kVec: 16-byte copies and float4 reads along K (w [C, K]
// (trans_b), K % 4 == 0, x / w / mask / dx 16-byte aligned); otherwise element by element.
// kRows: the rows a warp works on together (independent chains of instructions that share the
// weight's shared-memory reads: at batch 8192 one row per warp left the schedulers waiting on
// each warp's dependent instructions, 17 cycles per issued instruction in Nsight Compute).
template <int kMaxC, bool kVec, int kRows>
__global__ void __launch_bounds__(kLinWarps * 32)
    LinearSceKernel(LinearSceArgs a, double* __restrict__ partial, SceScaleSource src, SceSync* sync,
                    SceBiasGrad bg) {
  extern __shared__ __align__(16) unsigned char lin_smem[];
  __shared__ double sm[32];
  __shared__ double s_loss[kLinWarps];
  __shared__ double s_cnt[kLinWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int c = a.c;
  const int ldc = a.ldc;
  const int k_len = static_cast<int>(a.k);
  const double eps = a.label_smoothing;
  const bool sums = bg.out != nullptr;
  // Shared memory (ir::LinearSceSmemBytes): W [c][K], kRows rows of x per warp, a row of column
  // sums per warp (with sums), kRows mask rows per warp.
  float* ws = reinterpret_cast<float*>(lin_smem);
  float* xw = ws + (c + warp * kRows) * k_len;
  float* cw = sums ? ws + (c + kLinWarps * kRows + warp) * k_len : nullptr;
  uint8_t* mw = reinterpret_cast<uint8_t*>(ws + (c + kLinWarps * (kRows + (sums ? 1 : 0))) * k_len) +
                warp * kRows * a.mask_ld;
  // The weight's first c rows (classes), by the whole block; in a programmatic launch (pdl.cuh)
  // before the wait for the kernel before when no earlier launch of the step writes it.
  auto copy_w = [&] {
    if constexpr (kVec) {
      for (int i = threadIdx.x; i < c * k_len / 4; i += blockDim.x) CpAsync16(ws + 4 * i, a.w + 4 * i);
    } else {
      for (int i = threadIdx.x; i < c * k_len; i += blockDim.x) {
        const int j = i / k_len, k = i - j * k_len;
        ws[i] = __ldg(a.w + (a.trans_b ? static_cast<int64_t>(i) : static_cast<int64_t>(k) * ldc + j));
      }
    }
  };
  if (a.w_ready) copy_w();
  WaitForPriorGrids();  // x, the mask and the scale are earlier launches' outputs
  LetDependentsLaunch();
  if (!a.w_ready) copy_w();
  if (sums) {
    for (int k = lane; k < k_len; k += 32) cw[k] = 0.0f;
  }
  // The group's rows of x and of the mask, by the warp; the labels (ignore_index past the end).
  int64_t y[kRows];
  auto stage = [&](int64_t g) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = g * kRows + r;
      y[r] = a.ignore_index;
      if (row >= a.n) continue;
      float* xr = xw + r * k_len;
      uint8_t* mr = mw + r * a.mask_ld;
      if constexpr (kVec) {
        for (int i = lane; i < k_len / 4; i += 32) CpAsync16(xr + 4 * i, a.x + row * k_len + 4 * i);
        if (a.mask != nullptr) {
          for (int i = lane; i < a.mask_ld / 16; i += 32) CpAsync16(mr + 16 * i, a.mask + row * a.mask_ld + 16 * i);
        }
      } else {
        for (int k = lane; k < k_len; k += 32) xr[k] = __ldg(a.x + row * k_len + k);
        if (a.mask != nullptr) {
          for (int i = lane; i < a.mask_ld; i += 32) mr[i] = __ldg(a.mask + row * a.mask_ld + i);
        }
      }
      y[r] = LoadLabel(a.labels, a.labels64, row);
    }
  };
  const int64_t groups = (a.n + kRows - 1) / kRows;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kLinWarps;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kLinWarps + warp;
  if (start < groups) stage(start);
  // The labels' count while the copies are in flight.
  const double scale = ReadSceScale(src, true, a.labels, a.labels64, a.n, a.ignore_index, sm);
  if constexpr (kVec) CpAsyncWaitAll();
  __syncthreads();
  double acc = 0, cnt = 0;  // lane 0: the warp's rows' losses and their count
  constexpr int kShift = kMaxC == 32 ? 0 : 1;  // lanes per class: 1 << kShift
  const int cls = lane >> kShift;              // this lane's class
  const bool own = cls < c;
  const bool first = (lane & ((1 << kShift) - 1)) == 0;  // the class's first lane
  for (int64_t g = start; g < groups; g += stride) {
    if (g != start) {
      __syncwarp();  // every lane is done with the previous rows
      stage(g);
      if constexpr (kVec) CpAsyncWaitAll();
      __syncwarp();
    }
    // This lane's share of the logits, per row.
    float z[kRows][kMaxC];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kMaxC; ++j) z[r][j] = 0.0f;
    }
    if constexpr (kVec) {
      for (int k0 = 4 * lane; k0 < k_len; k0 += 128) {
        float4 xv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) xv[r] = *reinterpret_cast<const float4*>(xw + r * k_len + k0);
#pragma unroll
        for (int j = 0; j < kMaxC; ++j) {
          if (j < c) {
            const float4 wv = *reinterpret_cast<const float4*>(ws + j * k_len + k0);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              z[r][j] = fmaf(xv[r].x, wv.x, z[r][j]);
              z[r][j] = fmaf(xv[r].y, wv.y, z[r][j]);
              z[r][j] = fmaf(xv[r].z, wv.z, z[r][j]);
              z[r][j] = fmaf(xv[r].w, wv.w, z[r][j]);
            }
          }
        }
      }
    } else {
      for (int k = lane; k < k_len; k += 32) {
#pragma unroll
        for (int j = 0; j < kMaxC; ++j) {
          if (j < c) {
            const float wv = ws[j * k_len + k];
#pragma unroll
            for (int r = 0; r < kRows; ++r) z[r][j] = fmaf(xw[r * k_len + k], wv, z[r][j]);
          }
        }
      }
    }
    // Per row: lane `lane` takes class cls = lane >> kShift (its logit summed over the warp),
    // computes that class's softmax terms and dlogits (the lanes of a class agree bit for bit),
    // and the row's sums go over the classes' first lanes (a fixed xor tree).
    float dl[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = g * kRows + r;
      const float zj = ReduceClassesOverWarp(z[r], lane) + (own && a.bias != nullptr ? __ldg(a.bias + cls) : 0.0f);
      const WarpSceRow t(zj, own, first, cls, kShift, y[r], c, a.ignore_index, eps, scale);
      dl[r] = t.dl;
      if (row < a.n) {
        if (own && first) a.dlogits[row * ldc + cls] = dl[r];
        for (int j = c + lane; j < ldc; j += 32) a.dlogits[row * ldc + j] = 0.0f;  // padded columns
        if (lane == 0 && y[r] != a.ignore_index) {
          acc += t.Loss(eps, c);
          cnt += 1.0;
        }
      }
    }
    // Every lane takes the rows' dlogits for dx.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < kMaxC; ++i) z[r][i] = __shfl_sync(0xffffffffu, dl[r], i << kShift);
    }
    // dx = dlogits · W, through the ReLU mask or x's ReLU; the column sums of the rows.
    if constexpr (kVec) {
      for (int k0 = 4 * lane; k0 < k_len; k0 += 128) {
        float4 o[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) o[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < kMaxC; ++j) {
          if (j < c) {
            const float4 wv = *reinterpret_cast<const float4*>(ws + j * k_len + k0);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              o[r].x = fmaf(z[r][j], wv.x, o[r].x);
              o[r].y = fmaf(z[r][j], wv.y, o[r].y);
              o[r].z = fmaf(z[r][j], wv.z, o[r].z);
              o[r].w = fmaf(z[r][j], wv.w, o[r].w);
            }
          }
        }
        float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t row = g * kRows + r;
          if (row >= a.n) continue;
          if (a.mask != nullptr) {
            const unsigned bits = mw[r * a.mask_ld + (k0 >> 3)] >> (k0 & 7);  // k0 % 8 is 0 or 4
            o[r].x = bits & 1u ? o[r].x : 0.0f;
            o[r].y = bits & 2u ? o[r].y : 0.0f;
            o[r].z = bits & 4u ? o[r].z : 0.0f;
            o[r].w = bits & 8u ? o[r].w : 0.0f;
          } else if (a.relu_x) {  // ReluGrad(dx, x): x > 0 (false for NaN)
            const float4 xv = *reinterpret_cast<const float4*>(xw + r * k_len + k0);
            o[r].x = xv.x > 0.0f ? o[r].x : 0.0f;
            o[r].y = xv.y > 0.0f ? o[r].y : 0.0f;
            o[r].z = xv.z > 0.0f ? o[r].z : 0.0f;
            o[r].w = xv.w > 0.0f ? o[r].w : 0.0f;
          }
          *reinterpret_cast<float4*>(a.dx + row * k_len + k0) = o[r];
          t.x += o[r].x;
          t.y += o[r].y;
          t.z += o[r].z;
          t.w += o[r].w;
        }
        if (sums) {  // the lane's own columns of the warp's row: no other lane touches them
          float4 u = *reinterpret_cast<float4*>(cw + k0);
          u.x += t.x;
          u.y += t.y;
          u.z += t.z;
          u.w += t.w;
          *reinterpret_cast<float4*>(cw + k0) = u;
        }
      }
    } else {
      for (int k = lane; k < k_len; k += 32) {
        float t = 0.0f;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t row = g * kRows + r;
          if (row >= a.n) continue;
          float o = 0.0f;
#pragma unroll
          for (int j = 0; j < kMaxC; ++j) {
            if (j < c) o = fmaf(z[r][j], ws[j * k_len + k], o);
          }
          const bool on = a.mask != nullptr ? ((mw[r * a.mask_ld + (k >> 3)] >> (k & 7)) & 1u) != 0
                                            : !a.relu_x || xw[r * k_len + k] > 0.0f;
          o = on ? o : 0.0f;
          a.dx[row * k_len + k] = o;
          t += o;
        }
        if (sums) cw[k] += t;
      }
    }
  }
  // The column sums: the block's (warps in order, in double) into its row of bg.partial, then the
  // grid's (FinishBiasGrad: with several blocks, all resident, column by column in block order).
  if (sums) {
    __syncthreads();
    for (int k = threadIdx.x; k < k_len; k += blockDim.x) {
      double t = 0;
      for (int i = 0; i < kLinWarps; ++i) t += static_cast<double>(ws[(c + kLinWarps * kRows + i) * k_len + k]);
      bg.partial[static_cast<int64_t>(blockIdx.x) * k_len + k] = t;
    }
    FinishBiasGrad(bg, sync, k_len);
  }
  // The block's loss partial (warps in order), then the grid's (the last block, fixed order).
  if (lane == 0) {
    s_loss[warp] = acc;
    s_cnt[warp] = cnt;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0, count = 0;
    for (int i = 0; i < kLinWarps; ++i) {
      total += s_loss[i];
      count += s_cnt[i];
    }
    WriteBlockResult<float>(total, count, true, a.loss, nullptr, partial);
  }
  FinishGrid<float>(sync, partial, a.loss);
}

// One row per block, for the small batches (n <= kLinSelfCount) of the vector path with at most 16
// classes and no column sums: the MLP's classifier at batch 128 took 10.3 µs as 32 blocks of a row
// per warp (bench/RESULTS.md 2026-12-07 (4)): 1 warp per scheduler issuing every 8.4 cycles
// through a warp's whole row (its 512 columns' products for 10 classes, the softmax, dx), the
// weight copied into every block's shared memory first. Here each of the block's 4 warps takes
// 128 columns of the row per pass (4 per lane, kChunks passes: K <= 512 kChunks): every load is
// issued at once (the lane's float4 of x, of the weight's c rows, its mask bits, the labels for
// the count), each logit is summed over the lane's columns, the warp's lanes
// (ReduceClassesOverWarp) and the 4 warps in order, warp 0 computes the softmax terms as
// LinearSceKernel does (the same formulas), and every lane makes its columns of dx from the
// weight still in its registers. The labels are counted by every block (as LinearSceKernel below
// kLinSelfCount rows); the loss partials are added by the last block (FinishGrid).
template <int kChunks>
__global__ void __launch_bounds__(kLinWarps * 32) LinearSceRowKernel(LinearSceArgs a, double* __restrict__ partial,
                                                                    SceSync* sync) {
  constexpr int kMaxC = 16, kThreads = kLinWarps * 32;
  constexpr int kLabelsPerThread = static_cast<int>(kLinSelfCount / kThreads);
  __shared__ float zs[kLinWarps][kMaxC];
  __shared__ float dls[kMaxC];
  __shared__ unsigned counts[kLinWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = a.c;
  const int k_len = static_cast<int>(a.k);
  const int64_t row = blockIdx.x;
  WaitForPriorGrids();  // x, the mask and the labels are earlier launches' outputs
  LetDependentsLaunch();
  float4 xv[kChunks], wv[kChunks][kMaxC];
  unsigned bits[kChunks];
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    const int k0 = 4 * (tid + kThreads * q);
    const bool valid = k0 < k_len;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    xv[q] = valid ? __ldg(reinterpret_cast<const float4*>(a.x + row * k_len + k0)) : zero;
#pragma unroll
    for (int j = 0; j < kMaxC; ++j) {
      wv[q][j] = valid && j < c ? __ldg(reinterpret_cast<const float4*>(a.w + static_cast<int64_t>(j) * k_len + k0))
                                : zero;
    }
    bits[q] = valid && a.mask != nullptr ? (a.mask[row * a.mask_ld + (k0 >> 3)] >> (k0 & 7)) & 0xFu : 0xFu;
  }
  const int64_t y = LoadLabel(a.labels, a.labels64, row);
  unsigned mine = 0;
#pragma unroll
  for (int i = 0; i < kLabelsPerThread; ++i) {
    const int64_t r = tid + static_cast<int64_t>(kThreads) * i;
    mine += r < a.n && LoadLabel(a.labels, a.labels64, r) != a.ignore_index ? 1u : 0u;
  }
  mine = __reduce_add_sync(0xffffffffu, mine);
  if (lane == 0) counts[warp] = mine;
  // This lane's share of the logits.
  float z[kMaxC];
#pragma unroll
  for (int j = 0; j < kMaxC; ++j) z[j] = 0.0f;
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
#pragma unroll
    for (int j = 0; j < kMaxC; ++j) {
      if (j < c) {
        z[j] = fmaf(xv[q].x, wv[q][j].x, z[j]);
        z[j] = fmaf(xv[q].y, wv[q][j].y, z[j]);
        z[j] = fmaf(xv[q].z, wv[q][j].z, z[j]);
        z[j] = fmaf(xv[q].w, wv[q][j].w, z[j]);
      }
    }
  }
  const float zw = ReduceClassesOverWarp<kMaxC>(z, lane);  // lane l: class l >> 1
  if ((lane & 1) == 0) zs[warp][lane >> 1] = zw;
  __syncthreads();
  if (warp == 0) {
    unsigned count = 0;
#pragma unroll
    for (int w = 0; w < kLinWarps; ++w) count += counts[w];
    const double scale = LoadAny(a.dloss, a.dloss_dtype, 0) / static_cast<double>(count);
    const double eps = a.label_smoothing;
    const int cls = lane >> 1;
    const bool own = cls < c, first = (lane & 1) == 0;
    float zj = 0.0f;
    if (own) {
      zj = zs[0][cls];
#pragma unroll
      for (int w = 1; w < kLinWarps; ++w) zj += zs[w][cls];
      if (a.bias != nullptr) zj += __ldg(a.bias + cls);
    }
    const WarpSceRow t(zj, own, first, cls, 1, y, c, a.ignore_index, eps, scale);
    const float dl = t.dl;
    if (own && first) {
      a.dlogits[row * a.ldc + cls] = dl;
      dls[cls] = dl;
    }
    for (int j = c + lane; j < a.ldc; j += 32) a.dlogits[row * a.ldc + j] = 0.0f;  // padded columns
    if (lane == 0) {
      const bool counted = y != a.ignore_index;
      const double loss = !counted ? 0.0 : t.Loss(eps, c);
      WriteBlockResult<float>(loss, counted ? 1.0 : 0.0, true, a.loss, nullptr, partial);
    }
  }
  __syncthreads();
  // dx = dlogits · W through the ReLU mask or x's ReLU, from the registers.
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    const int k0 = 4 * (tid + kThreads * q);
    if (k0 >= k_len) continue;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < kMaxC; ++j) {
      if (j < c) {
        const float d = dls[j];
        o.x = fmaf(d, wv[q][j].x, o.x);
        o.y = fmaf(d, wv[q][j].y, o.y);
        o.z = fmaf(d, wv[q][j].z, o.z);
        o.w = fmaf(d, wv[q][j].w, o.w);
      }
    }
    if (a.relu_x) {  // ReluGrad(dx, x): x > 0 (false for NaN)
      o.x = xv[q].x > 0.0f ? o.x : 0.0f;
      o.y = xv[q].y > 0.0f ? o.y : 0.0f;
      o.z = xv[q].z > 0.0f ? o.z : 0.0f;
      o.w = xv[q].w > 0.0f ? o.w : 0.0f;
    } else {
      o.x = bits[q] & 1u ? o.x : 0.0f;
      o.y = bits[q] & 2u ? o.y : 0.0f;
      o.z = bits[q] & 4u ? o.z : 0.0f;
      o.w = bits[q] & 8u ? o.w : 0.0f;
    }
    *reinterpret_cast<float4*>(a.dx + row * k_len + k0) = o;
  }
  FinishGrid<float>(sync, partial, a.loss);
}

template <int kMaxC, bool kVec, int kRows>
cudaError_t LaunchLinearSceAs(const LinearSceArgs& a, SceForwardPlan p, bool coop, double* partial,
                              const SceScaleSource& src, SceSync* sync, const SceBiasGrad& bg, cudaStream_t s,
                              bool programmatic) {
  static const cudaError_t attr = cudaFuncSetAttribute(LinearSceKernel<kMaxC, kVec, kRows>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(ir::kLinearSceMaxSmemBytes));
  if (attr != cudaSuccess) return attr;
  return LaunchSce(LinearSceKernel<kMaxC, kVec, kRows>, p, coop, s, programmatic, a, partial, src, sync, bg);
}

// ---------------------------------------------------------------------------------------------
// ottr::SoftmaxCrossEntropyGrad.

// kSingle: one block computes the scale itself; otherwise it is read from `scale_in`.
template <typename T, bool kSingle>
__global__ void SceBackwardKernel(const T* __restrict__ lp, const void* __restrict__ labels, bool l64,
                                  T* __restrict__ dx, int64_t n, int64_t c, IndexDiv cdiv,
                                  int64_t ignore, double eps, const void* dloss, int dloss_dtype,
                                  const double* __restrict__ scale_in) {
  __shared__ double sm[32];
  double scale;
  if constexpr (kSingle) {
    scale = SceScale(labels, l64, n, ignore, dloss, dloss_dtype, sm);
  } else {
    scale = *scale_in;
  }
  const int64_t total = n * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = cdiv.Div(i);
    const int64_t j = i - row * c;
    dx[i] = SceGradAt<T, T>(static_cast<double>(ToC(lp[i])), j, LoadLabel(labels, l64, row), c, ignore, eps, scale);
  }
}

constexpr int64_t kSceBackwardSingle = 32768;  // N·C up to which one block does everything

template <typename T>
void SceBackwardTyped(int dloss_dtype, const void* dloss, const void* lpv, const void* labels, bool l64,
                      void* dxv, int64_t n, int64_t c, int64_t ignore, double eps, void* workspace,
                      cudaStream_t s) {
  const T* lp = static_cast<const T*>(lpv);
  T* dx = static_cast<T*>(dxv);
  const int64_t total = n * c;
  const IndexDiv cdiv(c, total);
  if (total <= kSceBackwardSingle) {
    SceBackwardKernel<T, true><<<1, 1024, 0, s>>>(lp, labels, l64, dx, n, c, cdiv, ignore, eps, dloss,
                                                  dloss_dtype, nullptr);
    return;
  }
  double* scale = static_cast<double*>(workspace);
  SceScaleKernel<<<1, 1024, 0, s>>>(labels, l64, n, ignore, dloss, dloss_dtype, scale);
  const int grid = nl::GridFor(total, 256 * 4, nl::SmCount() * 8);
  SceBackwardKernel<T, false><<<grid, 256, 0, s>>>(lp, labels, l64, dx, n, c, cdiv, ignore, eps, dloss,
                                                   dloss_dtype, scale);
}

// ---------------------------------------------------------------------------------------------
// ONNX NegativeLogLikelihoodLoss forward (and the (L, W) statistics of the backward).

struct Position {
  double loss;    // w_j · (−lp_j), NaN for an out-of-range label
  double weight;  // w_j
};

template <typename T>
__device__ __forceinline__ Position NllAt(const T* lp, const void* labels, bool l64, const void* w, int wdt,
                                          int64_t j, const IndexDiv& ddiv, int64_t c, int64_t d,
                                          bool has_ignore, int64_t ignore) {
  const int64_t t = LoadLabel(labels, l64, j);
  if (has_ignore && t == ignore) return {0.0, 0.0};
  if (t < 0 || t >= c) return {NaN(), 0.0};
  const int64_t b = ddiv.Div(j), k = j - b * d;
  const double wj = w != nullptr ? LoadAny(w, wdt, t) : 1.0;
  return {-static_cast<double>(ToC(lp[(b * c + t) * d + k])) * wj, wj};
}

// reduction none: out_none[j] = loss_j. Otherwise (L, W) per block: the loss (sum: L, mean:
// L / W) or `stats` when the grid has one block, else partials.
template <typename T>
__global__ void NllKernel(const T* __restrict__ lp, const void* __restrict__ labels, bool l64,
                          const void* __restrict__ w, int wdt, T* out_none, T* out_scalar, double* stats,
                          double* partial, int64_t positions, IndexDiv ddiv, int64_t c, int64_t d,
                          bool has_ignore, int64_t ignore, int reduction) {
  __shared__ double sm[64];
  double l_sum = 0, w_sum = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < positions;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Position p = NllAt(lp, labels, l64, w, wdt, j, ddiv, c, d, has_ignore, ignore);
    if (reduction == static_cast<int>(LossReduction::kNone)) {
      out_none[j] = FromC<T>(p.loss);
    } else {
      l_sum += p.loss;
      w_sum += p.weight;
    }
  }
  if (reduction == static_cast<int>(LossReduction::kNone)) return;
  nl::BlockSum2(l_sum, w_sum, sm);
  if (threadIdx.x == 0) {
    WriteBlockResult<T>(l_sum, w_sum, reduction == static_cast<int>(LossReduction::kMean), out_scalar, stats,
                        partial);
  }
}

constexpr int64_t kNllSingle = 16384;  // positions up to which one block reduces everything

// Launches the NLL reduction (sum/mean loss into `out_scalar`, or (L, W) into `stats`).
template <typename T>
void LaunchNllReduce(const T* lp, const void* labels, bool l64, const void* w, int wdt, T* out_scalar,
                     double* stats, double* partial, int64_t n, int64_t c, int64_t d, LossReduction r,
                     bool has_ignore, int64_t ignore, cudaStream_t s) {
  const int64_t positions = n * d;
  const IndexDiv ddiv(d, positions);
  const bool divide = r == LossReduction::kMean;
  if (positions <= kNllSingle) {
    NllKernel<T><<<1, 1024, 0, s>>>(lp, labels, l64, w, wdt, nullptr, out_scalar, stats, partial, positions, ddiv,
                                    c, d, has_ignore, ignore, static_cast<int>(r));
    return;
  }
  const int grid = nl::GridFor(positions, 256 * 8, kMaxPartials);
  NllKernel<T><<<grid, 256, 0, s>>>(lp, labels, l64, w, wdt, nullptr, out_scalar, stats, partial, positions, ddiv,
                                    c, d, has_ignore, ignore, static_cast<int>(r));
  if (grid > 1) FinalizeKernel<T><<<1, 256, 0, s>>>(partial, grid, divide, out_scalar, stats);
}

template <typename T>
void NllTyped(const void* lpv, const void* labels, bool l64, const void* w, int wdt, void* lossv, int64_t n,
              int64_t c, int64_t d, LossReduction r, bool has_ignore, int64_t ignore, void* workspace,
              cudaStream_t s) {
  const T* lp = static_cast<const T*>(lpv);
  T* loss = static_cast<T*>(lossv);
  if (r == LossReduction::kNone) {
    const int64_t positions = n * d;
    if (positions == 0) return;
    const IndexDiv ddiv(d, positions);
    const int grid = nl::GridFor(positions, 256 * 4, nl::SmCount() * 8);
    NllKernel<T><<<grid, 256, 0, s>>>(lp, labels, l64, w, wdt, loss, nullptr, nullptr, nullptr, positions, ddiv, c,
                                      d, has_ignore, ignore, static_cast<int>(r));
    return;
  }
  LaunchNllReduce<T>(lp, labels, l64, w, wdt, loss, nullptr, static_cast<double*>(workspace), n, c, d, r,
                     has_ignore, ignore, s);
}

// ---------------------------------------------------------------------------------------------
// ottr::SoftmaxCrossEntropyLossGrad / ottr::NegativeLogLikelihoodLossGrad.

// c_j for a position that is neither ignored nor out of range (see loss_kernels.h).
__device__ __forceinline__ double LossCoef(double wj, const void* dloss, int dldt, int64_t j, int reduction,
                                           const double* stats) {
  if (reduction == static_cast<int>(LossReduction::kNone)) return wj * LoadAny(dloss, dldt, j);
  const double dl = LoadAny(dloss, dldt, 0);
  if (reduction == static_cast<int>(LossReduction::kSum)) return wj * dl;
  return wj * dl / stats[1];
}

// Elements of dx [N, C, D]; computed like the CPU reference (the coefficient in double, the
// element in the compute type).
template <typename T, bool kSoftmax>
__global__ void ClassLossDxKernel(const T* __restrict__ lp, const void* __restrict__ labels, bool l64,
                                  const void* __restrict__ w, int wdt, const void* __restrict__ dloss, int dldt,
                                  const double* __restrict__ stats, T* __restrict__ dx, int64_t total,
                                  IndexDiv ddiv, IndexDiv cdiv, int64_t c, int64_t d, bool has_ignore,
                                  int64_t ignore, int reduction) {
  using C = ComputeT<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t q = ddiv.Div(i), k = i - q * d;
    const int64_t b = cdiv.Div(q), ch = q - b * c;
    const int64_t j = b * d + k;
    const int64_t t = LoadLabel(labels, l64, j);
    C v;
    if (has_ignore && t == ignore) {
      v = C(0);
    } else if (t < 0 || t >= c) {
      v = static_cast<C>(NaN());
    } else {
      const double wj = w != nullptr ? LoadAny(w, wdt, t) : 1.0;
      const double coef = LossCoef(wj, dloss, dldt, j, reduction, stats);
      if constexpr (kSoftmax) {
        const C onehot = ch == t ? C(1) : C(0);
        v = static_cast<C>(coef) * (nl::Exp(ToC(lp[i])) - onehot);
      } else {
        v = ch == t ? static_cast<C>(-coef) : C(0);
      }
    }
    dx[i] = FromC<T>(v);
  }
}

// dweights[k]: one block per class scans every position (deterministic, O(C · positions)).
template <typename T>
__global__ void ClassLossDweightsKernel(const T* __restrict__ lp, const void* __restrict__ labels, bool l64,
                                        const void* __restrict__ dloss, int dldt,
                                        const double* __restrict__ stats, void* dw, int wdt, int64_t positions,
                                        IndexDiv ddiv, int64_t c, int64_t d, bool has_ignore, int64_t ignore,
                                        int reduction) {
  __shared__ double sm[32];
  for (int64_t cls = blockIdx.x; cls < c; cls += gridDim.x) {
    if (has_ignore && cls == ignore) {
      // Positions labelled ignore_index contribute nothing.
      if (threadIdx.x == 0) nl::StoreAny(dw, wdt, cls, 0.0);
      continue;
    }
    double acc = 0;
    for (int64_t j = threadIdx.x; j < positions; j += blockDim.x) {
      if (LoadLabel(labels, l64, j) != cls) continue;
      const int64_t b = ddiv.Div(j), k = j - b * d;
      const double nlp = -static_cast<double>(ToC(lp[(b * c + cls) * d + k]));
      if (reduction == static_cast<int>(LossReduction::kNone)) {
        acc += LoadAny(dloss, dldt, j) * nlp;
      } else if (reduction == static_cast<int>(LossReduction::kSum)) {
        acc += LoadAny(dloss, dldt, 0) * nlp;
      } else {
        acc += LoadAny(dloss, dldt, 0) / stats[1] * (nlp - stats[0] / stats[1]);
      }
    }
    acc = nl::BlockSum(acc, sm);
    if (threadIdx.x == 0) nl::StoreAny(dw, wdt, cls, acc);
  }
}

template <typename T>
void ClassLossGradTyped(bool softmax, int dldt, const void* dloss, const void* lpv, const void* labels, bool l64,
                        const void* w, int wdt, void* dxv, void* dw, int64_t n, int64_t c, int64_t d,
                        LossReduction r, bool has_ignore, int64_t ignore, void* workspace, cudaStream_t s) {
  const T* lp = static_cast<const T*>(lpv);
  T* dx = static_cast<T*>(dxv);
  double* stats = static_cast<double*>(workspace);  // [L, W]
  double* partial = stats + 2;
  const int64_t positions = n * d;
  const IndexDiv ddiv(d, n * c * d);
  const int reduction = static_cast<int>(r);
  if (r == LossReduction::kMean) {
    LaunchNllReduce<T>(lp, labels, l64, w, wdt, nullptr, stats, partial, n, c, d, r, has_ignore, ignore, s);
  }
  const int64_t total = n * c * d;
  if (dx != nullptr && total > 0) {
    const IndexDiv cdiv(c, n * c);
    const int grid = nl::GridFor(total, 256 * 4, nl::SmCount() * 8);
    if (softmax) {
      ClassLossDxKernel<T, true><<<grid, 256, 0, s>>>(lp, labels, l64, w, wdt, dloss, dldt, stats, dx, total, ddiv,
                                                      cdiv, c, d, has_ignore, ignore, reduction);
    } else {
      ClassLossDxKernel<T, false><<<grid, 256, 0, s>>>(lp, labels, l64, w, wdt, dloss, dldt, stats, dx, total,
                                                       ddiv, cdiv, c, d, has_ignore, ignore, reduction);
    }
  }
  if (dw != nullptr && c > 0) {
    const int grid = static_cast<int>(std::min<int64_t>(c, nl::SmCount() * 4));
    ClassLossDweightsKernel<T><<<grid, 256, 0, s>>>(lp, labels, l64, dloss, dldt, stats, dw, wdt, positions, ddiv,
                                                    c, d, has_ignore, ignore, reduction);
  }
}

}  // namespace

int64_t SceForwardWorkspaceBytes(int64_t n, int64_t c) { return 2 * kMaxPartials * sizeof(double); }

cudaError_t LaunchSceForward(int dtype, const void* logits, const void* labels, bool labels64, void* loss,
                             void* log_prob, int64_t n, int64_t c, int64_t ignore_index, float label_smoothing,
                             void* workspace, cudaStream_t stream, int64_t ld) {
  cudaError_t err = cudaSuccess;
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    err = SceForwardTyped<T, T>(logits, labels, labels64, loss, log_prob, n, c, ignore_index, label_smoothing,
                                static_cast<double*>(workspace), nullptr, nullptr, 0, nullptr, stream, nullptr, ld);
  });
  if (err != cudaSuccess) return err;
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t SceBackwardWorkspaceBytes(int64_t n, int64_t c) { return sizeof(double); }

cudaError_t LaunchSceBackward(int dtype, int dloss_dtype, const void* dloss, const void* log_prob,
                              const void* labels, bool labels64, void* dlogits, int64_t n, int64_t c,
                              int64_t ignore_index, float label_smoothing, void* workspace, cudaStream_t stream) {
  if (n * c == 0) return cudaSuccess;
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    SceBackwardTyped<T>(dloss_dtype, dloss, log_prob, labels, labels64, dlogits, n, c, ignore_index,
                        label_smoothing, workspace, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t SceWithGradWorkspaceBytes(int64_t n, int64_t c) { return 256 + SceForwardWorkspaceBytes(n, c); }

int64_t SceWithGradCounterBytes(int64_t n, int64_t ld) { return PlanSceForward(n, ld).grid > 1 ? sizeof(SceSync) : 0; }

int64_t SceBiasGradWorkspaceBytes(int64_t n, int64_t ld) {
  return static_cast<int64_t>(PlanSceForward(n, ld).grid) * ld * static_cast<int64_t>(sizeof(double));
}

cudaError_t LaunchSceWithGrad(int dtype, int grad_dtype, int dloss_dtype, const void* logits, const void* labels,
                              bool labels64, const void* dloss, void* loss, void* dlogits, int64_t n, int64_t c,
                              int64_t ignore_index, float label_smoothing, void* workspace, cudaStream_t stream,
                              void* counters, int64_t ld, float* dbias, void* bias_workspace, const void* count) {
  if (n * c == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  // workspace: the scale (256 bytes), then the forward's partials.
  double* scale = static_cast<double*>(workspace);
  double* partial = reinterpret_cast<double*>(static_cast<char*>(workspace) + 256);
  SceBiasGrad bg;
  if (dbias != nullptr) {
    if (bias_workspace == nullptr) return cudaErrorInvalidValue;
    bg.partial = static_cast<double*>(bias_workspace);
    bg.out = dbias;
  }
  bool ok = false;
  nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto gtag) {
      using G = decltype(gtag);
      err = SceForwardTyped<T, G>(logits, labels, labels64, loss, nullptr, n, c, ignore_index, label_smoothing,
                                  partial, static_cast<G*>(dlogits), dloss, dloss_dtype, scale, stream,
                                  static_cast<SceSync*>(counters), ld, bg, static_cast<const int64_t*>(count));
      ok = true;
    };
    if (grad_dtype == dtype) {
      run(T{});
    } else if constexpr (std::is_same_v<T, float>) {
      if (grad_dtype == nl::kBF16) run(__nv_bfloat16{});
      if (grad_dtype == nl::kF16) run(__half{});
    }
  });
  if (err != cudaSuccess) return err;
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchCountLabels(const void* labels, bool labels64, int64_t n, int64_t ignore_index, void* count,
                              cudaStream_t stream) {
  CountLabelsKernel<<<1, 1024, 0, stream>>>(labels, labels64, n, ignore_index, static_cast<int64_t*>(count));
  return cudaGetLastError();
}

// The loss partials, then with column sums a row of K doubles per block (the grid is at most
// one block per kLinWarps rows and kMaxPartials).
int64_t LinearSceWorkspaceBytes(int64_t n, int64_t k, bool col_sums) {
  const int64_t blocks = std::min<int64_t>((std::max<int64_t>(n, 1) + kLinWarps - 1) / kLinWarps, kMaxPartials);
  return (2 * kMaxPartials + (col_sums ? blocks * k : 0)) * static_cast<int64_t>(sizeof(double));
}

int64_t LinearSceCounterBytes() { return sizeof(SceSync); }

cudaError_t LaunchLinearSce(const LinearSceArgs& in, void* workspace, void* counters, cudaStream_t stream,
                            bool programmatic) {
  LinearSceArgs a = in;
  if (a.ldc == 0) a.ldc = a.c;
  const bool col_sums = a.dbias != nullptr;
  if (!ir::LinearSceFits(a.c, a.k, col_sums) || a.ldc < a.c || a.n < 0 || a.k < 0 ||
      (a.mask != nullptr && (a.relu_x || a.mask_ld < (a.k + 7) / 8))) {
    return cudaErrorInvalidValue;
  }
  if (a.n == 0) return cudaSuccess;
  if (a.n > 1 && counters == nullptr) return cudaErrorInvalidValue;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = a.trans_b && a.k % 4 == 0 && a.mask_ld % 16 == 0 && aligned(a.x) && aligned(a.w) &&
                   aligned(a.dx) && aligned(a.mask);
  // Above kLinSelfCount rows each warp works on kLinRows rows at once where they fit (16 classes
  // or fewer, the vector path).
  const int64_t mask_ld = a.mask != nullptr ? a.mask_ld : 0;
  const bool multi = a.n > kLinSelfCount && vec && a.c <= 16 &&
                     ir::LinearSceSmemBytes(a.c, a.k, mask_ld, col_sums, kLinRows) <= ir::kLinearSceMaxSmemBytes;
  const int rows = multi ? kLinRows : 1;
  SceForwardPlan p;
  p.threads = kLinWarps * 32;
  p.grid = static_cast<int>(std::min<int64_t>((a.n + kLinWarps * rows - 1) / (kLinWarps * rows), kMaxPartials));
  p.smem = static_cast<int>(ir::LinearSceSmemBytes(a.c, a.k, mask_ld, col_sums, rows));
  SceSync* sync = static_cast<SceSync*>(counters);
  SceScaleSource src;
  src.dloss = a.dloss;
  src.dloss_dtype = a.dloss_dtype;
  // The column sums of several blocks wait for each other: a cooperative grid.
  const bool coop = p.grid > 1 && (a.n > kLinSelfCount || col_sums);
  if (coop) src.sync = sync;
  double* partial = static_cast<double*>(workspace);
  SceBiasGrad bg;
  if (col_sums) {
    bg.partial = partial + 2 * kMaxPartials;
    bg.out = a.dbias;
  }
  // Small batches without column sums: a block per row (LinearSceRowKernel), K <= 1024.
  if (vec && !col_sums && a.c <= 16 && a.n <= kLinSelfCount && a.k <= 2 * 4 * kLinWarps * 32) {
    SceForwardPlan rp;
    rp.threads = kLinWarps * 32;
    rp.grid = static_cast<int>(a.n);
    const cudaError_t e =
        a.k <= 4 * kLinWarps * 32
            ? LaunchSce(LinearSceRowKernel<1>, rp, false, stream, programmatic, a, partial, a.n > 1 ? sync : nullptr)
            : LaunchSce(LinearSceRowKernel<2>, rp, false, stream, programmatic, a, partial, a.n > 1 ? sync : nullptr);
    return e != cudaSuccess ? e : cudaGetLastError();
  }
  cudaError_t err;
  if (multi) {
    err = LaunchLinearSceAs<16, true, kLinRows>(a, p, coop, partial, src, sync, bg, stream, programmatic);
  } else if (a.c <= 16) {
    err = vec ? LaunchLinearSceAs<16, true, 1>(a, p, coop, partial, src, sync, bg, stream, programmatic)
              : LaunchLinearSceAs<16, false, 1>(a, p, coop, partial, src, sync, bg, stream, programmatic);
  } else {
    err = vec ? LaunchLinearSceAs<32, true, 1>(a, p, coop, partial, src, sync, bg, stream, programmatic)
              : LaunchLinearSceAs<32, false, 1>(a, p, coop, partial, src, sync, bg, stream, programmatic);
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

int64_t NllLossWorkspaceBytes(int64_t n, int64_t c, int64_t d) { return 2 * kMaxPartials * sizeof(double); }

cudaError_t LaunchNllLoss(int dtype, const void* logp, const void* labels, bool labels64, const void* weights,
                          int weights_dtype, void* loss, int64_t n, int64_t c, int64_t d, LossReduction reduction,
                          bool has_ignore, int64_t ignore_index, void* workspace, cudaStream_t stream) {
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    NllTyped<T>(logp, labels, labels64, weights, weights_dtype, loss, n, c, d, reduction, has_ignore, ignore_index,
                workspace, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t ClassLossGradWorkspaceBytes(int64_t n, int64_t c, int64_t d) {
  return (2 + 2 * kMaxPartials) * sizeof(double);
}

cudaError_t LaunchClassLossGrad(bool softmax, int dtype, int dloss_dtype, const void* dloss, const void* logp,
                                const void* labels, bool labels64, const void* weights, int weights_dtype, void* dx,
                                void* dweights, int64_t n, int64_t c, int64_t d, LossReduction reduction,
                                bool has_ignore, int64_t ignore_index, void* workspace, cudaStream_t stream) {
  const bool ok = nl::DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    ClassLossGradTyped<T>(softmax, dloss_dtype, dloss, logp, labels, labels64, weights, weights_dtype, dx, dweights,
                          n, c, d, reduction, has_ignore, ignore_index, workspace, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ottr::cuda::kernels
