// Schemas and shape functions of the optimizer ops of the ai.onnx.preview.training domain
// (opset 1): Adam, Adagrad and Momentum. (Gradient, of the same domain, belongs to autodiff.)
//
// Each takes a learning rate R (float/double scalar) and an update count T (int64 scalar),
// followed by k groups of n tensors: the optimised tensors X1..Xn, then their gradients G1..Gn,
// then per-tensor optimizer states (Momentum and Adagrad: one state, Adam: two). The outputs are
// the new X1..Xn followed by the new states, each typed and shaped like the tensor it replaces.
// They are updates, not functions to differentiate through, so they are NotDifferentiable().
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

// `groups` = number of tensor groups per optimised tensor in the inputs (X, G and the states).
absl::Status InferOptimizer(InferenceContext& ctx, int groups) {
  const int n_in = ctx.num_inputs() - 2;
  if (n_in <= 0 || n_in % groups != 0) {
    return ctx.Error(absl::StrCat("expects R, T and then ", groups,
                                  " tensors per optimised tensor, got ", ctx.num_inputs(),
                                  " inputs"));
  }
  const int n = n_in / groups;
  const int n_states = groups - 2;
  if (ctx.num_outputs() != n * (1 + n_states)) {
    return ctx.Error(absl::StrCat("optimises ", n, " tensors and so has ", n * (1 + n_states),
                                  " outputs, got ", ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
  }
  // R and T are scalars (a one-element tensor is accepted).
  for (int i : {0, 1}) {
    const TensorType& t = ctx.input_type(i);
    if (t.is_static() && NumElements(StaticDims(*t.shape)) != 1) {
      return ctx.Error(absl::StrCat("input ", i == 0 ? "R" : "T", " must be a scalar, got shape ",
                                    ShapeToString(*t.shape)));
    }
  }
  const DType r_type = ctx.input_type(0).dtype;
  if (r_type != DType::kUndefined && r_type != DType::kFloat32 && r_type != DType::kFloat64) {
    return ctx.Error(absl::StrCat("the learning rate R must be float or double, got ",
                                  DTypeName(r_type)));
  }
  const DType t_type = ctx.input_type(1).dtype;
  if (t_type != DType::kUndefined && t_type != DType::kInt64) {
    return ctx.Error(absl::StrCat("the update count T must be int64, got ", DTypeName(t_type)));
  }
  for (int i = 0; i < n; ++i) {
    const TensorType& x = ctx.input_type(2 + i);
    for (int g = 0; g < groups; ++g) {
      const TensorType& t = ctx.input_type(2 + g * n + i);
      if (t.dtype != DType::kUndefined && t.dtype != DType::kFloat32 &&
          t.dtype != DType::kFloat64) {
        return ctx.Error(absl::StrCat("input ", 2 + g * n + i, " must be float or double, got ",
                                      DTypeName(t.dtype)));
      }
      if (g > 0 && x.has_rank() && t.has_rank()) {
        bool ok = x.rank() == t.rank();
        for (int64_t d = 0; ok && d < x.rank(); ++d) {
          const Dim& a = (*x.shape)[d];
          const Dim& b = (*t.shape)[d];
          ok = !a.is_static() || !b.is_static() || a.value() == b.value();
        }
        if (!ok) {
          return ctx.Error(absl::StrCat("input ", 2 + g * n + i, " has shape ",
                                        ShapeToString(*t.shape), " but the tensor it belongs to (",
                                        "input ", 2 + i, ") has shape ", ShapeToString(*x.shape)));
        }
      }
    }
    ctx.set_output_type(i, x);
    for (int s = 0; s < n_states; ++s) {
      ctx.set_output_type(n * (1 + s) + i, ctx.input_type(2 + (2 + s) * n + i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  const std::string domain(kTrainingDomain);
  r.Register(OpSchemaBuilder(domain, "Adam")
                 .Opsets(1, 1)
                 .Inputs(6, -1)
                 .Outputs(3, -1)
                 .Attr("alpha", Kind::kFloat)
                 .Attr("beta", Kind::kFloat)
                 .Attr("epsilon", Kind::kFloat)
                 .Attr("norm_coefficient", Kind::kFloat)
                 .Attr("norm_coefficient_post", Kind::kFloat)
                 .Shape([](InferenceContext& ctx) { return InferOptimizer(ctx, 4); })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(domain, "Adagrad")
                 .Opsets(1, 1)
                 .Inputs(5, -1)
                 .Outputs(2, -1)
                 .Attr("decay_factor", Kind::kFloat)
                 .Attr("epsilon", Kind::kFloat)
                 .Attr("norm_coefficient", Kind::kFloat)
                 .Shape([](InferenceContext& ctx) { return InferOptimizer(ctx, 3); })
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(domain, "Momentum")
                 .Opsets(1, 1)
                 .Inputs(5, -1)
                 .Outputs(2, -1)
                 .Attr("alpha", Kind::kFloat, /*required=*/true)
                 .Attr("beta", Kind::kFloat, /*required=*/true)
                 .Attr("norm_coefficient", Kind::kFloat, /*required=*/true)
                 .Attr("mode", Kind::kString, /*required=*/true)
                 .Shape([](InferenceContext& ctx) {
                   const std::string mode = ctx.node().GetString("mode", "");
                   if (mode != "standard" && mode != "nesterov") {
                     return ctx.Error(absl::StrCat(
                         "mode must be 'standard' or 'nesterov', got '", mode, "'"));
                   }
                   return InferOptimizer(ctx, 3);
                 })
                 .NotDifferentiable()
                 .Build());
}

}  // namespace ottr::ir
