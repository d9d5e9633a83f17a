// CUDA ops of the optimizer updates: ottr::AdamUpdate and ottr::SGDUpdate (PyTorch's formulas,
// bit-compatible with the CPU reference in float32) and the ai.onnx.preview.training Adam,
// Adagrad and Momentum. Learning rate and step are read by the kernels from device memory, so
// a captured step graph replays with the values of each step. The N-ary updates also take the
// nan-guard / loss-scaling guard and loss scale from device memory (skip and unscale on the
// device), and ottr::AllFinite / ottr::LossScaleUpdate run here too. Kernels:
// kernels/optimizer_kernels.cu (which also offers the multi-tensor launchers for fusion).
#include <nvtx3/nvToolsExt.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/mlp_step.h"
#include "runtime/cuda/kernels/optimizer_kernels.h"

namespace ottr::cuda {
namespace {

using ir::DType;
using kernels::MultiTensorEntry;

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

std::string DimsString(const std::vector<int64_t>& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

int Code(DType t) { return static_cast<int>(ir::DTypeToOnnx(t)); }

// lr (input `lr_in`): a float32/float64 scalar; step (input `lr_in + 1`): an int64/int32 scalar.
absl::StatusOr<kernels::OptimizerScalars> ReadScalarTypes(const OpCompileContext& ctx, int lr_in) {
  kernels::OptimizerScalars s;
  const DType lr = ctx.input_type(lr_in).dtype;
  if ((lr != DType::kFloat32 && lr != DType::kFloat64) || ir::NumElements(ctx.input_dims(lr_in)) != 1) {
    return ctx.Error(absl::StrCat("the learning rate must be a float or double scalar, got ", ir::DTypeName(lr),
                                  DimsString(ctx.input_dims(lr_in))));
  }
  const DType step = ctx.input_type(lr_in + 1).dtype;
  if ((step != DType::kInt64 && step != DType::kInt32) || ir::NumElements(ctx.input_dims(lr_in + 1)) != 1) {
    return ctx.Error(absl::StrCat("the step must be an int64 scalar, got ", ir::DTypeName(step),
                                  DimsString(ctx.input_dims(lr_in + 1))));
  }
  s.lr_dtype = Code(lr);
  s.step_dtype = Code(step);
  return s;
}

// Adam's attributes of an ottr update node.
kernels::AdamHyper AdamHyperOf(const ir::Node& node) {
  kernels::AdamHyper h;
  h.beta1 = node.GetFloat("beta1", 0.9f);
  h.beta2 = node.GetFloat("beta2", 0.999f);
  h.epsilon = node.GetFloat("epsilon", 1e-8f);
  h.weight_decay = node.GetFloat("weight_decay", 0.0f);
  h.decoupled = node.GetInt("decoupled", 0) != 0;
  return h;
}

// param (input 0) and every other tensor in `tensors` share one float32/float64 type and shape.
absl::StatusOr<int> CheckTensors(const OpCompileContext& ctx, const std::vector<int>& tensors) {
  const DType t = ctx.input_type(0).dtype;
  if (t != DType::kFloat32 && t != DType::kFloat64) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), "; expected float32 or float64"));
  }
  const std::vector<int64_t> dims = ctx.input_dims(0);
  for (int i : tensors) {
    if (ctx.input_type(i).dtype != t || ctx.input_dims(i) != dims) {
      return ctx.Error(absl::StrCat("input ", i, " ", ir::DTypeName(ctx.input_type(i).dtype),
                                    DimsString(ctx.input_dims(i)), " does not match the parameter ",
                                    ir::DTypeName(t), DimsString(dims)));
    }
  }
  return Code(t);
}

