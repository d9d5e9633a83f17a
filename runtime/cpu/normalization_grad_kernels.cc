// CPU kernels of the normalisation backward ops (schemas and math in
// ir/grads/normalization_grads.cc):
//   ottr::LayerNormalizationGrad, ottr::BatchNormalizationGrad, ottr::GroupNormalizationGrad,
//   ottr::DropoutGrad.
//
// All share, per group of M elements normalised together (x̂ = (x − μ) · σ⁻¹, g = dy ⊙ scale):
//   dx = σ⁻¹ · (g − mean(g) − x̂ · mean(g ⊙ x̂)),  dscale += dy ⊙ x̂,  dbias += dy.
// Elements are computed in float (double for float64 tensors) over contiguous memory; sums and
// the statistics are accumulated in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/norm_loss_helpers.h"

namespace ottr::runtime::cpu {
namespace {

using norm_loss::BroadcastIndex;
using norm_loss::BroadcastsTo;
using norm_loss::ComputeType;
using norm_loss::DimProduct;
using norm_loss::DimsString;
using norm_loss::Load;
using norm_loss::Store;
using norm_loss::ToDoubles;
using norm_loss::VisitFloatType;
using norm_loss::WantOutput;

// dY must have X's dims and element type.
absl::Status CheckGradLikeX(const KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (dy.dtype() != x.dtype() || dy.dims() != x.dims()) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(dy.dtype()), DimsString(dy.dims()),
                                  " does not match X ", ir::DTypeName(x.dtype()),
                                  DimsString(x.dims())));
  }
  return absl::OkStatus();
}

// Mean and 1 / sqrt(population variance + epsilon) of p[0, count) (two passes, in double).
template <typename T>
void Stats(const T* p, int64_t count, double epsilon, double* mean, double* inv_std) {
  double sum = 0.0;
  for (int64_t k = 0; k < count; ++k) sum += Load(p[k]);
  const double m = sum / static_cast<double>(count);
  double sq = 0.0;
  for (int64_t k = 0; k < count; ++k) {
    const double d = Load(p[k]) - m;
    sq += d * d;
  }
  *mean = m;
  *inv_std = 1.0 / std::sqrt(sq / static_cast<double>(count) + epsilon);
}

