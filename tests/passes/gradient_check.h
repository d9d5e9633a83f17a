// Central-difference checks of gradient rules in float64 on the CPU reference.
//
// A case names one op, its inputs (float64 for the inputs to differentiate; integer inputs such as
// indices and labels stay integer) and attributes. The check builds
//   loss = Σ_k ReduceSum(output_k ⊙ W_k)        (W_k fixed random weights)
// differentiates it with passes::BuildGradients w.r.t. every float input, and compares each
// gradient element with (loss(x + h) - loss(x - h)) / 2h: |a - n| <= atol + rtol * max(|a|, |n|).
#ifndef OTTR_TESTS_PASSES_GRADIENT_CHECK_H_
#define OTTR_TESTS_PASSES_GRADIENT_CHECK_H_

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/attribute.h"
#include "ir/tensor.h"

namespace ottr::testing {

struct GradCase {
  std::string name;  // unique, e.g. "Gemm/transB"
  std::string op_type;
  std::string domain;  // "" = ai.onnx
  std::vector<ir::Tensor> inputs;  // default-constructed = omitted optional input
  std::map<std::string, ir::Attribute> attrs;
  int num_outputs = 1;
  // Inputs to differentiate; empty = every float input.
  std::vector<int> wrt;
  // Outputs that enter the loss; empty = every float output.
  std::vector<int> outputs;
  double h = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-6;  // the loss sums many terms; h = 1e-6 leaves ~1e-9 of rounding
};

// gtest prints a case by its name.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

// The case's graph: inputs (float inputs as graph inputs, others as constants), the op, the
// weighted-sum loss, and the gradients; outputs are [loss, d loss / d input_k for k in wrt].
// With `dtype` = kFloat32 the float inputs and weights are converted (for CPU-vs-GPU checks);
// an output typed otherwise by the op (a stash_type of float64) keeps its type, its loss term
// is cast to `dtype`.
struct GradientGraph {
  std::unique_ptr<ir::Graph> graph;
  std::map<std::string, ir::Tensor> feeds;
};
absl::StatusOr<GradientGraph> BuildGradientGraph(const GradCase& c, ir::DType dtype = ir::DType::kFloat64);

// Runs one case; OK or an error naming the input, element, analytic and numeric values.
absl::Status CheckGradient(const GradCase& c);

// Uniform random float64 tensor in [lo, hi), never all zeros.
ir::Tensor RandomDouble(std::vector<int64_t> dims, uint64_t seed, double lo = -1.0, double hi = 1.0);

// Cases per family, defined in tests/passes/grad_cases_<family>.cc.
std::vector<GradCase> ElementwiseGradCases();
std::vector<GradCase> ActivationGradCases();
std::vector<GradCase> ReductionGradCases();
std::vector<GradCase> TensorGradCases();
std::vector<GradCase> LinalgGradCases();
std::vector<GradCase> ConvPoolGradCases();
std::vector<GradCase> NormalizationGradCases();
std::vector<GradCase> LossGradCases();

}  // namespace ottr::testing

#endif  // OTTR_TESTS_PASSES_GRADIENT_CHECK_H_