// ottr::AdamUpdate(param, grad, lr, step, m, v) -> (param', m', v').
absl::StatusOr<CompiledOp> CompileAdamUpdate(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const int dtype, CheckTensors(ctx, {1, 4, 5}));
  OTTR_ASSIGN_OR_RETURN(const kernels::OptimizerScalars types, ReadScalarTypes(ctx, 2));
  const kernels::AdamHyper h = AdamHyperOf(ctx.node());
  const int64_t numel = ir::NumElements(ctx.input_dims(0));
  const int64_t bytes = numel * static_cast<int64_t>(ir::DTypeSize(ctx.input_type(0).dtype));
  CompiledOp op;
  // The kernel always writes the parameter: a scratch buffer stands in when nobody reads it.
  op.workspace_bytes = ctx.output_needed(0) ? 0 : bytes;
  op.launch = [dtype, types, h, numel](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("AdamUpdate");
    MultiTensorEntry e;
    e.param = a.inputs[0];
    e.grad = a.inputs[1];
    e.state0 = a.inputs[4];
    e.state1 = a.inputs[5];
    e.param_out = a.outputs[0] != nullptr ? a.outputs[0] : a.workspace;
    e.state0_out = a.outputs[1];
    e.state1_out = a.outputs[2];
    e.numel = numel;
    kernels::OptimizerScalars s = types;
    s.lr = a.inputs[2];
    s.step = a.inputs[3];
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchPackedAdam(&e, 1, dtype, h, s, a.stream, a.programmatic));
    return absl::OkStatus();
  };
  return op;
}

// ottr::SGDUpdate(param, grad, lr, step, [buf]) -> (param', [buf']).
absl::StatusOr<CompiledOp> CompileSgdUpdate(OpCompileContext& ctx) {
  const bool has_buf = ctx.has_input(4);
  OTTR_ASSIGN_OR_RETURN(const int dtype, CheckTensors(ctx, has_buf ? std::vector<int>{1, 4} : std::vector<int>{1}));
  OTTR_ASSIGN_OR_RETURN(const kernels::OptimizerScalars types, ReadScalarTypes(ctx, 2));
  kernels::SgdHyper h;
  h.momentum = ctx.node().GetFloat("momentum", 0.0f);
  h.dampening = ctx.node().GetFloat("dampening", 0.0f);
  h.weight_decay = ctx.node().GetFloat("weight_decay", 0.0f);
  h.nesterov = ctx.node().GetInt("nesterov", 0) != 0;
  const int64_t numel = ir::NumElements(ctx.input_dims(0));
  const int64_t bytes = numel * static_cast<int64_t>(ir::DTypeSize(ctx.input_type(0).dtype));
  CompiledOp op;
  op.workspace_bytes = ctx.output_needed(0) ? 0 : bytes;
  op.launch = [dtype, types, h, numel, has_buf](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("SGDUpdate");
    MultiTensorEntry e;
    e.param = a.inputs[0];
    e.grad = a.inputs[1];
    e.param_out = a.outputs[0] != nullptr ? a.outputs[0] : a.workspace;
    if (has_buf) {
      e.state0 = a.inputs[4];
      e.state0_out = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    }
    e.numel = numel;
    kernels::OptimizerScalars s = types;
    s.lr = a.inputs[2];
    s.step = a.inputs[3];
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchPackedSgd(&e, 1, dtype, h, s, a.stream, a.programmatic));
    return absl::OkStatus();
  };
  return op;
}

