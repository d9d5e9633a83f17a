// Schemas and shape functions of the elementwise ops: NumPy-broadcast arithmetic, unary math,
// variadic Sum/Mean/Max/Min, comparisons and logic, Where, Clip, Cast and CastLike.
//
// Every shape function states exactly what the CPU kernel produces: the broadcast of the present
// inputs (ir::BroadcastShapes, so symbolic dims flow through) with the op's output dtype.
#include <functional>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;
using DTypePred = bool (*)(DType);

bool IsNumeric(DType t) { return IsFloat(t) || IsInteger(t); }
bool IsSignedNumeric(DType t) { return IsSigned(t); }
bool IsBool(DType t) { return t == DType::kBool; }
bool IsAny(DType t) { return t != DType::kUndefined && t != DType::kString; }
bool IsNumericOrBool(DType t) { return IsNumeric(t) || IsBool(t); }

// InvalidArgument unless every present input in [first, last] with a known dtype satisfies
// `ok`, and (when `same` is set) they all share one dtype.
absl::Status CheckInputTypes(const InferenceContext& ctx, int first, int last, DTypePred ok,
                             absl::string_view allowed, bool same = true) {
  DType common = DType::kUndefined;
  for (int i = first; i <= last && i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const DType t = ctx.input_type(i).dtype;
    if (t == DType::kUndefined) continue;
    if (!ok(t)) {
      return ctx.Error(absl::StrCat("input ", i, " has element type ", DTypeName(t),
                                    "; expected ", allowed));
    }
    if (!same) continue;
    if (common != DType::kUndefined && t != common) {
      return ctx.Error(absl::StrCat("inputs must have one element type, got ", DTypeName(common),
                                    " and ", DTypeName(t), " (input ", i, ")"));
    }
    common = t;
  }
  return absl::OkStatus();
}

// Shape function: every input of type `ok` (one common type), output = their broadcast with the
// inputs' dtype, or `out` when given.
ShapeFn Broadcasting(DTypePred ok, absl::string_view allowed,
                     std::optional<DType> out = std::nullopt) {
  std::string allowed_s(allowed);
  return [ok, allowed_s, out](InferenceContext& ctx) -> absl::Status {
    OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, ctx.num_inputs() - 1, ok, allowed_s));
    return BroadcastAll(ctx, out);
  };
}

// Shape function of a unary op: same type as the input.
ShapeFn Unary(DTypePred ok, absl::string_view allowed) {
  std::string allowed_s(allowed);
  return [ok, allowed_s](InferenceContext& ctx) -> absl::Status {
    OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 0, ok, allowed_s));
    return SameAsInput(ctx);
  };
}

absl::Status PowShape(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 0, IsNumeric, "a numeric type"));
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 1, 1, IsNumeric, "a numeric type"));
  return BroadcastAll(ctx);  // output type T = the base's type
}

absl::Status WhereShape(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 0, IsBool, "bool"));
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 1, 2, IsAny, "a tensor type"));
  return BroadcastAll(ctx, ctx.input_type(1).dtype);
}

// Clip(input, min?, max?): min and max are scalars of the input's type; output = input's type.
absl::Status ClipShape(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 2, IsNumeric, "a numeric type"));
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i) || !ctx.input_type(i).is_static()) continue;
    if (NumElements(StaticDims(*ctx.input_type(i).shape)) != 1) {
      return ctx.Error(absl::StrCat(i == 1 ? "min" : "max", " must be a scalar, got shape ",
                                    ShapeToString(*ctx.input_type(i).shape)));
    }
  }
  return SameAsInput(ctx);
}

absl::Status CastShape(InferenceContext& ctx) {
  const Attribute* to = ctx.node().attr("to");
  if (to == nullptr) return ctx.Error("missing attribute 'to'");
  absl::StatusOr<DType> t = DTypeFromOnnx(static_cast<int32_t>(to->i()));
  if (!t.ok() || *t == DType::kString) {
    return absl::UnimplementedError(absl::StrCat(
        ctx.node().Describe(), ": cast to ONNX element type ", to->i(), " is not supported",
        t.ok() ? " (string)" : absl::StrCat(" (", t.status().message(), ")")));
  }
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 0, IsAny, "a tensor type"));
  ctx.set_output_type(0, TensorType(*t, ctx.input_type(0).shape));
  return absl::OkStatus();
}

