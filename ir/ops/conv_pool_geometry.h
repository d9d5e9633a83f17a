// Window geometry of Conv, ConvTranspose and the pooling ops: attribute parsing and the per-axis
// output size and padding. The shape functions (ir/ops/conv_pool_ops.cc) and the CPU kernels
// (runtime/cpu/conv_pool_kernels.cc) both use these functions, so the static output shapes and the
// computed ones agree by construction.
//
// Per spatial axis, with ek = (kernel - 1) * dilation + 1 the extent of the dilated window:
//   explicit pads (auto_pad NOTSET):
//     out = floor((in + pad_begin + pad_end - ek) / stride) + 1, or with ceil_mode
//     out = ceil(...) + 1, minus one when that last window would start inside the end padding
//     ((out - 1) * stride >= in + pad_begin), as PyTorch and the ONNX reference do;
//   SAME_UPPER / SAME_LOWER: out = ceil(in / stride) and
//     total = max(0, (out - 1) * stride + ek - in) split in half, the odd one at the end (UPPER)
//     or at the beginning (LOWER); ceil_mode does not apply;
//   VALID: no padding, out = floor((in - ek) / stride) + 1.
// ConvTranspose (the adjoint of Conv):
//   out = stride * (in - 1) + output_padding + ek - pad_begin - pad_end;
//   with output_shape given (or SAME_*, where output_shape = in * stride), the pads are derived:
//     total = stride * (in - 1) + output_padding + ek - out,
//     SAME_UPPER: pad_begin = floor(total / 2), pad_end = total - pad_begin;
//     otherwise:  pad_end = floor(total / 2), pad_begin = total - pad_end.
//   A negative total (output larger than the natural size) gives negative pads: the extra output
//   positions receive no contributions (only the bias).
#ifndef OTTR_IR_OPS_CONV_POOL_GEOMETRY_H_
#define OTTR_IR_OPS_CONV_POOL_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace ottr::ir {

// The window attributes of one node, validated for `spatial` axes. Errors are InvalidArgument with
// a message that does not name the node (callers add that).
struct WindowAttrs {
  int64_t spatial = 0;
  std::vector<int64_t> kernel;     // empty when kernel_shape is absent (Conv: taken from W)
  std::vector<int64_t> strides;    // >= 1
  std::vector<int64_t> dilations;  // >= 1
  std::vector<int64_t> pads;       // 2 * spatial explicit pads (begins then ends), >= 0
  std::string auto_pad;            // NOTSET, SAME_UPPER, SAME_LOWER or VALID
  bool ceil_mode = false;
  // ConvTranspose only.
  std::vector<int64_t> output_padding;  // spatial values, default 0
  std::vector<int64_t> output_shape;    // empty, or the spatial output sizes

  int64_t EffectiveKernel(int64_t axis) const { return (kernel[axis] - 1) * dilations[axis] + 1; }
};

// Reads kernel_shape, strides, dilations, pads, auto_pad, ceil_mode (and for ConvTranspose
// output_padding and output_shape; output_shape may also be given with the N and C dims, which are
// dropped). `kernel_required` makes an absent kernel_shape an error (the pooling ops).
absl::StatusOr<WindowAttrs> ReadWindowAttrs(const Node& node, int64_t spatial, bool kernel_required,
                                            bool conv_transpose = false);

// Sets attrs.kernel from the weight's spatial dims when kernel_shape is absent, or checks that
// they agree when it is present.
absl::Status SetKernelFromWeights(WindowAttrs& attrs, const std::vector<int64_t>& weight_spatial);

struct AxisWindow {
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
  int64_t out = 0;
};

// Conv and the pooling ops (Conv has no ceil_mode, so attrs.ceil_mode is false there). Fails when
// the window does not fit the padded input.
absl::StatusOr<AxisWindow> ResolveWindowAxis(const WindowAttrs& attrs, int64_t axis, int64_t in);
// ConvTranspose. Fails when the output size would be negative.
absl::StatusOr<AxisWindow> ResolveConvTransposeAxis(const WindowAttrs& attrs, int64_t axis,
                                                    int64_t in);

}  // namespace ottr::ir

#endif  // OTTR_IR_OPS_CONV_POOL_GEOMETRY_H_
