#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterConvPoolKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
