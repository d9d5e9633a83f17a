// CPU kernels for Conv, ConvTranspose and the pooling ops, for any number of spatial axes.
//
// Conv is im2col + GEMM: per image and group, the receptive fields are unrolled into a matrix
//   col[(c * K + k) , o] = x[c, o * stride - pad + k * dilation]   (0 outside the input)
// of (C/group * K) rows by O output positions (K = kernel elements), and Y_g = W_g * col, with W_g
// the group's M/group x (C/group * K) weights, lands directly in NCHW order. ConvTranspose is the
// adjoint: col = W_g^T * X_g, then col2im scatters and adds col back into the output image.
// Float16 and bfloat16 are computed in float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/status.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// The spatial relation between an image and the positions of a sliding window over it: window
// position o (per axis) covers image positions o * stride - pad + j * dilation, j < kernel.
// For Conv and the pools the image is the input and the positions the output; for ConvTranspose
// the image is the output and the positions the input.
struct Geometry {
  int64_t nd = 0;
  std::vector<int64_t> image;
  std::vector<int64_t> positions;
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;
  std::vector<int64_t> dilation;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;

  int64_t image_size() const { return Product(image); }
  int64_t positions_size() const { return Product(positions); }
  int64_t kernel_size() const { return Product(kernel); }
};

enum class WindowOp { kConv, kConvTranspose, kPool };

// Reads the node's window attributes and resolves every axis for input x (and weight w for the
// convolutions) with the same functions as shape inference.
absl::StatusOr<Geometry> ResolveGeometry(const KernelContext& ctx, const Tensor& x, const Tensor* w,
                                         WindowOp op) {
  if (x.rank() < 3) {
    return ctx.Error(absl::StrCat("input X ", DimsString(x.dims()),
                                  " must have rank >= 3 (N x C x D1 x ... x Dn)"));
  }
  const int64_t nd = x.rank() - 2;
  auto attrs =
      ir::ReadWindowAttrs(ctx.node(), nd, op == WindowOp::kPool, op == WindowOp::kConvTranspose);
  if (!attrs.ok()) return ctx.Error(attrs.status().message());
  if (w != nullptr) {
    if (w->rank() != x.rank()) {
      return ctx.Error(absl::StrCat("W ", DimsString(w->dims()), " must have the rank of X ",
                                    DimsString(x.dims())));
    }
    const std::vector<int64_t> ws(w->dims().begin() + 2, w->dims().end());
    if (absl::Status s = ir::SetKernelFromWeights(*attrs, ws); !s.ok()) {
      return ctx.Error(s.message());
    }
  }
  Geometry g;
  g.nd = nd;
  g.kernel = attrs->kernel;
  g.stride = attrs->strides;
  g.dilation = attrs->dilations;
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t in = x.dim(2 + i);
    auto axis = op == WindowOp::kConvTranspose ? ir::ResolveConvTransposeAxis(*attrs, i, in)
                                               : ir::ResolveWindowAxis(*attrs, i, in);
    if (!axis.ok()) {
      return ctx.Error(absl::StrCat("X ", DimsString(x.dims()), ": ", axis.status().message()));
    }
    g.pad_begin.push_back(axis->pad_begin);
    g.pad_end.push_back(axis->pad_end);
    if (op == WindowOp::kConvTranspose) {
      g.image.push_back(axis->out);
      g.positions.push_back(in);
    } else {
      g.image.push_back(in);
      g.positions.push_back(axis->out);
    }
  }
  return g;
}

// Decomposes flat kernel index k (row-major over g.kernel) into per-axis offsets.
void KernelOffsets(const Geometry& g, int64_t k, std::vector<int64_t>& offs) {
  for (int64_t d = g.nd - 1; d >= 0; --d) {
    offs[d] = k % g.kernel[d];
    k /= g.kernel[d];
  }
}

