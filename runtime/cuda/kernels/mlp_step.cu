// ottr::MlpStep's kernel (mlp_step.h): one training step of a ReLU MLP with softmax cross-entropy
// and Adam in one cooperative launch, for small batches where the step's separate launches are
// each mostly latency (the small MLP at batch 128 took 14 launches and ~49 µs on the H100 with
// every other fusion; bench/RESULTS.md 2026-12-06 (3)).
//
// Grid: one 512-thread block per SM (a cooperative launch, so every block is resident and the
// blocks can wait for each other). The step is a sequence of phases separated by grid-wide waits:
//   forward l = 0 .. L-2:  Y_l = relu(Y_{l-1}·W_lᵀ + b_l)                    (Y_{-1} = x)
//   head:                  logits = Y_{L-2}·W_{L-1}ᵀ + b_{L-1}, softmax cross-entropy, dlogits
//                          G_{L-1}, and G_{L-2} = (G_{L-1}·W_{L-1}) ⊙ [Y_{L-2} > 0]
//   backward l = L-2 .. 1: G_{l-1} = (G_l·W_l) ⊙ [Y_{l-1} > 0], and beside it the weight and bias
//                          gradients of layer l+1 with its Adam update (W_{l+1} is not read again)
//   last:                  the gradients and updates of layers 1 and 0
// Activations and data gradients live in the workspace (L2-resident at these sizes); weight and
// bias gradients are never stored: the thread that sums one applies Adam to its element.
//
// Every product is a set of 32 x 16 output tiles. A tile is summed by `split` warps, each over
// its share of k in units of 16 (two m16n8k8 steps, k permuted within the unit so that a lane's
// four k of a row are one 16-byte load where k is the contiguous index), on TF32 mma.sync with its
// fragments loaded straight from global memory (ld.global.cg: the operands were written by other
// blocks of this launch), two units of loads in flight at a time; the warps' partial tiles meet
// in shared memory and one thread per output element adds them in warp order and applies the
// phase's epilogue. A weight gradient G_lᵀ·[Y_{l-1} | 1] carries a column of ones: its last column
// is the bias gradient (summed on the same TF32 products, as the TF32 BGRAD epilogues do). `split`
// is chosen per phase to give every warp of the grid a tile where there are enough, and the tiles
// are spread over every block (deterministic: the grid size, the shapes). The head's dlogits
// follow SoftmaxCrossEntropyWithGrad's arithmetic (sce_math.cuh); the loss is each head block's
// rows summed in double, the blocks' sums added in block order.
//
// Measured (bench/RESULTS.md 2026-12-06 (4), H100): correct, 60.1 µs for the small MLP's step at
// batch 128 against 48.5 for the unfused one (83.6 before this version: 4-byte loads using half
// of each 32-byte sector, three instructions per TF32 conversion, spilled registers). Hence
// fuse-mlp-step is off by default. What is left is the backward: its operands have k as the
// strided index (4-byte loads, 24 a unit of k) and the last phase's tiles re-read them from L2;
// staging them through shared memory, or transposed copies written by the phases before, next.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "runtime/cuda/kernels/mlp_step.h"
#include "runtime/cuda/kernels/mma_tf32.cuh"
#include "runtime/cuda/kernels/norm_common.cuh"
#include "runtime/cuda/kernels/optimizer_elem.cuh"
#include "runtime/cuda/kernels/pdl.cuh"
#include "runtime/cuda/kernels/sce_math.cuh"

