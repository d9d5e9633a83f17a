// General matrix multiply on the CPU: C = alpha * op(A) * op(B) + beta * C.
//
// All matrices are row-major with explicit leading dimensions (the distance in elements between
// the starts of consecutive rows), so a sub-matrix of a larger one is passed without copying:
//   op(A) is m x k: A is stored m x k with row stride lda (trans_a false) or k x m (trans_a true);
//   op(B) is k x n: B is stored k x n with row stride ldb (trans_b false) or n x k (trans_b true);
//   C is m x n with row stride ldc.
// The backward passes of a dense layer use the transpose flags instead of materialising
// transposes: dX = dY * W^T is Gemm(false, true, ...), dW = X^T * dY is Gemm(true, false, ...).
//
// float and double use a cache-blocked, packed algorithm (blocks of op(B) and op(A) are copied
// into contiguous panels that a register-blocked micro-kernel streams through; the micro-kernel is
// compiled for AVX-512, AVX2+FMA and baseline x86-64 and chosen at run time). Large problems are
// split over a pool of std::threads by rectangles of C. Results are deterministic: every element of
// C is computed by one thread, summing over k in increasing order in the same blocks whatever the
// thread count, so a result does not depend on the number of threads (it may differ in the last
// bits between instruction sets: the baseline kernel has no fused multiply-add).
//
// Other element types go through GemmGeneric: float16 and bfloat16 are converted to float and
// computed by the float path (one rounding to the storage type at the end); integers are computed
// exactly with wrap-around (modulo 2^bits, like NumPy) when alpha and beta are integral, else the
// integer product is scaled in double and converted back (saturating).
//
// Contract shared by every entry point: beta == 0 writes C without reading it (NaN or Inf already
// in C do not propagate); k == 0 gives C = beta * C; m == 0 or n == 0 does nothing. The leading
// dimensions must be at least the stored widths (lda >= k or m, and so on). A, B and C must not
// overlap.
#ifndef OTTR_RUNTIME_CPU_GEMM_H_
#define OTTR_RUNTIME_CPU_GEMM_H_

#include <cstdint>
#include <functional>

#include "ir/dtype.h"

namespace ottr::runtime::cpu {

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// Any numeric element type: float and double forward to Gemm above; ir::Half and ir::BFloat16
// compute in float; the integer types compute exactly (see the header comment). bool is not
// supported (no instantiation).
template <typename T>
void GemmGeneric(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                 const T* a, int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc);

// The most threads one Gemm call uses (the caller's thread included). Defaults to
// std::thread::hardware_concurrency() capped at kGemmThreadCap; SetGemmMaxThreads(0) restores the
// default. Changing it never changes results (see above), only speed.
inline constexpr int kGemmThreadCap = 16;
int GemmMaxThreads();
void SetGemmMaxThreads(int n);

// Runs fn(begin, end) over contiguous chunks that cover [0, n) once, on up to GemmMaxThreads()
// threads of the same pool (the caller's included), and returns when all are done. For
// independent work items such as the images of a batch: `macs_per_item` (multiply-adds, or a
// comparable cost) limits the thread count to what pays for waking a thread. Gemm calls made
// inside fn run on the thread that makes them, so the results equal those of a serial loop.
void ParallelFor(int64_t n, double macs_per_item, const std::function<void(int64_t, int64_t)>& fn);

// Instruction set of the float/double micro-kernels. kAuto (the default) picks the widest this CPU
// runs; SetGemmIsa forces a narrower one (tests cover every kernel; benchmarks compare them) and
// returns false, changing nothing, when the CPU lacks it.
enum class GemmIsa { kAuto = 0, kBaseline = 1, kAvx2 = 2, kAvx512 = 3 };
bool SetGemmIsa(GemmIsa isa);

// Name of the micro-kernel chosen for this CPU, e.g. "avx512 8x32" (for logs and benchmarks).
const char* GemmKernelName(bool double_precision = false);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_GEMM_H_
