// Reverse-mode automatic differentiation over the IR.
#ifndef OTTR_PASSES_AUTODIFF_H_
#define OTTR_PASSES_AUTODIFF_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace ottr::passes {

// Appends to `graph` the nodes computing d(loss)/d(param) for each of `params` and returns one
// gradient value per param, or null for a param the loss does not depend on. `loss` must be a
// float scalar (or `seed` gives its gradient, same type as loss). Gradients of values reaching the
// loss along several paths are summed; integer and bool values carry none; nodes off the path
// from the params to the loss get no gradient nodes.
absl::StatusOr<std::vector<ir::Value*>> BuildGradients(ir::Graph& graph, ir::Value* loss,
                                                       const std::vector<ir::Value*>& params,
                                                       ir::Value* seed = nullptr);

}  // namespace ottr::passes

#endif  // OTTR_PASSES_AUTODIFF_H_
