// The activation ops and their ottr-domain backward ops on CUDA (kernels in
// kernels/activation*.cu; registered from RegisterElementwiseCudaOps). Validation, attribute
// defaults and formulas follow runtime/cpu/activation_kernels.cc and activation_grad_kernels.cc.
//
// The backward ops dX = F(dY, Z) are one flat pass over dY and Z (12 bytes per float element):
// their shapes are equal by construction, so there is no index arithmetic at all. PReluGrad
// writes dX with broadcasting and reduces dSlope deterministically in double (no atomics).
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/activation.h"
#include "runtime/cuda/kernels/elementwise_plan.h"

namespace ottr::cuda {
namespace {

using ir::DType;
using kernels::ActivationOp;
using kernels::ActivationParams;

int Code(DType t) { return ir::DTypeToOnnx(t); }

std::string DimsString(const std::vector<int64_t>& dims) {
  return ir::ShapeToString(ir::ShapeFromDims(dims));
}

absl::Status UnsupportedType(const OpCompileContext& ctx, DType t) {
  return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), " is not supported"));
}

// The op's attributes with the ONNX defaults (the backward ops carry the forward's attributes).
absl::StatusOr<ActivationParams> Params(const OpCompileContext& ctx, ActivationOp op) {
  const ir::Node& n = ctx.node();
  ActivationParams p;
  switch (op) {
    case ActivationOp::kLeakyRelu: p.alpha = n.GetFloat("alpha", 0.01f); break;
    case ActivationOp::kElu:
    case ActivationOp::kCelu:
    case ActivationOp::kThresholdedRelu: p.alpha = n.GetFloat("alpha", 1.0f); break;
    case ActivationOp::kSelu:
      p.alpha = n.GetFloat("alpha", 1.67326319217681884765625f);
      p.gamma = n.GetFloat("gamma", 1.05070102214813232421875f);
      break;
    case ActivationOp::kHardSigmoid:
      p.alpha = n.GetFloat("alpha", 0.2f);
      p.beta = n.GetFloat("beta", 0.5f);
      break;
    default: break;
  }
  return p;
}

// Gelu's `approximate` picks the kernel.
absl::StatusOr<ActivationOp> GeluForm(const OpCompileContext& ctx) {
  const std::string approximate = ctx.node().GetString("approximate", "none");
  if (approximate == "none") return ActivationOp::kGelu;
  if (approximate == "tanh") return ActivationOp::kGeluTanh;
  return ctx.Error(absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"",
                                approximate, "\""));
}

template <typename Run>
LaunchFn Launch(const char* name, int64_t elements, Run run) {
  return [name, elements, run](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr || elements == 0) return absl::OkStatus();
    nvtxRangePushA(name);
    const cudaError_t e = run(a);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
}

// ---- Forward --------------------------------------------------------------------------------

OpCompiler Activation(ActivationOp op, const char* name) {
  return [op, name](OpCompileContext& ctx) -> absl::StatusOr<CompiledOp> {
    ActivationOp form = op;
    if (op == ActivationOp::kGelu) {
      OTTR_ASSIGN_OR_RETURN(form, GeluForm(ctx));
    }
    const DType t = ctx.input_type(0).dtype;
    kernels::ActivationFn fn = kernels::FindActivation(form, Code(t));
    if (fn == nullptr) return UnsupportedType(ctx, t);
    const std::vector<int64_t> dims = ctx.input_dims(0);
    if (ctx.output_dims(0) != dims) {
      return ctx.Error(absl::StrCat("output shape ", DimsString(ctx.output_dims(0)),
                                    " differs from the input's ", DimsString(dims)));
    }
    OTTR_ASSIGN_OR_RETURN(ActivationParams p, Params(ctx, form));
    const int64_t n = ir::NumElements(dims);
    CompiledOp c;
    c.launch = Launch(name, n, [fn, n, p](const LaunchArgs& a) {
      return fn(a.inputs[0], a.outputs[0], n, p, a.stream);
    });
    return c;
  };
}

