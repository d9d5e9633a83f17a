// CUDA ops of the softmax family and the classification losses:
//   Softmax, LogSoftmax, Hardmax (opset-13 form: one axis, default -1), ottr::SoftmaxGrad,
//   ottr::LogSoftmaxGrad; ottr::SoftmaxCrossEntropy(+Grad) (the loss ottr appends for
//   training); ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with their
//   ottr-domain backward ops. Kernels: kernels/softmax_kernels.cu, kernels/loss_kernels.cu.
// Shapes, types and attributes are validated here, once per static shape, with the CPU
// reference's messages (runtime/cpu/loss_kernels.cc, loss_grad_kernels.cc,
// ottr_training_kernels.cc). Label values are only known on the device: see loss_kernels.h for
// what an out-of-range label does.
#include <nvtx3/nvToolsExt.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/loss_kernels.h"
#include "runtime/cuda/kernels/softmax_kernels.h"

namespace ottr::cuda {
namespace {

using ir::DType;
using kernels::LossReduction;
using kernels::SoftmaxKind;

// NVTX range for the lifetime of the object (one per launch, named after the op).
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

absl::Status RequireLabels(const OpCompileContext& ctx, int i) {
  const DType t = ctx.input_type(i).dtype;
  if (t == DType::kInt32 || t == DType::kInt64) return absl::OkStatus();
  return ctx.Unsupported(absl::StrCat("labels have element type ", ir::DTypeName(t), "; expected int32 or int64"));
}

absl::StatusOr<int64_t> NormalizedAxis(const OpCompileContext& ctx, const std::vector<int64_t>& dims,
                                       absl::string_view what) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = ctx.node().GetInt("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for ", what, " of shape ", DimsString(dims)));
  }
  return axis < 0 ? axis + rank : axis;
}

// Workspace sections: each starts at a multiple of 256 bytes.
int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// ---------------------------------------------------------------------------------------------
// Softmax / LogSoftmax / Hardmax and their backward ops.

const char* KindName(SoftmaxKind k) {
  switch (k) {
    case SoftmaxKind::kSoftmax: return "Softmax";
    case SoftmaxKind::kLogSoftmax: return "LogSoftmax";
    case SoftmaxKind::kHardmax: return "Hardmax";
    case SoftmaxKind::kSoftmaxGrad: return "SoftmaxGrad";
    case SoftmaxKind::kLogSoftmaxGrad: return "LogSoftmaxGrad";
  }
  return "Softmax";
}

absl::StatusOr<CompiledOp> CompileSoftmax(OpCompileContext& ctx, SoftmaxKind kind) {
  const bool backward = kind == SoftmaxKind::kSoftmaxGrad || kind == SoftmaxKind::kLogSoftmaxGrad;
  const int data = backward ? 1 : 0;  // the tensor that fixes type and shape (X or Y)
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, data, backward ? "Y" : "input"));
  const std::vector<int64_t> dims = ctx.input_dims(data);
  if (backward && (ctx.input_type(0).dtype != ctx.input_type(1).dtype || ctx.input_dims(0) != dims)) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(ctx.input_type(0).dtype), DimsString(ctx.input_dims(0)),
                                  " does not match Y ", ir::DTypeName(ctx.input_type(1).dtype), DimsString(dims)));
  }
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, NormalizedAxis(ctx, dims, backward ? "Y" : "input"));
  const int64_t outer = Product(dims, 0, axis);
  const int64_t n = dims[axis];
  const int64_t inner = Product(dims, axis + 1, dims.size());
  const int dtype = Code(ctx.input_type(data).dtype);
  CompiledOp op;
  op.launch = [kind, dtype, outer, n, inner](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range(KindName(kind));
    const void* first = a.inputs[0];
    const void* second = a.inputs.size() > 1 ? a.inputs[1] : nullptr;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSoftmax(kind, dtype, first, second, a.outputs[0], outer, n, inner, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// ottr::SoftmaxCrossEntropy and ottr::SoftmaxCrossEntropyGrad.

// Inputs 0 and 1 of the SCE ops: float logits [N, C] and int labels [N]; returns [N, C].
absl::StatusOr<std::vector<int64_t>> SceLogitsAndLabels(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "logits"));
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, 1));
  const std::vector<int64_t> dims = ctx.input_dims(0);
  if (dims.size() != 2) return ctx.Error(absl::StrCat("logits must be [N, C], got ", DimsString(dims)));
  if (ctx.input_dims(1) != std::vector<int64_t>{dims[0]}) {
    return ctx.Error(absl::StrCat("labels ", DimsString(ctx.input_dims(1)), " must be [N] for logits ", DimsString(dims)));
  }
  return dims;
}

