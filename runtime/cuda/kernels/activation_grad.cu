// Activation backward ops (ottr domain; math in ir/grads/activation_grads.cc, formulas as
// runtime/cpu/activation_grad_kernels.cc) and PReluGrad.
//
// dX = F(dY, Z) is on the training hot path (ReluGrad after every hidden layer), so it runs as a
// flat kernel with no index arithmetic: one 16-byte pack of dY and of Z per thread and iteration
// (4 floats, 8 halves), one pack stored; 12 bytes of traffic per float element, nothing else.
#include "runtime/cuda/kernels/activation.h"

#include "runtime/cuda/kernels/elementwise_device.h"
#include "runtime/cuda/kernels/mma_tf32.cuh"
#include "runtime/cuda/kernels/pdl.cuh"

namespace ottr::cuda::kernels {
namespace {

template <typename C>
__device__ __forceinline__ C Sigmoid(C x) {
  const C e = MExp(-MFabs(x));
  const C r = C(1) / (C(1) + e);
  return x >= C(0) ? r : e * r;
}

// A backward op without attributes: operator()(dy, z).
#define OTTR_ACTIVATION_GRAD_(Name, expr)                        \
  struct Name : OpBase {                                         \
    explicit Name(const ActivationParams&) {}                    \
    template <typename C>                                        \
    __device__ __forceinline__ C operator()(C dy, C z) const { \
      return expr;                                               \
    }                                                            \
  };
// z = Y.
OTTR_ACTIVATION_GRAD_(ReluGradOp, z > C(0) ? dy : C(0))
OTTR_ACTIVATION_GRAD_(SigmoidGradOp, dy * z * (C(1) - z))
// 1 − Y² as (1 − Y)(1 + Y): no cancellation near |Y| = 1.
OTTR_ACTIVATION_GRAD_(TanhGradOp, dy * ((C(1) - z) * (C(1) + z)))
// z = X.
OTTR_ACTIVATION_GRAD_(SoftplusGradOp, dy * Sigmoid(z))
OTTR_ACTIVATION_GRAD_(SoftsignGradOp, dy / ((C(1) + MFabs(z)) * (C(1) + MFabs(z))))
OTTR_ACTIVATION_GRAD_(HardSwishGradOp,
                      dy * (z < C(-3) ? C(0) : (z <= C(3) ? z / C(3) + C(0.5) : C(1))))
#undef OTTR_ACTIVATION_GRAD_

// d/dx x tanh(softplus(x)) = t + x (1 − t²) σ(x) with e = eˣ, n = e (e + 2): t = n / (n + 2),
// 1 − t² = 4 (n + 1) / (n + 2)², σ = e / (1 + e); 1 past x = 20.
struct MishGradOp : OpBase {
  explicit MishGradOp(const ActivationParams&) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    const C e = MExp(x > C(20) ? C(20) : x);
    const C n = e * (e + C(2));
    const C inv = C(1) / (n + C(2));
    const C t = n * inv;
    const C sech2 = C(4) * (n + C(1)) * inv * inv;
    const C sig = e / (C(1) + e);
    return dy * (x > C(20) ? C(1) : t + x * sech2 * sig);
  }
};

struct LeakyReluGradOp : OpBase {
  explicit LeakyReluGradOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    return dy * (x > C(0) ? C(1) : C(alpha));
  }
  float alpha;
};

struct ThresholdedReluGradOp : OpBase {
  explicit ThresholdedReluGradOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    return x > C(alpha) ? dy : C(0);
  }
  float alpha;
};

struct EluGradOp : OpBase {
  explicit EluGradOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    return dy * (x > C(0) ? C(1) : C(alpha) * MExp(x));
  }
  float alpha;
};

struct SeluGradOp : OpBase {
  explicit SeluGradOp(const ActivationParams& p) : alpha(p.alpha), gamma(p.gamma) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    return dy * C(gamma) * (x > C(0) ? C(1) : C(alpha) * MExp(x));
  }
  float alpha;
  float gamma;
};

struct CeluGradOp : OpBase {
  explicit CeluGradOp(const ActivationParams& p) : alpha(p.alpha) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    return dy * (x > C(0) ? C(1) : MExp(x / C(alpha)));
  }
  float alpha;
};

struct HardSigmoidGradOp : OpBase {
  explicit HardSigmoidGradOp(const ActivationParams& p) : alpha(p.alpha), beta(p.beta) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    const C v = C(alpha) * x + C(beta);
    return (v > C(0)) && (v < C(1)) ? dy * C(alpha) : C(0);
  }
  float alpha;
  float beta;
};

// none: dY (Φ(x) + x φ(x)), Φ(x) = erfc(−x/√2) / 2, φ(x) = e^(−x²/2) / √(2π).
struct GeluGradOp : OpBase {
  explicit GeluGradOp(const ActivationParams&) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    const C cdf = C(0.5) * MErfc(x * C(-0.7071067811865476));
    const C pdf = MExp(C(-0.5) * x * x) * C(0.3989422804014327);
    return dy * (cdf + x * pdf);
  }
};

