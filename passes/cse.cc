// "cse": common-subexpression elimination.
//
//   before:  %a = Relu(%x)   %b = Relu(%x)   %c = Add(%a, %b)
//   after:   %a = Relu(%x)                   %c = Add(%a, %a)
//
// Two nodes are the same computation when op, domain, inputs (by identity) and printed
// attributes are equal and the op is deterministic. The later node's outputs are redirected to the
// earlier node's and it is erased.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "passes/standard_passes.h"

namespace ottr::passes {
namespace {

class CsePass : public Pass {
 public:
  absl::string_view name() const override { return "cse"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, graph.TopoOrder());
    const ir::OpRegistry& registry = ir::OpRegistry::Global();
    absl::flat_hash_map<std::string, ir::Node*> seen;
    bool changed = false;
    for (ir::Node* n : order) {
      const ir::OpSchema* s = registry.Find(n->domain(), n->op_type());
      if (s == nullptr || !s->deterministic) continue;
      // Outputs feeding graph outputs keep their names; such a node may still be the survivor.
      std::string key = absl::StrCat(n->domain(), "::", n->op_type(), "(");
      for (const ir::Value* in : n->inputs()) absl::StrAppend(&key, in ? in->id() : -1, ",");
      absl::StrAppend(&key, ")", n->num_outputs(), "{");
      for (const auto& [name, a] : n->attrs()) {
        if (a.kind() == ir::Attribute::Kind::kGraph) {
          key.clear();  // subgraphs are not compared
          break;
        }
        absl::StrAppend(&key, name, "=", AttrKey(a), ";");
      }
      if (key.empty()) continue;
      auto [it, inserted] = seen.emplace(key, n);
      if (inserted) continue;
      ir::Node* keep = it->second;
      bool outputs_are_graph_outputs = false;
      for (const ir::Value* v : n->outputs()) outputs_are_graph_outputs |= graph.IsGraphOutput(v);
      if (outputs_are_graph_outputs) continue;  // keep the user's output names
      for (int i = 0; i < n->num_outputs(); ++i) graph.ReplaceAllUsesWith(n->output(i), keep->output(i));
      OTTR_RETURN_IF_ERROR(graph.EraseNode(n));
      changed = true;
    }
    return changed;
  }

 private:
  static std::string AttrKey(const ir::Attribute& a) {
    if (a.kind() == ir::Attribute::Kind::kTensor) {
      const ir::Tensor& t = a.t();
      return absl::StrCat(t.type().ToString(), ":",
                          absl::string_view(static_cast<const char*>(t.raw_data()), t.nbytes()));
    }
    // Print a one-attribute node to reuse the printer's exact formatting.
    ir::Graph g;
    ir::NodeSpec spec{"K", "", {}, {}, {{"a", a}}, ""};
    auto n = g.AddNode(std::move(spec));
    return n.ok() ? ir::PrintNode(**n) : "?";
  }
};

}  // namespace

std::unique_ptr<Pass> CreateCsePass() { return std::make_unique<CsePass>(); }

}  // namespace ottr::passes
