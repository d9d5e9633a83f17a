// Schemas and shape functions of the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare) and of
// ArgMax/ArgMin.
//
// Canonical form: the axes are the optional input 1 (an attribute before opset 13 for ReduceSum
// and 18 for the others; the importer moves it). No axes, or an empty axes tensor, reduces every
// axis unless noop_with_empty_axes=1, which makes the op elementwise (a reduction over no axes).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/ops/tensor_shape_math.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

absl::Status InferReduce(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const bool keepdims = ctx.node().GetInt("keepdims", 1) != 0;
  const bool noop = ctx.node().GetInt("noop_with_empty_axes", 0) != 0;
  if (in.dtype == DType::kBool && ctx.node().op_type() != "ReduceMax" &&
      ctx.node().op_type() != "ReduceMin") {
    return ctx.Error("bool inputs are only allowed for ReduceMax and ReduceMin");
  }
  std::optional<std::vector<int64_t>> axes;
  if (ctx.has_input(1)) {
    axes = ConstantInts(ctx, 1);
    if (!axes) {
      // Unknown axes: with keepdims the rank stays (each dim is itself or 1); without it the rank
      // is known only from a static number of axes.
      std::optional<Shape> out;
      const TensorType& at = ctx.input_type(1);
      const int64_t n = at.has_rank() && at.rank() == 1 && (*at.shape)[0].is_static()
                            ? (*at.shape)[0].value()
                            : -1;
      if (in.has_rank()) {
        if (n == 0) {
          out = noop ? *in.shape : (keepdims ? Shape(in.rank(), Dim(1)) : Shape{});
        } else if (keepdims) {
          out = Shape(in.rank(), Dim());
          for (int64_t i = 0; i < in.rank(); ++i) {
            if ((*in.shape)[i].is_static() && (*in.shape)[i].value() == 1) (*out)[i] = Dim(1);
          }
        } else if (n > 0) {
          out = Shape(in.rank() - n, Dim());
        }
      }
      ctx.set_output_type(0, TensorType(in.dtype, out));
      return absl::OkStatus();
    }
  }
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  const int64_t rank = in.rank();
  std::vector<bool> reduce(rank, false);
  if (!axes || axes->empty()) {
    if (noop) return SameAsInput(ctx);
    reduce.assign(rank, true);
  } else {
    absl::StatusOr<std::vector<int64_t>> ax = WrapAxes(*axes, rank);
    if (!ax.ok()) return ctx.Error(ax.status().message());
    for (int64_t a : *ax) reduce[a] = true;
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduce[i]) {
      out.push_back((*in.shape)[i]);
    } else if (keepdims) {
      out.push_back(Dim(1));
    }
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferArgReduce(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(DType::kInt64, std::nullopt));
    return absl::OkStatus();
  }
  if (in.rank() == 0) return ctx.Error("input must have rank >= 1");
  absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), in.rank());
  if (!axis.ok()) return ctx.Error(axis.status().message());
  Shape out = *in.shape;
  if (ctx.node().GetInt("keepdims", 1) != 0) {
    out[*axis] = Dim(1);
  } else {
    out.erase(out.begin() + *axis);
  }
  ctx.set_output_type(0, TensorType(DType::kInt64, out));
  return absl::OkStatus();
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                         "ReduceSumSquare"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, 2)
                   .Attr("axes", Kind::kInts).Attr("keepdims", Kind::kInt)
                   .Attr("noop_with_empty_axes", Kind::kInt).Shape(InferReduce).Build());
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    r.Register(OpSchemaBuilder("", op).Opsets(7).Inputs(1, 1)
                   .Attr("axis", Kind::kInt).Attr("keepdims", Kind::kInt)
                   .Attr("select_last_index", Kind::kInt).NotDifferentiable()
                   .Shape(InferArgReduce).Build());
  }
}

}  // namespace ottr::ir