// Visits the rows of window positions for kernel offsets `koffs`: for each combination of the
// leading nd-1 position coordinates, calls row(image_row, valid) where image_row is the flat
// image offset of the row's leading coordinates (meaningful only when valid, i.e. when they all
// fall inside the image). The last axis is left to the caller, which maps position ox to image
// index ox * stride - pad + koff * dilation.
template <typename RowFn>
void ForEachPositionRow(const Geometry& g, const std::vector<int64_t>& koffs, RowFn&& row) {
  const int64_t lead = g.nd - 1;
  int64_t rows = 1;
  for (int64_t d = 0; d < lead; ++d) rows *= g.positions[d];
  std::vector<int64_t> pos(lead, 0);
  for (int64_t r = 0; r < rows; ++r) {
    bool valid = true;
    int64_t offset = 0;
    for (int64_t d = 0; d < lead; ++d) {
      const int64_t ip = pos[d] * g.stride[d] - g.pad_begin[d] + koffs[d] * g.dilation[d];
      if (ip < 0 || ip >= g.image[d]) valid = false;
      offset = offset * g.image[d] + ip;
    }
    row(offset * g.image[lead], valid);
    for (int64_t d = lead - 1; d >= 0; --d) {
      if (++pos[d] < g.positions[d]) break;
      pos[d] = 0;
    }
  }
}

// Range [lo, hi) of last-axis positions whose image index o * s - p + koff * dil is in [0, w).
void ValidRange(int64_t n, int64_t s, int64_t base, int64_t w, int64_t& lo, int64_t& hi) {
  // base + o * s >= 0  <=>  o >= ceil(-base / s);  base + o * s < w  <=>  o < ceil((w - base) / s).
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  lo = std::clamp<int64_t>(ceil_div(-base, s), 0, n);
  hi = std::clamp<int64_t>(ceil_div(w - base, s), lo, n);
}

// col[(c * K + k) * P + p] = image[c][position p, kernel offset k], 0 outside the image.
template <typename T>
void Im2Col(const T* image, int64_t channels, const Geometry& g, T* col) {
  const int64_t isize = g.image_size();
  const int64_t ksize = g.kernel_size();
  const int64_t last = g.nd - 1;
  const int64_t width = g.positions[last];
  const int64_t s = g.stride[last];
  std::vector<int64_t> koffs(g.nd);
  T* dst = col;
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = image + c * isize;
    for (int64_t k = 0; k < ksize; ++k) {
      KernelOffsets(g, k, koffs);
      const int64_t base = koffs[last] * g.dilation[last] - g.pad_begin[last];
      int64_t lo, hi;
      ValidRange(width, s, base, g.image[last], lo, hi);
      ForEachPositionRow(g, koffs, [&](int64_t row, bool valid) {
        if (!valid) {
          std::fill(dst, dst + width, T(0));
        } else {
          const int64_t start = row + base;  // image index of position 0 (maybe outside)
          std::fill(dst, dst + lo, T(0));
          if (s == 1) {
            if (hi > lo) std::memcpy(dst + lo, src + start + lo, (hi - lo) * sizeof(T));
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o] = src[start + o * s];
          }
          std::fill(dst + hi, dst + width, T(0));
        }
        dst += width;
      });
    }
  }
}

