// Helpers shared by the pass tests written the STYLE.md way (IR text in, the pass, the printed IR
// and remarks compared with the expected, the graph run before and after on the CPU reference).
#ifndef OTTR_TESTS_PASSES_PASS_TEST_UTIL_H_
#define OTTR_TESTS_PASSES_PASS_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "passes/training.h"
#include "runtime/executor.h"

namespace ottr::testing {

// Parses IR text and infers its shapes (a gtest failure, and null, when either fails).
std::unique_ptr<ir::Graph> ParseInferred(const std::string& text);

// The node and output lines of the printed graph (inputs and initializers left out).
std::string IrBody(const ir::Graph& g);

// Uniform random floats in [-1, 1) for every graph input (static shapes; float64 inputs get the
// same values widened), seeds seed, seed + 1, ...
runtime::TensorMap RandomFeeds(const ir::Graph& g, uint64_t seed);

// The graph's outputs on the CPU reference (empty, with a gtest failure, when it does not run).
std::vector<ir::Tensor> RunOnCpu(const ir::Graph& g, const runtime::TensorMap& feeds);

// `pass` run on the parsed `text`: the graph before and after (verified), whether the pass said
// it changed anything, and its remarks.
struct PassRun {
  std::unique_ptr<ir::Graph> before, after;
  bool changed = false;
  std::string remarks;
};
PassRun RunPassOnText(std::unique_ptr<passes::Pass> pass, const std::string& text);

// Runs `r.before` and `r.after` on the CPU reference from RandomFeeds(seed) and expects the same
// outputs (as many, none missing, the same dims): bit for bit when `rtol` is 0, else within
// runtime::AllClose(rtol, rtol).
void ExpectSameOutputs(const PassRun& r, uint64_t seed, double rtol = 0.0);
// The same with the given feeds.
void ExpectSameOutputsOn(const PassRun& r, const runtime::TensorMap& feeds, double rtol = 0.0);

// One training step of `forward` (passes::BuildTrainingGraph with `spec` and `options`) on the
// CPU reference: the first input uniform in [-1, 1) with dims `x_dims` (seed 3), labels in
// [0, 10) (seed 4), learning rate `lr`. `step` is null and `outputs` empty after a failure (a
// gtest failure too).
struct ModelStep {
  std::unique_ptr<ir::Graph> step;
  std::vector<ir::Tensor> outputs;
};
ModelStep RunStepOnCpu(const ir::Graph& forward, const std::vector<int64_t>& x_dims, const passes::TrainingSpec& spec,
                       float lr, passes::PassManagerOptions options = {});
// Both steps ran and every output of `a` (loss, updated parameters and state) is the same bits
// as that of `b`.
void ExpectSameStepOutputs(const ModelStep& a, const ModelStep& b);

}  // namespace ottr::testing

#endif  // OTTR_TESTS_PASSES_PASS_TEST_UTIL_H_
