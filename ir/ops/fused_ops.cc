// Schemas of the ops the fusion passes make. ottr::FusedGemm's contract is in ir/fused_gemm.h.
// Fusion runs on the training step after autodiff, so fused ops have no gradient rule.
//
// ottr::ReluGradBiasGrad(dY, Y) -> (dX, dB[, dXT]) {bias_type}: the backward of a ReLU layer and
// the bias gradient of the layer that produced Y, in one pass over dY (fuse-relu-grad-bgrad):
//   dX[r, c] = Y[r, c] > 0 ? dY[r, c] : 0        (dY's type, as ottr::ReluGrad)
//   dB[c]    = Σ_r dX[r, c]                      (summed in float32 or wider, stored as bias_type)
//   dXT[c, r] = dX[r, c]                         (optional: the K-major operand of the layer's
//                                                 weight gradient, kmajor-gemm-operands)
// dY and Y are one static 2-D float type; bias_type (an ONNX element type) is dY's type, or
// float32 for 16-bit dY (default: dY's type).
//
// ottr::LinearReluGrad(dZ, W, Y) -> (dX, dB[, dW, dBz]): the backward of a small linear layer
// z = Y·Wᵀ + bz (W [K, N], K <= kLinearReluGradMaxK) through the ReLU that made its input Y, in one
// pass over Y (fuse-linear-relu-grad):
//   dX[r, c]  = Y[r, c] > 0 ? Σ_j dZ[r, j]·W[j, c] : 0   (the data gradient and ReluGrad)
//   dB[c]     = Σ_r dX[r, c]                             (the bias gradient of Y's layer)
//   dW[j, c]  = Σ_r dZ[r, j]·Y[r, c]                     (optional: the layer's weight gradient)
//   dBz[j]    = Σ_r dZ[r, j]                             (optional, with dW: its bias gradient)
// dZ [R, K], W [K, N] and Y [R, N] are static 2-D float32. {weight_rows = M} (M <= K, default K):
// dW and dBz hold only their first M rows (a classifier padded to K columns by pad-gemm-dims,
// whose gradients the step slices back to M).
//
// ottr::LinearSceReluGrad(Y, W, bz, labels, dloss, count) -> (loss, dX, dB, dW, dBz): a
// classifier head z = Y·Wᵀ + bz (W [K, N], K <= kLinearReluGradMaxK) on a ReLU's output Y, its
// softmax cross-entropy and the backward through both (fuse-linear-sce-relu-grad, TF32 steps):
//   loss, dZ  = SoftmaxCrossEntropyWithGrad(z, labels, dloss, count) {classes = C, the first C of
//               K columns; the others get zero gradients}, dZ not an output
//   dX, dB, dW, dBz = LinearReluGrad(dZ, W, Y) {weight_rows}
// bz may be omitted (empty input); labels int32/int64 [R]; dloss a float scalar; count the int64
// scalar ottr::CountLabels made of the labels. Attributes: ignore_index, label_smoothing, classes
// (0: K), weight_rows (0: K). Y [R, N], W [K, N] static 2-D float32.
//
// ottr::GroupedGemm(A0, B0, A1, B1, ...) -> (Y0, Y1, ...) {transA, transB: ints; alpha: floats,
// one per product}: Yi = alpha[i] · op(Ai) · op(Bi), independent products of one element type run
// as one grouped launch (group-gemms). Every operand is a static 2-D matrix of one float type;
// 2 to kGroupedGemmMaxProducts products.
#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {

