// CPU reference kernels of BatchNormalization, LayerNormalization, InstanceNormalization,
// GroupNormalization and Dropout (canonical forms: see ir/ops/normalization_ops.cc).
//
// Statistics are computed in double with two passes (mean, then the mean of squared deviations),
// which matches the float64 NumPy references closely for every input type; float16/bfloat16 are
// widened on the way in and rounded once on the way out.
#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/norm_loss_helpers.h"

namespace ottr::runtime::cpu {
namespace {

using norm_loss::BroadcastIndex;
using norm_loss::BroadcastsTo;
using norm_loss::DimProduct;
using norm_loss::DimsString;
using norm_loss::RequireFloatInput;
using norm_loss::SetOutputFromDoubles;
using norm_loss::ToDoubles;
using norm_loss::WantOutput;

// Requires input i to be 1-D of length n.
absl::Status RequireVector(const KernelContext& ctx, int i, absl::string_view name, int64_t n,
                           absl::string_view what) {
  const Tensor& t = ctx.input(i);
  if (t.rank() == 1 && t.dim(0) == n) return absl::OkStatus();
  return ctx.Error(absl::StrCat("input '", name, "' has shape ", DimsString(t.dims()),
                                "; expected [", n, "] (", what, ")"));
}

// Mean and population variance of v[begin, begin + count) (NaN for count == 0).
void MeanVar(const std::vector<double>& v, int64_t begin, int64_t count, double* mean,
             double* var) {
  double sum = 0.0;
  for (int64_t k = 0; k < count; ++k) sum += v[begin + k];
  const double m = sum / static_cast<double>(count);
  double sq = 0.0;
  for (int64_t k = 0; k < count; ++k) {
    const double d = v[begin + k] - m;
    sq += d * d;
  }
  *mean = m;
  *var = sq / static_cast<double>(count);
}

// BatchNormalization-15 (X: [N, C, D1..Dn]; scale, B, input_mean, input_var: [C]).
//   inference: Y = scale * (X - input_mean) / sqrt(input_var + epsilon) + B
//   training:  mean_c, var_c = batch mean and population variance over all dims but C;
//              Y = scale * (X - mean_c) / sqrt(var_c + epsilon) + B
//              running_mean = input_mean * momentum + mean_c * (1 - momentum)
//              running_var  = input_var * momentum + var_c * (1 - momentum)
absl::Status BatchNormalizationKernel(KernelContext& ctx) {
  static const char* const kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 5; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  if (ctx.attr_int("spatial", 1) != 1) {
    return ctx.Unsupported("spatial=0 (per-activation statistics) is not supported");
  }
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("X must have rank >= 2 (N x C x ...), got ",
                                  DimsString(x.dims())));
  }
  const int64_t n = x.dim(0), c = x.dim(1), s = DimProduct(x.dims(), 2, x.dims().size());
  for (int i = 1; i < 5; ++i) {
    OTTR_RETURN_IF_ERROR(RequireVector(ctx, i, kNames[i], c, "the channel count of X"));
  }
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  const double momentum = ctx.attr_float("momentum", 0.9f);
  const bool training = ctx.attr_int("training_mode", 0) != 0;
  if (!training && ctx.num_outputs() > 1) {
    return ctx.Error("the running_mean/running_var outputs require training_mode=1");
  }
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<double> scale = ToDoubles(ctx.input(1));
  const std::vector<double> bias = ToDoubles(ctx.input(2));
  const std::vector<double> in_mean = ToDoubles(ctx.input(3));
  const std::vector<double> in_var = ToDoubles(ctx.input(4));
  std::vector<double> mean(c), var(c);
  if (training) {
    if (n * s == 0 && c > 0) {
      return ctx.Error(absl::StrCat("training mode needs at least one element per channel; X is ",
                                    DimsString(x.dims())));
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0.0;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t base = (b * c + ch) * s;
        for (int64_t k = 0; k < s; ++k) sum += xv[base + k];
      }
      const double m = sum / static_cast<double>(n * s);
      double sq = 0.0;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t base = (b * c + ch) * s;
        for (int64_t k = 0; k < s; ++k) {
          const double d = xv[base + k] - m;
          sq += d * d;
        }
      }
      mean[ch] = m;
      var[ch] = sq / static_cast<double>(n * s);
    }
  } else {
    mean = in_mean;
    var = in_var;
  }
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const double mul = scale[ch] / std::sqrt(var[ch] + epsilon);
      const int64_t base = (b * c + ch) * s;
      for (int64_t k = 0; k < s; ++k) y[base + k] = (xv[base + k] - mean[ch]) * mul + bias[ch];
    }
  }
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  if (training) {
    for (int i = 1; i <= 2 && i < ctx.num_outputs(); ++i) {
      if (!ctx.output_needed(i)) continue;
      const std::vector<double>& running = i == 1 ? in_mean : in_var;
      const std::vector<double>& batch = i == 1 ? mean : var;
      std::vector<double> out(c);
      for (int64_t ch = 0; ch < c; ++ch) {
        out[ch] = running[ch] * momentum + batch[ch] * (1.0 - momentum);
      }
      SetOutputFromDoubles(ctx, i, ctx.input(2 + i).dtype(), {c}, out);
    }
  }
  return absl::OkStatus();
}

