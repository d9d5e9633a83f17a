// Structural checks of a graph: use lists match node inputs, no cycles, graph outputs defined,
// every node valid for its schema, initializer types match their data. Returns
// FailedPrecondition naming the first problem found.
#ifndef OTTR_IR_VERIFIER_H_
#define OTTR_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace ottr::ir {

absl::Status VerifyGraph(const Graph& graph, const OpRegistry& registry = OpRegistry::Global());

}  // namespace ottr::ir

#endif  // OTTR_IR_VERIFIER_H_
