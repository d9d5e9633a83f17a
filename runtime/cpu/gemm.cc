#include "runtime/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

namespace ottr::runtime::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// Micro-kernels.
//
// The blocked algorithm (after Goto & van de Geijn, "Anatomy of high-performance matrix
// multiplication", ACM TOMS 2008) copies op(A) into slivers of kMr rows stored column by column
// (sliver[p * kMr + i] = op(A)[r0 + i][p]) and op(B) into slivers of kNr columns stored row by row
// (sliver[p * kNr + j] = op(B)[p][c0 + j]), zero-padded at the edges. The micro-kernel multiplies
// one A sliver by one B sliver over kc steps, keeping the kMr x kNr tile of sums in vector
// registers:  acc[i][j] = sum_{p < kc} A[p][i] * B[p][j]  (p increasing, one fused multiply-add per
// step), and then writes  C[i][j] = alpha * acc[i][j] + beta * C[i][j]  (C not read when beta is
// 0). C's rows are the broadcast dimension and its columns the vector dimension, which suits
// row-major C. The body is written once with GCC vector extensions and compiled per instruction set
// inside functions carrying a target attribute; the register budget sets the tile:
//   AVX-512 (32 zmm): 8 x 32 floats  = 16 accumulators + 2 B vectors + 1 broadcast;
//   AVX2    (16 ymm): 6 x 16 floats  = 12 accumulators + 2 + 1;
//   SSE2    (16 xmm): 6 x 8 floats   = 12 accumulators + 2 + 1 (baseline x86-64);
// and the same shapes in doubles with half the columns.
// ---------------------------------------------------------------------------------------------

typedef float F32x16 __attribute__((vector_size(64)));
typedef float F32x8 __attribute__((vector_size(32)));
typedef float F32x4 __attribute__((vector_size(16)));
typedef double F64x8 __attribute__((vector_size(64)));
typedef double F64x4 __attribute__((vector_size(32)));
typedef double F64x2 __attribute__((vector_size(16)));

template <typename T, int kBytes>
struct VecOf;
template <>
struct VecOf<float, 64> {
  using type = F32x16;
};
template <>
struct VecOf<float, 32> {
  using type = F32x8;
};
template <>
struct VecOf<float, 16> {
  using type = F32x4;
};
template <>
struct VecOf<double, 64> {
  using type = F64x8;
};
template <>
struct VecOf<double, 32> {
  using type = F64x4;
};
template <>
struct VecOf<double, 16> {
  using type = F64x2;
};

// Micro-kernel signature: kc steps over the packed slivers a (kMr * kc) and b (kNr * kc), then the
// epilogue on the mv x nv top-left part of the tile at c (row stride ldc).
template <typename T>
using MicroKernelFn = void (*)(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int mv,
                               int nv, T alpha, T beta);

template <typename T, int kMr, int kNv, int kVecBytes>
inline __attribute__((always_inline)) void MicroKernelBody(int64_t kc, const T* __restrict a,
                                                           const T* __restrict b, T* __restrict c,
                                                           int64_t ldc, int mv, int nv, T alpha,
                                                           T beta) {
  using V = typename VecOf<T, kVecBytes>::type;
  constexpr int kW = kVecBytes / static_cast<int>(sizeof(T));
  constexpr int kNr = kNv * kW;
  V acc[kMr][kNv];
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) acc[i][v] = V{};
  }
  for (int64_t p = 0; p < kc; ++p) {
    V bv[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) std::memcpy(&bv[v], b + v * kW, kVecBytes);
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
      const V av = a[i] - V{};  // broadcast (x - 0 == x exactly, so this folds to a splat)
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[i][v] += av * bv[v];
    }
    a += kMr;
    b += kNr;
  }

  // Epilogue. A partial tile at the matrix edge goes through a full-size local tile so that every
  // element of C sees exactly the same vector arithmetic wherever its tile lies.
  alignas(64) T tile[kMr * kNr];
  const bool full = mv == kMr && nv == kNr;
  T* out = c;
  int64_t ld = ldc;
  if (!full) {
    out = tile;
    ld = kNr;
    std::memset(tile, 0, sizeof(tile));
    if (beta != T(0)) {
      for (int i = 0; i < mv; ++i) {
        for (int j = 0; j < nv; ++j) tile[i * kNr + j] = c[i * ldc + j];
      }
    }
  }
  const V valpha = alpha - V{};
  if (beta == T(0)) {
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        const V r = valpha * acc[i][v];
        std::memcpy(out + i * ld + v * kW, &r, kVecBytes);
      }
    }
  } else {
    const V vbeta = beta - V{};
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        V old;
        std::memcpy(&old, out + i * ld + v * kW, kVecBytes);
        const V r = valpha * acc[i][v] + vbeta * old;
        std::memcpy(out + i * ld + v * kW, &r, kVecBytes);
      }
    }
  }
  if (!full) {
    for (int i = 0; i < mv; ++i) {
      for (int j = 0; j < nv; ++j) c[i * ldc + j] = tile[i * kNr + j];
    }
  }
}