// PRelu(X, slope): y = X < 0 ? slope · X : X, slope broadcast against X.
absl::StatusOr<CompiledOp> CompilePRelu(OpCompileContext& ctx) {
  const DType tx = ctx.input_type(0).dtype, ts = ctx.input_type(1).dtype;
  if (tx != ts) {
    return ctx.Error(absl::StrCat("X and slope have different element types ", ir::DTypeName(tx),
                                  " and ", ir::DTypeName(ts)));
  }
  kernels::BinaryFn fn = kernels::FindPRelu(Code(tx));
  if (fn == nullptr) return UnsupportedType(ctx, tx);
  const std::vector<int64_t> xd = ctx.input_dims(0), sd = ctx.input_dims(1);
  std::optional<std::vector<int64_t>> b = ir::BroadcastDims(xd, sd);
  if (!b.has_value() || *b != ctx.output_dims(0)) {
    return ctx.Error(absl::StrCat("X ", DimsString(xd), " and slope ", DimsString(sd),
                                  " do not broadcast to the output ",
                                  DimsString(ctx.output_dims(0))));
  }
  kernels::IndexPlan<2> plan;
  std::string error;
  if (!kernels::MakeIndexPlan<2>(*b, {xd, sd}, &plan, &error)) return ctx.Unsupported(error);
  CompiledOp c;
  c.launch = Launch("PRelu", plan.n, [fn, plan](const LaunchArgs& a) {
    return fn(plan, a.inputs[0], a.inputs[1], a.outputs[0], a.stream);
  });
  return c;
}

// ---- Backward -------------------------------------------------------------------------------

// dX = F(dY, Z): dY and Z of one float type and shape.
OpCompiler ActivationGrad(ActivationOp op, const char* name) {
  return [op, name](OpCompileContext& ctx) -> absl::StatusOr<CompiledOp> {
    ActivationOp form = op;
    if (op == ActivationOp::kGelu) {
      OTTR_ASSIGN_OR_RETURN(form, GeluForm(ctx));
    }
    const DType t = ctx.input_type(0).dtype;
    const std::vector<int64_t> dy = ctx.input_dims(0), z = ctx.input_dims(1);
    if (ctx.input_type(1).dtype != t || dy != z) {
      return ctx.Error(absl::StrCat("dY ", ir::DTypeName(t), DimsString(dy), " and the forward tensor ",
                                    ir::DTypeName(ctx.input_type(1).dtype), DimsString(z),
                                    " must have one type and shape"));
    }
    if (ctx.output_dims(0) != dy) {
      return ctx.Error(absl::StrCat("output shape ", DimsString(ctx.output_dims(0)),
                                    " differs from dY's ", DimsString(dy)));
    }
    kernels::ActivationGradFn fn = kernels::FindActivationGrad(form, Code(t));
    if (fn == nullptr) return UnsupportedType(ctx, t);
    OTTR_ASSIGN_OR_RETURN(ActivationParams p, Params(ctx, form));
    const int64_t n = ir::NumElements(dy);
    CompiledOp c;
    c.launch = Launch(name, n, [fn, n, p](const LaunchArgs& a) {
      return fn(a.inputs[0], a.inputs[1], a.outputs[0], n, p, a.stream);
    });
    return c;
  };
}

