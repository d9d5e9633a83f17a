// Convolution and pooling ops: Conv, ConvTranspose, MaxPool, AveragePool, LpPool and their Global
// forms. Inputs are N x C x D1 x ... x Dn; the window geometry (output sizes, auto_pad, ceil_mode)
// lives in conv_pool_geometry.h, shared with the CPU kernels.
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/channels_last.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/ops/shape_helpers.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

enum class WindowOp { kConv, kConvTranspose, kPool };

// Static values of dims [begin, end) of `s`, or nullopt when one is not static.
std::optional<std::vector<int64_t>> StaticRange(const Shape& s, size_t begin, size_t end) {
  std::vector<int64_t> out;
  for (size_t i = begin; i < end; ++i) {
    if (!s[i].is_static()) return std::nullopt;
    out.push_back(s[i].value());
  }
  return out;
}

// Output shape [N, channels, out_1, ..., out_n] of a windowed op.
absl::Status InferWindowShape(InferenceContext& ctx, WindowOp op) {
  const TensorType& x = ctx.input_type(0);
  const bool two_outputs = op == WindowOp::kPool && ctx.num_outputs() > 1;
  auto set_outputs = [&](std::optional<Shape> shape) {
    if (two_outputs) ctx.set_output_type(1, TensorType(DType::kInt64, shape));
    ctx.set_output_type(0, TensorType(x.dtype, std::move(shape)));
  };
  if (!x.has_rank()) {
    set_outputs(std::nullopt);
    return absl::OkStatus();
  }
  const Shape& xs = *x.shape;
  if (xs.size() < 3) {
    return ctx.Error(
        absl::StrCat("input X ", x.ToString(), " must have rank >= 3 (N x C x D1 x ... x Dn)"));
  }
  const int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  auto attrs_or =
      ReadWindowAttrs(ctx.node(), spatial, op == WindowOp::kPool, op == WindowOp::kConvTranspose);
  if (!attrs_or.ok()) return ctx.Error(attrs_or.status().message());
  WindowAttrs attrs = std::move(attrs_or).value();

  Dim channels = xs[1];
  if (op != WindowOp::kPool) {
    const int64_t group = ctx.node().GetInt("group", 1);
    if (group < 1) return ctx.Error(absl::StrCat("attribute 'group' = ", group, " must be >= 1"));
    if (ctx.input_type(1).dtype != x.dtype && ctx.input_type(1).dtype != DType::kUndefined) {
      return ctx.Error(absl::StrCat("X ", x.ToString(), " and W ", ctx.input_type(1).ToString(),
                                    " have different element types"));
    }
    if (!ctx.input_type(1).has_rank()) {
      // Output channels unknown; spatial sizes need the kernel.
      channels = Dim();
      if (attrs.kernel.empty()) {
        Shape out = {xs[0], channels};
        out.resize(xs.size());
        set_outputs(out);
        return absl::OkStatus();
      }
    } else {
      const Shape& ws = *ctx.input_type(1).shape;
      if (ws.size() != xs.size()) {
        return ctx.Error(absl::StrCat("W ", ctx.input_type(1).ToString(),
                                      " must have the rank of X ", x.ToString()));
      }
      if (auto wk = StaticRange(ws, 2, ws.size())) {
        if (absl::Status s = SetKernelFromWeights(attrs, *wk); !s.ok()) {
          return ctx.Error(s.message());
        }
      }
      if (op == WindowOp::kConv) {
        if (xs[1].is_static() && ws[1].is_static() && ws[1].value() * group != xs[1].value()) {
          return ctx.Error(absl::StrCat("X ", x.ToString(), " has ", xs[1].value(),
                                        " channels but W ", ctx.input_type(1).ToString(),
                                        " with group ", group, " expects ", ws[1].value() * group));
        }
        if (ws[0].is_static() && ws[0].value() % group != 0) {
          return ctx.Error(absl::StrCat("W ", ctx.input_type(1).ToString(), ": ", ws[0].value(),
                                        " output channels are not divisible by group ", group));
        }
        channels = ws[0];
      } else {
        if (xs[1].is_static() && ws[0].is_static() && ws[0].value() != xs[1].value()) {
          return ctx.Error(absl::StrCat("X ", x.ToString(), " has ", xs[1].value(),
                                        " channels but W ", ctx.input_type(1).ToString(),
                                        " expects ", ws[0].value()));
        }
        if (xs[1].is_static() && xs[1].value() % group != 0) {
          return ctx.Error(absl::StrCat("X ", x.ToString(), ": ", xs[1].value(),
                                        " channels are not divisible by group ", group));
        }
        channels = ws[1].is_static() ? Dim(ws[1].value() * group) : (group == 1 ? ws[1] : Dim());
      }
    }
    if (ctx.has_input(2) && ctx.input_type(2).has_rank()) {
      const Shape& bs = *ctx.input_type(2).shape;
      if (bs.size() != 1 ||
          (bs[0].is_static() && channels.is_static() && bs[0].value() != channels.value())) {
        return ctx.Error(absl::StrCat("bias B ", ctx.input_type(2).ToString(),
                                      " must be 1-D with one value per output channel (",
                                      channels.ToString(), ")"));
      }
    }
  }

  Shape out = {xs[0], channels};
  for (int64_t i = 0; i < spatial; ++i) {
    const Dim& in = xs[2 + i];
    if (attrs.kernel.empty()) {
      out.push_back(Dim());
    } else if (op == WindowOp::kConvTranspose && !attrs.output_shape.empty() && !in.is_static()) {
      out.push_back(Dim(attrs.output_shape[i]));
    } else if (!in.is_static()) {
      out.push_back(Dim());
    } else {
      auto w = op == WindowOp::kConvTranspose ? ResolveConvTransposeAxis(attrs, i, in.value())
                                              : ResolveWindowAxis(attrs, i, in.value());
      if (!w.ok()) return ctx.Error(absl::StrCat("X ", x.ToString(), ": ", w.status().message()));
      out.push_back(Dim(w->out));
    }
  }
  set_outputs(out);
  return absl::OkStatus();
}

