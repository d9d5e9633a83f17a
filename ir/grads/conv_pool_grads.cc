// Gradient rules of Conv, ConvTranspose and the pooling ops, and the schemas of the ottr-domain
// backward ops they emit (CPU kernels in runtime/cpu/conv_pool_grad_kernels.cc).
//
// Notation: per group g, im2col(X) unrolls the receptive fields of X into a (C/group · K) x P
// matrix (K kernel elements, P output positions) and col2im is its adjoint (scatter-add), so that
// Conv is Y_g = W_g · im2col(X_g) + B (runtime/cpu/im2col.h).
//
//   ottr::ConvGradInput(dY, W) {Conv's attrs, input_shape = X's dims} -> dX
//       dX_g = col2im(W_gᵀ · dY_g)
//   ottr::ConvGradFilter(dY, X) {Conv's attrs, kernel_shape required} -> dW [M, C/group, k...]
//       dW_g = Σ_n dY_{n,g} · im2col(X_{n,g})ᵀ
//   ottr::MaxPoolGrad(dY, X) {MaxPool's attrs, relu_mask} -> dX
//       each dY goes to its window's argmax in X (the first maximum, as the forward's Indices);
//       relu_mask = 1 (fuse-maxpool-relu-grad) then keeps dX only where X > 0: the gradient of
//       the Relu that produced X as well
//   ottr::AveragePoolGrad(dY) {AveragePool's attrs, input_shape} -> dX
//       each dY / count goes to every tap of its window inside X (count as the forward's)
//   ottr::LpPoolGrad(dY, X, Y) {LpPool's attrs} -> dX
//       dX_i = Σ_{windows ∋ i} dY · sign(X_i) · |X_i|^(p-1) / Y^(p-1)   (0 where Y = 0)
// The backward ops carry the forward's window attributes unchanged, so they resolve auto_pad,
// ceil_mode and the pads exactly as the forward did (ir/ops/conv_pool_geometry.h).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/ops/channels_last.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

std::string Ottr() { return std::string(kOttrDomain); }

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

absl::StatusOr<std::vector<int64_t>> StaticShapeOf(GradientBuilder& b, const Value* v,
                                                   absl::string_view what) {
  if (!v->type().is_static()) {
    return b.Error(absl::StrCat("needs a static shape for ", what, ", got ", v->type().ToString(),
                                " (bind the batch size with --batch)"));
  }
  return StaticDims(*v->type().shape);
}

// ---------------------------------------------------------------------------------------------
// Shape functions of the backward ops.

// Checks dY against the forward output [N, channels, windows over x_dims] when everything is
// static; `kernel` overrides the attribute (Conv: from W).
absl::Status CheckDyShape(InferenceContext& ctx, const std::vector<int64_t>& x_dims,
                          std::optional<int64_t> channels, bool pool,
                          const std::vector<int64_t>* kernel) {
  const TensorType& dy = ctx.input_type(0);
  if (!dy.has_rank()) return absl::OkStatus();
  if (dy.rank() != static_cast<int64_t>(x_dims.size())) {
    return ctx.Error(
        absl::StrCat("dY ", dy.ToString(), " must have the rank of X ", DimsString(x_dims)));
  }
  const int64_t nd = static_cast<int64_t>(x_dims.size()) - 2;
  auto attrs = ReadWindowAttrs(ctx.node(), nd, pool);
  if (!attrs.ok()) return ctx.Error(attrs.status().message());
  if (kernel != nullptr) {
    if (absl::Status s = SetKernelFromWeights(*attrs, *kernel); !s.ok()) {
      return ctx.Error(s.message());
    }
  }
  if (attrs->kernel.empty()) return absl::OkStatus();
  std::vector<int64_t> expected = {x_dims[0], channels.value_or(-1)};
  for (int64_t i = 0; i < nd; ++i) {
    auto w = ResolveWindowAxis(*attrs, i, x_dims[2 + i]);
    if (!w.ok())
      return ctx.Error(absl::StrCat("X ", DimsString(x_dims), ": ", w.status().message()));
    expected.push_back(w->out);
  }
  const Shape& ds = *dy.shape;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] >= 0 && ds[i].is_static() && ds[i].value() != expected[i]) {
      return ctx.Error(absl::StrCat("dY ", dy.ToString(), " does not match the forward output ",
                                    "for X ", DimsString(x_dims), " (dim ", i, " should be ",
                                    expected[i], ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> InputShapeAttr(InferenceContext& ctx) {
  std::vector<int64_t> shape = ctx.node().GetInts("input_shape");
  if (shape.size() < 3 ||
      std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) {
    return ctx.Error(absl::StrCat("attribute 'input_shape' = ", DimsString(shape),
                                  " must be X's static dims [N, C, D1, ...]"));
  }
  return shape;
}

absl::Status CheckSameDType(InferenceContext& ctx) {
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i) && ctx.input_type(i).dtype != ctx.input_type(0).dtype) {
      return ctx.Error(absl::StrCat("input ", i, " ", ctx.input_type(i).ToString(),
                                    " does not have dY's element type ",
                                    ctx.input_type(0).ToString()));
    }
  }
  return absl::OkStatus();
}