// ---------------------------------------------------------------------------------------------
// LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) {axis, epsilon} -> (dX, [dScale], [dBias])
// Rows are X's dims [0, axis); scale must not vary over them. dScale/dBias: X's dims [axis, rank).
absl::Status LayerNormalizationGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckGradLikeX(ctx));
  const Tensor& x = ctx.input(1);
  const Tensor& scale = ctx.input(2);
  if (scale.dtype() != x.dtype()) {
    return ctx.Error(absl::StrCat("scale has element type ", ir::DTypeName(scale.dtype()),
                                  " but X has ", ir::DTypeName(x.dtype())));
  }
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) {
    return ctx.Error(
        absl::StrCat("axis ", axis, " is out of range for X of shape ", DimsString(x.dims())));
  }
  if (axis < 0) axis += rank;
  const std::vector<int64_t> tail(x.dims().begin() + axis, x.dims().end());
  // Scale without the leading dims that fall on the rows (they must be 1).
  std::vector<int64_t> sdims = scale.dims();
  while (sdims.size() > tail.size()) {
    if (sdims.front() != 1) {
      return ctx.Error(absl::StrCat("scale of shape ", DimsString(scale.dims()),
                                    " varies over the leading dims of X ", DimsString(x.dims()),
                                    " (axis ", axis, ")"));
    }
    sdims.erase(sdims.begin());
  }
  if (!BroadcastsTo(sdims, tail)) {
    return ctx.Error(absl::StrCat("scale of shape ", DimsString(scale.dims()),
                                  " does not broadcast to X's normalised dims ", DimsString(tail)));
  }
  const int64_t rows = DimProduct(x.dims(), 0, axis);
  const int64_t cols = DimProduct(x.dims(), axis, x.dims().size());
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  std::vector<double> mean, inv_std;
  const bool have_stats = ctx.has_input(3) && ctx.has_input(4);
  if (have_stats) {
    for (int i : {3, 4}) {
      if (!ir::IsFloat(ctx.input(i).dtype()) || ctx.input(i).num_elements() != rows) {
        return ctx.Error(absl::StrCat("input ", i == 3 ? "mean" : "inv_std", " ",
                                      ctx.input(i).DebugString(2), " must be a float tensor of ",
                                      rows, " elements (one per row)"));
      }
    }
    mean = ToDoubles(ctx.input(3));
    inv_std = ToDoubles(ctx.input(4));
  }
  const bool want_dx = WantOutput(ctx, 0);
  const bool want_ds = WantOutput(ctx, 1);
  const bool want_db = WantOutput(ctx, 2);
  return VisitFloatType(ctx, x.dtype(), "X", [&]<typename T>() -> absl::Status {
    using C = ComputeType<T>;
    const T* dy = ctx.input(0).data<T>();
    const T* xp = x.data<T>();
    const std::vector<int64_t> sidx = BroadcastIndex(sdims, tail);
    std::vector<C> s(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) s[k] = Load(scale.data<T>()[sidx[k]]);
    T* dx = want_dx ? ctx.AllocateOutput(0, x.dtype(), x.dims()).data<T>() : nullptr;
    std::vector<double> ds(want_ds ? cols : 0), db(want_db ? cols : 0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * cols;
      const T* dyr = dy + r * cols;
      double m, iv;
      if (have_stats) {
        m = mean[r];
        iv = inv_std[r];
      } else {
        Stats(xr, cols, epsilon, &m, &iv);
      }
      const C mc = static_cast<C>(m), ivc = static_cast<C>(iv);
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const C xh = (Load(xr[k]) - mc) * ivc;
        const C d = Load(dyr[k]);
        const C g = d * s[k];
        sum_g += g;
        sum_gx += g * xh;
        if (want_ds) ds[k] += d * xh;
        if (want_db) db[k] += d;
      }
      if (dx == nullptr) continue;
      const C mg = static_cast<C>(sum_g / static_cast<double>(cols));
      const C mgx = static_cast<C>(sum_gx / static_cast<double>(cols));
      T* dxr = dx + r * cols;
      for (int64_t k = 0; k < cols; ++k) {
        const C xh = (Load(xr[k]) - mc) * ivc;
        dxr[k] = Store<T>(ivc * (Load(dyr[k]) * s[k] - mg - xh * mgx));
      }
    }
    if (want_ds) norm_loss::SetOutputFromDoubles(ctx, 1, x.dtype(), tail, ds);
    if (want_db) norm_loss::SetOutputFromDoubles(ctx, 2, x.dtype(), tail, db);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// BatchNormalizationGrad(dY, X [N,C,D..], scale [C], [mean [C], var [C]]) {epsilon}
//   -> (dX, [dScale [C]], [dB [C]]). Fixed statistics when mean/var are given, else the batch's.
absl::Status BatchNormalizationGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckGradLikeX(ctx));
  const Tensor& x = ctx.input(1);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("X must have rank >= 2, got ", DimsString(x.dims())));
  }
  const int64_t n = x.dim(0), c = x.dim(1), sp = DimProduct(x.dims(), 2, x.dims().size());
  const bool fixed = ctx.has_input(3) && ctx.has_input(4);
  static const char* const kNames[] = {"", "", "scale", "mean", "var"};
  for (int i = 2; i < (fixed ? 5 : 3); ++i) {
    const Tensor& t = ctx.input(i);
    if (!ir::IsFloat(t.dtype()) || t.rank() != 1 || t.dim(0) != c) {
      return ctx.Error(absl::StrCat("input '", kNames[i], "' ", ir::DTypeName(t.dtype()),
                                    DimsString(t.dims()), " must be a float tensor of shape [", c,
                                    "]"));
    }
  }
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  const int64_t m = n * sp;
  if (!fixed && m == 0 && c > 0) {
    return ctx.Error(absl::StrCat("batch statistics need at least one element per channel; X is ",
                                  DimsString(x.dims())));
  }
  const std::vector<double> scale = ToDoubles(ctx.input(2));
  const DType param_type = ctx.input(2).dtype();
  const bool want_dx = WantOutput(ctx, 0);
  const bool want_ds = WantOutput(ctx, 1);
  const bool want_db = WantOutput(ctx, 2);
  return VisitFloatType(ctx, x.dtype(), "X", [&]<typename T>() -> absl::Status {
    using C = ComputeType<T>;
    const T* dy = ctx.input(0).data<T>();
    const T* xp = x.data<T>();
    std::vector<double> mean(c, 0.0), inv(c, 0.0);
    if (fixed) {
      mean = ToDoubles(ctx.input(3));
      const std::vector<double> var = ToDoubles(ctx.input(4));
      for (int64_t ch = 0; ch < c; ++ch) inv[ch] = 1.0 / std::sqrt(var[ch] + epsilon);
    } else {
      std::vector<double> sum(c, 0.0), sq(c, 0.0);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* p = xp + (b * c + ch) * sp;
          double acc = 0.0;
          for (int64_t k = 0; k < sp; ++k) acc += Load(p[k]);
          sum[ch] += acc;
        }
      }
      for (int64_t ch = 0; ch < c; ++ch) mean[ch] = sum[ch] / static_cast<double>(m);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* p = xp + (b * c + ch) * sp;
          const double mu = mean[ch];
          double acc = 0.0;
          for (int64_t k = 0; k < sp; ++k) {
            const double d = Load(p[k]) - mu;
            acc += d * d;
          }
          sq[ch] += acc;
        }
      }
      for (int64_t ch = 0; ch < c; ++ch) {
        inv[ch] = 1.0 / std::sqrt(sq[ch] / static_cast<double>(m) + epsilon);
      }
    }
    // dB_c = Σ dY, dScale_c = Σ dY ⊙ x̂.
    std::vector<double> db(c, 0.0), ds(c, 0.0);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t base = (b * c + ch) * sp;
        const C mu = static_cast<C>(mean[ch]), iv = static_cast<C>(inv[ch]);
        double acc_b = 0.0, acc_s = 0.0;
        for (int64_t k = 0; k < sp; ++k) {
          const C d = Load(dy[base + k]);
          acc_b += d;
          acc_s += d * ((Load(xp[base + k]) - mu) * iv);
        }
        db[ch] += acc_b;
        ds[ch] += acc_s;
      }
    }
    if (want_dx) {
      T* dx = ctx.AllocateOutput(0, x.dtype(), x.dims()).data<T>();
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const int64_t base = (b * c + ch) * sp;
          const C k_dy = static_cast<C>(scale[ch] * inv[ch]);
          if (fixed) {
            for (int64_t k = 0; k < sp; ++k) dx[base + k] = Store<T>(k_dy * Load(dy[base + k]));
            continue;
          }
          const C mu = static_cast<C>(mean[ch]), iv = static_cast<C>(inv[ch]);
          const C mb = static_cast<C>(db[ch] / static_cast<double>(m));
          const C ms = static_cast<C>(ds[ch] / static_cast<double>(m));
          for (int64_t k = 0; k < sp; ++k) {
            const C xh = (Load(xp[base + k]) - mu) * iv;
            dx[base + k] = Store<T>(k_dy * (Load(dy[base + k]) - mb - xh * ms));
          }
        }
      }
    }
    if (want_ds) norm_loss::SetOutputFromDoubles(ctx, 1, param_type, {c}, ds);
    if (want_db) norm_loss::SetOutputFromDoubles(ctx, 2, param_type, {c}, db);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// GroupNormalizationGrad(dY, X [N,C,D..], scale [C] or [G]) {num_groups G, epsilon}