// Global pools: [N, C, 1, ..., 1] (rank kept).
absl::Status InferGlobalPoolShape(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (!x.has_rank()) {
    ctx.set_output_type(0, TensorType(x.dtype, std::nullopt));
    return absl::OkStatus();
  }
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("input X ", x.ToString(), " must have rank >= 2 (N x C x ...)"));
  }
  Shape out = {(*x.shape)[0], (*x.shape)[1]};
  out.resize(x.shape->size(), Dim(1));
  ctx.set_output_type(0, TensorType(x.dtype, out));
  return absl::OkStatus();
}

// Conv's inputs, outputs and attributes (ONNX's and its channels-last ottr form's).
OpSchemaBuilder& ConvSpecs(OpSchemaBuilder& s) {
  return s.Inputs(2, 3)
      .Outputs(1, 1)
      .Attr("auto_pad", Kind::kString)
      .Attr("dilations", Kind::kInts)
      .Attr("group", Kind::kInt)
      .Attr("kernel_shape", Kind::kInts)
      .Attr("pads", Kind::kInts)
      .Attr("strides", Kind::kInts);
}

// MaxPool's attributes (ONNX's and its channels-last ottr form's).
OpSchemaBuilder& MaxPoolAttrs(OpSchemaBuilder& s) {
  return s.Attr("auto_pad", Kind::kString)
      .Attr("ceil_mode", Kind::kInt)
      .Attr("dilations", Kind::kInts)
      .Attr("kernel_shape", Kind::kInts, /*required=*/true)
      .Attr("pads", Kind::kInts)
      .Attr("storage_order", Kind::kInt)
      .Attr("strides", Kind::kInts);
}

}  // namespace

