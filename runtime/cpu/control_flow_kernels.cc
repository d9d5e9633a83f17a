#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterControlFlowKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
