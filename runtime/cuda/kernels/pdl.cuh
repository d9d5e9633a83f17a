// Programmatic dependent launch (PDL, sm_90 and later) for ottr's kernels (CUDA only).
//
// A kernel launched programmatically (LaunchKernel with `programmatic`) may start while the kernel
// before it on its stream is still running: its blocks are scheduled once every block of that
// kernel has called LetDependentsLaunch() or exited, which hides the launch latency (block
// scheduling, the kernel's prologue) behind the end of the kernel before. The rules for a kernel
// that may be launched so:
//  - every block calls WaitForPriorGrids() before it reads anything an earlier launch of the step
//    writes and before it writes anything (its outputs and workspaces may be bytes the kernel
//    before still reads); the wait returns once the kernels it depends on have completed and their
//    writes are visible. A block may return early only after it;
//  - it calls LetDependentsLaunch() after that wait (before it, the kernels after it would start
//    while it waits, and so on down the chain, holding SMs the other streams need).
// In a kernel launched the ordinary way both are no-ops: the stream has already ordered it.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_PDL_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_PDL_CUH_

#include <cuda_runtime.h>

#include <utility>

namespace ottr::cuda::kernels {

__device__ __forceinline__ void WaitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void LetDependentsLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// How a kernel is launched. `programmatic`: it may start while the kernel before it on its stream
// ends (the kernel must follow the rules above); `cooperative`: every block resident at once (the
// caller sizes the grid to fit), for kernels whose blocks wait on one another.
struct LaunchMode {
  bool programmatic = false;
  bool cooperative = false;
};

// Launches `kernel` on `stream` as `mode` says; cudaLaunchKernelEx's status.
template <typename... P, typename... A>
cudaError_t LaunchKernel(LaunchMode mode, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                         cudaStream_t stream, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attrs[2] = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attrs;
  if (mode.cooperative) {
    attrs[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
    attrs[cfg.numAttrs++].val.cooperative = 1;
  }
  if (mode.programmatic) {
    attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// An ordinary (not cooperative) launch, programmatic when asked.
template <typename... P, typename... A>
cudaError_t LaunchKernel(bool programmatic, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                         cudaStream_t stream, A&&... args) {
  return LaunchKernel(LaunchMode{programmatic, false}, kernel, grid, block, smem_bytes, stream,
                      std::forward<A>(args)...);
}

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_PDL_CUH_
