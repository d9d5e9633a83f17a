#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterLinalgKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
