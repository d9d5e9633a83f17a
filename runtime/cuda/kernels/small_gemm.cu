// ottr's TF32 GEMM for small products (contract and reasons: small_gemm.h).
#include <mma.h>

#include <type_traits>

#include "runtime/cuda/kernels/pdl.cuh"
#include "runtime/cuda/kernels/small_gemm.h"

namespace ottr::cuda::kernels {
namespace {

using namespace nvcuda;  // NOLINT: wmma

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 4;  // floats of padding per staged row: keeps fragment pointers 32-byte aligned

// Shared memory of one CTA. While the K loop runs, every warp stages its own chunk of op(A) and
// op(B) in the layout that keeps its global loads contiguous (A: [m][k], or [k][m] when
// transposed; B: [k][n], or [n][k]); afterwards the same bytes hold the 8 partial BM x BN tiles.
template <int BM, int BN, int BK, bool TA, bool TB, bool kVec>
struct Smem {
  static constexpr int kALd = TA ? BM + kPad : BK + kPad;
  static constexpr int kAFloats = TA ? BK * kALd : BM * kALd;
  static constexpr int kBLd = TB ? BK + kPad : BN + kPad;
  static constexpr int kBFloats = TB ? BN * kBLd : BK * kBLd;
  static constexpr int kStageFloats = (kAFloats + kBFloats + 7) / 8 * 8;
  static constexpr int kReduceFloats = kWarps * BM * BN;
  static constexpr int kStages = kVec ? 2 : 1;  // the vector path copies the next chunk while this one is multiplied
  static constexpr int kFloats =
      kWarps * kStages * kStageFloats > kReduceFloats ? kWarps * kStages * kStageFloats : kReduceFloats;
  static constexpr int kBytes = kFloats * 4;
};

// One warp's H x W block of a row-major matrix (element (h, w) at g[h * ld + w], w contiguous),
// held in registers between its global loads and its store to shared memory: lanes take
// consecutive w (16 or 32 of them), so a load instruction reads whole row segments.
template <int H, int W>
struct WarpBlock {
  static constexpr int kLanesPerRow = W < 32 ? W : 32;
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static constexpr int kColSteps = W / kLanesPerRow;
  static constexpr int kRegs = H * W / 32;
  float r[kRegs];