// ReluGradBiasGrad(dY, Y) -> (dX, dB[, dXᵀ]): one kernel (kernels/activation.h). Its per-strip
// counters are the launch's CompiledOp::counter_bytes (in the arena; every launch leaves them
// zero), the partial sums in the workspace. An unread dB is written to the workspace; an unread dX
// is not written at all when dXᵀ is, else to the workspace.
absl::StatusOr<CompiledOp> CompileReluGradBiasGrad(OpCompileContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  const std::vector<int64_t> dy = ctx.input_dims(0);
  if (ctx.input_type(1).dtype != t || ctx.input_dims(1) != dy || dy.size() != 2) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(t), DimsString(dy), " and Y ",
                                  ir::DTypeName(ctx.input_type(1).dtype), DimsString(ctx.input_dims(1)),
                                  " must have one type and 2-D shape"));
  }
  const DType bt = ctx.output_type(1).dtype;
  if (ctx.output_dims(0) != dy || ctx.output_dims(1) != std::vector<int64_t>{dy[1]}) {
    return ctx.Error(absl::StrCat("outputs ", DimsString(ctx.output_dims(0)), " and ", DimsString(ctx.output_dims(1)),
                                  " do not match dY ", DimsString(dy)));
  }
  const bool transposed = ctx.num_outputs() > 2;
  if (transposed && (ctx.output_type(2).dtype != t || ctx.output_dims(2) != std::vector<int64_t>{dy[1], dy[0]})) {
    return ctx.Error(absl::StrCat("dXT ", ir::DTypeName(ctx.output_type(2).dtype), DimsString(ctx.output_dims(2)),
                                  " is not the transpose of dY ", ir::DTypeName(t), DimsString(dy)));
  }
  kernels::ReluBiasGradFn fn = kernels::FindReluGradBiasGrad(Code(t), Code(bt));
  if (fn == nullptr) {
    return ctx.Unsupported(absl::StrCat("dY of ", ir::DTypeName(t), " with a ", ir::DTypeName(bt), " bias gradient"));
  }
  const kernels::ReluBiasGradPlan plan = kernels::MakeReluBiasGradPlan(Code(t), dy[0], dy[1], transposed);
  auto round_up = [](int64_t b) { return (b + 255) / 256 * 256; };
  const int64_t partial_bytes = round_up(kernels::ReluBiasGradWorkspaceBytes(plan));
  const int64_t elements_bytes = round_up(ir::NumElements(dy) * static_cast<int64_t>(ir::DTypeSize(t)));
  // dX goes to the workspace when nobody reads it and no dXᵀ is written instead; so does dXᵀ
  // when only dX is read.
  const int64_t dx_bytes = ctx.output_needed(0) || transposed ? 0 : elements_bytes;
  const int64_t dxt_bytes = transposed && !ctx.output_needed(2) ? elements_bytes : 0;
  const int64_t db_bytes = ctx.output_needed(1) ? 0 : round_up(dy[1] * static_cast<int64_t>(ir::DTypeSize(bt)));
  CompiledOp c;
  c.workspace_bytes = partial_bytes + dx_bytes + dxt_bytes + db_bytes;
  c.counter_bytes = plan.strips * static_cast<int64_t>(sizeof(unsigned));
  c.launch = [fn, plan, partial_bytes, dx_bytes, dxt_bytes](const LaunchArgs& a) -> absl::Status {
    if (plan.cols == 0) return absl::OkStatus();
    char* ws = static_cast<char*>(a.workspace);
    void* dx = a.outputs[0] != nullptr ? a.outputs[0] : (dx_bytes > 0 ? ws + partial_bytes : nullptr);
    void* dxt = nullptr;
    if (plan.transposed) dxt = a.outputs.size() > 2 && a.outputs[2] != nullptr ? a.outputs[2] : ws + partial_bytes + dx_bytes;
    void* db = a.outputs.size() > 1 && a.outputs[1] != nullptr ? a.outputs[1]
                                                               : ws + partial_bytes + dx_bytes + dxt_bytes;
    nvtxRangePushA("ReluGradBiasGrad");
    const cudaError_t e =
        fn(plan, a.inputs[0], a.inputs[1], dx, db, dxt, ws, static_cast<unsigned*>(a.counters), a.stream,
           a.programmatic);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return c;
}

