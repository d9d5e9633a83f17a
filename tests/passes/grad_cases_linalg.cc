#include "tests/passes/gradient_check.h"

namespace ottr::testing {

std::vector<GradCase> LinalgGradCases() { return {}; }

}  // namespace ottr::testing
