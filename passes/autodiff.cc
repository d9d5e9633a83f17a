// Reverse-mode autodiff.
//
//   before:  %h = Gemm(%x, %w, %b) {transB = 1}   %loss = ReduceMean(%h)
//   after:   ... plus, in reverse order, the nodes each op's gradient rule emits:
//            %dh = Expand(1/n)   %dw = Gemm(%dh, %x) {transA = 1}   %db = ReduceSum(%dh, [0])
//
// Precondition: static shapes (the batch size bound), a float loss. Only nodes that both depend
// on a parameter and lead to the loss are differentiated; integer and bool values carry no
// gradient; a value used several times gets the Sum of its gradient contributions.
#include "passes/autodiff.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"
#include "ir/status.h"

namespace ottr::passes {
namespace {

using ir::Value;

bool CarriesGradient(const Value* v) { return v != nullptr && ir::IsFloat(v->type().dtype); }

// Sums the contributions of one value's gradient (one Sum node when there are several).
absl::StatusOr<Value*> Accumulate(ir::Graph& graph, const Value* of, std::vector<Value*>& parts) {
  if (parts.empty()) return nullptr;
  if (parts.size() == 1) return parts[0];
  ir::NodeSpec spec{"Sum", "", parts, {graph.UniqueName(of->name() + ".grad_sum")}, {},
                    absl::StrCat(of->name(), "/grad_accumulate")};
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, graph.AddNode(std::move(spec)));
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *n));
  parts = {n->output(0)};
  return n->output(0);
}

}  // namespace

absl::StatusOr<std::vector<Value*>> BuildGradients(ir::Graph& graph, Value* loss,
                                                   const std::vector<Value*>& params, Value* seed) {
  if (!CarriesGradient(loss)) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss->name(), "' is ",
                                                   loss->type().ToString(), ", not a float tensor"));
  }
  if (seed == nullptr && !(loss->type().has_rank() && ir::NumElements(ir::StaticDims(*loss->type().shape)) == 1 &&
                           loss->type().is_static())) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss->name(), "' is ",
                                                   loss->type().ToString(),
                                                   ", expected a scalar"));
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, graph.TopoOrder());

  // Forward: values that depend on a parameter through differentiable ops.
  absl::flat_hash_set<const Value*> depends;
  for (const Value* p : params) {
    if (CarriesGradient(p)) depends.insert(p);
  }
  const ir::OpRegistry& registry = ir::OpRegistry::Global();
  for (const ir::Node* n : order) {
    const ir::OpSchema* s = registry.Find(n->domain(), n->op_type());
    if (s != nullptr && s->not_differentiable) continue;
    bool any = false;
    for (const Value* in : n->inputs()) any |= in != nullptr && depends.contains(in);
    if (!any) continue;
    for (const Value* out : n->outputs()) {
      if (CarriesGradient(out)) depends.insert(out);
    }
  }
  // Backward: values the loss depends on.
  absl::flat_hash_set<const Value*> reaches{loss};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node* n = *it;
    bool any = false;
    for (const Value* out : n->outputs()) any |= reaches.contains(out);
    if (!any) continue;
    for (const Value* in : n->inputs()) {
      if (in != nullptr) reaches.insert(in);
    }
  }
  auto active = [&](const Value* v) {
    return v != nullptr && depends.contains(v) && reaches.contains(v);
  };

  absl::flat_hash_map<const Value*, std::vector<Value*>> grads;
  if (seed == nullptr) {
    ir::Tensor one(loss->type().dtype, ir::StaticDims(*loss->type().shape));
    ir::VisitDType(one.dtype(), [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) one.data<T>()[0] = ir::FromDouble<T>(1.0);
    });
    ir::NodeSpec spec{"Constant", "", {}, {graph.UniqueName(loss->name() + ".grad_seed")},
                      {{"value", ir::Attribute(std::move(one))}}, "autodiff/seed"};
    OTTR_ASSIGN_OR_RETURN(ir::Node * c, graph.AddNode(std::move(spec)));
    c->output(0)->set_type(loss->type());
    seed = c->output(0);
  }
  grads[loss].push_back(seed);

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Node* n = *it;
    bool is_active = false;
    for (const Value* out : n->outputs()) is_active |= active(out);
    if (!is_active) continue;
    std::vector<Value*> out_grads;
    bool any_grad = false;
    for (const Value* out : n->outputs()) {
      auto g = grads.find(out);
      Value* sum = nullptr;
      if (g != grads.end()) {
        OTTR_ASSIGN_OR_RETURN(sum, Accumulate(graph, out, g->second));
      }
      out_grads.push_back(sum);
      any_grad |= sum != nullptr;
    }
    if (!any_grad) continue;
    std::vector<bool> needs;
    bool any_need = false;
    for (const Value* in : n->inputs()) {
      needs.push_back(active(in));
      any_need |= needs.back();
    }
    if (!any_need) continue;
    const ir::OpSchema* s = registry.Find(n->domain(), n->op_type());
    if (s == nullptr || !s->gradient) {
      return absl::UnimplementedError(absl::StrCat(
          n->Describe(), ": no gradient rule for op ", n->QualifiedOpType(),
          ", but a trainable parameter reaches the loss through it (freeze the parameters "
          "before it with --freeze)"));
    }
    ir::GradientBuilder builder(graph, *n, std::move(out_grads), std::move(needs));
    OTTR_RETURN_IF_ERROR(s->gradient(builder));
    for (int i = 0; i < n->num_inputs(); ++i) {
      Value* g = builder.input_grads()[i];
      if (g == nullptr) continue;
      const Value* in = n->input(i);
      if (g->type().dtype != in->type().dtype || g->type().shape != in->type().shape) {
        return absl::InternalError(absl::StrCat("gradient rule of ", n->Describe(), " gave input ",
                                                i, " ('", in->name(), "', ", in->type().ToString(),
                                                ") a gradient of type ", g->type().ToString()));
      }
      grads[in].push_back(g);
    }
  }
  std::vector<Value*> result;
  for (const Value* p : params) {
    auto g = grads.find(p);
    if (g == grads.end()) {
      result.push_back(nullptr);
      continue;
    }
    OTTR_ASSIGN_OR_RETURN(Value * sum, Accumulate(graph, p, g->second));
    result.push_back(sum);
  }
  return result;
}

}  // namespace ottr::passes