// ottr::AdamUpdateN(lr, step, params.., grads.., m.., v..) -> (params'.., m'.., v'..) and
// ottr::SGDUpdateN(lr, step, params.., grads.., [bufs..]) -> (params'.., [bufs'..]): every tensor
// of the group in one multi-tensor launch (kMaxPackedTensors per launch; the table travels as
// kernel parameters, so a captured graph replays it with no device table to keep).
absl::StatusOr<CompiledOp> CompileUpdateN(OpCompileContext& ctx, bool adam) {
  // Optional trailing scalars (ir/optimizer_update.h): the loss scale (unscale = 1) and the guard
  // (guarded = 1), both read on the device by the launch.
  const ir::UpdateNLayout layout = ir::UpdateNLayoutOf(ctx.node(), adam);
  if (!layout.valid) {
    return ctx.Error(absl::StrCat("unexpected arity: ", ctx.num_inputs(), " inputs, ", ctx.num_outputs(), " outputs"));
  }
  const int states = layout.states, n = layout.n;
  const int guard_in = layout.guard, scale_in = layout.grad_scale;
  int guard_dtype = 1, scale_dtype = 1;
  if (guard_in >= 0) {
    const DType gt = ctx.input_type(guard_in).dtype;
    if ((gt != DType::kFloat32 && gt != DType::kFloat64 && gt != DType::kBool) ||
        ir::NumElements(ctx.input_dims(guard_in)) != 1) {
      return ctx.Error(absl::StrCat("the guard must be a float, double or bool scalar, got ", ir::DTypeName(gt)));
    }
    guard_dtype = Code(gt);
  }
  if (scale_in >= 0) {
    const DType st = ctx.input_type(scale_in).dtype;
    if ((st != DType::kFloat32 && st != DType::kFloat64) || ir::NumElements(ctx.input_dims(scale_in)) != 1) {
      return ctx.Error(absl::StrCat("the loss scale must be a float or double scalar, got ", ir::DTypeName(st)));
    }
    scale_dtype = Code(st);
  }
  OTTR_ASSIGN_OR_RETURN(const kernels::OptimizerScalars types, ReadScalarTypes(ctx, 0));
  const DType t = ctx.input_type(2).dtype;
  if (t != DType::kFloat32 && t != DType::kFloat64) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), "; expected float32 or float64"));
  }
  std::vector<int64_t> numel(n);
  std::vector<int64_t> scratch(n, -1);  // workspace offset standing in for an unread output
  int64_t workspace = 0;
  for (int k = 0; k < n; ++k) {
    const std::vector<int64_t> dims = ctx.input_dims(2 + k);
    for (int j = 1; j < 2 + states; ++j) {
      const int i = 2 + j * n + k;
      if (!ctx.has_input(i) || ctx.input_type(i).dtype != t || ctx.input_dims(i) != dims) {
        return ctx.Error(absl::StrCat("input ", i, " does not match parameter ", k, " ", ir::DTypeName(t),
                                      DimsString(dims)));
      }
    }
    numel[k] = ir::NumElements(dims);
    if (!ctx.output_needed(k)) {
      scratch[k] = workspace;
      workspace += (numel[k] * static_cast<int64_t>(ir::DTypeSize(t)) + 255) / 256 * 256;
    }
  }
  kernels::AdamHyper ah;
  kernels::SgdHyper sh;
  const ir::Node& node = ctx.node();
  if (adam) {
    ah = AdamHyperOf(node);
  } else {
    sh.momentum = node.GetFloat("momentum", 0.0f);
    sh.dampening = node.GetFloat("dampening", 0.0f);
    sh.weight_decay = node.GetFloat("weight_decay", 0.0f);
    sh.nesterov = node.GetInt("nesterov", 0) != 0;
  }
  const int dtype = Code(t);
  // Low-precision copies (ir/optimizer_update.h): parameter low_copies[j] also written to output
  // first_low + j (when something reads it).
  std::vector<int> low_slot(n, -1);
  int low_dtype = 0;
  if (!layout.low_copies.empty()) {
    const DType low = static_cast<DType>(node.GetInt("low_type", 0));
    if (t != DType::kFloat32 || (low != DType::kBFloat16 && low != DType::kFloat16)) {
      return ctx.Unsupported(absl::StrCat("low-precision copies of ", ir::DTypeName(t), " parameters as ",
                                          ir::DTypeName(low)));
    }
    low_dtype = Code(low);
    for (size_t j = 0; j < layout.low_copies.size(); ++j) {
      const int out = layout.first_low + static_cast<int>(j);
      if (ctx.output_needed(out)) low_slot[layout.low_copies[j]] = out;
    }
  }
  CompiledOp op;
  op.workspace_bytes = workspace;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    NvtxRange range(adam ? "AdamUpdateN" : "SGDUpdateN");
    std::vector<MultiTensorEntry> e(n);
    for (int k = 0; k < n; ++k) {
      e[k].param = a.inputs[2 + k];
      e[k].grad = a.inputs[2 + n + k];
      e[k].param_out = scratch[k] >= 0 ? static_cast<char*>(a.workspace) + scratch[k] : a.outputs[k];
      if (states >= 1) {
        e[k].state0 = a.inputs[2 + 2 * n + k];
        e[k].state0_out = a.outputs[n + k];
      }
      if (states >= 2) {
        e[k].state1 = a.inputs[2 + 3 * n + k];
        e[k].state1_out = a.outputs[2 * n + k];
      }
      e[k].numel = numel[k];
      if (low_slot[k] >= 0) {
        e[k].low_out = a.outputs[low_slot[k]];
        e[k].low_dtype = low_dtype;
      }
    }
    kernels::OptimizerScalars s = types;
    s.lr = a.inputs[0];
    s.step = a.inputs[1];
    if (guard_in >= 0) {
      s.guard = a.inputs[guard_in];
      s.guard_dtype = guard_dtype;
    }
    if (scale_in >= 0) {
      s.grad_scale = a.inputs[scale_in];
      s.grad_scale_dtype = scale_dtype;
    }
    OTTR_CUDA_RETURN_IF_ERROR(adam ? kernels::LaunchPackedAdam(e.data(), n, dtype, ah, s, a.stream, a.programmatic)
                                   : kernels::LaunchPackedSgd(e.data(), n, dtype, sh, s, a.stream, a.programmatic));
    return absl::OkStatus();
  };
  return op;
}

