// CPU kernels for Conv, ConvTranspose and the pooling ops, for any number of spatial axes.
//
// Conv is im2col + GEMM: per image and group, the receptive fields are unrolled into a matrix
//   col[(c * K + k) , o] = x[c, o * stride - pad + k * dilation]   (0 outside the input)
// of (C/group * K) rows by O output positions (K = kernel elements), and Y_g = W_g * col, with W_g
// the group's M/group x (C/group * K) weights, lands directly in NCHW order. ConvTranspose is the
// adjoint: col = W_g^T * X_g, then col2im scatters and adds col back into the output image
// (im2col.h). Float16 and bfloat16 are computed in float. The backward kernels are in
// conv_pool_grad_kernels.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/status.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/conv_pool_common.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

using conv_pool::DimsString;
using conv_pool::Geometry;
using conv_pool::kIsFloatType;
using conv_pool::PoolWindows;
using conv_pool::WindowOp;

// Y[n, m, :] = conv(X[n], W[m]) + B[m], in T = float or double.
template <typename T>
void ConvCompute(const T* x, const T* w, const T* bias, T* y, int64_t batch, int64_t in_channels,
                 int64_t out_channels, int64_t group, const Geometry& g) {
  const int64_t cg = in_channels / group;
  const int64_t mg = out_channels / group;
  const int64_t ksize = g.kernel_size();
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  const int64_t kdim = cg * ksize;
  const bool pointwise = g.IsPointwise();
  // Images run in parallel; a single image instead spreads its GEMMs over the threads.
  const double macs_per_image = static_cast<double>(out_channels) * osize * kdim;
  ParallelFor(batch, macs_per_image, [&](int64_t n0, int64_t n1) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(kdim * osize));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < group; ++gi) {
        const T* xg = x + (n * in_channels + gi * cg) * isize;
        const T* cols = xg;
        if (!pointwise) {
          conv_pool::Im2Col(xg, cg, g, col.data());
          cols = col.data();
        }
        T* yg = y + (n * out_channels + gi * mg) * osize;
        T beta = T(0);
        if (bias != nullptr) {
          for (int64_t m = 0; m < mg; ++m) {
            std::fill(yg + m * osize, yg + (m + 1) * osize, bias[gi * mg + m]);
          }
          beta = T(1);
        }
        Gemm(false, false, mg, osize, kdim, T(1), w + gi * mg * kdim, kdim, cols, osize, beta, yg,
             osize);
      }
    }
  });
}

absl::Status CheckConvDTypes(const KernelContext& ctx) {
  const DType t = ctx.input(0).dtype();
  if (!ir::IsFloat(t)) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t),
                                        " is not supported (float16, bfloat16, float, double)"));
  }
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i) && ctx.input(i).dtype() != t) {
      return ctx.Error(absl::StrCat("input ", i, " is ", ir::DTypeName(ctx.input(i).dtype()),
                                    " but X is ", ir::DTypeName(t)));
    }
  }
  return absl::OkStatus();
}

// Runs compute<T>(x, w, b, y) in the tensor's own type for float/double, else in float.
template <typename Fn>
void DispatchConv(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Fn&& compute) {
  switch (x.dtype()) {
    case DType::kFloat32:
      compute(x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr, y.data<float>());
      break;
    case DType::kFloat64:
      compute(x.data<double>(), w.data<double>(), b ? b->data<double>() : nullptr,
              y.data<double>());
      break;
    default: {
      const std::vector<float> xf = conv_pool::ToFloatVector(x);
      const std::vector<float> wf = conv_pool::ToFloatVector(w);
      const std::vector<float> bf = b ? conv_pool::ToFloatVector(*b) : std::vector<float>();
      std::vector<float> yf(static_cast<size_t>(y.num_elements()));
      compute(xf.data(), wf.data(), b ? bf.data() : nullptr, yf.data());
      conv_pool::FromFloatVector(yf, y);
    }
  }
}

absl::Status CheckBias(const KernelContext& ctx, int64_t channels) {
  if (!ctx.has_input(2)) return absl::OkStatus();
  const Tensor& b = ctx.input(2);
  if (b.rank() != 1 || b.dim(0) != channels) {
    return ctx.Error(absl::StrCat("bias B ", DimsString(b.dims()), " must be [", channels, "]"));
  }
  return absl::OkStatus();
}