// LayerNormalization-17: with rows = prod(dims[:axis]) and cols = prod(dims[axis:]), per row
//   Mean = mean(x), InvStdDev = 1 / sqrt(var(x) + epsilon) (population variance),
//   Y = (x - Mean) * InvStdDev * Scale + B   (Scale and B broadcast to X).
// Mean and InvStdDev are typed by stash_type and shaped like X with 1 in the normalised dims.
absl::Status LayerNormalizationKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "X"));
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 1, "Scale"));
  if (ctx.has_input(2)) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 2, "B"));
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for X of shape ",
                                  DimsString(x.dims())));
  }
  if (axis < 0) axis += rank;
  const int64_t stash_code = ctx.attr_int("stash_type", 1);
  auto stash = ir::DTypeFromOnnx(static_cast<int32_t>(stash_code));
  if (!stash.ok() || !ir::IsFloat(*stash)) {
    return ctx.Error(absl::StrCat("stash_type ", stash_code, " is not a floating-point type"));
  }
  for (int i = 1; i <= 2; ++i) {
    if (ctx.has_input(i) && !BroadcastsTo(ctx.input(i).dims(), x.dims())) {
      return ctx.Error(absl::StrCat("input '", i == 1 ? "Scale" : "B", "' of shape ",
                                    DimsString(ctx.input(i).dims()),
                                    " cannot be broadcast to X of shape ", DimsString(x.dims())));
    }
  }
  const int64_t rows = DimProduct(x.dims(), 0, axis);
  const int64_t cols = DimProduct(x.dims(), axis, x.dims().size());
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<double> scale = ToDoubles(ctx.input(1));
  const std::vector<int64_t> scale_idx = BroadcastIndex(ctx.input(1).dims(), x.dims());
  std::vector<double> bias;
  std::vector<int64_t> bias_idx;
  if (ctx.has_input(2)) {
    bias = ToDoubles(ctx.input(2));
    bias_idx = BroadcastIndex(ctx.input(2).dims(), x.dims());
  }
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  std::vector<double> y(xv.size()), mean(rows), inv_std(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m, v;
    MeanVar(xv, r * cols, cols, &m, &v);
    const double inv = 1.0 / std::sqrt(v + epsilon);
    mean[r] = m;
    inv_std[r] = inv;
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t i = r * cols + k;
      double out = (xv[i] - m) * inv * scale[scale_idx[i]];
      if (!bias.empty()) out += bias[bias_idx[i]];
      y[i] = out;
    }
  }
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  std::vector<int64_t> stat_dims(x.dims().begin(), x.dims().begin() + axis);
  stat_dims.resize(rank, 1);
  if (WantOutput(ctx, 1)) SetOutputFromDoubles(ctx, 1, *stash, stat_dims, mean);
  if (WantOutput(ctx, 2)) SetOutputFromDoubles(ctx, 2, *stash, stat_dims, inv_std);
  return absl::OkStatus();
}

// InstanceNormalization-6: per (n, c) over the spatial dims,
//   Y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c]   (population variance).
absl::Status InstanceNormalizationKernel(KernelContext& ctx) {
  static const char* const kNames[] = {"input", "scale", "B"};
  for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("input must have rank >= 2 (N x C x ...), got ",
                                  DimsString(x.dims())));
  }
  const int64_t n = x.dim(0), c = x.dim(1), s = DimProduct(x.dims(), 2, x.dims().size());
  for (int i = 1; i < 3; ++i) {
    OTTR_RETURN_IF_ERROR(RequireVector(ctx, i, kNames[i], c, "the channel count of the input"));
  }
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<double> scale = ToDoubles(ctx.input(1));
  const std::vector<double> bias = ToDoubles(ctx.input(2));
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t base = (b * c + ch) * s;
      double m, v;
      MeanVar(xv, base, s, &m, &v);
      const double mul = scale[ch] / std::sqrt(v + epsilon);
      for (int64_t k = 0; k < s; ++k) y[base + k] = (xv[base + k] - m) * mul + bias[ch];
    }
  }
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  return absl::OkStatus();
}