absl::Status CastLikeShape(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckInputTypes(ctx, 0, 1, IsAny, "a tensor type", /*same=*/false));
  ctx.set_output_type(0, TensorType(ctx.input_type(1).dtype, ctx.input_type(0).shape));
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& r) {
  // Binary arithmetic with NumPy broadcasting (opset 7 introduced multidirectional broadcast).
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(2, 2)
                   .Shape(Broadcasting(IsNumeric, "a numeric type")).Build());
  }
  // Mod: fmod=0 takes the divisor's sign (Python %), fmod=1 the dividend's (C fmod).
  r.Register(OpSchemaBuilder("", "Mod").Opsets(10).Inputs(2, 2).Attr("fmod", Kind::kInt)
                 .Shape(Broadcasting(IsNumeric, "a numeric type")).Build());
  // Pow(X: T, Y: T1) -> T; base and exponent types may differ.
  r.Register(OpSchemaBuilder("", "Pow").Opsets(7).Inputs(2, 2).Shape(PowShape).Build());

  // Unary math.
  // Sign, Ceil, Floor and Round are piecewise constant: their gradient is zero almost
  // everywhere, so they are NotDifferentiable (autodiff stops there).
  for (const char* op : {"Abs", "Sign", "Erf"}) {
    OpSchemaBuilder b("", op);
    b.Opsets(std::string(op) == "Abs" ? 7 : 9).Inputs(1, 1).Shape(Unary(IsNumeric, "a numeric type"));
    if (std::string(op) == "Sign") b.NotDifferentiable();
    r.Register(b.Build());
  }
  r.Register(OpSchemaBuilder("", "Neg").Opsets(7).Inputs(1, 1)
                 .Shape(Unary(IsSignedNumeric, "a signed numeric type")).Build());
  for (const char* op : {"Sqrt", "Exp", "Log", "Reciprocal", "Sin", "Cos"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, 1)
                   .Shape(Unary(IsFloat, "a float type")).Build());
  }
  for (const char* op : {"Ceil", "Floor"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, 1).NotDifferentiable()
                   .Shape(Unary(IsFloat, "a float type")).Build());
  }
  r.Register(OpSchemaBuilder("", "Round").Opsets(11).Inputs(1, 1).NotDifferentiable()
                 .Shape(Unary(IsFloat, "a float type")).Build());
  r.Register(OpSchemaBuilder("", "Not").Opsets(7).Inputs(1, 1).NotDifferentiable()
                 .Shape(Unary(IsBool, "bool")).Build());

  // Variadic with broadcasting (before opset 8 the inputs had one shape: a special case).
  for (const char* op : {"Sum", "Mean"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, -1)
                   .Shape(Broadcasting(std::string(op) == "Sum" ? IsNumeric : IsFloat,
                                       std::string(op) == "Sum" ? "a numeric type" : "a float type"))
                   .Build());
  }
  for (const char* op : {"Max", "Min"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, -1)
                   .Shape(Broadcasting(IsNumeric, "a numeric type")).Build());
  }

  // Comparisons (bool output) and logic: no gradient flows through bool values.
  for (const char* op : {"Equal", "Less", "Greater"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(2, 2).NotDifferentiable()
                   .Shape(Broadcasting(IsNumericOrBool, "a numeric type or bool", DType::kBool))
                   .Build());
  }
  for (const char* op : {"LessOrEqual", "GreaterOrEqual"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(12).Inputs(2, 2).NotDifferentiable()
                   .Shape(Broadcasting(IsNumericOrBool, "a numeric type or bool", DType::kBool))
                   .Build());
  }
  for (const char* op : {"And", "Or", "Xor"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(2, 2).NotDifferentiable()
                   .Shape(Broadcasting(IsBool, "bool", DType::kBool)).Build());
  }
  r.Register(OpSchemaBuilder("", "Where").Opsets(9).Inputs(3, 3).Shape(WhereShape).Build());

  // Clip: canonical form (opset 11+) has optional min/max inputs; importer/canonicalize.cc moves
  // Clip-6's float attributes there, so the schema lists no attributes.
  r.Register(OpSchemaBuilder("", "Clip").Opsets(7).Inputs(1, 3).Shape(ClipShape).Build());

  // Cast: `saturate` (opset 19) and `round_mode` (opset 25) only affect float8 targets, which ottr
  // does not have; they are accepted and ignored.
  r.Register(OpSchemaBuilder("", "Cast").Opsets(7).Inputs(1, 1)
                 .Attr("to", Kind::kInt, /*required=*/true)
                 .Attr("saturate", Kind::kInt)
                 .Attr("round_mode", Kind::kString)
                 .Shape(CastShape).Build());
  r.Register(OpSchemaBuilder("", "CastLike").Opsets(15).Inputs(2, 2)
                 .Attr("saturate", Kind::kInt)
                 .Attr("round_mode", Kind::kString)
                 .Shape(CastLikeShape).Build());
}

}  // namespace ottr::ir
