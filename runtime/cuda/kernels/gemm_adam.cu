// ottr::GemmAdamUpdate's kernel (optimizer_kernels.h): a small-k weight gradient and the Adam
// update of its weight and bias in one launch.
//
// Block: 256 threads own a 32 x 64 tile of g = Aᵀ·B (A [k, m], B [k, n]); thread (ty, tx) = (tid /
// 16, tid % 16) sums rows 2·ty, 2·ty + 1 and columns 4·tx .. 4·tx + 3 of the tile in float32, k in
// steps of 32: the next step's A and B rows are loaded into registers while this step's, staged
// in shared memory, are multiplied (both operands are read along m and n, their contiguous
// axes, as a weight gradient's are). Then each thread applies Adam to its 8 elements (p, m, v read
// and written once; g never stored). The bias gradient is summed by the blocks of the first tile
// column (bias over A, [m]) or row (over B, [n]), one thread per element, in double.
#include <cstdint>

#include "runtime/cuda/kernels/optimizer_elem.cuh"
#include "runtime/cuda/kernels/optimizer_kernels.h"

namespace ottr::cuda::kernels {
namespace {

constexpr int kBm = 32, kBn = 64, kBk = 32, kThreads = 256;
constexpr int kALoads = kBk * kBm / kThreads;  // 4
constexpr int kBLoads = kBk * kBn / kThreads;  // 8

__device__ __forceinline__ void LoadStep(const GemmAdamArgs& g, int64_t k0, int64_t m0, int64_t n0, int tid,
                                         float (&ra)[kALoads], float (&rb)[kBLoads]) {
#pragma unroll
  for (int i = 0; i < kALoads; ++i) {
    const int e = tid + i * kThreads;
    const int64_t kk = k0 + e / kBm, mm = m0 + e % kBm;
    ra[i] = kk < g.k && mm < g.m ? __ldg(g.a + kk * g.m + mm) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kBLoads; ++i) {
    const int e = tid + i * kThreads;
    const int64_t kk = k0 + e / kBn, nn = n0 + e % kBn;
    rb[i] = kk < g.k && nn < g.n ? __ldg(g.b + kk * g.n + nn) : 0.0f;
  }
}

__device__ __forceinline__ void AdamOne(const opt::AdamElem<float>& op, const GemmAdamArgs& g, int t, int64_t i,
                                        float d) {
  float x = g.param[t][i];
  float st[2] = {g.m_in[t][i], g.v_in[t][i]};
  op.Apply(x, d, st, true);
  g.param_out[t][i] = x;
  g.m_out[t][i] = st[0];
  g.v_out[t][i] = st[1];
}

__global__ void __launch_bounds__(kThreads) GemmAdamKernel(GemmAdamArgs g, opt::AdamElem<float> op,
                                                           OptimizerScalars s) {
  __shared__ float as[kBk][kBm];
  __shared__ __align__(16) float bs[kBk][kBn];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm, n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  float acc[2][4] = {};
  float ra[kALoads], rb[kBLoads];
  LoadStep(g, 0, m0, n0, tid, ra, rb);
  op.Prepare(s);
  for (int64_t k0 = 0; k0 < g.k; k0 += kBk) {
#pragma unroll
    for (int i = 0; i < kALoads; ++i) as[(tid + i * kThreads) / kBm][(tid + i * kThreads) % kBm] = ra[i];
#pragma unroll
    for (int i = 0; i < kBLoads; ++i) bs[(tid + i * kThreads) / kBn][(tid + i * kThreads) % kBn] = rb[i];
    __syncthreads();
    if (k0 + kBk < g.k) LoadStep(g, k0 + kBk, m0, n0, tid, ra, rb);
#pragma unroll
    for (int kk = 0; kk < kBk; ++kk) {
      const float a0 = as[kk][2 * ty], a1 = as[kk][2 * ty + 1];
      const float4 b = *reinterpret_cast<const float4*>(&bs[kk][4 * tx]);
      acc[0][0] = fmaf(a0, b.x, acc[0][0]);
      acc[0][1] = fmaf(a0, b.y, acc[0][1]);
      acc[0][2] = fmaf(a0, b.z, acc[0][2]);
      acc[0][3] = fmaf(a0, b.w, acc[0][3]);
      acc[1][0] = fmaf(a1, b.x, acc[1][0]);
      acc[1][1] = fmaf(a1, b.y, acc[1][1]);
      acc[1][2] = fmaf(a1, b.z, acc[1][2]);
      acc[1][3] = fmaf(a1, b.w, acc[1][3]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + 2 * ty + i;
    if (r >= g.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + 4 * tx + j;
      if (c < g.n) AdamOne(op, g, 0, r * g.n + c, acc[i][j]);
    }
  }
  // The bias: Σ_k of A's columns m0.. (first tile column) or B's columns n0.. (first tile row).
  if (g.bias == 0 && blockIdx.x == 0 && tid < kBm && m0 + tid < g.m) {
    double sum = 0.0;
    for (int64_t kk = 0; kk < g.k; ++kk) sum += static_cast<double>(__ldg(g.a + kk * g.m + m0 + tid));
    AdamOne(op, g, 1, m0 + tid, static_cast<float>(sum));
  } else if (g.bias == 1 && blockIdx.y == 0 && tid < kBn && n0 + tid < g.n) {
    double sum = 0.0;
    for (int64_t kk = 0; kk < g.k; ++kk) sum += static_cast<double>(__ldg(g.b + kk * g.n + n0 + tid));
    AdamOne(op, g, 1, n0 + tid, static_cast<float>(sum));
  }
}

}  // namespace

cudaError_t LaunchGemmAdam(const GemmAdamArgs& args, const AdamHyper& h, const OptimizerScalars& s,
                           cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  const int64_t gx = (args.n + kBn - 1) / kBn, gy = (args.m + kBm - 1) / kBm;
  if (gy > 65535) return cudaErrorInvalidValue;
  GemmAdamKernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, stream>>>(
      args, opt::MakeAdam<float>(h), s);
  return cudaGetLastError();
}

}  // namespace ottr::cuda::kernels