// tanh: with u = √(2/π)(x + κx³), e = e^(−2|u|), r = 1 / (1 + e): (1 + t) / 2 = σ(2u) =
// (u ≥ 0 ? r : e r), 1 − t² = 4 e r², so dX = dY (σ(2u) + 2 x e r² √(2/π) (1 + 3κx²)).
struct GeluTanhGradOp : OpBase {
  explicit GeluTanhGradOp(const ActivationParams&) {}
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x) const {
    constexpr double kBeta = 0.7978845608028654;  // √(2/π)
    constexpr double kKappa = 0.044715;
    const C x2 = x * x;
    const C u = C(kBeta) * (x + C(kKappa) * x2 * x);
    const C e = MExp(C(-2) * MFabs(u));
    const C r = C(1) / (C(1) + e);
    const C s = u >= C(0) ? r : e * r;
    const C d = C(kBeta) * (C(1) + C(3 * kKappa) * x2);
    return dy * (s + C(2) * x * e * r * r * d);
  }
};

template <typename Op, typename T>
cudaError_t GradEntry(const void* dy, const void* z, void* dx, int64_t n, const ActivationParams& p,
                      cudaStream_t stream) {
  return LaunchFlatBinary<Op, T>(dy, z, dx, n, Op(p), stream);
}

template <typename Op>
ActivationGradFn Entry(int type) {
  ActivationGradFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) fn = &GradEntry<Op, T>;
  });
  return fn;
}

// ---- PReluGrad ------------------------------------------------------------------------------

// dX = x > 0 ? dy : slope · dy.
struct PReluGradDxOp : OpBase {
  template <typename C>
  __device__ __forceinline__ C operator()(C dy, C x, C slope) const {
    return x > C(0) ? dy : slope * dy;
  }
};

template <typename T>
cudaError_t PReluGradDxEntry(const IndexPlan<3>& plan, const void* dy, const void* x,
                             const void* slope, void* dx, cudaStream_t stream) {
  return LaunchTernary<PReluGradDxOp, T, T, T, T>(plan, dy, x, slope, dx, PReluGradDxOp{}, stream);
}

// Offsets of index `i` over `rank` dims (innermost first) into two tensors.
__device__ __forceinline__ void TwoOffsets(int64_t i, int rank, const FastDivisor* dims,
                                           const int64_t* s0, const int64_t* s1, int64_t& o0,
                                           int64_t& o1) {
  o0 = 0;
  o1 = 0;
  uint64_t rem = static_cast<uint64_t>(i);
#pragma unroll
  for (int d = 0; d < kMaxRank; ++d) {
    if (d >= rank) break;
    if (d == rank - 1) {
      o0 += static_cast<int64_t>(rem) * s0[d];
      o1 += static_cast<int64_t>(rem) * s1[d];
      break;
    }
    const uint64_t q = FastDiv(rem, dims[d]);
    const int64_t r = static_cast<int64_t>(rem - q * dims[d].divisor);
    o0 += r * s0[d];
    o1 += r * s1[d];
    rem = q;
  }
}

// One term of dSlope: x > 0 ? 0 : x · dy, in double.
template <typename T>
__device__ __forceinline__ double SlopeTerm(const T* dy, const T* x, int64_t o, int64_t xo) {
  const double xv = static_cast<double>(Load(x[xo]));
  return xv > 0.0 ? 0.0 : xv * static_cast<double>(Load(dy[o]));
}

// Short reductions: thread k sums slope element k over r = 0..R-1 in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SlopeThreadKernel(const __grid_constant__ SlopeReducePlan p, const T* __restrict__ dy,
                      const T* __restrict__ x, T* __restrict__ dslope) {
  using C = ComputeType<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < p.slope_elements; k += step) {
    int64_t ob, xb;
    TwoOffsets(k, p.kept_rank, p.kept_dims, p.kept_out_stride, p.kept_x_stride, ob, xb);
    double acc = 0.0;
    for (int64_t r = 0; r < p.reduce_elements; ++r) {
      int64_t o, xo;
      TwoOffsets(r, p.reduced_rank, p.reduced_dims, p.reduced_out_stride, p.reduced_x_stride, o, xo);
      acc += SlopeTerm(dy, x, ob + o, xb + xo);
    }
    dslope[k] = Store<T>(static_cast<C>(acc));
  }
}

// Block b reduces chunk b % chunks of slope element b / chunks: each thread a strided part of
// the chunk, then a fixed-shape tree (warp shuffles, then the first warp) over the threads.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SlopeBlockKernel(const __grid_constant__ SlopeReducePlan p, const T* __restrict__ dy,
                     const T* __restrict__ x, T* __restrict__ dslope, double* __restrict__ partial) {
  using C = ComputeType<T>;
  const int64_t b = blockIdx.x;
  const int64_t k = b / p.chunks;
  const int64_t c = b - k * p.chunks;
  int64_t ob, xb;
  TwoOffsets(k, p.kept_rank, p.kept_dims, p.kept_out_stride, p.kept_x_stride, ob, xb);
  const int64_t per = (p.reduce_elements + p.chunks - 1) / p.chunks;
  const int64_t r0 = c * per;
  const int64_t r1 = std::min<int64_t>(p.reduce_elements, r0 + per);
  double acc = 0.0;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
    int64_t o, xo;
    TwoOffsets(r, p.reduced_rank, p.reduced_dims, p.reduced_out_stride, p.reduced_x_stride, o, xo);
    acc += SlopeTerm(dy, x, ob + o, xb + xo);
  }
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
    if (lane == 0) {
      if (p.chunks == 1) {
        dslope[k] = Store<T>(static_cast<C>(acc));
      } else {
        partial[b] = acc;
      }
    }
  }
}

// dslope[k] = Σ_c partial[k · chunks + c] in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SlopeFinishKernel(int64_t slope_elements, int64_t chunks, const double* __restrict__ partial,
                      T* __restrict__ dslope) {
  using C = ComputeType<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < slope_elements;
       k += step) {
    double acc = 0.0;
    for (int64_t c = 0; c < chunks; ++c) acc += partial[k * chunks + c];
    dslope[k] = Store<T>(static_cast<C>(acc));
  }
}

