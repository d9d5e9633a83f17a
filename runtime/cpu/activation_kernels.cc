#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterActivationKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
