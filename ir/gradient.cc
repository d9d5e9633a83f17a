#include "ir/gradient.h"

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::ir {

GradientBuilder::GradientBuilder(Graph& graph, const Node& node, std::vector<Value*> output_grads,
                                 std::vector<bool> needs_input_grad)
    : graph_(graph),
      node_(node),
      output_grads_(std::move(output_grads)),
      needs_(std::move(needs_input_grad)),
      input_grads_(node.num_inputs(), nullptr) {}

void GradientBuilder::set_input_grad(int i, Value* g) {
  if (i < static_cast<int>(input_grads_.size()) && needs_input_grad(i)) input_grads_[i] = g;
}

absl::StatusOr<std::vector<Value*>> GradientBuilder::Emit(const std::string& op_type,
                                                          std::vector<Value*> inputs,
                                                          std::map<std::string, Attribute> attrs,
                                                          int num_outputs,
                                                          const std::string& domain) {
  NodeSpec spec;
  spec.op_type = op_type;
  spec.domain = domain;
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.origin = absl::StrCat(node_.origin(), "/grad");
  for (int i = 0; i < num_outputs; ++i) {
    spec.output_names.push_back(graph_.UniqueName(absl::StrCat(node_.origin(), "/grad/", op_type)));
  }
  OTTR_ASSIGN_OR_RETURN(Node * n, graph_.AddNode(std::move(spec)));
  const OpRegistry& registry = OpRegistry::Global();
  absl::Status s = registry.CheckNode(*n, domain.empty() ? kMaxOnnxOpset : 1);
  if (s.ok()) {
    std::vector<const Tensor*> constants;
    for (const Value* v : n->inputs()) {
      const Tensor* c = nullptr;
      if (v && v->producer() && v->producer()->op_type() == "Constant" &&
          v->producer()->domain().empty()) {
        c = &v->producer()->attr("value")->t();
      }
      constants.push_back(c);
    }
    s = InferNodeShapes(registry, *n, constants);
  }
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat("gradient of ", node_.Describe(), " emitted a bad ",
                                            op_type, " node: ", s.message()));
  }
  return n->outputs();
}

absl::StatusOr<Value*> GradientBuilder::Emit1(const std::string& op_type,
                                              std::vector<Value*> inputs,
                                              std::map<std::string, Attribute> attrs,
                                              const std::string& domain) {
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> outs,
                        Emit(op_type, std::move(inputs), std::move(attrs), 1, domain));
  return outs[0];
}

absl::StatusOr<Value*> GradientBuilder::Constant(Tensor t) {
  return Emit1("Constant", {}, {{"value", Attribute(std::move(t))}});
}

absl::StatusOr<Value*> GradientBuilder::Scalar(double v, DType dtype) {
  Tensor t(dtype, {});
  VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) t.data<T>()[0] = FromDouble<T>(v);
  });
  return Constant(std::move(t));
}

absl::StatusOr<Value*> GradientBuilder::Ints(const std::vector<int64_t>& v) {
  return Constant(Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

absl::StatusOr<Value*> GradientBuilder::ReshapeTo(Value* grad, const TensorType& target) {
  if (grad->type().shape == target.shape) return grad;
  if (!target.is_static()) {
    return Error(absl::StrCat("needs a static shape to reshape the gradient to ", target.ToString()));
  }
  OTTR_ASSIGN_OR_RETURN(Value * shape, Ints(StaticDims(*target.shape)));
  return Emit1("Reshape", {grad, shape});
}

absl::StatusOr<Value*> GradientBuilder::SumToShape(Value* grad, const TensorType& target) {
  const TensorType& g = grad->type();
  if (g.shape == target.shape) return grad;
  if (!g.is_static() || !target.is_static()) {
    return Error(absl::StrCat("autodiff needs static shapes to undo broadcasting from ",
                              g.ToString(), " to ", target.ToString(),
                              " (bind the batch size with --batch)"));
  }
  const std::vector<int64_t> gd = StaticDims(*g.shape);
  const std::vector<int64_t> td = StaticDims(*target.shape);
  if (td.size() > gd.size()) return Error("gradient has lower rank than its input");
  const size_t lead = gd.size() - td.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < gd.size(); ++i) {
    if (i < lead || (td[i - lead] == 1 && gd[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  }
  Value* out = grad;
  if (!axes.empty()) {
    OTTR_ASSIGN_OR_RETURN(Value * ax, Ints(axes));
    OTTR_ASSIGN_OR_RETURN(out, Emit1("ReduceSum", {grad, ax}, {{"keepdims", Attribute(int64_t{1})}}));
  }
  return ReshapeTo(out, target);
}

absl::Status GradientBuilder::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat("gradient of ", node_.Describe(), ": ", msg));
}

}  // namespace ottr::ir