// ConvGradInput(dY, W) -> dX typed input_shape.
absl::Status InferConvGradInput(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckSameDType(ctx));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, InputShapeAttr(ctx));
  const TensorType& w = ctx.input_type(1);
  if (w.has_rank() && w.rank() != static_cast<int64_t>(x_dims.size())) {
    return ctx.Error(absl::StrCat("W ", w.ToString(), " must have the rank of input_shape ",
                                  DimsString(x_dims)));
  }
  if (w.is_static()) {
    const std::vector<int64_t> wd = StaticDims(*w.shape);
    const int64_t group = ctx.node().GetInt("group", 1);
    if (group < 1 || wd[1] * group != x_dims[1] || wd[0] % group != 0) {
      return ctx.Error(absl::StrCat("input_shape ", DimsString(x_dims), " and W ", w.ToString(),
                                    " do not agree with group ", group));
    }
    const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
    OTTR_RETURN_IF_ERROR(CheckDyShape(ctx, x_dims, wd[0], /*pool=*/false, &kernel));
  }
  ctx.set_output_type(0, TensorType(ctx.input_type(0).dtype, ShapeFromDims(x_dims)));
  return absl::OkStatus();
}

// ConvGradFilter(dY, X) -> dW [M, C/group, kernel...].
absl::Status InferConvGradFilter(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckSameDType(ctx));
  const TensorType& dy = ctx.input_type(0);
  const TensorType& x = ctx.input_type(1);
  const std::vector<int64_t> kernel = ctx.node().GetInts("kernel_shape");
  const int64_t group = ctx.node().GetInt("group", 1);
  if (group < 1) return ctx.Error(absl::StrCat("attribute 'group' = ", group, " must be >= 1"));
  const size_t rank = kernel.size() + 2;
  for (const TensorType* t : {&dy, &x}) {
    if (t->has_rank() && t->rank() != static_cast<int64_t>(rank)) {
      return ctx.Error(absl::StrCat(t->ToString(), " must have rank ", rank, " for kernel_shape ",
                                    DimsString(kernel)));
    }
  }
  Dim m = dy.has_rank() ? (*dy.shape)[1] : Dim();
  Dim cg;
  if (x.has_rank() && (*x.shape)[1].is_static()) {
    const int64_t c = (*x.shape)[1].value();
    if (c % group != 0) {
      return ctx.Error(
          absl::StrCat("X ", x.ToString(), ": channels not divisible by group ", group));
    }
    cg = Dim(c / group);
  }
  if (x.is_static()) {
    const std::vector<int64_t> xd = StaticDims(*x.shape);
    std::optional<int64_t> mc;
    if (m.is_static()) mc = m.value();
    OTTR_RETURN_IF_ERROR(CheckDyShape(ctx, xd, mc, /*pool=*/false, nullptr));
  }
  Shape out = {m, cg};
  for (int64_t k : kernel) out.push_back(Dim(k));
  ctx.set_output_type(0, TensorType(dy.dtype, out));
  return absl::OkStatus();
}

// MaxPoolGrad(dY, X), LpPoolGrad(dY, X, Y) -> dX typed like X.
absl::Status InferPoolGradLikeX(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckSameDType(ctx));
  const TensorType& x = ctx.input_type(1);
  if (x.is_static()) {
    const std::vector<int64_t> xd = StaticDims(*x.shape);
    if (xd.size() < 3) {
      return ctx.Error(absl::StrCat("X ", x.ToString(), " must have rank >= 3"));
    }
    OTTR_RETURN_IF_ERROR(CheckDyShape(ctx, xd, xd[1], /*pool=*/true, nullptr));
  }
  ctx.set_output_type(0, x);
  return absl::OkStatus();
}

// AveragePoolGrad(dY) -> dX typed input_shape.
absl::Status InferAveragePoolGrad(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, InputShapeAttr(ctx));
  OTTR_RETURN_IF_ERROR(CheckDyShape(ctx, x_dims, x_dims[1], /*pool=*/true, nullptr));
  ctx.set_output_type(0, TensorType(ctx.input_type(0).dtype, ShapeFromDims(x_dims)));
  return absl::OkStatus();
}