// ottr::MlpStep(lr, step, x, labels, p.., m.., v..) -> (loss, p'.., m'.., v'..): the whole step in
// one cooperative launch (kernels::LaunchMlpStep). An output nobody reads goes to the workspace.
absl::StatusOr<CompiledOp> CompileMlpStep(OpCompileContext& ctx) {
  const int n = (ctx.num_inputs() - 4) / 3;
  const int layers = n / 2;
  if (ctx.num_inputs() != 4 + 3 * n || n != 2 * layers || layers < 1 || ctx.num_outputs() != 1 + 3 * n) {
    return ctx.Error(absl::StrCat("unexpected arity: ", ctx.num_inputs(), " inputs, ", ctx.num_outputs(), " outputs"));
  }
  if (!ctx.libs().tf32()) {
    return ctx.Unsupported("TF32 is off: the fused step's products are TF32 (fuse-mlp-step makes it for TF32 steps)");
  }
  OTTR_ASSIGN_OR_RETURN(const kernels::OptimizerScalars types, ReadScalarTypes(ctx, 0));
  const std::vector<int64_t> xd = ctx.input_dims(2);
  const DType label_type = ctx.input_type(3).dtype;
  if (ctx.input_type(2).dtype != DType::kFloat32 || xd.size() != 2 ||
      (label_type != DType::kInt64 && label_type != DType::kInt32) || ctx.input_dims(3) != std::vector<int64_t>{xd[0]}) {
    return ctx.Error(absl::StrCat("x ", DimsString(xd), " and labels ", DimsString(ctx.input_dims(3)),
                                  " must be float32 [B, D] and int32 / int64 [B]"));
  }
  kernels::MlpStepArgs templ;
  templ.layers = layers;
  templ.batch = xd[0];
  templ.labels64 = label_type == DType::kInt64;
  templ.ignore_index = ctx.node().GetInt("ignore_index", -100);
  if (layers > ir::kMlpStepMaxLayers) return ctx.Unsupported(absl::StrCat(layers, " layers"));
  int64_t width = xd[1];
  std::vector<int64_t> numel(n);
  for (int l = 0; l < layers; ++l) {
    const std::vector<int64_t> wd = ctx.input_dims(4 + 2 * l);
    if (wd.size() != 2 || wd[1] != width || ctx.input_dims(5 + 2 * l) != std::vector<int64_t>{wd[0]}) {
      return ctx.Error(absl::StrCat("layer ", l, ": W ", DimsString(wd), " and b ", DimsString(ctx.input_dims(5 + 2 * l)),
                                    " must be [out, ", width, "] and [out]"));
    }
    templ.layer[l].in = width;
    templ.layer[l].out = wd[0];
    numel[2 * l] = wd[0] * width;
    numel[2 * l + 1] = wd[0];
    width = wd[0];
  }
  for (int i = 4; i < ctx.num_inputs(); ++i) {
    if (ctx.input_type(i).dtype != DType::kFloat32 || ir::NumElements(ctx.input_dims(i)) != numel[(i - 4) % n]) {
      return ctx.Error(absl::StrCat("input ", i, " ", ir::DTypeName(ctx.input_type(i).dtype), DimsString(ctx.input_dims(i)),
                                    " is not the float32 parameter or state it stands for"));
    }
  }
  if (!ir::MlpStepFits(layers, templ.batch, width)) {
    return ctx.Unsupported(absl::StrCat(layers, " layers, ", templ.batch, " rows, ", width, " classes (the kernel takes 2 to ",
                                        ir::kMlpStepMaxLayers, " layers, at most ", ir::kMlpStepMaxRows, " rows and ",
                                        ir::kMlpStepMaxClasses, " classes)"));
  }
  const int64_t own = kernels::MlpStepWorkspaceBytes(templ);
  std::vector<int64_t> scratch(1 + 3 * n, -1);  // workspace offset standing in for an unread output
  int64_t workspace = own;
  for (int o = 0; o < 1 + 3 * n; ++o) {
    if (ctx.output_needed(o)) continue;
    scratch[o] = workspace;
    workspace += ((o == 0 ? 1 : numel[(o - 1) % n]) * 4 + 255) / 256 * 256;
  }
  const kernels::AdamHyper h = AdamHyperOf(ctx.node());
  CompiledOp op;
  op.workspace_bytes = workspace;
  op.counter_bytes = kernels::MlpStepCounterBytes();
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("MlpStep");
    kernels::MlpStepArgs g = templ;
    auto out = [&](int o) {
      return static_cast<float*>(scratch[o] >= 0 ? static_cast<char*>(a.workspace) + scratch[o] : a.outputs[o]);
    };
    auto in = [&](int i) { return static_cast<const float*>(a.inputs[i]); };
    g.x = in(2);
    g.labels = a.inputs[3];
    g.loss = out(0);
    for (int l = 0; l < layers; ++l) {
      kernels::MlpStepLayer& L = g.layer[l];
      const int w = 2 * l, b = 2 * l + 1;
      L.w = in(4 + w);
      L.b = in(4 + b);
      L.mw = in(4 + n + w);
      L.mb = in(4 + n + b);
      L.vw = in(4 + 2 * n + w);
      L.vb = in(4 + 2 * n + b);
      L.w_out = out(1 + w);
      L.b_out = out(1 + b);
      L.mw_out = out(1 + n + w);
      L.mb_out = out(1 + n + b);
      L.vw_out = out(1 + 2 * n + w);
      L.vb_out = out(1 + 2 * n + b);
    }
    kernels::OptimizerScalars s = types;
    s.lr = a.inputs[0];
    s.step = a.inputs[1];
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchMlpStep(g, h, s, a.workspace, a.counters, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::GemmAdamUpdate(lr, step, A [k, m], B [k, n], p.., m.., v..) -> (p'.., m'.., v'..): one
// launch (kernels::LaunchGemmAdam). An output nobody reads is written to the workspace.
absl::StatusOr<CompiledOp> CompileGemmAdamUpdate(OpCompileContext& ctx) {
  const int n = (ctx.num_inputs() - 4) / 3;
  if (ctx.num_inputs() != 4 + 3 * n || (n != 1 && n != 2) || ctx.num_outputs() != 3 * n) {
    return ctx.Error(absl::StrCat("unexpected arity: ", ctx.num_inputs(), " inputs, ", ctx.num_outputs(), " outputs"));
  }
  OTTR_ASSIGN_OR_RETURN(const kernels::OptimizerScalars types, ReadScalarTypes(ctx, 0));
  const std::vector<int64_t> ad = ctx.input_dims(2), bd = ctx.input_dims(3);
  if (ctx.input_type(2).dtype != DType::kFloat32 || ctx.input_type(3).dtype != DType::kFloat32 || ad.size() != 2 ||
      bd.size() != 2 || ad[0] != bd[0]) {
    return ctx.Error(absl::StrCat("A ", DimsString(ad), " and B ", DimsString(bd), " must be float32 [k, m], [k, n]"));
  }
  if (ad[0] > kernels::kGemmAdamMaxK) {
    return ctx.Unsupported(absl::StrCat("k = ", ad[0], " (the kernel keeps at most ", kernels::kGemmAdamMaxK,
                                        " rows of A and B in shared memory)"));
  }
  const std::string bias = ctx.node().GetString("bias", "");
  if (n == 2 && bias != "a" && bias != "b") return ctx.Error("a bias update needs bias = \"a\" or \"b\"");
  std::vector<int64_t> numel(n);
  for (int t = 0; t < n; ++t) {
    const std::vector<int64_t> want = t == 0 ? std::vector<int64_t>{ad[1], bd[1]}
                                             : std::vector<int64_t>{bias == "a" ? ad[1] : bd[1]};
    for (int s = 0; s < 3; ++s) {
      const int i = 4 + s * n + t;
      if (ctx.input_type(i).dtype != DType::kFloat32 || ir::NumElements(ctx.input_dims(i)) != ir::NumElements(want)) {
        return ctx.Error(absl::StrCat("input ", i, " ", ir::DTypeName(ctx.input_type(i).dtype),
                                      DimsString(ctx.input_dims(i)), " is not the float32", DimsString(want),
                                      " of its gradient"));
      }
    }
    numel[t] = ir::NumElements(want);
  }
  std::vector<int64_t> scratch(3 * n, -1);  // workspace offset standing in for an unread output
  int64_t workspace = 0;
  for (int o = 0; o < 3 * n; ++o) {
    if (ctx.output_needed(o)) continue;
    scratch[o] = workspace;
    workspace += (numel[o % n] * 4 + 255) / 256 * 256;
  }
  kernels::GemmAdamArgs templ;
  templ.k = ad[0];
  templ.m = ad[1];
  templ.n = bd[1];
  templ.bias = n == 2 ? (bias == "a" ? 0 : 1) : -1;
  templ.tf32 = ctx.libs().tf32();  // the weight gradient in TF32 when the executor's GEMMs are
  const kernels::AdamHyper h = AdamHyperOf(ctx.node());
  CompiledOp op;
  op.workspace_bytes = workspace;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("GemmAdamUpdate");
    kernels::GemmAdamArgs g = templ;
    g.a = static_cast<const float*>(a.inputs[2]);
    g.b = static_cast<const float*>(a.inputs[3]);
    auto out = [&](int o) {
      return static_cast<float*>(scratch[o] >= 0 ? static_cast<char*>(a.workspace) + scratch[o] : a.outputs[o]);
    };
    for (int t = 0; t < n; ++t) {
      g.param[t] = static_cast<const float*>(a.inputs[4 + t]);
      g.m_in[t] = static_cast<const float*>(a.inputs[4 + n + t]);
      g.v_in[t] = static_cast<const float*>(a.inputs[4 + 2 * n + t]);
      g.param_out[t] = out(t);
      g.m_out[t] = out(n + t);
      g.v_out[t] = out(2 * n + t);
    }
    kernels::OptimizerScalars s = types;
    s.lr = a.inputs[0];
    s.step = a.inputs[1];
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchGemmAdam(g, h, s, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::AllFinite(x_0, ...) -> ok bool[]: a memset and a multi-tensor check (no host sync).
absl::StatusOr<CompiledOp> CompileAllFinite(OpCompileContext& ctx) {
  std::vector<kernels::FiniteCheckEntry> templ(ctx.num_inputs());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const DType t = ctx.has_input(i) ? ctx.input_type(i).dtype : DType::kUndefined;
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kFloat16 && t != DType::kBFloat16) {
      return ctx.Unsupported(absl::StrCat("input ", i, " has element type ", ir::DTypeName(t)));
    }
    templ[i].numel = ir::NumElements(ctx.input_dims(i));
    templ[i].dtype = Code(t);
  }
  CompiledOp op;
  op.launch = [templ](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("AllFinite");
    std::vector<kernels::FiniteCheckEntry> e = templ;
    for (size_t i = 0; i < e.size(); ++i) e[i].data = a.inputs[i];
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchAllFinite(e.data(), static_cast<int>(e.size()),
                                                       static_cast<bool*>(a.outputs[0]), a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::LossScaleUpdate(scale, good_steps, ok) -> (scale', good_steps'): one thread.
absl::StatusOr<CompiledOp> CompileLossScaleUpdate(OpCompileContext& ctx) {
  const DType st = ctx.input_type(0).dtype;
  if (st != DType::kFloat32 && st != DType::kFloat64) {
    return ctx.Unsupported(absl::StrCat("loss scale of element type ", ir::DTypeName(st)));
  }
  if (ctx.input_type(1).dtype != DType::kInt64 || ctx.input_type(2).dtype != DType::kBool) {
    return ctx.Error("expects (scale, int64 good_steps, bool ok)");
  }
  kernels::LossScaleHyper h;
  h.growth_factor = ctx.node().GetFloat("growth_factor", 2.0f);
  h.backoff_factor = ctx.node().GetFloat("backoff_factor", 0.5f);
  h.growth_interval = ctx.node().GetInt("growth_interval", 2000);
  const int dtype = Code(st);
  CompiledOp op;
  // Outputs nobody reads get scratch space (the kernel always writes both).
  op.workspace_bytes = 512;
  const bool need0 = ctx.output_needed(0), need1 = ctx.output_needed(1);
  op.launch = [h, dtype, need0, need1](const LaunchArgs& a) -> absl::Status {
    NvtxRange range("LossScaleUpdate");
    char* ws = static_cast<char*>(a.workspace);
    void* scale_out = need0 && a.outputs[0] != nullptr ? a.outputs[0] : ws;
    void* good_out = need1 && a.outputs[1] != nullptr ? a.outputs[1] : ws + 256;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchLossScaleUpdate(a.inputs[0], dtype, static_cast<const int64_t*>(a.inputs[1]),
                                                             static_cast<const bool*>(a.inputs[2]), scale_out,
                                                             static_cast<int64_t*>(good_out), h, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ai.onnx.preview.training Adam / Adagrad / Momentum: R, T, then `groups` tensors per optimised
// tensor (X, G, states), outputs the new X and states (see runtime/cpu/training_kernels.cc).
absl::StatusOr<CompiledOp> CompileOnnxOptimizer(OpCompileContext& ctx, kernels::OnnxOptimizer kind) {
  const int groups = kind == kernels::OnnxOptimizer::kAdam ? 4 : 3;
  const int n_in = ctx.num_inputs() - 2;
  if (n_in <= 0 || n_in % groups != 0 || ctx.num_outputs() != n_in / groups * (groups - 1)) {
    return ctx.Error(absl::StrCat("expects R, T and ", groups, " tensors per optimised tensor, and ", groups - 1,
                                  " outputs per optimised tensor; got ", ctx.num_inputs(), " inputs and ",
                                  ctx.num_outputs(), " outputs"));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
  }
  const DType r = ctx.input_type(0).dtype;
  if ((r != DType::kFloat32 && r != DType::kFloat64) || ir::NumElements(ctx.input_dims(0)) != 1) {
    return ctx.Error(absl::StrCat("the learning rate R must be a float or double scalar, got ", ir::DTypeName(r),
                                  DimsString(ctx.input_dims(0))));
  }
  if (ctx.input_type(1).dtype != DType::kInt64 || ir::NumElements(ctx.input_dims(1)) != 1) {
    return ctx.Error(absl::StrCat("the update count T must be an int64 scalar, got ",
                                  ir::DTypeName(ctx.input_type(1).dtype), DimsString(ctx.input_dims(1))));
  }
  const int n = n_in / groups;
  std::vector<MultiTensorEntry> templ(n);
  for (int i = 0; i < n; ++i) {
    const std::vector<int64_t> x = ctx.input_dims(2 + i);
    for (int g = 0; g < groups; ++g) {
      const int in = 2 + g * n + i;
      const DType t = ctx.input_type(in).dtype;
      if (t != DType::kFloat32 && t != DType::kFloat64) {
        return ctx.Unsupported(absl::StrCat("input ", in, " has element type ", ir::DTypeName(t),
                                            "; expected float or double"));
      }
      if (ctx.input_dims(in) != x) {
        return ctx.Error(absl::StrCat("input ", in, " has shape ", DimsString(ctx.input_dims(in)),
                                      " but the tensor it belongs to (input ", 2 + i, ") has shape ", DimsString(x)));
      }
      if (t == DType::kFloat64) templ[i].f64_mask |= 1 << g;
    }
    templ[i].numel = ir::NumElements(x);
  }
  const ir::Node& node = ctx.node();
  kernels::OnnxOptimizerHyper h;
  switch (kind) {
    case kernels::OnnxOptimizer::kAdam:
      h.alpha = node.GetFloat("alpha", 0.9f);
      h.beta = node.GetFloat("beta", 0.999f);
      h.epsilon = node.GetFloat("epsilon", 1e-6f);
      h.norm_coefficient = node.GetFloat("norm_coefficient", 0.0f);
      h.norm_coefficient_post = node.GetFloat("norm_coefficient_post", 0.0f);
      break;
    case kernels::OnnxOptimizer::kAdagrad:
      h.alpha = node.GetFloat("decay_factor", 0.0f);
      h.epsilon = node.GetFloat("epsilon", 1e-6f);
      h.norm_coefficient = node.GetFloat("norm_coefficient", 0.0f);
      break;
    case kernels::OnnxOptimizer::kMomentum: {
      const std::string mode = node.GetString("mode", "");
      if (mode != "standard" && mode != "nesterov") {
        return ctx.Error(absl::StrCat("mode must be 'standard' or 'nesterov', got '", mode, "'"));
      }
      h.nesterov = mode == "nesterov";
      h.alpha = node.GetFloat("alpha", 0.0f);
      h.beta = node.GetFloat("beta", 0.0f);
      h.norm_coefficient = node.GetFloat("norm_coefficient", 0.0f);
      break;
    }
  }
  const int r_dtype = Code(r);
  const char* name = kind == kernels::OnnxOptimizer::kAdam      ? "Adam"
                     : kind == kernels::OnnxOptimizer::kAdagrad ? "Adagrad"
                                                                : "Momentum";
  CompiledOp op;
  op.launch = [templ, kind, h, r_dtype, n, groups, name](const LaunchArgs& a) -> absl::Status {
    NvtxRange range(name);
    std::vector<MultiTensorEntry> entries = templ;
    for (int i = 0; i < n; ++i) {
      MultiTensorEntry& e = entries[i];
      e.param = a.inputs[2 + i];
      e.grad = a.inputs[2 + n + i];
      e.state0 = a.inputs[2 + 2 * n + i];
      e.state1 = groups == 4 ? a.inputs[2 + 3 * n + i] : nullptr;
      // Outputs: X'1..n, then the states (state s of tensor i at n * (1 + s) + i); null when
      // nobody reads them (the kernel skips those stores).
      e.param_out = a.outputs[i];
      e.state0_out = a.outputs[n + i];
      e.state1_out = groups == 4 ? a.outputs[2 * n + i] : nullptr;
    }
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::LaunchOnnxOptimizer(kind, entries.data(), n, h, a.inputs[0], r_dtype, a.inputs[1], a.stream));
    return absl::OkStatus();
  };
  return op;
}

}  // namespace

void RegisterOptimizerCudaOps(CudaOpRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  const std::string training(ir::kTrainingDomain);
  r.Register(ottr, "AdamUpdate", CompileAdamUpdate);
  r.Register(ottr, "SGDUpdate", CompileSgdUpdate);
  r.Register(ottr, "AdamUpdateN", [](OpCompileContext& c) { return CompileUpdateN(c, true); });
  r.Register(ottr, "SGDUpdateN", [](OpCompileContext& c) { return CompileUpdateN(c, false); });
  r.Register(ottr, "GemmAdamUpdate", CompileGemmAdamUpdate);
  r.Register(ottr, "MlpStep", CompileMlpStep);
  r.Register(ottr, "AllFinite", CompileAllFinite);
  r.Register(ottr, "LossScaleUpdate", CompileLossScaleUpdate);
  r.Register(training, "Adam", [](OpCompileContext& c) { return CompileOnnxOptimizer(c, kernels::OnnxOptimizer::kAdam); });
  r.Register(training, "Adagrad",
             [](OpCompileContext& c) { return CompileOnnxOptimizer(c, kernels::OnnxOptimizer::kAdagrad); });
  r.Register(training, "Momentum",
             [](OpCompileContext& c) { return CompileOnnxOptimizer(c, kernels::OnnxOptimizer::kMomentum); });
}

}  // namespace ottr::cuda
