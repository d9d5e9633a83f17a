// CUDA ops of the normalisation family: LayerNormalization, BatchNormalization,
// InstanceNormalization, GroupNormalization, Dropout and the ottr-domain backward ops
// LayerNormalizationGrad, BatchNormalizationGrad, GroupNormalizationGrad, DropoutGrad.
// Kernels: kernels/norm_kernels.cu, kernels/dropout_kernels.cu. Shapes, types and attributes
// are validated here, once per static shape, as the CPU reference does
// (runtime/cpu/normalization_kernels.cc, normalization_grad_kernels.cc).
#include <nvtx3/nvToolsExt.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/dropout_kernels.h"
#include "runtime/cuda/kernels/norm_kernels.h"

namespace ottr::cuda {
namespace {

using ir::DType;
using kernels::BroadcastMap;

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

std::string DimsString(const std::vector<int64_t>& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t k = begin; k < end && k < dims.size(); ++k) p *= dims[k];
  return p;
}

int Code(DType t) { return static_cast<int>(ir::DTypeToOnnx(t)); }

absl::Status RequireFloat(const OpCompileContext& ctx, int i, absl::string_view name) {
  const DType t = ctx.input_type(i).dtype;
  if (ir::IsFloat(t)) return absl::OkStatus();
  return ctx.Unsupported(absl::StrCat("input '", name, "' has element type ", ir::DTypeName(t),
                                      "; expected a floating-point type"));
}

// Requires input i to be 1-D of length n.
absl::Status RequireVector(const OpCompileContext& ctx, int i, absl::string_view name, int64_t n,
                           absl::string_view what) {
  const std::vector<int64_t> d = ctx.input_dims(i);
  if (d.size() == 1 && d[0] == n) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input '", name, "' has shape ", DimsString(d), "; expected [", n, "] (", what, ")"));
}

// True when `src` broadcasts to `dst` (NumPy rules) without changing dst.
bool BroadcastsTo(const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  if (src.size() > dst.size()) return false;
  for (size_t k = 0; k < src.size(); ++k) {
    const int64_t a = src[src.size() - 1 - k], b = dst[dst.size() - 1 - k];
    if (a != 1 && a != b) return false;
  }
  return true;
}

// The map from a flat index over `dst` to the flat index of `src` broadcast to it.
absl::StatusOr<BroadcastMap> MakeMap(const OpCompileContext& ctx, const std::vector<int64_t>& src,
                                     const std::vector<int64_t>& dst) {
  BroadcastMap m;
  if (dst.size() > BroadcastMap::kMaxRank) {
    return ctx.Unsupported(absl::StrCat("broadcasting a parameter over rank ", dst.size(), " (more than ",
                                        BroadcastMap::kMaxRank, ")"));
  }
  m.rank = static_cast<int>(dst.size());
  int64_t s = 1;
  for (size_t k = 0; k < dst.size(); ++k) {
    const size_t dd = dst.size() - 1 - k;
    m.dims[dd] = dst[dd];
    m.strides[dd] = 0;
    if (k < src.size()) {
      const int64_t sd = src[src.size() - 1 - k];
      m.strides[dd] = sd == 1 ? 0 : s;
      s *= sd;
    }
  }
  return m;
}

// True when `m` (over X's dims) maps the flat index r · cols + k to k: zero strides over the
// leading dims [0, axis), X's contiguous strides over the normalised ones (size-1 dims aside).
bool MapsByColumn(const BroadcastMap& m, int64_t axis) {
  int64_t contiguous = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    if (m.dims[d] != 1) {
      const int64_t want = d >= axis ? contiguous : 0;
      if (m.strides[d] != want) return false;
    }
    if (d >= axis) contiguous *= m.dims[d];
  }
  return true;
}

// Copies `bytes` from input `in` to output `out` unless they share a buffer (a view).
absl::Status CopyUnlessAliased(const LaunchArgs& a, int out, int in, int64_t bytes) {
  if (a.outputs[out] == nullptr || a.outputs[out] == a.inputs[in] || bytes == 0) return absl::OkStatus();
  OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.outputs[out], a.inputs[in], bytes, cudaMemcpyDeviceToDevice, a.stream));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization.

