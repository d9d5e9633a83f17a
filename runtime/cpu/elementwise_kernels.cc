#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

void RegisterElementwiseKernels(KernelRegistry& r) {}

}  // namespace ottr::runtime::cpu
