// ottr::LinearSceReluGrad (loss_kernels.h): a classifier head's forward, its softmax
// cross-entropy and the whole backward through it and the ReLU before it, in one pass over the
// ReLU's output Y.
//
// Why: at batch 8192 the small MLP's head was three launches on the step's critical path (H100
// trace, bench/RESULTS.md 2026-12-06): the classifier GEMM (8.0 µs, cuBLASLt reading Y), the loss
// kernel (7.5), then LinearReluGrad reading Y again (23.4), with launch gaps between. Y is
// [8192, 512] floats (16.8 MB); the head's arithmetic is tiny (K <= 16 classes), so the floor is
// reading Y once and writing dX once.
//
// Layout: a cooperative grid of one 512-thread block per SM; each block takes tiles of 64 rows
// (tile b, b + grid, ...: one per block for the small MLP at 8192), copied whole into shared memory
// by one batch of cp.async (128 KB at 512 columns). Warp w owns 8·NT of the N = 128·NT columns.
// Per tile, in two rounds of 32 rows:
//   A  logits: each warp multiplies its columns of the round's rows by Wᵀ (mma.sync m16n8k8 TF32,
//      as the TF32 GEMM it replaces; W's fragments stay in registers), partials to shared memory;
//   B  each half-warp adds a row's 16 warp partials in warp order plus the bias, and computes the
//      softmax, the loss terms and dlogits as the SCE kernels do (sce_math.cuh; log-sum-exp in
//      double, dloss / count from ottr::CountLabels), dlogits to shared memory;
// then
//   C  dX = (dZ·W) ⊙ [Y > 0] on the tensor cores in three TF32 products (hi·hi + hi·lo + lo·hi of
//      the split operands: float32-level error, as LinearReluGrad's float32 sums), written from
//      the fragments; dB = Σ dX in float32 per lane; dW += dZᵀ·Y in TF32 (LinearReluGrad's tensor-
//      core weight gradient).
// Then every block writes its partials (dW, dB, dBz; the loss and its count) to the workspace in
// chunks of 32 outputs ([chunk][block][32]: a warp reading one block after another reads 128
// contiguous bytes), the blocks wait for each other (every block is resident: a cooperative
// launch), and four warps per chunk add the blocks' partials in block order, combined in a fixed
// order: deterministic for a given grid, no atomics on values. The last block to finish clears
// the two counters.
//
// Measured (H100, bench/RESULTS.md 2026-12-06 (2)): 26 µs for [8192, 512] with 12 classes, of
// which about 13 µs are the copy of Y, the partials and the grid's wait, and 9 µs phase C.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ir/linear_sce_layout.h"
#include "runtime/cuda/kernels/loss_kernels.h"
#include "runtime/cuda/kernels/mma_tf32.cuh"
#include "runtime/cuda/kernels/norm_common.cuh"
#include "runtime/cuda/kernels/pdl.cuh"
#include "runtime/cuda/kernels/sce_math.cuh"