template <typename T>
cudaError_t PReluGradSlopeEntry(const SlopeReducePlan& p, const void* dy, const void* x,
                                void* dslope, void* workspace, cudaStream_t stream) {
  if (p.slope_elements <= 0) return cudaSuccess;
  const T* pdy = static_cast<const T*>(dy);
  const T* px = static_cast<const T*>(x);
  T* out = static_cast<T*>(dslope);
  if (p.thread_per_slope || p.reduce_elements == 0) {
    SlopeThreadKernel<T><<<GridFor(p.slope_elements), kThreads, 0, stream>>>(p, pdy, px, out);
    return cudaGetLastError();
  }
  const int64_t blocks = p.slope_elements * p.chunks;
  if (blocks > 0x7fffffff || (p.chunks > 1 && workspace == nullptr)) return cudaErrorInvalidValue;
  double* partial = static_cast<double*>(workspace);
  SlopeBlockKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, pdy, px, out, partial);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.chunks == 1) return e;
  SlopeFinishKernel<T><<<GridFor(p.slope_elements), kThreads, 0, stream>>>(p.slope_elements, p.chunks,
                                                                           partial, out);
  return cudaGetLastError();
}


// ---- ReluGradBiasGrad -----------------------------------------------------------------------
//
// dX = ReluGrad(dY, Y) over [rows, cols] and dB[c] = Σ_r dX[r, c], one kernel. The grid is
// strips of 32·V columns (V elements of 16 bytes per thread) by row blocks: each thread sums its
// V columns over the block's rows (the 8 warps take every 8th row), the block adds its warps'
// sums in warp order and writes one partial per column to the workspace, and the block of a strip
// that finishes last (a per-strip counter, reset by that block for the next launch) adds the
// strip's partials in row-block order. The order is fixed, so the result is deterministic.
// dY, Y and dX may alias (in place): each element is read before the same thread writes it.
//
// Speed: the kernel is a stream (read dY and Y, write dX), so it lives on bytes in flight. Each
// warp loads kRelUnroll rows' packs before it uses any, and the plan sizes the grid to one wave
// of the blocks that fit on an SM (the occupancy the compiled kernel allows), so no block waits
// for a second wave. On the H200: the first version (one row per iteration, six blocks per SM
// asked for) took 48 µs on bf16 [4096, 4096], twice the plain ReluGrad; holding the unrolled
// kernel to 64 registers (four blocks per SM) spilled and took 76 µs.

constexpr int kRelUnroll = 4;
// Rows of one pass of a block's warps (each warp kRelUnroll rows): the transposed tile's height.
constexpr int kRelTileRows = (kThreads / 32) * kRelUnroll;

template <typename T>
using BiasAcc = std::conditional_t<std::is_same<T, double>::value, double, float>;

