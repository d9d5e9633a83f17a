// Helpers for tests: single-node graphs run on the CPU reference, random tensors.
#ifndef OTTR_TESTS_TEST_UTIL_H_
#define OTTR_TESTS_TEST_UTIL_H_

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace ottr::testing {

// Builds a graph with one node `op_type` whose inputs are graph inputs typed like `inputs`
// (a default-constructed Tensor = omitted optional input), runs shape inference, and runs it on
// the CPU reference. Returns the node's outputs.
absl::StatusOr<std::vector<ir::Tensor>> RunSingleNode(
    const std::string& op_type, const std::vector<ir::Tensor>& inputs,
    const std::map<std::string, ir::Attribute>& attrs = {}, int num_outputs = 1,
    const std::string& domain = "", int64_t opset = 0);  // 0: the newest opset ottr knows

// Uniform random floats in [lo, hi) (never all zeros), deterministic for a seed.
ir::Tensor RandomFloat(std::vector<int64_t> dims, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// RandomFloat's values rounded to bfloat16 (round to nearest even).
ir::Tensor RandomBFloat16(std::vector<int64_t> dims, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Uniform random integers in [lo, hi].
ir::Tensor RandomInt64(std::vector<int64_t> dims, uint64_t seed, int64_t lo, int64_t hi);

// ‖got − want‖₂ / ‖want‖₂ over all elements (same element count), in double; infinite when want
// is all zeros and got is not.
double NormwiseRelativeError(const ir::Tensor& got, const ir::Tensor& want);

// A copy of the forward graph `g` computing in float64: every float32 value and initializer becomes
// float64 (names, order and nodes unchanged), for a reference against which float32 results'
// own rounding errors can be measured. Fails on a node with a float32 attribute tensor.
absl::StatusOr<std::unique_ptr<ir::Graph>> ToFloat64(const ir::Graph& g);

// The number of nodes of `g` whose op type is `op` (any domain).
int CountOps(const ir::Graph& g, const std::string& op);

// Path of a file in the source tree (OTTR_SOURCE_DIR).
std::string SourcePath(const std::string& relative);

}  // namespace ottr::testing

#endif  // OTTR_TESTS_TEST_UTIL_H_
