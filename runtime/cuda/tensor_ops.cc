// CUDA layout, indexing and generator ops: Reshape, Flatten, Squeeze, Unsqueeze, Identity (views,
// copied only when the executor gives the output its own buffer), Shape, Size, Transpose, Concat,
// Split, Slice, Expand, Tile, Pad, Gather, GatherElements, ScatterElements, ConstantOfShape,
// Range, OneHot, CumSum, Trilu, and the gradient ops ottr::SliceGrad, ottr::PadGrad,
// ottr::GatherGrad, ottr::GatherElementsGrad.
//
// Everything shape-dependent is planned here once per static shape: dims are simplified (size-1
// dims dropped, dims that stay contiguous merged) and contiguous runs are moved as 16-, 8-, 4- or
// 2-byte words when the byte counts allow (checked again against the actual pointers at launch).
// Values the plan needs (Slice starts/ends, Pad pads, CumSum axis, split sizes...) come from
// compile-time-constant inputs or, where the static output shape determines them (Split sizes,
// Expand/Tile shapes, Range/ConstantOfShape/OneHot sizes), from the output type. Scalars that
// can change from step to step (Range start/delta, Pad's value, Trilu's k, OneHot's values) are
// read on the device.
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/tensor_shape_math.h"
#include "ir/status.h"
#include "runtime/cpu/tensor_kernel_util.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda {
namespace {

namespace k = kernels;

// Enqueues `expr` (a cudaError_t launcher call) inside an NVTX range and returns its error.
#define OTTR_TENSOR_LAUNCH_(name, expr)                                   \
  do {                                                                   \
    nvtxRangePushA(name);                                                \
    const cudaError_t ottr_launch_error_ = (expr);                       \
    nvtxRangePop();                                                      \
    if (ottr_launch_error_ != cudaSuccess) {                             \
      return CudaStatus(ottr_launch_error_, #expr, __FILE__, __LINE__);  \
    }                                                                    \
  } while (0)

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

int ElemSize(ir::DType t) { return static_cast<int>(ir::DTypeSize(t)); }

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

int64_t Product(const std::vector<int64_t>& d, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < d.size(); ++i) p *= d[i];
  return p;
}

bool Aligned(const void* p, int w) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(w) == 0; }

// The int64 values of compile-time-constant input i.
absl::StatusOr<std::vector<int64_t>> ConstInts(const OpCompileContext& ctx, int i, absl::string_view what) {
  const ir::Tensor* t = ctx.constant_input(i);
  if (t == nullptr) {
    return ctx.Error(absl::StrCat("input ", i, " (", what,
                                  ") must be a compile-time constant (an integer initializer or a Constant node)"));
  }
  if (!ir::IsInteger(t->dtype())) {
    return ctx.Error(absl::StrCat("input ", i, " (", what, ") must be an integer tensor, got ",
                                  ir::DTypeName(t->dtype())));
  }
  return t->ToInt64Vector();
}

absl::Status CheckOutputDims(const OpCompileContext& ctx, int i, const std::vector<int64_t>& expect) {
  if (ctx.output_dims(i) != expect) {
    return ctx.Error(absl::StrCat("output ", i, " computes to ", DimsString(expect), " but is typed ",
                                  ctx.output_type(i).ToString()));
  }
  return absl::OkStatus();
}

// ---- strided copies ------------------------------------------------------------------------

// A planned StridedCopy: a plain memcpy when the source is one contiguous run, else the kernel
// with `base` parameters, or `wide` ones (contiguous inner runs moved as wider words) when the
// pointers allow.
struct CopyPlan {
  int64_t numel = 0;
  bool memcpy = false;
  int64_t memcpy_bytes = 0;
  int64_t memcpy_src_offset_bytes = 0;
  k::StridedCopyParams base;
  bool has_wide = false;
  k::StridedCopyParams wide;
};

absl::StatusOr<CopyPlan> PlanCopy(const OpCompileContext& ctx, int es, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& strides, int64_t offset) {
  CopyPlan plan;
  plan.numel = ir::NumElements(dims);
  if (plan.numel == 0) return plan;
  // Drop size-1 dims, merge a dim into its outer neighbour when they stay contiguous.
  std::vector<int64_t> d, s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!d.empty() && s.back() == strides[i] * dims[i]) {
      d.back() *= dims[i];
      s.back() = strides[i];
    } else {
      d.push_back(dims[i]);
      s.push_back(strides[i]);
    }
  }
  if (d.empty()) {
    d = {1};
    s = {1};
  }
  if (d.size() == 1 && s[0] == 1) {
    plan.memcpy = true;
    plan.memcpy_bytes = plan.numel * es;
    plan.memcpy_src_offset_bytes = offset * es;
    return plan;
  }
  if (static_cast<int>(d.size()) > k::kTensorMaxDims) {
    return ctx.Unsupported(absl::StrCat("a strided copy of rank ", d.size(), " (at most ", k::kTensorMaxDims, ")"));
  }
  int64_t lo = offset, hi = offset;
  for (size_t i = 0; i < d.size(); ++i) (s[i] < 0 ? lo : hi) += (d[i] - 1) * s[i];
  k::StridedCopyParams& p = plan.base;
  p.rank = static_cast<int>(d.size());
  p.elem_bytes = es;
  p.numel = plan.numel;
  p.offset = offset;
  p.index32 = lo >= 0 && hi < (int64_t{1} << 30) && plan.numel < (int64_t{1} << 30);
  for (int i = 0; i < p.rank; ++i) {
    p.dims[i] = d[i];
    p.strides[i] = s[i];
  }
  // Widen a contiguous innermost run.
  if (s.back() == 1) {
    const int64_t inner_bytes = d.back() * es;
    for (int w : {16, 8, 4, 2}) {
      if (w <= es || inner_bytes % w != 0 || (offset * es) % w != 0) continue;
      bool ok = true;
      for (size_t i = 0; i + 1 < d.size(); ++i) ok &= (s[i] * es) % w == 0;
      if (!ok) continue;
      plan.has_wide = true;
      plan.wide = p;
      k::StridedCopyParams& q = plan.wide;
      q.elem_bytes = w;
      q.numel = plan.numel * es / w;
      q.offset = offset * es / w;
      q.dims[q.rank - 1] = inner_bytes / w;
      for (int i = 0; i + 1 < q.rank; ++i) q.strides[i] = s[i] * es / w;
      break;
    }
  }
  return plan;
}

