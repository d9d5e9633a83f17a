#include "ir/gradient.h"

namespace ottr::ir {

void RegisterLinalgGradients(OpRegistry& r) {}

}  // namespace ottr::ir