absl::StatusOr<CompiledOp> CompileSce(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, SceLogitsAndLabels(ctx));
  const int dtype = Code(ctx.input_type(0).dtype);
  const bool labels64 = ctx.input_type(1).dtype == DType::kInt64;
  const int64_t n = dims[0], c = dims[1];
  const int64_t ignore = ctx.node().GetInt("ignore_index", -100);
  const float eps = ctx.node().GetFloat("label_smoothing", 0.0f);
  const int64_t kernel_ws = Align256(kernels::SceForwardWorkspaceBytes(n, c));
  CompiledOp op;
  // A scalar slot after the kernel's workspace receives the loss when nobody reads it.
  op.workspace_bytes = kernel_ws + 256;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    void* loss = a.outputs[0];
    void* log_prob = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    if (loss == nullptr && log_prob == nullptr) return absl::OkStatus();
    if (loss == nullptr) loss = static_cast<char*>(a.workspace) + kernel_ws;
    NvtxRange range("SoftmaxCrossEntropy");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSceForward(dtype, a.inputs[0], a.inputs[1], labels64, loss, log_prob, n, c,
                                                        ignore, eps, a.workspace, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileSceGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "dloss"));
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 1, "log_prob"));
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, 2));
  const std::vector<int64_t> dims = ctx.input_dims(1);
  if (dims.size() != 2) return ctx.Error(absl::StrCat("log_prob must be [N, C], got ", DimsString(dims)));
  if (ir::NumElements(ctx.input_dims(0)) != 1) {
    return ctx.Error(absl::StrCat("dloss must be a scalar, got ", DimsString(ctx.input_dims(0))));
  }
  if (ctx.input_dims(2) != std::vector<int64_t>{dims[0]}) {
    return ctx.Error(absl::StrCat("labels ", DimsString(ctx.input_dims(2)), " must be [N] for log_prob ",
                                  DimsString(dims)));
  }
  const int dtype = Code(ctx.input_type(1).dtype);
  const int dloss_dtype = Code(ctx.input_type(0).dtype);
  const bool labels64 = ctx.input_type(2).dtype == DType::kInt64;
  const int64_t n = dims[0], c = dims[1];
  const int64_t ignore = ctx.node().GetInt("ignore_index", -100);
  const float eps = ctx.node().GetFloat("label_smoothing", 0.0f);
  CompiledOp op;
  op.workspace_bytes = kernels::SceBackwardWorkspaceBytes(n, c);
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("SoftmaxCrossEntropyGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSceBackward(dtype, dloss_dtype, a.inputs[0], a.inputs[1], a.inputs[2],
                                                         labels64, a.outputs[0], n, c, ignore, eps, a.workspace,
                                                         a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::SoftmaxCrossEntropyWithGrad (fuse-sce-grad): the loss and dlogits, no log_prob.
absl::StatusOr<CompiledOp> CompileSceWithGrad(OpCompileContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, SceLogitsAndLabels(ctx));
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 2, "dloss"));
  if (ir::NumElements(ctx.input_dims(2)) != 1) {
    return ctx.Error(absl::StrCat("dloss must be a scalar, got ", DimsString(ctx.input_dims(2))));
  }
  const DType lt = ctx.input_type(0).dtype, gt = ctx.output_type(1).dtype;
  if (gt != lt && !(lt == DType::kFloat32 && (gt == DType::kBFloat16 || gt == DType::kFloat16))) {
    return ctx.Error(absl::StrCat("dlogits in ", ir::DTypeName(gt), " from ", ir::DTypeName(lt),
                                  " logits is not supported (the logits' type, or bf16/f16 from f32)"));
  }
  const int dtype = Code(lt), grad_dtype = Code(gt), dloss_dtype = Code(ctx.input_type(2).dtype);
  const bool labels64 = ctx.input_type(1).dtype == DType::kInt64;
  // `classes`: the loss is over the first `classes` columns of wider rows (the padding of the GEMM
  // before, fuse-sce-grad); dlogits is as wide, zero past them.
  const int64_t n = dims[0], ld = dims[1];
  const int64_t c = ctx.node().GetInt("classes", 0) > 0 ? ctx.node().GetInt("classes", 0) : ld;
  if (c > ld) return ctx.Error(absl::StrCat("classes ", c, " exceeds the logits' ", ld, " columns"));
  const int64_t ignore = ctx.node().GetInt("ignore_index", -100);
  const float eps = ctx.node().GetFloat("label_smoothing", 0.0f);
  // A third output (fuse-sce-bgrad): the column sums of dlogits, float32 only.
  const bool bias_grad = ctx.num_outputs() > 2;
  if (bias_grad && (lt != DType::kFloat32 || gt != DType::kFloat32 || ctx.output_type(2).dtype != DType::kFloat32)) {
    return ctx.Error(absl::StrCat("the column sums of dlogits (a third output) need float32 logits and dlogits, got ",
                                  ir::DTypeName(lt), " and ", ir::DTypeName(gt)));
  }
  // The labels' count made before (ottr::CountLabels, count-labels-early): an int64 scalar.
  const bool has_count = ctx.has_input(3);
  if (has_count && (ctx.input_type(3).dtype != DType::kInt64 || ir::NumElements(ctx.input_dims(3)) != 1)) {
    return ctx.Error(absl::StrCat("count (input 3) must be an int64 scalar, got ", ir::DTypeName(ctx.input_type(3).dtype),
                                  DimsString(ctx.input_dims(3))));
  }
  const int64_t kernel_ws = Align256(kernels::SceWithGradWorkspaceBytes(n, c));
  const int64_t bias_ws = bias_grad ? Align256(kernels::SceBiasGradWorkspaceBytes(n, ld)) : 0;
  // The column sums read by someone while dlogits are not: the kernel writes dlogits here.
  const int64_t dx_ws = bias_grad && ctx.output_needed(2) && !ctx.output_needed(1) ? Align256(n * ld * 4) : 0;
  CompiledOp op;
  // A scalar slot after the kernel's workspaces receives the loss when nobody reads it.
  op.workspace_bytes = kernel_ws + bias_ws + dx_ws + 256;
  op.counter_bytes = kernels::SceWithGradCounterBytes(n, ld);
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    char* ws = static_cast<char*>(a.workspace);
    void* loss = a.outputs[0] != nullptr ? a.outputs[0] : ws + kernel_ws + bias_ws + dx_ws;
    NvtxRange range("SoftmaxCrossEntropyWithGrad");
    float* dbias = bias_grad ? static_cast<float*>(a.outputs[2]) : nullptr;
    void* dlogits = a.outputs[1] != nullptr ? a.outputs[1] : dbias != nullptr ? ws + kernel_ws + bias_ws : nullptr;
    if (dlogits == nullptr) {  // nobody reads dlogits or their sums: the loss alone
      OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSceForward(dtype, a.inputs[0], a.inputs[1], labels64, loss, nullptr, n,
                                                          c, ignore, eps, a.workspace, a.stream, ld));
      return absl::OkStatus();
    }
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSceWithGrad(dtype, grad_dtype, dloss_dtype, a.inputs[0], a.inputs[1],
                                                         labels64, a.inputs[2], loss, dlogits, n, c, ignore, eps,
                                                         a.workspace, a.stream, a.counters, ld, dbias,
                                                         dbias != nullptr ? ws + kernel_ws : nullptr,
                                                         has_count ? a.inputs[3] : nullptr));
    return absl::OkStatus();
  };
  return op;
}

