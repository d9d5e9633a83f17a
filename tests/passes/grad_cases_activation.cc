#include "tests/passes/gradient_check.h"

namespace ottr::testing {

std::vector<GradCase> ActivationGradCases() { return {}; }

}  // namespace ottr::testing