// Adds the window attributes shared by Conv and the pools to a schema.
OpSchemaBuilder& WindowAttrSpecs(OpSchemaBuilder& s, bool kernel_required) {
  return s.Attr("auto_pad", Kind::kString)
      .Attr("dilations", Kind::kInts)
      .Attr("kernel_shape", Kind::kInts, kernel_required)
      .Attr("pads", Kind::kInts)
      .Attr("strides", Kind::kInts);
}

void RegisterBackwardOps(OpRegistry& r) {
  {
    OpSchemaBuilder s(Ottr(), "ConvGradInput");
    s.Inputs(2, 2)
        .Outputs(1, 1)
        .Attr("group", Kind::kInt)
        .Attr("input_shape", Kind::kInts, true)
        .Attr(kLayoutAttr, Kind::kString);
    r.Register(WindowAttrSpecs(s, false).Shape(WithLayout(InferConvGradInput)).NotDifferentiable().Build());
  }
  {
    OpSchemaBuilder s(Ottr(), "ConvGradFilter");
    s.Inputs(2, 2).Outputs(1, 1).Attr("group", Kind::kInt).Attr(kLayoutAttr, Kind::kString);
    r.Register(WindowAttrSpecs(s, true).Shape(WithLayout(InferConvGradFilter)).NotDifferentiable().Build());
  }
  {
    OpSchemaBuilder s(Ottr(), "MaxPoolGrad");
    s.Inputs(2, 2)
        .Outputs(1, 1)
        .Attr("ceil_mode", Kind::kInt)
        .Attr("storage_order", Kind::kInt)
        .Attr("relu_mask", Kind::kInt)
        .Attr(kLayoutAttr, Kind::kString);
    r.Register(WindowAttrSpecs(s, true).Shape(WithLayout(InferPoolGradLikeX)).NotDifferentiable().Build());
  }
  {
    OpSchemaBuilder s(Ottr(), "AveragePoolGrad");
    s.Inputs(1, 1)
        .Outputs(1, 1)
        .Attr("ceil_mode", Kind::kInt)
        .Attr("count_include_pad", Kind::kInt)
        .Attr("input_shape", Kind::kInts, true);
    r.Register(WindowAttrSpecs(s, true).Shape(InferAveragePoolGrad).NotDifferentiable().Build());
  }
  {
    OpSchemaBuilder s(Ottr(), "LpPoolGrad");
    s.Inputs(3, 3).Outputs(1, 1).Attr("ceil_mode", Kind::kInt).Attr("p", Kind::kInt);
    r.Register(WindowAttrSpecs(s, true).Shape(InferPoolGradLikeX).NotDifferentiable().Build());
  }
}

// ---------------------------------------------------------------------------------------------
// Rules.

// dB = Σ dY over the batch and spatial axes (the bias of Conv / ConvTranspose, one per channel).
absl::Status SetBiasGrad(GradientBuilder& b, Value* dy, int64_t rank) {
  if (b.input(2) == nullptr || !b.needs_input_grad(2)) return absl::OkStatus();
  std::vector<int64_t> axes = {0};
  for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
  OTTR_ASSIGN_OR_RETURN(Value * a, b.Ints(axes));
  OTTR_ASSIGN_OR_RETURN(Value * db,
                        b.Emit1("ReduceSum", {dy, a}, {{"keepdims", Attribute(int64_t{0})}}));
  b.set_input_grad(2, db);
  return absl::OkStatus();
}

// Y = Conv(X, W) + B; per group g, Y_g = W_g · im2col(X_g) + B_g:
//   dX_g = col2im(W_gᵀ · dY_g)                    ottr::ConvGradInput(dY, W)
//   dW_g = Σ_n dY_{n,g} · im2col(X_{n,g})ᵀ         ottr::ConvGradFilter(dY, X)
//   dB   = Σ_{n, spatial} dY                       ReduceSum(dY, [0, 2, ...])
absl::Status ConvGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, b.input(0), "X"));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> wdims, StaticShapeOf(b, b.input(1), "W"));
  std::map<std::string, Attribute> attrs = b.node().attrs();
  attrs["kernel_shape"] = Attribute(std::vector<int64_t>(wdims.begin() + 2, wdims.end()));
  if (b.needs_input_grad(0)) {
    std::map<std::string, Attribute> a = attrs;
    a["input_shape"] = Attribute(xdims);
    OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("ConvGradInput", {dy, b.input(1)}, a, Ottr()));
    b.set_input_grad(0, dx);
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * dw, b.Emit1("ConvGradFilter", {dy, b.input(0)}, attrs, Ottr()));
    b.set_input_grad(1, dw);
  }
  return SetBiasGrad(b, dy, static_cast<int64_t>(xdims.size()));
}