// image[c][position p, kernel offset k] += col[(c * K + k) * P + p] (the adjoint of Im2Col).
template <typename T>
void Col2Im(const T* col, int64_t channels, const Geometry& g, T* image) {
  const int64_t isize = g.image_size();
  const int64_t ksize = g.kernel_size();
  const int64_t last = g.nd - 1;
  const int64_t width = g.positions[last];
  const int64_t s = g.stride[last];
  std::vector<int64_t> koffs(g.nd);
  const T* src = col;
  for (int64_t c = 0; c < channels; ++c) {
    T* dst_image = image + c * isize;
    for (int64_t k = 0; k < ksize; ++k) {
      KernelOffsets(g, k, koffs);
      const int64_t base = koffs[last] * g.dilation[last] - g.pad_begin[last];
      int64_t lo, hi;
      ValidRange(width, s, base, g.image[last], lo, hi);
      ForEachPositionRow(g, koffs, [&](int64_t row, bool valid) {
        if (valid) {
          const int64_t start = row + base;
          for (int64_t o = lo; o < hi; ++o) dst_image[start + o * s] += src[o];
        }
        src += width;
      });
    }
  }
}

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
  bool pointwise = ksize == 1 && g.image == g.positions;
  for (int64_t d = 0; d < g.nd; ++d) {
    pointwise = pointwise && g.stride[d] == 1 && g.pad_begin[d] == 0;
  }
  // Images run in parallel; a single image instead spreads its GEMMs over the threads.
  const double macs_per_image = static_cast<double>(out_channels) * osize * kdim;
  ParallelFor(batch, macs_per_image, [&](int64_t n0, int64_t n1) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(kdim * osize));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < group; ++gi) {
        const T* xg = x + (n * in_channels + gi * cg) * isize;
        const T* cols = xg;
        if (!pointwise) {
          Im2Col(xg, cg, g, col.data());
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

// ConvTranspose: per image and group, col = W_g^T X_g ((M/group * K) x P), then col2im into Y.
template <typename T>
void ConvTransposeCompute(const T* x, const T* w, const T* bias, T* y, int64_t batch,
                          int64_t in_channels, int64_t out_channels, int64_t group,
                          const Geometry& g) {
  const int64_t cg = in_channels / group;
  const int64_t mg = out_channels / group;
  const int64_t ksize = g.kernel_size();
  const int64_t osize = g.image_size();      // the output image
  const int64_t psize = g.positions_size();  // the input positions
  const int64_t kdim = mg * ksize;
  const double macs_per_image = static_cast<double>(in_channels) * psize * kdim;
  ParallelFor(batch, macs_per_image, [&](int64_t n0, int64_t n1) {
    std::vector<T> col(static_cast<size_t>(kdim * psize));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < group; ++gi) {
        const T* xg = x + (n * in_channels + gi * cg) * psize;
        T* yg = y + (n * out_channels + gi * mg) * osize;
        Gemm(true, false, kdim, psize, cg, T(1), w + gi * cg * kdim, kdim, xg, psize, T(0),
             col.data(), psize);
        if (bias != nullptr) {
          for (int64_t m = 0; m < mg; ++m) {
            std::fill(yg + m * osize, yg + (m + 1) * osize, bias[gi * mg + m]);
          }
        } else {
          std::fill(yg, yg + mg * osize, T(0));
        }
        Col2Im(col.data(), mg, g, yg);
      }
    }
  });
}

// Widens a float16/bfloat16/float tensor to float (a copy), or narrows float back.
std::vector<float> ToFloatVector(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  ir::VisitDType(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16> ||
                  std::is_same_v<T, float>) {
      const T* p = t.data<T>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(ir::ToDouble(p[i]));
    }
  });
  return out;
}
void FromFloatVector(const std::vector<float>& v, Tensor& t) {
  ir::VisitDType(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>) {
      T* p = t.data<T>();
      for (size_t i = 0; i < v.size(); ++i) p[i] = ir::FromDouble<T>(v[i]);
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
      const std::vector<float> xf = ToFloatVector(x);
      const std::vector<float> wf = ToFloatVector(w);
      const std::vector<float> bf = b ? ToFloatVector(*b) : std::vector<float>();
      std::vector<float> yf(static_cast<size_t>(y.num_elements()));
      compute(xf.data(), wf.data(), b ? bf.data() : nullptr, yf.data());
      FromFloatVector(yf, y);
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
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, &w, WindowOp::kConv));
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
  return absl::OkStatus();
}

absl::Status ConvTransposeKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckConvDTypes(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, &w, WindowOp::kConvTranspose));
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
                 ConvTransposeCompute(xp, wp, bp, yp, x.dim(0), c, m, group, g);
               });
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Pooling.
// ---------------------------------------------------------------------------------------------

