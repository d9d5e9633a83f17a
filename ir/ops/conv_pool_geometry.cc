#include "ir/ops/conv_pool_geometry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

// floor(a / b) for b > 0 and any sign of a.
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// An ints attribute that, when present and non-empty, must have `size` values; else `def`.
absl::StatusOr<std::vector<int64_t>> IntsOfSize(const Node& node, const std::string& name,
                                                size_t size, std::vector<int64_t> def) {
  std::vector<int64_t> v = node.GetInts(name);
  if (v.empty()) return def;
  if (v.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' has ", v.size(),
                                                   " values [", absl::StrJoin(v, ","),
                                                   "], expected ", size));
  }
  return v;
}

absl::Status CheckAtLeast(const std::vector<int64_t>& v, int64_t min, const char* name) {
  for (int64_t x : v) {
    if (x < min) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' = [", absl::StrJoin(v, ","), "] must be >= ", min));
    }
  }
  return absl::OkStatus();
}

// Splits `total` padding per the SAME_UPPER (odd one at the end) / other (odd one at the start)
// rule, with floor division so that a negative total splits consistently.
void SplitPads(const std::string& auto_pad, int64_t total, AxisWindow& w) {
  if (auto_pad == "SAME_UPPER") {
    w.pad_begin = FloorDiv(total, 2);
    w.pad_end = total - w.pad_begin;
  } else {
    w.pad_end = FloorDiv(total, 2);
    w.pad_begin = total - w.pad_end;
  }
}

}  // namespace

absl::StatusOr<WindowAttrs> ReadWindowAttrs(const Node& node, int64_t spatial, bool kernel_required,
                                            bool conv_transpose) {
  WindowAttrs a;
  a.spatial = spatial;
  const size_t n = static_cast<size_t>(spatial);
  OTTR_ASSIGN_OR_RETURN(a.kernel, IntsOfSize(node, "kernel_shape", n, {}));
  if (a.kernel.empty() && kernel_required) {
    return absl::InvalidArgumentError("attribute 'kernel_shape' is required");
  }
  OTTR_RETURN_IF_ERROR(CheckAtLeast(a.kernel, 1, "kernel_shape"));
  OTTR_ASSIGN_OR_RETURN(a.strides, IntsOfSize(node, "strides", n, std::vector<int64_t>(n, 1)));
  OTTR_RETURN_IF_ERROR(CheckAtLeast(a.strides, 1, "strides"));
  OTTR_ASSIGN_OR_RETURN(a.dilations, IntsOfSize(node, "dilations", n, std::vector<int64_t>(n, 1)));
  OTTR_RETURN_IF_ERROR(CheckAtLeast(a.dilations, 1, "dilations"));
  OTTR_ASSIGN_OR_RETURN(a.pads, IntsOfSize(node, "pads", 2 * n, std::vector<int64_t>(2 * n, 0)));
  OTTR_RETURN_IF_ERROR(CheckAtLeast(a.pads, 0, "pads"));
  a.auto_pad = node.GetString("auto_pad", "NOTSET");
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" &&
      a.auto_pad != "VALID") {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'auto_pad' = '", a.auto_pad,
                     "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"));
  }
  const int64_t ceil_mode = node.GetInt("ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'ceil_mode' = ", ceil_mode, " must be 0 or 1"));
  }
  a.ceil_mode = ceil_mode == 1;
  if (conv_transpose) {
    OTTR_ASSIGN_OR_RETURN(a.output_padding,
                          IntsOfSize(node, "output_padding", n, std::vector<int64_t>(n, 0)));
    OTTR_RETURN_IF_ERROR(CheckAtLeast(a.output_padding, 0, "output_padding"));
    a.output_shape = node.GetInts("output_shape");
    if (a.output_shape.size() == n + 2) {  // [N, C, spatial...]
      a.output_shape.erase(a.output_shape.begin(), a.output_shape.begin() + 2);
    }
    if (!a.output_shape.empty() && a.output_shape.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'output_shape' = [", absl::StrJoin(node.GetInts("output_shape"), ","),
          "] must have ", n, " (spatial) or ", n + 2, " values"));
    }
    OTTR_RETURN_IF_ERROR(CheckAtLeast(a.output_shape, 0, "output_shape"));
  }
  return a;
}

absl::Status SetKernelFromWeights(WindowAttrs& attrs, const std::vector<int64_t>& weight_spatial) {
  if (static_cast<int64_t>(weight_spatial.size()) != attrs.spatial) {
    return absl::InvalidArgumentError(absl::StrCat("the weight has ", weight_spatial.size(),
                                                   " spatial dims, the input ", attrs.spatial));
  }
  if (attrs.kernel.empty()) {
    attrs.kernel = weight_spatial;
    return CheckAtLeast(attrs.kernel, 1, "kernel_shape (from the weight)");
  }
  if (attrs.kernel != weight_spatial) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'kernel_shape' = [", absl::StrJoin(attrs.kernel, ","),
        "] disagrees with the weight's spatial dims [", absl::StrJoin(weight_spatial, ","), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<AxisWindow> ResolveWindowAxis(const WindowAttrs& a, int64_t axis, int64_t in) {
  const int64_t s = a.strides[axis];
  const int64_t ek = a.EffectiveKernel(axis);
  AxisWindow w;
  if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
    w.out = CeilDiv(in, s);
    SplitPads(a.auto_pad, std::max<int64_t>(0, (w.out - 1) * s + ek - in), w);
    return w;
  }
  if (a.auto_pad == "NOTSET") {
    w.pad_begin = a.pads[axis];
    w.pad_end = a.pads[axis + a.spatial];
  }
  const int64_t span = in + w.pad_begin + w.pad_end - ek;
  if (span < 0) {
    return absl::InvalidArgumentError(absl::StrCat("spatial axis ", axis, ": the window (kernel ",
                                                   a.kernel[axis], ", dilation ", a.dilations[axis],
                                                   ") is larger than the padded input (", in,
                                                   " + pads ", w.pad_begin, ", ", w.pad_end, ")"));
  }
  if (a.ceil_mode && a.auto_pad == "NOTSET") {
    w.out = CeilDiv(span, s) + 1;
    if ((w.out - 1) * s >= in + w.pad_begin) --w.out;
  } else {
    w.out = span / s + 1;
  }
  return w;
}

absl::StatusOr<AxisWindow> ResolveConvTransposeAxis(const WindowAttrs& a, int64_t axis,
                                                    int64_t in) {
  const int64_t s = a.strides[axis];
  const int64_t natural = s * (in - 1) + a.output_padding[axis] + a.EffectiveKernel(axis);
  AxisWindow w;
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  if (!a.output_shape.empty() || same) {
    w.out = a.output_shape.empty() ? in * s : a.output_shape[axis];
    SplitPads(a.auto_pad, natural - w.out, w);
  } else {
    if (a.auto_pad == "NOTSET") {
      w.pad_begin = a.pads[axis];
      w.pad_end = a.pads[axis + a.spatial];
    }
    w.out = natural - w.pad_begin - w.pad_end;
  }
  if (w.out < 0) {
    return absl::InvalidArgumentError(absl::StrCat("spatial axis ", axis,
                                                   ": the output size would be ", w.out,
                                                   " (pads larger than the output)"));
  }
  return w;
}

}  // namespace ottr::ir
