// CPU reference kernels of Softmax, LogSoftmax, Hardmax (opset-13 form: one axis, default -1),
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// Softmax and log-sum-exp are computed in double after subtracting the maximum along the axis,
// so large inputs neither overflow nor lose the small terms of the sum.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/norm_loss_helpers.h"

namespace ottr::runtime::cpu {
namespace {

using norm_loss::DimProduct;
using norm_loss::DimsString;
using norm_loss::RequireFloatInput;
using norm_loss::SetOutputFromDoubles;
using norm_loss::ToDoubles;
using norm_loss::WantOutput;

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// Applies the op along one axis of x viewed as [outer, n, inner]; x and y are flat buffers.
//   Softmax:    y_k = exp(x_k - m) / sum_j exp(x_j - m),  m = max_j x_j
//   LogSoftmax: y_k = x_k - m - log(sum_j exp(x_j - m))
//   Hardmax:    y_k = 1 for the first k with x_k = max_j x_j, else 0
void SoftmaxAlongAxis(SoftmaxKind kind, const std::vector<double>& x, int64_t outer, int64_t n,
                      int64_t inner, std::vector<double>& y) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      double max = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t k = 0; k < n; ++k) {
        const double v = x[base + k * inner];
        if (k == 0 || v > max) {
          max = v;
          arg = k;
        }
      }
      if (kind == SoftmaxKind::kHardmax) {
        for (int64_t k = 0; k < n; ++k) y[base + k * inner] = k == arg ? 1.0 : 0.0;
        continue;
      }
      double sum = 0.0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[base + k * inner] - max);
      if (kind == SoftmaxKind::kSoftmax) {
        for (int64_t k = 0; k < n; ++k) {
          y[base + k * inner] = std::exp(x[base + k * inner] - max) / sum;
        }
      } else {
        const double log_sum = std::log(sum);
        for (int64_t k = 0; k < n; ++k) y[base + k * inner] = x[base + k * inner] - max - log_sum;
      }
    }
  }
}

absl::Status SoftmaxFamilyKernel(KernelContext& ctx, SoftmaxKind kind) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "input"));
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for input of shape ",
                                  DimsString(x.dims())));
  }
  if (axis < 0) axis += rank;
  const std::vector<double> xv = ToDoubles(x);
  std::vector<double> y(xv.size());
  SoftmaxAlongAxis(kind, xv, DimProduct(x.dims(), 0, axis), x.dim(axis),
                   DimProduct(x.dims(), axis + 1, x.dims().size()), y);
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  return absl::OkStatus();
}