  // Rows >= rows and columns >= cols are zeros (edges of M, N and K).
  __device__ __forceinline__ void Load(const float* g, int64_t ld, int rows, int cols, int lane) {
    const int h0 = lane / kLanesPerRow, w0 = lane % kLanesPerRow;
    const float* p = g + h0 * ld + w0;
#pragma unroll
    for (int hs = 0; hs < H / kRowsPerStep; ++hs) {
      const bool row_in = h0 + hs * kRowsPerStep < rows;
#pragma unroll
      for (int cs = 0; cs < kColSteps; ++cs) {
        r[hs * kColSteps + cs] = row_in && w0 + cs * kLanesPerRow < cols ? __ldg(p + cs * kLanesPerRow) : 0.0f;
      }
      p += kRowsPerStep * ld;
    }
  }
  // To s[h * sld + w], rounded to TF32.
  __device__ __forceinline__ void Store(float* s, int sld, int lane) const {
    const int h0 = lane / kLanesPerRow, w0 = lane % kLanesPerRow;
#pragma unroll
    for (int hs = 0; hs < H / kRowsPerStep; ++hs) {
#pragma unroll
      for (int cs = 0; cs < kColSteps; ++cs) {
        s[(h0 + hs * kRowsPerStep) * sld + w0 + cs * kLanesPerRow] = wmma::__float_to_tf32(r[hs * kColSteps + cs]);
      }
    }
  }
};

// The chunk of K at k0: op(A)[m0.., k0..] and op(B)[k0.., n0..] as stored (A [K, M] when
// transposed, B [N, K] when transposed).
template <int BM, int BN, int BK, bool TA, bool TB>
struct Chunk {
  WarpBlock<TA ? BK : BM, TA ? BM : BK> a;
  WarpBlock<TB ? BN : BK, TB ? BK : BN> b;
  __device__ __forceinline__ void Load(const SmallGemmArgs& p, int m0, int n0, int k0, int lane) {
    const int mr = static_cast<int>(p.m - m0), nr = static_cast<int>(p.n - n0), kr = static_cast<int>(p.k - k0);
    if (TA) {
      a.Load(p.a + k0 * p.lda + m0, p.lda, kr, mr, lane);
    } else {
      a.Load(p.a + m0 * p.lda + k0, p.lda, mr, kr, lane);
    }
    if (TB) {
      b.Load(p.b + n0 * p.ldb + k0, p.ldb, nr, kr, lane);
    } else {
      b.Load(p.b + k0 * p.ldb + n0, p.ldb, kr, nr, lane);
    }
  }
  __device__ __forceinline__ void Store(float* sa, float* sb, int lane) const {
    a.Store(sa, Smem<BM, BN, BK, TA, TB, false>::kALd, lane);
    b.Store(sb, Smem<BM, BN, BK, TA, TB, false>::kBLd, lane);
  }
};

// The vector path (lda, ldb multiples of 4 and 16-byte aligned A and B): one warp's H x W block
// copied with 16-byte cp.async straight into shared memory (no registers, a quarter of the
// instructions), zero-filled past rows / cols; the fragments are rounded to TF32 after loading.
template <int H, int W>
struct VecBlock {
  static constexpr int kVecPerRow = W / 4;
  static constexpr int kLanesPerRow = kVecPerRow < 32 ? kVecPerRow : 32;
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static constexpr int kColSteps = kVecPerRow / kLanesPerRow;
  static __device__ __forceinline__ void Issue(float* s, int sld, const float* g, int64_t ld, int rows, int cols,
                                               const float* safe, int lane) {
    const int h0 = lane / kLanesPerRow, w0 = lane % kLanesPerRow * 4;
#pragma unroll
    for (int hs = 0; hs < H / kRowsPerStep; ++hs) {
      const int h = h0 + hs * kRowsPerStep;
#pragma unroll
      for (int cs = 0; cs < kColSteps; ++cs) {
        const int w = w0 + cs * kLanesPerRow * 4;
        const int left = h < rows ? cols - w : 0;
        const int bytes = left <= 0 ? 0 : left >= 4 ? 16 : left * 4;
        const float* src = bytes > 0 ? g + h * ld + w : safe;
        const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(s + h * sld + w));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
      }
    }
  }
};

// The copies of the chunk at k0: A's part when kA, B's when kB; kCommit closes the group.
template <int BM, int BN, int BK, bool TA, bool TB, bool kA = true, bool kB = true, bool kCommit = true>
__device__ __forceinline__ void IssueChunk(const SmallGemmArgs& p, int m0, int n0, int k0, float* sa, float* sb,
                                           int lane) {
  using S = Smem<BM, BN, BK, TA, TB, true>;
  const int mr = static_cast<int>(p.m - m0), nr = static_cast<int>(p.n - n0), kr = static_cast<int>(p.k - k0);
  if (kA) {
    if (TA) {
      VecBlock<BK, BM>::Issue(sa, S::kALd, p.a + k0 * p.lda + m0, p.lda, kr, mr, p.a, lane);
    } else {
      VecBlock<BM, BK>::Issue(sa, S::kALd, p.a + m0 * p.lda + k0, p.lda, mr, kr, p.a, lane);
    }
  }
  if (kB) {
    if (TB) {
      VecBlock<BN, BK>::Issue(sb, S::kBLd, p.b + n0 * p.ldb + k0, p.ldb, nr, kr, p.b, lane);
    } else {
      VecBlock<BK, BN>::Issue(sb, S::kBLd, p.b + k0 * p.ldb + n0, p.ldb, kr, nr, p.b, lane);
    }
  }
  if (kCommit) asm volatile("cp.async.commit_group;\n" ::);
}

// acc += the staged chunk (sa, sb), BK deep. `round`: the operands are float32 still (vector
// path) and are rounded to TF32 in the fragments.
template <int BM, int BN, int BK, bool TA, bool TB, bool kRound>
__device__ __forceinline__ void MmaChunk(const float* sa, const float* sb,
                                         wmma::fragment<wmma::accumulator, 16, 16, 8, float> (&acc)[BM / 16][BN / 16]) {
  using S = Smem<BM, BN, BK, TA, TB, false>;
  using ALayout = typename std::conditional<TA, wmma::col_major, wmma::row_major>::type;
  using BLayout = typename std::conditional<TB, wmma::col_major, wmma::row_major>::type;
#pragma unroll
  for (int ks = 0; ks < BK; ks += 8) {
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, BLayout> fb[BN / 16];
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      wmma::load_matrix_sync(fb[j], TB ? sb + j * 16 * S::kBLd + ks : sb + ks * S::kBLd + j * 16, S::kBLd);
      if (kRound) {
#pragma unroll
        for (int e = 0; e < fb[j].num_elements; ++e) fb[j].x[e] = wmma::__float_to_tf32(fb[j].x[e]);
      }
    }
#pragma unroll
    for (int i = 0; i < BM / 16; ++i) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, ALayout> fa;
      wmma::load_matrix_sync(fa, TA ? sa + ks * S::kALd + i * 16 : sa + i * 16 * S::kALd + ks, S::kALd);
      if (kRound) {
#pragma unroll
        for (int e = 0; e < fa.num_elements; ++e) fa.x[e] = wmma::__float_to_tf32(fa.x[e]);
      }
#pragma unroll
      for (int j = 0; j < BN / 16; ++j) wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
    }
  }
}