// ottr::CountLabels (count-labels-early): labels [N] -> the int64 count of those not ignore_index.
absl::StatusOr<CompiledOp> CompileCountLabels(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, 0));
  const std::vector<int64_t> dims = ctx.input_dims(0);
  if (dims.size() != 1) return ctx.Error(absl::StrCat("labels must be [N], got ", DimsString(dims)));
  const bool labels64 = ctx.input_type(0).dtype == DType::kInt64;
  const int64_t n = dims[0];
  const int64_t ignore = ctx.node().GetInt("ignore_index", -100);
  CompiledOp op;
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("CountLabels");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchCountLabels(a.inputs[0], labels64, n, ignore, a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::LinearSoftmaxCrossEntropyWithGrad (fuse-linear-sce): x [N, K], w, [bias], labels, dloss,
// [mask] -> loss, dlogits, dx, [dbias] {classes, relu_x}; one launch (kernels::LaunchLinearSce).
absl::StatusOr<CompiledOp> CompileLinearSce(OpCompileContext& ctx) {
  for (int i : {0, 1, 2, 4}) {
    if (i == 2 && !ctx.has_input(2)) continue;
    if (ctx.input_type(i).dtype != DType::kFloat32) {
      return ctx.Unsupported(absl::StrCat("input ", i, " has element type ", ir::DTypeName(ctx.input_type(i).dtype),
                                          "; the fused classifier, loss and gradient are float32"));
    }
  }
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, 3));
  const std::vector<int64_t> xd = ctx.input_dims(0), wd = ctx.input_dims(1);
  if (xd.size() != 2 || wd.size() != 2) {
    return ctx.Error(absl::StrCat("x and w must be matrices, got ", DimsString(xd), " and ", DimsString(wd)));
  }
  const bool trans_b = ctx.node().GetInt("transB", 0) != 0;
  const int64_t n = xd[0], k = xd[1];
  const int64_t c = trans_b ? wd[0] : wd[1];  // the GEMM's columns
  if ((trans_b ? wd[1] : wd[0]) != k) {
    return ctx.Error(absl::StrCat("x ", DimsString(xd), " and w ", DimsString(wd), " disagree on K"));
  }
  const int64_t classes_attr = ctx.node().GetInt("classes", 0);
  if (classes_attr < 0 || classes_attr > c) {
    return ctx.Error(absl::StrCat("classes ", classes_attr, " is outside [0, ", c, "] (the weight's classes)"));
  }
  const int64_t classes = classes_attr > 0 ? classes_attr : c;
  const bool col_sums = ctx.num_outputs() > 3;
  if (!ir::LinearSceFits(classes, k, col_sums)) {
    return ctx.Unsupported(absl::StrCat(classes, " classes of ", k, " features (the fused kernel holds at most ",
                                        ir::kLinearSceMaxClasses, " classes, and the weight with ",
                                        ir::kLinearSceWarps, " rows", col_sums ? " and column sums" : "", " in ",
                                        ir::kLinearSceMaxSmemBytes, " bytes of shared memory)"));
  }
  if (ctx.input_dims(3) != std::vector<int64_t>{n}) {
    return ctx.Error(absl::StrCat("labels ", DimsString(ctx.input_dims(3)), " must be [", n, "]"));
  }
  if (ir::NumElements(ctx.input_dims(4)) != 1) {
    return ctx.Error(absl::StrCat("dloss must be a scalar, got ", DimsString(ctx.input_dims(4))));
  }
  if (ctx.has_input(2) && ir::NumElements(ctx.input_dims(2)) != c) {
    return ctx.Error(absl::StrCat("bias ", DimsString(ctx.input_dims(2)), " must have ", c, " elements"));
  }
  const bool has_mask = ctx.has_input(5);
  const bool relu_x = ctx.node().GetInt("relu_x", 0) != 0;
  if (has_mask && relu_x) return ctx.Error("relu_x = 1 and a ReLU mask: dx goes through one activation");
  const int64_t mask_ld = ir::ReluMaskRowBytes(k);
  if (has_mask && (ctx.input_type(5).dtype != DType::kUInt8 || ir::NumElements(ctx.input_dims(5)) != n * mask_ld)) {
    return ctx.Error(absl::StrCat("the ReLU mask ", ctx.input_type(5).ToString(), " must be u8[", n, ",", mask_ld, "]"));
  }
  kernels::LinearSceArgs base;
  base.labels64 = ctx.input_type(3).dtype == DType::kInt64;
  base.dloss_dtype = Code(ctx.input_type(4).dtype);
  base.mask_ld = mask_ld;
  base.n = n;
  base.k = k;
  base.c = static_cast<int>(classes);
  base.ldc = static_cast<int>(c);
  base.relu_x = relu_x;
  base.trans_b = trans_b;
  base.ignore_index = ctx.node().GetInt("ignore_index", -100);
  base.label_smoothing = ctx.node().GetFloat("label_smoothing", 0.0f);
  // Outputs nobody reads go to the workspace, after the kernel's partials.
  const int64_t kernel_ws = Align256(kernels::LinearSceWorkspaceBytes(n, k, col_sums));
  const int64_t loss_ws = 256;
  const int64_t dlogits_ws = ctx.output_needed(1) ? 0 : Align256(n * c * 4);
  const int64_t dx_ws = ctx.output_needed(2) ? 0 : Align256(n * k * 4);
  const int64_t dbias_ws = col_sums && !ctx.output_needed(3) ? Align256(k * 4) : 0;
  CompiledOp op;
  op.workspace_bytes = kernel_ws + loss_ws + dlogits_ws + dx_ws + dbias_ws;
  op.counter_bytes = kernels::LinearSceCounterBytes();
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    char* ws = static_cast<char*>(a.workspace);
    kernels::LinearSceArgs args = base;
    args.x = static_cast<const float*>(a.inputs[0]);
    args.w = static_cast<const float*>(a.inputs[1]);
    args.w_ready = a.programmatic && a.ready(1);
    args.bias = static_cast<const float*>(a.inputs[2]);
    args.labels = a.inputs[3];
    args.dloss = a.inputs[4];
    args.mask = has_mask ? static_cast<const uint8_t*>(a.inputs[5]) : nullptr;
    args.loss = static_cast<float*>(a.outputs[0] != nullptr ? a.outputs[0] : ws + kernel_ws);
    args.dlogits = static_cast<float*>(a.outputs[1] != nullptr ? a.outputs[1] : ws + kernel_ws + loss_ws);
    args.dx = static_cast<float*>(a.outputs[2] != nullptr ? a.outputs[2] : ws + kernel_ws + loss_ws + dlogits_ws);
    if (col_sums) {
      args.dbias = static_cast<float*>(a.outputs[3] != nullptr ? a.outputs[3]
                                                                : ws + kernel_ws + loss_ws + dlogits_ws + dx_ws);
    }
    NvtxRange range("LinearSoftmaxCrossEntropyWithGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchLinearSce(args, a.workspace, a.counters, a.stream, a.programmatic));
    return absl::OkStatus();
  };
  return op;
}

