#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"

namespace ottr::ir {

void RegisterConvPoolOps(OpRegistry& r) {}

}  // namespace ottr::ir
