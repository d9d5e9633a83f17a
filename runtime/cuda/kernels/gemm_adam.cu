// ottr::GemmAdamUpdate's kernel (optimizer_kernels.h): a small-k weight gradient and the Adam
// update of its weight and bias in one launch.
//
// Both kernels give a block of 256 threads a 32 x 64 tile of g = Aᵀ·B (A [k, m], B [k, n]), 8
// elements a thread. Everything the block reads is requested at once, so the block pays one memory
// round trip: all k rows of its A and B columns are copied into shared memory by cp.async (zero-
// filled past m, n and k; k <= kGemmAdamMaxK), and each thread's 8 elements of p, m and v are
// loaded into registers before it waits for the copies. (The first version staged k in steps of
// 32 through registers, and a block took 14-18 µs on the H100 at batch 128, about one memory
// latency per step.) Then each thread applies Adam to its 8 elements (g never stored). The bias
// gradient is summed by the blocks of the first tile column (bias over A, [m]) or row (over B,
// [n]), one thread per element, in double and increasing k, from the same shared copies.
//
// GemmAdamKernel (TF32 off): thread (ty, tx) = (tid / 16, tid % 16) sums rows 2·ty, 2·ty + 1 and
// columns 4·tx .. 4·tx + 3 of the tile in float32 FMAs, in increasing k (4-byte copies). Nsight
// Compute showed it issue-bound on that chain (~4,000 dependent instructions a warp at k = 128,
// bench/RESULTS.md 2026-12-05 (3)).
// GemmAdamTf32Kernel (TF32 on, as cuBLASLt's weight gradients then are): 32 x 32 tiles, 4
// elements a thread, so a layer has 1.5-3 blocks per SM (fc0 of the small MLP: 400 blocks of 8
// warps): the first version (32 x 64, 8 elements a thread, 208 blocks) issued ~0.4 instructions a
// cycle per scheduler with 3 warps each, 14.7 µs for fc0 in the batch-128 step on an H100
// (bench/RESULTS.md 2026-12-07 (4)). Each warp's 16 x 8 of the tile is one m16n8k8 TF32 MMA per 8
// rows of k, the even and odd steps in two accumulators (two dependency chains, added at the
// end); operands rounded to TF32 (nearest, ties away: ToTf32Fast) as they leave shared memory;
// 16-byte copies where the rows allow them. Adam's per-step scalars (two pow in double) are
// computed by two lanes of warp 0 while the copies fly (PrepareSplit); each thread's 4 updates are
// computed unpredicated (out-of-range elements read element 0, their results dropped), so their
// dependency chains interleave; p, m and v move as 8-byte pairs where the rows allow. The
// bias is summed by all 8 warps (rows q, q + 8, ... in double, then the 8 partials in order q).
#include <algorithm>
#include <cstdint>

#include "runtime/cuda/kernels/mma_tf32.cuh"
#include "runtime/cuda/kernels/optimizer_elem.cuh"
#include "runtime/cuda/kernels/optimizer_kernels.h"

