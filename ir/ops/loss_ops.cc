// Schemas and shape functions of Softmax, LogSoftmax, Hardmax and the classification losses
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// Canonical forms: the softmax family is the opset-13 op on one axis (default -1); importer/
// canonicalize.cc lowers the older flatten-to-2-D forms into Flatten -> op -> Reshape.
// The losses take scores/log-probabilities [N, C, d1..dk] and labels [N, d1..dk]; the loss is
// [N, d1..dk] for reduction "none" and a scalar otherwise.
#include <string>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

absl::Status RequireFloat(const InferenceContext& ctx, int i, absl::string_view name) {
  if (!ctx.has_input(i)) return absl::OkStatus();
  const DType t = ctx.input_type(i).dtype;
  if (t == DType::kUndefined || IsFloat(t)) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input '", name, "' must be a floating-point tensor, got ",
                                DTypeName(t)));
}

// Softmax / LogSoftmax / Hardmax: the output has the input's type; the axis must be in range.
absl::Status InferSoftmaxFamily(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "input"));
  const TensorType& x = ctx.input_type(0);
  if (x.has_rank()) {
    OTTR_RETURN_IF_ERROR(NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), x.rank()).status());
  }
  ctx.set_output_type(0, x);
  return absl::OkStatus();
}

// Shared by both losses: input 0 is [N, C, d1..dk] (float), input 1 the labels [N, d1..dk]
// (int32/int64), optional input 2 the class weights [C].
absl::Status InferClassificationLoss(InferenceContext& ctx, bool has_log_prob_output) {
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 0, "input"));
  OTTR_RETURN_IF_ERROR(RequireFloat(ctx, 2, "weights"));
  const std::string reduction = ctx.node().GetString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return ctx.Error(absl::StrCat("reduction must be 'none', 'sum' or 'mean', got '", reduction,
                                  "'"));
  }
  const DType label_type = ctx.input_type(1).dtype;
  if (label_type != DType::kUndefined && label_type != DType::kInt32 &&
      label_type != DType::kInt64) {
    return ctx.Error(absl::StrCat("the labels must be int32 or int64, got ",
                                  DTypeName(label_type)));
  }
  const TensorType& x = ctx.input_type(0);
  const TensorType& labels = ctx.input_type(1);
  if (x.has_rank() && x.rank() < 2) {
    return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ",
                                  ShapeToString(*x.shape)));
  }
  // The loss shape [N, d1..dk]: from the input with dim 1 removed, refined by the labels.
  std::optional<Shape> loss_shape;
  if (x.has_rank()) {
    Shape s = *x.shape;
    s.erase(s.begin() + 1);
    loss_shape = std::move(s);
  }
  if (labels.has_rank()) {
    if (!loss_shape) {
      loss_shape = *labels.shape;
    } else if (labels.rank() != static_cast<int64_t>(loss_shape->size())) {
      return ctx.Error(absl::StrCat("labels of shape ", ShapeToString(*labels.shape),
                                    " do not match input of shape ", ShapeToString(*x.shape),
                                    " (expected [N, d1..dk] for input [N, C, d1..dk])"));
    } else {
      for (size_t k = 0; k < loss_shape->size(); ++k) {
        Dim& d = (*loss_shape)[k];
        const Dim& l = (*labels.shape)[k];
        if (d.is_static() && l.is_static() && d.value() != l.value()) {
          return ctx.Error(absl::StrCat("labels of shape ", ShapeToString(*labels.shape),
                                        " do not match input of shape ", ShapeToString(*x.shape),
                                        " (expected [N, d1..dk] for input [N, C, d1..dk])"));
        }
        if (!d.is_static() && !l.is_unknown()) d = l;
      }
    }
  }
  if (ctx.has_input(2) && ctx.input_type(2).has_rank()) {
    const Shape& w = *ctx.input_type(2).shape;
    const bool ok = w.size() == 1 && (!x.has_rank() || !w[0].is_static() ||
                                      !(*x.shape)[1].is_static() ||
                                      w[0].value() == (*x.shape)[1].value());
    if (!ok) {
      return ctx.Error(absl::StrCat("weights of shape ", ShapeToString(w),
                                    " must be 1-D of length C; input is ",
                                    x.has_rank() ? ShapeToString(*x.shape) : std::string("*")));
    }
  }
  if (reduction == "none") {
    ctx.set_output_type(0, TensorType(x.dtype, loss_shape));
  } else {
    ctx.set_output_type(0, TensorType(x.dtype, Shape{}));
  }
  if (has_log_prob_output && ctx.num_outputs() > 1) ctx.set_output_type(1, x);
  return absl::OkStatus();
}

}  // namespace

void RegisterLossOps(OpRegistry& r) {
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    OpSchemaBuilder b("", op);
    b.Opsets(7).Inputs(1, 1).Outputs(1, 1).Attr("axis", Kind::kInt).Shape(InferSoftmaxFamily);
    // Hardmax is piecewise constant: its derivative is zero wherever it exists.
    if (std::string(op) == "Hardmax") b.NotDifferentiable();
    r.Register(b.Build());
  }
  r.Register(OpSchemaBuilder("", "SoftmaxCrossEntropyLoss")
                 .Opsets(12)
                 .Inputs(2, 3)
                 .Outputs(1, 2)
                 .Attr("ignore_index", Kind::kInt)
                 .Attr("reduction", Kind::kString)
                 .Shape([](InferenceContext& ctx) { return InferClassificationLoss(ctx, true); })
                 .Build());
  r.Register(OpSchemaBuilder("", "NegativeLogLikelihoodLoss")
                 .Opsets(12)
                 .Inputs(2, 3)
                 .Outputs(1, 1)
                 .Attr("ignore_index", Kind::kInt)
                 .Attr("reduction", Kind::kString)
                 .Shape([](InferenceContext& ctx) { return InferClassificationLoss(ctx, false); })
                 .Build());
}

}  // namespace ottr::ir
