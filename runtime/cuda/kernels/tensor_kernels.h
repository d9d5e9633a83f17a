// Device kernels of the layout, indexing and generator ops (plain C++ interface: included by the
// .cu files and by tensor_ops.cc). Data movement is by element width ("elem_bytes": 1, 2, 4, 8 or,
// for widened contiguous runs, 16), so every element type works; arithmetic kernels take the ONNX
// dtype code. Shapes and strides are planned on the host at compile time (tensor_ops.cc) and
// passed by value; nothing here allocates or synchronises.
//
// Indexing ops read their indices on the device, so an index out of range cannot become an error
// there: Gather and GatherElements write zeros for it, GatherGrad, GatherElementsGrad and
// ScatterElements ignore it (the CPU reference reports an error instead).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_TENSOR_KERNELS_H_
#define OTTR_RUNTIME_CUDA_KERNELS_TENSOR_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ottr::cuda::kernels {

constexpr int kTensorMaxDims = 10;

// dst[i] = src[offset + Σ_d coord_d(i) · strides[d]] with coord(i) the row-major coordinates of i
// over dims (dst is contiguous). Strides may be 0 (broadcast) or negative (reversed slice).
// Covers Expand, Tile, Slice, generic Transpose and view copies. index32: every source and
// destination offset fits in int32 (faster index arithmetic).
struct StridedCopyParams {
  int rank = 0;
  int elem_bytes = 0;
  bool index32 = false;
  int64_t numel = 0;
  int64_t offset = 0;
  int64_t dims[kTensorMaxDims] = {};
  int64_t strides[kTensorMaxDims] = {};
};
cudaError_t StridedCopy(const StridedCopyParams& p, const void* src, void* dst, cudaStream_t s);

// Batched 2-D transpose through 32x32 shared-memory tiles: for every batch index b and plane
// position (r, c), dst[out_base(b) + c · out_col_stride + r] = src[in_base(b) + r · in_row_stride + c]
// (both sides coalesced). in_base/out_base decompose b row-major over batch_dims.
struct TransposeTileParams {
  int elem_bytes = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t in_row_stride = 0;
  int64_t out_col_stride = 0;
  int num_batch = 0;
  int64_t batch = 1;
  int64_t batch_dims[kTensorMaxDims] = {};
  int64_t batch_in_strides[kTensorMaxDims] = {};
  int64_t batch_out_strides[kTensorMaxDims] = {};
};
cudaError_t TransposeTiled(const TransposeTileParams& p, const void* src, void* dst, cudaStream_t s);

// Concat / Split: a "big" tensor viewed as [outer, big_block] whose rows are the concatenation of
// the parts' rows [outer, block[k]] at column offset[k] (units of elem_bytes). Concat copies the
// parts into big, Split copies big into the parts (a null part is skipped).
constexpr int kMaxParts = 32;
struct PartsParams {
  int elem_bytes = 0;
  int num_parts = 0;
  int64_t outer = 0;
  int64_t big_block = 0;
  int64_t max_part_numel = 0;  // max over parts of outer · block[k]
  void* part[kMaxParts] = {};
  int64_t block[kMaxParts] = {};
  int64_t offset[kMaxParts] = {};
};
cudaError_t ConcatParts(const PartsParams& p, void* big, cudaStream_t s);
cudaError_t SplitParts(const PartsParams& p, const void* big, cudaStream_t s);

// out[o, j, i] = data[o, idx[j], i] over data [outer, n, inner] and m indices (int32 or int64,
// negative ones count from the end). inner in units of elem_bytes.
cudaError_t Gather(const void* data, const void* indices, bool idx64, void* out, int elem_bytes,
                   int64_t outer, int64_t n, int64_t m, int64_t inner, cudaStream_t s);

// ottr::GatherGrad: dx[o, r, i] = Σ_{j: idx[j] = r} dy[o, j, i] over dx [outer, n, inner] and dy
// [outer, m, inner]. Deterministic: the (index, j) pairs are sorted stably by index with a CUB
// radix sort (in the workspace), so every dx row sums its dy rows in increasing j, as the CPU
// does. float32/float16/bfloat16 accumulate in float, float64 in double.
bool GatherGradSupported(int dtype);
size_t GatherGradWorkspaceBytes(int64_t m, int64_t n);
cudaError_t GatherGrad(int dtype, const void* dy, const void* indices, bool idx64, void* dx,
                       int64_t outer, int64_t n, int64_t m, int64_t inner, void* workspace,
                       size_t workspace_bytes, cudaStream_t s);

// GatherElements, ScatterElements and GatherElementsGrad on data dims (the output of
// ScatterElements and GatherElementsGrad) and index dims of one rank; `axis` normalized.
struct ElementsParams {
  int rank = 0;
  int axis = 0;
  int64_t data_numel = 0;
  int64_t idx_numel = 0;
  int64_t data_dims[kTensorMaxDims] = {};
  int64_t data_strides[kTensorMaxDims] = {};
  int64_t idx_dims[kTensorMaxDims] = {};
  int64_t idx_strides[kTensorMaxDims] = {};
};
// out (index dims) [k] = data[coords(k) with coords(k)[axis] = idx[k]].
cudaError_t GatherElements(const ElementsParams& p, const void* data, const void* indices, bool idx64,
                           void* out, int elem_bytes, cudaStream_t s);
// Every output element e scans the index "line" that can address it (the index positions sharing
// e's coordinates off the axis) in order, so duplicates apply in the CPU's row-major order
// (reduction none: the last wins) with no atomics. Cost: data elements × idx_dims[axis].
// reduction: 0 none, 1 add, 2 mul, 3 max, 4 min. Every element type.
bool ScatterElementsSupported(int dtype);
cudaError_t ScatterElements(const ElementsParams& p, int dtype, int reduction, const void* data,
                            const void* indices, bool idx64, const void* updates, void* out,
                            cudaStream_t s);