template <int BM, int BN, int BK, bool TA, bool TB, bool kVec>
__global__ void __launch_bounds__(kThreads) SmallGemmKernel(SmallGemmArgs p) {
  using S = Smem<BM, BN, BK, TA, TB, kVec>;
  extern __shared__ __align__(128) float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[BM / 16][BN / 16];
#pragma unroll
  for (int i = 0; i < BM / 16; ++i) {
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }
  // Warp w takes chunks w, w + 8, ... of BK; the next chunk's copies are in flight during the MMAs.
  const int chunks = static_cast<int>((p.k + BK - 1) / BK);
  if constexpr (kVec) {
    float* stage[2] = {smem + warp * 2 * S::kStageFloats, smem + (warp * 2 + 1) * S::kStageFloats};
    // A programmatic launch (pdl.cuh) copies the first chunk of an operand no earlier launch of the
    // step writes (a weight) before it waits for the kernel before it, the rest after.
    const bool first = warp < chunks;
    float* sa0 = stage[0];
    float* sb0 = stage[0] + S::kAFloats;
    if (first && p.a_ready) IssueChunk<BM, BN, BK, TA, TB, true, false, false>(p, m0, n0, warp * BK, sa0, sb0, lane);
    if (first && p.b_ready) IssueChunk<BM, BN, BK, TA, TB, false, true, false>(p, m0, n0, warp * BK, sa0, sb0, lane);
    WaitForPriorGrids();
    LetDependentsLaunch();
    if (first && !p.a_ready) IssueChunk<BM, BN, BK, TA, TB, true, false, false>(p, m0, n0, warp * BK, sa0, sb0, lane);
    if (first && !p.b_ready) IssueChunk<BM, BN, BK, TA, TB, false, true, false>(p, m0, n0, warp * BK, sa0, sb0, lane);
    if (first) asm volatile("cp.async.commit_group;\n" ::);
    int cur = 0;
    for (int c = warp; c < chunks; c += kWarps, cur ^= 1) {
      float* next = stage[cur ^ 1];
      if (c + kWarps < chunks) {
        IssueChunk<BM, BN, BK, TA, TB>(p, m0, n0, (c + kWarps) * BK, next, next + S::kAFloats, lane);
        asm volatile("cp.async.wait_group 1;\n" ::);  // chunk c has landed, c + 8 may still fly
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::);
      }
      __syncwarp();
      MmaChunk<BM, BN, BK, TA, TB, true>(stage[cur], stage[cur] + S::kAFloats, acc);
      __syncwarp();  // the stage is copied into again two chunks later
    }
  } else {
    WaitForPriorGrids();  // pdl.cuh
    LetDependentsLaunch();
    float* sa = smem + warp * S::kStageFloats;
    float* sb = sa + S::kAFloats;
    Chunk<BM, BN, BK, TA, TB> chunk;
    if (warp < chunks) chunk.Load(p, m0, n0, warp * BK, lane);
    for (int c = warp; c < chunks; c += kWarps) {
      chunk.Store(sa, sb, lane);
      __syncwarp();
      if (c + kWarps < chunks) chunk.Load(p, m0, n0, (c + kWarps) * BK, lane);
      MmaChunk<BM, BN, BK, TA, TB, false>(sa, sb, acc);
      __syncwarp();
    }
  }
  __syncthreads();  // the staging bytes become the partial tiles
  float* part = smem + warp * BM * BN;