// LinearReluGrad(dZ, W, Y) -> (dX, dB[, dW, dBz]), float32: one kernel (kernels/activation.h), its
// per-strip counters the launch's CompiledOp::counter_bytes, the partial sums in the workspace;
// an unread output is written to the workspace.
absl::StatusOr<CompiledOp> CompileLinearReluGrad(OpCompileContext& ctx) {
  const std::vector<int64_t> dz = ctx.input_dims(0), w = ctx.input_dims(1), y = ctx.input_dims(2);
  for (int i = 0; i < 3; ++i) {
    if (ctx.input_type(i).dtype != DType::kFloat32) {
      return ctx.Unsupported(absl::StrCat("input ", i, " of ", ir::DTypeName(ctx.input_type(i).dtype), " (float32 only)"));
    }
  }
  if (dz.size() != 2 || w.size() != 2 || y.size() != 2 || dz[1] != w[0] || dz[0] != y[0] || w[1] != y[1]) {
    return ctx.Error(absl::StrCat("dZ ", DimsString(dz), ", W ", DimsString(w), " and Y ", DimsString(y),
                                  " must be [R, K], [K, N], [R, N]"));
  }
  const bool weight_grad = ctx.num_outputs() > 2;
  // dW on the tensor cores under TF32 (kernels::LinearReluGradPlan::tc; OTTR_LRG_MMA=0 keeps the
  // float32 CUDA-core sums): on the H100 the small MLP's head at batch 8192 took 24.0 against
  // 27.2 µs, the step 201.1 / 200.7 against 205.4 / 204.4 µs (bench/RESULTS.md 2026-12-05).
  const char* mma = std::getenv("OTTR_LRG_MMA");
  const bool tc = ctx.libs().tf32() && (mma == nullptr || std::string(mma) != "0");
  kernels::LinearReluGradPlan plan = kernels::MakeLinearReluGradPlan(y[0], y[1], w[0], weight_grad, tc);
  if (plan.kp == 0) return ctx.Unsupported(absl::StrCat("K = ", w[0], " (1 to 16)"));
  if (weight_grad) {
    plan.weight_rows = ctx.node().GetInt("weight_rows", w[0]);
    if (plan.weight_rows < 1 || plan.weight_rows > w[0]) {
      return ctx.Error(absl::StrCat("weight_rows = ", plan.weight_rows, " must be 1 to K = ", w[0]));
    }
  }
  auto round_up = [](int64_t b) { return (b + 255) / 256 * 256; };
  // Workspace: the partials, then a place for each output nobody reads.
  std::vector<int64_t> spare(ctx.num_outputs(), -1);
  int64_t bytes = round_up(kernels::LinearReluGradWorkspaceBytes(plan));
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.output_needed(i)) continue;
    spare[i] = bytes;
    bytes += round_up(ir::NumElements(ctx.output_dims(i)) * static_cast<int64_t>(sizeof(float)));
  }
  CompiledOp c;
  c.workspace_bytes = bytes;
  c.counter_bytes = plan.strips * static_cast<int64_t>(sizeof(unsigned));
  c.launch = [plan, spare](const LaunchArgs& a) -> absl::Status {
    char* ws = static_cast<char*>(a.workspace);
    auto out = [&](size_t i) -> float* {
      if (i >= spare.size()) return nullptr;
      return static_cast<float*>(spare[i] >= 0 ? ws + spare[i] : a.outputs[i]);
    };
    nvtxRangePushA("LinearReluGrad");
    const cudaError_t e = kernels::LaunchLinearReluGrad(
        plan, static_cast<const float*>(a.inputs[0]), static_cast<const float*>(a.inputs[1]),
        static_cast<const float*>(a.inputs[2]), out(0), out(1), out(2), out(3), ws, static_cast<unsigned*>(a.counters),
        a.stream);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return c;
}