// dx[p(k)] += dy[k] (dx has data dims, dy index dims); float types, in the same order as the CPU.
bool GatherElementsGradSupported(int dtype);
cudaError_t GatherElementsGrad(const ElementsParams& p, int dtype, const void* dy, const void* indices,
                               bool idx64, void* dx, cudaStream_t s);

// Pad. Per output axis a: position c maps to the input index
//   j = c - pad_begin[a];  0 <= j < len[a]: crop[a] + j;  otherwise by mode (constant: the value;
//   edge: clamp; wrap: modulo len; reflect: mirror without repeating the edge, period 2(len - 1))
// (len = the input dim minus the negative pads, crop = the negative begin pad).
enum class PadMode : int { kConstant = 0, kReflect = 1, kEdge = 2, kWrap = 3 };
struct PadParams {
  int rank = 0;
  int elem_bytes = 0;  // the element as moved (possibly widened)
  int value_bytes = 0; // the data type's width: the pad value repeats every value_bytes
  PadMode mode = PadMode::kConstant;
  bool index32 = false;
  int64_t numel = 0;
  int64_t out_dims[kTensorMaxDims] = {};
  int64_t in_strides[kTensorMaxDims] = {};
  int64_t pad_begin[kTensorMaxDims] = {};
  int64_t len[kTensorMaxDims] = {};
  int64_t crop[kTensorMaxDims] = {};
  unsigned char value[8] = {};  // the pad value's bytes when value_ptr is null
};
// value_ptr: the constant value on the device (value_bytes wide), or null to use p.value.
cudaError_t Pad(const PadParams& p, const void* src, const void* value_ptr, void* dst, cudaStream_t s);

// ottr::PadGrad: dx[c] = Σ dy[o] over the output positions o whose source is c. Per axis a the
// sources' output positions are CSR lists in device memory: for input index c_a the positions
// lists[a][offsets[a][c_a] .. offsets[a][c_a + 1]) (ascending), so the sum runs in increasing o as
// on the CPU. Float types.
struct PadGradParams {
  int rank = 0;
  int64_t numel = 0;  // dx elements
  int64_t x_dims[kTensorMaxDims] = {};
  int64_t dy_strides[kTensorMaxDims] = {};
  const int64_t* offsets[kTensorMaxDims] = {};
  const int64_t* lists[kTensorMaxDims] = {};
};
bool PadGradSupported(int dtype);
cudaError_t PadGrad(const PadGradParams& p, int dtype, const void* dy, void* dx, cudaStream_t s);

// ottr::SliceGrad: dx[c] = dy[k] where, per axis, c_a = start[a] + k_a · step[a] with
// 0 <= k_a < count[a]; 0 where c is not a sliced position. Every element width.
struct SliceGradParams {
  int rank = 0;
  int elem_bytes = 0;
  int64_t numel = 0;  // dx elements
  int64_t x_dims[kTensorMaxDims] = {};
  int64_t start[kTensorMaxDims] = {};
  int64_t step[kTensorMaxDims] = {};
  int64_t count[kTensorMaxDims] = {};
  int64_t dy_strides[kTensorMaxDims] = {};
};
cudaError_t SliceGrad(const SliceGradParams& p, const void* dy, void* dx, cudaStream_t s);

// dst[0..numel) = the element `bits` (elem_bytes wide; ConstantOfShape).
cudaError_t Fill(void* dst, int64_t numel, int elem_bytes, uint64_t bits, cudaStream_t s);

// dst[0..n) = values[0..n), n <= 16, passed by value (Shape, Size: known at compile time).
constexpr int kMaxInt64Values = 16;
cudaError_t WriteInt64s(int64_t* dst, const int64_t* values, int n, cudaStream_t s);

// Range: out[i] = start + i · delta in the element type (start and delta read on the device;
// integers wrap, float16/bfloat16 computed in float as on the CPU).
bool RangeSupported(int dtype);
cudaError_t Range(int dtype, const void* start, const void* delta, void* out, int64_t n, cudaStream_t s);

// OneHot: out [outer, depth, inner] = (index at [outer, inner], negative ones from the end, equal
// to the depth position) ? values[1] : values[0]; non-finite indices select nothing. Indices of
// any numeric dtype, values of value_bytes width (read on the device).
bool OneHotIndexSupported(int idx_dtype);
cudaError_t OneHot(int idx_dtype, const void* indices, const void* values, int value_bytes, void* out,
                   int64_t outer, int64_t depth, int64_t inner, cudaStream_t s);

// CumSum along the middle axis of [outer, len, inner] (exclusive / reverse as ONNX). Floats
// accumulate in double and integers in 64 bits with wrap-around, as the CPU. inner > 1 or short
// rows: one thread per line; inner == 1 and long rows: a block-wide scan per row.
bool CumSumSupported(int dtype);
cudaError_t CumSum(int dtype, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                   bool exclusive, bool reverse, cudaStream_t s);

// Trilu over [mats, rows, cols]: keeps j - i >= k (upper) or j - i <= k (lower), else 0. k is
// read from k_ptr (an int64 on the device) when non-null, else k_value.
cudaError_t Trilu(const void* x, void* y, int elem_bytes, int64_t mats, int64_t rows, int64_t cols,
                  bool upper, int64_t k_value, const int64_t* k_ptr, cudaStream_t s);

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_TENSOR_KERNELS_H_