namespace ottr::cuda::kernels {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kMt = 4;             // m16 MMA tiles per tile of rows
constexpr int kRows = 16 * kMt;    // rows per tile, all in shared memory at once
constexpr int kHalf = kRows / 2;   // rows per logits round (two m16 tiles; a half-warp's row each)
constexpr int kKp = 16;            // classes padded to 16: two n8 tiles (logits), two k8 steps (dX)
constexpr int kZsStride = 20;      // dlogits' row stride in shared memory (fragment reads: few conflicts)
constexpr int kMaxBlocksPerLane = 8;  // the final sums: a lane adds at most 8 blocks' partials

struct Sync {
  unsigned arrive;  // blocks that have written their partials
  unsigned done;    // blocks that have finished their share of the sums
};

constexpr int YsStride(int n) { return n + 8; }  // ≡ 8 (mod 32): conflict-free B-fragment reads of Y

// Y's tile, W, one round's partial logits of every warp, the tile's dlogits.
constexpr int64_t SmemBytes(int n) {
  return (static_cast<int64_t>(kRows + kKp) * YsStride(n) + kWarps * kHalf * kKp + kRows * kZsStride) *
         static_cast<int64_t>(sizeof(float));
}
static_assert(SmemBytes(512) <= 227 * 1024, "the widest Y tile fits an SM's shared memory");

__device__ __forceinline__ void CpAsync16(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// hi + lo = x to about 2^-22 relative: the two TF32 parts of a float.
__device__ __forceinline__ void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = ToTf32(x);
  lo = ToTf32(x - __uint_as_float(hi));
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    LinearSceReluGradKernel(const LinearSceReluGradArgs a, float* __restrict__ partials,
                            double* __restrict__ loss_partials, Sync* __restrict__ sync) {
  constexpr int kN = 128 * NT;
  constexpr int kS = YsStride(kN);
  constexpr int kWc = 8 * NT;  // a warp's columns
  extern __shared__ __align__(16) float smem[];
  float* ys = smem;                      // [kRows][kS]: the tile of Y
  float* ws = ys + kRows * kS;           // [kKp][kS]: W, rows >= k zero
  float* lp = ws + kKp * kS;             // [kWarps][kHalf][kKp]: the warps' partial logits of a round
  float* zs = lp + kWarps * kHalf * kKp;  // [kRows][kZsStride]: the tile's dlogits
  __shared__ double s_loss[kWarps], s_cnt[kWarps];
  __shared__ float s_dbz[kWarps][kKp];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int half = lane >> 4;   // phase B: which of the round's two rows of this warp
  const int j_cls = lane & 15;  // phase B: this lane's class
  const int col0 = warp * kWc;
  const int64_t n = a.n;
  const int k = a.k, c = a.c;
  const int64_t tiles = (n + kRows - 1) / kRows;

  // W (rows >= k zero-filled), then its fragments in registers for every tile.
  for (int i = threadIdx.x; i < kKp * kN / 4; i += kThreads) {
    const int j = i / (kN / 4), q = i % (kN / 4);
    CpAsync16(ws + j * kS + 4 * q, a.w + static_cast<int64_t>(j < k ? j : 0) * kN + 4 * q, j < k);
  }
  CpAsyncCommit();
  // Y's tile (rows past n zero-filled), all of it in flight at once.
  auto load_tile = [&](int64_t tile) {
    constexpr int kChunks = kRows * kN / 4;
#pragma unroll 4
    for (int i = threadIdx.x; i < kChunks; i += kThreads) {
      const int row = i / (kN / 4), q = i % (kN / 4);
      const int64_t r = tile * kRows + row;
      const bool valid = r < n;
      CpAsync16(ys + row * kS + 4 * q, a.y + (valid ? r : 0) * kN + 4 * q, valid);
    }
    CpAsyncCommit();
  };
  int64_t tile = blockIdx.x;
  if (tile < tiles) load_tile(tile);
  // dloss / count, as SoftmaxCrossEntropyWithGrad given ottr::CountLabels' count.
  const double scale = nl::LoadAny(a.dloss, a.dloss_dtype, 0) / static_cast<double>(*a.count);
  const double eps = a.label_smoothing;
  const float bias_j = a.bias != nullptr && j_cls < k ? a.bias[j_cls] : 0.0f;
  CpAsyncWaitAll();
  __syncthreads();
  // Logits B fragments (B[col][class] = W[class][col]) of this warp's columns: k-step s, n-tile nt.
  uint32_t wl[NT][2][2];
  // dX B fragments (B[class][col] = W[class][col]), split: class step ks, n-tile j, hi / lo.
  uint32_t wdh[2][NT][2], wdl[2][NT][2];
#pragma unroll
  for (int s2 = 0; s2 < NT; ++s2) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      wl[s2][nt][0] = ToTf32(ws[(nt * 8 + g) * kS + col0 + 8 * s2 + t]);
      wl[s2][nt][1] = ToTf32(ws[(nt * 8 + g) * kS + col0 + 8 * s2 + t + 4]);
    }
  }
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      SplitTf32(ws[(8 * ks + t) * kS + col0 + 8 * j + g], wdh[ks][j][0], wdl[ks][j][0]);
      SplitTf32(ws[(8 * ks + t + 4) * kS + col0 + 8 * j + g], wdh[ks][j][1], wdl[ks][j][1]);
    }
  }

  float dw[NT][4] = {};  // dW's fragments: classes g, g + 8 by this warp's columns 8j + 2t, + 1
  float db[NT][2] = {};  // Σ dX over this lane's rows, columns 8j + 2t, + 1
  float dbz = 0.0f;      // phase B: Σ dlogits of this lane's rows, class j_cls
  double loss = 0, cnt = 0;

  for (; tile < tiles; tile += gridDim.x) {
    // Phase B's labels: this lane's row of each round.
    int64_t label[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = tile * kRows + r * kHalf + warp + 16 * half;
      label[r] = row < n ? nl::LoadLabel(a.labels, a.labels64, row) : a.ignore_index;
    }
    CpAsyncWaitAll();
    __syncthreads();  // the tile is in shared memory
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // A: partial logits of this warp's columns for the round's two m16 tiles.
      {
        float acc[2][2][4] = {};
#pragma unroll
        for (int s2 = 0; s2 < NT; ++s2) {
          const int kb = col0 + 8 * s2;
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const float* y0 = ys + (r * kHalf + 16 * m) * kS + kb;
            const uint32_t a0 = ToTf32(y0[g * kS + t]), a1 = ToTf32(y0[(g + 8) * kS + t]);
            const uint32_t a2 = ToTf32(y0[g * kS + t + 4]), a3 = ToTf32(y0[(g + 8) * kS + t + 4]);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) MmaTf32(acc[m][nt], a0, a1, a2, a3, wl[s2][nt][0], wl[s2][nt][1]);
          }
        }
        float* l = lp + warp * kHalf * kKp;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            *reinterpret_cast<float2*>(l + (16 * m + g) * kKp + nt * 8 + 2 * t) = make_float2(acc[m][nt][0], acc[m][nt][1]);
            *reinterpret_cast<float2*>(l + (16 * m + g + 8) * kKp + nt * 8 + 2 * t) =
                make_float2(acc[m][nt][2], acc[m][nt][3]);
          }
        }
      }
      __syncthreads();
      // B: round row warp + 16·half of the tile's round r, class j_cls in each half-warp.
      {
        const int rr = warp + 16 * half;  // row within the round
        const int64_t row = tile * kRows + r * kHalf + rr;
        const bool valid = row < n;
        float sum = 0.0f;
#pragma unroll
        for (int w2 = 0; w2 < kWarps; ++w2) sum += lp[(w2 * kHalf + rr) * kKp + j_cls];
        const float v = bias_j + sum;
        const bool in = j_cls < c;
        const float m = nl::WarpMax<16>(in ? v : -std::numeric_limits<float>::infinity());
        const double se = nl::WarpSum<16>(in ? static_cast<double>(sce::ExpC(v - m)) : 0.0);
        const double lse = static_cast<double>(m) + log(se);
        const double l = static_cast<double>(static_cast<float>(static_cast<double>(v) - lse));
        float dz = 0.0f;
        if (valid && in) dz = sce::SceGradAt<float, float>(l, j_cls, label[r], c, a.ignore_index, eps, scale);
        const double all = nl::WarpSum<16>(in ? l : 0.0);
        const double lpy = nl::WarpSum<16>(in && j_cls == label[r] ? l : 0.0);
        if (j_cls == 0 && valid && label[r] != a.ignore_index) {
          loss += (label[r] < 0 || label[r] >= c) ? sce::NaN() : (1.0 - eps) * -lpy + eps / c * -all;
          cnt += 1.0;
        }
        zs[(r * kHalf + rr) * kZsStride + j_cls] = dz;
        dbz += dz;
      }
      __syncthreads();  // lp is rewritten by the next round; zs complete after the last
    }
    // C: dX and dB of this warp's columns, m16 tile by m16 tile.