// dXᵀ (kTrans): each pass of the block's warps leaves its kRelTileRows x kStrip tile of dX in
// shared memory (rows padded by one pack, so the packs' stores are conflict-free), and the warps
// write it out column by column: lane l takes column 4·j + l / 8 and rows 8·i + l % 8, so each
// group of 8 lanes writes 8 consecutive elements of one row of dXᵀ (a 32-byte sector for float)
// and, with the 132-word row pitch, the 32 lanes read 32 different banks.
template <typename T, typename B, bool kVec, bool kTrans>
__global__ void __launch_bounds__(kThreads, 2)
    ReluGradBiasGradKernel(const ReluBiasGradPlan p, const T* dy, const T* y, T* dx, B* __restrict__ db,
                           T* __restrict__ dxt, BiasAcc<T>* __restrict__ partials, unsigned* __restrict__ counters,
                           const ReluGradOp op) {
  using A = BiasAcc<T>;
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  constexpr int kWarps = kThreads / 32;
  constexpr int kStrip = 32 * V;
  constexpr int kPitch = kStrip + V;  // elements per tile row
  __shared__ A red[kWarps][kStrip];
  __shared__ __align__(16) unsigned char tile_bytes[kTrans ? kRelTileRows * kPitch * sizeof(T) : 16];
  __shared__ bool last;
  T* tile = reinterpret_cast<T*>(tile_bytes);
  WaitForPriorGrids();  // pdl.cuh: dY is the launch before's output
  LetDependentsLaunch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t strip0 = static_cast<int64_t>(blockIdx.x) * kStrip;
  const int64_t c0 = strip0 + static_cast<int64_t>(lane) * V;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * p.rows_per_block;
  const int64_t r_end = min(p.rows, r_begin + p.rows_per_block);
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  if constexpr (kVec) {
    // Every warp makes the same number of passes (the tile's barriers); a warp's rows past the
    // end, or a lane's columns past the strip's last, do nothing.
    const bool cols_ok = c0 < p.cols;
    for (int64_t base = r_begin; base < r_end; base += kRelTileRows) {
      Pack<T, V> g[kRelUnroll], z[kRelUnroll];
#pragma unroll
      for (int u = 0; u < kRelUnroll; ++u) {
        const int64_t r = base + warp + static_cast<int64_t>(u) * kWarps;
        if (cols_ok && r < r_end) {
          g[u] = *reinterpret_cast<const Pack<T, V>*>(dy + r * p.cols + c0);
          z[u] = *reinterpret_cast<const Pack<T, V>*>(y + r * p.cols + c0);
        }
      }
#pragma unroll
      for (int u = 0; u < kRelUnroll; ++u) {
        const int64_t r = base + warp + static_cast<int64_t>(u) * kWarps;
        if (cols_ok && r < r_end) {
          Pack<T, V> o;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            o.v[j] = Apply<T>(op, g[u].v[j], z[u].v[j]);
            acc[j] += static_cast<A>(Load(o.v[j]));
          }
          if (dx != nullptr) *reinterpret_cast<Pack<T, V>*>(dx + r * p.cols + c0) = o;
          if constexpr (kTrans) {
            *reinterpret_cast<Pack<T, V>*>(tile + (warp + u * kWarps) * kPitch + lane * V) = o;
          }
        }
      }
      if constexpr (kTrans) {
        __syncthreads();
        const int group = lane >> 3, rr = lane & 7;
        for (int cg = warp; cg < kStrip / 4; cg += kWarps) {
          const int col = cg * 4 + group;
          const int64_t c = strip0 + col;
#pragma unroll
          for (int i = 0; i < kRelTileRows / 8; ++i) {
            const int row = i * 8 + rr;
            const int64_t r = base + row;
            if (c < p.cols && r < r_end) dxt[c * p.rows + r] = tile[row * kPitch + col];
          }
        }
        __syncthreads();
      }
    }
  } else {
    if (c0 < p.cols) {
      for (int64_t r = r_begin + warp; r < r_end; r += kWarps) {
        const int64_t off = r * p.cols + c0;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (c0 + j < p.cols) {
            const T o = Apply<T>(op, dy[off + j], y[off + j]);
            if (dx != nullptr) dx[off + j] = o;
            if (dxt != nullptr) dxt[(c0 + j) * p.rows + r] = o;
            acc[j] += static_cast<A>(Load(o));
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) red[warp][lane * V + j] = acc[j];
  __syncthreads();
  for (int i = threadIdx.x; i < kStrip; i += kThreads) {
    const int64_t c = strip0 + i;
    if (c >= p.cols) continue;
    A sum = A(0);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][i];
    partials[static_cast<int64_t>(blockIdx.y) * p.cols + c] = sum;
  }
  // Publish the partials, then count this block in; the strip's last block sums them.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < kStrip; i += kThreads) {
    const int64_t c = strip0 + i;
    if (c >= p.cols) continue;
    A sum = A(0);
#pragma unroll 8
    for (unsigned b = 0; b < gridDim.y; ++b) sum += __ldcg(&partials[static_cast<int64_t>(b) * p.cols + c]);
    db[c] = Store<B>(sum);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

template <typename T, typename B>
cudaError_t ReluGradBiasGradEntry(const ReluBiasGradPlan& p, const void* dy, const void* y, void* dx, void* db,
                                  void* dxt, void* workspace, unsigned* counters, cudaStream_t stream,
                                  bool programmatic) {
  if (p.cols <= 0) return cudaSuccess;
  if (workspace == nullptr || counters == nullptr || p.strips <= 0 || p.row_blocks <= 0 ||
      p.transposed != (dxt != nullptr) || (dx == nullptr && dxt == nullptr)) {
    return cudaErrorInvalidValue;
  }
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const dim3 grid(static_cast<unsigned>(p.strips), static_cast<unsigned>(p.row_blocks));
  const bool vec = p.cols % V == 0 && Aligned16(dy) && Aligned16(y) && (dx == nullptr || Aligned16(dx)) &&
                   p.rows_per_block % kRelTileRows == 0;
  auto* part = static_cast<BiasAcc<T>*>(workspace);
  const ReluGradOp op{ActivationParams{}};
  const T* pdy = static_cast<const T*>(dy);
  const T* py = static_cast<const T*>(y);
  T* pdx = static_cast<T*>(dx);
  T* pdxt = static_cast<T*>(dxt);
  B* pdb = static_cast<B*>(db);
  auto* kernel = vec && p.transposed ? ReluGradBiasGradKernel<T, B, true, true>
                 : vec              ? ReluGradBiasGradKernel<T, B, true, false>
                                    : ReluGradBiasGradKernel<T, B, false, false>;
  const cudaError_t e =
      LaunchKernel(programmatic, kernel, grid, dim3(kThreads), 0, stream, p, pdy, py, pdx, pdb, pdxt, part, counters, op);
  return e != cudaSuccess ? e : cudaGetLastError();
}


// ---- LinearReluGrad -------------------------------------------------------------------------
//
// dX = ReluGrad(dZ·W, Y), dB = Σ_r dX and (kW) dW = dZᵀ·Y, dBz = Σ_r dZ, one kernel: the pass over
// Y that ReluGradBiasGrad makes, with dY computed from dZ's K values of the row and the K rows of
// W instead of read (K <= 16: the head of a classifier). The grid is strips of 64 columns (a
// float2 per lane) by row blocks; a thread keeps its two columns of W (K x 2) and, with kW, their
// K x 2 weight-gradient sums in registers. Each pass of the block's warps (8 rows a warp) reads
// its 64 rows of dZ from shared memory as float4 broadcasts while the next pass's rows of Y and dZ
// are loaded (two buffers, one barrier a pass).
//
// Speed (H200, [8192, 512], K = 12): 27 µs with the weight gradient, 12.7 without. The kernel is
// bound by issue, not bytes: 2K multiply-adds per element of Y plus the bounds and index work
// (Nsight Compute, four columns a thread: 0.47 instructions per scheduler cycle with 2 warps a
// scheduler at 255 registers, DRAM 9% busy). Versions tried: dZ read from global memory one value
// at a time, 31 µs; staged in shared memory, 26 µs with 4 or 8 rows a warp, with or without the
// prefetch; four columns a thread, 29 µs.
//
// Sums: the block adds its warps' sums (dB, then each row of dW) in warp order into per-row-block
// partials in the workspace, and the strip's last block adds those in row-block order, as
// ReluGradBiasGrad does; strip 0's blocks also sum their rows of dZ for dBz. Deterministic.
//
// kTc (TF32 steps, with the weight gradient; LinearReluGradPlan::tc): dW on the tensor cores. Each
// pass's 64 rows of Y are also stored in shared memory (rows 72 floats apart: the fragment reads
// below hit 32 different banks), and after the pass's barrier warp w multiplies dZᵀ (the pass's
// rows of zs, K padded to 16) by its 8 columns of the strip, 8 rows at a time:
// mma.sync.m16n8k8 TF32 (operands rounded to TF32, float32 accumulation), 8 per pass; a second
// barrier keeps the next pass from overwriting zs and ys before every warp has read them. A warp
// owns its 8 columns of dW for all of the block's rows, so it writes its row block's partials
// straight from the accumulator fragments; dB keeps the float32 path above. The float32 CUDA-core
// sums of dW are 2K multiply-adds per element of Y, half the kernel's arithmetic.
constexpr int kLrgV = 2;
constexpr int kLrgStrip = 32 * kLrgV;
constexpr int kLrgUnroll = 8;
constexpr int kLrgPassRows = (kThreads / 32) * kLrgUnroll;
constexpr int kLrgYsStride = kLrgStrip + 8;
static_assert((kThreads / 32) * 8 == kLrgStrip, "kTc: one 8-column mma tile per warp covers the strip");
static_assert(kLrgPassRows % 8 == 0, "kTc: 8 rows per mma step");

template <int KP, bool kW, bool kVec, bool kTc>
__global__ void __launch_bounds__(kThreads)
    LinearReluGradKernel(const LinearReluGradPlan p, const float* __restrict__ dz, const float* __restrict__ w,
                         const float* y, float* dx, float* __restrict__ db,
                         float* __restrict__ dw, float* __restrict__ dbz, float* __restrict__ partials,
                         unsigned* __restrict__ counters) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kZPer = (kLrgPassRows * KP + kThreads - 1) / kThreads;  // dZ values a thread stages
  __shared__ float red[kWarps][kLrgStrip];
  // dZ's rows of this pass and the next, K padded with zeros to KP (a multiple of 4: float4
  // broadcast reads).
  __shared__ __align__(16) float zs[2][kLrgPassRows][KP];
  // kTc: the pass's rows of Y (this strip's 64 columns).
  __shared__ __align__(16) float ys[kTc ? kLrgPassRows : 1][kTc ? kLrgYsStride : 1];
  static_assert(!kTc || kW, "the tensor-core path computes the weight gradient");
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t cols = p.cols, k = p.k;
  const int64_t strip0 = static_cast<int64_t>(blockIdx.x) * kLrgStrip;
  const int64_t c0 = strip0 + static_cast<int64_t>(lane) * kLrgV;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * p.rows_per_block;
  const int64_t r_end = min(p.rows, r_begin + p.rows_per_block);
  float wr[KP][kLrgV];
#pragma unroll
  for (int j = 0; j < KP; ++j) {
#pragma unroll
    for (int v = 0; v < kLrgV; ++v) wr[j][v] = j < k && c0 + v < cols ? __ldg(w + j * cols + c0 + v) : 0.0f;
  }
  float acc[kLrgV] = {};
  float accw[kW && !kTc ? KP : 1][kLrgV] = {};
  float dwf[4] = {};  // kTc: this warp's accumulator fragment of dW (rows g, g + 8; 2 columns)
  // A pass: each warp's kLrgUnroll rows of Y (this thread's two columns) into registers, the
  // pass's rows of dZ into registers then shared memory.
  auto load_y = [&](int64_t base, float (&yv)[kLrgUnroll][kLrgV]) {
#pragma unroll
    for (int u = 0; u < kLrgUnroll; ++u) {
      const int64_t r = base + warp + static_cast<int64_t>(u) * kWarps;
      if constexpr (kVec) {
        float2 t = make_float2(0.0f, 0.0f);
        if (r < r_end && c0 < cols) t = __ldcs(reinterpret_cast<const float2*>(y + r * cols + c0));
        yv[u][0] = t.x;
        yv[u][1] = t.y;
      } else {
#pragma unroll
        for (int v = 0; v < kLrgV; ++v) yv[u][v] = r < r_end && c0 + v < cols ? y[r * cols + c0 + v] : 0.0f;
      }
    }
  };
  auto load_z = [&](int64_t base, float (&zn)[kZPer]) {
#pragma unroll
    for (int t = 0; t < kZPer; ++t) {
      const int i = threadIdx.x + t * kThreads;
      const int row = i / KP, j = i % KP;
      const int64_t r = base + row;
      zn[t] = i < kLrgPassRows * KP && r < r_end && j < k ? __ldg(dz + r * k + j) : 0.0f;
    }
  };
  auto store_z = [&](int b, const float (&zn)[kZPer]) {
#pragma unroll
    for (int t = 0; t < kZPer; ++t) {
      const int i = threadIdx.x + t * kThreads;
      if (i < kLrgPassRows * KP) zs[b][i / KP][i % KP] = zn[t];
    }
  };
  float yv[kLrgUnroll][kLrgV], yn[kLrgUnroll][kLrgV];
  float zn[kZPer];
  int b = 0;
  if (r_begin < r_end) {
    load_y(r_begin, yv);
    load_z(r_begin, zn);
    store_z(0, zn);
  }
  __syncthreads();
  // Every warp makes the same passes (the barrier after each). The next pass's loads are issued
  // before this pass's arithmetic, so they are in flight while it runs.
  for (int64_t base = r_begin; base < r_end; base += kLrgPassRows) {
    const int64_t next = base + kLrgPassRows;
    const bool more = next < r_end;
    if (more) {
      load_y(next, yn);
      load_z(next, zn);
    }
#pragma unroll
    for (int u = 0; u < kLrgUnroll; ++u) {
      const int row = warp + u * kWarps;
      const int64_t r = base + row;
      float zr[KP];
#pragma unroll
      for (int j = 0; j < KP; j += 4) {
        const float4 t = *reinterpret_cast<const float4*>(&zs[b][row][j]);
        zr[j] = t.x;
        zr[j + 1] = t.y;
        zr[j + 2] = t.z;
        zr[j + 3] = t.w;
      }
      float o[kLrgV];
#pragma unroll
      for (int v = 0; v < kLrgV; ++v) {
        float g = 0.0f;
#pragma unroll
        for (int j = 0; j < KP; ++j) g = fmaf(zr[j], wr[j][v], g);
        o[v] = yv[u][v] > 0.0f ? g : 0.0f;
        acc[v] += o[v];
        if constexpr (kW && !kTc) {
#pragma unroll
          for (int j = 0; j < KP; ++j) accw[j][v] = fmaf(zr[j], yv[u][v], accw[j][v]);
        }
      }
      if constexpr (kTc) *reinterpret_cast<float2*>(&ys[row][lane * kLrgV]) = make_float2(yv[u][0], yv[u][1]);
      if (r < r_end) {
        if constexpr (kVec) {
          if (c0 < cols) *reinterpret_cast<float2*>(dx + r * cols + c0) = make_float2(o[0], o[1]);
        } else {
#pragma unroll
          for (int v = 0; v < kLrgV; ++v) {
            if (c0 + v < cols) dx[r * cols + c0 + v] = o[v];
          }
        }
      }
    }
    if (more) store_z(b ^ 1, zn);  // the buffer the last pass read: every warp left it at the barrier
    __syncthreads();
    if constexpr (kTc) {
      const int g = lane >> 2, t = lane & 3, n = warp * 8 + g;
#pragma unroll
      for (int ks = 0; ks < kLrgPassRows; ks += 8) {
        const int r0 = ks + t, r1 = ks + t + 4;
        const uint32_t a0 = ToTf32(g < KP ? zs[b][r0][g < KP ? g : 0] : 0.0f);
        const uint32_t a1 = ToTf32(g + 8 < KP ? zs[b][r0][g + 8 < KP ? g + 8 : 0] : 0.0f);
        const uint32_t a2 = ToTf32(g < KP ? zs[b][r1][g < KP ? g : 0] : 0.0f);
        const uint32_t a3 = ToTf32(g + 8 < KP ? zs[b][r1][g + 8 < KP ? g + 8 : 0] : 0.0f);
        MmaTf32(dwf, a0, a1, a2, a3, ToTf32(ys[r0][n]), ToTf32(ys[r1][n]));
      }
      __syncthreads();  // zs[b] and ys are rewritten by the next pass
    }
    b ^= 1;
#pragma unroll
    for (int u = 0; u < kLrgUnroll; ++u) {
#pragma unroll
      for (int v = 0; v < kLrgV; ++v) yv[u][v] = yn[u][v];
    }
  }
  // Partials: [row block][q][cols], q = 0 for dB, 1 + j for row j of dW; then dBz's [row block][k].
  const int64_t q_count = 1 + (kW ? k : 0);
  if constexpr (kTc) {  // dW's rows g and g + 8, columns 8·warp + 2t and + 1, from the fragment
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t j = g + (i >= 2 ? 8 : 0);
      const int64_t c = strip0 + warp * 8 + 2 * t + (i & 1);
      if (j < k && c < cols) partials[(static_cast<int64_t>(blockIdx.y) * q_count + 1 + j) * cols + c] = dwf[i];
    }
  }
  const int64_t q_red = kTc ? 1 : q_count;  // the sums the block adds across its warps
  for (int q = 0; q < q_red; ++q) {
#pragma unroll
    for (int v = 0; v < kLrgV; ++v) {
      float val = acc[v];
      if constexpr (kW && !kTc) {
#pragma unroll
        for (int j = 0; j < KP; ++j) {
          if (q == j + 1) val = accw[j][v];
        }
      }
      red[warp][lane * kLrgV + v] = val;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kLrgStrip; i += kThreads) {
      const int64_t c = strip0 + i;
      if (c >= cols) continue;
      float sum = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += red[wi][i];
      partials[(static_cast<int64_t>(blockIdx.y) * q_count + q) * cols + c] = sum;
    }
    __syncthreads();
  }
  float* z_partials = partials + static_cast<int64_t>(gridDim.y) * q_count * cols;
  if (kW && blockIdx.x == 0 && threadIdx.x < k) {
    float sum = 0.0f;
    for (int64_t r = r_begin; r < r_end; ++r) sum += dz[r * k + threadIdx.x];
    z_partials[static_cast<int64_t>(blockIdx.y) * k + threadIdx.x] = sum;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int64_t i = threadIdx.x; i < q_count * kLrgStrip; i += kThreads) {
    const int64_t q = i / kLrgStrip;
    const int64_t c = strip0 + i % kLrgStrip;
    if (c >= cols) continue;
    // 16 loads in flight at a time (the partials are in L2): the last block's sums are the tail.
    float sum = 0.0f;
    for (unsigned b0 = 0; b0 < gridDim.y; b0 += 16) {
      float part[16];
#pragma unroll
      for (unsigned i2 = 0; i2 < 16; ++i2) {
        const unsigned b = b0 + i2;
        part[i2] = b < gridDim.y ? __ldcg(&partials[(static_cast<int64_t>(b) * q_count + q) * cols + c]) : 0.0f;
      }
#pragma unroll
      for (unsigned i2 = 0; i2 < 16; ++i2) sum += part[i2];
    }
    if (q == 0) {
      db[c] = sum;
    } else if (q - 1 < p.weight_rows) {
      dw[(q - 1) * cols + c] = sum;
    }
  }
  if (kW && blockIdx.x == 0 && threadIdx.x < p.weight_rows) {
    float sum = 0.0f;
    for (unsigned b = 0; b < gridDim.y; ++b) sum += __ldcg(&z_partials[static_cast<int64_t>(b) * k + threadIdx.x]);
    dbz[threadIdx.x] = sum;
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

template <int KP, bool kW, bool kVec, bool kTc>
cudaError_t LaunchLinearReluGradAs(const LinearReluGradPlan& p, const float* dz, const float* w, const float* y,
                                   float* dx, float* db, float* dw, float* dbz, float* partials, unsigned* counters,
                                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.strips), static_cast<unsigned>(p.row_blocks));
  LinearReluGradKernel<KP, kW, kVec, kTc>
      <<<grid, kThreads, 0, stream>>>(p, dz, w, y, dx, db, dw, dbz, partials, counters);
  return cudaGetLastError();
}