absl::Status ConvKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckConvDTypes(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), &w.dims(), WindowOp::kConv));
  const int64_t group = ctx.attr_int("group", 1);
  const int64_t c = x.dim(1);
  const int64_t m = w.dim(0);
  if (group < 1 || c % group != 0 || m % group != 0 || w.dim(1) * group != c) {
    return ctx.Error(absl::StrCat("X ", DimsString(x.dims()), " and W ", DimsString(w.dims()),
                                  " do not agree with group ", group,
                                  " (need C = W[1] * group and W[0] divisible by group)"));
  }
  OTTR_RETURN_IF_ERROR(CheckBias(ctx, m));
  std::vector<int64_t> out_dims = {x.dim(0), m};
  out_dims.insert(out_dims.end(), g.positions.begin(), g.positions.end());
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  if (y.num_elements() == 0) return absl::OkStatus();
  DispatchConv(x, w, ctx.has_input(2) ? &ctx.input(2) : nullptr, y,
               [&](const auto* xp, const auto* wp, const auto* bp, auto* yp) {
                 ConvCompute(xp, wp, bp, yp, x.dim(0), c, m, group, g);
               });
  // ottr::Conv's activation (fuse-conv-activation): y = relu(conv + bias), NaN kept (as Relu).
  const std::string activation = ctx.attr_string("activation", "");
  if (activation == "relu") {
    ir::VisitDType(y.dtype(), [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T>) {
        for (T& v : y.span<T>()) v = v < T(0) ? T(0) : v;
      } else if constexpr (!std::is_void_v<T>) {
        for (T& v : y.span<T>()) v = ir::FromDouble<T>(std::max(0.0, ir::ToDouble(v)));
      }
    });
  } else if (!activation.empty()) {
    return ctx.Unsupported(absl::StrCat("activation '", activation, "' (relu only)"));
  }
  return absl::OkStatus();
}

absl::Status ConvTransposeKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckConvDTypes(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(
      Geometry g, conv_pool::ResolveGeometry(ctx, x.dims(), &w.dims(), WindowOp::kConvTranspose));
  const int64_t group = ctx.attr_int("group", 1);
  const int64_t c = x.dim(1);
  if (group < 1 || c % group != 0 || w.dim(0) != c) {
    return ctx.Error(absl::StrCat("X ", DimsString(x.dims()), " and W ", DimsString(w.dims()),
                                  " do not agree with group ", group,
                                  " (need W[0] = C divisible by group)"));
  }
  const int64_t m = w.dim(1) * group;
  OTTR_RETURN_IF_ERROR(CheckBias(ctx, m));
  std::vector<int64_t> out_dims = {x.dim(0), m};
  out_dims.insert(out_dims.end(), g.image.begin(), g.image.end());
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  if (y.num_elements() == 0) return absl::OkStatus();
  DispatchConv(x, w, ctx.has_input(2) ? &ctx.input(2) : nullptr, y,
               [&](const auto* xp, const auto* wp, const auto* bp, auto* yp) {
                 conv_pool::ConvTransposeCompute(xp, wp, bp, yp, x.dim(0), c, m, group, g);
               });
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Pooling.
// ---------------------------------------------------------------------------------------------

std::vector<int64_t> PoolOutputDims(const Tensor& x, const Geometry& g) {
  std::vector<int64_t> dims = {x.dim(0), x.dim(1)};
  dims.insert(dims.end(), g.positions.begin(), g.positions.end());
  return dims;
}

// Max over each window of each plane, NaN propagating; indices flattened over the whole input
// tensor (plane offset + row- or column-major spatial index) when `indices` is non-null.
template <typename T>
void MaxPoolCompute(const T* x, T* y, int64_t* indices, int64_t planes, const Geometry& g,
                    bool column_major) {
  using Acc = std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>, double, float>;
  const PoolWindows windows(g);
  const std::unique_ptr<conv_pool::MaxPool2D> pool2d =
      conv_pool::MaxPool2D::Supports(g) ? std::make_unique<conv_pool::MaxPool2D>(g) : nullptr;
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  T empty;  // a window entirely in the padding
  if constexpr (std::is_integral_v<T>) {
    empty = std::numeric_limits<T>::lowest();
  } else {
    empty = ir::FromDouble<T>(-std::numeric_limits<double>::infinity());
  }
  ParallelFor(planes, static_cast<double>(osize) * g.kernel_size(), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* src = x + p * isize;
      T* dst = y + p * osize;
      int64_t* idx = indices != nullptr ? indices + p * osize : nullptr;
      // The chosen element is copied, so the value is exact whatever Acc is.
      auto emit = [&](int64_t o, int64_t row, int64_t col) {
        dst[o] = row < 0 ? empty : src[row];
        if (idx != nullptr) idx[o] = row < 0 ? -1 : p * isize + (column_major ? col : row);
      };
      if (pool2d != nullptr) {
        // Column-major spatial index of a 2-D plane: row + col * height (1-D: the same).
        const bool transpose = column_major && g.nd == 2;
        const int64_t width = g.image[g.nd - 1];
        const int64_t height = g.image[0];
        pool2d->Plane<Acc>(src, [&](int64_t o, int64_t index) {
          emit(o, index, transpose && index >= 0 ? index % width * height + index / width : index);
        });
        continue;
      }
      windows.ForEach([&](int64_t o, const std::vector<int64_t>&, auto&& taps) {
        conv_pool::ArgMax<Acc> m;
        int64_t col = -1;
        taps([&](int64_t row, int64_t colmajor) {
          const int64_t before = m.index;
          m.Add(static_cast<Acc>(ir::ToDouble(src[row])), row);
          if (m.index != before) col = colmajor;
        });
        emit(o, m.index, col);
      });
    }
  });
}

