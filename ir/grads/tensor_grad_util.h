// Small helpers shared by the gradient rules of the tensor and reduction families
// (tensor_grads.cc, reduction_grads.cc).
#ifndef OTTR_IR_GRADS_TENSOR_GRAD_UTIL_H_
#define OTTR_IR_GRADS_TENSOR_GRAD_UTIL_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/status.h"

namespace ottr::ir::grad_util {

// The values of an integer input that is known when the rule runs: an initializer or the output
// of a Constant node. nullopt for other values (computed at run time) and for non-integer types.
inline std::optional<std::vector<int64_t>> KnownInts(const Value* v) {
  if (v == nullptr) return std::nullopt;
  const Tensor* t = v->initializer();
  if (t == nullptr && v->producer() != nullptr && v->producer()->op_type() == "Constant" &&
      v->producer()->domain().empty()) {
    const Attribute* a = v->producer()->attr("value");
    if (a != nullptr && a->kind() == Attribute::Kind::kTensor) t = &a->t();
  }
  if (t == nullptr || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)) {
    return std::nullopt;
  }
  return t->ToInt64Vector();
}

// The static dims of `v`; an error naming the node when they are not all known.
inline absl::StatusOr<std::vector<int64_t>> StaticDimsOf(const GradientBuilder& b, const Value* v) {
  if (!v->type().is_static()) {
    return b.Error(absl::StrCat("needs a static shape for '", v->name(), "' (",
                                v->type().ToString(), "); bind the batch size first"));
  }
  return StaticDims(*v->type().shape);
}

// A zero tensor of `dtype` and `dims` (ConstantOfShape).
inline absl::StatusOr<Value*> Zeros(GradientBuilder& b, DType dtype,
                                    const std::vector<int64_t>& dims) {
  OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(dims));
  return b.Emit1("ConstantOfShape", {shape}, {{"value", Attribute(Tensor(dtype, {1}))}});
}

// The node's inputs [first, end) with trailing omitted ones dropped, for re-emitting an op's
// optional inputs unchanged (e.g. Slice's axes and steps).
inline std::vector<Value*> InputsFrom(const GradientBuilder& b, int first) {
  std::vector<Value*> v;
  for (int i = first; i < b.node().num_inputs(); ++i) v.push_back(b.input(i));
  while (!v.empty() && v.back() == nullptr) v.pop_back();
  return v;
}

}  // namespace ottr::ir::grad_util

#endif  // OTTR_IR_GRADS_TENSOR_GRAD_UTIL_H_