cudaError_t RunCopy(const CopyPlan& plan, const void* src, void* dst, cudaStream_t stream) {
  if (plan.numel == 0) return cudaSuccess;
  if (plan.memcpy) {
    return cudaMemcpyAsync(dst, static_cast<const char*>(src) + plan.memcpy_src_offset_bytes, plan.memcpy_bytes,
                           cudaMemcpyDeviceToDevice, stream);
  }
  if (plan.has_wide && Aligned(src, plan.wide.elem_bytes) && Aligned(dst, plan.wide.elem_bytes)) {
    return k::StridedCopy(plan.wide, src, dst, stream);
  }
  return k::StridedCopy(plan.base, src, dst, stream);
}

// A compiled op that copies input 0 into output 0 by `plan`.
CompiledOp CopyOp(CopyPlan plan, std::string name) {
  CompiledOp op;
  op.launch = [plan = std::move(plan), name = std::move(name)](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_(name.c_str(), RunCopy(plan, a.inputs[0], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---- views ---------------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileView(OpCompileContext& ctx) {
  const ir::TensorType& in = ctx.input_type(0);
  const ir::TensorType& out = ctx.output_type(0);
  const int64_t bytes = ir::NumElements(ctx.input_dims(0)) * ElemSize(in.dtype);
  if (in.dtype != out.dtype || ir::NumElements(ctx.output_dims(0)) * ElemSize(out.dtype) != bytes) {
    return ctx.Error(absl::StrCat("output ", out.ToString(), " is not a view of input ", in.ToString()));
  }
  CompiledOp op;
  op.views = {{0, 0}};
  std::string name = ctx.node().op_type();
  op.launch = [bytes, name](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr || a.outputs[0] == a.inputs[0] || bytes == 0) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_(name.c_str(), cudaMemcpyAsync(a.outputs[0], a.inputs[0], bytes, cudaMemcpyDeviceToDevice, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---- Shape, Size -----------------------------------------------------------------------------

CompiledOp WriteValuesOp(std::vector<int64_t> values, std::string name) {
  CompiledOp op;
  op.launch = [values = std::move(values), name = std::move(name)](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_(name.c_str(), k::WriteInt64s(static_cast<int64_t*>(a.outputs[0]), values.data(),
                                                     static_cast<int>(values.size()), a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileShape(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t start = ctx.node().GetInt("start", 0), end = ctx.node().GetInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  std::vector<int64_t> values;
  for (int64_t i = start; i < end; ++i) values.push_back(x[i]);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, {static_cast<int64_t>(values.size())}));
  if (values.size() > static_cast<size_t>(k::kMaxInt64Values)) {
    return ctx.Unsupported(absl::StrCat("Shape of a rank-", values.size(), " slice (at most ", k::kMaxInt64Values, ")"));
  }
  return WriteValuesOp(std::move(values), "Shape");
}

absl::StatusOr<CompiledOp> CompileSize(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, {}));
  return WriteValuesOp({ir::NumElements(ctx.input_dims(0))}, "Size");
}

// ---- Transpose -----------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileTranspose(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  const int es = ElemSize(ctx.input_type(0).dtype);
  std::vector<int64_t> perm = ctx.node().GetInts("perm");
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    return ctx.Error(absl::StrCat("perm ", DimsString(perm), " does not match input ", DimsString(x)));
  }
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out_dims(rank);
  for (int64_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) {
      return ctx.Error(absl::StrCat("perm ", DimsString(perm), " is not a permutation"));
    }
    seen[perm[i]] = true;
    out_dims[i] = x[perm[i]];
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, out_dims));
  // Simplify: drop size-1 input axes, then merge input axes a, a+1 that stay adjacent in perm.
  std::vector<int64_t> keep_axis(rank, -1);  // old input axis -> new
  std::vector<int64_t> d;
  for (int64_t a = 0; a < rank; ++a) {
    if (x[a] != 1) {
      keep_axis[a] = static_cast<int64_t>(d.size());
      d.push_back(x[a]);
    }
  }
  std::vector<int64_t> pm;
  for (int64_t i = 0; i < rank; ++i) {
    if (keep_axis[perm[i]] >= 0) pm.push_back(keep_axis[perm[i]]);
  }
  // Merge: input axis a+1 follows a in perm -> one axis.
  bool merged = true;
  while (merged) {
    merged = false;
    for (size_t j = 0; j + 1 < pm.size(); ++j) {
      if (pm[j + 1] == pm[j] + 1) {
        const int64_t a = pm[j];
        d[a] *= d[a + 1];
        d.erase(d.begin() + a + 1);
        pm.erase(pm.begin() + j + 1);
        for (int64_t& v : pm) {
          if (v > a) --v;
        }
        merged = true;
        break;
      }
    }
  }
  const int64_t r = static_cast<int64_t>(d.size());
  const std::vector<int64_t> in_strides = RowMajorStrides(d);
  std::vector<int64_t> od(r), os(r);  // output dims and their input strides
  for (int64_t i = 0; i < r; ++i) {
    od[i] = d[pm[i]];
    os[i] = in_strides[pm[i]];
  }
  if (r >= 2 && pm[r - 1] != r - 1) {
    // The innermost axis moves. Tile over the plane (input axis pm[r-1] = "rows", which becomes
    // the output's innermost, and the input's innermost axis = "cols") when both are long enough.
    const int64_t row_axis = pm[r - 1];
    int64_t col_pos = 0;  // output position of the input's innermost axis
    for (int64_t i = 0; i < r; ++i) {
      if (pm[i] == r - 1) col_pos = i;
    }
    const std::vector<int64_t> out_strides = RowMajorStrides(od);
    if (d[row_axis] >= 16 && d[r - 1] >= 16 && es <= 8 && r - 2 <= k::kTensorMaxDims) {
      k::TransposeTileParams p;
      p.elem_bytes = es;
      p.rows = d[row_axis];
      p.cols = d[r - 1];
      p.in_row_stride = in_strides[row_axis];
      p.out_col_stride = out_strides[col_pos];
      for (int64_t i = 0; i < r; ++i) {  // batch axes in output order
        if (i == r - 1 || i == col_pos) continue;
        p.batch_dims[p.num_batch] = od[i];
        p.batch_in_strides[p.num_batch] = os[i];
        p.batch_out_strides[p.num_batch] = out_strides[i];
        ++p.num_batch;
        p.batch *= od[i];
      }
      CompiledOp op;
      op.launch = [p](const LaunchArgs& a) -> absl::Status {
        if (a.outputs[0] == nullptr) return absl::OkStatus();
        OTTR_TENSOR_LAUNCH_("Transpose", k::TransposeTiled(p, a.inputs[0], a.outputs[0], a.stream));
        return absl::OkStatus();
      };
      return op;
    }
  }
  OTTR_ASSIGN_OR_RETURN(CopyPlan plan, PlanCopy(ctx, es, od, os, 0));
  return CopyOp(std::move(plan), "Transpose");
}

// ---- Expand, Tile, Slice -------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileExpand(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0), out = ctx.output_dims(0);
  const int64_t rank = static_cast<int64_t>(out.size()), xr = static_cast<int64_t>(x.size());
  if (xr > rank) return ctx.Error(absl::StrCat("cannot expand ", DimsString(x), " to ", DimsString(out)));
  const std::vector<int64_t> xs = RowMajorStrides(x);
  std::vector<int64_t> strides(rank, 0);
  for (int64_t i = 0; i < xr; ++i) {
    const int64_t o = rank - xr + i;
    if (x[i] != out[o] && x[i] != 1) {
      return ctx.Error(absl::StrCat("cannot expand ", DimsString(x), " to ", DimsString(out)));
    }
    strides[o] = x[i] == 1 ? 0 : xs[i];
  }
  OTTR_ASSIGN_OR_RETURN(CopyPlan plan, PlanCopy(ctx, ElemSize(ctx.input_type(0).dtype), out, strides, 0));
  return CopyOp(std::move(plan), "Expand");
}

// Tile = a strided copy over the interleaved dims [r0, d0, r1, d1, ...] with strides
// [0, s0, 0, s1, ...] (out coordinate t_a · d_a + u_a reads x coordinate u_a).
absl::StatusOr<CompiledOp> CompileTile(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0), out = ctx.output_dims(0);
  if (x.size() != out.size()) return ctx.Error(absl::StrCat("output ", DimsString(out), " must have the rank of ", DimsString(x)));
  const std::vector<int64_t> xs = RowMajorStrides(x);
  std::vector<int64_t> dims, strides;
  for (size_t a = 0; a < x.size(); ++a) {
    if (x[a] == 0) {
      if (out[a] != 0) return ctx.Error(absl::StrCat("cannot tile ", DimsString(x), " to ", DimsString(out)));
      dims = {0};
      strides = {0};
      break;
    }
    if (out[a] % x[a] != 0) return ctx.Error(absl::StrCat("cannot tile ", DimsString(x), " to ", DimsString(out)));
    if (const ir::Tensor* rep = ctx.constant_input(1)) {
      const std::vector<int64_t> r = rep->ToInt64Vector();
      if (r.size() != x.size() || r[a] * x[a] != out[a]) {
        return ctx.Error(absl::StrCat("repeats ", DimsString(r), " do not give ", DimsString(out), " from ", DimsString(x)));
      }
    }
    dims.push_back(out[a] / x[a]);
    strides.push_back(0);
    dims.push_back(x[a]);
    strides.push_back(xs[a]);
  }
  OTTR_ASSIGN_OR_RETURN(CopyPlan plan, PlanCopy(ctx, ElemSize(ctx.input_type(0).dtype), dims, strides, 0));
  return CopyOp(std::move(plan), "Tile");
}

// Slice geometry on data dims `x`: per axis the first index, the step and the count. Inputs are
// Slice's (or SliceGrad's) starts, ends, [axes], [steps] at positions 1..4 (older opsets:
// attributes).
struct SliceGeometry {
  std::vector<int64_t> start, step, count;
};
absl::StatusOr<SliceGeometry> MakeSliceGeometry(const OpCompileContext& ctx, const std::vector<int64_t>& x) {
  std::vector<int64_t> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  if (ctx.has_input(1)) {
    OTTR_ASSIGN_OR_RETURN(starts, ConstInts(ctx, 1, "starts"));
    OTTR_ASSIGN_OR_RETURN(ends, ConstInts(ctx, 2, "ends"));
    if (ctx.has_input(3)) {
      OTTR_ASSIGN_OR_RETURN(axes, ConstInts(ctx, 3, "axes"));
    }
    if (ctx.has_input(4)) {
      OTTR_ASSIGN_OR_RETURN(steps, ConstInts(ctx, 4, "steps"));
    }
  } else {
    starts = ctx.node().GetInts("starts");
    ends = ctx.node().GetInts("ends");
    if (ctx.node().has_attr("axes")) axes = ctx.node().GetInts("axes");
  }
  const int64_t rank = static_cast<int64_t>(x.size());
  absl::StatusOr<ir::SliceSpec> spec = ir::MakeSliceSpec(rank, starts, ends, axes, steps);
  if (!spec.ok()) return ctx.Error(spec.status().message());
  SliceGeometry g{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), x};
  for (size_t i = 0; i < spec->axes.size(); ++i) {
    const int64_t a = spec->axes[i];
    const ir::SliceRange r = ir::ComputeSliceRange(x[a], spec->starts[i], spec->ends[i], spec->steps[i]);
    g.start[a] = r.count > 0 ? r.start : 0;
    g.step[a] = r.step;
    g.count[a] = r.count;
  }
  return g;
}

