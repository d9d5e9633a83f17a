#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterNormalizationKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