#define OTTR_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma")))
#define OTTR_TARGET_AVX2 __attribute__((target("avx2,fma")))

OTTR_TARGET_AVX512 void KernelF32Avx512(int64_t kc, const float* a, const float* b, float* c,
                                        int64_t ldc, int mv, int nv, float alpha, float beta) {
  MicroKernelBody<float, 8, 2, 64>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}
OTTR_TARGET_AVX2 void KernelF32Avx2(int64_t kc, const float* a, const float* b, float* c,
                                    int64_t ldc, int mv, int nv, float alpha, float beta) {
  MicroKernelBody<float, 6, 2, 32>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}
void KernelF32Sse2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int mv,
                   int nv, float alpha, float beta) {
  MicroKernelBody<float, 6, 2, 16>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}
OTTR_TARGET_AVX512 void KernelF64Avx512(int64_t kc, const double* a, const double* b, double* c,
                                        int64_t ldc, int mv, int nv, double alpha, double beta) {
  MicroKernelBody<double, 8, 2, 64>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}
OTTR_TARGET_AVX2 void KernelF64Avx2(int64_t kc, const double* a, const double* b, double* c,
                                    int64_t ldc, int mv, int nv, double alpha, double beta) {
  MicroKernelBody<double, 6, 2, 32>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}
void KernelF64Sse2(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, int mv,
                   int nv, double alpha, double beta) {
  MicroKernelBody<double, 6, 2, 16>(kc, a, b, c, ldc, mv, nv, alpha, beta);
}

// Blocking for one kernel: mc x kc blocks of op(A) and kc x nc panels of op(B). The kc x kNr B
// sliver stays in L1 while the micro-kernel walks down the mc x kc A block, which stays in L2.
template <typename T>
struct KernelConfig {
  const char* name;
  int mr;
  int nr;
  int64_t mc;  // multiple of mr
  int64_t kc;
  int64_t nc;  // multiple of nr
  MicroKernelFn<T> kernel;
};

const KernelConfig<float> kF32Configs[] = {
    {"sse2 6x8", 6, 8, 96, 256, 4096, KernelF32Sse2},
    {"avx2 6x16", 6, 16, 96, 256, 4096, KernelF32Avx2},
    {"avx512 8x32", 8, 32, 128, 256, 4096, KernelF32Avx512},
};
const KernelConfig<double> kF64Configs[] = {
    {"sse2 6x4", 6, 4, 96, 256, 2048, KernelF64Sse2},
    {"avx2 6x8", 6, 8, 96, 256, 2048, KernelF64Avx2},
    {"avx512 8x16", 8, 16, 128, 256, 2048, KernelF64Avx512},
};

int DetectIsa() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wider register state (XCR0).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return static_cast<int>(GemmIsa::kAvx512);
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return static_cast<int>(GemmIsa::kAvx2);
  }
  return static_cast<int>(GemmIsa::kBaseline);
}

int BestIsa() {
  static const int best = DetectIsa();
  return best;
}

std::atomic<int> g_isa_override{static_cast<int>(GemmIsa::kAuto)};
std::atomic<int> g_max_threads_override{0};

int ActiveIsa() {
  const int o = g_isa_override.load(std::memory_order_relaxed);
  return o == static_cast<int>(GemmIsa::kAuto) ? BestIsa() : o;
}

