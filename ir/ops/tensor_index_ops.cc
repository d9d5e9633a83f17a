// Schemas and shape functions of the indexing and generator ops: Gather, GatherElements,
// ScatterElements, OneHot, CumSum, Trilu, Constant, ConstantOfShape and Range.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/ops/tensor_shape_math.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

absl::Status NodeError(const InferenceContext& ctx, const absl::Status& s) {
  return ctx.Error(s.message());
}

bool IsIndexType(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

absl::Status CheckIndices(const InferenceContext& ctx, int i) {
  const DType t = ctx.input_type(i).dtype;
  if (t != DType::kUndefined && !IsIndexType(t)) {
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", DTypeName(t)));
  }
  return absl::OkStatus();
}

// out = data.shape[:axis] + indices.shape + data.shape[axis+1:].
absl::Status InferGather(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  const TensorType& indices = ctx.input_type(1);
  if (absl::Status s = CheckIndices(ctx, 1); !s.ok()) return s;
  if (!data.has_rank() || !indices.has_rank()) {
    ctx.set_output_type(0, TensorType(data.dtype, std::nullopt));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), data.rank());
  if (!axis.ok()) return NodeError(ctx, axis.status());
  const Shape& d = *data.shape;
  Shape out(d.begin(), d.begin() + *axis);
  out.insert(out.end(), indices.shape->begin(), indices.shape->end());
  out.insert(out.end(), d.begin() + *axis + 1, d.end());
  ctx.set_output_type(0, TensorType(data.dtype, out));
  return absl::OkStatus();
}

absl::Status InferGatherElements(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  const TensorType& indices = ctx.input_type(1);
  if (absl::Status s = CheckIndices(ctx, 1); !s.ok()) return s;
  if (data.has_rank()) {
    absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), data.rank());
    if (!axis.ok()) return NodeError(ctx, axis.status());
    if (indices.has_rank() && indices.rank() != data.rank()) {
      return ctx.Error(absl::StrCat("indices ", indices.ToString(), " must have the rank of data ",
                                    data.ToString()));
    }
  }
  ctx.set_output_type(0, TensorType(data.dtype, indices.shape));
  return absl::OkStatus();
}

absl::Status InferScatterElements(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  const TensorType& indices = ctx.input_type(1);
  const TensorType& updates = ctx.input_type(2);
  if (absl::Status s = CheckIndices(ctx, 1); !s.ok()) return s;
  const std::string reduction = ctx.node().GetString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min") {
    return ctx.Error(absl::StrCat("unknown reduction '", reduction,
                                  "' (none, add, mul, max or min)"));
  }
  if (updates.dtype != DType::kUndefined && data.dtype != DType::kUndefined &&
      updates.dtype != data.dtype) {
    return ctx.Error(absl::StrCat("updates ", updates.ToString(), " and data ", data.ToString(),
                                  " have different element types"));
  }
  if (indices.is_static() && updates.is_static() && *indices.shape != *updates.shape) {
    return ctx.Error(absl::StrCat("updates ", updates.ToString(), " must have the shape of indices ",
                                  indices.ToString()));
  }
  if (data.has_rank()) {
    absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), data.rank());
    if (!axis.ok()) return NodeError(ctx, axis.status());
    if (indices.has_rank() && indices.rank() != data.rank()) {
      return ctx.Error(absl::StrCat("indices ", indices.ToString(), " must have the rank of data ",
                                    data.ToString()));
    }
  }
  ctx.set_output_type(0, data);
  return absl::OkStatus();
}

// out = indices.shape with `depth` inserted at `axis` (in [-r-1, r]); element type of `values`.
absl::Status InferOneHot(InferenceContext& ctx) {
  const TensorType& indices = ctx.input_type(0);
  const DType dtype = ctx.input_type(2).dtype;
  if (!indices.has_rank()) {
    ctx.set_output_type(0, TensorType(dtype, std::nullopt));
    return absl::OkStatus();
  }
  const int64_t r = indices.rank();
  int64_t axis = ctx.node().GetInt("axis", -1);
  if (axis < -r - 1 || axis > r) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range [", -r - 1, ", ", r,
                                  "] for indices ", indices.ToString()));
  }
  if (axis < 0) axis += r + 1;
  Dim depth;
  if (const Tensor* t = ctx.input_constant(1)) {
    if (t->num_elements() != 1) return ctx.Error("depth must have exactly one element");
    const int64_t d = static_cast<int64_t>(t->GetAsDouble(0));
    if (d < 1) return ctx.Error(absl::StrCat("depth must be positive, got ", d));
    depth = Dim(d);
  }
  Shape out = *indices.shape;
  out.insert(out.begin() + axis, depth);
  ctx.set_output_type(0, TensorType(dtype, out));
  return absl::OkStatus();
}

absl::Status InferTrilu(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (in.has_rank() && in.rank() < 2) {
    return ctx.Error(absl::StrCat("input ", in.ToString(), " must have rank >= 2"));
  }
  return SameAsInput(ctx);
}