// The dSlope reduction of PReluGrad over output dims `out` (dY's), with X and slope broadcast
// to it: each non-1 dim is kept (slope has it) or reduced (slope is broadcast along it);
// neighbouring dims of one kind whose X strides also continue each other are merged.
absl::StatusOr<kernels::SlopeReducePlan> MakeSlopePlan(const OpCompileContext& ctx,
                                                       const std::vector<int64_t>& out,
                                                       std::vector<int64_t> x,
                                                       std::vector<int64_t> slope) {
  const size_t rank = out.size();
  x.insert(x.begin(), rank - x.size(), 1);
  slope.insert(slope.begin(), rank - slope.size(), 1);
  std::vector<int64_t> out_stride(rank), x_stride(rank);
  int64_t so = 1, sx = 1;
  for (size_t i = rank; i-- > 0;) {
    out_stride[i] = so;
    x_stride[i] = x[i] == 1 ? 0 : sx;
    so *= out[i];
    sx *= x[i];
  }
  struct Group {
    bool kept;
    bool x_full;
    int64_t size;
    int64_t out_stride;
    int64_t x_stride;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    const bool kept = slope[i] != 1;
    const bool x_full = x[i] != 1;
    if (!groups.empty() && groups.back().kept == kept && groups.back().x_full == x_full) {
      groups.back().size *= out[i];
      groups.back().out_stride = out_stride[i];
      groups.back().x_stride = x_stride[i];
    } else {
      groups.push_back({kept, x_full, out[i], out_stride[i], x_stride[i]});
    }
  }
  kernels::SlopeReducePlan p;
  p.slope_elements = 1;
  p.reduce_elements = 1;
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {  // innermost first
    const int r = it->kept ? p.kept_rank : p.reduced_rank;
    if (r == kernels::kMaxRank) {
      return ctx.Unsupported(absl::StrCat("PReluGrad over ", DimsString(out), " with slope ",
                                          DimsString(slope), " needs more than ", kernels::kMaxRank,
                                          " dims"));
    }
    if (it->kept) {
      p.kept_dims[r] = kernels::MakeFastDivisor(static_cast<uint64_t>(it->size));
      p.kept_out_stride[r] = it->out_stride;
      p.kept_x_stride[r] = it->x_stride;
      p.slope_elements *= it->size;
      ++p.kept_rank;
    } else {
      p.reduced_dims[r] = kernels::MakeFastDivisor(static_cast<uint64_t>(it->size));
      p.reduced_out_stride[r] = it->out_stride;
      p.reduced_x_stride[r] = it->x_stride;
      p.reduce_elements *= it->size;
      ++p.reduced_rank;
    }
  }
  if (ir::NumElements(out) == 0) {
    // Nothing to sum: every slope element gets 0 (the thread kernel with R = 0).
    p.slope_elements = ir::NumElements(slope);
    p.reduce_elements = 0;
    p.kept_rank = 0;
    p.reduced_rank = 0;
  }
  // Short sums: one thread per slope element. Long ones: blocks of 256 threads over chunks of
  // at least 2048 terms, enough chunks for about 1024 blocks when there are few slope elements.
  p.thread_per_slope = p.reduce_elements <= 256;
  if (!p.thread_per_slope) {
    const int64_t by_length = (p.reduce_elements + 2047) / 2048;
    const int64_t by_blocks = std::max<int64_t>(1, (1024 + p.slope_elements - 1) / p.slope_elements);
    p.chunks = std::max<int64_t>(1, std::min(by_length, by_blocks));
  }
  return p;
}

// PReluGrad(dY, X, slope) -> (dX, dSlope).
absl::StatusOr<CompiledOp> CompilePReluGrad(OpCompileContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  if (ctx.input_type(1).dtype != t || ctx.input_type(2).dtype != t) {
    return ctx.Error(absl::StrCat("dY, X and slope must have one element type, got ",
                                  ir::DTypeName(t), ", ", ir::DTypeName(ctx.input_type(1).dtype),
                                  " and ", ir::DTypeName(ctx.input_type(2).dtype)));
  }
  kernels::PReluGradDxFn dx_fn = kernels::FindPReluGradDx(Code(t));
  kernels::PReluGradSlopeFn slope_fn = kernels::FindPReluGradSlope(Code(t));
  if (dx_fn == nullptr || slope_fn == nullptr) return UnsupportedType(ctx, t);
  const std::vector<int64_t> dy = ctx.input_dims(0), x = ctx.input_dims(1), slope = ctx.input_dims(2);
  std::optional<std::vector<int64_t>> b = ir::BroadcastDims(x, slope);
  if (!b.has_value() || *b != dy) {
    return ctx.Error(absl::StrCat("dY has shape ", DimsString(dy), " but X ", DimsString(x),
                                  " and slope ", DimsString(slope), " broadcast to ",
                                  b.has_value() ? DimsString(*b) : "nothing"));
  }
  if (ctx.output_dims(0) != dy || (ctx.num_outputs() > 1 && ctx.output_dims(1) != slope)) {
    return ctx.Error("outputs must have the shapes of dY and slope");
  }
  kernels::IndexPlan<3> plan;
  std::string error;
  if (!kernels::MakeIndexPlan<3>(dy, {dy, x, slope}, &plan, &error)) return ctx.Unsupported(error);
  OTTR_ASSIGN_OR_RETURN(kernels::SlopeReducePlan sp, MakeSlopePlan(ctx, dy, x, slope));
  const bool want_slope = ctx.num_outputs() > 1 && ctx.output_needed(1);
  CompiledOp c;
  c.workspace_bytes = want_slope ? kernels::SlopeReduceWorkspaceBytes(sp) : 0;
  c.launch = [dx_fn, slope_fn, plan, sp](const LaunchArgs& a) -> absl::Status {
    nvtxRangePushA("PReluGrad");
    cudaError_t e = cudaSuccess;
    if (a.outputs[0] != nullptr && plan.n > 0) {
      e = dx_fn(plan, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], a.stream);
    }
    if (e == cudaSuccess && a.outputs.size() > 1 && a.outputs[1] != nullptr) {
      e = slope_fn(sp, a.inputs[0], a.inputs[1], a.outputs[1], a.workspace, a.stream);
    }
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
  return c;
}

}  // namespace