template <typename T>
const KernelConfig<T>& ActiveConfig() {
  const int isa = ActiveIsa();
  if constexpr (std::is_same_v<T, float>) {
    return kF32Configs[isa - 1];
  } else {
    return kF64Configs[isa - 1];
  }
}

// ---------------------------------------------------------------------------------------------
// Packing.
// ---------------------------------------------------------------------------------------------

template <typename T>
struct Problem {
  bool trans_a;
  bool trans_b;
  int64_t m, n, k;
  T alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;
};

// dst[q * ldd + j] = src[j * lds + q] for j < rows, q < cols: the transposing copy that packing a
// row-major operand along its rows needs. Done in 4 x 4 (float) or 2 x 2 (double) register blocks
// with 16-byte vectors, which baseline x86-64 has; element by element at the edges.
// GCC's __builtin_shuffle takes a mask vector; clang's __builtin_shufflevector takes constant
// indices (the libFuzzer build uses clang).
#if defined(__clang__)
#define OTTR_SHUFFLE4(a, b, i0, i1, i2, i3) __builtin_shufflevector(a, b, i0, i1, i2, i3)
#define OTTR_SHUFFLE2(a, b, i0, i1) __builtin_shufflevector(a, b, i0, i1)
#else
typedef int OttrI32x4 __attribute__((vector_size(16)));
typedef int64_t OttrI64x2 __attribute__((vector_size(16)));
#define OTTR_SHUFFLE4(a, b, i0, i1, i2, i3) __builtin_shuffle(a, b, OttrI32x4{i0, i1, i2, i3})
#define OTTR_SHUFFLE2(a, b, i0, i1) __builtin_shuffle(a, b, OttrI64x2{i0, i1})
#endif

inline void TransposeBlock(const float* src, int64_t lds, float* dst, int64_t ldd) {
  F32x4 r0, r1, r2, r3;
  std::memcpy(&r0, src, 16);
  std::memcpy(&r1, src + lds, 16);
  std::memcpy(&r2, src + 2 * lds, 16);
  std::memcpy(&r3, src + 3 * lds, 16);
  const F32x4 t0 = OTTR_SHUFFLE4(r0, r1, 0, 4, 1, 5);
  const F32x4 t1 = OTTR_SHUFFLE4(r0, r1, 2, 6, 3, 7);
  const F32x4 t2 = OTTR_SHUFFLE4(r2, r3, 0, 4, 1, 5);
  const F32x4 t3 = OTTR_SHUFFLE4(r2, r3, 2, 6, 3, 7);
  const F32x4 o0 = OTTR_SHUFFLE4(t0, t2, 0, 1, 4, 5);
  const F32x4 o1 = OTTR_SHUFFLE4(t0, t2, 2, 3, 6, 7);
  const F32x4 o2 = OTTR_SHUFFLE4(t1, t3, 0, 1, 4, 5);
  const F32x4 o3 = OTTR_SHUFFLE4(t1, t3, 2, 3, 6, 7);
  std::memcpy(dst, &o0, 16);
  std::memcpy(dst + ldd, &o1, 16);
  std::memcpy(dst + 2 * ldd, &o2, 16);
  std::memcpy(dst + 3 * ldd, &o3, 16);
}
inline void TransposeBlock(const double* src, int64_t lds, double* dst, int64_t ldd) {
  F64x2 r0, r1;
  std::memcpy(&r0, src, 16);
  std::memcpy(&r1, src + lds, 16);
  const F64x2 o0 = OTTR_SHUFFLE2(r0, r1, 0, 2);
  const F64x2 o1 = OTTR_SHUFFLE2(r0, r1, 1, 3);
  std::memcpy(dst, &o0, 16);
  std::memcpy(dst + ldd, &o1, 16);
}

