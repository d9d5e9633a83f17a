// CPU kernels of the ottr-domain backward ops of convolution and pooling (schemas and math in
// ir/grads/conv_pool_grads.cc):
//
//   ConvGradInput(dY, W) {conv attrs, input_shape} -> dX
//       per image and group dX_g = col2im(W_gᵀ · dY_g): ConvTranspose's compute with the Conv's
//       geometry (conv_pool_common.h).
//   ConvGradFilter(dY, X) {conv attrs, kernel_shape} -> dW
//       dW_g = Σ_n dY_{n,g} · im2col(X_{n,g})ᵀ. The batch is cut into a fixed number of chunks
//       that depends only on the shapes (never on the thread count); each chunk accumulates its
//       images in order into its own partial dW, and the partials are then added in chunk order,
//       so the result is the same bits for any number of threads.
//   MaxPoolGrad(dY, X) {pool attrs} -> dX
//       dY of each window goes to the element the forward picked (the first maximum; the first
//       NaN when there is one), found again from X.
//   AveragePoolGrad(dY) {pool attrs, input_shape} -> dX
//       dY of each window spread evenly over the window's taps inside the input, divided by the
//       forward's count (taps inside the input, or inside the padded input with
//       count_include_pad).
//   LpPoolGrad(dY, X, Y) {pool attrs, p} -> dX
//       y = (Σ |x|^p)^(1/p):  dx_i += dy · sign(x_i) · |x_i|^(p-1) / y^(p-1)   (0 where y = 0).
//
// float and double compute in their own type; float16 and bfloat16 are widened to float. Planes
// (pools) and images (convolutions) run in parallel; each output element is written by one thread
// in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/conv_pool_common.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/im2col.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

using conv_pool::ArgMax;
using conv_pool::DimsString;
using conv_pool::Geometry;
using conv_pool::PoolWindows;
using conv_pool::WindowOp;

// Every input is a float type, all the same.
absl::Status CheckFloatInputs(const KernelContext& ctx) {
  const DType t = ctx.input(0).dtype();
  if (!ir::IsFloat(t)) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t),
                                        " is not supported (float16, bfloat16, float, double)"));
  }
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i) && ctx.input(i).dtype() != t) {
      return ctx.Error(absl::StrCat("input ", i, " is ", ir::DTypeName(ctx.input(i).dtype()),
                                    " but input 0 is ", ir::DTypeName(t)));
    }
  }
  return absl::OkStatus();
}

// Calls compute.template operator()<T>(inputs, out) with T = float or double and pointers to the
// data of `ins` and `out`; float16/bfloat16 tensors are widened to float copies and the result
// narrowed back into `out`.
template <typename Fn>
void DispatchFloat(const std::vector<const Tensor*>& ins, Tensor& out, Fn&& compute) {
  switch (out.dtype()) {
    case DType::kFloat32: {
      std::vector<const float*> p;
      for (const Tensor* t : ins) p.push_back(t->data<float>());
      compute.template operator()<float>(p, out.data<float>());
      break;
    }
    case DType::kFloat64: {
      std::vector<const double*> p;
      for (const Tensor* t : ins) p.push_back(t->data<double>());
      compute.template operator()<double>(p, out.data<double>());
      break;
    }
    default: {
      std::vector<std::vector<float>> wide;
      std::vector<const float*> p;
      wide.reserve(ins.size());
      for (const Tensor* t : ins) {
        wide.push_back(conv_pool::ToFloatVector(*t));
        p.push_back(wide.back().data());
      }
      std::vector<float> o(static_cast<size_t>(out.num_elements()));
      compute.template operator()<float>(p, o.data());
      conv_pool::FromFloatVector(o, out);
    }
  }
}

// The `input_shape` attribute of ConvGradInput/AveragePoolGrad: X's dims, whose batch must be
// dY's.
absl::StatusOr<std::vector<int64_t>> ReadInputShape(const KernelContext& ctx, const Tensor& dy) {
  std::vector<int64_t> shape = ctx.attr_ints("input_shape");
  if (shape.size() != static_cast<size_t>(dy.rank()) || shape.size() < 3) {
    return ctx.Error(absl::StrCat("attribute 'input_shape' = ", DimsString(shape),
                                  " must have the rank of dY ", DimsString(dy.dims()),
                                  " (at least 3)"));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return ctx.Error(
          absl::StrCat("attribute 'input_shape' = ", DimsString(shape), " has a negative dim"));
    }
  }
  if (shape[0] != dy.dim(0)) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " and input_shape ",
                                  DimsString(shape), " disagree on the batch"));
  }
  return shape;
}

