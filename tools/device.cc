#include "tools/device.h"

#include "absl/strings/str_cat.h"
#include "runtime/cpu/cpu_executor.h"
#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#endif

namespace ottr::tools {

bool BuiltWithCuda() {
#ifdef OTTR_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string ResolveDevice(const std::string& device) {
  if (device != "auto") return device;
#ifdef OTTR_HAVE_CUDA
  if (cuda::CudaDeviceAvailable()) return "cuda";
#endif
  return "cpu";
}

absl::StatusOr<std::unique_ptr<runtime::Executor>> MakeExecutor(const ir::Graph& graph,
                                                                const std::string& device,
                                                                const DeviceOptions& options) {
  const std::string d = ResolveDevice(device);
  if (d == "cpu") {
    runtime::cpu::CpuExecutorOptions o;
    o.seed = options.seed;
    auto e = runtime::cpu::CpuExecutor::Create(graph, o);
    if (!e.ok()) return e.status();
    return std::unique_ptr<runtime::Executor>(std::move(*e));
  }
  if (d == "cuda") {
#ifdef OTTR_HAVE_CUDA
    cuda::CudaExecutorOptions o;
    o.tf32 = options.tf32;
    o.use_cuda_graph = options.cuda_graph;
    o.algo_cache_file = options.algo_cache;
    o.seed = options.seed;
    auto e = cuda::CudaExecutor::Create(graph, o);
    if (!e.ok()) return e.status();
    return std::unique_ptr<runtime::Executor>(std::move(*e));
#else
    return absl::UnimplementedError(
        "--device cuda: this ottr was built without CUDA (no nvcc, cuBLASLt or cuDNN found, or "
        "-DOTTR_CUDA=OFF)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": expected cpu, cuda or auto"));
}

}  // namespace ottr::tools