absl::StatusOr<CompiledOp> CompileLayerNorm(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "X"));
  const DType t = ctx.input_type(0).dtype;
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input_type(i).dtype != t) {
      return ctx.Unsupported(absl::StrCat("input '", i == 1 ? "Scale" : "B", "' has element type ",
                                          ir::DTypeName(ctx.input_type(i).dtype), " but X has ", ir::DTypeName(t)));
    }
  }
  const std::vector<int64_t> x = ctx.input_dims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.node().GetInt("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for X of shape ", DimsString(x)));
  }
  if (axis < 0) axis += rank;
  const int64_t stash_code = ctx.node().GetInt("stash_type", 1);
  auto stash = ir::DTypeFromOnnx(static_cast<int32_t>(stash_code));
  if (!stash.ok() || !ir::IsFloat(*stash)) {
    return ctx.Error(absl::StrCat("stash_type ", stash_code, " is not a floating-point type"));
  }
  kernels::LayerNormArgs args;
  args.dtype = Code(t);
  args.stats_dtype = Code(*stash);
  args.rows = Product(x, 0, axis);
  args.cols = Product(x, axis, x.size());
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  bool by_column = true;
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    const std::vector<int64_t> p = ctx.input_dims(i);
    if (!BroadcastsTo(p, x)) {
      return ctx.Error(absl::StrCat("input '", i == 1 ? "Scale" : "B", "' of shape ", DimsString(p),
                                    " cannot be broadcast to X of shape ", DimsString(x)));
    }
    if (x.size() <= BroadcastMap::kMaxRank) {
      OTTR_ASSIGN_OR_RETURN(BroadcastMap m, MakeMap(ctx, p, x));
      (i == 1 ? args.scale_map : args.bias_map) = m;
      by_column &= MapsByColumn(m, axis);
    } else {
      // Beyond the map's rank only parameters shaped exactly like the normalised dims run.
      std::vector<int64_t> q = p;
      while (!q.empty() && q.front() == 1 && q.size() > x.size() - axis) q.erase(q.begin());
      if (q != std::vector<int64_t>(x.begin() + axis, x.end())) {
        return ctx.Unsupported(absl::StrCat("broadcasting a parameter over rank ", x.size()));
      }
    }
  }
  args.params_by_column = by_column;
  const bool has_bias = ctx.has_input(2);
  CompiledOp op;
  op.launch = [args, has_bias](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr && (a.outputs.size() < 2 || a.outputs[1] == nullptr) &&
        (a.outputs.size() < 3 || a.outputs[2] == nullptr)) {
      return absl::OkStatus();
    }
    NvtxRange range("LayerNormalization");
    void* mean = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    void* inv = a.outputs.size() > 2 ? a.outputs[2] : nullptr;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchLayerNorm(args, a.inputs[0], a.inputs[1], has_bias ? a.inputs[2] : nullptr,
                                                       a.outputs[0], mean, inv, a.stream));
    return absl::OkStatus();
  };
  // Y is always written (the kernel has no null-output path): give it a scratch buffer.
  if (!ctx.output_needed(0)) {
    const int64_t bytes = ir::NumElements(x) * static_cast<int64_t>(ir::DTypeSize(t));
    op.workspace_bytes = bytes;
    auto inner = op.launch;
    op.launch = [inner](const LaunchArgs& a) -> absl::Status {
      std::vector<void*> outs = a.outputs;
      outs[0] = a.workspace;
      return inner(LaunchArgs{a.inputs, outs, a.workspace, a.stream, a.counters, a.state, a.programmatic, a.ready_inputs});
    };
  }
  return op;
}

