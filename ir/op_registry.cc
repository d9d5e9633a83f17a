#include "ir/op_registry.h"

#include <exception>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::ir {

absl::Status InferenceContext::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", msg));
}

const AttrSpec* OpSchema::FindAttr(absl::string_view name) const {
  for (const AttrSpec& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

namespace {
std::string Key(absl::string_view domain, absl::string_view op) {
  return absl::StrCat(domain, "::", op);
}
std::string DomainName(absl::string_view d) { return d.empty() ? "ai.onnx" : std::string(d); }
}  // namespace

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterElementwiseOps(*r);
    RegisterActivationOps(*r);
    RegisterReductionOps(*r);
    RegisterTensorOps(*r);
    RegisterLinalgOps(*r);
    RegisterConvPoolOps(*r);
    RegisterNormalizationOps(*r);
    RegisterLossOps(*r);
    RegisterTrainingOps(*r);
    RegisterControlFlowOps(*r);
    RegisterOptimizerOps(*r);
    RegisterFusedOps(*r);
    RegisterElementwiseGradients(*r);
    RegisterActivationGradients(*r);
    RegisterReductionGradients(*r);
    RegisterTensorGradients(*r);
    RegisterLinalgGradients(*r);
    RegisterConvPoolGradients(*r);
    RegisterNormalizationGradients(*r);
    RegisterLossGradients(*r);
    return r;
  }();
  return *registry;
}

void OpRegistry::Register(OpSchema schema) {
  std::string key = Key(schema.domain, schema.op_type);
  schemas_[key] = std::move(schema);
}

void OpRegistry::SetGradient(absl::string_view domain, absl::string_view op_type, GradientFn fn) {
  auto it = schemas_.find(Key(domain, op_type));
  if (it == schemas_.end()) {
    // Registering a gradient for an unknown op is a programming error; the registry test catches
    // it through the missing schema, so record it under a placeholder schema that fails checks.
    OpSchema s;
    s.domain = std::string(domain);
    s.op_type = std::string(op_type);
    s.min_opset = 1 << 30;  // never importable
    s.gradient = std::move(fn);
    schemas_[Key(domain, op_type)] = std::move(s);
    return;
  }
  it->second.gradient = std::move(fn);
}

const OpSchema* OpRegistry::Find(absl::string_view domain, absl::string_view op_type) const {
  auto it = schemas_.find(Key(domain, op_type));
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> OpRegistry::All() const {
  std::vector<const OpSchema*> out;
  for (const auto& [k, s] : schemas_) out.push_back(&s);
  std::sort(out.begin(), out.end(), [](const OpSchema* a, const OpSchema* b) {
    return std::tie(a->domain, a->op_type) < std::tie(b->domain, b->op_type);
  });
  return out;
}

absl::Status OpRegistry::CheckNode(const Node& node, int64_t opset) const {
  const OpSchema* s = Find(node.domain(), node.op_type());
  const std::string where = absl::StrCat("node '", node.origin(), "': op ", node.op_type(),
                                         " of domain ", DomainName(node.domain()), " opset ",
                                         opset);
  if (s == nullptr) return absl::UnimplementedError(absl::StrCat(where, " is not supported"));
  if (node.domain() != kOttrDomain && (opset < s->min_opset || opset > s->max_opset)) {
    return absl::UnimplementedError(absl::StrCat(where, " is not supported (ottr supports opsets ",
                                                 s->min_opset, " to ", s->max_opset, ")"));
  }
  // Trailing omitted inputs do not count towards the arity.
  int n_in = node.num_inputs();
  while (n_in > 0 && node.input(n_in - 1) == nullptr) --n_in;
  if (n_in < s->min_inputs || (s->max_inputs >= 0 && n_in > s->max_inputs)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": has ", n_in, " inputs, expected ",
                                                   s->min_inputs, " to ",
                                                   s->max_inputs < 0 ? std::string("any")
                                                                     : absl::StrCat(s->max_inputs)));
  }
  for (int i = 0; i < s->min_inputs; ++i) {
    if (node.input(i) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": required input ", i, " is missing"));
    }
  }
  const int n_out = node.num_outputs();
  if (n_out < s->min_outputs || (s->max_outputs >= 0 && n_out > s->max_outputs)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": has ", n_out, " outputs, expected ",
                                                   s->min_outputs, " to ",
                                                   s->max_outputs < 0 ? std::string("any")
                                                                      : absl::StrCat(s->max_outputs)));
  }
  for (const auto& [name, a] : node.attrs()) {
    const AttrSpec* spec = s->FindAttr(name);
    if (spec == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": attribute '", name, "' is not supported"));
    }
    // ONNX writes some float attributes as ints in hand-made models; accept int for float.
    const bool ok = a.kind() == spec->kind ||
                    (spec->kind == Attribute::Kind::kFloat && a.kind() == Attribute::Kind::kInt);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": attribute '", name, "' is ", AttributeKindName(a.kind()), ", expected ",
          AttributeKindName(spec->kind)));
    }
  }
  for (const AttrSpec& spec : s->attrs) {
    if (spec.required && !node.has_attr(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": required attribute '", spec.name, "' is missing"));
    }
  }
  return absl::OkStatus();
}

absl::Status InferNodeShapes(const OpRegistry& registry, Node& node,
                             const std::vector<const Tensor*>& extra_constants) {
  const OpSchema* s = registry.Find(node.domain(), node.op_type());
  if (s == nullptr) {
    return absl::UnimplementedError(absl::StrCat(node.Describe(), ": op is not supported"));
  }
  if (!s->infer_shape) return absl::OkStatus();
  std::vector<const TensorType*> types;
  std::vector<const Tensor*> constants;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const Value* v = node.input(i);
    types.push_back(v ? &v->type() : nullptr);
    const Tensor* c = v ? v->initializer() : nullptr;
    if (c == nullptr && i < static_cast<int>(extra_constants.size())) c = extra_constants[i];
    constants.push_back(c);
  }
  InferenceContext ctx(node, std::move(types), std::move(constants));
  // A malformed model can hand a shape function values no real model has (a rank of -5, a
  // dimension of 2^62): containers then throw instead of the function returning an error.
  absl::Status inferred;
  try {
    inferred = s->infer_shape(ctx);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": shape inference failed: ", e.what()));
  }
  OTTR_RETURN_IF_ERROR(inferred);
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (ctx.output_types()[i].has_value()) node.output(i)->set_type(*ctx.output_types()[i]);
  }
  return absl::OkStatus();
}

absl::Status InferGraphShapes(const OpRegistry& registry, Graph& graph) {
  OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopoOrder());
  for (Node* n : order) {
    // Constant nodes feed shape functions with their value (e.g. Reshape's shape).
    std::vector<const Tensor*> constants;
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Value* v = n->input(i);
      const Tensor* c = nullptr;
      if (v && v->producer() && v->producer()->op_type() == "Constant" &&
          v->producer()->domain().empty() && v->producer()->has_attr("value")) {
        c = &v->producer()->attr("value")->t();
      }
      constants.push_back(c);
    }
    OTTR_RETURN_IF_ERROR(InferNodeShapes(registry, *n, constants));
  }
  return absl::OkStatus();
}

}  // namespace ottr::ir