void RegisterConvPoolOps(OpRegistry& r) {
  {
    OpSchemaBuilder s("", "Conv");
    s.Opsets(7);
    r.Register(
        ConvSpecs(s).Shape([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kConv); }).Build());
  }
  r.Register(OpSchemaBuilder("", "ConvTranspose")
                 .Opsets(7)
                 .Inputs(2, 3)
                 .Outputs(1, 1)
                 .Attr("auto_pad", Kind::kString)
                 .Attr("dilations", Kind::kInts)
                 .Attr("group", Kind::kInt)
                 .Attr("kernel_shape", Kind::kInts)
                 .Attr("output_padding", Kind::kInts)
                 .Attr("output_shape", Kind::kInts)
                 .Attr("pads", Kind::kInts)
                 .Attr("strides", Kind::kInts)
                 .Shape([](InferenceContext& ctx) {
                   return InferWindowShape(ctx, WindowOp::kConvTranspose);
                 })
                 .Build());
  // Indices (output 1) exists from opset 8; ceil_mode and dilations from 10.
  {
    OpSchemaBuilder s("", "MaxPool");
    s.Opsets(7).Inputs(1, 1).Outputs(1, 2);
    r.Register(
        MaxPoolAttrs(s).Shape([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kPool); }).Build());
  }
  // ceil_mode from opset 10, dilations from 19.
  r.Register(
      OpSchemaBuilder("", "AveragePool")
          .Opsets(7)
          .Inputs(1, 1)
          .Outputs(1, 1)
          .Attr("auto_pad", Kind::kString)
          .Attr("ceil_mode", Kind::kInt)
          .Attr("count_include_pad", Kind::kInt)
          .Attr("dilations", Kind::kInts)
          .Attr("kernel_shape", Kind::kInts, /*required=*/true)
          .Attr("pads", Kind::kInts)
          .Attr("strides", Kind::kInts)
          .Shape([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kPool); })
          .Build());
  // p is an int from opset 2; ceil_mode and dilations from 18.
  r.Register(
      OpSchemaBuilder("", "LpPool")
          .Opsets(7)
          .Inputs(1, 1)
          .Outputs(1, 1)
          .Attr("auto_pad", Kind::kString)
          .Attr("ceil_mode", Kind::kInt)
          .Attr("dilations", Kind::kInts)
          .Attr("kernel_shape", Kind::kInts, /*required=*/true)
          .Attr("p", Kind::kInt)
          .Attr("pads", Kind::kInts)
          .Attr("strides", Kind::kInts)
          .Shape([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kPool); })
          .Build());
  // The channels-last forms the nhwc-layout pass makes (ir/ops/channels_last.h): ONNX's Conv and
  // single-output MaxPool with a `layout` attribute. They run after autodiff, so have no gradient.
  // ottr::Conv also takes activation = "relu" (fuse-conv-activation): y = relu(conv + bias).
  {
    OpSchemaBuilder s(std::string(kOttrDomain), "Conv");
    ConvSpecs(s).Attr("activation", Kind::kString).Attr(kLayoutAttr, Kind::kString);
    r.Register(s.Shape(WithLayout([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kConv); }))
                   .NotDifferentiable()
                   .Build());
  }
  {
    OpSchemaBuilder s(std::string(kOttrDomain), "MaxPool");
    MaxPoolAttrs(s.Inputs(1, 1).Outputs(1, 1)).Attr(kLayoutAttr, Kind::kString);
    r.Register(s.Shape(WithLayout([](InferenceContext& ctx) { return InferWindowShape(ctx, WindowOp::kPool); }))
                   .NotDifferentiable()
                   .Build());
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    r.Register(OpSchemaBuilder("", op)
                   .Opsets(7)
                   .Inputs(1, 1)
                   .Outputs(1, 1)
                   .Shape(InferGlobalPoolShape)
                   .Build());
  }
  r.Register(OpSchemaBuilder("", "GlobalLpPool")
                 .Opsets(7)
                 .Inputs(1, 1)
                 .Outputs(1, 1)
                 .Attr("p", Kind::kInt)
                 .Shape(InferGlobalPoolShape)
                 .Build());
}

}  // namespace ottr::ir