namespace ottr::cuda::kernels {
namespace {

constexpr int kMaxLayers = ir::kMlpStepMaxLayers;
constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kTm = 32, kTn = 16, kTile = kTm * kTn;  // a tile: two m16 by two n8 MMA tiles
constexpr int kHeadRows = 8;                          // rows of the batch per head block
constexpr int kChunk = 2;                             // 16-deep units of k whose loads are in flight together
constexpr int kClasses = static_cast<int>(ir::kMlpStepMaxClasses);
constexpr int kEpi = kWarps * kTile;                  // epilogue inputs per array: one per output of a round
constexpr int kSmemBytes = 3 * kEpi * 4;              // dynamic: the three arrays
static_assert(kTile == kThreads, "one output element per thread and slot");
static_assert(kClasses == kTn, "the head's logits are one tile wide");

struct Sync {
  unsigned arrive;  // blocks arrived at the grid's waits so far (gridDim.x per wait)
  unsigned done;    // blocks finished
};

// Element (i, j) of a matrix = p[i·s0 + j·s1] for i < rows, j < cols; with `ones` the column
// j = cols reads 1 (the bias column of a weight gradient); 0 elsewhere outside.
// Indices are 32-bit (LaunchMlpStep checks that every matrix has fewer than 2^31 elements): the
// kernel's registers are its limit (512 threads: 128 a thread).
// `k4`: k's length (A: its columns, B: its rows) is a multiple of 4. `vec`: besides, k is the
// view's contiguous index and the rows start 16-byte aligned, so four consecutive k are one
// 16-byte load.
struct View {
  const float* p;
  int s0, s1, rows, cols;
  bool ones;
  bool k4, vec;
};

__device__ __forceinline__ bool Aligned16(const float* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// An A operand (m, k) and a B operand (k, n) over p with strides s0 (rows), s1 (columns).
__device__ View AView(const float* p, int s0, int s1, int rows, int cols) {
  return View{p, s0, s1, rows, cols, false, cols % 4 == 0, s1 == 1 && s0 % 4 == 0 && cols % 4 == 0 && Aligned16(p)};
}
__device__ View BView(const float* p, int s0, int s1, int rows, int cols, bool ones) {
  return View{p, s0, s1, rows, cols, ones, rows % 4 == 0, s0 == 1 && s1 % 4 == 0 && rows % 4 == 0 && Aligned16(p)};
}

enum Kind { kForward, kDataGrad, kWeightGrad, kHead };

// One product: out[m, n] = Σ_k A(m, k)·B(k, n) over m < m_count, n < n_count, then the kind's
// epilogue for layer `layer`.
struct Task {
  View a, b;
  int m_count, n_count, k16, tiles_n, items;  // k16: 16-deep units of k
  Kind kind;
  int layer;
};

struct Buffers {
  float* act[kMaxLayers];   // Y_l [batch, out_l], l < L-1
  float* grad[kMaxLayers];  // G_l [batch, out_l] (G_{L-1}: dlogits)
  double* loss_part;        // two per head block: its rows' loss, its rows counted
  opt::AdamElem<float>* adam;  // Adam with the step's scalars (AdamElem::Prepare), by the last block
};

__device__ Task MakeTask(Kind kind, int layer, View a, View b, int m_count, int n_count, int k) {
  Task t{a, b, m_count, n_count, (k + 15) / 16, (n_count + kTn - 1) / kTn, 0, kind, layer};
  t.items = (m_count + kTm - 1) / kTm * t.tiles_n;
  return t;
}

// Y_l = relu(Y_{l-1}·W_lᵀ + b_l): A = Y_{l-1} [batch, in], B(k, n) = W_l[n, k].
__device__ Task ForwardTask(const MlpStepArgs& a, const Buffers& bf, int l) {
  const MlpStepLayer& L = a.layer[l];
  const float* in = l == 0 ? a.x : bf.act[l - 1];
  const int b = static_cast<int>(a.batch), ni = static_cast<int>(L.in), no = static_cast<int>(L.out);
  return MakeTask(kForward, l, AView(in, ni, 1, b, ni), BView(L.w, 1, ni, ni, no, false), b, no, ni);
}

// G_{l-1} = (G_l·W_l) ⊙ [Y_{l-1} > 0]: A = G_l [batch, out], B = W_l [out, in].
__device__ Task DataGradTask(const MlpStepArgs& a, const Buffers& bf, int l) {
  const MlpStepLayer& L = a.layer[l];
  const int b = static_cast<int>(a.batch), ni = static_cast<int>(L.in), no = static_cast<int>(L.out);
  return MakeTask(kDataGrad, l, AView(bf.grad[l], no, 1, b, no), BView(L.w, ni, 1, no, ni, false), b, ni, no);
}

// [dW_l | db_l] = G_lᵀ·[Y_{l-1} | 1]: A(m, k) = G_l[k, m], B = Y_{l-1} [batch, in] and ones.
__device__ Task WeightGradTask(const MlpStepArgs& a, const Buffers& bf, int l) {
  const MlpStepLayer& L = a.layer[l];
  const float* in = l == 0 ? a.x : bf.act[l - 1];
  const int b = static_cast<int>(a.batch), ni = static_cast<int>(L.in), no = static_cast<int>(L.out);
  return MakeTask(kWeightGrad, l, AView(bf.grad[l], 1, no, no, b), BView(in, ni, 1, b, ni, true), no, ni + 1, b);
}

// Warps per tile: the most (up to 16) that still give every tile its warps at once, and each
// warp two units of k at least.
__device__ int ChooseSplit(int items, int k16) {
  const int warps = gridDim.x * kWarps;
  int s = kWarps;
  while (s > 1 && (items * s > warps || (k16 + s - 1) / s < 2)) s >>= 1;
  return s;
}

// Four values of one row of A or one column of B at k, k + 1, k + 2, k + 3: base points at the row
// or column, `step` is the stride of k, kn its length; `valid` false reads 0, or 1 with `one` (the
// ones column) where k is in range. With `vec` one 16-byte load; with `k4` (kn % 4 == 0: all four
// in range or none) one bounds check for four loads; otherwise a check each. A warp's eight rows
// or columns of one k lie side by side where k is not the contiguous index: one 32-byte sector.
__device__ __forceinline__ void Load4(bool vec, bool k4, const float* base, int step, int kn, bool valid, bool one,
                                      int k, float (&r)[4]) {
  if (vec || k4) {
    if (k < kn && valid) {
      if (vec) {
        const float4 q = __ldcg(reinterpret_cast<const float4*>(base + k));
        r[0] = q.x;
        r[1] = q.y;
        r[2] = q.z;
        r[3] = q.w;
      } else {
        const float* q = base + k * step;
#pragma unroll
        for (int j = 0; j < 4; ++j) r[j] = __ldcg(q + j * step);
      }
    } else {
      const float o = k < kn && one ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = o;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int kk = k + j;
      r[j] = kk < kn ? (valid ? __ldcg(base + kk * step) : (one ? 1.0f : 0.0f)) : 0.0f;
    }
  }
}

// acc += this warp's share (units of k [u_begin, u_end)) of a tile at (m0, n0). A unit is 16 of k,
// two m16n8k8 steps; its k are permuted so that each lane reads four consecutive k of a row: lane
// t's fragment columns t and t + 4 of step s are k = 16u + 4t + 2s and 16u + 4t + 2s + 1, for A
// and B alike (a sum over k in another order; the MMA's own order within a step is the
// hardware's). Operands are rounded to TF32 as cvt.rna rounds them (ToTf32Fast). Each lane reads four rows of A (g, g + 8 of both m16 tiles) and two columns of B
// (g of both n8 tiles), two units of loads in flight at a time.
__device__ __forceinline__ void WarpTile(const View& A, const View& B, int m0, int n0, int u_begin, int u_end,
                                         float (&acc)[2][2][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int oa[4];  // 32-bit offsets of the rows and columns: registers are the kernel's limit
  bool va[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + (i >> 1) * 16 + (i & 1) * 8 + g;  // i: (m16 tile, +8)
    va[i] = m < A.rows;
    oa[i] = (va[i] ? m : 0) * A.s0;
  }
  int offb[2];
  bool vb[2], ob[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int n = n0 + i * 8 + g;
    vb[i] = n < B.cols;
    ob[i] = B.ones && n == B.cols;
    offb[i] = (vb[i] ? n : 0) * B.s1;
  }
  const int ka = A.cols, kb = B.rows;
  for (int u0 = u_begin; u0 < u_end; u0 += kChunk) {
    float av[kChunk][4][4], bv[kChunk][2][4];
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      const bool live = u0 + c < u_end;
      const int k = (u0 + c) * 16 + 4 * t;
#pragma unroll
      for (int i = 0; i < 4; ++i) Load4(A.vec, A.k4, A.p + oa[i], A.s1, live ? ka : 0, va[i], false, k, av[c][i]);
#pragma unroll
      for (int i = 0; i < 2; ++i) Load4(B.vec, B.k4, B.p + offb[i], B.s0, live ? kb : 0, vb[i], ob[i], k, bv[c][i]);
    }
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          // a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4).
          const uint32_t a0 = ToTf32Fast(av[c][2 * mt][2 * s]), a1 = ToTf32Fast(av[c][2 * mt + 1][2 * s]);
          const uint32_t a2 = ToTf32Fast(av[c][2 * mt][2 * s + 1]), a3 = ToTf32Fast(av[c][2 * mt + 1][2 * s + 1]);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            MmaTf32(acc[mt][nt], a0, a1, a2, a3, ToTf32Fast(bv[c][nt][2 * s]), ToTf32Fast(bv[c][nt][2 * s + 1]));
          }
        }
      }
    }
  }
}