absl::StatusOr<CompiledOp> CompileLayerNormGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 1, "X"));
  const DType t = ctx.input_type(1).dtype;
  const std::vector<int64_t> x = ctx.input_dims(1);
  if (ctx.input_type(0).dtype != t || ctx.input_dims(0) != x) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(ctx.input_type(0).dtype), DimsString(ctx.input_dims(0)),
                                  " does not match X ", ir::DTypeName(t), DimsString(x)));
  }
  if (ctx.input_type(2).dtype != t) {
    return ctx.Error(absl::StrCat("scale has element type ", ir::DTypeName(ctx.input_type(2).dtype), " but X has ",
                                  ir::DTypeName(t)));
  }
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.node().GetInt("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for X of shape ", DimsString(x)));
  }
  if (axis < 0) axis += rank;
  const std::vector<int64_t> tail(x.begin() + axis, x.end());
  const std::vector<int64_t> sd_full = ctx.input_dims(2);
  std::vector<int64_t> sdims = sd_full;
  while (sdims.size() > tail.size()) {
    if (sdims.front() != 1) {
      return ctx.Error(absl::StrCat("scale of shape ", DimsString(sd_full), " varies over the leading dims of X ",
                                    DimsString(x), " (axis ", axis, ")"));
    }
    sdims.erase(sdims.begin());
  }
  if (!BroadcastsTo(sdims, tail)) {
    return ctx.Error(absl::StrCat("scale of shape ", DimsString(sd_full), " does not broadcast to X's normalised dims ",
                                  DimsString(tail)));
  }
  kernels::LayerNormGradArgs args;
  args.dtype = Code(t);
  args.rows = Product(x, 0, axis);
  args.cols = Product(x, axis, x.size());
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  args.scale_by_column = ir::NumElements(sdims) == args.cols;
  if (!args.scale_by_column) {
    OTTR_ASSIGN_OR_RETURN(args.scale_map, MakeMap(ctx, sdims, tail));
  }
  const bool have_stats = ctx.has_input(3) && ctx.has_input(4);
  if (have_stats) {
    for (int i : {3, 4}) {
      if (!ir::IsFloat(ctx.input_type(i).dtype) || ir::NumElements(ctx.input_dims(i)) != args.rows) {
        return ctx.Error(absl::StrCat("input ", i == 3 ? "mean" : "inv_std", " ", ir::DTypeName(ctx.input_type(i).dtype),
                                      DimsString(ctx.input_dims(i)), " must be a float tensor of ", args.rows,
                                      " elements (one per row)"));
      }
    }
    if (ctx.input_type(3).dtype != ctx.input_type(4).dtype) {
      return ctx.Unsupported("mean and inv_std of different element types");
    }
    args.stats_dtype = Code(ctx.input_type(3).dtype);
  }
  CompiledOp op;
  op.workspace_bytes = kernels::LayerNormGradWorkspaceBytes(args);
  op.launch = [args, have_stats](const LaunchArgs& a) -> absl::Status {
    void* dx = a.outputs[0];
    void* ds = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    void* db = a.outputs.size() > 2 ? a.outputs[2] : nullptr;
    if (dx == nullptr && ds == nullptr && db == nullptr) return absl::OkStatus();
    NvtxRange range("LayerNormalizationGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchLayerNormGrad(args, a.inputs[0], a.inputs[1], a.inputs[2],
                                                           have_stats ? a.inputs[3] : nullptr,
                                                           have_stats ? a.inputs[4] : nullptr, dx, ds, db, a.workspace,
                                                           a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization.

absl::StatusOr<CompiledOp> CompileBatchNorm(OpCompileContext& ctx) {
  static const char* const kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 5; ++i) OTTR_RETURN_IF_ERROR(RequireFloat(ctx, i, kNames[i]));
  if (ctx.node().GetInt("spatial", 1) != 1) {
    return ctx.Unsupported("spatial=0 (per-activation statistics) is not supported");
  }
  const std::vector<int64_t> x = ctx.input_dims(0);
  if (x.size() < 2) return ctx.Error(absl::StrCat("X must have rank >= 2 (N x C x ...), got ", DimsString(x)));
  kernels::BatchNormArgs args;
  args.dtype = Code(ctx.input_type(0).dtype);
  args.n = x[0];
  args.c = x[1];
  args.spatial = Product(x, 2, x.size());
  for (int i = 1; i < 5; ++i) OTTR_RETURN_IF_ERROR(RequireVector(ctx, i, kNames[i], args.c, "the channel count of X"));
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  args.momentum = ctx.node().GetFloat("momentum", 0.9f);
  args.training = ctx.node().GetInt("training_mode", 0) != 0;
  if (!args.training && ctx.num_outputs() > 1) {
    return ctx.Error("the running_mean/running_var outputs require training_mode=1");
  }
  if (args.training && args.n * args.spatial == 0 && args.c > 0) {
    return ctx.Error(absl::StrCat("training mode needs at least one element per channel; X is ", DimsString(x)));
  }
  args.scale_dtype = Code(ctx.input_type(1).dtype);
  args.bias_dtype = Code(ctx.input_type(2).dtype);
  args.mean_dtype = Code(ctx.input_type(3).dtype);
  args.var_dtype = Code(ctx.input_type(4).dtype);
  CompiledOp op;
  op.workspace_bytes = kernels::BatchNormWorkspaceBytes(args);
  op.launch = [args](const LaunchArgs& a) -> absl::Status {
    void* y = a.outputs[0];
    void* rm = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    void* rv = a.outputs.size() > 2 ? a.outputs[2] : nullptr;
    if (y == nullptr && rm == nullptr && rv == nullptr) return absl::OkStatus();
    NvtxRange range("BatchNormalization");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchBatchNorm(args, a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                                                       a.inputs[4], y, rm, rv, a.workspace, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileBatchNormGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 1, "X"));
  const std::vector<int64_t> x = ctx.input_dims(1);
  if (ctx.input_type(0).dtype != ctx.input_type(1).dtype || ctx.input_dims(0) != x) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(ctx.input_type(0).dtype), DimsString(ctx.input_dims(0)),
                                  " does not match X ", ir::DTypeName(ctx.input_type(1).dtype), DimsString(x)));
  }
  if (x.size() < 2) return ctx.Error(absl::StrCat("X must have rank >= 2, got ", DimsString(x)));
  kernels::BatchNormGradArgs args;
  args.dtype = Code(ctx.input_type(1).dtype);
  args.n = x[0];
  args.c = x[1];
  args.spatial = Product(x, 2, x.size());
  args.fixed = ctx.has_input(3) && ctx.has_input(4);
  static const char* const kNames[] = {"", "", "scale", "mean", "var"};
  for (int i = 2; i < (args.fixed ? 5 : 3); ++i) {
    const std::vector<int64_t> d = ctx.input_dims(i);
    if (!ir::IsFloat(ctx.input_type(i).dtype) || d.size() != 1 || d[0] != args.c) {
      return ctx.Error(absl::StrCat("input '", kNames[i], "' ", ir::DTypeName(ctx.input_type(i).dtype), DimsString(d),
                                    " must be a float tensor of shape [", args.c, "]"));
    }
  }
  if (!args.fixed && args.n * args.spatial == 0 && args.c > 0) {
    return ctx.Error(absl::StrCat("batch statistics need at least one element per channel; X is ", DimsString(x)));
  }
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  args.scale_dtype = Code(ctx.input_type(2).dtype);
  args.dparam_dtype = args.scale_dtype;
  if (args.fixed) {
    args.mean_dtype = Code(ctx.input_type(3).dtype);
    args.var_dtype = Code(ctx.input_type(4).dtype);
  }
  CompiledOp op;
  op.workspace_bytes = kernels::BatchNormGradWorkspaceBytes(args);
  op.launch = [args](const LaunchArgs& a) -> absl::Status {
    void* dx = a.outputs[0];
    void* ds = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    void* db = a.outputs.size() > 2 ? a.outputs[2] : nullptr;
    if (dx == nullptr && ds == nullptr && db == nullptr) return absl::OkStatus();
    NvtxRange range("BatchNormalizationGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchBatchNormGrad(args, a.inputs[0], a.inputs[1], a.inputs[2],
                                                           args.fixed ? a.inputs[3] : nullptr,
                                                           args.fixed ? a.inputs[4] : nullptr, dx, ds, db, a.workspace,
                                                           a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// InstanceNormalization / GroupNormalization.

absl::StatusOr<CompiledOp> CompileGroupNorm(OpCompileContext& ctx, bool instance) {
  const char* const names[] = {instance ? "input" : "X", "scale", instance ? "B" : "bias"};
  for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(RequireFloat(ctx, i, names[i]));
  const std::vector<int64_t> x = ctx.input_dims(0);
  if (x.size() < 2) {
    return ctx.Error(absl::StrCat(names[0], " must have rank >= 2 (N x C x ...), got ", DimsString(x)));
  }
  kernels::GroupNormArgs args;
  args.dtype = Code(ctx.input_type(0).dtype);
  args.n = x[0];
  args.c = x[1];
  args.spatial = Product(x, 2, x.size());
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  args.scale_dtype = Code(ctx.input_type(1).dtype);
  args.bias_dtype = Code(ctx.input_type(2).dtype);
  if (instance) {
    args.groups = std::max<int64_t>(args.c, 1);
    for (int i = 1; i < 3; ++i) {
      OTTR_RETURN_IF_ERROR(RequireVector(ctx, i, names[i], args.c, "the channel count of the input"));
    }
  } else {
    args.groups = ctx.node().GetInt("num_groups", 0);
    if (args.groups <= 0 || args.c % args.groups != 0) {
      return ctx.Error(absl::StrCat("num_groups ", args.groups, " must be positive and divide the channel count ", args.c));
    }
    for (int i = 1; i < 3; ++i) {
      const std::vector<int64_t> d = ctx.input_dims(i);
      bool per_group = false;
      if (d.size() == 1 && d[0] == args.c) {
        per_group = false;
      } else if (d.size() == 1 && d[0] == args.groups) {
        per_group = true;
      } else {
        return ctx.Error(absl::StrCat("input '", names[i], "' has shape ", DimsString(d), "; expected [", args.c,
                                      "] (channels) or [", args.groups, "] (groups)"));
      }
      (i == 1 ? args.scale_per_group : args.bias_per_group) = per_group;
    }
  }
  CompiledOp op;
  op.launch = [args, instance](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range(instance ? "InstanceNormalization" : "GroupNormalization");
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGroupNorm(args, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileGroupNormGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 1, "X"));
  const std::vector<int64_t> x = ctx.input_dims(1);
  if (ctx.input_type(0).dtype != ctx.input_type(1).dtype || ctx.input_dims(0) != x) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(ctx.input_type(0).dtype), DimsString(ctx.input_dims(0)),
                                  " does not match X ", ir::DTypeName(ctx.input_type(1).dtype), DimsString(x)));
  }
  if (x.size() < 2) return ctx.Error(absl::StrCat("X must have rank >= 2, got ", DimsString(x)));
  kernels::GroupNormGradArgs args;
  args.dtype = Code(ctx.input_type(1).dtype);
  args.n = x[0];
  args.c = x[1];
  args.spatial = Product(x, 2, x.size());
  args.groups = ctx.node().GetInt("num_groups", 0);
  if (args.groups <= 0 || args.c % args.groups != 0) {
    return ctx.Error(absl::StrCat("num_groups ", args.groups, " must be positive and divide the channel count ", args.c));
  }
  const std::vector<int64_t> sd = ctx.input_dims(2);
  if (!ir::IsFloat(ctx.input_type(2).dtype) || sd.size() != 1 || (sd[0] != args.c && sd[0] != args.groups)) {
    return ctx.Error(absl::StrCat("scale ", ir::DTypeName(ctx.input_type(2).dtype), DimsString(sd),
                                  " must be a float tensor of shape [", args.c, "] or [", args.groups, "]"));
  }
  args.scale_per_group = sd[0] != args.c;
  args.epsilon = ctx.node().GetFloat("epsilon", 1e-5f);
  args.scale_dtype = Code(ctx.input_type(2).dtype);
  args.dparam_dtype = args.scale_dtype;
  CompiledOp op;
  op.workspace_bytes = kernels::GroupNormGradWorkspaceBytes(args);
  op.launch = [args](const LaunchArgs& a) -> absl::Status {
    void* dx = a.outputs[0];
    void* ds = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    void* db = a.outputs.size() > 2 ? a.outputs[2] : nullptr;
    if (dx == nullptr && ds == nullptr && db == nullptr) return absl::OkStatus();
    NvtxRange range("GroupNormalizationGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchGroupNormGrad(args, a.inputs[0], a.inputs[1], a.inputs[2], dx, ds, db,
                                                           a.workspace, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// Dropout / DropoutGrad.

// The ratio and training_mode inputs (at `ratio_in`, `training_in`): host values when they are
// compile-time constants or absent, else read by the kernel from device memory.
struct DropoutInputs {
  bool ratio_const = true;
  double ratio = 0.5;
  int ratio_dtype = 1;
  bool training_const = true;
  bool training = false;
  // Known at compile time to be the identity (inference mode or ratio 0).
  bool identity() const { return (training_const && !training) || (ratio_const && ratio == 0.0); }
};

absl::StatusOr<DropoutInputs> ReadDropoutInputs(const OpCompileContext& ctx, int ratio_in, int training_in) {
  DropoutInputs d;
  if (ctx.has_input(ratio_in)) {
    OTTR_RETURN_IF_ERROR(RequireFloat(ctx, ratio_in, "ratio"));
    if (ir::NumElements(ctx.input_dims(ratio_in)) != 1) {
      return ctx.Error(absl::StrCat("input 'ratio' must be a scalar, got shape ", DimsString(ctx.input_dims(ratio_in))));
    }
    d.ratio_dtype = Code(ctx.input_type(ratio_in).dtype);
    if (const ir::Tensor* t = ctx.constant_input(ratio_in)) {
      d.ratio = t->GetAsDouble(0);
    } else {
      d.ratio_const = false;
    }
  }
  if (ctx.has_input(training_in)) {
    if (ctx.input_type(training_in).dtype != DType::kBool || ir::NumElements(ctx.input_dims(training_in)) != 1) {
      return ctx.Error(absl::StrCat("input 'training_mode' must be a bool scalar, got ",
                                    ir::DTypeName(ctx.input_type(training_in).dtype),
                                    DimsString(ctx.input_dims(training_in))));
    }
    if (const ir::Tensor* t = ctx.constant_input(training_in)) {
      d.training = t->data<bool>()[0];
    } else {
      d.training_const = false;
    }
  }
  if (!d.identity() && d.training_const && d.ratio_const && !(d.ratio >= 0.0 && d.ratio < 1.0)) {
    return ctx.Error(absl::StrCat("ratio must be in [0, 1) in training mode, got ", d.ratio));
  }
  return d;
}

kernels::DropoutScalars Scalars(const DropoutInputs& d, const LaunchArgs& a, int ratio_in, int training_in) {
  kernels::DropoutScalars s;
  s.ratio_value = d.ratio;
  s.ratio_dtype = d.ratio_dtype;
  s.training_value = d.training;
  if (!d.ratio_const) s.ratio = a.inputs[ratio_in];
  if (!d.training_const) s.training = static_cast<const bool*>(a.inputs[training_in]);
  return s;
}

// The Philox key of a node: its `seed` attribute, else a hash of its name (FNV-1a), so distinct
// Dropout nodes draw independent masks and a model draws the same masks on every run.
uint64_t DropoutSeed(const ir::Node& n) {
  if (n.has_attr("seed")) return static_cast<uint64_t>(n.GetInt("seed", 0));
  uint64_t h = 1469598103934665603ull;
  for (const char ch : n.origin()) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

absl::StatusOr<CompiledOp> CompileDropout(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "data"));
  OTTR_ASSIGN_OR_RETURN(const DropoutInputs in, ReadDropoutInputs(ctx, 1, 2));
  const std::vector<int64_t> x = ctx.input_dims(0);
  const int64_t count = ir::NumElements(x);
  const int64_t bytes = count * static_cast<int64_t>(ir::DTypeSize(ctx.input_type(0).dtype));
  const bool want_mask = ctx.num_outputs() > 1 && ctx.output_needed(1);
  CompiledOp op;
  if (in.identity()) {
    // output = data (a view when the executor can share the buffer), mask all true.
    if (!want_mask) op.views = {{0, 0}};
    op.launch = [bytes, count, want_mask](const LaunchArgs& a) -> absl::Status {
      NvtxRange range("Dropout");
      OTTR_RETURN_IF_ERROR(CopyUnlessAliased(a, 0, 0, bytes));
      if (want_mask && a.outputs[1] != nullptr && count > 0) {
        OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.outputs[1], 1, count, a.stream));
      }
      return absl::OkStatus();
    };
    return op;
  }
  // Training (or unknown until run time): the per-node launch counter lives on the device.
  void* raw = nullptr;
  OTTR_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, sizeof(kernels::DropoutState)));
  std::shared_ptr<void> state(raw, [](void* p) { cudaFree(p); });
  OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(raw, 0, sizeof(kernels::DropoutState), nullptr));
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  const int dtype = Code(ctx.input_type(0).dtype);
  const uint64_t seed = DropoutSeed(ctx.node());
  // Output 0 is always written; a scratch buffer stands in when nobody reads it.
  op.workspace_bytes = ctx.output_needed(0) ? 0 : bytes;
  op.launch = [in, dtype, count, seed, state](const LaunchArgs& a) -> absl::Status {
    bool* mask = a.outputs.size() > 1 ? static_cast<bool*>(a.outputs[1]) : nullptr;
    void* y = a.outputs[0] != nullptr ? a.outputs[0] : a.workspace;
    NvtxRange range("Dropout");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchDropout(dtype, a.inputs[0], y, mask, count, Scalars(in, a, 1, 2), seed,
                                                     static_cast<kernels::DropoutState*>(state.get()), a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileDropoutGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "dY"));
  const std::vector<int64_t> dy = ctx.input_dims(0);
  if (ctx.input_type(1).dtype != DType::kBool || ctx.input_dims(1) != dy) {
    return ctx.Error(absl::StrCat("mask ", ir::DTypeName(ctx.input_type(1).dtype), DimsString(ctx.input_dims(1)),
                                  " must be bool shaped like dY ", DimsString(dy)));
  }
  OTTR_ASSIGN_OR_RETURN(const DropoutInputs in, ReadDropoutInputs(ctx, 2, 3));
  const int64_t count = ir::NumElements(dy);
  const int64_t bytes = count * static_cast<int64_t>(ir::DTypeSize(ctx.input_type(0).dtype));
  CompiledOp op;
  if (in.identity()) {
    op.views = {{0, 0}};
    op.launch = [bytes](const LaunchArgs& a) -> absl::Status {
      NvtxRange range("DropoutGrad");
      return CopyUnlessAliased(a, 0, 0, bytes);
    };
    return op;
  }
  const int dtype = Code(ctx.input_type(0).dtype);
  op.launch = [in, dtype, count](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("DropoutGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchDropoutGrad(dtype, a.inputs[0], static_cast<const bool*>(a.inputs[1]),
                                                         a.outputs[0], count, Scalars(in, a, 2, 3), a.stream));
    return absl::OkStatus();
  };
  return op;
}

}  // namespace

void RegisterNormalizationCudaOps(CudaOpRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  r.Register("", "LayerNormalization", CompileLayerNorm);
  r.Register("", "BatchNormalization", CompileBatchNorm);
  r.Register("", "InstanceNormalization", [](OpCompileContext& c) { return CompileGroupNorm(c, true); });
  r.Register("", "GroupNormalization", [](OpCompileContext& c) { return CompileGroupNorm(c, false); });
  r.Register("", "Dropout", CompileDropout);
  r.Register(ottr, "LayerNormalizationGrad", CompileLayerNormGrad);
  r.Register(ottr, "BatchNormalizationGrad", CompileBatchNormGrad);
  r.Register(ottr, "GroupNormalizationGrad", CompileGroupNormGrad);
  r.Register(ottr, "DropoutGrad", CompileDropoutGrad);
}

}  // namespace ottr::cuda