// GroupNormalization-18/21: channels split into num_groups groups of C/G; per (n, group) over the
// group's channels and the spatial dims,
//   Y = scale * (x - mean) / sqrt(var + epsilon) + bias   (population variance),
// with scale/bias indexed by channel ([C], opset 21) or by group ([num_groups], opset 18).
absl::Status GroupNormalizationKernel(KernelContext& ctx) {
  static const char* const kNames[] = {"X", "scale", "bias"};
  for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, i, kNames[i]));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("X must have rank >= 2 (N x C x ...), got ",
                                  DimsString(x.dims())));
  }
  const int64_t groups = ctx.attr_int("num_groups", 0);
  const int64_t n = x.dim(0), c = x.dim(1), s = DimProduct(x.dims(), 2, x.dims().size());
  if (groups <= 0 || c % groups != 0) {
    return ctx.Error(absl::StrCat("num_groups ", groups, " must be positive and divide the ",
                                  "channel count ", c));
  }
  bool per_group[3] = {false, false, false};
  for (int i = 1; i < 3; ++i) {
    const Tensor& t = ctx.input(i);
    if (t.rank() == 1 && t.dim(0) == c) continue;
    if (t.rank() == 1 && t.dim(0) == groups) {
      per_group[i] = true;
      continue;
    }
    return ctx.Error(absl::StrCat("input '", kNames[i], "' has shape ", DimsString(t.dims()),
                                  "; expected [", c, "] (channels) or [", groups,
                                  "] (groups)"));
  }
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  const int64_t cg = c / groups;
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<double> scale = ToDoubles(ctx.input(1));
  const std::vector<double> bias = ToDoubles(ctx.input(2));
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (b * c + g * cg) * s;
      double m, v;
      MeanVar(xv, base, cg * s, &m, &v);
      const double inv = 1.0 / std::sqrt(v + epsilon);
      for (int64_t k = 0; k < cg; ++k) {
        const int64_t ch = g * cg + k;
        const double sc = scale[per_group[1] ? g : ch];
        const double bi = bias[per_group[2] ? g : ch];
        const int64_t off = base + k * s;
        for (int64_t j = 0; j < s; ++j) y[off + j] = (xv[off + j] - m) * inv * sc + bi;
      }
    }
  }
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  return absl::OkStatus();
}

// Dropout-13. Inference (training_mode absent or false) or ratio 0: output = data and the mask is
// all true. Training: each element is kept with probability 1 - ratio (drawn from the executor's
// generator); output = data * mask / (1 - ratio).
absl::Status DropoutKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 0, "data"));
  const Tensor& x = ctx.input(0);
  double ratio = 0.5;
  if (ctx.has_input(1)) {
    OTTR_RETURN_IF_ERROR(RequireFloatInput(ctx, 1, "ratio"));
    if (ctx.input(1).num_elements() != 1) {
      return ctx.Error(absl::StrCat("input 'ratio' must be a scalar, got shape ",
                                    DimsString(ctx.input(1).dims())));
    }
    ratio = ctx.input(1).GetAsDouble(0);
  }
  bool training = false;
  if (ctx.has_input(2)) {
    const Tensor& t = ctx.input(2);
    if (t.dtype() != DType::kBool || t.num_elements() != 1) {
      return ctx.Error(absl::StrCat("input 'training_mode' must be a bool scalar, got ",
                                    t.DebugString(2)));
    }
    training = t.data<bool>()[0];
  }
  const bool want_mask = WantOutput(ctx, 1);
  if (!training || ratio == 0.0) {
    ctx.SetOutput(0, x);
    if (want_mask) {
      Tensor& mask = ctx.AllocateOutput(1, DType::kBool, x.dims());
      std::fill_n(mask.data<bool>(), mask.num_elements(), true);
    }
    return absl::OkStatus();
  }
  if (!(ratio >= 0.0 && ratio < 1.0)) {
    return ctx.Error(absl::StrCat("ratio must be in [0, 1) in training mode, got ", ratio));
  }
  const double scale = 1.0 / (1.0 - ratio);
  const std::vector<double> xv = ToDoubles(x);
  std::vector<double> y(xv.size());
  std::vector<bool> keep(xv.size());
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    keep[i] = uniform(ctx.rng()) >= ratio;
    y[i] = keep[i] ? xv[i] * scale : 0.0;
  }
  SetOutputFromDoubles(ctx, 0, x.dtype(), x.dims(), y);
  if (want_mask) {
    Tensor& mask = ctx.AllocateOutput(1, DType::kBool, x.dims());
    bool* m = mask.data<bool>();
    for (size_t i = 0; i < keep.size(); ++i) m[i] = keep[i];
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterNormalizationKernels(KernelRegistry& r) {
  r.Register("", "BatchNormalization", BatchNormalizationKernel);
  r.Register("", "LayerNormalization", LayerNormalizationKernel);
  r.Register("", "InstanceNormalization", InstanceNormalizationKernel);
  r.Register("", "GroupNormalization", GroupNormalizationKernel);
  r.Register("", "Dropout", DropoutKernel);
  RegisterNormalizationGradKernels(r);
}

}  // namespace ottr::runtime::cpu