void RegisterActivationCudaOps(CudaOpRegistry& r) {
  r.Register("", "Relu", Activation(ActivationOp::kRelu, "Relu"));
  r.Register("", "LeakyRelu", Activation(ActivationOp::kLeakyRelu, "LeakyRelu"));
  r.Register("", "PRelu", CompilePRelu);
  r.Register("", "Sigmoid", Activation(ActivationOp::kSigmoid, "Sigmoid"));
  r.Register("", "Tanh", Activation(ActivationOp::kTanh, "Tanh"));
  r.Register("", "Gelu", Activation(ActivationOp::kGelu, "Gelu"));
  r.Register("", "Softplus", Activation(ActivationOp::kSoftplus, "Softplus"));
  r.Register("", "Softsign", Activation(ActivationOp::kSoftsign, "Softsign"));
  r.Register("", "Elu", Activation(ActivationOp::kElu, "Elu"));
  r.Register("", "Selu", Activation(ActivationOp::kSelu, "Selu"));
  r.Register("", "Celu", Activation(ActivationOp::kCelu, "Celu"));
  r.Register("", "HardSigmoid", Activation(ActivationOp::kHardSigmoid, "HardSigmoid"));
  r.Register("", "HardSwish", Activation(ActivationOp::kHardSwish, "HardSwish"));
  r.Register("", "ThresholdedRelu", Activation(ActivationOp::kThresholdedRelu, "ThresholdedRelu"));
  r.Register("", "Mish", Activation(ActivationOp::kMish, "Mish"));

  const std::string d(ir::kOttrDomain);
  r.Register(d, "ReluGrad", ActivationGrad(ActivationOp::kRelu, "ReluGrad"));
  r.Register(d, "ReluGradBiasGrad", CompileReluGradBiasGrad);
  r.Register(d, "LinearReluGrad", CompileLinearReluGrad);
  r.Register(d, "LeakyReluGrad", ActivationGrad(ActivationOp::kLeakyRelu, "LeakyReluGrad"));
  r.Register(d, "SigmoidGrad", ActivationGrad(ActivationOp::kSigmoid, "SigmoidGrad"));
  r.Register(d, "TanhGrad", ActivationGrad(ActivationOp::kTanh, "TanhGrad"));
  r.Register(d, "GeluGrad", ActivationGrad(ActivationOp::kGelu, "GeluGrad"));
  r.Register(d, "EluGrad", ActivationGrad(ActivationOp::kElu, "EluGrad"));
  r.Register(d, "SeluGrad", ActivationGrad(ActivationOp::kSelu, "SeluGrad"));
  r.Register(d, "CeluGrad", ActivationGrad(ActivationOp::kCelu, "CeluGrad"));
  r.Register(d, "SoftplusGrad", ActivationGrad(ActivationOp::kSoftplus, "SoftplusGrad"));
  r.Register(d, "HardSigmoidGrad", ActivationGrad(ActivationOp::kHardSigmoid, "HardSigmoidGrad"));
  r.Register(d, "HardSwishGrad", ActivationGrad(ActivationOp::kHardSwish, "HardSwishGrad"));
  r.Register(d, "MishGrad", ActivationGrad(ActivationOp::kMish, "MishGrad"));
  r.Register(d, "SoftsignGrad", ActivationGrad(ActivationOp::kSoftsign, "SoftsignGrad"));
  r.Register(d, "ThresholdedReluGrad",
             ActivationGrad(ActivationOp::kThresholdedRelu, "ThresholdedReluGrad"));
  r.Register(d, "PReluGrad", CompilePReluGrad);
}

}  // namespace ottr::cuda