//   -> (dX, [dScale [C]], [dBias [C]]): statistics per (sample, group of C/G channels).
absl::Status GroupNormalizationGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckGradLikeX(ctx));
  const Tensor& x = ctx.input(1);
  if (x.rank() < 2) {
    return ctx.Error(absl::StrCat("X must have rank >= 2, got ", DimsString(x.dims())));
  }
  const int64_t n = x.dim(0), c = x.dim(1), sp = DimProduct(x.dims(), 2, x.dims().size());
  const int64_t groups = ctx.attr_int("num_groups", 0);
  if (groups <= 0 || c % groups != 0) {
    return ctx.Error(
        absl::StrCat("num_groups ", groups, " must be positive and divide the channel count ", c));
  }
  const Tensor& st = ctx.input(2);
  if (!ir::IsFloat(st.dtype()) || st.rank() != 1 || (st.dim(0) != c && st.dim(0) != groups)) {
    return ctx.Error(absl::StrCat("scale ", ir::DTypeName(st.dtype()), DimsString(st.dims()),
                                  " must be a float tensor of shape [", c, "] or [", groups, "]"));
  }
  const int64_t cg = c / groups;
  const bool per_group = st.dim(0) != c;
  const std::vector<double> scale = ToDoubles(st);
  const double epsilon = ctx.attr_float("epsilon", 1e-5f);
  const bool want_dx = WantOutput(ctx, 0);
  const bool want_ds = WantOutput(ctx, 1);
  const bool want_db = WantOutput(ctx, 2);
  return VisitFloatType(ctx, x.dtype(), "X", [&]<typename T>() -> absl::Status {
    using C = ComputeType<T>;
    const T* dy = ctx.input(0).data<T>();
    const T* xp = x.data<T>();
    T* dx = want_dx ? ctx.AllocateOutput(0, x.dtype(), x.dims()).data<T>() : nullptr;
    std::vector<double> ds(c, 0.0), db(c, 0.0);
    const int64_t group_size = cg * sp;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t base = (b * c + g * cg) * sp;
        double mean, inv;
        Stats(xp + base, group_size, epsilon, &mean, &inv);
        const C mu = static_cast<C>(mean), iv = static_cast<C>(inv);
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t ch = g * cg + j;
          const C s = static_cast<C>(scale[per_group ? g : ch]);
          const int64_t off = base + j * sp;
          double acc_d = 0.0, acc_dx = 0.0;
          for (int64_t k = 0; k < sp; ++k) {
            const C d = Load(dy[off + k]);
            const C xh = (Load(xp[off + k]) - mu) * iv;
            acc_d += d;
            acc_dx += d * xh;
          }
          db[ch] += acc_d;
          ds[ch] += acc_dx;
          sum_g += s * acc_d;
          sum_gx += s * acc_dx;
        }
        if (dx == nullptr) continue;
        const C mg = static_cast<C>(sum_g / static_cast<double>(group_size));
        const C mgx = static_cast<C>(sum_gx / static_cast<double>(group_size));
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t ch = g * cg + j;
          const C s = static_cast<C>(scale[per_group ? g : ch]);
          const int64_t off = base + j * sp;
          for (int64_t k = 0; k < sp; ++k) {
            const C xh = (Load(xp[off + k]) - mu) * iv;
            dx[off + k] = Store<T>(iv * (Load(dy[off + k]) * s - mg - xh * mgx));
          }
        }
      }
    }
    if (want_ds) norm_loss::SetOutputFromDoubles(ctx, 1, st.dtype(), {c}, ds);
    if (want_db) norm_loss::SetOutputFromDoubles(ctx, 2, st.dtype(), {c}, db);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// DropoutGrad(dY, mask, [ratio], [training_mode]) -> dX. As the forward Dropout: training mode