// dims [N, channels, positions...].
std::vector<int64_t> WindowDims(int64_t n, int64_t channels, const Geometry& g) {
  std::vector<int64_t> dims = {n, channels};
  dims.insert(dims.end(), g.positions.begin(), g.positions.end());
  return dims;
}

absl::Status CheckDy(const KernelContext& ctx, const Tensor& dy,
                     const std::vector<int64_t>& expected) {
  if (dy.dims() != expected) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " does not match the forward's ",
                                  "output ", DimsString(expected)));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Convolution.
// ---------------------------------------------------------------------------------------------

absl::Status ConvGradInputKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& dy = ctx.input(0);
  const Tensor& w = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, ReadInputShape(ctx, dy));
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x_dims, &w.dims(), WindowOp::kConv));
  const int64_t group = ctx.attr_int("group", 1);
  const int64_t c = x_dims[1];
  const int64_t m = w.dim(0);
  if (group < 1 || c % group != 0 || m % group != 0 || w.dim(1) * group != c) {
    return ctx.Error(absl::StrCat("input_shape ", DimsString(x_dims), " and W ",
                                  DimsString(w.dims()), " do not agree with group ", group));
  }
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WindowDims(x_dims[0], m, g)));
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  if (dx.num_elements() == 0 || dy.num_elements() == 0) return absl::OkStatus();
  DispatchFloat({&dy, &w}, dx, [&]<typename T>(const std::vector<const T*>& in, T* out) {
    conv_pool::ConvTransposeCompute(in[0], in[1], static_cast<const T*>(nullptr), out, x_dims[0], m,
                                    c, group, g);
  });
  return absl::OkStatus();
}

// The number of partial dW sums: a function of the shapes only (so results never depend on the
// thread count), at most kGemmThreadCap, one per image at most, and their memory bounded.
int64_t FilterGradChunks(int64_t batch, int64_t weight_bytes) {
  constexpr int64_t kPartialBudgetBytes = int64_t{64} << 20;
  const int64_t by_memory = 1 + kPartialBudgetBytes / std::max<int64_t>(1, weight_bytes);
  return std::max<int64_t>(1, std::min({batch, int64_t{kGemmThreadCap}, by_memory}));
}

template <typename T>
void ConvGradFilterCompute(const T* dy, const T* x, T* dw, int64_t batch, int64_t in_channels,
                           int64_t out_channels, int64_t group, const Geometry& g) {
  const int64_t cg = in_channels / group;
  const int64_t mg = out_channels / group;
  const int64_t ksize = g.kernel_size();
  const int64_t isize = g.image_size();
  const int64_t psize = g.positions_size();
  const int64_t kdim = cg * ksize;
  const int64_t wsize = out_channels * kdim;
  const bool pointwise = g.IsPointwise();
  const int64_t chunks = FilterGradChunks(batch, wsize * static_cast<int64_t>(sizeof(T)));
  std::vector<T> partials(static_cast<size_t>((chunks - 1) * wsize));
  const double macs_per_chunk = static_cast<double>(out_channels) * psize * kdim * batch / chunks;
  ParallelFor(chunks, macs_per_chunk, [&](int64_t c0, int64_t c1) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(kdim * psize));
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      T* acc = chunk == 0 ? dw : partials.data() + (chunk - 1) * wsize;
      const int64_t n0 = batch * chunk / chunks;
      const int64_t n1 = batch * (chunk + 1) / chunks;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t gi = 0; gi < group; ++gi) {
          const T* xg = x + (n * in_channels + gi * cg) * isize;
          const T* cols = xg;
          if (!pointwise) {
            conv_pool::Im2Col(xg, cg, g, col.data());
            cols = col.data();
          }
          // acc_g (mg x kdim) (+)= dY_g (mg x P) · colsᵀ (P x kdim)
          Gemm(false, true, mg, kdim, psize, T(1), dy + (n * out_channels + gi * mg) * psize, psize,
               cols, psize, n == n0 ? T(0) : T(1), acc + gi * mg * kdim, kdim);
        }
      }
    }
  });
  // Partials in chunk order; each element summed independently, so split over threads freely.
  if (chunks > 1) {
    ParallelFor(wsize, static_cast<double>(chunks), [&](int64_t e0, int64_t e1) {
      for (int64_t chunk = 1; chunk < chunks; ++chunk) {
        const T* __restrict p = partials.data() + (chunk - 1) * wsize;
        T* __restrict out = dw;
        for (int64_t e = e0; e < e1; ++e) out[e] += p[e];
      }
    });
  }
}