// ottr::LinearSceReluGrad (fuse-linear-sce-relu-grad): Y, W, [bias], labels, dloss, count ->
// loss, dX, dB, dW, dBz {classes, weight_rows}; one cooperative launch (kernels/loss_kernels.h).
// Its products are TF32 (the GEMMs it replaces were): TF32 steps only.
absl::StatusOr<CompiledOp> CompileLinearSceReluGrad(OpCompileContext& ctx) {
  for (int i : {0, 1, 2, 4}) {
    if (i == 2 && !ctx.has_input(2)) continue;
    if (ctx.input_type(i).dtype != DType::kFloat32) {
      return ctx.Unsupported(absl::StrCat("input ", i, " has element type ", ir::DTypeName(ctx.input_type(i).dtype),
                                          "; the fused head is float32"));
    }
  }
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, 3));
  if (!ctx.libs().tf32()) {
    return ctx.Unsupported("TF32 is off: the fused head's products are TF32 (fuse-linear-sce-relu-grad makes it for TF32 "
                           "steps only)");
  }
  const std::vector<int64_t> yd = ctx.input_dims(0), wd = ctx.input_dims(1);
  if (yd.size() != 2 || wd.size() != 2 || yd[1] != wd[1]) {
    return ctx.Error(absl::StrCat("Y ", DimsString(yd), " and W ", DimsString(wd), " must be [R, N] and [K, N]"));
  }
  const int64_t n = yd[0], cols = yd[1], k = wd[0];
  if (!kernels::LinearSceReluGradFits(cols, k)) {
    return ctx.Unsupported(absl::StrCat("Y ", DimsString(yd), " and W ", DimsString(wd),
                                        " (the kernel takes N of 128, 256 or 512 and K of 1 to 16)"));
  }
  const int64_t classes = ctx.node().GetInt("classes", 0), rows = ctx.node().GetInt("weight_rows", 0);
  if (classes < 0 || classes > k || rows < 0 || rows > k) {
    return ctx.Error(absl::StrCat("classes = ", classes, " and weight_rows = ", rows, " must be 0 to K = ", k));
  }
  if (ctx.input_dims(3) != std::vector<int64_t>{n}) {
    return ctx.Error(absl::StrCat("labels ", DimsString(ctx.input_dims(3)), " must be [", n, "]"));
  }
  if (ir::NumElements(ctx.input_dims(4)) != 1 || ir::NumElements(ctx.input_dims(5)) != 1 ||
      ctx.input_type(5).dtype != DType::kInt64) {
    return ctx.Error("dloss and count must be scalars, count int64 (ottr::CountLabels)");
  }
  if (ctx.has_input(2) && ir::NumElements(ctx.input_dims(2)) != k) {
    return ctx.Error(absl::StrCat("bias ", DimsString(ctx.input_dims(2)), " must have ", k, " elements"));
  }
  const int grid = kernels::LinearSceReluGradGrid(n, cols);
  if (grid < 1) return ctx.Unsupported("the fused head's block does not fit this device's shared memory");
  kernels::LinearSceReluGradArgs base;
  base.labels64 = ctx.input_type(3).dtype == DType::kInt64;
  base.dloss_dtype = Code(ctx.input_type(4).dtype);
  base.n = n;
  base.cols = cols;
  base.k = static_cast<int>(k);
  base.c = static_cast<int>(classes > 0 ? classes : k);
  base.weight_rows = static_cast<int>(rows > 0 ? rows : k);
  base.ignore_index = ctx.node().GetInt("ignore_index", -100);
  base.label_smoothing = ctx.node().GetFloat("label_smoothing", 0.0f);
  // Outputs nobody reads go to the workspace, after the kernel's partials.
  const int64_t kernel_ws = Align256(kernels::LinearSceReluGradWorkspaceBytes(grid, cols, base.weight_rows));
  std::vector<int64_t> spare(5, -1);
  int64_t bytes = kernel_ws;
  for (int i = 0; i < 5; ++i) {
    if (ctx.output_needed(i)) continue;
    spare[i] = bytes;
    bytes += Align256(std::max<int64_t>(1, ir::NumElements(ctx.output_dims(i))) * 4);
  }
  CompiledOp op;
  op.workspace_bytes = bytes;
  op.counter_bytes = kernels::LinearSceReluGradCounterBytes();
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    char* ws = static_cast<char*>(a.workspace);
    auto out = [&](int i) { return static_cast<float*>(spare[i] >= 0 ? ws + spare[i] : a.outputs[i]); };
    kernels::LinearSceReluGradArgs args = base;
    args.y = static_cast<const float*>(a.inputs[0]);
    args.w = static_cast<const float*>(a.inputs[1]);
    args.bias = static_cast<const float*>(a.inputs[2]);
    args.labels = a.inputs[3];
    args.dloss = a.inputs[4];
    args.count = static_cast<const int64_t*>(a.inputs[5]);
    args.loss = out(0);
    args.dx = out(1);
    args.db = out(2);
    args.dw = out(3);
    args.dbz = out(4);
    NvtxRange range("LinearSceReluGrad");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchLinearSceReluGrad(args, grid, a.workspace, a.counters, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// ONNX SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss and their backward ops.

struct ClassLossConfig {
  int64_t n = 0, c = 0, d = 1;
  std::vector<int64_t> loss_dims;
  LossReduction reduction = LossReduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
  bool labels64 = false;
  bool has_weights = false;
  int weights_dtype = 1;
};

// Validates input `data` [N, C, d..], labels (input `labels`) [N, d..] and the optional weights
// (input `weights`) [C], and reads the reduction and ignore_index attributes.
absl::StatusOr<ClassLossConfig> ReadClassLoss(const OpCompileContext& ctx, int data, int labels, int weights) {
  ClassLossConfig cfg;
  const std::vector<int64_t> dims = ctx.input_dims(data);
  if (dims.size() < 2) {
    return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ", DimsString(dims)));
  }
  OTTR_RETURN_IF_ERROR(RequireLabels(ctx, labels));
  cfg.loss_dims = dims;
  cfg.loss_dims.erase(cfg.loss_dims.begin() + 1);
  if (ctx.input_dims(labels) != cfg.loss_dims) {
    return ctx.Error(absl::StrCat("labels of shape ", DimsString(ctx.input_dims(labels)), " do not match input of shape ",
                                  DimsString(dims), " (expected ", DimsString(cfg.loss_dims), ")"));
  }
  cfg.n = dims[0];
  cfg.c = dims[1];
  cfg.d = Product(dims, 2, dims.size());
  cfg.labels64 = ctx.input_type(labels).dtype == DType::kInt64;
  if (ctx.has_input(weights)) {
    OTTR_RETURN_IF_ERROR(RequireFloat(ctx, weights, "weights"));
    const std::vector<int64_t> w = ctx.input_dims(weights);
    if (w.size() != 1 || w[0] != cfg.c) {
      return ctx.Error(absl::StrCat("weights of shape ", DimsString(w), " must be [C] = [", cfg.c, "]"));
    }
    cfg.has_weights = true;
    cfg.weights_dtype = Code(ctx.input_type(weights).dtype);
  }
  const std::string reduction = ctx.node().GetString("reduction", "mean");
  if (reduction == "none") {
    cfg.reduction = LossReduction::kNone;
  } else if (reduction == "sum") {
    cfg.reduction = LossReduction::kSum;
  } else if (reduction == "mean") {
    cfg.reduction = LossReduction::kMean;
  } else {
    return ctx.Error(absl::StrCat("reduction must be 'none', 'sum' or 'mean', got '", reduction, "'"));
  }
  cfg.has_ignore = ctx.node().has_attr("ignore_index");
  cfg.ignore_index = ctx.node().GetInt("ignore_index", 0);
  return cfg;
}

// SoftmaxCrossEntropyLoss (softmax = true): log_prob = LogSoftmax(scores, axis 1) into output 1
// or the workspace, then the NLL of it. NegativeLogLikelihoodLoss: the NLL of the input.
absl::StatusOr<CompiledOp> CompileClassLoss(OpCompileContext& ctx, bool softmax) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, softmax ? "scores" : "input"));
  OTTR_ASSIGN_OR_RETURN(const ClassLossConfig cfg, ReadClassLoss(ctx, 0, 1, 2));
  const DType t = ctx.input_type(0).dtype;
  const int dtype = Code(t);
  const int64_t logp_bytes = softmax ? Align256(cfg.n * cfg.c * cfg.d * static_cast<int64_t>(ir::DTypeSize(t))) : 0;
  CompiledOp op;
  op.workspace_bytes = logp_bytes + kernels::NllLossWorkspaceBytes(cfg.n, cfg.c, cfg.d);
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    void* log_prob = softmax && a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    if (a.outputs[0] == nullptr && log_prob == nullptr) return absl::OkStatus();
    NvtxRange range(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss");
    const void* logp = a.inputs[0];
    void* ws = a.workspace;
    if (softmax) {
      if (log_prob == nullptr) log_prob = a.workspace;
      ws = static_cast<char*>(a.workspace) + logp_bytes;
      OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchSoftmax(SoftmaxKind::kLogSoftmax, dtype, a.inputs[0], nullptr, log_prob,
                                                       cfg.n, cfg.c, cfg.d, a.stream));
      logp = log_prob;
    }
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    const void* weights = cfg.has_weights ? a.inputs[2] : nullptr;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchNllLoss(dtype, logp, a.inputs[1], cfg.labels64, weights, cfg.weights_dtype,
                                                     a.outputs[0], cfg.n, cfg.c, cfg.d, cfg.reduction, cfg.has_ignore,
                                                     cfg.ignore_index, ws, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::SoftmaxCrossEntropyLossGrad / ottr::NegativeLogLikelihoodLossGrad
//   (dloss, log_prob or input, labels, [weights]) -> (dx, [dweights]).
absl::StatusOr<CompiledOp> CompileClassLossGrad(OpCompileContext& ctx, bool softmax) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 1, "input"));
  OTTR_ASSIGN_OR_RETURN(const ClassLossConfig cfg, ReadClassLoss(ctx, 1, 2, 3));
  const bool none = cfg.reduction == LossReduction::kNone;
  const std::vector<int64_t> dl = ctx.input_dims(0);
  if (!ir::IsFloat(ctx.input_type(0).dtype) || (none ? dl != cfg.loss_dims : ir::NumElements(dl) != 1)) {
    return ctx.Error(absl::StrCat("dloss ", ir::DTypeName(ctx.input_type(0).dtype), DimsString(dl),
                                  " must be a float tensor shaped like the loss (",
                                  none ? DimsString(cfg.loss_dims) : std::string("a scalar"), ")"));
  }
  const bool want_dw = ctx.num_outputs() > 1 && ctx.output_needed(1);
  if (want_dw && !cfg.has_weights) return ctx.Error("the weights gradient needs the weights input");
  const int dtype = Code(ctx.input_type(1).dtype);
  const int dloss_dtype = Code(ctx.input_type(0).dtype);
  CompiledOp op;
  op.workspace_bytes = kernels::ClassLossGradWorkspaceBytes(cfg.n, cfg.c, cfg.d);
  op.launch = [=](const LaunchArgs& a) -> absl::Status {
    void* dx = a.outputs[0];
    void* dw = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
    if (dx == nullptr && dw == nullptr) return absl::OkStatus();
    NvtxRange range(softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad");
    const void* weights = cfg.has_weights ? a.inputs[3] : nullptr;
    OTTR_CUDA_RETURN_IF_ERROR(kernels::LaunchClassLossGrad(softmax, dtype, dloss_dtype, a.inputs[0], a.inputs[1],
                                                           a.inputs[2], cfg.labels64, weights, cfg.weights_dtype, dx, dw,
                                                           cfg.n, cfg.c, cfg.d, cfg.reduction, cfg.has_ignore,
                                                           cfg.ignore_index, a.workspace, a.stream));
    return absl::OkStatus();
  };
  return op;
}

}  // namespace