namespace ottr::cuda::kernels {
namespace {

constexpr int kBm = 32, kBn = 64, kThreads = 256;
// The TF32 kernel's tile, and its shared rows padded by 8 floats: a fragment's 32 loads (rows t,
// columns g of an 8-row step) then fall in 32 different banks.
constexpr int kTm = 32, kTn = 32, kTldA = kTm + 8, kTldB = kTn + 8;
// The bias sums (bias_part) give each of the tile's rows (bias over A) or columns (over B) a lane.
static_assert(kTm == 32 && kTn == 32, "GemmAdamTf32Kernel's bias sums take one lane per tile row or column");

__device__ __forceinline__ void CopyAsync4(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ void CopyAsync16(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

struct Elem {
  float p, m, v;
};

__device__ __forceinline__ Elem LoadElem(const GemmAdamArgs& g, int t, int64_t i) {
  return {g.param[t][i], g.m_in[t][i], g.v_in[t][i]};
}

__device__ __forceinline__ void AdamStore(const opt::AdamElem<float>& op, const GemmAdamArgs& g, int t, int64_t i,
                                          Elem e, float d) {
  float st[2] = {e.m, e.v};
  op.Apply(e.p, d, st, true);
  g.param_out[t][i] = e.p;
  g.m_out[t][i] = st[0];
  g.v_out[t][i] = st[1];
}

__global__ void __launch_bounds__(kThreads) GemmAdamKernel(GemmAdamArgs g, opt::AdamElem<float> op,
                                                           OptimizerScalars s) {
  extern __shared__ __align__(16) float smem[];
  float* as = smem;                   // [k][kBm]
  float* bs = smem + g.k * kBm;       // [k][kBn]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm, n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  for (int e = tid; e < g.k * kBm; e += kThreads) {
    const int64_t kk = e / kBm, mm = m0 + e % kBm;
    CopyAsync4(as + e, g.a + kk * g.m + (mm < g.m ? mm : 0), mm < g.m);
  }
  for (int e = tid; e < g.k * kBn; e += kThreads) {
    const int64_t kk = e / kBn, nn = n0 + e % kBn;
    CopyAsync4(bs + e, g.b + kk * g.n + (nn < g.n ? nn : 0), nn < g.n);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  // This thread's elements of p, m, v (and the bias's), loaded while the copies fly.
  Elem w[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + 2 * ty + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + 4 * tx + j;
      if (r < g.m && c < g.n) w[i][j] = LoadElem(g, 0, r * g.n + c);
    }
  }
  const bool bias_a = g.bias == 0 && blockIdx.x == 0 && tid < kBm && m0 + tid < g.m;
  const bool bias_b = g.bias == 1 && blockIdx.y == 0 && tid < kBn && n0 + tid < g.n;
  const int64_t bias_i = bias_a ? m0 + tid : n0 + tid;
  Elem wb{};
  if (bias_a || bias_b) wb = LoadElem(g, 1, bias_i);
  op.Prepare(s);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  float acc[2][4] = {};
#pragma unroll 8
  for (int kk = 0; kk < g.k; ++kk) {
    const float a0 = as[kk * kBm + 2 * ty], a1 = as[kk * kBm + 2 * ty + 1];
    const float4 b = *reinterpret_cast<const float4*>(bs + kk * kBn + 4 * tx);
    acc[0][0] = fmaf(a0, b.x, acc[0][0]);
    acc[0][1] = fmaf(a0, b.y, acc[0][1]);
    acc[0][2] = fmaf(a0, b.z, acc[0][2]);
    acc[0][3] = fmaf(a0, b.w, acc[0][3]);
    acc[1][0] = fmaf(a1, b.x, acc[1][0]);
    acc[1][1] = fmaf(a1, b.y, acc[1][1]);
    acc[1][2] = fmaf(a1, b.z, acc[1][2]);
    acc[1][3] = fmaf(a1, b.w, acc[1][3]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + 2 * ty + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + 4 * tx + j;
      if (r < g.m && c < g.n) AdamStore(op, g, 0, r * g.n + c, w[i][j], acc[i][j]);
    }
  }
  if (bias_a || bias_b) {
    double sum = 0.0;
    const float* col = bias_a ? as + tid : bs + tid;
    const int stride = bias_a ? kBm : kBn;
    for (int kk = 0; kk < g.k; ++kk) sum += static_cast<double>(col[kk * stride]);
    AdamStore(op, g, 1, bias_i, wb, static_cast<float>(sum));
  }
}

// Rows [0, k8) of columns [c0, c0 + W) of X [k, ld] into xs [k8][W + 8], zeros past k and ld:
// 16-byte copies when `vec` (ld % 4 == 0, X on 16 bytes: a 4-column chunk is then wholly in or
// out), else 4-byte ones.
template <int W>
__device__ __forceinline__ void StagePanel(float* xs, const float* x, int k, int k8, int64_t ld, int64_t c0, bool vec,
                                           int tid) {
  constexpr int kLd = W + 8;
  if (vec) {
    for (int e = tid; e < k8 * (W / 4); e += kThreads) {
      const int kk = e / (W / 4), cc = e % (W / 4) * 4;
      const bool ok = kk < k && c0 + cc < ld;
      CopyAsync16(xs + kk * kLd + cc, x + (ok ? kk * ld + c0 + cc : 0), ok);
    }
  } else {
    for (int e = tid; e < k8 * W; e += kThreads) {
      const int kk = e / W, cc = e % W;
      const bool ok = kk < k && c0 + cc < ld;
      CopyAsync4(xs + kk * kLd + cc, x + (ok ? kk * ld + c0 + cc : 0), ok);
    }
  }
}

__global__ void __launch_bounds__(kThreads) GemmAdamTf32Kernel(GemmAdamArgs g, opt::AdamElem<float> op,
                                                               OptimizerScalars s, bool vec_a, bool vec_b,
                                                               bool vec2) {
  extern __shared__ __align__(16) float smem[];
  __shared__ float scalars[3];
  __shared__ double bias_part[kThreads / 32][kTm];
  const int k = static_cast<int>(g.k), k8 = (k + 7) / 8 * 8;
  float* as = smem;               // [k8][kTldA]
  float* bs = smem + k8 * kTldA;  // [k8][kTldB]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, gq = lane / 4, tq = lane % 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTm, n0 = static_cast<int64_t>(blockIdx.x) * kTn;
  StagePanel<kTm>(as, g.a, k, k8, g.m, m0, vec_a, tid);
  StagePanel<kTn>(bs, g.b, k, k8, g.n, n0, vec_b, tid);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  // The warp's 16 x 8 of the tile; this thread's elements (the MMA's accumulator layout): rows
  // wr + gq + 8·h, columns wc + 2·tq + c, for h, c in {0, 1}: acc[2·h + c], element e = 2·h + c.
  // With `vec2` the two columns of a row are one 8-byte load and store of p, m and v.
  const int wr = warp / 4 * 16, wc = warp % 4 * 8;
  Elem w[4];
  int64_t idx[4];
  bool in[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = m0 + wr + gq + 8 * h, col = n0 + wc + 2 * tq;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      in[2 * h + c] = r < g.m && col + c < g.n;
      idx[2 * h + c] = in[2 * h + c] ? r * g.n + col + c : 0;
    }
    if (vec2 && in[2 * h + 1]) {
      const float2 p = *reinterpret_cast<const float2*>(g.param[0] + idx[2 * h]);
      const float2 m = *reinterpret_cast<const float2*>(g.m_in[0] + idx[2 * h]);
      const float2 v = *reinterpret_cast<const float2*>(g.v_in[0] + idx[2 * h]);
      w[2 * h] = {p.x, m.x, v.x};
      w[2 * h + 1] = {p.y, m.y, v.y};
    } else {
      w[2 * h] = LoadElem(g, 0, idx[2 * h]);
      w[2 * h + 1] = LoadElem(g, 0, idx[2 * h + 1]);
    }
  }
  const bool bias_a = g.bias == 0 && blockIdx.x == 0, bias_b = g.bias == 1 && blockIdx.y == 0;
  const int64_t bias_i = (bias_a ? m0 : n0) + lane;
  const bool bias_own = warp == 0 && (bias_a || bias_b) && bias_i < (bias_a ? g.m : g.n);
  Elem wb{};
  if (bias_own) wb = LoadElem(g, 1, bias_i);
  if (warp == 0) op.PrepareSplit(s, lane, scalars);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  op.step_size = scalars[0];
  op.bc2_sqrt = scalars[1];
  op.decay = scalars[2];
  float acc[2][4] = {};
#pragma unroll 4
  for (int kk = 0; kk < k8; kk += 8) {
    const float* ak = as + (kk + tq) * kTldA + wr + gq;
    const float* bk = bs + (kk + tq) * kTldB + wc + gq;
    MmaTf32(acc[(kk / 8) % 2], ToTf32Fast(ak[0]), ToTf32Fast(ak[8]), ToTf32Fast(ak[4 * kTldA]),
            ToTf32Fast(ak[4 * kTldA + 8]), ToTf32Fast(bk[0]), ToTf32Fast(bk[4 * kTldB]));
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float st[2] = {w[e].m, w[e].v};
    op.Apply(w[e].p, acc[0][e] + acc[1][e], st, true);
    w[e].m = st[0];
    w[e].v = st[1];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int e = 2 * h;
    if (vec2 && in[e + 1]) {
      *reinterpret_cast<float2*>(g.param_out[0] + idx[e]) = make_float2(w[e].p, w[e + 1].p);
      *reinterpret_cast<float2*>(g.m_out[0] + idx[e]) = make_float2(w[e].m, w[e + 1].m);
      *reinterpret_cast<float2*>(g.v_out[0] + idx[e]) = make_float2(w[e].v, w[e + 1].v);
      continue;
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (in[e + c]) {
        g.param_out[0][idx[e + c]] = w[e + c].p;
        g.m_out[0][idx[e + c]] = w[e + c].m;
        g.v_out[0][idx[e + c]] = w[e + c].v;
      }
    }
  }
  if (bias_a || bias_b) {  // block-uniform
    const float* col = bias_a ? as + lane : bs + lane;
    const int stride = bias_a ? kTldA : kTldB;
    double part = 0.0;
#pragma unroll 4
    for (int kk = warp; kk < k; kk += kThreads / 32) part += static_cast<double>(col[kk * stride]);
    bias_part[warp][lane] = part;
    __syncthreads();
    if (bias_own) {
      double sum = 0.0;
#pragma unroll
      for (int q = 0; q < kThreads / 32; ++q) sum += bias_part[q][lane];
      AdamStore(op, g, 1, bias_i, wb, static_cast<float>(sum));
    }
  }
}

}  // namespace

cudaError_t LaunchGemmAdam(const GemmAdamArgs& args, const AdamHyper& h, const OptimizerScalars& s,
                           cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  if (args.k < 0 || args.k > kGemmAdamMaxK) return cudaErrorInvalidValue;
  if (args.tf32) {
    const int64_t gx = (args.n + kTn - 1) / kTn, gy = (args.m + kTm - 1) / kTm;
    if (gy > 65535) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
    static const cudaError_t attr =
        cudaFuncSetAttribute(GemmAdamTf32Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kGemmAdamMaxK * (kTldA + kTldB) * 4));
    if (attr != cudaSuccess) return attr;
    const int64_t k8 = std::max<int64_t>((args.k + 7) / 8 * 8, 8);
    const auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
    bool vec2 = args.n % 2 == 0;  // p, m, v as 8-byte pairs: rows of even length, buffers on 8 bytes
    for (const void* p : {static_cast<const void*>(args.param[0]), static_cast<const void*>(args.m_in[0]),
                          static_cast<const void*>(args.v_in[0]), static_cast<const void*>(args.param_out[0]),
                          static_cast<const void*>(args.m_out[0]), static_cast<const void*>(args.v_out[0])}) {
      vec2 = vec2 && aligned(p, 8);
    }
    GemmAdamTf32Kernel<<<grid, kThreads, static_cast<size_t>(k8 * (kTldA + kTldB) * 4), stream>>>(
        args, opt::MakeAdam<float>(h), s, args.m % 4 == 0 && aligned(args.a, 16),
        args.n % 4 == 0 && aligned(args.b, 16), vec2);
    return cudaGetLastError();
  }
  const int64_t gx = (args.n + kBn - 1) / kBn, gy = (args.m + kBm - 1) / kBm;
  if (gy > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  static const cudaError_t attr = cudaFuncSetAttribute(
      GemmAdamKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kGemmAdamMaxK * (kBm + kBn) * 4));
  if (attr != cudaSuccess) return attr;
  const size_t smem = static_cast<size_t>(std::max<int64_t>(args.k, 1) * (kBm + kBn) * 4);
  GemmAdamKernel<<<grid, kThreads, smem, stream>>>(args, opt::MakeAdam<float>(h), s);
  return cudaGetLastError();
}

}  // namespace ottr::cuda::kernels