#pragma unroll
  for (int i = 0; i < BM / 16; ++i) {
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      wmma::store_matrix_sync(part + i * 16 * BN + j * 16, acc[i][j], BN, wmma::mem_row_major);
    }
  }
  __syncthreads();

  const SmallGemmEpilogue e = p.epilogue;
  const bool relu = e == SmallGemmEpilogue::kReluBias || e == SmallGemmEpilogue::kReluAuxBias;
  const bool bias = relu || e == SmallGemmEpilogue::kBias;
  const bool drelu = e == SmallGemmEpilogue::kDRelu || e == SmallGemmEpilogue::kDReluBgrad;
  const bool bgrad = e == SmallGemmEpilogue::kDReluBgrad;
  // BM * BN is a multiple of 256, so every warp runs every iteration (the mask ballot needs all
  // 32 lanes) and its lanes cover 32 consecutive elements of one row (BN >= 32) or 16 of two.
  for (int t = threadIdx.x; t < BM * BN; t += kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += smem[w * BM * BN + t];
    const int mm = t / BN, nn = t % BN;
    const int64_t gm = m0 + mm, gn = n0 + nn;
    const bool in = gm < p.m && gn < p.n;
    float v = p.alpha * s;
    if (bias && in) v += p.bias[gn];
    const bool positive = v > 0.0f;
    if (relu) v = v < 0.0f ? 0.0f : v;
    if (e == SmallGemmEpilogue::kReluAuxBias) {
      constexpr int kSeg = BN < 32 ? BN : 32;
      const unsigned bits = __ballot_sync(0xffffffffu, in && positive);
      // Columns up to the tile's end stay inside the row's RoundUp(N, 128) bits (BN divides 128).
      if (lane % kSeg == 0 && gm < p.m) {
        uint8_t* row = p.mask_out + gm * p.mask_row_bytes + gn / 8;
        if (kSeg == 32) {
          *reinterpret_cast<uint32_t*>(row) = bits;
        } else {
          *reinterpret_cast<uint16_t*>(row) = static_cast<uint16_t>(bits >> lane);
        }
      }
    }
    if (drelu) v = in && ((p.mask_in[gm * p.mask_row_bytes + gn / 8] >> (gn % 8)) & 1) ? v : 0.0f;
    if (in && !bgrad) p.d[gm * p.ldc + gn] = v;
    if (bgrad) smem[t] = in ? v : 0.0f;  // D is written from here after the column sums
  }
  if (e == SmallGemmEpilogue::kBgradA && blockIdx.x == 0) {
    // This row tile's sums of op(A) over K (float32 values, not TF32): kPerRow consecutive lanes
    // per row take every kPerRow-th k, then add their sums in a fixed tree.
    constexpr int kPerRow = kThreads / BM;
    static_assert(kPerRow <= 32 && 32 % kPerRow == 0, "a row's lanes are in one warp");
    const int r = threadIdx.x / kPerRow, part = threadIdx.x % kPerRow;
    const int64_t gm = m0 + r;
    float s = 0.0f;
    if (gm < p.m) {
      for (int64_t q = part; q < p.k; q += kPerRow) s += TA ? p.a[q * p.lda + gm] : p.a[gm * p.lda + q];
    }
#pragma unroll
    for (int off = kPerRow / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off, kPerRow);
    if (part == 0 && gm < p.m) p.bias_grad[gm] = s;
  }
  if (bgrad) {  // this tile's column sums: the result, or a row of partials
    __syncthreads();
    // kThreads / BN threads per column, then one of them adds their sums in order.
    constexpr int kPerCol = kThreads / BN;
    const int nn = threadIdx.x % BN, part_id = threadIdx.x / BN;
    const int rows = static_cast<int>(p.m - m0 < BM ? p.m - m0 : BM);
    float s = 0.0f;
    for (int mm = part_id; mm < rows; mm += kPerCol) s += smem[mm * BN + nn];
    __syncthreads();
    smem[BM * BN + threadIdx.x] = s;
    __syncthreads();
    if (part_id == 0 && n0 + nn < p.n) {
      float total = 0.0f;
#pragma unroll
      for (int q = 0; q < kPerCol; ++q) total += smem[BM * BN + q * BN + nn];
      if (gridDim.y == 1) {
        p.bias_grad[n0 + nn] = total;
      } else {
        p.bias_grad_partial[blockIdx.y * p.n + n0 + nn] = total;
      }
    }
    // The last row tile of this column strip to get here adds the strip's partial rows in tile
    // order (the same sum whichever tile is last) and leaves the counter zero for the next launch.
    // The block's partial row is made visible device-wide (barrier, then thread 0's fence: the
    // release is cumulative) before it is counted; D is stored while that count is in flight.
    const bool counted = gridDim.y > 1 && p.tile_counters != nullptr;
    __shared__ bool last;
    __syncthreads();
    if (counted && threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(&p.tile_counters[blockIdx.x], 1u) == gridDim.y - 1;
    }
    for (int t = threadIdx.x; t < BM * BN; t += kThreads) {
      const int64_t gm = m0 + t / BN, gn = n0 + t % BN;
      if (gm < p.m && gn < p.n) p.d[gm * p.ldc + gn] = smem[t];
    }
    if (counted) {
      __syncthreads();
      if (last) {
        __threadfence();
        if (threadIdx.x < BN && n0 + threadIdx.x < p.n) {
          float total = 0.0f;
          for (unsigned t = 0; t < gridDim.y; ++t) total += __ldcg(&p.bias_grad_partial[t * p.n + n0 + threadIdx.x]);
          p.bias_grad[n0 + threadIdx.x] = total;
        }
        if (threadIdx.x == 0) p.tile_counters[blockIdx.x] = 0;
      }
    }
  }
}

