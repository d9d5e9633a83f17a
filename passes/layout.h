// Layout passes of the training step (passes/layout.cc has the IR before and after).
//
//   nhwc-layout   the 2-D convolutions and max pools, their gradients and the elementwise nodes
//                 between them run channels-last (ir/ops/channels_last.h), with transposes only
//                 at the region's edge; the CUDA executor's cuDNN convolutions are fastest there.
#ifndef OTTR_PASSES_LAYOUT_H_
#define OTTR_PASSES_LAYOUT_H_

#include <memory>

#include "passes/pass.h"

namespace ottr::passes {

std::unique_ptr<Pass> CreateNhwcLayoutPass();

}  // namespace ottr::passes

#endif  // OTTR_PASSES_LAYOUT_H_
