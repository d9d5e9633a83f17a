// Factories for ottr's general-purpose passes. Each lives in its own file.
#ifndef OTTR_PASSES_STANDARD_PASSES_H_
#define OTTR_PASSES_STANDARD_PASSES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "passes/pass.h"

namespace ottr::passes {

// "infer-shapes": binds symbolic or unknown input dimensions and re-runs every node's shape
// function in topological order. `batch` (> 0) binds the leading dimension of every graph input
// whose leading dimension is not static; `dims` binds named symbols ("T" -> 16) everywhere.
std::unique_ptr<Pass> CreateInferShapesPass(int64_t batch = 0,
                                            std::vector<std::pair<std::string, int64_t>> dims = {});

// "constant-folding": evaluates, on the CPU reference, nodes whose inputs are all constants
// (Constant nodes, integer/bool initializers, and Shape/Size of statically shaped values) and
// replaces their outputs by Constant nodes. Float initializers are never folded: they may be
// trained. Random ops and results over `max_elements` are left alone.
std::unique_ptr<Pass> CreateConstantFoldingPass(int64_t max_elements = 1 << 20);

// "dce": removes nodes none of whose outputs is used (directly or through graph outputs and
// state updates).
std::unique_ptr<Pass> CreateDcePass();

// "cse": merges nodes with the same op, domain, inputs and attributes (deterministic ops only).
std::unique_ptr<Pass> CreateCsePass();

}  // namespace ottr::passes

#endif  // OTTR_PASSES_STANDARD_PASSES_H_