// Y = ConvTranspose(X, W) + B is the adjoint of the Conv C_W (input: Y's image, output: X's
// positions, same strides/dilations/group, pads = the ConvTranspose's resolved pads):
// Y = C_Wᵀ · X + B. Hence
//   dX = C_W(dY) = Conv(dY, W)
//   dW = ConvGradFilter(X, dY)   (the filter gradient of C_W with X in the role of its dY)
//   dB = Σ_{n, spatial} dY
// C_W's output must have exactly X's positions: with the ConvTranspose's pads (pb, pe) and
// output_padding op, the Conv's end pad is pe − op; negative pads (from output_shape) become a
// Slice of dY (those output positions received no contribution), and so does an end pad below
// −(stride − 1) (trailing rows no window reaches).
absl::Status ConvTransposeGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr) return absl::OkStatus();
  Value* x = b.input(0);
  Value* w = b.input(1);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, x, "X"));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> wdims, StaticShapeOf(b, w, "W"));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> ydims, StaticShapeOf(b, dy, "dY"));
  if (xdims.size() < 3 || wdims.size() != xdims.size() || ydims.size() != xdims.size()) {
    return b.Error(absl::StrCat("X ", DimsString(xdims), ", W ", DimsString(wdims), " and Y ",
                                DimsString(ydims), " must have the same rank >= 3"));
  }
  const int64_t nd = static_cast<int64_t>(xdims.size()) - 2;
  auto attrs = ReadWindowAttrs(b.node(), nd, /*kernel_required=*/false, /*conv_transpose=*/true);
  if (!attrs.ok()) return b.Error(attrs.status().message());
  const std::vector<int64_t> kernel(wdims.begin() + 2, wdims.end());
  if (absl::Status s = SetKernelFromWeights(*attrs, kernel); !s.ok()) return b.Error(s.message());
  std::vector<int64_t> pads_begin, pads_end, starts, ends, axes;
  for (int64_t i = 0; i < nd; ++i) {
    auto axis = ResolveConvTransposeAxis(*attrs, i, xdims[2 + i]);
    if (!axis.ok()) return b.Error(axis.status().message());
    const int64_t out = ydims[2 + i];
    if (axis->out != out) {
      return b.Error(absl::StrCat("output ", DimsString(ydims), " disagrees with the resolved ",
                                  "size ", axis->out, " on spatial axis ", i));
    }
    const int64_t s = attrs->strides[i];
    const int64_t crop_begin = std::max<int64_t>(0, -axis->pad_begin);
    const int64_t pad_begin = std::max<int64_t>(0, axis->pad_begin);
    // The Conv's end pad must lie in [need, need + s - 1] for exactly X's positions.
    const int64_t need =
        s * (xdims[2 + i] - 1) + attrs->EffectiveKernel(i) - (out - crop_begin) - pad_begin;
    int64_t pad_end = 0;
    int64_t crop_end = 0;
    if (need >= 0) {
      pad_end = need;
    } else if (need + s - 1 < 0) {
      crop_end = -need;
    }
    if (crop_begin > 0 || crop_end > 0) {
      axes.push_back(2 + i);
      starts.push_back(crop_begin);
      ends.push_back(out - crop_end);
    }
    pads_begin.push_back(pad_begin);
    pads_end.push_back(pad_end);
  }
  Value* dyc = dy;
  if (!axes.empty()) {
    OTTR_ASSIGN_OR_RETURN(Value * st, b.Ints(starts));
    OTTR_ASSIGN_OR_RETURN(Value * en, b.Ints(ends));
    OTTR_ASSIGN_OR_RETURN(Value * ax, b.Ints(axes));
    OTTR_ASSIGN_OR_RETURN(dyc, b.Emit1("Slice", {dy, st, en, ax}));
  }
  std::vector<int64_t> pads = pads_begin;
  pads.insert(pads.end(), pads_end.begin(), pads_end.end());
  std::map<std::string, Attribute> conv = {{"dilations", Attribute(attrs->dilations)},
                                           {"group", Attribute(b.node().GetInt("group", 1))},
                                           {"kernel_shape", Attribute(kernel)},
                                           {"pads", Attribute(pads)},
                                           {"strides", Attribute(attrs->strides)}};
  if (b.needs_input_grad(0)) {
    OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("Conv", {dyc, w}, conv));
    b.set_input_grad(0, dx);
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * dw, b.Emit1("ConvGradFilter", {x, dyc}, conv, Ottr()));
    b.set_input_grad(1, dw);
  }
  return SetBiasGrad(b, dy, static_cast<int64_t>(xdims.size()));
}