// The warp's tile into red[warp][row·16 + col].
__device__ __forceinline__ void StoreTile(float* red, const float (&acc)[2][2][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* r = red + (threadIdx.x >> 5) * kTile;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int row = mt * 16 + g, col = nt * 8 + 2 * t;
      *reinterpret_cast<float2*>(r + row * kTn + col) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(r + (row + 8) * kTn + col) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
  }
}

// A grid-wide wait in two halves, so that a block's thread 0 can work between its arrival and its
// wait (GridWait: nothing between).
__device__ void GridArrive(Sync* sync, unsigned& target) {
  __syncthreads();
  target += gridDim.x;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(&sync->arrive, 1u);
  }
}

__device__ void GridAwait(Sync* sync, unsigned target) {
  if (threadIdx.x == 0) {
    // Every block is resident (a cooperative launch), so the wait ends. Plain (volatile) reads
    // while waiting: atomics of every block on one word queue behind each other at its L2 slice.
    while (*reinterpret_cast<volatile unsigned*>(&sync->arrive) < target) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
}

__device__ void GridWait(Sync* sync, unsigned& target) {
  GridArrive(sync, target);
  GridAwait(sync, target);
}

struct Ctx {
  const MlpStepArgs& a;
  const Buffers& bf;
  const opt::AdamElem<float>& adam;
};

__device__ __forceinline__ void CopyAsync4(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}

// What an output element's epilogue reads besides the sum, copied into e0..e2 (shared memory) by
// cp.async while the product's loads are in flight: no registers held, one round trip for both.
__device__ __forceinline__ void PrefetchEpilogue(const Ctx& c, const Task& t, int m, int n, float* e0, float* e1,
                                                 float* e2) {
  const MlpStepLayer& L = c.a.layer[t.layer];
  switch (t.kind) {
    case kForward:
      CopyAsync4(e0, L.b + n);
      break;
    case kDataGrad:
      CopyAsync4(e0, c.bf.act[t.layer - 1] + m * static_cast<int>(L.in) + n);
      break;
    case kWeightGrad:
      if (n < L.in) {
        const int i = m * static_cast<int>(L.in) + n;
        CopyAsync4(e0, L.w + i);
        CopyAsync4(e1, L.mw + i);
        CopyAsync4(e2, L.vw + i);
      } else {
        CopyAsync4(e0, L.b + m);
        CopyAsync4(e1, L.mb + m);
        CopyAsync4(e2, L.vb + m);
      }
      break;
    case kHead:
      break;
  }
}

__device__ __forceinline__ void Epilogue(const Ctx& c, const Task& t, int m, int n, float v, float e0, float e1,
                                         float e2) {
  const MlpStepLayer& L = c.a.layer[t.layer];
  switch (t.kind) {
    case kForward: {
      const float z = v + e0;
      c.bf.act[t.layer][m * static_cast<int>(L.out) + n] = z > 0.0f ? z : 0.0f;
      break;
    }
    case kDataGrad:
      c.bf.grad[t.layer - 1][m * static_cast<int>(L.in) + n] = e0 > 0.0f ? v : 0.0f;
      break;
    case kWeightGrad: {
      float x = e0;
      float st[2] = {e1, e2};
      c.adam.Apply(x, v, st, true);
      if (n < L.in) {
        const int i = m * static_cast<int>(L.in) + n;
        L.w_out[i] = x;
        L.mw_out[i] = st[0];
        L.vw_out[i] = st[1];
      } else {
        L.b_out[m] = x;
        L.mb_out[m] = st[0];
        L.vb_out[m] = st[1];
      }
      break;
    }
    case kHead:
      break;
  }
}

// Build with -DOTTR_MLP_STEP_TRACE to print, on the 50th launch of a process, when the blocks
// finished each phase's products (its last round's), its work and left its wait (µs after the
// earliest start): the phases' costs.
#ifdef OTTR_MLP_STEP_TRACE
}  // namespace
}  // namespace ottr::cuda::kernels
#include <cstdio>
namespace ottr::cuda::kernels {
namespace {
__device__ unsigned long long g_trace[3 * 16 + 1][1024];
__device__ unsigned g_launches;
__device__ __forceinline__ void Mark(int slot) {
  if (threadIdx.x == 0 && slot >= 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    g_trace[slot][blockIdx.x] = t;
  }
}
__device__ void PrintTrace(int phases) {
  if (atomicAdd(&g_launches, 1u) != 49) return;
  unsigned long long t0 = ~0ull;
  for (unsigned b = 0; b < gridDim.x; ++b) t0 = min(t0, g_trace[0][b]);
  for (int p = 0; p < phases; ++p) {
    unsigned long long prod = 0, work = 0, left = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      if (g_trace[1 + 3 * p][b] >= t0) prod = max(prod, g_trace[1 + 3 * p][b] - t0);
      work = max(work, g_trace[2 + 3 * p][b] - t0);
      left = max(left, g_trace[3 + 3 * p][b] - t0);
    }
    printf("mlp-step phase %d: products done by %.2f us, work by %.2f us, wait left by %.2f us\n", p, prod * 1e-3,
           work * 1e-3, left * 1e-3);
  }
}
#else
__device__ __forceinline__ void Mark(int) {}
#endif

// Walks the tiles of a block's slots in order (items base, base + 1, ...: t0's tiles, then t1's,
// row-major) with one division at the start, giving this thread's element of each.
struct SlotWalk {
  bool second;
  int tm, tn, left0;  // the tile's row and column of tiles; t0's items still ahead

