// "constant-folding": evaluates nodes whose inputs are all known constants on the CPU reference.
//
//   before:  %s : i64[2] = Shape(%x : f32[128,784])    %r = Reshape(%y, %s)
//   after:   %s : i64[2] = Constant() {value = tensor<i64[2] [128, 784]>}   %r = Reshape(%y, %s)
//
// Constants are Constant nodes and integer/bool initializers; Shape and Size of a statically
// shaped value are constants too. Float initializers are never folded (they may be trained).
// Declines (debug reason in a comment): random ops (non-deterministic schema), nodes with
// subgraphs, ottr-domain nodes, and results larger than max_elements.
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/standard_passes.h"
#include "runtime/cpu/kernel.h"

namespace ottr::passes {
namespace {

using ir::Tensor;

// The constant value of `v`, if it has one. Float initializers may be trained and initializers
// a state update rewrites (the step counter) change every step: neither is constant.
const Tensor* ConstantValue(const ir::Value* v) {
  if (v->is_initializer()) {
    if (ir::IsFloat(v->type().dtype)) return nullptr;
    for (const ir::StateUpdate& u : v->graph()->updates()) {
      if (u.target == v) return nullptr;
    }
    return v->initializer();
  }
  const ir::Node* p = v->producer();
  if (p != nullptr && p->domain().empty() && p->op_type() == "Constant") {
    const ir::Attribute* a = p->attr("value");
    return a != nullptr && a->kind() == ir::Attribute::Kind::kTensor ? &a->t() : nullptr;
  }
  return nullptr;
}

bool IsConstantNode(const ir::Node& n) { return n.domain().empty() && n.op_type() == "Constant"; }

class ConstantFoldingPass : public Pass {
 public:
  explicit ConstantFoldingPass(int64_t max_elements) : max_elements_(max_elements) {}
  absl::string_view name() const override { return "constant-folding"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, graph.TopoOrder());
    const ir::OpRegistry& registry = ir::OpRegistry::Global();
    const runtime::cpu::KernelRegistry& kernels = runtime::cpu::KernelRegistry::Global();
    bool changed = false;
    for (ir::Node* n : order) {
      if (IsConstantNode(*n) || n->domain() == ir::kOttrDomain) continue;
      std::vector<Tensor> results;
      const bool shape_like = n->domain().empty() && (n->op_type() == "Shape" || n->op_type() == "Size");
      if (shape_like && n->input(0) && n->input(0)->type().is_static() &&
          !ConstantValue(n->input(0))) {
        // Shape/Size need only the static type: evaluate on a zero tensor of that type.
        const ir::TensorType& t = n->input(0)->type();
        if (ir::NumElements(ir::StaticDims(*t.shape)) > max_elements_) continue;
        Tensor dummy(t.dtype, ir::StaticDims(*t.shape));
        OTTR_ASSIGN_OR_RETURN(results, Evaluate(*n, {&dummy}, kernels));
      } else {
        const ir::OpSchema* s = registry.Find(n->domain(), n->op_type());
        if (s == nullptr || !s->deterministic) continue;  // e.g. Dropout: random
        bool has_subgraph = false;
        for (const auto& [k, a] : n->attrs()) has_subgraph |= a.kind() == ir::Attribute::Kind::kGraph;
        if (has_subgraph) continue;
        std::vector<const Tensor*> inputs;
        bool all_constant = true;
        for (const ir::Value* in : n->inputs()) {
          const Tensor* c = in ? ConstantValue(in) : nullptr;
          if (in != nullptr && c == nullptr) all_constant = false;
          inputs.push_back(c);
        }
        if (!all_constant) continue;
        OTTR_ASSIGN_OR_RETURN(results, Evaluate(*n, inputs, kernels));
      }
      bool too_big = false;
      for (const Tensor& t : results) too_big |= t.num_elements() > max_elements_;
      if (too_big) continue;  // folding would bloat the model
      for (int i = 0; i < n->num_outputs(); ++i) {
        if (!n->output_used(i) || !results[i].defined()) continue;
        ir::Value* old = n->output(i);
        OTTR_ASSIGN_OR_RETURN(
            ir::Node * c,
            graph.AddNode({"Constant", "", {}, {graph.UniqueName(old->name() + ".folded")},
                           {{"value", ir::Attribute(results[i])}}, n->origin()}));
        c->output(0)->set_type(results[i].type());
        const bool was_output = graph.IsRoot(old);
        graph.ReplaceAllUsesWith(old, c->output(0));
        if (was_output) {
          // Keep the user-visible name on the graph output.
          const std::string name = old->name();
          graph.RenameValue(old, graph.UniqueName(name + ".dead"));
          graph.RenameValue(c->output(0), name);
        }
      }
      absl::Status erased = graph.EraseNode(n);
      if (!erased.ok()) continue;  // an unused-but-unevaluated output; DCE handles it later
      changed = true;
    }
    return changed;
  }

 private:
  static absl::StatusOr<std::vector<Tensor>> Evaluate(const ir::Node& n,
                                                      std::vector<const Tensor*> inputs,
                                                      const runtime::cpu::KernelRegistry& kernels) {
    const runtime::cpu::KernelFn* fn = kernels.Find(n.domain(), n.op_type());
    if (fn == nullptr) {
      return absl::UnimplementedError(absl::StrCat(n.Describe(), ": no CPU kernel to fold it"));
    }
    std::vector<Tensor> outputs(n.num_outputs());
    std::mt19937_64 rng(0);
    runtime::cpu::KernelContext ctx(n, std::move(inputs), &outputs, &rng, nullptr);
    OTTR_RETURN_IF_ERROR((*fn)(ctx));
    return outputs;
  }

  int64_t max_elements_;
};

}  // namespace

std::unique_ptr<Pass> CreateConstantFoldingPass(int64_t max_elements) {
  return std::make_unique<ConstantFoldingPass>(max_elements);
}

}  // namespace ottr::passes