// bias_grad[j] = Σ_t partial[t, j] in tile order (kDReluBgrad over several row tiles).
__global__ void BiasGradFinalizeKernel(const float* __restrict__ partial, int tiles, int64_t n, float* __restrict__ out) {
  WaitForPriorGrids();
  LetDependentsLaunch();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = 0.0f;
  for (int t = 0; t < tiles; ++t) s += partial[t * n + j];
  out[j] = s;
}

// (BM, BN, BK). BK = 16 with the scalar path's staging registers; ncu on the H200 found the
// scalar path issue-bound (~5 cycles per instruction per warp, most of them per-element loads,
// conversions and stores), which the vector path's 16-byte copies cut to a quarter.
struct Tile {
  int bm, bn, bk;
};
constexpr Tile kTiles[] = {{16, 32, 16}, {16, 32, 32}, {32, 32, 16}, {16, 64, 16},
                           {32, 64, 16}, {64, 32, 16}, {64, 16, 16}, {128, 16, 16}};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);

// The vector path needs A and B rows that start on 16 bytes.
bool VectorPath(const SmallGemmArgs& p) {
  return p.lda % 4 == 0 && p.ldb % 4 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
}

template <int BM, int BN, int BK, bool TA, bool TB>
cudaError_t Prepare() {
  cudaError_t e = cudaFuncSetAttribute(SmallGemmKernel<BM, BN, BK, TA, TB, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Smem<BM, BN, BK, TA, TB, false>::kBytes);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(SmallGemmKernel<BM, BN, BK, TA, TB, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              Smem<BM, BN, BK, TA, TB, true>::kBytes);
}