// The loss shared by SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, given log-
// probabilities logp [N, C, d1..dk] (flat, `dims`), labels [N, d1..dk] and optional weights [C]:
//   w_j    = 0 if label_j == ignore_index, else weights[label_j] (1 without weights)
//   loss_j = -logp[n, label_j, d] * w_j
//   none: loss; sum: sum_j loss_j; mean: sum_j loss_j / sum_j w_j
// (without weights and ignore_index the mean divides by N * d1 * ... * dk).
absl::Status ClassificationLoss(KernelContext& ctx, const std::vector<double>& logp,
                                const std::vector<int64_t>& dims, DType out_type) {
  const Tensor& labels = ctx.input(1);
  if (labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64) {
    return ctx.Unsupported(absl::StrCat("labels have element type ",
                                        ir::DTypeName(labels.dtype()), "; expected int32 or int64"));
  }
  if (dims.size() < 2) {
    return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ",
                                  DimsString(dims)));
  }
  std::vector<int64_t> loss_dims = dims;
  loss_dims.erase(loss_dims.begin() + 1);
  if (labels.dims() != loss_dims) {
    return ctx.Error(absl::StrCat("labels of shape ", DimsString(labels.dims()),
                                  " do not match input of shape ", DimsString(dims),
                                  " (expected ", DimsString(loss_dims), ")"));
  }
  const int64_t n = dims[0], c = dims[1], d = DimProduct(dims, 2, dims.size());
  std::vector<double> weights;
  if (ctx.has_input(2)) {
    OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 2, "weights"));
    const Tensor& w = ctx.input(2);
    if (w.rank() != 1 || w.dim(0) != c) {
      return ctx.Error(absl::StrCat("weights of shape ", DimsString(w.dims()),
                                    " must be [C] = [", c, "]"));
    }
    weights = ToDoubles(w);
  }
  const std::string reduction = ctx.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return ctx.Error(absl::StrCat("reduction must be 'none', 'sum' or 'mean', got '", reduction,
                                  "'"));
  }
  const bool has_ignore = ctx.node().has_attr("ignore_index");
  const int64_t ignore_index = ctx.attr_int("ignore_index", 0);
  const std::vector<int64_t> label = labels.ToInt64Vector();
  std::vector<double> loss(label.size());
  double loss_sum = 0.0, weight_sum = 0.0;
  for (int64_t j = 0; j < n * d; ++j) {
    const int64_t t = label[j];
    if (has_ignore && t == ignore_index) continue;  // loss 0, weight 0
    if (t < 0 || t >= c) {
      return ctx.Error(absl::StrCat("label ", t, " at position ", j, " is out of range [0, ", c,
                                    ")", has_ignore ? absl::StrCat(" and is not ignore_index ",
                                                                   ignore_index)
                                                    : std::string()));
    }
    const double w = weights.empty() ? 1.0 : weights[t];
    const int64_t b = j / d, k = j % d;
    loss[j] = -logp[(b * c + t) * d + k] * w;
    loss_sum += loss[j];
    weight_sum += w;
  }
  if (reduction == "none") {
    SetOutputFromDoubles(ctx, 0, out_type, loss_dims, loss);
  } else if (reduction == "sum") {
    SetOutputFromDoubles(ctx, 0, out_type, {}, {loss_sum});
  } else {
    SetOutputFromDoubles(ctx, 0, out_type, {}, {loss_sum / weight_sum});
  }
  return absl::OkStatus();
}

// SoftmaxCrossEntropyLoss-13: log_prob = LogSoftmax(scores, axis=1), loss as NLL of log_prob.
absl::Status SoftmaxCrossEntropyLossKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "scores"));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("scores must have rank >= 2 (N x C x ...), got ",
                                  DimsString(x.dims())));
  }
  const std::vector<double> xv = ToDoubles(x);
  std::vector<double> logp(xv.size());
  SoftmaxAlongAxis(SoftmaxKind::kLogSoftmax, xv, x.dim(0), x.dim(1),
                   DimProduct(x.dims(), 2, x.dims().size()), logp);
  OTTR_RETURN_IF_ERROR(ClassificationLoss(ctx, logp, x.dims(), x.dtype()));
  if (WantOutput(ctx, 1)) SetOutputFromDoubles(ctx, 1, x.dtype(), x.dims(), logp);
  return absl::OkStatus();
}

// NegativeLogLikelihoodLoss-22: input holds log-probabilities [N, C, d1..dk].
absl::Status NegativeLogLikelihoodLossKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "input"));
  const Tensor& x = ctx.input(0);
  return ClassificationLoss(ctx, ToDoubles(x), x.dims(), x.dtype());
}

}  // namespace

void RegisterLossKernels(KernelRegistry& r) {
  r.Register("", "Softmax",
             [](KernelContext& ctx) { return SoftmaxFamilyKernel(ctx, SoftmaxKind::kSoftmax); });
  r.Register("", "LogSoftmax", [](KernelContext& ctx) {
    return SoftmaxFamilyKernel(ctx, SoftmaxKind::kLogSoftmax);
  });
  r.Register("", "Hardmax",
             [](KernelContext& ctx) { return SoftmaxFamilyKernel(ctx, SoftmaxKind::kHardmax); });
  r.Register("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossKernel);
  r.Register("", "NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossKernel);
  RegisterLossGradKernels(r);
}

}  // namespace ottr::runtime::cpu
