#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterTrainingKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