#pragma unroll 1
    for (int m = 0; m < kMt; ++m) {
      uint32_t zh[2][4], zl[2][4];
      const float* z0 = zs + 16 * m * kZsStride;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        SplitTf32(z0[g * kZsStride + 8 * ks + t], zh[ks][0], zl[ks][0]);
        SplitTf32(z0[(g + 8) * kZsStride + 8 * ks + t], zh[ks][1], zl[ks][1]);
        SplitTf32(z0[g * kZsStride + 8 * ks + t + 4], zh[ks][2], zl[ks][2]);
        SplitTf32(z0[(g + 8) * kZsStride + 8 * ks + t + 4], zh[ks][3], zl[ks][3]);
      }
      const int64_t r0 = tile * kRows + 16 * m + g, r1 = r0 + 8;
      const float* y0 = ys + 16 * m * kS;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = col0 + 8 * j;
        float d[4] = {};
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          MmaTf32(d, zl[ks][0], zl[ks][1], zl[ks][2], zl[ks][3], wdh[ks][j][0], wdh[ks][j][1]);
          MmaTf32(d, zh[ks][0], zh[ks][1], zh[ks][2], zh[ks][3], wdl[ks][j][0], wdl[ks][j][1]);
          MmaTf32(d, zh[ks][0], zh[ks][1], zh[ks][2], zh[ks][3], wdh[ks][j][0], wdh[ks][j][1]);
        }
        const float2 ya = *reinterpret_cast<const float2*>(y0 + g * kS + col + 2 * t);
        const float2 yb = *reinterpret_cast<const float2*>(y0 + (g + 8) * kS + col + 2 * t);
        const float o0 = ya.x > 0.0f ? d[0] : 0.0f, o1 = ya.y > 0.0f ? d[1] : 0.0f;
        const float o2 = yb.x > 0.0f ? d[2] : 0.0f, o3 = yb.y > 0.0f ? d[3] : 0.0f;
        if (r0 < n) *reinterpret_cast<float2*>(a.dx + r0 * kN + col + 2 * t) = make_float2(o0, o1);
        if (r1 < n) *reinterpret_cast<float2*>(a.dx + r1 * kN + col + 2 * t) = make_float2(o2, o3);
        db[j][0] += o0;
        db[j][0] += o2;
        db[j][1] += o1;
        db[j][1] += o3;
      }
    }
    // dW += dZᵀ·Y over the tile's rows, eight at a time.
