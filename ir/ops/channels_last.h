// The channels-last (NHWC) layout of the convolution and pooling ops, set by the nhwc-layout pass
// (passes/layout.h) for the CUDA executor, where cuDNN's convolutions run fastest on NHWC tensors.
//
// A node with the attribute layout = "NHWC" (ottr::Conv, ottr::MaxPool, ottr::ConvGradInput,
// ottr::ConvGradFilter, ottr::MaxPoolGrad) stores every tensor operand of rank >= 3 channels-last:
// dim 1 of the ONNX (channels-first) form moved to the end. Data tensors X, Y, dY, dX are
// [N, D1, ..., Dn, C]; the weight W and its gradient dW are [M, k1, ..., kn, C/group] (cuDNN's
// KRSC filter format). Rank-1 operands (the bias) and every attribute keep their ONNX meaning:
// kernel_shape, pads and strides are per spatial axis, and input_shape stays [N, C, D1, ...].
// layout = "NCHW" (or no attribute) is the ONNX layout.
//
// Both transposes between the forms are Transpose ops with the permutations below, so the layout
// pass writes them as ordinary IR and every executor runs them.
#ifndef OTTR_IR_OPS_CHANNELS_LAST_H_
#define OTTR_IR_OPS_CHANNELS_LAST_H_

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"

namespace ottr::ir {

inline constexpr char kLayoutAttr[] = "layout";
inline constexpr char kChannelsFirst[] = "NCHW";
inline constexpr char kChannelsLast[] = "NHWC";

// The node's layout attribute is "NHWC".
bool IsChannelsLast(const Node& n);

// Transpose perms: channels-first -> channels-last [0, 2, ..., r-1, 1], and back
// [0, r-1, 1, ..., r-2].
std::vector<int64_t> ToChannelsLastPerm(int64_t rank);
std::vector<int64_t> ToChannelsFirstPerm(int64_t rank);
// out[i] = dims[perm[i]] (Transpose's rule).
std::vector<int64_t> PermuteDims(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm);

// The shape function of a layout-aware op from its channels-first one: with layout NHWC the
// operands of rank >= 3 are moved to channels-first, `channels_first` infers, and its outputs of
// rank >= 3 are moved back. Rejects a layout other than NCHW / NHWC.
ShapeFn WithLayout(ShapeFn channels_first);

}  // namespace ottr::ir

#endif  // OTTR_IR_OPS_CHANNELS_LAST_H_
