// CPU reference of the channels-last (layout = "NHWC") convolution and pooling ops
// (ir/ops/channels_last.h): the operands of rank >= 3 are transposed to channels-first, the
// channels-first kernel runs, and its outputs of rank >= 3 are transposed back. Slow (two extra
// copies per operand) and exactly the channels-first result: it is the reference the CUDA NHWC
// kernels and the nhwc-layout pass are tested against.
#ifndef OTTR_RUNTIME_CPU_CHANNELS_LAST_H_
#define OTTR_RUNTIME_CPU_CHANNELS_LAST_H_

#include <cstdint>
#include <vector>

#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

// A contiguous copy of `t` transposed by `perm` (out.dims[i] = t.dims[perm[i]]), any dtype.
Tensor PermuteTensor(const Tensor& t, const std::vector<int64_t>& perm);

// The kernel of a layout-aware op from its channels-first kernel.
KernelFn WithLayout(KernelFn channels_first);

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_CHANNELS_LAST_H_
