#include "ir/gradient.h"

namespace ottr::ir {

void RegisterActivationGradients(OpRegistry& r) {}

}  // namespace ottr::ir