template <int KP, bool kW>
cudaError_t LaunchLinearReluGradK(const LinearReluGradPlan& p, const float* dz, const float* w, const float* y,
                                  float* dx, float* db, float* dw, float* dbz, float* partials, unsigned* counters,
                                  cudaStream_t stream) {
  const bool vec = p.cols % kLrgV == 0 && (reinterpret_cast<uintptr_t>(y) & 7) == 0 &&
                   (reinterpret_cast<uintptr_t>(dx) & 7) == 0;
  if constexpr (kW) {
    if (p.tc) {
      return vec ? LaunchLinearReluGradAs<KP, true, true, true>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream)
                 : LaunchLinearReluGradAs<KP, true, false, true>(p, dz, w, y, dx, db, dw, dbz, partials, counters,
                                                                 stream);
    }
  }
  return vec ? LaunchLinearReluGradAs<KP, kW, true, false>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream)
             : LaunchLinearReluGradAs<KP, kW, false, false>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
}

template <bool kW>
cudaError_t LaunchLinearReluGradW(const LinearReluGradPlan& p, const float* dz, const float* w, const float* y,
                                  float* dx, float* db, float* dw, float* dbz, float* partials, unsigned* counters,
                                  cudaStream_t stream) {
  switch (p.kp) {
    case 4: return LaunchLinearReluGradK<4, kW>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
    case 8: return LaunchLinearReluGradK<8, kW>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
    case 12: return LaunchLinearReluGradK<12, kW>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
    case 16: return LaunchLinearReluGradK<16, kW>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <int KP, bool kW, bool kTc>
int LinearReluGradBlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, LinearReluGradKernel<KP, kW, true, kTc>, kThreads, 0) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      n = 1;
    }
    return std::max(n, 1);
  }();
  return blocks;
}

