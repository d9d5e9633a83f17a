// Runs passes in order with the dump tooling of STYLE.md: print IR before/after passes whose
// name matches a regex (optionally only when they changed something), write one file per pass
// (NNN-<pass>.ir) into a dump folder, disable passes by name, stop after pass N (for bisecting a
// miscompile), verify after every pass that changed the graph and check the "changed" answer.
// Errors are prefixed with the pass name.
#ifndef OTTR_PASSES_PASS_MANAGER_H_
#define OTTR_PASSES_PASS_MANAGER_H_

#include <memory>
#include <ostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "passes/pass.h"

namespace ottr::passes {

struct PassManagerOptions {
  std::string print_before;      // regex over pass names; "" = none
  std::string print_after;       // regex over pass names; "" = none
  bool print_after_all = false;
  bool print_only_on_change = false;
  std::string dump_dir;          // one file per pass run: NNN-<pass>.ir (the IR after it)
  std::set<std::string> disabled;  // pass names to skip
  int stop_after = -1;           // run passes 1..N only (counting enabled passes); -1 = all
  bool verify_each = true;       // VerifyGraph after each pass that changed the graph
  bool check_changed = false;    // compare printed IR before/after with the pass's answer
  std::ostream* out = nullptr;   // where IR prints go (default std::cerr)
  std::ostream* remarks = nullptr;  // where passes explain fired/declined rewrites; null = nowhere
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options = {}) : options_(std::move(options)) {}
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  // Names in order (for --disable-passes help and tests).
  std::vector<std::string> PassNames() const;
  // Runs the pipeline; returns whether any pass changed the graph.
  absl::StatusOr<bool> Run(ir::Graph& graph);

 private:
  PassManagerOptions options_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

// A pass that runs a list of passes repeatedly until none changes the graph (at most
// `max_iterations` rounds). Each inner pass is verified like a top-level one.
class FixedPointPass : public Pass {
 public:
  FixedPointPass(std::string name, std::vector<std::unique_ptr<Pass>> passes,
                 int max_iterations = 16)
      : name_(std::move(name)), passes_(std::move(passes)), max_iterations_(max_iterations) {}
  absl::string_view name() const override { return name_; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Pass>> passes_;
  int max_iterations_;
};

}  // namespace ottr::passes

#endif  // OTTR_PASSES_PASS_MANAGER_H_