std::optional<FusedEpilogue> ParseFusedEpilogue(absl::string_view name) {
  for (FusedEpilogue e :
       {FusedEpilogue::kNone, FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kReluAuxBias, FusedEpilogue::kGeluBias,
        FusedEpilogue::kGeluAuxBias, FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad, FusedEpilogue::kDGelu,
        FusedEpilogue::kDGeluBgrad, FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
    if (name == FusedEpilogueName(e)) return e;
  }
  return std::nullopt;
}

const char* FusedEpilogueName(FusedEpilogue e) {
  switch (e) {
    case FusedEpilogue::kNone: return "none";
    case FusedEpilogue::kBias: return "bias";
    case FusedEpilogue::kReluBias: return "relu_bias";
    case FusedEpilogue::kReluAuxBias: return "relu_aux_bias";
    case FusedEpilogue::kGeluBias: return "gelu_bias";
    case FusedEpilogue::kGeluAuxBias: return "gelu_aux_bias";
    case FusedEpilogue::kDRelu: return "drelu";
    case FusedEpilogue::kDReluBgrad: return "drelu_bgrad";
    case FusedEpilogue::kDGelu: return "dgelu";
    case FusedEpilogue::kDGeluBgrad: return "dgelu_bgrad";
    case FusedEpilogue::kBgradA: return "bgrada";
    case FusedEpilogue::kBgradB: return "bgradb";
  }
  return "?";
}

namespace {

using Kind = Attribute::Kind;

absl::Status InferFusedGemm(InferenceContext& ctx) {
  const std::string name = ctx.node().GetString("epilogue", "bias");
  const std::optional<FusedEpilogue> e = ParseFusedEpilogue(name);
  if (!e) return ctx.Error(absl::StrCat("unknown epilogue \"", name, "\""));
  const TensorType& at = ctx.input_type(0);
  const TensorType& bt = ctx.input_type(1);
  if (!at.is_static() || !bt.is_static()) {
    return ctx.Error(absl::StrCat("A ", at.ToString(), " and B ", bt.ToString(), " must have static shapes"));
  }
  const DType t = at.dtype;
  if (!IsFloat(t) || bt.dtype != t) {
    return ctx.Error(absl::StrCat("A ", at.ToString(), " and B ", bt.ToString(), " must have one float type"));
  }
  DType y_type = t;
  if (ctx.node().attr("output_type") != nullptr) {
    absl::StatusOr<DType> o = DTypeFromOnnx(static_cast<int32_t>(ctx.node().GetInt("output_type", 0)));
    const bool widen = (t == DType::kBFloat16 || t == DType::kFloat16) && o.ok() && *o == DType::kFloat32;
    if (!o.ok() || (*o != t && !widen)) {
      return ctx.Error(absl::StrCat("output_type ", ctx.node().GetInt("output_type", 0), " must be A's type ",
                                    DTypeName(t), " or f32 for 16-bit A and B"));
    }
    y_type = *o;
  }
  const std::vector<int64_t> a = StaticDims(*at.shape), b = StaticDims(*bt.shape);
  if (a.size() != 2 || b.size() != 2) {
    return ctx.Error(absl::StrCat("A ", at.ToString(), " and B ", bt.ToString(), " must be 2-D"));
  }
  const bool ta = ctx.node().GetInt("transA", 0) != 0;
  const bool tb = ctx.node().GetInt("transB", 0) != 0;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb) {
    return ctx.Error(absl::StrCat("inner dimensions differ: A ", at.ToString(), ta ? " (transA)" : "", " and B ",
                                  bt.ToString(), tb ? " (transB)" : ""));
  }
  const bool has_bias = ctx.has_input(2), has_aux = ctx.has_input(3);
  if (has_bias != EpilogueTakesBias(*e) || has_aux != EpilogueTakesAux(*e)) {
    return ctx.Error(absl::StrCat("epilogue ", name, " takes ", EpilogueTakesBias(*e) ? "a bias (input 2)" : "no bias",
                                  " and ", EpilogueTakesAux(*e) ? "an aux (input 3)" : "no aux"));
  }
  if (has_bias) {
    const TensorType& c = ctx.input_type(2);
    const bool row = c.is_static() && c.dtype == y_type &&
                     ((c.rank() == 1 && StaticDims(*c.shape)[0] == n) ||
                      (c.rank() == 2 && StaticDims(*c.shape) == std::vector<int64_t>{1, n}));
    if (!row) return ctx.Error(absl::StrCat("bias ", c.ToString(), " must be [", n, "] or [1,", n, "]"));
  }
  if (has_aux) {
    const TensorType& x = ctx.input_type(3);
    const TensorType want = EpilogueIsRelu(*e) ? TensorType(DType::kUInt8, Shape{m, ReluMaskRowBytes(n)})
                                               : TensorType(y_type, Shape{m, n});
    if (x != want) return ctx.Error(absl::StrCat("aux ", x.ToString(), " must be ", want.ToString()));
  }
  const int want_outputs = EpilogueWritesAux(*e) || EpilogueWritesBiasGrad(*e) ? 2 : 1;
  if (ctx.num_outputs() != want_outputs) {
    return ctx.Error(absl::StrCat("epilogue ", name, " has ", want_outputs, " outputs, got ", ctx.num_outputs()));
  }
  ctx.set_output_type(0, TensorType(y_type, Shape{m, n}));
  if (*e == FusedEpilogue::kReluAuxBias) {
    ctx.set_output_type(1, TensorType(DType::kUInt8, Shape{m, ReluMaskRowBytes(n)}));
  } else if (*e == FusedEpilogue::kGeluAuxBias) {
    ctx.set_output_type(1, TensorType(y_type, Shape{m, n}));
  } else if (*e == FusedEpilogue::kBgradA) {
    ctx.set_output_type(1, TensorType(y_type, Shape{m}));
  } else if (EpilogueWritesBiasGrad(*e)) {
    ctx.set_output_type(1, TensorType(y_type, Shape{n}));
  }
  return absl::OkStatus();
}

absl::Status InferReluGradBiasGrad(InferenceContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  const TensorType& y = ctx.input_type(1);
  if (!dy.is_static() || dy.rank() != 2 || dy != y || !IsFloat(dy.dtype)) {
    return ctx.Error(absl::StrCat("dY ", dy.ToString(), " and Y ", y.ToString(),
                                  " must be one static 2-D float type and shape"));
  }
  DType b = dy.dtype;
  if (ctx.node().attr("bias_type") != nullptr) {
    absl::StatusOr<DType> o = DTypeFromOnnx(static_cast<int32_t>(ctx.node().GetInt("bias_type", 0)));
    const bool widen = (dy.dtype == DType::kBFloat16 || dy.dtype == DType::kFloat16) && o.ok() &&
                       *o == DType::kFloat32;
    if (!o.ok() || (*o != dy.dtype && !widen)) {
      return ctx.Error(absl::StrCat("bias_type ", ctx.node().GetInt("bias_type", 0), " must be dY's type ",
                                    DTypeName(dy.dtype), " or f32 for 16-bit dY"));
    }
    b = *o;
  }
  const std::vector<int64_t> dims = StaticDims(*dy.shape);
  ctx.set_output_type(0, dy);
  ctx.set_output_type(1, TensorType(b, Shape{dims[1]}));
  if (ctx.node().num_outputs() > 2) ctx.set_output_type(2, TensorType(dy.dtype, Shape{dims[1], dims[0]}));
  return absl::OkStatus();
}

absl::Status InferLinearReluGrad(InferenceContext& ctx) {
  const TensorType& dz = ctx.input_type(0);
  const TensorType& w = ctx.input_type(1);
  const TensorType& y = ctx.input_type(2);
  const bool ok = dz.is_static() && w.is_static() && y.is_static() && dz.rank() == 2 && w.rank() == 2 &&
                  y.rank() == 2 && dz.dtype == DType::kFloat32 && w.dtype == DType::kFloat32 &&
                  y.dtype == DType::kFloat32;
  const std::vector<int64_t> zd = ok ? StaticDims(*dz.shape) : std::vector<int64_t>{};
  const std::vector<int64_t> wd = ok ? StaticDims(*w.shape) : std::vector<int64_t>{};
  const std::vector<int64_t> yd = ok ? StaticDims(*y.shape) : std::vector<int64_t>{};
  if (!ok || zd[1] != wd[0] || zd[0] != yd[0] || wd[1] != yd[1] || zd[1] > kLinearReluGradMaxK) {
    return ctx.Error(absl::StrCat("dZ ", dz.ToString(), ", W ", w.ToString(), " and Y ", y.ToString(),
                                  " must be static 2-D f32 [R, K], [K, N], [R, N] with K <= ",
                                  kLinearReluGradMaxK));
  }
  if (ctx.node().num_outputs() == 3) return ctx.Error("dW comes with dBz: 2 or 4 outputs");
  const int64_t rows = ctx.node().GetInt("weight_rows", zd[1]);
  if (rows < 1 || rows > zd[1]) {
    return ctx.Error(absl::StrCat("weight_rows = ", rows, " must be 1 to K = ", zd[1]));
  }
  ctx.set_output_type(0, y);
  ctx.set_output_type(1, TensorType(DType::kFloat32, Shape{yd[1]}));
  if (ctx.node().num_outputs() > 2) {
    ctx.set_output_type(2, TensorType(DType::kFloat32, Shape{rows, wd[1]}));
    ctx.set_output_type(3, TensorType(DType::kFloat32, Shape{rows}));
  }
  return absl::OkStatus();
}

absl::Status InferLinearSceReluGrad(InferenceContext& ctx) {
  const Node& n = ctx.node();
  if (n.num_inputs() != 6 || !ctx.has_input(3) || !ctx.has_input(4) || !ctx.has_input(5)) {
    return ctx.Error("needs Y, W, [bias], labels, dloss and count (6 inputs, the bias may be empty)");
  }
  const TensorType& y = ctx.input_type(0);
  const TensorType& w = ctx.input_type(1);
  const bool ok = y.is_static() && w.is_static() && y.rank() == 2 && w.rank() == 2 && y.dtype == DType::kFloat32 &&
                  w.dtype == DType::kFloat32;
  const std::vector<int64_t> yd = ok ? StaticDims(*y.shape) : std::vector<int64_t>{};
  const std::vector<int64_t> wd = ok ? StaticDims(*w.shape) : std::vector<int64_t>{};
  if (!ok || wd[1] != yd[1] || wd[0] > kLinearReluGradMaxK || wd[0] < 1) {
    return ctx.Error(absl::StrCat("Y ", y.ToString(), " and W ", w.ToString(),
                                  " must be static 2-D f32 [R, N], [K, N] with 1 <= K <= ", kLinearReluGradMaxK));
  }
  const int64_t k = wd[0];
  if (ctx.has_input(2)) {
    const TensorType& b = ctx.input_type(2);
    if (!b.is_static() || b.dtype != DType::kFloat32 || NumElements(StaticDims(*b.shape)) != k) {
      return ctx.Error(absl::StrCat("the bias ", b.ToString(), " must be f32 with ", k, " elements"));
    }
  }
  const TensorType& labels = ctx.input_type(3);
  if ((labels.dtype != DType::kInt64 && labels.dtype != DType::kInt32) || !labels.is_static() || labels.rank() != 1 ||
      StaticDims(*labels.shape)[0] != yd[0]) {
    return ctx.Error(absl::StrCat("labels ", labels.ToString(), " must be int32 or int64 [", yd[0], "]"));
  }
  if (ctx.input_type(5).dtype != DType::kInt64) {
    return ctx.Error(absl::StrCat("count must be the int64 scalar of ottr::CountLabels, got ",
                                  ctx.input_type(5).ToString()));
  }
  const int64_t classes = n.GetInt("classes", 0);
  const int64_t rows = n.GetInt("weight_rows", 0);
  if (classes < 0 || classes > k || rows < 0 || rows > k) {
    return ctx.Error(absl::StrCat("classes = ", classes, " and weight_rows = ", rows, " must be 0 to K = ", k));
  }
  const int64_t m = rows > 0 ? rows : k;
  ctx.set_output_type(0, TensorType(DType::kFloat32, Shape{}));
  ctx.set_output_type(1, y);
  ctx.set_output_type(2, TensorType(DType::kFloat32, Shape{yd[1]}));
  ctx.set_output_type(3, TensorType(DType::kFloat32, Shape{m, wd[1]}));
  ctx.set_output_type(4, TensorType(DType::kFloat32, Shape{m}));
  return absl::OkStatus();
}

absl::Status InferGroupedGemm(InferenceContext& ctx) {
  const Node& n = ctx.node();
  const int count = n.num_outputs();
  const std::vector<int64_t> ta = n.GetInts("transA"), tb = n.GetInts("transB");
  const std::vector<float> alpha = n.GetFloats("alpha");
  if (count < 2 || count > kGroupedGemmMaxProducts || n.num_inputs() != 2 * count ||
      static_cast<int>(ta.size()) != count || static_cast<int>(tb.size()) != count ||
      static_cast<int>(alpha.size()) != count) {
    return ctx.Error(absl::StrCat("needs 2 to ", kGroupedGemmMaxProducts, " products: 2 inputs per output and ",
                                  "transA, transB and alpha with one entry per output (", n.num_inputs(),
                                  " inputs, ", count, " outputs, ", ta.size(), " / ", tb.size(), " / ",
                                  alpha.size(), " entries)"));
  }
  const DType dtype = ctx.input_type(0).dtype;
  for (int i = 0; i < count; ++i) {
    const TensorType& a = ctx.input_type(2 * i);
    const TensorType& b = ctx.input_type(2 * i + 1);
    if (!a.is_static() || !b.is_static() || a.rank() != 2 || b.rank() != 2 || a.dtype != dtype ||
        b.dtype != dtype || !IsFloat(dtype)) {
      return ctx.Error(absl::StrCat("product ", i, ": A ", a.ToString(), " and B ", b.ToString(),
                                    " must be static 2-D matrices of the first operand's float type"));
    }
    const std::vector<int64_t> ad = StaticDims(*a.shape), bd = StaticDims(*b.shape);
    const int64_t m = ta[i] ? ad[1] : ad[0], k = ta[i] ? ad[0] : ad[1];
    const int64_t kb = tb[i] ? bd[1] : bd[0], nn = tb[i] ? bd[0] : bd[1];
    if (k != kb) {
      return ctx.Error(absl::StrCat("product ", i, ": inner dimensions differ: A ", a.ToString(),
                                    ta[i] ? " (transA)" : "", " and B ", b.ToString(), tb[i] ? " (transB)" : ""));
    }
    ctx.set_output_type(i, TensorType(dtype, Shape{m, nn}));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterFusedOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), kGroupedGemmOp)
                 .Inputs(4, 2 * kGroupedGemmMaxProducts)
                 .Outputs(2, kGroupedGemmMaxProducts)
                 .Attr("transA", Kind::kInts, /*required=*/true)
                 .Attr("transB", Kind::kInts, /*required=*/true)
                 .Attr("alpha", Kind::kFloats, /*required=*/true)
                 .Shape(InferGroupedGemm)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "LinearReluGrad")
                 .Inputs(3, 3)
                 .Outputs(2, 4)
                 .Attr("weight_rows", Kind::kInt)
                 .Shape(InferLinearReluGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "LinearSceReluGrad")
                 .Inputs(2, 6)  // the bias (2) may be omitted; InferLinearSceReluGrad requires 3 to 5
                 .Outputs(5, 5)
                 .Attr("ignore_index", Kind::kInt)
                 .Attr("label_smoothing", Kind::kFloat)
                 .Attr("classes", Kind::kInt)
                 .Attr("weight_rows", Kind::kInt)
                 .Shape(InferLinearSceReluGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), "ReluGradBiasGrad")
                 .Inputs(2, 2)
                 .Outputs(2, 3)
                 .Attr("bias_type", Kind::kInt)
                 .Shape(InferReluGradBiasGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(std::string(kOttrDomain), kFusedGemmOp)
                 .Inputs(2, 4)
                 .Outputs(1, 2)
                 .Attr("transA", Kind::kInt)
                 .Attr("transB", Kind::kInt)
                 .Attr("alpha", Kind::kFloat)
                 .Attr("epilogue", Kind::kString, /*required=*/true)
                 .Attr("output_type", Kind::kInt)
                 .Shape(InferFusedGemm)
                 .NotDifferentiable()
                 .Build());
}

}  // namespace ottr::ir