absl::StatusOr<CompiledOp> CompileSlice(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  OTTR_ASSIGN_OR_RETURN(const SliceGeometry g, MakeSliceGeometry(ctx, x));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, g.count));
  const std::vector<int64_t> xs = RowMajorStrides(x);
  std::vector<int64_t> strides(x.size());
  int64_t offset = 0;
  for (size_t a = 0; a < x.size(); ++a) {
    strides[a] = xs[a] * g.step[a];
    offset += g.start[a] * xs[a];
  }
  OTTR_ASSIGN_OR_RETURN(CopyPlan plan, PlanCopy(ctx, ElemSize(ctx.input_type(0).dtype), g.count, strides, offset));
  return CopyOp(std::move(plan), "Slice");
}

absl::StatusOr<CompiledOp> CompileSliceGrad(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.node().GetInts("shape");
  OTTR_ASSIGN_OR_RETURN(const SliceGeometry g, MakeSliceGeometry(ctx, x));
  if (ctx.input_dims(0) != g.count) {
    return ctx.Error(absl::StrCat("dY ", DimsString(ctx.input_dims(0)), " does not match the slice ",
                                  DimsString(g.count), " of ", DimsString(x)));
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  if (static_cast<int>(x.size()) > k::kTensorMaxDims) return ctx.Unsupported("rank above 10");
  k::SliceGradParams p;
  p.rank = static_cast<int>(x.size());
  p.elem_bytes = ElemSize(ctx.input_type(0).dtype);
  p.numel = ir::NumElements(x);
  const std::vector<int64_t> ds = RowMajorStrides(g.count);
  for (int a = 0; a < p.rank; ++a) {
    p.x_dims[a] = x[a];
    p.start[a] = g.start[a];
    p.step[a] = g.step[a];
    p.count[a] = g.count[a];
    p.dy_strides[a] = ds[a];
  }
  CompiledOp op;
  op.launch = [p](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("SliceGrad", k::SliceGrad(p, a.inputs[0], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---- Concat, Split ---------------------------------------------------------------------------

// The largest power of two <= 16 dividing every value in bytes.
int WidestWord(const std::vector<int64_t>& byte_counts) {
  int w = 16;
  for (int64_t b : byte_counts) {
    while (w > 1 && b % w != 0) w /= 2;
  }
  return w;
}

// Parts of a Concat (inputs) or Split (outputs): for each part its index in the node and its
// block (elements per outer row), grouped into launches of at most kMaxParts.
struct PartsPlan {
  int es = 0;
  int wide = 0;  // word size when every pointer allows it
  int64_t outer = 0, big_block = 0;
  std::vector<int> index;
  std::vector<int64_t> block, offset;
};

std::vector<k::PartsParams> BuildParts(const PartsPlan& plan, const std::vector<void*>& ptrs, const void* big) {
  bool aligned = Aligned(big, plan.wide);
  for (size_t i = 0; i < plan.index.size(); ++i) {
    if (ptrs[plan.index[i]] != nullptr) aligned &= Aligned(ptrs[plan.index[i]], plan.wide);
  }
  const int w = aligned ? plan.wide : plan.es;
  const int64_t f = w / plan.es;
  std::vector<k::PartsParams> out;
  for (size_t i = 0; i < plan.index.size(); ++i) {
    if (i % k::kMaxParts == 0) {
      out.emplace_back();
      out.back().elem_bytes = w;
      out.back().outer = plan.outer;
      out.back().big_block = plan.big_block / f;
    }
    k::PartsParams& p = out.back();
    const int j = p.num_parts++;
    p.part[j] = ptrs[plan.index[i]];
    p.block[j] = plan.block[i] / f;
    p.offset[j] = plan.offset[i] / f;
    p.max_part_numel = std::max(p.max_part_numel, plan.outer * p.block[j]);
  }
  return out;
}

// dims of the big tensor, the axis, and each part's size along it.
PartsPlan PlanParts(int es, const std::vector<int64_t>& dims, int64_t axis, const std::vector<int64_t>& sizes) {
  PartsPlan plan;
  plan.es = es;
  plan.outer = Product(dims, 0, axis);
  const int64_t inner = Product(dims, axis + 1, dims.size());
  plan.big_block = dims[axis] * inner;
  std::vector<int64_t> bytes = {plan.big_block * es};
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t b = sizes[i] * inner;
    if (b > 0 && plan.outer > 0) {
      plan.index.push_back(static_cast<int>(i));
      plan.block.push_back(b);
      plan.offset.push_back(off);
      bytes.push_back(b * es);
      bytes.push_back(off * es);
    }
    off += b;
  }
  plan.wide = std::max(WidestWord(bytes), es);
  return plan;
}

absl::StatusOr<CompiledOp> CompileConcat(OpCompileContext& ctx) {
  const std::vector<int64_t> out = ctx.output_dims(0);
  const int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0) return ctx.Error("cannot concatenate scalars");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
    std::vector<int64_t> d = ctx.input_dims(i);
    bool ok = static_cast<int64_t>(d.size()) == rank && ctx.input_type(i).dtype == ctx.output_type(0).dtype;
    for (int64_t a = 0; ok && a < rank; ++a) ok = a == *axis || d[a] == out[a];
    if (!ok) {
      return ctx.Error(absl::StrCat("input ", i, " ", ctx.input_type(i).ToString(), " does not match output ",
                                    ctx.output_type(0).ToString(), " outside axis ", *axis));
    }
    sizes.push_back(d[*axis]);
    total += d[*axis];
  }
  if (total != out[*axis]) return ctx.Error(absl::StrCat("inputs add up to ", total, " along axis ", *axis));
  PartsPlan plan = PlanParts(ElemSize(ctx.output_type(0).dtype), out, *axis, sizes);
  CompiledOp op;
  op.launch = [plan](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    for (const k::PartsParams& p : BuildParts(plan, a.inputs, a.outputs[0])) {
      OTTR_TENSOR_LAUNCH_("Concat", k::ConcatParts(p, a.outputs[0], a.stream));
    }
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileSplit(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) return ctx.Error("cannot split a scalar");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    std::vector<int64_t> d = ctx.output_dims(i);
    bool ok = static_cast<int64_t>(d.size()) == rank && ctx.output_type(i).dtype == ctx.input_type(0).dtype;
    for (int64_t a = 0; ok && a < rank; ++a) ok = a == *axis || d[a] == x[a];
    if (!ok) {
      return ctx.Error(absl::StrCat("output ", i, " ", ctx.output_type(i).ToString(), " does not match input ",
                                    ctx.input_type(0).ToString(), " outside axis ", *axis));
    }
    sizes.push_back(d[*axis]);
    total += d[*axis];
  }
  if (total != x[*axis]) return ctx.Error(absl::StrCat("outputs add up to ", total, " along axis ", *axis, " of ", DimsString(x)));
  if (const ir::Tensor* split = ctx.has_input(1) ? ctx.constant_input(1) : nullptr) {
    if (split->ToInt64Vector() != sizes) {
      return ctx.Error(absl::StrCat("split ", DimsString(split->ToInt64Vector()), " does not match the outputs ",
                                    DimsString(sizes)));
    }
  }
  PartsPlan plan = PlanParts(ElemSize(ctx.input_type(0).dtype), x, *axis, sizes);
  CompiledOp op;
  op.launch = [plan](const LaunchArgs& a) -> absl::Status {
    for (const k::PartsParams& p : BuildParts(plan, a.outputs, a.inputs[0])) {
      OTTR_TENSOR_LAUNCH_("Split", k::SplitParts(p, a.inputs[0], a.stream));
    }
    return absl::OkStatus();
  };
  return op;
}

// ---- Gather family -----------------------------------------------------------------------------

absl::StatusOr<bool> IndexIs64(const OpCompileContext& ctx, int i) {
  const ir::DType t = ctx.input_type(i).dtype;
  if (t != ir::DType::kInt32 && t != ir::DType::kInt64) {
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", ir::DTypeName(t)));
  }
  return t == ir::DType::kInt64;
}

absl::StatusOr<CompiledOp> CompileGather(OpCompileContext& ctx) {
  const std::vector<int64_t> data = ctx.input_dims(0), idx = ctx.input_dims(1);
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) return ctx.Error("data must have rank >= 1");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  OTTR_ASSIGN_OR_RETURN(const bool idx64, IndexIs64(ctx, 1));
  std::vector<int64_t> out(data.begin(), data.begin() + *axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + *axis + 1, data.end());
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, out));
  const int es = ElemSize(ctx.input_type(0).dtype);
  const int64_t outer = Product(data, 0, *axis), n = data[*axis], m = ir::NumElements(idx);
  const int64_t inner = Product(data, *axis + 1, data.size());
  const int wide = std::max(WidestWord({inner * es}), es);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    const bool w = Aligned(a.inputs[0], wide) && Aligned(a.outputs[0], wide);
    const int eb = w ? wide : es;
    OTTR_TENSOR_LAUNCH_("Gather", k::Gather(a.inputs[0], a.inputs[1], idx64, a.outputs[0], eb, outer, n, m,
                                            inner * es / eb, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileGatherGrad(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.node().GetInts("shape"), idx = ctx.input_dims(1);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) return ctx.Error("shape must have rank >= 1");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  OTTR_ASSIGN_OR_RETURN(const bool idx64, IndexIs64(ctx, 1));
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (!k::GatherGradSupported(static_cast<int>(dtype))) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  std::vector<int64_t> y(x.begin(), x.begin() + *axis);
  y.insert(y.end(), idx.begin(), idx.end());
  y.insert(y.end(), x.begin() + *axis + 1, x.end());
  if (ctx.input_dims(0) != y) {
    return ctx.Error(absl::StrCat("dY ", DimsString(ctx.input_dims(0)), " does not match Gather's output ",
                                  DimsString(y), " for data ", DimsString(x), " and indices ", DimsString(idx)));
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  const int64_t outer = Product(x, 0, *axis), n = x[*axis], m = ir::NumElements(idx);
  const int64_t inner = Product(x, *axis + 1, x.size());
  if (m >= (int64_t{1} << 31) || n >= (int64_t{1} << 31)) return ctx.Unsupported("more than 2^31 indices or rows");
  const size_t ws = k::GatherGradWorkspaceBytes(m, n);
  const int dt = static_cast<int>(dtype);
  CompiledOp op;
  op.workspace_bytes = static_cast<int64_t>(ws);
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("GatherGrad", k::GatherGrad(dt, a.inputs[0], a.inputs[1], idx64, a.outputs[0], outer, n, m,
                                                    inner, a.workspace, ws, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// Parameters of GatherElements / ScatterElements / GatherElementsGrad.
absl::StatusOr<k::ElementsParams> MakeElementsParams(const OpCompileContext& ctx, const std::vector<int64_t>& data,
                                                    const std::vector<int64_t>& idx) {
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) return ctx.Error("data must have rank >= 1");
  if (rank > k::kTensorMaxDims) return ctx.Unsupported("rank above 10");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  if (static_cast<int64_t>(idx.size()) != rank) {
    return ctx.Error(absl::StrCat("indices ", DimsString(idx), " must have the rank of data ", DimsString(data)));
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (d != *axis && idx[d] > data[d]) {
      return ctx.Error(absl::StrCat("indices ", DimsString(idx), " exceed data ", DimsString(data), " in dim ", d));
    }
  }
  k::ElementsParams p;
  p.rank = static_cast<int>(rank);
  p.axis = static_cast<int>(*axis);
  p.data_numel = ir::NumElements(data);
  p.idx_numel = ir::NumElements(idx);
  const std::vector<int64_t> ds = RowMajorStrides(data), is = RowMajorStrides(idx);
  for (int64_t d = 0; d < rank; ++d) {
    p.data_dims[d] = data[d];
    p.data_strides[d] = ds[d];
    p.idx_dims[d] = idx[d];
    p.idx_strides[d] = is[d];
  }
  return p;
}

absl::StatusOr<CompiledOp> CompileGatherElements(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const bool idx64, IndexIs64(ctx, 1));
  OTTR_ASSIGN_OR_RETURN(const k::ElementsParams p, MakeElementsParams(ctx, ctx.input_dims(0), ctx.input_dims(1)));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, ctx.input_dims(1)));
  const int es = ElemSize(ctx.input_type(0).dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("GatherElements", k::GatherElements(p, a.inputs[0], a.inputs[1], idx64, a.outputs[0], es, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileGatherElementsGrad(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const bool idx64, IndexIs64(ctx, 1));
  const std::vector<int64_t> x = ctx.node().GetInts("shape");
  if (ctx.input_dims(0) != ctx.input_dims(1)) {
    return ctx.Error(absl::StrCat("dY ", DimsString(ctx.input_dims(0)), " must have the shape of indices ",
                                  DimsString(ctx.input_dims(1))));
  }
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (!k::GatherElementsGradSupported(static_cast<int>(dtype))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  OTTR_ASSIGN_OR_RETURN(const k::ElementsParams p, MakeElementsParams(ctx, x, ctx.input_dims(1)));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  const int dt = static_cast<int>(dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("GatherElementsGrad", k::GatherElementsGrad(p, dt, a.inputs[0], a.inputs[1], idx64, a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileScatterElements(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const bool idx64, IndexIs64(ctx, 1));
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (ctx.input_dims(2) != ctx.input_dims(1) || ctx.input_type(2).dtype != dtype) {
    return ctx.Error(absl::StrCat("updates ", ctx.input_type(2).ToString(), " must have the shape of indices ",
                                  DimsString(ctx.input_dims(1)), " and the element type of data ",
                                  ir::DTypeName(dtype)));
  }
  if (!k::ScatterElementsSupported(static_cast<int>(dtype))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  const std::string red = ctx.node().GetString("reduction", "none");
  int r;
  if (red == "none") {
    r = 0;
  } else if (red == "add") {
    r = 1;
  } else if (red == "mul") {
    r = 2;
  } else if (red == "max") {
    r = 3;
  } else if (red == "min") {
    r = 4;
  } else {
    return ctx.Error(absl::StrCat("unknown reduction '", red, "'"));
  }
  OTTR_ASSIGN_OR_RETURN(const k::ElementsParams p, MakeElementsParams(ctx, ctx.input_dims(0), ctx.input_dims(1)));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, ctx.input_dims(0)));
  const int dt = static_cast<int>(dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("ScatterElements", k::ScatterElements(p, dt, r, a.inputs[0], a.inputs[1], idx64, a.inputs[2],
                                                              a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---- Pad, PadGrad --------------------------------------------------------------------------

absl::StatusOr<k::PadMode> ParsePadMode(const OpCompileContext& ctx) {
  const std::string mode = ctx.node().GetString("mode", "constant");
  if (mode == "constant") return k::PadMode::kConstant;
  if (mode == "reflect") return k::PadMode::kReflect;
  if (mode == "edge") return k::PadMode::kEdge;
  if (mode == "wrap") return k::PadMode::kWrap;
  return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
}

// Per axis of data dims x: the begin pad (>= 0), the kept length and the crop (negative begin),
// and the output dims.
struct PadGeometry {
  std::vector<int64_t> out, pad_begin, len, crop;
};
absl::StatusOr<PadGeometry> MakePadGeometry(const OpCompileContext& ctx, const std::vector<int64_t>& x,
                                            k::PadMode mode, int pads_input, int axes_input) {
  std::vector<int64_t> pads;
  if (ctx.has_input(pads_input)) {
    OTTR_ASSIGN_OR_RETURN(pads, ConstInts(ctx, pads_input, "pads"));
  } else {
    pads = ctx.node().has_attr("pads") ? ctx.node().GetInts("pads") : ctx.node().GetInts("paddings");
  }
  std::optional<std::vector<int64_t>> axes;
  if (axes_input >= 0 && ctx.has_input(axes_input)) {
    OTTR_ASSIGN_OR_RETURN(axes, ConstInts(ctx, axes_input, "axes"));
  }
  const int64_t rank = static_cast<int64_t>(x.size());
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> amounts = ir::PadAmounts(rank, pads, axes);
  if (!amounts.ok()) return ctx.Error(amounts.status().message());
  PadGeometry g;
  for (int64_t a = 0; a < rank; ++a) {
    const auto [b, e] = (*amounts)[a];
    const int64_t crop_b = std::max<int64_t>(0, -b), crop_e = std::max<int64_t>(0, -e);
    const int64_t n = x[a] - crop_b - crop_e;
    if (n < 0) {
      return ctx.Error(absl::StrCat("pads on axis ", a, " (", b, ", ", e, ") remove more than its ", x[a], " elements"));
    }
    const int64_t pb = std::max<int64_t>(0, b), pe = std::max<int64_t>(0, e);
    if (n == 0 && (pb > 0 || pe > 0) && mode != k::PadMode::kConstant) {
      return ctx.Error(absl::StrCat("mode '", ctx.node().GetString("mode", "constant"), "' cannot pad the empty axis ", a));
    }
    g.out.push_back(n + pb + pe);
    g.pad_begin.push_back(pb);
    g.len.push_back(n);
    g.crop.push_back(crop_b);
  }
  return g;
}

absl::StatusOr<CompiledOp> CompilePad(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  const ir::DType dtype = ctx.input_type(0).dtype;
  const int es = ElemSize(dtype);
  OTTR_ASSIGN_OR_RETURN(const k::PadMode mode, ParsePadMode(ctx));
  OTTR_ASSIGN_OR_RETURN(const PadGeometry g, MakePadGeometry(ctx, x, mode, 1, 3));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, g.out));
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) {
    CopyPlan plan;
    plan.numel = 1;
    plan.memcpy = true;
    plan.memcpy_bytes = es;
    return CopyOp(std::move(plan), "Pad");
  }
  if (rank > k::kTensorMaxDims) return ctx.Unsupported("rank above 10");
  // The pad value: constant bytes (converted when its type differs, as the CPU does), or read on
  // the device when it is a run-time value of the data's type.
  k::PadParams p;
  p.mode = mode;
  p.value_bytes = es;
  bool value_on_device = false;
  if (mode == k::PadMode::kConstant && ctx.has_input(2) && ir::NumElements(ctx.input_dims(2)) > 0) {
    const ir::Tensor* v = ctx.constant_input(2);
    if (v != nullptr) {
      ir::Tensor value(dtype, {});
      if (v->dtype() == dtype) {
        std::memcpy(value.raw_data(), v->raw_data(), es);
      } else {
        const double d = v->GetAsDouble(0);
        ir::VisitDType(dtype, [&]<typename T>() {
          if constexpr (!std::is_void_v<T>) value.data<T>()[0] = runtime::cpu::SaturatingFromDouble<T>(d);
        });
      }
      std::memcpy(p.value, value.raw_data(), es);
    } else if (ctx.input_type(2).dtype == dtype) {
      value_on_device = true;
    } else {
      return ctx.Unsupported(absl::StrCat("a run-time pad value of type ", ir::DTypeName(ctx.input_type(2).dtype),
                                          " for data of type ", ir::DTypeName(dtype)));
    }
  } else if (mode == k::PadMode::kConstant && !ctx.has_input(2) && ctx.node().has_attr("value")) {
    const double d = ctx.node().GetFloat("value", 0.0f);
    ir::Tensor value(dtype, {});
    ir::VisitDType(dtype, [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) value.data<T>()[0] = runtime::cpu::SaturatingFromDouble<T>(d);
    });
    std::memcpy(p.value, value.raw_data(), es);
  }
  // Trailing axes that are not padded move with their inner axes as one element, widened.
  int64_t t = rank;
  while (t > 0 && g.pad_begin[t - 1] == 0 && g.out[t - 1] == x[t - 1] && g.crop[t - 1] == 0) --t;
  const std::vector<int64_t> xs = RowMajorStrides(x);
  auto fill = [&](k::PadParams& q, int eb) {
    const int64_t block_bytes = Product(x, t, x.size()) * es;
    q.elem_bytes = eb;
    q.rank = 0;
    for (int64_t a = 0; a < t; ++a) {
      q.out_dims[q.rank] = g.out[a];
      q.in_strides[q.rank] = xs[a] * es / eb;
      q.pad_begin[q.rank] = g.pad_begin[a];
      q.len[q.rank] = g.len[a];
      q.crop[q.rank] = g.crop[a];
      ++q.rank;
    }
    if (t < rank) {
      const int64_t n = block_bytes / eb;
      q.out_dims[q.rank] = n;
      q.in_strides[q.rank] = 1;
      q.pad_begin[q.rank] = 0;
      q.len[q.rank] = n;
      q.crop[q.rank] = 0;
      ++q.rank;
    }
    q.numel = ir::NumElements(g.out) * es / eb;
    q.index32 = ir::NumElements(g.out) < (int64_t{1} << 30) && ir::NumElements(x) < (int64_t{1} << 30);
  };
  k::PadParams base = p, wide = p;
  fill(base, es);
  const int w = t < rank ? std::max(WidestWord({Product(x, t, x.size()) * es}), es) : es;
  fill(wide, w);
  CompiledOp op;
  op.launch = [base, wide, value_on_device](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    const bool use_wide = wide.elem_bytes > base.elem_bytes && Aligned(a.inputs[0], wide.elem_bytes) &&
                          Aligned(a.outputs[0], wide.elem_bytes);
    OTTR_TENSOR_LAUNCH_("Pad", k::Pad(use_wide ? wide : base, a.inputs[0], value_on_device ? a.inputs[2] : nullptr,
                                      a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// The source index along one axis for output position j - pad_begin (the host twin of the
// device's PadSource; -1 = the constant value).
int64_t PadSourceHost(int64_t j, int64_t n, int64_t crop, k::PadMode mode) {
  if (j >= 0 && j < n) return crop + j;
  switch (mode) {
    case k::PadMode::kConstant: return -1;
    case k::PadMode::kEdge: return crop + std::clamp<int64_t>(j, 0, n - 1);
    case k::PadMode::kWrap: return crop + ((j % n) + n) % n;
    case k::PadMode::kReflect: {
      if (n == 1) return crop;
      const int64_t period = 2 * (n - 1);
      int64_t m = ((j % period) + period) % period;
      if (m >= n) m = period - m;
      return crop + m;
    }
  }
  return -1;
}

absl::StatusOr<CompiledOp> CompilePadGrad(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.node().GetInts("shape");
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (!k::PadGradSupported(static_cast<int>(dtype))) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  OTTR_ASSIGN_OR_RETURN(const k::PadMode mode, ParsePadMode(ctx));
  OTTR_ASSIGN_OR_RETURN(const PadGeometry g, MakePadGeometry(ctx, x, mode, 1, 2));
  if (ctx.input_dims(0) != g.out) {
    return ctx.Error(absl::StrCat("dY ", DimsString(ctx.input_dims(0)), " does not match Pad's output ",
                                  DimsString(g.out), " for input ", DimsString(x)));
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank > k::kTensorMaxDims) return ctx.Unsupported("rank above 10");
  // Per axis, CSR lists: for each input index the output positions copying it (ascending).
  std::vector<int64_t> host;
  std::vector<size_t> offsets_at(rank), lists_at(rank);
  for (int64_t a = 0; a < rank; ++a) {
    std::vector<std::vector<int64_t>> lists(x[a]);
    for (int64_t o = 0; o < g.out[a]; ++o) {
      const int64_t s = PadSourceHost(o - g.pad_begin[a], g.len[a], g.crop[a], mode);
      if (s >= 0) lists[s].push_back(o);
    }
    offsets_at[a] = host.size();
    int64_t total = 0;
    host.push_back(0);
    for (const auto& l : lists) host.push_back(total += static_cast<int64_t>(l.size()));
    lists_at[a] = host.size();
    for (const auto& l : lists) host.insert(host.end(), l.begin(), l.end());
  }
  std::shared_ptr<void> buffer;
  if (!host.empty()) {
    void* d = nullptr;
    OTTR_CUDA_RETURN_IF_ERROR(cudaMalloc(&d, host.size() * sizeof(int64_t)));
    buffer = std::shared_ptr<void>(d, [](void* ptr) { cudaFree(ptr); });
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(d, host.data(), host.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  }
  k::PadGradParams p;
  p.rank = static_cast<int>(rank);
  p.numel = ir::NumElements(x);
  const std::vector<int64_t> ds = RowMajorStrides(g.out);
  for (int64_t a = 0; a < rank; ++a) {
    p.x_dims[a] = x[a];
    p.dy_strides[a] = ds[a];
    p.offsets[a] = static_cast<const int64_t*>(buffer.get()) + offsets_at[a];
    p.lists[a] = static_cast<const int64_t*>(buffer.get()) + lists_at[a];
  }
  const int dt = static_cast<int>(dtype);
  CompiledOp op;
  op.launch = [p, dt, buffer](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("PadGrad", k::PadGrad(p, dt, a.inputs[0], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---- generators ------------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileConstantOfShape(OpCompileContext& ctx) {
  ir::Tensor value = ir::Tensor::Scalar<float>(0.0f);
  if (const ir::Attribute* a = ctx.node().attr("value")) {
    if (a->kind() != ir::Attribute::Kind::kTensor || a->t().num_elements() != 1) {
      return ctx.Error("'value' must be a tensor with one element");
    }
    value = a->t();
  }
  if (ctx.output_type(0).dtype != value.dtype()) {
    return ctx.Error(absl::StrCat("output ", ctx.output_type(0).ToString(), " must have the value's type ",
                                  ir::DTypeName(value.dtype())));
  }
  if (const ir::Tensor* shape = ctx.constant_input(0)) {
    OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, shape->ToInt64Vector()));
  }
  const int es = ElemSize(value.dtype());
  uint64_t bits = 0;
  std::memcpy(&bits, value.raw_data(), es);
  const int64_t numel = ir::NumElements(ctx.output_dims(0));
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("ConstantOfShape", k::Fill(a.outputs[0], numel, es, bits, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileRange(OpCompileContext& ctx) {
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (!k::RangeSupported(static_cast<int>(dtype)) || ctx.input_type(2).dtype != dtype) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  const std::vector<int64_t> out = ctx.output_dims(0);
  if (out.size() != 1) return ctx.Error(absl::StrCat("output must be 1-D, is typed ", ctx.output_type(0).ToString()));
  if (ctx.constant_input(0) && ctx.constant_input(1) && ctx.constant_input(2)) {
    absl::StatusOr<int64_t> n = ir::RangeCountOf(*ctx.constant_input(0), *ctx.constant_input(1), *ctx.constant_input(2));
    if (!n.ok()) return ctx.Error(n.status().message());
    OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, {*n}));
  }
  const int dt = static_cast<int>(dtype);
  const int64_t n = out[0];
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("Range", k::Range(dt, a.inputs[0], a.inputs[2], a.outputs[0], n, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileOneHot(OpCompileContext& ctx) {
  const std::vector<int64_t> idx = ctx.input_dims(0), out = ctx.output_dims(0);
  const int64_t r = static_cast<int64_t>(idx.size());
  int64_t axis = ctx.node().GetInt("axis", -1);
  if (axis < -r - 1 || axis > r) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for indices ", DimsString(idx)));
  }
  if (axis < 0) axis += r + 1;
  if (ir::NumElements(ctx.input_dims(2)) != 2) {
    return ctx.Error(absl::StrCat("values must hold [off, on], got ", DimsString(ctx.input_dims(2))));
  }
  const int idx_dtype = static_cast<int>(ctx.input_type(0).dtype);
  if (!k::OneHotIndexSupported(idx_dtype)) {
    return ctx.Unsupported(absl::StrCat("indices of type ", ir::DTypeName(ctx.input_type(0).dtype)));
  }
  if (static_cast<int64_t>(out.size()) != r + 1) return ctx.Error(absl::StrCat("output ", DimsString(out), " must have rank ", r + 1));
  const int64_t depth = out[axis];
  std::vector<int64_t> expect = idx;
  expect.insert(expect.begin() + axis, depth);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, expect));
  if (const ir::Tensor* d = ctx.constant_input(1)) {
    if (d->num_elements() != 1 || static_cast<int64_t>(d->GetAsDouble(0)) != depth) {
      return ctx.Error(absl::StrCat("depth does not match the output's ", depth));
    }
  }
  const int64_t outer = Product(idx, 0, axis), inner = Product(idx, axis, idx.size());
  const int vb = ElemSize(ctx.input_type(2).dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("OneHot", k::OneHot(idx_dtype, a.inputs[0], a.inputs[2], vb, a.outputs[0], outer, depth, inner, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileCumSum(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (!k::CumSumSupported(static_cast<int>(dtype))) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  if (x.empty()) return ctx.Error("input must have rank >= 1");
  OTTR_ASSIGN_OR_RETURN(const std::vector<int64_t> axis_v, ConstInts(ctx, 1, "axis"));
  if (axis_v.size() != 1) return ctx.Error("axis must be a scalar");
  absl::StatusOr<int64_t> axis = ir::WrapAxis(axis_v[0], static_cast<int64_t>(x.size()));
  if (!axis.ok()) return ctx.Error(axis.status().message());
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  const bool exclusive = ctx.node().GetInt("exclusive", 0) != 0;
  const bool reverse = ctx.node().GetInt("reverse", 0) != 0;
  const int64_t outer = Product(x, 0, *axis), len = x[*axis], inner = Product(x, *axis + 1, x.size());
  const int dt = static_cast<int>(dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    OTTR_TENSOR_LAUNCH_("CumSum", k::CumSum(dt, a.inputs[0], a.outputs[0], outer, len, inner, exclusive, reverse, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileTrilu(OpCompileContext& ctx) {
  const std::vector<int64_t> x = ctx.input_dims(0);
  if (x.size() < 2) return ctx.Error(absl::StrCat("input ", DimsString(x), " must have rank >= 2"));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  int64_t k_value = 0;
  bool k_on_device = false;
  if (ctx.has_input(1)) {
    if (ir::NumElements(ctx.input_dims(1)) != 1) return ctx.Error("k must be a scalar");
    if (const ir::Tensor* t = ctx.constant_input(1)) {
      k_value = t->GetAsInt64(0);
    } else if (ctx.input_type(1).dtype == ir::DType::kInt64) {
      k_on_device = true;
    } else {
      return ctx.Error(absl::StrCat("k must be int64, got ", ir::DTypeName(ctx.input_type(1).dtype)));
    }
  }
  const bool upper = ctx.node().GetInt("upper", 1) != 0;
  const int64_t rows = x[x.size() - 2], cols = x.back(), mats = Product(x, 0, x.size() - 2);
  const int es = ElemSize(ctx.input_type(0).dtype);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    const int64_t* kp = k_on_device ? static_cast<const int64_t*>(a.inputs[1]) : nullptr;
    OTTR_TENSOR_LAUNCH_("Trilu", k::Trilu(a.inputs[0], a.outputs[0], es, mats, rows, cols, upper, k_value, kp, a.stream));
    return absl::OkStatus();
  };
  return op;
}

#undef OTTR_TENSOR_LAUNCH_

}  // namespace

void RegisterTensorCudaOps(CudaOpRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) r.Register("", op, CompileView);
  r.Register("", "Shape", CompileShape);
  r.Register("", "Size", CompileSize);
  r.Register("", "Transpose", CompileTranspose);
  r.Register("", "Expand", CompileExpand);
  r.Register("", "Tile", CompileTile);
  r.Register("", "Slice", CompileSlice);
  r.Register("", "Concat", CompileConcat);
  r.Register("", "Split", CompileSplit);
  r.Register("", "Pad", CompilePad);
  r.Register("", "Gather", CompileGather);
  r.Register("", "GatherElements", CompileGatherElements);
  r.Register("", "ScatterElements", CompileScatterElements);
  r.Register("", "ConstantOfShape", CompileConstantOfShape);
  r.Register("", "Range", CompileRange);
  r.Register("", "OneHot", CompileOneHot);
  r.Register("", "CumSum", CompileCumSum);
  r.Register("", "Trilu", CompileTrilu);
  r.Register("ottr", "SliceGrad", CompileSliceGrad);
  r.Register("ottr", "PadGrad", CompilePadGrad);
  r.Register("ottr", "GatherGrad", CompileGatherGrad);
  r.Register("ottr", "GatherElementsGrad", CompileGatherElementsGrad);
}

}  // namespace ottr::cuda
