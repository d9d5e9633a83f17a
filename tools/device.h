// Executor construction by device name ("cpu", "cuda", "auto"), so every command treats
// --device the same way and CPU-only builds say clearly that CUDA is absent.
#ifndef OTTR_TOOLS_DEVICE_H_
#define OTTR_TOOLS_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace ottr::tools {

struct DeviceOptions {
  bool tf32 = true;
  bool cuda_graph = true;
  std::string algo_cache;
  uint64_t seed = 0;
};

// "auto" is "cuda" when this build has CUDA and a device is visible, else "cpu".
std::string ResolveDevice(const std::string& device);
bool BuiltWithCuda();

absl::StatusOr<std::unique_ptr<runtime::Executor>> MakeExecutor(const ir::Graph& graph,
                                                                const std::string& device,
                                                                const DeviceOptions& options = {});

}  // namespace ottr::tools

#endif  // OTTR_TOOLS_DEVICE_H_
