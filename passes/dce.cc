// "dce": removes nodes whose outputs nobody reads.
//
//   before:  %a = Relu(%x)   %b = Neg(%x)   output %a
//   after:   %a = Relu(%x)                  output %a
//
// Graph outputs are the roots. Nodes are visited in reverse topological order so a chain of dead
// nodes goes in one run.
#include "ir/status.h"
#include "passes/standard_passes.h"

namespace ottr::passes {
namespace {

class DcePass : public Pass {
 public:
  absl::string_view name() const override { return "dce"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, graph.TopoOrder());
    bool changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ir::Node* n = *it;
      bool used = false;
      for (int i = 0; i < n->num_outputs(); ++i) used |= n->output_used(i);
      if (used) continue;
      OTTR_RETURN_IF_ERROR(graph.EraseNode(n));
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateDcePass() { return std::make_unique<DcePass>(); }

}  // namespace ottr::passes