  __device__ SlotWalk(const Task& t0, const Task& t1, int item) {
    second = item >= t0.items;
    const int tile = second ? item - t0.items : item;
    const int tiles_n = second ? t1.tiles_n : t0.tiles_n;
    tm = tile / tiles_n;
    tn = tile - tm * tiles_n;
    left0 = t0.items - item;
  }
  __device__ void Next(const Task& t0, const Task& t1) {
    if (--left0 == 0) {
      second = true;
      tm = tn = 0;
    } else if (++tn == (second ? t1.tiles_n : t0.tiles_n)) {
      tn = 0;
      ++tm;
    }
  }
  // This thread's element (m, n); false outside the product.
  __device__ bool Element(const Task& t0, const Task& t1, int* m, int* n) const {
    *m = tm * kTm + static_cast<int>(threadIdx.x) / kTn;
    *n = tn * kTn + static_cast<int>(threadIdx.x) % kTn;
    return *m < (second ? t1.m_count : t0.m_count) && *n < (second ? t1.n_count : t0.n_count);
  }
};

// The tiles of tasks t0 and t1 (t1's after t0's; count 1: t0 alone) over the grid, `split` warps
// a tile. The tasks are in shared memory (written by thread 0 before the phase): in registers
// the two of them (~40) made the products' loads spill.
__device__ __forceinline__ void RunPhase(const Ctx& c, const Task& t0, const Task& t1, int count, float* red,
                                         float* epi, int trace_slot) {
  const int total = t0.items + (count > 1 ? t1.items : 0);
  const int split = ChooseSplit(total, count > 1 ? max(t0.k16, t1.k16) : t0.k16);
  // Tiles a block sums at once: as many as its warps take, but no more than spreads the tiles
  // over every block.
  const int slots = min(kWarps / split, (total + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x));
  const int warp = threadIdx.x >> 5;
  const int per_round = gridDim.x * slots;
  for (int base = blockIdx.x * slots; base < total; base += per_round) {
    const int used = min(slots, total - base);
    // Everything the epilogues read is requested before the product's loads (one round trip for
    // both), the slots' sums (warp order) and writes after.
    {
      SlotWalk w(t0, t1, base);
      for (int q = 0; q < used; ++q, w.Next(t0, t1)) {
        int m, n;
        if (!w.Element(t0, t1, &m, &n)) continue;
        const int e = q * kTile + threadIdx.x;
        if (w.second) {
          PrefetchEpilogue(c, t1, m, n, epi + e, epi + kEpi + e, epi + 2 * kEpi + e);
        } else {
          PrefetchEpilogue(c, t0, m, n, epi + e, epi + kEpi + e, epi + 2 * kEpi + e);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    {
      const int q = warp / split;
      float acc[2][2][4] = {};
      if (q < used) {
        const SlotWalk w(t0, t1, base + q);
        const int part = warp % split;
        if (w.second) {
          WarpTile(t1.a, t1.b, w.tm * kTm, w.tn * kTn, t1.k16 * part / split, t1.k16 * (part + 1) / split, acc);
        } else {
          WarpTile(t0.a, t0.b, w.tm * kTm, w.tn * kTn, t0.k16 * part / split, t0.k16 * (part + 1) / split, acc);
        }
      }
      StoreTile(red, acc);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // this thread's own copies: no barrier needed for them
    __syncthreads();
    Mark(trace_slot);
    {
      SlotWalk w(t0, t1, base);
      for (int q = 0; q < used; ++q, w.Next(t0, t1)) {
        int m, n;
        if (!w.Element(t0, t1, &m, &n)) continue;
        float v = 0.0f;
        for (int s = 0; s < split; ++s) v += red[(q * split + s) * kTile + threadIdx.x];
        const int e = q * kTile + threadIdx.x;
        if (w.second) {
          Epilogue(c, t1, m, n, v, epi[e], epi[kEpi + e], epi[2 * kEpi + e]);
        } else {
          Epilogue(c, t0, m, n, v, epi[e], epi[kEpi + e], epi[2 * kEpi + e]);
        }
      }
    }
    __syncthreads();  // red is rewritten by the next round
  }
}

// The head: logits, the loss and dlogits of 8 rows per block, then G_{L-2} of those rows (the
// batch at 128 rows is 16 blocks' work: with 32 rows a block, 4 blocks took ~6 µs of it).
__device__ void RunHead(const Ctx& c, float* red, float* zs, double* s_loss, int* s_count, int trace_slot) {
  const MlpStepArgs& a = c.a;
  const int h = a.layers - 1;
  const MlpStepLayer& L = a.layer[h];
  const int classes = static_cast<int>(L.out), width = static_cast<int>(L.in), batch = static_cast<int>(a.batch);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int items = (batch + kHeadRows - 1) / kHeadRows;
  if (static_cast<int>(blockIdx.x) >= items) return;
  // The rows whose label counts (the mean's divisor), as CountLabels counts them.
  {
    int n = 0;
    for (int i = threadIdx.x; i < batch; i += kThreads) n += nl::LoadLabel(a.labels, a.labels64, i) != a.ignore_index;
    n = nl::WarpSum(n);
    if (lane == 0) s_count[warp] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
      int all = 0;
      for (int w = 0; w < kWarps; ++w) all += s_count[w];
      s_count[kWarps] = all;
    }
    __syncthreads();
  }
  const double scale = 1.0 / static_cast<double>(s_count[kWarps]);  // dloss = 1
  const float* y = batch > 0 ? c.bf.act[h - 1] : nullptr;
  const View B = BView(L.w, 1, width, width, classes, false);
  const int k16 = (width + 15) / 16;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int r0 = item * kHeadRows;
    const int r_end = min(batch, r0 + kHeadRows);
    {
      const View A = AView(y, width, 1, r_end, width);  // the tile's rows past the item's read 0
      float acc[2][2][4] = {};
      WarpTile(A, B, r0, 0, k16 * warp / kWarps, k16 * (warp + 1) / kWarps, acc);
      StoreTile(red, acc);
    }
    __syncthreads();
    Mark(trace_slot);
    // Softmax cross-entropy: a half-warp per row (lane j: class j), two rows per warp (the warps
    // past the item's rows compute nothing that is kept).
    const int half = lane >> 4, j = lane & 15;
    const int rr = 2 * warp + half;
    const int row = r0 + rr;
    const bool valid = row < r_end;
    const bool in = j < classes;
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += red[w * kTile + rr * kTn + j];
    if (in) v += __ldcg(L.b + j);
    const int64_t label = valid ? nl::LoadLabel(a.labels, a.labels64, row) : a.ignore_index;
    const float mx = nl::WarpMax<16>(in ? v : -std::numeric_limits<float>::infinity());
    const double se = nl::WarpSum<16>(in ? static_cast<double>(sce::ExpC(v - mx)) : 0.0);
    const double lse = static_cast<double>(mx) + log(se);
    const double l = static_cast<double>(static_cast<float>(static_cast<double>(v) - lse));
    float dz = 0.0f;
    if (valid && in) dz = sce::SceGradAt<float, float>(l, j, label, classes, a.ignore_index, 0.0, scale);
    const double lpy = nl::WarpSum<16>(in && j == label ? l : 0.0);
    double row_loss = 0.0, row_count = 0.0;
    if (valid && label != a.ignore_index) {
      row_loss = (label < 0 || label >= classes) ? sce::NaN() : -lpy;
      row_count = 1.0;
    }
    zs[rr * kTn + j] = dz;
    if (valid && in) c.bf.grad[h][row * classes + j] = dz;
    // Rows in order: lane 0 holds row 2·warp, lane 16 row 2·warp + 1.
    const double other_loss = __shfl_down_sync(0xffffffffu, row_loss, 16);
    const double other_count = __shfl_down_sync(0xffffffffu, row_count, 16);
    if (lane == 0) {
      s_loss[2 * warp] = row_loss + other_loss;
      s_loss[2 * warp + 1] = row_count + other_count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double l_sum = 0.0, n_sum = 0.0;
      for (int w = 0; w < kWarps; ++w) {
        l_sum += s_loss[2 * w];
        n_sum += s_loss[2 * w + 1];
      }
      c.bf.loss_part[2 * item] = l_sum;
      c.bf.loss_part[2 * item + 1] = n_sum;
    }
    // G_{L-2}[row, col] = Σ_j dlogits[row, j]·W[j, col] (float32, j in order), masked by Y > 0.
    float* gout = c.bf.grad[h - 1];
    for (int col = threadIdx.x; col < width; col += kThreads) {
      float wc[kClasses];
#pragma unroll
      for (int jj = 0; jj < kClasses; ++jj) wc[jj] = jj < classes ? __ldcg(L.w + jj * width + col) : 0.0f;
      // Y's mask of the item's rows requested at once (one round trip), then the sums and writes.
      float yv[kHeadRows];
#pragma unroll
      for (int r = 0; r < kHeadRows; ++r) yv[r] = r0 + r < r_end ? __ldcg(y + (r0 + r) * width + col) : 0.0f;
#pragma unroll
      for (int r = 0; r < kHeadRows; ++r) {
        if (r0 + r >= r_end) break;
        const float4* z4 = reinterpret_cast<const float4*>(zs + r * kTn);
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < kClasses / 4; ++q) {
          const float4 z = z4[q];  // j in order: 4q .. 4q + 3
          s = fmaf(z.x, wc[4 * q], s);
          s = fmaf(z.y, wc[4 * q + 1], s);
          s = fmaf(z.z, wc[4 * q + 2], s);
          s = fmaf(z.w, wc[4 * q + 3], s);
        }
        gout[(r0 + r) * width + col] = yv[r] > 0.0f ? s : 0.0f;
      }
    }
    __syncthreads();  // red and zs are rewritten by the next item
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    MlpStepKernel(const __grid_constant__ MlpStepArgs a, const __grid_constant__ Buffers bf, opt::AdamElem<float> adam,
                  OptimizerScalars s, Sync* sync) {
  __shared__ __align__(16) float red[kWarps * kTile];
  extern __shared__ __align__(16) float epi[];  // [3][kEpi]
  __shared__ __align__(16) float zs[kTm * kTn];
  __shared__ double s_loss[2 * kWarps];
  __shared__ int s_count[kWarps + 1];
  __shared__ Task s_task[2];  // the phase's products (RunPhase)
  __shared__ opt::AdamElem<float> s_adam;  // Adam with the step's scalars (from bf.adam after the head)
  Mark(0);
  const Ctx c{a, bf, s_adam};
  unsigned target = 0;
  const int layers = a.layers;
  int phase = 0;
  for (int l = 0; l + 1 < layers; ++l) {
    if (threadIdx.x == 0) s_task[0] = ForwardTask(a, bf, l);
    __syncthreads();
    RunPhase(c, s_task[0], s_task[0], 1, red, epi, 1 + 3 * phase);
    Mark(2 + 3 * phase);
    GridWait(sync, target);
    Mark(3 + 3 * phase++);
  }
  RunHead(c, red, zs, s_loss, s_count, 1 + 3 * phase);
  // Adam's scalars for the step (two double pows, ~1 µs on one thread) by the last block, which
  // the head leaves idle at small batches; every block copies them after the wait.
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
    opt::AdamElem<float> e = adam;
    e.Prepare(s);
    *bf.adam = e;
  }
  Mark(2 + 3 * phase);
  GridWait(sync, target);
  Mark(3 + 3 * phase++);
  static_assert(sizeof(s_adam) % 4 == 0, "copied as 32-bit words");
  for (int i = threadIdx.x; i < static_cast<int>(sizeof(s_adam) / 4); i += kThreads) {
    reinterpret_cast<unsigned*>(&s_adam)[i] = __ldcg(reinterpret_cast<const unsigned*>(bf.adam) + i);
  }  // read after the barrier that follows the next phase's tasks
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    // The loss: the head blocks' sums in block order.
    const int64_t items = (a.batch + kHeadRows - 1) / kHeadRows;
    double l_sum = 0.0, n_sum = 0.0;
    if (threadIdx.x == 0) {
      for (int64_t i = 0; i < items; ++i) {
        l_sum += __ldcg(bf.loss_part + 2 * i);
        n_sum += __ldcg(bf.loss_part + 2 * i + 1);
      }
      *a.loss = static_cast<float>(l_sum / n_sum);
    }
  }
  for (int l = layers - 2; l >= 1; --l) {
    if (threadIdx.x == 0) {
      s_task[0] = DataGradTask(a, bf, l);
      s_task[1] = WeightGradTask(a, bf, l + 1);
    }
    __syncthreads();
    RunPhase(c, s_task[0], s_task[1], 2, red, epi, 1 + 3 * phase);
    Mark(2 + 3 * phase);
    GridWait(sync, target);
    Mark(3 + 3 * phase++);
  }
  if (threadIdx.x == 0) {
    s_task[0] = WeightGradTask(a, bf, 1);
    s_task[1] = WeightGradTask(a, bf, 0);
  }
  __syncthreads();
  RunPhase(c, s_task[0], s_task[1], 2, red, epi, 1 + 3 * phase);
  __syncthreads();
  Mark(2 + 3 * phase);
  Mark(3 + 3 * phase++);
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&sync->done, 1u) == gridDim.x - 1) {
#ifdef OTTR_MLP_STEP_TRACE
      __threadfence();
      PrintTrace(phase);
#endif
      // Every other block passed its last wait on `arrive` before it counted itself done.
      sync->arrive = 0;
      sync->done = 0;
    }
  }
}

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace's layout; with base == nullptr only its size.
int64_t Layout(const MlpStepArgs& a, char* base, Buffers* bf) {
  int64_t off = 0;
  for (int l = 0; l < a.layers; ++l) {
    const int64_t bytes = Align256(a.batch * a.layer[l].out * 4);
    if (l + 1 < a.layers) {
      if (bf) bf->act[l] = reinterpret_cast<float*>(base + off);
      off += bytes;
    }
    if (bf) bf->grad[l] = reinterpret_cast<float*>(base + off);
    off += bytes;
  }
  if (bf) bf->loss_part = reinterpret_cast<double*>(base + off);
  off += Align256((a.batch + kHeadRows - 1) / kHeadRows * 2 * 8);
  if (bf) bf->adam = reinterpret_cast<opt::AdamElem<float>*>(base + off);
  off += Align256(sizeof(opt::AdamElem<float>));
  return off;
}

