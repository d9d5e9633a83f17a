// CPU kernels of the softmax and classification-loss backward ops (schemas and math in
// ir/grads/loss_grads.cc):
//   ottr::SoftmaxGrad(dY, Y) {axis}:      dX = Y ⊙ (dY − Σ_axis dY ⊙ Y)
//   ottr::LogSoftmaxGrad(dY, Y) {axis}:   dX = dY − exp(Y) ⊙ Σ_axis dY
//   ottr::SoftmaxCrossEntropyLossGrad / ottr::NegativeLogLikelihoodLossGrad
//       (dloss, log_prob or input, labels, [weights]) {reduction, ignore_index}
// Elements are computed in float (double for float64 tensors); sums are accumulated in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/norm_loss_helpers.h"

namespace ottr::runtime::cpu {
namespace {

using norm_loss::ComputeType;
using norm_loss::DimProduct;
using norm_loss::DimsString;
using norm_loss::Load;
using norm_loss::Store;
using norm_loss::ToDoubles;
using norm_loss::VisitFloatType;
using norm_loss::WantOutput;

enum class SoftmaxKind { kSoftmax, kLogSoftmax };

// SoftmaxGrad / LogSoftmaxGrad with Y viewed as [outer, n, inner] around the axis.
absl::Status SoftmaxGradKernel(KernelContext& ctx, SoftmaxKind kind) {
  const Tensor& dy = ctx.input(0);
  const Tensor& y = ctx.input(1);
  if (dy.dtype() != y.dtype() || dy.dims() != y.dims()) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(dy.dtype()), DimsString(dy.dims()),
                                  " does not match Y ", ir::DTypeName(y.dtype()),
                                  DimsString(y.dims())));
  }
  const int64_t rank = y.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(
        absl::StrCat("axis ", axis, " is out of range for Y of shape ", DimsString(y.dims())));
  }
  if (axis < 0) axis += rank;
  const int64_t outer = DimProduct(y.dims(), 0, axis);
  const int64_t n = y.dim(axis);
  const int64_t inner = DimProduct(y.dims(), axis + 1, y.dims().size());
  return VisitFloatType(ctx, y.dtype(), "Y", [&]<typename T>() -> absl::Status {
    using C = ComputeType<T>;
    const T* d = dy.data<T>();
    const T* yp = y.data<T>();
    T* dx = ctx.AllocateOutput(0, y.dtype(), y.dims()).data<T>();
    // Per (outer, inner) sums over the axis: Σ dY ⊙ Y (softmax) or Σ dY (log-softmax).
    std::vector<double> sum(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t base = o * n * inner;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t k = 0; k < n; ++k) {
        const T* dr = d + base + k * inner;
        const T* yr = yp + base + k * inner;
        if (kind == SoftmaxKind::kSoftmax) {
          for (int64_t i = 0; i < inner; ++i) sum[i] += Load(dr[i]) * Load(yr[i]);
        } else {
          for (int64_t i = 0; i < inner; ++i) sum[i] += Load(dr[i]);
        }
      }
      for (int64_t k = 0; k < n; ++k) {
        const T* dr = d + base + k * inner;
        const T* yr = yp + base + k * inner;
        T* xr = dx + base + k * inner;
        if (kind == SoftmaxKind::kSoftmax) {
          for (int64_t i = 0; i < inner; ++i) {
            xr[i] = Store<T>(Load(yr[i]) * (Load(dr[i]) - static_cast<C>(sum[i])));
          }
        } else {
          for (int64_t i = 0; i < inner; ++i) {
            xr[i] = Store<T>(Load(dr[i]) - std::exp(Load(yr[i])) * static_cast<C>(sum[i]));
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// The two loss backward ops (see ir/grads/loss_grads.cc). `softmax`: input 1 holds log_prob and
// dscores = c_j · (exp(log_prob) − onehot); otherwise input 1 holds the NLL input and
// dinput = −c_j · onehot.
absl::Status ClassificationLossGradKernel(KernelContext& ctx, bool softmax) {
  const Tensor& dloss = ctx.input(0);
  const Tensor& logp = ctx.input(1);
  const Tensor& labels = ctx.input(2);
  const std::vector<int64_t>& dims = logp.dims();
  if (dims.size() < 2) {
    return ctx.Error(
        absl::StrCat("input must have rank >= 2 (N x C x ...), got ", DimsString(dims)));
  }
  if (labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64) {
    return ctx.Unsupported(absl::StrCat("labels have element type ", ir::DTypeName(labels.dtype()),
                                        "; expected int32 or int64"));
  }
  std::vector<int64_t> loss_dims = dims;
  loss_dims.erase(loss_dims.begin() + 1);
  if (labels.dims() != loss_dims) {
    return ctx.Error(absl::StrCat("labels of shape ", DimsString(labels.dims()),
                                  " do not match input of shape ", DimsString(dims), " (expected ",
                                  DimsString(loss_dims), ")"));
  }
  const std::string reduction = ctx.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return ctx.Error(
        absl::StrCat("reduction must be 'none', 'sum' or 'mean', got '", reduction, "'"));
  }
  const bool none = reduction == "none";
  if (!ir::IsFloat(dloss.dtype()) ||
      (none ? dloss.dims() != loss_dims : dloss.num_elements() != 1)) {
    return ctx.Error(absl::StrCat("dloss ", ir::DTypeName(dloss.dtype()), DimsString(dloss.dims()),
                                  " must be a float tensor shaped like the loss (",
                                  none ? DimsString(loss_dims) : std::string("a scalar"), ")"));
  }
  const int64_t n = dims[0], c = dims[1], d = DimProduct(dims, 2, dims.size());
  std::vector<double> weights;
  if (ctx.has_input(3)) {
    const Tensor& w = ctx.input(3);
    if (!ir::IsFloat(w.dtype()) || w.rank() != 1 || w.dim(0) != c) {
      return ctx.Error(absl::StrCat("weights ", ir::DTypeName(w.dtype()), DimsString(w.dims()),
                                    " must be a float tensor of shape [", c, "]"));
    }
    weights = ToDoubles(w);
  }
  const bool want_dw = WantOutput(ctx, 1);
  if (want_dw && weights.empty()) return ctx.Error("the weights gradient needs the weights input");
  const bool has_ignore = ctx.node().has_attr("ignore_index");
  const int64_t ignore_index = ctx.attr_int("ignore_index", 0);
  const std::vector<int64_t> label = labels.ToInt64Vector();
  const std::vector<double> dl = ToDoubles(dloss);
  // w_j (0 for ignored positions), W = Σ w_j.
  const int64_t positions = n * d;
  std::vector<double> w(positions, 0.0);
  std::vector<bool> ignored(positions, false);
  double weight_sum = 0.0;
  for (int64_t j = 0; j < positions; ++j) {
    const int64_t t = label[j];
    if (has_ignore && t == ignore_index) {
      ignored[j] = true;
      continue;
    }
    if (t < 0 || t >= c) {
      return ctx.Error(absl::StrCat(
          "label ", t, " at position ", j, " is out of range [0, ", c, ")",
          has_ignore ? absl::StrCat(" and is not ignore_index ", ignore_index) : std::string()));
    }
    w[j] = weights.empty() ? 1.0 : weights[t];
    weight_sum += w[j];
  }
  // c_j = w_j · dloss_j (none), w_j · dloss (sum), w_j · dloss / W (mean); 0 when ignored.
  std::vector<double> coef(positions, 0.0);
  for (int64_t j = 0; j < positions; ++j) {
    if (ignored[j]) continue;
    coef[j] = none ? w[j] * dl[j] : reduction == "sum" ? w[j] * dl[0] : w[j] * dl[0] / weight_sum;
  }
  if (WantOutput(ctx, 0)) {
    OTTR_RETURN_IF_ERROR(
        VisitFloatType(ctx, logp.dtype(), "input", [&]<typename T>() -> absl::Status {
          using C = ComputeType<T>;
          T* dx = ctx.AllocateOutput(0, logp.dtype(), dims).data<T>();  // zero-filled
          const T* lpp = logp.data<T>();
          if (!softmax) {
            for (int64_t j = 0; j < positions; ++j) {
              if (!ignored[j]) {
                dx[((j / d) * c + label[j]) * d + j % d] = Store<T>(static_cast<C>(-coef[j]));
              }
            }
            return absl::OkStatus();
          }
          // Row-major over [N, C, D] so the inner loop is contiguous.
          for (int64_t b = 0; b < n; ++b) {
            for (int64_t ch = 0; ch < c; ++ch) {
              const int64_t base = (b * c + ch) * d;
              for (int64_t k = 0; k < d; ++k) {
                const int64_t j = b * d + k;
                if (ignored[j]) continue;
                const C onehot = label[j] == ch ? C(1) : C(0);
                dx[base + k] =
                    Store<T>(static_cast<C>(coef[j]) * (std::exp(Load(lpp[base + k])) - onehot));
              }
            }
          }
          return absl::OkStatus();
        }));
  }
  if (want_dw) {
    // dweights[k] = Σ_{j: t_j = k} g_j (−lp_j); mean: dloss / W · Σ_{j: t_j = k} (−lp_j − loss).
    const std::vector<double> lp = ToDoubles(logp);
    double loss = 0.0;
    if (reduction == "mean") {
      for (int64_t j = 0; j < positions; ++j) {
        if (!ignored[j]) {
          const int64_t b = j / d, k = j % d;
          loss += -w[j] * lp[(b * c + label[j]) * d + k];
        }
      }
      loss /= weight_sum;
    }
    std::vector<double> dw(c, 0.0);
    for (int64_t j = 0; j < positions; ++j) {
      if (ignored[j]) continue;
      const int64_t b = j / d, k = j % d, t = label[j];
      const double nlp = -lp[(b * c + t) * d + k];
      if (none) {
        dw[t] += dl[j] * nlp;
      } else if (reduction == "sum") {
        dw[t] += dl[0] * nlp;
      } else {
        dw[t] += dl[0] / weight_sum * (nlp - loss);
      }
    }
    norm_loss::SetOutputFromDoubles(ctx, 1, ctx.input(3).dtype(), {c}, dw);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLossGradKernels(KernelRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  r.Register(ottr, "SoftmaxGrad",
             [](KernelContext& ctx) { return SoftmaxGradKernel(ctx, SoftmaxKind::kSoftmax); });
  r.Register(ottr, "LogSoftmaxGrad",
             [](KernelContext& ctx) { return SoftmaxGradKernel(ctx, SoftmaxKind::kLogSoftmax); });
  r.Register(ottr, "SoftmaxCrossEntropyLossGrad",
             [](KernelContext& ctx) { return ClassificationLossGradKernel(ctx, true); });
  r.Register(ottr, "NegativeLogLikelihoodLossGrad",
             [](KernelContext& ctx) { return ClassificationLossGradKernel(ctx, false); });
}

}  // namespace ottr::runtime::cpu