#pragma unroll 2
    for (int ks = 0; ks < kRows / 8; ++ks) {
      const float* zr0 = zs + (8 * ks + t) * kZsStride;
      const float* zr1 = zs + (8 * ks + t + 4) * kZsStride;
      const uint32_t z0 = ToTf32(zr0[g]), z1 = ToTf32(zr0[g + 8]), z2 = ToTf32(zr1[g]), z3 = ToTf32(zr1[g + 8]);
      const float* yr0 = ys + (8 * ks + t) * kS + col0 + g;
      const float* yr1 = ys + (8 * ks + t + 4) * kS + col0 + g;
#pragma unroll
      for (int j = 0; j < NT; ++j) MmaTf32(dw[j], z0, z1, z2, z3, ToTf32(yr0[8 * j]), ToTf32(yr1[8 * j]));
    }
    __syncthreads();  // every warp is done with the tile and zs
    if (tile + gridDim.x < tiles) load_tile(tile + gridDim.x);
  }
  // Each half-warp summed its own rows: lanes j and j + 16 hold the same class, lanes 0 and 16 the
  // loss of their rows (a fixed order).
  dbz += __shfl_down_sync(0xffffffffu, dbz, 16);
  loss += __shfl_down_sync(0xffffffffu, loss, 16);
  cnt += __shfl_down_sync(0xffffffffu, cnt, 16);

  // The block's partials: [block][q], q: dW's weight_rows x N, then dB's N, then dBz's weight_rows.
  const int wr = a.weight_rows;
  const int q_count = wr * kN + kN + wr;
  // Blocked by 32 outputs: [q / 32][block][q % 32], so that a warp adding one block after another
  // reads 128 contiguous bytes per load (block-major rows of partials cost a 32-byte sector per
  // four bytes there: 9 µs of the kernel's 34 on the small MLP's head).
  const int grid32 = static_cast<int>(gridDim.x) * 32;
  auto pidx = [&](int q) { return (q >> 5) * grid32 + static_cast<int>(blockIdx.x) * 32 + (q & 31); };
  float* part = partials;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = col0 + 8 * j + 2 * t;
    if (g < wr) {
      part[pidx(g * kN + col)] = dw[j][0];
      part[pidx(g * kN + col + 1)] = dw[j][1];
    }
    if (g + 8 < wr) {
      part[pidx((g + 8) * kN + col)] = dw[j][2];
      part[pidx((g + 8) * kN + col + 1)] = dw[j][3];
    }
    // dB: the lanes of one t hold the same columns for rows g: a fixed xor tree over g.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = db[j][e];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      db[j][e] = v;
    }
    if (g == 0) {
      part[pidx(wr * kN + col)] = db[j][0];
      part[pidx(wr * kN + col + 1)] = db[j][1];
    }
  }
  if (lane < 16) s_dbz[warp][lane] = dbz;
  if (lane == 0) {
    s_loss[warp] = loss;
    s_cnt[warp] = cnt;
  }
  __syncthreads();
  if (threadIdx.x < wr) {
    float s = 0.0f;
    for (int w2 = 0; w2 < kWarps; ++w2) s += s_dbz[w2][threadIdx.x];
    part[pidx(wr * kN + kN + static_cast<int>(threadIdx.x))] = s;
  }
  if (threadIdx.x == 0) {
    double l = 0, n_rows = 0;
    for (int w2 = 0; w2 < kWarps; ++w2) {
      l += s_loss[w2];
      n_rows += s_cnt[w2];
    }
    loss_partials[2 * blockIdx.x] = l;
    loss_partials[2 * blockIdx.x + 1] = n_rows;
    __threadfence();
    atomicAdd(&sync->arrive, 1u);
    // Every block is resident (a cooperative launch), so waiting for the others ends. Plain
    // (volatile) reads while waiting: atomics of every block on one word would queue behind each
    // other at its L2 slice.
    while (*reinterpret_cast<volatile unsigned*>(&sync->arrive) < gridDim.x) __nanosleep(64);
    __threadfence();
  }
  __syncthreads();
  // Each block adds four chunks of 32 outputs at a time: warp w takes chunk w / 4 and a quarter of
  // the blocks (lane L output L of the chunk, the blocks in order, 16 loads in flight), then the
  // chunk's first warp adds the four quarters in order: a fixed order, deterministic.
  {
    __shared__ float red[kWarps][32];
    const int chunks = (q_count + 31) / 32;
    const int quarter = (static_cast<int>(gridDim.x) + 3) / 4;
    const int part_of = warp & 3;
    const int b_begin = part_of * quarter, b_end = min(static_cast<int>(gridDim.x), b_begin + quarter);
    for (int c0 = static_cast<int>(blockIdx.x) * 4; c0 < chunks; c0 += static_cast<int>(gridDim.x) * 4) {
      const int chunk = c0 + (warp >> 2);
      float sum = 0.0f;
      if (chunk < chunks) {
        const float* base = partials + chunk * grid32 + lane;
        for (int bb = b_begin; bb < b_end; bb += 16) {
          float v[16];
#pragma unroll
          for (int u = 0; u < 16; ++u) v[u] = bb + u < b_end ? __ldcg(base + (bb + u) * 32) : 0.0f;
#pragma unroll
          for (int u = 0; u < 16; ++u) sum += v[u];
        }
      }
      red[warp][lane] = sum;
      __syncthreads();
      if (part_of == 0 && chunk < chunks) {
        const float total = ((red[warp][lane] + red[warp + 1][lane]) + red[warp + 2][lane]) + red[warp + 3][lane];
        const int q = chunk * 32 + lane;
        if (q < wr * kN) {
          a.dw[q] = total;
        } else if (q < wr * kN + kN) {
          a.db[q - wr * kN] = total;
        } else if (q < q_count) {
          a.dbz[q - wr * kN - kN] = total;
        }
      }
      __syncthreads();
    }
  }
  if (blockIdx.x == 0 && warp == 0) {  // the loss: lane L adds blocks L, L + 32, ..., then a fixed tree
    double l = 0, n_rows = 0;
    double2 v[kMaxBlocksPerLane];
#pragma unroll
    for (int u = 0; u < kMaxBlocksPerLane; ++u) {
      const unsigned bb = lane + 32 * u;
      v[u] = bb < gridDim.x ? __ldcg(reinterpret_cast<const double2*>(loss_partials) + bb) : make_double2(0.0, 0.0);
    }
#pragma unroll
    for (int u = 0; u < kMaxBlocksPerLane; ++u) {
      l += v[u].x;
      n_rows += v[u].y;
    }
    l = nl::WarpSum(l);
    n_rows = nl::WarpSum(n_rows);
    if (lane == 0) *a.loss = static_cast<float>(l / n_rows);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&sync->done, 1u) == gridDim.x - 1) {
      // Every other block has passed its wait on `arrive` before it counted itself done.
      sync->arrive = 0;
      sync->done = 0;
    }
  }
}