void RegisterLossCudaOps(CudaOpRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  r.Register("", "Softmax", [](OpCompileContext& c) { return CompileSoftmax(c, SoftmaxKind::kSoftmax); });
  r.Register("", "LogSoftmax", [](OpCompileContext& c) { return CompileSoftmax(c, SoftmaxKind::kLogSoftmax); });
  r.Register("", "Hardmax", [](OpCompileContext& c) { return CompileSoftmax(c, SoftmaxKind::kHardmax); });
  r.Register(ottr, "SoftmaxGrad", [](OpCompileContext& c) { return CompileSoftmax(c, SoftmaxKind::kSoftmaxGrad); });
  r.Register(ottr, "LogSoftmaxGrad",
             [](OpCompileContext& c) { return CompileSoftmax(c, SoftmaxKind::kLogSoftmaxGrad); });
  r.Register(ottr, "SoftmaxCrossEntropy", CompileSce);
  r.Register(ottr, "SoftmaxCrossEntropyGrad", CompileSceGrad);
  r.Register(ottr, "SoftmaxCrossEntropyWithGrad", CompileSceWithGrad);
  r.Register(ottr, "CountLabels", CompileCountLabels);
  r.Register(ottr, "LinearSceReluGrad", CompileLinearSceReluGrad);
  r.Register(ottr, "LinearSoftmaxCrossEntropyWithGrad", CompileLinearSce);
  r.Register("", "SoftmaxCrossEntropyLoss", [](OpCompileContext& c) { return CompileClassLoss(c, true); });
  r.Register("", "NegativeLogLikelihoodLoss", [](OpCompileContext& c) { return CompileClassLoss(c, false); });
  r.Register(ottr, "SoftmaxCrossEntropyLossGrad", [](OpCompileContext& c) { return CompileClassLossGrad(c, true); });
  r.Register(ottr, "NegativeLogLikelihoodLossGrad",
             [](OpCompileContext& c) { return CompileClassLossGrad(c, false); });
}

}  // namespace ottr::cuda