template <int KP>
int LinearReluGradBlocks(bool weight_grad, bool tc) {
  if (weight_grad && tc) return LinearReluGradBlocksPerSm<KP, true, true>();
  return weight_grad ? LinearReluGradBlocksPerSm<KP, true, false>() : LinearReluGradBlocksPerSm<KP, false, false>();
}

}  // namespace

LinearReluGradPlan MakeLinearReluGradPlan(int64_t rows, int64_t cols, int64_t k, bool weight_grad, bool tc) {
  LinearReluGradPlan p;
  p.rows = rows;
  p.cols = cols;
  p.k = k;
  p.weight_grad = weight_grad;
  p.tc = tc && weight_grad;
  p.weight_rows = weight_grad ? k : 0;
  p.kp = static_cast<int>((k + 3) / 4 * 4);
  if (k < 1 || p.kp > 16) {
    p.kp = 0;  // unsupported: the launch refuses it
    return p;
  }
  int per_sm = 1;
  switch (p.kp) {
    case 4: per_sm = LinearReluGradBlocks<4>(weight_grad, p.tc); break;
    case 8: per_sm = LinearReluGradBlocks<8>(weight_grad, p.tc); break;
    case 12: per_sm = LinearReluGradBlocks<12>(weight_grad, p.tc); break;
    default: per_sm = LinearReluGradBlocks<16>(weight_grad, p.tc); break;
  }
  p.strips = std::max<int64_t>(1, (cols + kLrgStrip - 1) / kLrgStrip);
  // One wave of resident blocks, each block's rows a multiple of a full unrolled pass.
  const int64_t target = static_cast<int64_t>(SmCount()) * per_sm;
  const int64_t max_blocks = std::max<int64_t>(1, (rows + kLrgPassRows - 1) / kLrgPassRows);
  const int64_t want = std::clamp<int64_t>(target / p.strips, 1, std::min<int64_t>(max_blocks, 65535));
  p.rows_per_block = std::max<int64_t>(
      kLrgPassRows, ((rows + want - 1) / want + kLrgPassRows - 1) / kLrgPassRows * kLrgPassRows);
  p.row_blocks = std::max<int64_t>(1, (rows + p.rows_per_block - 1) / p.rows_per_block);
  return p;
}

