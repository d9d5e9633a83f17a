// Element-type dispatch of LaunchReduce to the per-dtype files.
#include "runtime/cuda/kernels/reduction_kernels.h"

namespace ottr::cuda::kernels {

bool ReduceSupported(int dtype, ReduceKind kind) {
  switch (dtype) {
    case 1: case 10: case 16: case 11:  // float32, float16, bfloat16, float64
    case 6: case 7: case 12: case 13:   // int32, int64, uint32, uint64
    case 2: case 3:                     // uint8, int8
      return true;
    case 9:  // bool
      return kind == ReduceKind::kMax || kind == ReduceKind::kMin;
    default:
      return false;
  }
}

cudaError_t LaunchReduce(const ReducePlan& plan, const void* x, void* y, void* workspace,
                         cudaStream_t stream) {
  if (!ReduceSupported(plan.dtype, plan.kind)) return cudaErrorInvalidValue;
  switch (plan.dtype) {
    case 1: return LaunchReduceF32(plan, x, y, workspace, stream);
    case 10: case 16: return LaunchReduceHalf(plan, x, y, workspace, stream);
    case 11: return LaunchReduceF64(plan, x, y, workspace, stream);
    case 6: case 7: case 12: case 13: return LaunchReduceInt(plan, x, y, workspace, stream);
    default: return LaunchReduceSmallInt(plan, x, y, workspace, stream);
  }
}

}  // namespace ottr::cuda::kernels