absl::Status ConvGradFilterKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (ctx.attr_ints("kernel_shape").empty()) {
    return ctx.Error("attribute 'kernel_shape' is required");
  }
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), nullptr, WindowOp::kConv));
  const int64_t group = ctx.attr_int("group", 1);
  const int64_t c = x.dim(1);
  if (dy.rank() != x.rank()) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " must have the rank of X ",
                                  DimsString(x.dims())));
  }
  const int64_t m = dy.dim(1);
  if (group < 1 || c % group != 0 || m % group != 0) {
    return ctx.Error(absl::StrCat("X ", DimsString(x.dims()), " and dY ", DimsString(dy.dims()),
                                  ": channels not divisible by group ", group));
  }
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WindowDims(x.dim(0), m, g)));
  std::vector<int64_t> w_dims = {m, c / group};
  w_dims.insert(w_dims.end(), g.kernel.begin(), g.kernel.end());
  Tensor& dw = ctx.AllocateOutput(0, dy.dtype(), w_dims);
  if (dw.num_elements() == 0 || x.dim(0) == 0) return absl::OkStatus();
  DispatchFloat({&dy, &x}, dw, [&]<typename T>(const std::vector<const T*>& in, T* out) {
    ConvGradFilterCompute(in[0], in[1], out, x.dim(0), c, m, group, g);
  });
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Pooling.
// ---------------------------------------------------------------------------------------------

// Runs plane(p) for p in [0, planes) in parallel; `cost` is the work per plane.
void ForEachPlane(int64_t planes, double cost, const std::function<void(int64_t)>& plane) {
  ParallelFor(planes, cost, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) plane(p);
  });
}

template <typename T>
void MaxPoolGradCompute(const T* dy, const T* x, T* dx, int64_t planes, const Geometry& g) {
  const PoolWindows windows(g);
  const std::unique_ptr<conv_pool::MaxPool2D> pool2d =
      conv_pool::MaxPool2D::Supports(g) ? std::make_unique<conv_pool::MaxPool2D>(g) : nullptr;
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  ParallelFor(planes, static_cast<double>(osize) * g.kernel_size(), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* src = x + p * isize;
      const T* grad = dy + p * osize;
      T* dst = dx + p * isize;
      if (pool2d != nullptr) {
        pool2d->Plane<T>(src, [&](int64_t o, int64_t index) {
          if (index >= 0) dst[index] += grad[o];
        });
        continue;
      }
      windows.ForEach([&](int64_t o, const std::vector<int64_t>&, auto&& taps) {
        ArgMax<T> m;
        taps([&](int64_t row, int64_t) { m.Add(src[row], row); });
        if (m.index >= 0) dst[m.index] += grad[o];
      });
    }
  });
}

absl::Status MaxPoolGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), nullptr, WindowOp::kPool));
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WindowDims(x.dim(0), x.dim(1), g)));
  Tensor& dx = ctx.AllocateOutput(0, x.dtype(), x.dims());  // zero-filled
  if (dx.num_elements() == 0) return absl::OkStatus();
  const bool relu_mask = ctx.attr_int("relu_mask", 0) != 0;
  DispatchFloat({&dy, &x}, dx, [&]<typename T>(const std::vector<const T*>& in, T* out) {
    MaxPoolGradCompute(in[0], in[1], out, x.dim(0) * x.dim(1), g);
    // relu_mask (fuse-maxpool-relu-grad): also the gradient of the Relu that produced X,
    // ReluGrad's Select(x > 0, dx, 0).
    if (relu_mask) {
      for (int64_t i = 0; i < dx.num_elements(); ++i) {
        if (!(ir::ToDouble(in[1][i]) > 0)) out[i] = ir::FromDouble<T>(0.0);
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
void AveragePoolGradCompute(const T* dy, T* dx, int64_t planes, const Geometry& g,
                            bool count_include_pad) {
  const PoolWindows windows(g);
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  // 1 / divisor per output position, shared by every plane.
  std::vector<T> inv(static_cast<size_t>(osize), T(0));
  windows.ForEach([&](int64_t o, const std::vector<int64_t>& pos, auto&& taps) {
    int64_t count = 0;
    taps([&](int64_t, int64_t) { ++count; });
    if (count == 0) return;  // the window is all padding: the forward's NaN has no gradient
    if (count_include_pad) count = windows.PaddedCount(pos);
    inv[o] = T(1) / static_cast<T>(count);
  });
  ForEachPlane(planes, static_cast<double>(osize) * g.kernel_size(), [&](int64_t p) {
    const T* grad = dy + p * osize;
    T* dst = dx + p * isize;
    if (g.nd == 2) {
      const int64_t width = g.image[1];
      const int64_t row_step = g.dilation[0] * width;
      const int64_t col_step = g.dilation[1];
      int64_t o = 0;
      for (int64_t oh = 0; oh < g.positions[0]; ++oh) {
        const PoolWindows::Taps& tr = windows.AxisTaps(0, oh);
        for (int64_t ow = 0; ow < g.positions[1]; ++ow, ++o) {
          const PoolWindows::Taps& tc = windows.AxisTaps(1, ow);
          const T v = grad[o] * inv[o];
          T* base = dst + tr.first * width + tc.first;
          for (int64_t r = 0; r < tr.count; ++r) {
            T* line = base + r * row_step;
            for (int64_t c = 0; c < tc.count; ++c) line[c * col_step] += v;
          }
        }
      }
      return;
    }
    windows.ForEach([&](int64_t o, const std::vector<int64_t>&, auto&& taps) {
      const T v = grad[o] * inv[o];
      taps([&](int64_t row, int64_t) { dst[row] += v; });
    });
  });
}

absl::Status AveragePoolGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& dy = ctx.input(0);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, ReadInputShape(ctx, dy));
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x_dims, nullptr, WindowOp::kPool));
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WindowDims(x_dims[0], x_dims[1], g)));
  const bool count_include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  if (dx.num_elements() == 0) return absl::OkStatus();
  DispatchFloat({&dy}, dx, [&]<typename T>(const std::vector<const T*>& in, T* out) {
    AveragePoolGradCompute(in[0], out, x_dims[0] * x_dims[1], g, count_include_pad);
  });
  return absl::OkStatus();
}

