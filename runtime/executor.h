// The executor interface shared by the CPU reference and the CUDA executor: a compiled graph that
// maps named input tensors to the graph's outputs.
#ifndef OTTR_RUNTIME_EXECUTOR_H_
#define OTTR_RUNTIME_EXECUTOR_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace ottr::runtime {

using ir::Tensor;
using TensorMap = absl::flat_hash_map<std::string, Tensor>;

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the graph on `feeds` (graph inputs by name; an initializer may be overridden by name)
  // and returns the graph outputs in order.
  virtual absl::StatusOr<std::vector<Tensor>> Run(const TensorMap& feeds) = 0;
};

// Checks a fed tensor against the graph input it feeds: same element type, same rank, and equal
// sizes where the model's dimension is static. The error names the input and both shapes.
absl::Status CheckFeed(const ir::Value& input, const Tensor& t);

}  // namespace ottr::runtime

#endif  // OTTR_RUNTIME_EXECUTOR_H_