// (training_mode true) with ratio > 0 gives dX = dY ⊙ mask / (1 − ratio); otherwise dX = dY.
absl::Status DropoutGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& mask = ctx.input(1);
  if (mask.dtype() != DType::kBool || mask.dims() != dy.dims()) {
    return ctx.Error(absl::StrCat("mask ", ir::DTypeName(mask.dtype()), DimsString(mask.dims()),
                                  " must be bool shaped like dY ", DimsString(dy.dims())));
  }
  double ratio = 0.5;
  if (ctx.has_input(2)) {
    const Tensor& r = ctx.input(2);
    if (!ir::IsFloat(r.dtype()) || r.num_elements() != 1) {
      return ctx.Error(absl::StrCat("ratio must be a float scalar, got ", r.DebugString(2)));
    }
    ratio = r.GetAsDouble(0);
  }
  bool training = false;
  if (ctx.has_input(3)) {
    const Tensor& t = ctx.input(3);
    if (t.dtype() != DType::kBool || t.num_elements() != 1) {
      return ctx.Error(absl::StrCat("training_mode must be a bool scalar, got ", t.DebugString(2)));
    }
    training = t.data<bool>()[0];
  }
  if (!training || ratio == 0.0) {
    ctx.SetOutput(0, dy);
    return absl::OkStatus();
  }
  if (!(ratio > 0.0 && ratio < 1.0)) {
    return ctx.Error(absl::StrCat("ratio must be in [0, 1) in training mode, got ", ratio));
  }
  return VisitFloatType(ctx, dy.dtype(), "dY", [&]<typename T>() -> absl::Status {
    using C = ComputeType<T>;
    const C scale = static_cast<C>(1.0 / (1.0 - ratio));
    const T* d = dy.data<T>();
    const bool* keep = mask.data<bool>();
    T* dx = ctx.AllocateOutput(0, dy.dtype(), dy.dims()).data<T>();
    const int64_t count = dy.num_elements();
    for (int64_t i = 0; i < count; ++i) dx[i] = Store<T>(keep[i] ? Load(d[i]) * scale : C(0));
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterNormalizationGradKernels(KernelRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  r.Register(ottr, "LayerNormalizationGrad", LayerNormalizationGradKernel);
  r.Register(ottr, "BatchNormalizationGrad", BatchNormalizationGradKernel);
  r.Register(ottr, "GroupNormalizationGrad", GroupNormalizationGradKernel);
  r.Register(ottr, "DropoutGrad", DropoutGradKernel);
}

}  // namespace ottr::runtime::cpu
