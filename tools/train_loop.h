// The training loop behind `ottr train`: builds the step graph, runs it batch by batch with a
// progress display, evaluates on the test set each epoch, checkpoints, resumes, and writes the
// trained model.
#ifndef OTTR_TOOLS_TRAIN_LOOP_H_
#define OTTR_TOOLS_TRAIN_LOOP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "passes/training.h"
#include "runtime/data.h"

namespace ottr::tools {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  double lr = 1e-3;
  int64_t step_size = 1000;  // kStep: multiply by gamma every step_size steps
  double gamma = 0.1;
  double min_lr = 0.0;       // kCosine: the floor
  int64_t warmup_steps = 0;  // linear warm-up from lr / warmup_steps
  // Learning rate of the step with 0-based index `step` out of `total` steps.
  double At(int64_t step, int64_t total) const;
};

struct TrainConfig {
  passes::TrainingSpec spec;
  LrSchedule schedule;
  int64_t epochs = 1;
  int64_t max_steps = -1;  // > 0: stop after this many steps in total
  uint64_t seed = 0;       // data order and Dropout
  std::string out;         // trained model (.onnx); "" = do not write
  std::string checkpoint;  // checkpoint file; "" = none
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end of each epoch (when a file is set)
  std::string resume;      // checkpoint to continue from
  // > 0: end this run once this many steps are done in total (writing the checkpoint), as a
  // preemptible job would; a later --resume continues exactly where it stopped.
  int64_t stop_after = -1;
  int64_t log_every = 100;
  bool nan_skip = false;   // non-finite loss: skip the step (true) or stop (false)
  std::string device = "cpu";  // "cpu" or "cuda" (resolved from "auto" by the command)
  bool tf32 = true;            // CUDA: TF32 GEMMs and convolutions for float32
  bool cuda_graph = true;      // CUDA: replay the step as one CUDA Graph
  std::string algo_cache;      // CUDA: --algo-cache FILE
  int streams = 2;             // CUDA: --streams N (CudaExecutorOptions::streams)
  std::string input;       // the model input the features feed ("" = its only input)
  int64_t eval_batch = 1000;
};

absl::Status RunTraining(const std::string& model_path, const runtime::DataSource& data,
                         const TrainConfig& config);

// `ottr eval`: loss and accuracy of a model's logits output on a data set.
struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t examples = 0;
};

}  // namespace ottr::tools

#endif  // OTTR_TOOLS_TRAIN_LOOP_H_