template <int BM, int BN, int BK, bool TA, bool TB>
cudaError_t Launch(const SmallGemmArgs& p, cudaStream_t stream, bool programmatic) {
  const dim3 grid(static_cast<unsigned>((p.n + BN - 1) / BN), static_cast<unsigned>((p.m + BM - 1) / BM));
  cudaError_t e = VectorPath(p) ? kernels::LaunchKernel(programmatic, SmallGemmKernel<BM, BN, BK, TA, TB, true>, grid,
                                                  dim3(kThreads), Smem<BM, BN, BK, TA, TB, true>::kBytes, stream, p)
                                : kernels::LaunchKernel(programmatic, SmallGemmKernel<BM, BN, BK, TA, TB, false>, grid,
                                                  dim3(kThreads), Smem<BM, BN, BK, TA, TB, false>::kBytes, stream, p);
  if (e == cudaSuccess && p.epilogue == SmallGemmEpilogue::kDReluBgrad && grid.y > 1 && p.tile_counters == nullptr) {
    // Right behind the GEMM on the same stream: programmatic whenever the GEMM was.
    e = kernels::LaunchKernel(programmatic, BiasGradFinalizeKernel, dim3(static_cast<unsigned>((p.n + 255) / 256)),
                        dim3(256), 0, stream, p.bias_grad_partial, static_cast<int>(grid.y), p.n, p.bias_grad);
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <int BM, int BN, int BK, bool TA, bool TB>
struct PrepareF {
  static cudaError_t Run() { return Prepare<BM, BN, BK, TA, TB>(); }
};
template <int BM, int BN, int BK, bool TA, bool TB>
struct LaunchF {
  static cudaError_t Run(const SmallGemmArgs& p, cudaStream_t s, bool programmatic) {
    return Launch<BM, BN, BK, TA, TB>(p, s, programmatic);
  }
};

// Calls F<BM, BN, BK, TA, TB>::Run(args...) for the runtime tile and transposes.
template <int BM, int BN, int BK, template <int, int, int, bool, bool> class F, typename... A>
cudaError_t ForTrans(bool ta, bool tb, A&&... args) {
  if (ta) return tb ? F<BM, BN, BK, true, true>::Run(args...) : F<BM, BN, BK, true, false>::Run(args...);
  return tb ? F<BM, BN, BK, false, true>::Run(args...) : F<BM, BN, BK, false, false>::Run(args...);
}

template <template <int, int, int, bool, bool> class F, typename... A>
cudaError_t ForTile(int tile, bool ta, bool tb, A&&... args) {
  switch (tile) {
    case 0: return ForTrans<16, 32, 16, F>(ta, tb, args...);
    case 1: return ForTrans<16, 32, 32, F>(ta, tb, args...);
    case 2: return ForTrans<32, 32, 16, F>(ta, tb, args...);
    case 3: return ForTrans<16, 64, 16, F>(ta, tb, args...);
    case 4: return ForTrans<32, 64, 16, F>(ta, tb, args...);
    case 5: return ForTrans<64, 32, 16, F>(ta, tb, args...);
    case 6: return ForTrans<64, 16, 16, F>(ta, tb, args...);
    case 7: return ForTrans<128, 16, 16, F>(ta, tb, args...);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int SmallGemmConfigCount() { return kTileCount; }

void SmallGemmConfigShape(int config, int* bm, int* bn, int* bk) {
  *bm = kTiles[config].bm;
  *bn = kTiles[config].bn;
  *bk = kTiles[config].bk;
}

bool SmallGemmConfigFits(int config, const SmallGemmArgs& p) {
  if (config < 0 || config >= kTileCount || p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  // Offsets within a tile and the K loop count in int.
  if (p.m >= (1ll << 30) || p.n >= (1ll << 30) || p.k >= (1ll << 30)) return false;
  const Tile t = kTiles[config];
  if (p.epilogue == SmallGemmEpilogue::kDReluBgrad && p.m > t.bm && p.bias_grad_partial == nullptr) return false;
  if (p.epilogue == SmallGemmEpilogue::kBgradA && p.k > 256 * (kThreads / t.bm)) return false;  // lanes' loads
  return (p.m + t.bm - 1) / t.bm <= 65535;
}

int64_t SmallGemmWorkspaceBytes(int config, const SmallGemmArgs& p) {
  if (config < 0 || config >= kTileCount || p.epilogue != SmallGemmEpilogue::kDReluBgrad) return 0;
  const int64_t tiles = (p.m + kTiles[config].bm - 1) / kTiles[config].bm;
  return tiles > 1 ? tiles * p.n * static_cast<int64_t>(sizeof(float)) : 0;
}

int64_t SmallGemmCounterBytes(int config, const SmallGemmArgs& p) {
  if (SmallGemmWorkspaceBytes(config, p) == 0) return 0;
  return (p.n + kTiles[config].bn - 1) / kTiles[config].bn * static_cast<int64_t>(sizeof(unsigned));
}

cudaError_t PrepareSmallGemm(int config, bool trans_a, bool trans_b) {
  return ForTile<PrepareF>(config, trans_a, trans_b);
}

cudaError_t LaunchSmallGemm(int config, const SmallGemmArgs& args, cudaStream_t stream, bool programmatic) {
  if (!SmallGemmConfigFits(config, args)) return cudaErrorInvalidValue;
  return ForTile<LaunchF>(config, args.trans_a, args.trans_b, args, stream, programmatic);
}

}  // namespace ottr::cuda::kernels