template <typename T>
void TransposeCopy(const T* src, int64_t lds, int64_t rows, int64_t cols, T* dst, int64_t ldd) {
  constexpr int64_t kB = 16 / sizeof(T);
  int64_t j0 = 0;
  for (; j0 + kB <= rows; j0 += kB) {
    int64_t q0 = 0;
    for (; q0 + kB <= cols; q0 += kB) {
      TransposeBlock(src + j0 * lds + q0, lds, dst + q0 * ldd + j0, ldd);
    }
    for (; q0 < cols; ++q0) {
      for (int64_t j = j0; j < j0 + kB; ++j) dst[q0 * ldd + j] = src[j * lds + q0];
    }
  }
  for (; j0 < rows; ++j0) {
    for (int64_t q = 0; q < cols; ++q) dst[q * ldd + j0] = src[j0 * lds + q];
  }
}

// op(A)[r0 : r0 + mc][p0 : p0 + kc] into ceil(mc / mr) slivers; sliver s starts at dst + s*mr*kc.
template <typename T>
void PackA(const Problem<T>& p, int mr, int64_t r0, int64_t mc, int64_t p0, int64_t kc, T* dst) {
  for (int64_t s = 0; s < mc; s += mr) {
    const int rows = static_cast<int>(std::min<int64_t>(mr, mc - s));
    T* d = dst + s * kc;
    if (!p.trans_a) {
      TransposeCopy(p.a + (r0 + s) * p.lda + p0, p.lda, rows, kc, d, mr);
    } else {
      for (int64_t q = 0; q < kc; ++q) {
        const T* src = p.a + (p0 + q) * p.lda + r0 + s;
        for (int i = 0; i < rows; ++i) d[q * mr + i] = src[i];
      }
    }
    if (rows < mr) {
      for (int64_t q = 0; q < kc; ++q) {
        for (int i = rows; i < mr; ++i) d[q * mr + i] = T(0);
      }
    }
  }
}

// op(B)[p0 : p0 + kc][c0 : c0 + nc] into ceil(nc / nr) slivers; sliver s starts at dst + s*nr*kc.
template <typename T>
void PackB(const Problem<T>& p, int nr, int64_t p0, int64_t kc, int64_t c0, int64_t nc, T* dst) {
  for (int64_t s = 0; s < nc; s += nr) {
    const int cols = static_cast<int>(std::min<int64_t>(nr, nc - s));
    T* d = dst + s * kc;
    if (!p.trans_b) {
      for (int64_t q = 0; q < kc; ++q) {
        const T* src = p.b + (p0 + q) * p.ldb + c0 + s;
        std::memcpy(d + q * nr, src, cols * sizeof(T));
        for (int j = cols; j < nr; ++j) d[q * nr + j] = T(0);
      }
    } else {
      TransposeCopy(p.b + (c0 + s) * p.ldb + p0, p.ldb, cols, kc, d, nr);
      if (cols < nr) {
        for (int64_t q = 0; q < kc; ++q) {
          for (int j = cols; j < nr; ++j) d[q * nr + j] = T(0);
        }
      }
    }
  }
}

// A 64-byte aligned scratch buffer owned by one thread, grown on demand.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { Release(); }
  void* Get(size_t bytes) {
    if (bytes > size_) {
      Release();
      data_ = ::operator new(bytes, std::align_val_t(64));
      size_ = bytes;
    }
    return data_;
  }

 private:
  void Release() {
    if (data_ != nullptr) ::operator delete(data_, std::align_val_t(64));
    data_ = nullptr;
    size_ = 0;
  }
  void* data_ = nullptr;
  size_t size_ = 0;
};

