// CUDA kernels of the elementwise ops (plain C++ interface: included by the .cu files and by
// runtime/cuda/elementwise_ops.cc). Element types are ONNX TensorProto codes (ir::DType values).
//
// Broadcasting. Compile time (elementwise_ops.cc) turns the NumPy broadcast of N operands into an
// IndexPlan<N>: size-1 output dims dropped, adjacent dims merged wherever every operand walks
// them the same way (contiguously or not at all), at most kMaxRank dims left, stored innermost
// first with each operand's element stride per dim (0 where it is broadcast). The kernels map an
// output index to operand offsets by dividing through the collapsed dims with precomputed 64-bit
// magic numbers (no hardware division). Common shapes collapse to rank 1 (same shapes, or a
// scalar operand: stride 0) or rank 2 ([M, N] + [N]: the row operand has strides {1, 0}).
//
// Vectorisation. When every operand that is contiguous in the innermost dim and the output are
// 16-byte aligned and the innermost dim is a multiple of the pack width V = 16 / (largest element
// size) (or the plan has rank 1, where a scalar tail loop finishes the last n % V elements), each
// thread moves one 16-byte pack per operand; operands broadcast along the innermost dim are read
// once per pack. Otherwise the same kernel runs one element per thread.
//
// Launchers are looked up once per node at compile time (Find*: null when the op does not take
// those element types) and only enqueue work: they return the launch error, if any.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H_
#define OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

inline constexpr int kMaxRank = 8;
// Inputs one launch of a variadic op (Sum, Mean, Max, Min) folds; more are folded in chunks.
inline constexpr int kMaxFoldInputs = 8;

// Unsigned division by a constant: q = (umulhi(n, magic) + n) >> shift, exact for n < 2^63 (the
// "round-up" method of Granlund and Montgomery with a 65-bit multiplier whose top bit is implicit).
struct FastDivisor {
  uint64_t divisor = 1;
  uint64_t magic = 1;
  uint32_t shift = 0;
};

// Offsets of N operands for each element of a broadcast output (see the file comment).
template <int N>
struct IndexPlan {
  int64_t n = 0;  // output elements
  int rank = 1;   // collapsed dims, >= 1
  // Innermost first. dims[d].divisor is the extent of collapsed dim d.
  FastDivisor dims[kMaxRank];
  int64_t strides[kMaxRank][N] = {};
  // strides[0][k] == 1: operand k is contiguous along the innermost dim (else it is 0).
  bool inner_contiguous[N] = {};
};

// ---- Binary ops with broadcasting -----------------------------------------------------------

enum class BinaryOp : int {
  kAdd, kSub, kMul, kDiv,
  kMod,   // fmod = 0: the result has the divisor's sign
  kFmod,  // fmod = 1: the result has the dividend's sign
  kPow,
  kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual,
  kAnd, kOr, kXor,
  kPRelu,
};

using BinaryFn = cudaError_t (*)(const IndexPlan<2>& plan, const void* a, const void* b, void* out,
                                 cudaStream_t stream);
// Launcher of `op` for operand types a_type and b_type (equal except for Pow), or null.
// Add..Mod: elementwise_arith.cu; Pow: elementwise_pow.cu; comparisons and logic:
// elementwise_compare.cu; PRelu: activation.cu.
BinaryFn FindArithmetic(BinaryOp op, int a_type, int b_type);
BinaryFn FindPow(int base_type, int exponent_type);
BinaryFn FindComparison(BinaryOp op, int a_type, int b_type);

// Where(cond, x, y): x and y of any type with `elem_bytes` bytes (1, 2, 4 or 8), cond bool.
using WhereFn = cudaError_t (*)(const IndexPlan<3>& plan, const void* cond, const void* x,
                                const void* y, void* out, cudaStream_t stream);
WhereFn FindWhere(int elem_bytes);

// ---- Unary ops (contiguous, same shape) ----------------------------------------------------

enum class UnaryOp : int {
  kNeg, kAbs, kSign, kErf, kSqrt, kExp, kLog, kReciprocal, kCeil, kFloor, kRound, kSin, kCos,
  kNot,
};
using UnaryFn = cudaError_t (*)(const void* in, void* out, int64_t n, cudaStream_t stream);
UnaryFn FindUnary(UnaryOp op, int type);  // elementwise_unary.cu

// Clip(x, min?, max?): lo and hi are device pointers to one element of x's type, or null for
// no bound; they are read inside the kernel, so they may change from step to step.
using ClipFn = cudaError_t (*)(const void* x, const void* lo, const void* hi, void* out, int64_t n,
                               cudaStream_t stream);
ClipFn FindClip(int type);  // elementwise_unary.cu

// Cast with ONNX semantics, exactly as the CPU reference (runtime/cpu/elementwise_common.h
// ConvertElement): float -> int truncates toward zero, saturates, NaN -> 0; x -> float16/bfloat16
// rounds to nearest even once (double and integers through float rounded to odd).
UnaryFn FindCast(int from_type, int to_type);  // elementwise_cast.cu

// ---- Variadic Sum, Mean, Max, Min ------------------------------------------------------------

enum class FoldOp : int { kSum, kMean, kMax, kMin };

// out = inputs[0] op inputs[1] op ... op inputs[count - 1] (left to right, each step rounded to
// the element type like the CPU reference), with IndexPlan operand k = inputs[k]. When
// `mean_count` > 0 the result is divided by it (Mean's last chunk). count <= kMaxFoldInputs; the
// caller folds more inputs in chunks with the output as the first operand of the next chunk.
struct FoldInputs {
  const void* ptr[kMaxFoldInputs] = {};
};
using FoldFn = cudaError_t (*)(const IndexPlan<kMaxFoldInputs>& plan, const FoldInputs& inputs,
                               int count, int64_t mean_count, void* out, cudaStream_t stream);
FoldFn FindFold(FoldOp op, int type);  // elementwise_variadic.cu

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H_