int64_t LinearReluGradWorkspaceBytes(const LinearReluGradPlan& p) {
  const int64_t q = 1 + (p.weight_grad ? p.k : 0);
  return p.row_blocks * (q * p.cols + (p.weight_grad ? p.k : 0)) * static_cast<int64_t>(sizeof(float));
}

cudaError_t LaunchLinearReluGrad(const LinearReluGradPlan& p, const float* dz, const float* w, const float* y,
                                 float* dx, float* db, float* dw, float* dbz, void* workspace, unsigned* counters,
                                 cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  if (p.kp == 0 || workspace == nullptr || counters == nullptr || dx == nullptr || db == nullptr ||
      (p.weight_grad && (dw == nullptr || dbz == nullptr))) {
    return cudaErrorInvalidValue;
  }
  float* partials = static_cast<float*>(workspace);
  return p.weight_grad ? LaunchLinearReluGradW<true>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream)
                       : LaunchLinearReluGradW<false>(p, dz, w, y, dx, db, dw, dbz, partials, counters, stream);
}

namespace {
}  // namespace

ActivationGradFn FindActivationGrad(ActivationOp op, int type) {
  switch (op) {
    case ActivationOp::kRelu: return Entry<ReluGradOp>(type);
    case ActivationOp::kLeakyRelu: return Entry<LeakyReluGradOp>(type);
    case ActivationOp::kSigmoid: return Entry<SigmoidGradOp>(type);
    case ActivationOp::kTanh: return Entry<TanhGradOp>(type);
    case ActivationOp::kGelu: return Entry<GeluGradOp>(type);
    case ActivationOp::kGeluTanh: return Entry<GeluTanhGradOp>(type);
    case ActivationOp::kSoftplus: return Entry<SoftplusGradOp>(type);
    case ActivationOp::kSoftsign: return Entry<SoftsignGradOp>(type);
    case ActivationOp::kElu: return Entry<EluGradOp>(type);
    case ActivationOp::kSelu: return Entry<SeluGradOp>(type);
    case ActivationOp::kCelu: return Entry<CeluGradOp>(type);
    case ActivationOp::kHardSigmoid: return Entry<HardSigmoidGradOp>(type);
    case ActivationOp::kHardSwish: return Entry<HardSwishGradOp>(type);
    case ActivationOp::kThresholdedRelu: return Entry<ThresholdedReluGradOp>(type);
    case ActivationOp::kMish: return Entry<MishGradOp>(type);
  }
  return nullptr;
}