absl::Status InferConstant(InferenceContext& ctx) {
  const Attribute* a = ctx.node().attr("value");
  if (a == nullptr || a->kind() != Kind::kTensor) {
    return ctx.Error("needs a 'value' tensor attribute (other forms are rewritten at import)");
  }
  ctx.set_output_type(0, a->t().type());
  return absl::OkStatus();
}

absl::Status InferConstantOfShape(InferenceContext& ctx) {
  DType dtype = DType::kFloat32;
  if (const Attribute* a = ctx.node().attr("value")) {
    if (a->kind() != Kind::kTensor || a->t().num_elements() != 1) {
      return ctx.Error("'value' must be a tensor with one element");
    }
    dtype = a->t().dtype();
  }
  if (std::optional<std::vector<int64_t>> shape = ConstantInts(ctx, 0)) {
    for (int64_t v : *shape) {
      if (v < 0) return ctx.Error(absl::StrCat("shape [", absl::StrJoin(*shape, ","), "] has a negative dim"));
    }
    ctx.set_output_type(0, TensorType(dtype, ShapeFromDims(*shape)));
    return absl::OkStatus();
  }
  const TensorType& s = ctx.input_type(0);
  std::optional<Shape> out;
  if (s.has_rank() && s.rank() == 1 && (*s.shape)[0].is_static()) {
    out = Shape((*s.shape)[0].value(), Dim());
  }
  ctx.set_output_type(0, TensorType(dtype, out));
  return absl::OkStatus();
}

absl::Status InferRange(InferenceContext& ctx) {
  const DType dtype = ctx.input_type(0).dtype;
  for (int i = 1; i < 3; ++i) {
    const DType t = ctx.input_type(i).dtype;
    if (t != DType::kUndefined && dtype != DType::kUndefined && t != dtype) {
      return ctx.Error(absl::StrCat("start, limit and delta must have one element type; got ",
                                    DTypeName(dtype), " and ", DTypeName(t)));
    }
  }
  const Tensor* start = ctx.input_constant(0);
  const Tensor* limit = ctx.input_constant(1);
  const Tensor* delta = ctx.input_constant(2);
  Dim n;
  if (start && limit && delta) {
    absl::StatusOr<int64_t> count = RangeCountOf(*start, *limit, *delta);
    if (!count.ok()) return NodeError(ctx, count.status());
    n = Dim(*count);
  }
  ctx.set_output_type(0, TensorType(dtype, Shape{n}));
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorIndexOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder("", "Gather").Opsets(7).Inputs(2, 2)
                 .Attr("axis", Kind::kInt).Shape(InferGather).Build());
  r.Register(OpSchemaBuilder("", "GatherElements").Opsets(11).Inputs(2, 2)
                 .Attr("axis", Kind::kInt).Shape(InferGatherElements).Build());
  r.Register(OpSchemaBuilder("", "ScatterElements").Opsets(11).Inputs(3, 3)
                 .Attr("axis", Kind::kInt).Attr("reduction", Kind::kString)
                 .Shape(InferScatterElements).Build());
  r.Register(OpSchemaBuilder("", "OneHot").Opsets(9).Inputs(3, 3)
                 .Attr("axis", Kind::kInt).NotDifferentiable().Shape(InferOneHot).Build());
  r.Register(OpSchemaBuilder("", "CumSum").Opsets(11).Inputs(2, 2)
                 .Attr("exclusive", Kind::kInt).Attr("reverse", Kind::kInt)
                 .Shape([](InferenceContext& ctx) { return SameAsInput(ctx); }).Build());
  r.Register(OpSchemaBuilder("", "Trilu").Opsets(14).Inputs(1, 2)
                 .Attr("upper", Kind::kInt).Shape(InferTrilu).Build());
  // The canonical Constant has only `value`; the importer rewrites the scalar/list forms into it.
  // The other attributes are listed so that the import check accepts every ONNX spelling.
  r.Register(OpSchemaBuilder("", "Constant").Opsets(7).Inputs(0, 0)
                 .Attr("value", Kind::kTensor).Attr("sparse_value", Kind::kTensor)
                 .Attr("value_float", Kind::kFloat).Attr("value_floats", Kind::kFloats)
                 .Attr("value_int", Kind::kInt).Attr("value_ints", Kind::kInts)
                 .Attr("value_string", Kind::kString).Attr("value_strings", Kind::kStrings)
                 .NotDifferentiable().Shape(InferConstant).Build());
  r.Register(OpSchemaBuilder("", "ConstantOfShape").Opsets(9).Inputs(1, 1)
                 .Attr("value", Kind::kTensor).NotDifferentiable().Shape(InferConstantOfShape).Build());
  r.Register(OpSchemaBuilder("", "Range").Opsets(11).Inputs(3, 3).NotDifferentiable().Shape(InferRange).Build());
}

}  // namespace ottr::ir