template <int NT>
int BlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaFuncSetAttribute(LinearSceReluGradKernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(SmemBytes(128 * NT))) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, LinearSceReluGradKernel<NT>, kThreads,
                                                      SmemBytes(128 * NT)) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  return blocks;
}

int BlocksPerSmFor(int cols) {
  switch (cols) {
    case 128: return BlocksPerSm<1>();
    case 256: return BlocksPerSm<2>();
    case 512: return BlocksPerSm<4>();
    default: return 0;
  }
}

template <int NT>
cudaError_t Launch(const LinearSceReluGradArgs& a, int grid, float* partials, double* loss_partials, Sync* sync,
                   cudaStream_t s) {
  return LaunchKernel(LaunchMode{false, true}, LinearSceReluGradKernel<NT>, dim3(static_cast<unsigned>(grid)),
                      dim3(kThreads), static_cast<size_t>(SmemBytes(128 * NT)), s, a, partials, loss_partials, sync);
}

}  // namespace

bool LinearSceReluGradFits(int64_t cols, int64_t k) { return ir::LinearSceReluGradFits(cols, k); }

int LinearSceReluGradGrid(int64_t n, int64_t cols) {
  const int per_sm = BlocksPerSmFor(static_cast<int>(cols));
  if (per_sm < 1) return 0;
  const int64_t tiles = std::max<int64_t>(1, (n + kRows - 1) / kRows);
  return static_cast<int>(
      std::min<int64_t>({tiles, static_cast<int64_t>(nl::SmCount()) * per_sm, int64_t{32} * kMaxBlocksPerLane}));
}

