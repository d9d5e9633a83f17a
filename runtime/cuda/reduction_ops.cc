// CUDA reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin and ottr::ReduceProdGrad.
//
// Compiling a reduction plans it for its static shape (kernels/reduction_kernels.h): size-1 dims
// dropped, runs of reduced / kept dims merged, then a row kernel (innermost dim reduced: softmax-
// style sums, conv bias gradients [N,C,H,W] -> [C] as N segments of H*W per channel) or a column
// kernel (innermost dim kept: bias gradients [N,C] -> [C], coalesced along C), split over several
// blocks per output with a second combining pass when the outputs alone cannot fill the GPU. The
// plan fixes every combination order: results are deterministic (no atomics).
//
// The reduced axes come from the constant `axes` input (an initializer or a Constant node). When
// that input is not a compile-time constant, keepdims = 1 still determines them from the static
// output shape (an axis is reduced where the output has 1 and the input does not; axes of size 1
// do not change the result either way); otherwise compiling fails with InvalidArgument.
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/tensor_shape_math.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/reduction_kernels.h"

namespace ottr::cuda {
namespace {

using kernels::ReduceKind;
using kernels::ReducePlan;
using kernels::ReduceStrategy;

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

int NumSms(OpCompileContext& ctx) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, ctx.libs().device()) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 132;  // H200
  }
  return n;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The merged dims of x: size-1 dims dropped, neighbours with the same flag multiplied together,
// with row-major strides.
struct Group {
  int64_t size;
  bool reduced;
  int64_t stride = 0;
};
std::vector<Group> MergeDims(const std::vector<int64_t>& dims, const std::vector<bool>& reduced) {
  std::vector<Group> g;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 1) continue;
    if (!g.empty() && g.back().reduced == reduced[a]) {
      g.back().size *= dims[a];
    } else {
      g.push_back({dims[a], reduced[a]});
    }
  }
  int64_t s = 1;
  for (auto it = g.rbegin(); it != g.rend(); ++it) {
    it->stride = s;
    s *= it->size;
  }
  return g;
}

// Appends groups to the plan's kept or reduced dims; false when more than kReduceMaxDims.
bool AddDims(const std::vector<Group>& groups, bool kept, ReducePlan& p) {
  int& n = kept ? p.num_kept : p.num_red;
  int64_t* dims = kept ? p.kept_dims : p.red_dims;
  int64_t* strides = kept ? p.kept_strides : p.red_strides;
  for (const Group& g : groups) {
    if (n >= kernels::kReduceMaxDims) return false;
    dims[n] = g.size;
    strides[n] = g.stride;
    ++n;
  }
  return true;
}

// Plans the reduction of x (dims, element type) over the flagged axes.
absl::StatusOr<ReducePlan> PlanReduction(OpCompileContext& ctx, int dtype, ReduceKind kind,
                                         const std::vector<int64_t>& dims,
                                         const std::vector<bool>& reduced) {
  ReducePlan p;
  p.dtype = dtype;
  p.kind = kind;
  p.num_out = 1;
  p.count = 1;
  for (size_t a = 0; a < dims.size(); ++a) (reduced[a] ? p.count : p.num_out) *= dims[a];
  if (p.num_out == 0) {
    p.strategy = ReduceStrategy::kNone;
    return p;
  }
  if (p.count == 0) {
    p.strategy = ReduceStrategy::kFill;
    return p;
  }
  if (p.count == 1) {
    p.strategy = ReduceStrategy::kMap;
    return p;
  }
  const std::vector<Group> groups = MergeDims(dims, reduced);
  std::vector<Group> kept, red;
  for (const Group& g : groups) (g.reduced ? red : kept).push_back(g);
  const int num_sms = NumSms(ctx);
  const int64_t target = 4 * static_cast<int64_t>(num_sms);
  const int64_t m = p.num_out, n = p.count;
  bool ok;
  if (groups.back().reduced) {
    p.strategy = ReduceStrategy::kRow;
    p.inner = red.back().size;
    red.pop_back();
    ok = AddDims(kept, true, p) && AddDims(red, false, p);
    p.vec = (dtype == 1 && p.inner % 4 == 0) ? 4 : 1;
    if (n <= 1024 || m >= 32 * static_cast<int64_t>(num_sms)) {
      p.block_unit = false;  // a warp per output
      p.splits = 1;
      p.chunk = n;
    } else {
      p.block_unit = true;
      p.splits = m < target ? std::max<int64_t>(1, std::min(CeilDiv(target, m), CeilDiv(n, 4096))) : 1;
      p.chunk = CeilDiv(CeilDiv(n, p.splits), 4) * 4;  // a multiple of the vector width
      p.splits = CeilDiv(n, p.chunk);
    }
  } else {
    p.strategy = ReduceStrategy::kColumn;
    p.inner = kept.back().size;
    kept.pop_back();
    ok = AddDims(kept, true, p) && AddDims(red, false, p);
    // float4 loads only when they keep all 32 columns of a block's threads busy (a bias gradient
    // of 64 channels would leave half of them idle).
    p.vec = (dtype == 1 && p.inner % 4 == 0 && p.inner >= 4 * kernels::kReduceColumnX) ? 4 : 1;
    const int64_t col_blocks = (m / p.inner) * CeilDiv(p.inner, kernels::kReduceColumnX * p.vec);
    p.splits = 1;
    // Split long columns even when the tensor is small: a bias gradient [8192, 10] in one block
    // walked 1024 dependent rows per thread (45 µs on the H200 in bf16).
    if ((m * n >= (int64_t{1} << 18) || n >= 1024) && col_blocks < target) {
      p.splits = std::max<int64_t>(1, std::min({CeilDiv(target, col_blocks), CeilDiv(n, 64), int64_t{65535}}));
    }
    p.chunk = CeilDiv(n, p.splits);
    p.splits = CeilDiv(n, p.chunk);
  }
  if (!ok) {
    return ctx.Unsupported(absl::StrCat("input ", DimsString(dims), " alternates reduced and kept axes more than ",
                                        kernels::kReduceMaxDims, " times"));
  }
  if (p.splits > 1) p.workspace_bytes = m * p.splits * kernels::kReducePartialBytes;
  return p;
}