thread_local ScratchBuffer tls_pack_a;
thread_local ScratchBuffer tls_pack_b;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// C[m0:m1][n0:n1] of the problem on the calling thread. The k loop is outermost within a column
// panel and the first k block applies beta, so each element's sum runs over k in increasing order
// in the same blocks regardless of the rectangle it belongs to.
template <typename T>
void GemmRect(const Problem<T>& p, const KernelConfig<T>& cfg, int64_t m0, int64_t m1, int64_t n0,
              int64_t n1) {
  // k splits into equal blocks of at most cfg.kc (784 = 4 x 196 rather than 3 x 256 + 16, whose
  // short last block would pay a whole pass over C for little work). This depends on k only.
  const int64_t k_blocks = (p.k + cfg.kc - 1) / cfg.kc;
  const int64_t kc_step = std::min(cfg.kc, RoundUp((p.k + k_blocks - 1) / k_blocks, 8));
  const int64_t kc_max = std::min(kc_step, p.k);
  const int64_t mc_max = std::min(cfg.mc, RoundUp(m1 - m0, cfg.mr));
  const int64_t nc_max = std::min(cfg.nc, RoundUp(n1 - n0, cfg.nr));
  T* pack_a = static_cast<T*>(tls_pack_a.Get(mc_max * kc_max * sizeof(T)));
  T* pack_b = static_cast<T*>(tls_pack_b.Get(nc_max * kc_max * sizeof(T)));
  for (int64_t jc = n0; jc < n1; jc += cfg.nc) {
    const int64_t nc = std::min(cfg.nc, n1 - jc);
    for (int64_t pc = 0; pc < p.k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, p.k - pc);
      PackB(p, cfg.nr, pc, kc, jc, nc, pack_b);
      const T beta = pc == 0 ? p.beta : T(1);
      for (int64_t ic = m0; ic < m1; ic += cfg.mc) {
        const int64_t mc = std::min(cfg.mc, m1 - ic);
        PackA(p, cfg.mr, ic, mc, pc, kc, pack_a);
        for (int64_t jr = 0; jr < nc; jr += cfg.nr) {
          const int nv = static_cast<int>(std::min<int64_t>(cfg.nr, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += cfg.mr) {
            const int mv = static_cast<int>(std::min<int64_t>(cfg.mr, mc - ir));
            cfg.kernel(kc, pack_a + ir * kc, pack_b + jr * kc, p.c + (ic + ir) * p.ldc + jc + jr,
                       p.ldc, mv, nv, p.alpha, beta);
          }
        }
      }
    }
  }
}

// C = beta * C (the k == 0 case); beta == 0 writes zeros without reading C.
template <typename T>
void ScaleC(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + n, T(0));
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

// Matrix-vector shapes (m == 1 or n == 1), where packing would waste most of a tile. The sums run
// over k in increasing order per lane of kLanes partial sums, which are then added in lane order.
template <typename T>
void Gemv(const Problem<T>& p) {
  constexpr int kLanes = 16;
  auto finish = [&](T acc, T* out) {
    *out = p.beta == T(0) ? p.alpha * acc : p.alpha * acc + p.beta * *out;
  };
  // Dot product of x (stride 1) with y (stride 1).
  auto dot = [&](const T* x, const T* y, int64_t len) {
    T lanes[kLanes] = {};
    int64_t q = 0;
    for (; q + kLanes <= len; q += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[q + l] * y[q + l];
    }
    for (; q < len; ++q) lanes[q % kLanes] += x[q] * y[q];
    T s = T(0);
    for (int l = 0; l < kLanes; ++l) s += lanes[l];
    return s;
  };
  std::vector<T> vec(p.k);
  std::vector<T> acc;
  if (p.n == 1) {
    // c[i] = sum_q op(A)[i][q] * op(B)[q][0].
    for (int64_t q = 0; q < p.k; ++q) vec[q] = p.trans_b ? p.b[q] : p.b[q * p.ldb];
    if (!p.trans_a) {
      for (int64_t i = 0; i < p.m; ++i)
        finish(dot(p.a + i * p.lda, vec.data(), p.k), p.c + i * p.ldc);
    } else {
      acc.assign(p.m, T(0));
      for (int64_t q = 0; q < p.k; ++q) {
        const T* row = p.a + q * p.lda;
        const T x = vec[q];
        for (int64_t i = 0; i < p.m; ++i) acc[i] += row[i] * x;
      }
      for (int64_t i = 0; i < p.m; ++i) finish(acc[i], p.c + i * p.ldc);
    }
    return;
  }
  // m == 1: c[j] = sum_q op(A)[0][q] * op(B)[q][j].
  for (int64_t q = 0; q < p.k; ++q) vec[q] = p.trans_a ? p.a[q * p.lda] : p.a[q];
  if (p.trans_b) {
    for (int64_t j = 0; j < p.n; ++j) finish(dot(p.b + j * p.ldb, vec.data(), p.k), p.c + j);
  } else {
    acc.assign(p.n, T(0));
    for (int64_t q = 0; q < p.k; ++q) {
      const T* row = p.b + q * p.ldb;
      const T x = vec[q];
      for (int64_t j = 0; j < p.n; ++j) acc[j] += x * row[j];
    }
    for (int64_t j = 0; j < p.n; ++j) finish(acc[j], p.c + j);
  }
}