PReluGradDxFn FindPReluGradDx(int type) {
  PReluGradDxFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) fn = &PReluGradDxEntry<T>;
  });
  return fn;
}

PReluGradSlopeFn FindPReluGradSlope(int type) {
  PReluGradSlopeFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) fn = &PReluGradSlopeEntry<T>;
  });
  return fn;
}

// Blocks of ReluGradBiasGradKernel<T, T, true, kTrans> resident on one SM (at least 1), asked once.
template <typename T, bool kTrans>
int ReluBgradBlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, ReluGradBiasGradKernel<T, T, true, kTrans>, kThreads, 0) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      n = 1;
    }
    return std::max(n, 1);
  }();
  return blocks;
}

ReluBiasGradPlan MakeReluBiasGradPlan(int type, int64_t rows, int64_t cols, bool transposed) {
  ReluBiasGradPlan p;
  p.rows = rows;
  p.cols = cols;
  p.transposed = transposed;
  int size = 4, per_sm = 1;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    size = static_cast<int>(sizeof(T));
    if constexpr (kIsFloat<T>) per_sm = transposed ? ReluBgradBlocksPerSm<T, true>() : ReluBgradBlocksPerSm<T, false>();
  });
  p.acc_bytes = size == 8 ? 8 : 4;
  const int64_t strip = 32 * (16 / size);
  p.strips = std::max<int64_t>(1, (cols + strip - 1) / strip);
  // One wave of resident blocks in all, each block's rows a multiple of a full unrolled pass of
  // its warps (kRelTileRows).
  constexpr int64_t kRowUnit = kRelTileRows;
  const int64_t target = static_cast<int64_t>(SmCount()) * per_sm;
  const int64_t max_blocks = std::max<int64_t>(1, (rows + kRowUnit - 1) / kRowUnit);
  const int64_t want = std::clamp<int64_t>(target / p.strips, 1, std::min<int64_t>(max_blocks, 65535));
  p.rows_per_block = std::max<int64_t>(kRowUnit, ((rows + want - 1) / want + kRowUnit - 1) / kRowUnit * kRowUnit);
  p.row_blocks = std::max<int64_t>(1, (rows + p.rows_per_block - 1) / p.rows_per_block);
  return p;
}

ReluBiasGradFn FindReluGradBiasGrad(int type, int bias_type) {
  ReluBiasGradFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      if (bias_type == type) {
        fn = &ReluGradBiasGradEntry<T, T>;
      } else if constexpr (kIsHalf<T>) {
        if (bias_type == 1) fn = &ReluGradBiasGradEntry<T, float>;
      }
    }
  });
  return fn;
}

}  // namespace ottr::cuda::kernels
