// Lowers ONNX's ai.onnx.preview.training Gradient op into the IR computing it.
#ifndef OTTR_PASSES_LOWER_GRADIENT_H_
#define OTTR_PASSES_LOWER_GRADIENT_H_

#include <memory>

#include "absl/status/status.h"
#include "ir/graph.h"
#include "passes/pass.h"

namespace ottr::passes {

// "lower-gradient": every Gradient node {xs, y} becomes the autodiff of y (seeded with ones, i.e.
// the gradient of the sum of y's elements) w.r.t. the node's inputs; its outputs are replaced by
// the gradients (zeros where y does not depend on an input).
std::unique_ptr<Pass> CreateLowerGradientPass();

// Runs the lowering passes every executor needs before running a graph (today: lower-gradient).
absl::Status LowerForExecution(ir::Graph& graph);

}  // namespace ottr::passes

#endif  // OTTR_PASSES_LOWER_GRADIENT_H_