// ---------------------------------------------------------------------------------------------
// Threads.
// ---------------------------------------------------------------------------------------------

// A fixed set of worker threads that run the tasks of one parallel call at a time; the calling
// thread takes tasks too. A call made while another is running (from another thread, or nested)
// runs its tasks serially on the caller, which gives the same results.
//
// Waking a thread blocked on a condition variable costs tens of microseconds, a large part of a
// GEMM of the MLP's size (~0.5 ms), and training issues GEMMs back to back. So idle workers and a
// waiting caller first spin for up to kSpin (polling an atomic, with the x86 `pause` hint) and
// only then block.
class ThreadPool {
 public:
  static ThreadPool& Get() {
    // Leaked on purpose: workers may still be parked when static destructors run.
    static ThreadPool* pool = new ThreadPool();
    return *pool;
  }

  void Run(int num_tasks, const std::function<void(int)>& fn) {
    // A flag rather than a mutex: the nested case re-enters from the thread that set it.
    if (num_tasks <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
      for (int t = 0; t < num_tasks; ++t) fn(t);
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t previous = generation_.load(std::memory_order_relaxed);
    while (static_cast<int>(workers_.size()) < num_tasks - 1) {
      workers_.emplace_back([this, previous] { WorkerLoop(previous); });
    }
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_ = 0;
    pending_.store(num_tasks, std::memory_order_relaxed);
    generation_.store(previous + 1, std::memory_order_release);
    work_cv_.notify_all();
    RunTasks(lock);
    if (pending_.load(std::memory_order_acquire) != 0) {
      lock.unlock();
      SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; });
      lock.lock();
      done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_relaxed) == 0; });
    }
    fn_ = nullptr;
    busy_.store(false, std::memory_order_release);
  }

 private:
  static constexpr std::chrono::microseconds kSpin{200};

  ThreadPool() = default;

  // Polls `done` for up to kSpin; returns its last value.
  template <typename Pred>
  static bool SpinUntil(Pred&& done) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (done()) return true;
        __builtin_ia32_pause();
      }
      if (std::chrono::steady_clock::now() > deadline) return done();
    }
  }

  // Claims and runs tasks until none is left; `lock` holds mu_ on entry and exit.
  void RunTasks(std::unique_lock<std::mutex>& lock) {
    while (next_task_ < num_tasks_) {
      const int t = next_task_++;
      const std::function<void(int)>* fn = fn_;
      lock.unlock();
      (*fn)(t);
      lock.lock();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv_.notify_all();
    }
  }

  // `seen`: the generation before the call that started this worker, so that it joins that call.
  void WorkerLoop(uint64_t seen) {
    for (;;) {
      SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      seen = generation_.load(std::memory_order_relaxed);
      RunTasks(lock);
    }
  }

  std::atomic<bool> busy_{false};  // set for the whole of one parallel call
  std::mutex mu_;                  // guards everything below; the atomics are written only under it
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* fn_ = nullptr;
  int num_tasks_ = 0;
  int next_task_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
};

// Multiply-adds below which one more thread does not pay for waking it (tens of microseconds).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 21;