template <typename T>
void LpPoolGradCompute(const T* dy, const T* x, const T* y, T* dx, int64_t planes,
                       const Geometry& g, int64_t p_norm) {
  const PoolWindows windows(g);
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  const double p = static_cast<double>(p_norm);
  ForEachPlane(planes, static_cast<double>(osize) * g.kernel_size() * 4, [&](int64_t plane) {
    const T* src = x + plane * isize;
    const T* grad = dy + plane * osize;
    const T* out = y + plane * osize;
    T* dst = dx + plane * isize;
    windows.ForEach([&](int64_t o, const std::vector<int64_t>&, auto&& taps) {
      const double yo = static_cast<double>(out[o]);
      if (!(yo > 0.0)) return;  // y = 0: every tap is 0, a subgradient of 0
      // dy / y^(p-1), then per tap · sign(x) |x|^(p-1)
      const double scale = static_cast<double>(grad[o]) / (p == 2.0 ? yo : std::pow(yo, p - 1.0));
      taps([&](int64_t row, int64_t) {
        const double v = static_cast<double>(src[row]);
        const double d = p == 1.0   ? (v > 0   ? 1.0
                                       : v < 0 ? -1.0
                                               : 0.0)
                         : p == 2.0 ? v
                                    : std::copysign(std::pow(std::fabs(v), p - 1.0), v);
        dst[row] += static_cast<T>(scale * d);
      });
    });
  });
}

absl::Status LpPoolGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const int64_t p = ctx.attr_int("p", 2);
  if (p < 1) return ctx.Error(absl::StrCat("attribute 'p' = ", p, " must be >= 1"));
  OTTR_ASSIGN_OR_RETURN(Geometry g,
                        conv_pool::ResolveGeometry(ctx, x.dims(), nullptr, WindowOp::kPool));
  const std::vector<int64_t> y_dims = WindowDims(x.dim(0), x.dim(1), g);
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, y_dims));
  if (y.dims() != y_dims) {
    return ctx.Error(absl::StrCat("Y ", DimsString(y.dims()), " does not match the forward's ",
                                  "output ", DimsString(y_dims)));
  }
  Tensor& dx = ctx.AllocateOutput(0, x.dtype(), x.dims());
  if (dx.num_elements() == 0) return absl::OkStatus();
  DispatchFloat({&dy, &x, &y}, dx, [&]<typename T>(const std::vector<const T*>& in, T* out) {
    LpPoolGradCompute(in[0], in[1], in[2], out, x.dim(0) * x.dim(1), g, p);
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterConvPoolGradKernels(KernelRegistry& r) {
  const std::string ottr(ir::kOttrDomain);
  r.Register(ottr, "ConvGradInput", WithLayout(ConvGradInputKernel));
  r.Register(ottr, "ConvGradFilter", WithLayout(ConvGradFilterKernel));
  r.Register(ottr, "MaxPoolGrad", WithLayout(MaxPoolGradKernel));
  r.Register(ottr, "AveragePoolGrad", AveragePoolGradKernel);
  r.Register(ottr, "LpPoolGrad", LpPoolGradKernel);
}

}  // namespace ottr::runtime::cpu
