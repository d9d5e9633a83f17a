#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterReductionKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