template <typename T>
void GemmImpl(const Problem<T>& p) {
  if (p.m <= 0 || p.n <= 0) return;
  if (p.k <= 0) {
    ScaleC(p.m, p.n, p.beta, p.c, p.ldc);
    return;
  }
  if (p.m == 1 || p.n == 1) {
    Gemv(p);
    return;
  }
  const KernelConfig<T>& cfg = ActiveConfig<T>();
  const int64_t tiles_m = (p.m + cfg.mr - 1) / cfg.mr;
  const int64_t tiles_n = (p.n + cfg.nr - 1) / cfg.nr;
  const double macs =
      static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  int threads = static_cast<int>(std::min<double>(GemmMaxThreads(), macs / kMinMacsPerThread));
  threads = static_cast<int>(std::min<int64_t>(threads, tiles_m * tiles_n));
  // Split C into a grid tm x tn of rectangles whose edges fall on tile boundaries (so every element
  // keeps its position inside its micro-tile), choosing the grid that packs the least: each thread
  // packs its rows of op(A) and its columns of op(B).
  int best_tm = 1;
  int best_tn = 1;
  for (; threads > 1; --threads) {
    double best_cost = std::numeric_limits<double>::infinity();
    for (int tm = 1; tm <= threads; ++tm) {
      if (threads % tm != 0) continue;
      const int tn = threads / tm;
      if (tm > tiles_m || tn > tiles_n) continue;
      const double cost = static_cast<double>(p.m) / tm + static_cast<double>(p.n) / tn;
      if (cost < best_cost) {
        best_cost = cost;
        best_tm = tm;
        best_tn = tn;
      }
    }
    if (best_cost < std::numeric_limits<double>::infinity()) break;
  }
  if (threads <= 1) {
    GemmRect(p, cfg, 0, p.m, 0, p.n);
    return;
  }
  ThreadPool::Get().Run(threads, [&](int t) {
    const int64_t bi = t / best_tn;
    const int64_t bj = t % best_tn;
    const int64_t m0 = std::min(p.m, tiles_m * bi / best_tm * cfg.mr);
    const int64_t m1 = std::min(p.m, tiles_m * (bi + 1) / best_tm * cfg.mr);
    const int64_t n0 = std::min(p.n, tiles_n * bj / best_tn * cfg.nr);
    const int64_t n1 = std::min(p.n, tiles_n * (bj + 1) / best_tn * cfg.nr);
    if (m0 < m1 && n0 < n1) GemmRect(p, cfg, m0, m1, n0, n1);
  });
}

// ---------------------------------------------------------------------------------------------
// Other element types.
// ---------------------------------------------------------------------------------------------

template <typename T>
float ToFloat(T v) {
  if constexpr (std::is_same_v<T, ir::Half>) {
    return ir::HalfToFloat(v);
  } else {
    return ir::BFloat16ToFloat(v);
  }
}
template <typename T>
T FromFloat(float v) {
  if constexpr (std::is_same_v<T, ir::Half>) {
    return ir::FloatToHalf(v);
  } else {
    return ir::FloatToBFloat16(v);
  }
}

// float16 / bfloat16: op(A), op(B) and C are widened to dense float matrices, multiplied by the
// float path, and the result rounded once to T.
template <typename T>
void GemmViaFloat(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, double beta, T* c,
                  int64_t ldc) {
  std::vector<float> fa(static_cast<size_t>(m * k));
  std::vector<float> fb(static_cast<size_t>(k * n));
  std::vector<float> fc(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < k; ++q) {
      fa[i * k + q] = ToFloat(trans_a ? a[q * lda + i] : a[i * lda + q]);
    }
  }
  for (int64_t q = 0; q < k; ++q) {
    for (int64_t j = 0; j < n; ++j) {
      fb[q * n + j] = ToFloat(trans_b ? b[j * ldb + q] : b[q * ldb + j]);
    }
  }
  if (beta != 0.0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) fc[i * n + j] = ToFloat(c[i * ldc + j]);
    }
  }
  Gemm(false, false, m, n, k, static_cast<float>(alpha), fa.data(), k, fb.data(), n,
       static_cast<float>(beta), fc.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = FromFloat<T>(fc[i * n + j]);
  }
}

