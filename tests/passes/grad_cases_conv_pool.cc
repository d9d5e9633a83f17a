#include "tests/passes/gradient_check.h"

namespace ottr::testing {

std::vector<GradCase> ConvPoolGradCases() { return {}; }

}  // namespace ottr::testing
