// Device reductions of the Reduce* ops, ArgMax/ArgMin and ottr::ReduceProdGrad (plain C++
// interface: included by the .cu files and by reduction_ops.cc). Element types are ONNX dtype codes.
//
// A reduction is planned once per static shape (reduction_ops.cc fills a ReducePlan): size-1 dims
// are dropped and adjacent dims that are both reduced or both kept are merged, leaving M outputs
// of N reduced elements each. Then one of
//   kFill    N == 0: every output is the identity of the op (0, 1, -inf, NaN for Mean...).
//   kMap     N == 1: every output reduces exactly one element (noop_with_empty_axes, or reduced
//            axes of size 1): y[i] = finalize(x[i]).
//   kRow     the innermost dim is reduced: each output reduces `inner` contiguous elements per
//            "segment", over the segments spanned by the other reduced dims. A warp (small N, or
//            many outputs) or a 256-thread block per unit, float4 loads for aligned float32
//            (threads then run over the flattened positions across segments, four loads in
//            flight, so short rows such as a bias gradient's H·W keep every thread busy).
//   kColumn  the innermost dim is kept: threads of a (32 x 8) block run along the `inner`
//            contiguous outputs (coalesced, float4 for float32), the 8 rows of the block and the
//            loop split the reduced positions.
// When M is too small to fill the GPU, kRow and kColumn split each output's reduced positions over
// `splits` units that write partial accumulators to the workspace; a second kernel combines them
// in split order. Every combination order is fixed by the plan (no atomics): results are
// run-to-run deterministic.
//
// Accumulators: float for float32/float16/bfloat16, double for float64; integer Sum, Mean, Prod,
// SumSquare, L1 in 64 bits with wrap-around (Mean truncates toward zero), integer Max/Min exact,
// integer L2/LogSum/LogSumExp in double with a saturating conversion back (as the CPU reference).
// LogSumExp keeps (max, sum of exp(x - max)) pairs, combined as m = max(m1, m2),
// s = s1 exp(m1 - m) + s2 exp(m2 - m). Max/Min propagate NaN. Bool supports Max (any) and Min (all).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ottr::cuda::kernels {

enum class ReduceKind : int {
  kSum,
  kMean,
  kMax,
  kMin,
  kProd,
  kL1,
  kL2,
  kLogSum,
  kLogSumExp,
  kSumSquare,
};

constexpr int kReduceMaxDims = 8;
// Thread geometry the planner sizes grids with.
constexpr int kReduceBlockThreads = 256;  // kRow block unit, kMap, kFill, combine
constexpr int kReduceWarpsPerBlock = 8;   // kRow warp units per block
constexpr int kReduceColumnX = 32;        // kColumn threads along the contiguous outputs
constexpr int kReduceColumnY = 8;         // kColumn threads along the reduced positions
// Bytes reserved per partial accumulator in the workspace (the largest: a pair of doubles).
constexpr int kReducePartialBytes = 16;

enum class ReduceStrategy : int { kNone, kFill, kMap, kRow, kColumn };

struct ReducePlan {
  ReduceStrategy strategy = ReduceStrategy::kNone;
  int dtype = 0;  // ONNX code of input and output
  ReduceKind kind = ReduceKind::kSum;
  int64_t num_out = 0;  // M
  int64_t count = 0;    // N, reduced elements per output (Mean divides by it)
  // kRow: all kept dims; kColumn: the kept dims except the innermost (the "batch"). Row-major,
  // with their strides in the input.
  int num_kept = 0;
  int64_t kept_dims[kReduceMaxDims] = {};
  int64_t kept_strides[kReduceMaxDims] = {};
  // kRow: the reduced dims except the innermost (the segments); kColumn: all reduced dims.
  int num_red = 0;
  int64_t red_dims[kReduceMaxDims] = {};
  int64_t red_strides[kReduceMaxDims] = {};
  // kRow: the innermost (reduced, contiguous) dim; kColumn: the innermost (kept) dim.
  int64_t inner = 1;
  int64_t splits = 1;   // units per output; > 1 uses the workspace and a combine pass
  int64_t chunk = 0;    // reduced positions per split (kRow: flattened index; kColumn: rows)
  bool block_unit = false;  // kRow: a block (else a warp) per unit
  int vec = 1;              // 4: float4 loads allowed when the input pointer is 16-byte aligned
  int64_t workspace_bytes = 0;
};

// Whether the kernels support `kind` on element type `dtype`.
bool ReduceSupported(int dtype, ReduceKind kind);

// Enqueues the planned reduction of x into y (M elements, dtype of the plan).
cudaError_t LaunchReduce(const ReducePlan& plan, const void* x, void* y, void* workspace,
                         cudaStream_t stream);

// ArgMax / ArgMin of x viewed as [outer, len, inner] along the middle axis into int64 y
// [outer, inner]. NaN counts as larger (ArgMax) or smaller (ArgMin) than every number; ties pick
// the first index, or the last with select_last. len must be > 0 when outer * inner > 0.
bool ArgReduceSupported(int dtype);
cudaError_t LaunchArgReduce(int dtype, bool is_max, bool select_last, const void* x, int64_t* y,
                            int64_t outer, int64_t len, int64_t inner, cudaStream_t stream);

// ottr::ReduceProdGrad: dx_i = dy[g(i)] · Π_{j in G(i), j != i} x_j, computed per group G (the
// positions of x that broadcast onto one dy element) from the product P of its non-zero elements
// and its zero count z: z = 0: P / x_i; z = 1: P at the zero, 0 elsewhere; z >= 2: 0. In double.
// The plan is a ReducePlan over x with the groups as outputs (kind and strategy ignored; kept and
// reduced dims as for kRow/kColumn with all reduced dims in red_*, inner = 1).
bool ReduceProdGradSupported(int dtype);
cudaError_t LaunchReduceProdGrad(const ReducePlan& plan, const void* x, const void* dy, void* dx,
                                 cudaStream_t stream);

// Per-dtype launchers behind LaunchReduce (one .cu file each, compiled in parallel).
cudaError_t LaunchReduceF32(const ReducePlan& plan, const void* x, void* y, void* ws, cudaStream_t s);
cudaError_t LaunchReduceHalf(const ReducePlan& plan, const void* x, void* y, void* ws, cudaStream_t s);
cudaError_t LaunchReduceF64(const ReducePlan& plan, const void* x, void* y, void* ws, cudaStream_t s);
cudaError_t LaunchReduceInt(const ReducePlan& plan, const void* x, void* y, void* ws, cudaStream_t s);
cudaError_t LaunchReduceSmallInt(const ReducePlan& plan, const void* x, void* y, void* ws, cudaStream_t s);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_REDUCTION_KERNELS_H_