// double -> integer T: truncation toward zero, saturating at T's range, NaN -> 0.
template <typename T>
T SaturatingCast(double v) {
  if (std::isnan(v)) return T(0);
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) {
    return std::numeric_limits<T>::lowest();
  }
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// True when v is an integer that int64 holds.
bool IntegralValue(double v, int64_t* out) {
  if (!(v >= -9.2e18 && v <= 9.2e18) || std::trunc(v) != v) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// Integers: sums of products in uint64 arithmetic, which wraps modulo 2^64 and so is exact modulo
// 2^bits(T) for every T; the final conversion to T keeps the low bits (C++20 modular conversion).
template <typename T>
void GemmInteger(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                 const T* a, int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  int64_t alpha_i = 0;
  int64_t beta_i = 0;
  const bool exact = IntegralValue(alpha, &alpha_i) && IntegralValue(beta, &beta_i);
  // Sign- or zero-extends to 64 bits, then reinterprets as unsigned.
  auto wide = [](T v) {
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<uint64_t>(v);
    } else {
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
  };
  std::vector<uint64_t> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), uint64_t{0});
    for (int64_t q = 0; q < k; ++q) {
      const uint64_t x = wide(trans_a ? a[q * lda + i] : a[i * lda + q]);
      if (!trans_b) {
        const T* row = b + q * ldb;
        for (int64_t j = 0; j < n; ++j) acc[j] += x * wide(row[j]);
      } else {
        for (int64_t j = 0; j < n; ++j) acc[j] += x * wide(b[j * ldb + q]);
      }
    }
    T* out = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      if (exact) {
        uint64_t r = static_cast<uint64_t>(alpha_i) * acc[j];
        if (beta_i != 0) r += static_cast<uint64_t>(beta_i) * wide(out[j]);
        out[j] = static_cast<T>(r);
      } else {
        const T prod = static_cast<T>(acc[j]);
        double r = alpha * static_cast<double>(prod);
        if (beta != 0.0) r += beta * static_cast<double>(out[j]);
        out[j] = SaturatingCast<T>(r);
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points.
// ---------------------------------------------------------------------------------------------

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  GemmImpl<float>({trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc});
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  GemmImpl<double>({trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc});
}

template <typename T>
void GemmGeneric(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                 const T* a, int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    Gemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), a, lda, b, ldb,
         static_cast<float>(beta), c, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>) {
    if (m <= 0 || n <= 0) return;
    GemmViaFloat(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "unsupported GEMM type");
    if (m <= 0 || n <= 0) return;
    GemmInteger(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

#define OTTR_INSTANTIATE_GEMM_GENERIC_(T)                                                        \
  template void GemmGeneric<T>(bool, bool, int64_t, int64_t, int64_t, double, const T*, int64_t, \
                               const T*, int64_t, double, T*, int64_t);
OTTR_INSTANTIATE_GEMM_GENERIC_(float)
OTTR_INSTANTIATE_GEMM_GENERIC_(double)
OTTR_INSTANTIATE_GEMM_GENERIC_(ir::Half)
OTTR_INSTANTIATE_GEMM_GENERIC_(ir::BFloat16)
OTTR_INSTANTIATE_GEMM_GENERIC_(int8_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(int16_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(int32_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(int64_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(uint8_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(uint16_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(uint32_t)
OTTR_INSTANTIATE_GEMM_GENERIC_(uint64_t)
#undef OTTR_INSTANTIATE_GEMM_GENERIC_

void ParallelFor(int64_t n, double macs_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const double total = macs_per_item * static_cast<double>(n);
  const int threads = static_cast<int>(std::clamp<double>(
      std::min<double>(GemmMaxThreads(), total / kMinMacsPerThread), 1.0, static_cast<double>(n)));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  ThreadPool::Get().Run(threads, [&](int t) {
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  });
}

int GemmMaxThreads() {
  const int o = g_max_threads_override.load(std::memory_order_relaxed);
  if (o > 0) return o;
  static const int hw = [] {
    const unsigned n = std::thread::hardware_concurrency();
    return std::clamp(static_cast<int>(n), 1, kGemmThreadCap);
  }();
  return hw;
}

void SetGemmMaxThreads(int n) {
  g_max_threads_override.store(std::clamp(n, 0, kGemmThreadCap), std::memory_order_relaxed);
}

bool SetGemmIsa(GemmIsa isa) {
  if (isa != GemmIsa::kAuto && static_cast<int>(isa) > BestIsa()) return false;
  g_isa_override.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

const char* GemmKernelName(bool double_precision) {
  return double_precision ? ActiveConfig<double>().name : ActiveConfig<float>().name;
}

}  // namespace ottr::runtime::cpu