// The windows of a pool, shared by all planes: per axis and output coordinate, the image indices
// the window covers inside the image, and the number of its taps inside the padded image
// ([-pad_begin, in + pad_end)), the divisor of AveragePool with count_include_pad.
class PoolWindows {
 public:
  explicit PoolWindows(const Geometry& g) : g_(g), inside_(g.nd), padded_count_(g.nd) {
    for (int64_t d = 0; d < g.nd; ++d) {
      inside_[d].resize(g.positions[d]);
      padded_count_[d].resize(g.positions[d]);
      for (int64_t o = 0; o < g.positions[d]; ++o) {
        for (int64_t j = 0; j < g.kernel[d]; ++j) {
          const int64_t i = o * g.stride[d] - g.pad_begin[d] + j * g.dilation[d];
          if (i >= 0 && i < g.image[d]) inside_[d][o].push_back(i);
          if (i < g.image[d] + g.pad_end[d]) ++padded_count_[d][o];
        }
      }
    }
  }

  // Calls window(o, taps) for every output position o in row-major order, where taps(fn) calls
  // fn(offset, colmajor) for each element of that window inside the image: its row-major offset
  // in the plane and its column-major spatial index (MaxPool's storage_order = 1).
  template <typename WindowFn>
  void ForEach(WindowFn&& window) const {
    const int64_t nd = g_.nd;
    std::vector<int64_t> pos(nd, 0);
    std::vector<size_t> idx(nd, 0);
    const int64_t osize = g_.positions_size();
    for (int64_t o = 0; o < osize; ++o) {
      auto taps = [&](auto&& fn) {
        for (int64_t d = 0; d < nd; ++d) {
          if (inside_[d][pos[d]].empty()) return;
          idx[d] = 0;
        }
        for (;;) {
          int64_t row = 0;
          int64_t col = 0;
          int64_t col_stride = 1;
          for (int64_t d = 0; d < nd; ++d) {
            const int64_t i = inside_[d][pos[d]][idx[d]];
            row = row * g_.image[d] + i;
            col += i * col_stride;
            col_stride *= g_.image[d];
          }
          fn(row, col);
          int64_t d = nd - 1;
          for (; d >= 0; --d) {
            if (++idx[d] < inside_[d][pos[d]].size()) break;
            idx[d] = 0;
          }
          if (d < 0) return;
        }
      };
      window(o, pos, taps);
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++pos[d] < g_.positions[d]) break;
        pos[d] = 0;
      }
    }
  }

  // Taps of output position `pos` inside the padded image.
  int64_t PaddedCount(const std::vector<int64_t>& pos) const {
    int64_t count = 1;
    for (int64_t d = 0; d < g_.nd; ++d) count *= padded_count_[d][pos[d]];
    return count;
  }

 private:
  const Geometry& g_;
  std::vector<std::vector<std::vector<int64_t>>> inside_;  // [axis][o] -> image indices
  std::vector<std::vector<int64_t>> padded_count_;         // [axis][o]
};

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
  const int64_t isize = g.image_size();
  const int64_t osize = g.positions_size();
  ParallelFor(planes, static_cast<double>(osize) * g.kernel_size(), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* src = x + p * isize;
      T* dst = y + p * osize;
      windows.ForEach([&](int64_t o, const std::vector<int64_t>&, auto&& taps) {
        Acc best = -std::numeric_limits<Acc>::infinity();
        int64_t best_index = -1;
        taps([&](int64_t row, int64_t col) {
          const Acc v = static_cast<Acc>(ir::ToDouble(src[row]));
          if (best_index < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
            best = v;
            best_index = column_major ? col : row;
          }
        });
        if (best_index >= 0) {
          dst[o] = ir::FromDouble<T>(best);
        } else if constexpr (std::is_integral_v<T>) {  // a window entirely in the padding
          dst[o] = std::numeric_limits<T>::lowest();
        } else {
          dst[o] = ir::FromDouble<T>(-std::numeric_limits<double>::infinity());
        }
        if (indices != nullptr) {
          indices[p * osize + o] = best_index < 0 ? -1 : p * isize + best_index;
        }
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
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
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

template <typename T>
constexpr bool kIsFloatType = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                              std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>;

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
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
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
  r.Register("", "Conv", ConvKernel);
  r.Register("", "ConvTranspose", ConvTransposeKernel);
  r.Register("", "MaxPool", MaxPoolKernel);
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
