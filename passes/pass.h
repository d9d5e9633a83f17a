// The pass interface: a named graph-to-graph rewrite that reports whether it changed anything.
#ifndef OTTR_PASSES_PASS_H_
#define OTTR_PASSES_PASS_H_

#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace ottr::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  // kebab-case, e.g. "fuse-gemm-epilogue".
  virtual absl::string_view name() const = 0;
  // Rewrites `graph`; returns true when it changed it (the pass manager verifies after changes
  // and can check the claim).
  virtual absl::StatusOr<bool> Run(ir::Graph& graph) = 0;

  // Where the pass explains its decisions, one line each (a rewrite that fired, or declined and
  // why); null: nowhere. The pass manager sets it from PassManagerOptions::remarks.
  void set_remarks(std::ostream* out) { remarks_ = out; }
  std::ostream* remarks() const { return remarks_; }

 private:
  std::ostream* remarks_ = nullptr;
};

}  // namespace ottr::passes

#endif  // OTTR_PASSES_PASS_H_
