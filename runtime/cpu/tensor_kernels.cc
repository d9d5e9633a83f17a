#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterTensorKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