// Y = MaxPool(X): dX = ottr::MaxPoolGrad(dY, X), each dY routed to its window's argmax (the
// element the forward's Indices name: the first maximum). No gradient flows from Indices.
absl::Status MaxPoolGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx,
                        b.Emit1("MaxPoolGrad", {dy, b.input(0)}, b.node().attrs(), Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = AveragePool(X): dX_i = Σ_{windows w ∋ i} dY_w / count_w   ottr::AveragePoolGrad(dY)
absl::Status AveragePoolGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, b.input(0), "X"));
  std::map<std::string, Attribute> attrs = b.node().attrs();
  attrs["input_shape"] = Attribute(xdims);
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("AveragePoolGrad", {dy}, attrs, Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = (Σ_window |X|^p)^(1/p): dX_i = Σ_{w ∋ i} dY_w · sign(X_i) · |X_i|^(p-1) / Y_w^(p-1)
//   ottr::LpPoolGrad(dY, X, Y)
absl::Status LpPoolGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(
      Value * dx, b.Emit1("LpPoolGrad", {dy, b.input(0), b.output(0)}, b.node().attrs(), Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// The global pools are the windowed ones with one window covering each plane (kernel = the
// spatial dims, no padding, unit strides). X [N, C] (no spatial dims) is one element per plane.
//   GlobalAveragePool: dX = Expand(dY / S, X's shape), S = the elements of a plane
//   GlobalMaxPool:     dX = MaxPoolGrad(dY, X) {kernel_shape = spatial dims}   ([N, C]: dY)
//   GlobalLpPool:      dX = LpPoolGrad(dY, X, Y) {kernel_shape, p}             ([N, C]: dY · sign
//   X)
absl::Status GlobalAveragePoolGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, b.input(0), "X"));
  int64_t plane = 1;
  for (size_t d = 2; d < xdims.size(); ++d) plane *= xdims[d];
  Value* g = dy;
  if (plane != 1) {
    OTTR_ASSIGN_OR_RETURN(Value * k, b.Scalar(1.0 / static_cast<double>(plane), dy->type().dtype));
    OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Mul", {dy, k}));
  }
  OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(xdims));
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("Expand", {g, shape}));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

absl::Status GlobalMaxOrLpPoolGradient(GradientBuilder& b, bool lp) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr || !b.needs_input_grad(0)) return absl::OkStatus();
  Value* x = b.input(0);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> xdims, StaticShapeOf(b, x, "X"));
  Value* dx = nullptr;
  if (xdims.size() < 3) {  // [N, C]: Y = X (max) or |X| (Lp)
    dx = dy;
    if (lp) {
      OTTR_ASSIGN_OR_RETURN(Value * sign, b.Emit1("Sign", {x}));
      OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("Mul", {dy, sign}));
    }
  } else {
    std::map<std::string, Attribute> attrs = {
        {"kernel_shape", Attribute(std::vector<int64_t>(xdims.begin() + 2, xdims.end()))}};
    if (lp) {
      attrs["p"] = Attribute(b.node().GetInt("p", 2));
      OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("LpPoolGrad", {dy, x, b.output(0)}, attrs, Ottr()));
    } else {
      OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("MaxPoolGrad", {dy, x}, attrs, Ottr()));
    }
  }
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

void RegisterConvPoolGradients(OpRegistry& r) {
  RegisterBackwardOps(r);
  r.SetGradient("", "Conv", ConvGradient);
  r.SetGradient("", "ConvTranspose", ConvTransposeGradient);
  r.SetGradient("", "MaxPool", MaxPoolGradient);
  r.SetGradient("", "AveragePool", AveragePoolGradient);
  r.SetGradient("", "LpPool", LpPoolGradient);
  r.SetGradient("", "GlobalAveragePool", GlobalAveragePoolGradient);
  r.SetGradient("", "GlobalMaxPool",
                [](GradientBuilder& b) { return GlobalMaxOrLpPoolGradient(b, false); });
  r.SetGradient("", "GlobalLpPool",
                [](GradientBuilder& b) { return GlobalMaxOrLpPoolGradient(b, true); });
}

}  // namespace ottr::ir