int64_t LinearSceReluGradWorkspaceBytes(int grid, int64_t cols, int64_t weight_rows) {
  const int64_t q = (weight_rows * cols + cols + weight_rows + 31) / 32 * 32;  // whole 32-output chunks
  const int64_t floats = (static_cast<int64_t>(grid) * q + 63) / 64 * 64;
  return floats * static_cast<int64_t>(sizeof(float)) + 2 * static_cast<int64_t>(grid) * sizeof(double);
}

int64_t LinearSceReluGradCounterBytes() { return sizeof(Sync); }

cudaError_t LaunchLinearSceReluGrad(const LinearSceReluGradArgs& a, int grid, void* workspace, void* counters,
                                    cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!LinearSceReluGradFits(a.cols, a.k) || a.c < 1 || a.c > a.k || a.weight_rows < 1 || a.weight_rows > a.k ||
      a.n < 1 || grid < 1 || grid > LinearSceReluGradGrid(a.n, a.cols) || workspace == nullptr ||
      counters == nullptr || a.count == nullptr || a.dloss == nullptr || !aligned(a.y) || !aligned(a.dx) ||
      a.dw == nullptr || a.db == nullptr || a.dbz == nullptr || a.loss == nullptr || !aligned(workspace)) {
    return cudaErrorInvalidValue;
  }
  float* partials = static_cast<float*>(workspace);
  const int64_t q = (static_cast<int64_t>(a.weight_rows) * a.cols + a.cols + a.weight_rows + 31) / 32 * 32;
  double* loss_partials =
      reinterpret_cast<double*>(static_cast<char*>(workspace) + (static_cast<int64_t>(grid) * q + 63) / 64 * 64 * 4);
  Sync* sync = static_cast<Sync*>(counters);
  switch (a.cols) {
    case 128: return Launch<1>(a, grid, partials, loss_partials, sync, stream);
    case 256: return Launch<2>(a, grid, partials, loss_partials, sync, stream);
    default: return Launch<4>(a, grid, partials, loss_partials, sync, stream);
  }
}

}  // namespace ottr::cuda::kernels
