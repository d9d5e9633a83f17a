#include "ir/gradient.h"

namespace ottr::ir {

void RegisterConvPoolGradients(OpRegistry& r) {}

}  // namespace ottr::ir