absl::Status MaxPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kBool || !(ir::IsFloat(x.dtype()) || ir::IsInteger(x.dtype()))) {
    return ctx.Unsupported(
        absl::StrCat("element type ", ir::DTypeName(x.dtype()), " is not supported"));
  }
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), nullptr, WindowOp::kPool));
  const int64_t storage_order = ctx.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1) {
    return ctx.Error(
        absl::StrCat("attribute 'storage_order' = ", storage_order, " must be 0 or 1"));
  }
  const std::vector<int64_t> out_dims = PoolOutputDims(x, g);
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  Tensor* indices = ctx.num_outputs() > 1 && ctx.output_needed(1)
                        ? &ctx.AllocateOutput(1, DType::kInt64, out_dims)
                        : nullptr;
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (!std::is_void_v<T> && !std::is_same_v<T, bool>) {
      MaxPoolCompute(x.data<T>(), y.data<T>(), indices ? indices->data<int64_t>() : nullptr,
                     x.dim(0) * x.dim(1), g, storage_order == 1);
    }
  });
  return absl::OkStatus();
}

// AveragePool (the sum over the window's elements inside the input, divided by their count, or
// with count_include_pad by the taps inside the padded input) or LpPool ((sum |x|^p)^(1/p)),
// accumulated in double.
template <typename T>
void AverageOrLpPoolCompute(const T* x, T* y, int64_t planes, const Geometry& g, bool lp,
                            int64_t p_norm, bool count_include_pad) {
  const PoolWindows windows(g);
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  const double p = static_cast<double>(p_norm);
  ParallelFor(planes, static_cast<double>(osize) * g.kernel_size(), [&](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const T* src = x + plane * isize;
      T* dst = y + plane * osize;
      windows.ForEach([&](int64_t o, const std::vector<int64_t>& pos, auto&& taps) {
        double sum = 0.0;
        int64_t count = 0;
        taps([&](int64_t row, int64_t) {
          const double v = ir::ToDouble(src[row]);
          sum += !lp ? v : p == 2.0 ? v * v : std::pow(std::fabs(v), p);
          ++count;
        });
        double r;
        if (lp) {
          r = p == 2.0 ? std::sqrt(sum) : std::pow(sum, 1.0 / p);
        } else {
          if (count_include_pad) count = windows.PaddedCount(pos);
          r = count == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / count;
        }
        dst[o] = ir::FromDouble<T>(r);
      });
    }
  });
}

absl::Status CheckFloatInput(const KernelContext& ctx) {
  const DType t = ctx.input(0).dtype();
  if (ir::IsFloat(t)) return absl::OkStatus();
  return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t),
                                      " is not supported (float16, bfloat16, float, double)"));
}

