// Flags shared by `ottr train`, `ottr passes` and `ottr bench`: loss, optimizer, batch,
// freezing, symbolic dims. One parser so every command reads them the same way.
#ifndef OTTR_TOOLS_TRAINING_FLAGS_H_
#define OTTR_TOOLS_TRAINING_FLAGS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "passes/training.h"
#include "tools/cli_common.h"

namespace ottr::tools {

// The value flags the training spec reads.
std::set<std::string> TrainingValueFlags();
std::set<std::string> TrainingSwitchFlags();

// Builds the spec; `default_batch` applies when --batch is absent.
absl::StatusOr<passes::TrainingSpec> ParseTrainingSpec(const Args& args, int64_t default_batch);

// The spec `ottr train` and `ottr bench` run on `device`: on "cuda" the CUDA pipeline
// (passes::UseCudaPipeline) but for what --multi-tensor-optimizer, --fuse-epilogues and --layout
// set; optimizer_low_copies on every device.
void UseDevicePipeline(const Args& args, const std::string& device, passes::TrainingSpec& spec);

}  // namespace ottr::tools

#endif  // OTTR_TOOLS_TRAINING_FLAGS_H_
