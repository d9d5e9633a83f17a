// "lower-gradient":
//
//   before:  %c = Add(%a, %b)   %da, %db = ai.onnx.preview.training::Gradient(%a, %b) {xs = ["a", "b"], y = "c"}
//   after:   %c = Add(%a, %b)   %da = Constant(ones like c) ... (the gradient nodes of Add)
//
// Precondition: y has a static shape. The outputs keep their names.
#include "passes/lower_gradient.h"

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/autodiff.h"

namespace ottr::passes {
namespace {

// Makes `replacement` take `old`'s place and name (graph outputs keep their names).
absl::Status ReplaceKeepingName(ir::Graph& g, ir::Value* old, ir::Value* replacement,
                                const std::string& origin) {
  const std::string name = old->name();
  g.ReplaceAllUsesWith(old, replacement);
  if (!g.IsGraphOutput(replacement) || replacement->name() == name) return absl::OkStatus();
  // Give the output its own node so it can carry the original name.
  g.RenameValue(old, g.UniqueName(name + ".replaced"));
  OTTR_ASSIGN_OR_RETURN(ir::Node * id, g.AddNode({"Identity", "", {replacement}, {name}, {}, origin}));
  id->output(0)->set_type(replacement->type());
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (g.outputs()[k] == replacement) {
      g.SetOutput(static_cast<int>(k), id->output(0));
      break;
    }
  }
  return absl::OkStatus();
}

class LowerGradientPass : public Pass {
 public:
  absl::string_view name() const override { return "lower-gradient"; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    bool changed = false;
    for (ir::Node* n : g.nodes()) {
      if (n->domain() != ir::kTrainingDomain || n->op_type() != "Gradient") continue;
      const ir::Attribute* y_attr = n->attr("y");
      ir::Value* y = y_attr ? g.FindValue(y_attr->s()) : nullptr;
      if (y == nullptr) return absl::InvalidArgumentError(absl::StrCat(n->Describe(), ": y names no value"));
      const std::vector<std::string> xs =
          n->attr("xs") ? n->attr("xs")->strings() : std::vector<std::string>();
      if (xs.size() > static_cast<size_t>(n->num_inputs()) ||
          xs.size() != static_cast<size_t>(n->num_outputs())) {
        return absl::InvalidArgumentError(absl::StrCat(n->Describe(), ": ", xs.size(), " xs for ",
                                                       n->num_inputs(), " inputs and ",
                                                       n->num_outputs(), " outputs"));
      }
      if (!y->type().is_static()) {
        return absl::InvalidArgumentError(absl::StrCat(n->Describe(), ": y '", y->name(),
                                                       "' needs a static shape"));
      }
      ir::Tensor ones(y->type().dtype, ir::StaticDims(*y->type().shape));
      ir::VisitDType(ones.dtype(), [&]<typename T>() {
        if constexpr (!std::is_void_v<T>) {
          for (auto& v : ones.span<T>()) v = ir::FromDouble<T>(1.0);
        }
      });
      OTTR_ASSIGN_OR_RETURN(ir::Node * seed, g.AddNode({"Constant", "", {}, {g.UniqueName(y->name() + ".ones")},
                                                        {{"value", ir::Attribute(ones)}}, n->origin()}));
      seed->output(0)->set_type(y->type());
      std::vector<ir::Value*> params(n->inputs().begin(), n->inputs().begin() + xs.size());
      OTTR_ASSIGN_OR_RETURN(std::vector<ir::Value*> grads, BuildGradients(g, y, params, seed->output(0)));
      for (size_t i = 0; i < xs.size(); ++i) {
        ir::Value* grad = grads[i];
        if (grad == nullptr) {  // y does not depend on x_i
          const ir::TensorType& t = params[i]->type();
          if (!t.is_static()) return absl::InvalidArgumentError("Gradient of an unused input needs a static shape");
          OTTR_ASSIGN_OR_RETURN(ir::Node * z, g.AddNode({"Constant", "", {}, {g.UniqueName(xs[i] + ".zero_grad")},
                                                         {{"value", ir::Attribute(ir::Tensor(t.dtype, ir::StaticDims(*t.shape)))}},
                                                         n->origin()}));
          z->output(0)->set_type(t);
          grad = z->output(0);
        }
        OTTR_RETURN_IF_ERROR(ReplaceKeepingName(g, n->output(i), grad, n->origin()));
      }
      OTTR_RETURN_IF_ERROR(g.EraseNode(n));
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateLowerGradientPass() { return std::make_unique<LowerGradientPass>(); }

absl::Status LowerForExecution(ir::Graph& graph) {
  return CreateLowerGradientPass()->Run(graph).status();
}

}  // namespace ottr::passes
