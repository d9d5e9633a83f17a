#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterLossKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