absl::StatusOr<CompiledOp> CompileReduce(OpCompileContext& ctx, ReduceKind kind, std::string name) {
  const ir::Node& node = ctx.node();
  const ir::DType dtype = ctx.input_type(0).dtype;
  const std::vector<int64_t> x_dims = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  const bool noop = node.GetInt("noop_with_empty_axes", 0) != 0;
  const std::vector<int64_t> out_dims = ctx.output_dims(0);
  if (!kernels::ReduceSupported(static_cast<int>(dtype), kind)) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  // The reduced axes.
  std::vector<bool> reduced(rank, false);
  std::vector<int64_t> axes;
  bool axes_known = true;
  if (ctx.has_input(1)) {
    if (const ir::Tensor* t = ctx.constant_input(1)) {
      axes = t->ToInt64Vector();
    } else if (ir::NumElements(ctx.input_dims(1)) == 0) {
      axes.clear();
    } else {
      axes_known = false;
    }
  } else {
    axes = node.GetInts("axes");  // an older-opset attribute, if canonicalization left one
  }
  if (!axes_known) {
    if (!keepdims || static_cast<int64_t>(out_dims.size()) != rank) {
      return ctx.Error("the axes input must be a compile-time constant (initializer or Constant) when keepdims = 0");
    }
    for (int64_t a = 0; a < rank; ++a) reduced[a] = out_dims[a] != x_dims[a];
  } else if (axes.empty()) {
    if (!noop) reduced.assign(rank, true);
  } else {
    absl::StatusOr<std::vector<int64_t>> w = ir::WrapAxes(axes, rank);
    if (!w.ok()) return ctx.Error(w.status().message());
    for (int64_t a : *w) reduced[a] = true;
  }
  std::vector<int64_t> expect;
  for (int64_t a = 0; a < rank; ++a) {
    if (!reduced[a]) {
      expect.push_back(x_dims[a]);
    } else if (keepdims) {
      expect.push_back(1);
    }
  }
  if (expect != out_dims) {
    return ctx.Error(absl::StrCat("reducing ", DimsString(x_dims), " gives ", DimsString(expect),
                                  " but the output is typed ", DimsString(out_dims)));
  }
  OTTR_ASSIGN_OR_RETURN(ReducePlan plan, PlanReduction(ctx, static_cast<int>(dtype), kind, x_dims, reduced));
  CompiledOp op;
  op.workspace_bytes = plan.workspace_bytes;
  op.launch = [plan, name = std::move(name)](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    nvtxRangePushA(name.c_str());
    const cudaError_t e = kernels::LaunchReduce(plan, a.inputs[0], a.outputs[0], a.workspace, a.stream);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileArgReduce(OpCompileContext& ctx, bool is_max) {
  const ir::Node& node = ctx.node();
  const ir::DType dtype = ctx.input_type(0).dtype;
  const std::vector<int64_t> x_dims = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  if (rank == 0) return ctx.Error("input must have rank >= 1");
  if (!kernels::ArgReduceSupported(static_cast<int>(dtype))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  absl::StatusOr<int64_t> axis = ir::WrapAxis(node.GetInt("axis", 0), rank);
  if (!axis.ok()) return ctx.Error(axis.status().message());
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  const bool last = node.GetInt("select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < *axis; ++a) outer *= x_dims[a];
  for (int64_t a = *axis + 1; a < rank; ++a) inner *= x_dims[a];
  const int64_t len = x_dims[*axis];
  if (len == 0 && outer * inner > 0) {
    return ctx.Error(absl::StrCat("cannot take the arg", is_max ? "max" : "min", " of the empty axis ", *axis));
  }
  std::vector<int64_t> expect = x_dims;
  if (keepdims) {
    expect[*axis] = 1;
  } else {
    expect.erase(expect.begin() + *axis);
  }
  if (expect != ctx.output_dims(0) || ctx.output_type(0).dtype != ir::DType::kInt64) {
    return ctx.Error(absl::StrCat("output must be int64", DimsString(expect), ", is typed ",
                                  ctx.output_type(0).ToString()));
  }
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    nvtxRangePushA(is_max ? "ArgMax" : "ArgMin");
    const cudaError_t e = kernels::LaunchArgReduce(static_cast<int>(dtype), is_max, last, a.inputs[0],
                                                   static_cast<int64_t*>(a.outputs[0]), outer, len, inner,
                                                   a.stream);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return op;
}

// ottr::ReduceProdGrad(X, dYk) -> dX: the groups are the positions of X sharing one dYk element.
absl::StatusOr<CompiledOp> CompileReduceProdGrad(OpCompileContext& ctx) {
  const ir::DType dtype = ctx.input_type(0).dtype;
  const std::vector<int64_t> x_dims = ctx.input_dims(0), dy_dims = ctx.input_dims(1);
  bool ok = x_dims.size() == dy_dims.size() && ctx.input_type(1).dtype == dtype;
  for (size_t a = 0; ok && a < x_dims.size(); ++a) ok = dy_dims[a] == 1 || dy_dims[a] == x_dims[a];
  if (!ok) {
    return ctx.Error(absl::StrCat("dY ", ctx.input_type(1).ToString(), " must have the type and rank of X ",
                                  ctx.input_type(0).ToString(), " with each dim equal or 1"));
  }
  if (!kernels::ReduceProdGradSupported(static_cast<int>(dtype))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dtype)));
  }
  std::vector<bool> reduced(x_dims.size());
  for (size_t a = 0; a < x_dims.size(); ++a) reduced[a] = dy_dims[a] == 1 && x_dims[a] != 1;
  ReducePlan p;
  p.dtype = static_cast<int>(dtype);
  p.num_out = ir::NumElements(dy_dims);
  p.count = 1;
  for (size_t a = 0; a < x_dims.size(); ++a) {
    if (reduced[a]) p.count *= x_dims[a];
  }
  if (ir::NumElements(x_dims) > 0) {
    std::vector<Group> kept, red;
    for (const Group& g : MergeDims(x_dims, reduced)) (g.reduced ? red : kept).push_back(g);
    if (!AddDims(kept, true, p) || !AddDims(red, false, p)) {
      return ctx.Unsupported(absl::StrCat("X ", DimsString(x_dims), " alternates reduced and kept axes too often"));
    }
  } else {
    p.num_out = 0;
  }
  p.block_unit = p.count > 4096;
  CompiledOp op;
  op.launch = [p](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    nvtxRangePushA("ReduceProdGrad");
    const cudaError_t e = kernels::LaunchReduceProdGrad(p, a.inputs[0], a.inputs[1], a.outputs[0], a.stream);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return op;
}

}  // namespace

void RegisterReductionCudaOps(CudaOpRegistry& r) {
  const std::pair<const char*, ReduceKind> ops[] = {
      {"ReduceSum", ReduceKind::kSum},          {"ReduceMean", ReduceKind::kMean},
      {"ReduceMax", ReduceKind::kMax},          {"ReduceMin", ReduceKind::kMin},
      {"ReduceProd", ReduceKind::kProd},        {"ReduceL1", ReduceKind::kL1},
      {"ReduceL2", ReduceKind::kL2},            {"ReduceLogSum", ReduceKind::kLogSum},
      {"ReduceLogSumExp", ReduceKind::kLogSumExp}, {"ReduceSumSquare", ReduceKind::kSumSquare}};
  for (const auto& [name, kind] : ops) {
    const ReduceKind k = kind;
    const std::string n = name;
    r.Register("", name, [k, n](OpCompileContext& ctx) { return CompileReduce(ctx, k, n); });
  }
  r.Register("", "ArgMax", [](OpCompileContext& ctx) { return CompileArgReduce(ctx, true); });
  r.Register("", "ArgMin", [](OpCompileContext& ctx) { return CompileArgReduce(ctx, false); });
  r.Register("ottr", "ReduceProdGrad", CompileReduceProdGrad);
}

}  // namespace ottr::cuda
