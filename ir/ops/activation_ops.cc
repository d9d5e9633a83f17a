// Schemas and shape functions of the activation ops. All but PRelu are unary and keep the input's
// type; PRelu broadcasts its slope (the output is the broadcast of X and slope, which is X's shape
// whenever slope is unidirectionally broadcastable to X as ONNX requires).
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

// Output = input 0's type; input 0 must be a float type (or a signed numeric type for Relu,
// any numeric type for PRelu) when known.
ShapeFn UnaryActivation(bool allow_signed_int) {
  return [allow_signed_int](InferenceContext& ctx) -> absl::Status {
    const DType t = ctx.input_type(0).dtype;
    if (t != DType::kUndefined && !IsFloat(t) && !(allow_signed_int && IsSigned(t))) {
      return ctx.Error(absl::StrCat("element type ", DTypeName(t), " is not supported; expected ",
                                    allow_signed_int ? "a signed numeric type" : "a float type"));
    }
    return SameAsInput(ctx);
  };
}

absl::Status PReluShape(InferenceContext& ctx) {
  const DType x = ctx.input_type(0).dtype;
  const DType s = ctx.input_type(1).dtype;
  for (DType t : {x, s}) {
    if (t != DType::kUndefined && !IsFloat(t) && !IsInteger(t)) {
      return ctx.Error(absl::StrCat("element type ", DTypeName(t), " is not supported"));
    }
  }
  if (x != DType::kUndefined && s != DType::kUndefined && x != s) {
    return ctx.Error(absl::StrCat("X and slope must have one element type, got ", DTypeName(x),
                                  " and ", DTypeName(s)));
  }
  return BroadcastAll(ctx);
}

absl::Status GeluShape(InferenceContext& ctx) {
  const std::string approximate = ctx.node().GetString("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return ctx.Error(absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"",
                                  approximate, "\""));
  }
  return UnaryActivation(false)(ctx);
}

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder("", "Relu").Opsets(7).Inputs(1, 1).Shape(UnaryActivation(true)).Build());
  for (const char* op : {"Sigmoid", "Tanh", "Softplus", "Softsign"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, 1).Shape(UnaryActivation(false)).Build());
  }
  // y = x >= 0 ? x : alpha * x (alpha = 0.01).
  r.Register(OpSchemaBuilder("", "LeakyRelu").Opsets(7).Inputs(1, 1).Attr("alpha", Kind::kFloat)
                 .Shape(UnaryActivation(false)).Build());
  // y = x >= 0 ? x : slope * x, slope broadcast.
  r.Register(OpSchemaBuilder("", "PRelu").Opsets(7).Inputs(2, 2).Shape(PReluShape).Build());
  // y = x > 0 ? x : alpha * (exp(x) - 1) (alpha = 1).
  r.Register(OpSchemaBuilder("", "Elu").Opsets(7).Inputs(1, 1).Attr("alpha", Kind::kFloat)
                 .Shape(UnaryActivation(false)).Build());
  // y = gamma * (x > 0 ? x : alpha * (exp(x) - 1)).
  r.Register(OpSchemaBuilder("", "Selu").Opsets(7).Inputs(1, 1).Attr("alpha", Kind::kFloat)
                 .Attr("gamma", Kind::kFloat).Shape(UnaryActivation(false)).Build());
  // y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
  r.Register(OpSchemaBuilder("", "Celu").Opsets(12).Inputs(1, 1).Attr("alpha", Kind::kFloat)
                 .Shape(UnaryActivation(false)).Build());
  // y = max(0, min(1, alpha * x + beta)) (alpha = 0.2, beta = 0.5).
  r.Register(OpSchemaBuilder("", "HardSigmoid").Opsets(7).Inputs(1, 1).Attr("alpha", Kind::kFloat)
                 .Attr("beta", Kind::kFloat).Shape(UnaryActivation(false)).Build());
  // y = x * max(0, min(1, x / 6 + 1 / 2)).
  r.Register(OpSchemaBuilder("", "HardSwish").Opsets(14).Inputs(1, 1)
                 .Shape(UnaryActivation(false)).Build());
  // y = x > alpha ? x : 0 (alpha = 1).
  r.Register(OpSchemaBuilder("", "ThresholdedRelu").Opsets(10).Inputs(1, 1)
                 .Attr("alpha", Kind::kFloat).Shape(UnaryActivation(false)).Build());
  // y = x * tanh(softplus(x)).
  r.Register(OpSchemaBuilder("", "Mish").Opsets(18).Inputs(1, 1).Shape(UnaryActivation(false)).Build());
  // approximate="none": y = x/2 (1 + erf(x / sqrt 2)); "tanh": y = x/2 (1 + tanh(sqrt(2/pi) (x +
  // 0.044715 x^3))).
  r.Register(OpSchemaBuilder("", "Gelu").Opsets(20).Inputs(1, 1).Attr("approximate", Kind::kString)
                 .Shape(GeluShape).Build());
}

}  // namespace ottr::ir