absl::StatusOr<int64_t> ReadP(const KernelContext& ctx) {
  const int64_t p = ctx.attr_int("p", 2);
  if (p < 1) return ctx.Error(absl::StrCat("attribute 'p' = ", p, " must be >= 1"));
  return p;
}

absl::Status AverageOrLpPool(KernelContext& ctx, bool lp) {
  OTTR_RETURN_IF_ERROR(CheckFloatInput(ctx));
  const Tensor& x = ctx.input(0);
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), nullptr, WindowOp::kPool));
  const bool count_include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  int64_t p = 2;
  if (lp) {
    OTTR_ASSIGN_OR_RETURN(p, ReadP(ctx));
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), PoolOutputDims(x, g));
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatType<T>) {
      AverageOrLpPoolCompute(x.data<T>(), y.data<T>(), x.dim(0) * x.dim(1), g, lp, p,
                             count_include_pad);
    }
  });
  return absl::OkStatus();
}

enum class GlobalKind { kAverage, kMax, kLp };

// Global pools reduce each plane (all spatial dims) to one value: [N, C, 1, ..., 1].
absl::Status GlobalPool(KernelContext& ctx, GlobalKind kind) {
  OTTR_RETURN_IF_ERROR(CheckFloatInput(ctx));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) {
    return ctx.Error(
        absl::StrCat("input X ", DimsString(x.dims()), " must have rank >= 2 (N x C x ...)"));
  }
  int64_t p_norm = 2;
  if (kind == GlobalKind::kLp) {
    OTTR_ASSIGN_OR_RETURN(p_norm, ReadP(ctx));
  }
  const double p = static_cast<double>(p_norm);
  std::vector<int64_t> out_dims(x.rank(), 1);
  out_dims[0] = x.dim(0);
  out_dims[1] = x.dim(1);
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t size = planes == 0 ? 0 : x.num_elements() / planes;
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatType<T>) {
      for (int64_t plane = 0; plane < planes; ++plane) {
        const T* src = x.data<T>() + plane * size;
        double r = 0.0;
        if (kind == GlobalKind::kMax) {
          r = -std::numeric_limits<double>::infinity();
          for (int64_t i = 0; i < size && !std::isnan(r); ++i) {
            const double v = ir::ToDouble(src[i]);
            if (v > r || std::isnan(v)) r = v;
          }
        } else {
          for (int64_t i = 0; i < size; ++i) {
            const double v = ir::ToDouble(src[i]);
            r += kind == GlobalKind::kAverage ? v : std::pow(std::fabs(v), p);
          }
          r = kind == GlobalKind::kAverage
                  ? (size == 0 ? std::numeric_limits<double>::quiet_NaN() : r / size)
                  : std::pow(r, 1.0 / p);
        }
        y.data<T>()[plane] = ir::FromDouble<T>(r);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterConvPoolKernels(KernelRegistry& r) {
  RegisterConvPoolGradKernels(r);
  r.Register("", "Conv", ConvKernel);
  r.Register("", "ConvTranspose", ConvTransposeKernel);
  r.Register("", "MaxPool", MaxPoolKernel);
  // The channels-last forms of the nhwc-layout pass (ir/ops/channels_last.h).
  r.Register(std::string(ir::kOttrDomain), "Conv", WithLayout(ConvKernel));
  r.Register(std::string(ir::kOttrDomain), "MaxPool", WithLayout(MaxPoolKernel));
  r.Register("", "AveragePool", [](KernelContext& ctx) { return AverageOrLpPool(ctx, false); });
  r.Register("", "LpPool", [](KernelContext& ctx) { return AverageOrLpPool(ctx, true); });
  r.Register("", "GlobalAveragePool",
             [](KernelContext& ctx) { return GlobalPool(ctx, GlobalKind::kAverage); });
  r.Register("", "GlobalMaxPool",
             [](KernelContext& ctx) { return GlobalPool(ctx, GlobalKind::kMax); });
  r.Register("", "GlobalLpPool",
             [](KernelContext& ctx) { return GlobalPool(ctx, GlobalKind::kLp); });
}

}  // namespace ottr::runtime::cpu
