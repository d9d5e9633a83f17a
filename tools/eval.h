// Loss and accuracy of a classifier's logits on a labelled data set, on the CPU reference.
#ifndef OTTR_TOOLS_EVAL_H_
#define OTTR_TOOLS_EVAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/data.h"
#include "tools/train_loop.h"

namespace ottr::tools {

class Evaluator {
 public:
  // `input` is fed the features; `logits` names the output ("" = the only output). The graph is
  // copied.
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const ir::Graph& forward,
                                                           const std::string& input,
                                                           const std::string& logits,
                                                           int64_t batch,
                                                           const std::string& device = "cpu");
  // Replaces a parameter's value (e.g. from the training state).
  absl::Status SetParameter(const std::string& name, const ir::Tensor& t);
  // Mean softmax cross-entropy and top-1 accuracy over every example.
  absl::StatusOr<EvalResult> Evaluate(const runtime::ArrayDataset& data);

 private:
  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<runtime::cpu::CpuExecutor> exec_;
  // On CUDA: the executor of the current parameters; SetParameter updates the graph and drops it.
  std::string device_ = "cpu";
  std::unique_ptr<runtime::Executor> device_exec_;
  std::string input_;
  int output_index_ = 0;
  int64_t batch_ = 0;
  bool fixed_batch_ = false;
  std::vector<int64_t> feature_dims_;
};

// Rewrites every BatchNormalization in training mode into its inference form (normalising with the
// running statistics); an error when the graph reads the running-statistics outputs.
absl::Status ToInferenceMode(ir::Graph& g);

absl::Status CmdEval(const std::vector<std::string>& argv);

}  // namespace ottr::tools

#endif  // OTTR_TOOLS_EVAL_H_