int Grid() {
  static const int grid = [] {
    int per_sm = 0;
    if (cudaFuncSetAttribute(MlpStepKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, MlpStepKernel, kThreads, kSmemBytes) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return per_sm >= 1 ? nl::SmCount() : 0;
  }();
  return grid;
}

}  // namespace

int64_t MlpStepWorkspaceBytes(const MlpStepArgs& a) { return Layout(a, nullptr, nullptr); }

int64_t MlpStepCounterBytes() { return sizeof(Sync); }

cudaError_t LaunchMlpStep(const MlpStepArgs& a, const AdamHyper& h, const OptimizerScalars& s, void* workspace,
                          void* counters, cudaStream_t stream) {
  if (!ir::MlpStepFits(a.layers, a.batch, a.layer[a.layers > 0 ? a.layers - 1 : 0].out) || workspace == nullptr ||
      counters == nullptr || a.x == nullptr || a.labels == nullptr || a.loss == nullptr) {
    return cudaErrorInvalidValue;
  }
  for (int l = 0; l < a.layers; ++l) {
    const MlpStepLayer& L = a.layer[l];
    if (L.in < 1 || L.out < 1 || (l > 0 && L.in != a.layer[l - 1].out)) return cudaErrorInvalidValue;
  }
  const int grid = Grid();
  if (grid < 1) return cudaErrorLaunchOutOfResources;
  Buffers bf{};
  Layout(a, static_cast<char*>(workspace), &bf);
  return LaunchKernel(LaunchMode{false, true}, MlpStepKernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                      kSmemBytes, stream, a, bf, opt::MakeAdam<float>(h), s, static_cast<Sync*>(counters));
}

}  // namespace ottr::cuda::kernels
