// Pieces shared by the forward convolution/pooling kernels (conv_pool_kernels.cc) and their
// gradient kernels (conv_pool_grad_kernels.cc): geometry resolution from a node's attributes, the
// pooling windows, the transposed-convolution compute, and float16/bfloat16 widening.
#ifndef OTTR_RUNTIME_CPU_CONV_POOL_COMMON_H_
#define OTTR_RUNTIME_CPU_CONV_POOL_COMMON_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/im2col.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

// Registers the ottr-domain backward kernels (ConvGradInput, ConvGradFilter, MaxPoolGrad,
// AveragePoolGrad, LpPoolGrad); called by RegisterConvPoolKernels.
void RegisterConvPoolGradKernels(KernelRegistry& r);

namespace conv_pool {

std::string DimsString(const std::vector<int64_t>& d);

enum class WindowOp { kConv, kConvTranspose, kPool };

// Reads the node's window attributes and resolves every spatial axis for an input of dims
// `x_dims` ([N, C, D1, ..., Dn]) and, for the convolutions, a weight of dims `w_dims` (which
// supplies the kernel when kernel_shape is absent), with the same functions as shape inference.
absl::StatusOr<Geometry> ResolveGeometry(const KernelContext& ctx,
                                         const std::vector<int64_t>& x_dims,
                                         const std::vector<int64_t>* w_dims, WindowOp op);

// The windows of a pool, shared by all planes: per axis and output coordinate, the image indices
// the window covers inside the image, and the number of its taps inside the padded image
// ([-pad_begin, in + pad_end)), the divisor of AveragePool with count_include_pad.
class PoolWindows {
 public:
  explicit PoolWindows(const Geometry& g);

  // The taps of output coordinate o on axis d inside the image: image indices
  // first + j * dilation[d], j < count (count 0 when the window lies in the padding).
  struct Taps {
    int64_t first = 0;
    int64_t count = 0;
  };
  const Taps& AxisTaps(int64_t d, int64_t o) const { return taps_[d][o]; }

  // Calls window(o, pos, taps) for every output position o (flat, row-major; pos its
  // coordinates), where taps(fn) calls fn(offset, colmajor) for each element of that window
  // inside the image in row-major order: its row-major offset in the plane and its column-major
  // spatial index (MaxPool's storage_order = 1).
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
  std::vector<std::vector<Taps>> taps_;                    // [axis][o]
};

// MaxPool's choice in one window, compared in Acc: the first maximum, or the first NaN when there
// is one; index -1 while no element has been seen (a window entirely in the padding).
template <typename Acc>
struct ArgMax {
  Acc best = -std::numeric_limits<Acc>::infinity();
  int64_t index = -1;
  void Add(Acc v, int64_t i) {
    if (index < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
      best = v;
      index = i;
    }
  }
};

// T -> Acc without a round trip through double when they are the same type.
template <typename Acc, typename T>
inline Acc LoadAs(T v) {
  if constexpr (std::is_same_v<Acc, T>) {
    return v;
  } else {
    return static_cast<Acc>(ir::ToDouble(v));
  }
}

// MaxPool of one 1-D or 2-D plane (the common case of the forward MaxPool and of MaxPoolGrad):
// calls out(o, index) for each output position o in row-major order with the row-major offset
// in the plane of ArgMax's choice (-1 for a window entirely in the padding). A 1-D plane is a
// 2-D one of height 1.
//
// Windows entirely inside the plane take a branch-free path over precomputed tap offsets that
// tracks only `v > best` (on random data that comparison is a coin flip, and a branch on it would
// be mispredicted half the time); it notes whether a NaN was seen, and such a window, like a
// window that overlaps the padding, is redone by ArgMax itself.
class MaxPool2D {
 public:
  static bool Supports(const Geometry& g) { return g.nd == 1 || g.nd == 2; }

  // Requires Supports(g).
  explicit MaxPool2D(const Geometry& g) : g_(As2D(g)), windows_(g_) {
    for (int64_t r = 0; r < g_.kernel[0]; ++r) {
      for (int64_t c = 0; c < g_.kernel[1]; ++c) {
        tap_offset_.push_back(r * g_.dilation[0] * g_.image[1] + c * g_.dilation[1]);
      }
    }
  }
  MaxPool2D(const MaxPool2D&) = delete;
  MaxPool2D& operator=(const MaxPool2D&) = delete;

  template <typename Acc, typename T, typename OutFn>
  void Plane(const T* src, OutFn&& out) const {
    const int64_t width = g_.image[1];
    const int64_t out_w = g_.positions[1];
    const int64_t taps = static_cast<int64_t>(tap_offset_.size());
    const int64_t* off = tap_offset_.data();
    int64_t o = 0;
    for (int64_t oh = 0; oh < g_.positions[0]; ++oh) {
      const PoolWindows::Taps& tr = windows_.AxisTaps(0, oh);
      const bool full_row = tr.count == g_.kernel[0];
      // Offset of the first tap of window (oh, 0), maybe outside the plane.
      const int64_t row_base = (oh * g_.stride[0] - g_.pad_begin[0]) * width - g_.pad_begin[1];
      for (int64_t ow = 0; ow < out_w; ++ow, ++o) {
        const PoolWindows::Taps& tc = windows_.AxisTaps(1, ow);
        if (full_row && tc.count == g_.kernel[1]) {
          const int64_t base = row_base + ow * g_.stride[1];
          const T* x = src + base;
          Acc best = LoadAs<Acc>(x[off[0]]);
          int64_t chosen = 0;
          bool nan = best != best;
          for (int64_t t = 1; t < taps; ++t) {
            const Acc v = LoadAs<Acc>(x[off[t]]);
            const bool take = v > best;
            best = take ? v : best;
            chosen = take ? t : chosen;
            nan |= v != v;
          }
          if (!nan) {
            out(o, base + off[chosen]);
            continue;
          }
        }
        ArgMax<Acc> m;
        const int64_t first = tr.first * width + tc.first;
        for (int64_t r = 0; r < tr.count; ++r) {
          const int64_t line = first + r * g_.dilation[0] * width;
          for (int64_t c = 0; c < tc.count; ++c) {
            const int64_t at = line + c * g_.dilation[1];
            m.Add(LoadAs<Acc>(src[at]), at);
          }
        }
        out(o, m.index);
      }
    }
  }

 private:
  // A 1-D geometry as a 2-D one of height 1.
  static Geometry As2D(const Geometry& g) {
    if (g.nd == 2) return g;
    Geometry h;
    h.nd = 2;
    h.image = {1, g.image[0]};
    h.positions = {1, g.positions[0]};
    h.kernel = {1, g.kernel[0]};
    h.stride = {1, g.stride[0]};
    h.dilation = {1, g.dilation[0]};
    h.pad_begin = {0, g.pad_begin[0]};
    h.pad_end = {0, g.pad_end[0]};
    return h;
  }

  const Geometry g_;
  const PoolWindows windows_;        // over g_
  std::vector<int64_t> tap_offset_;  // [r * kw + c] -> r * dilation_h * width + c * dilation_w
};

template <typename T>
constexpr bool kIsFloatType = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                              std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>;

// Widens a float16/bfloat16/float tensor to float (a copy); FromFloatVector narrows back into a
// float16/bfloat16 tensor.
std::vector<float> ToFloatVector(const Tensor& t);
void FromFloatVector(const std::vector<float>& v, Tensor& t);

// Scatters x [batch, in_channels, positions] through the windows into y [batch, out_channels,
// image]: per image and group, col = W_gᵀ · X_g ((out_channels/group * K) x P) and
// y_g = bias (or 0) + col2im(col). W is [in_channels, out_channels/group, kernel...]. This is
// ConvTranspose, and also the input gradient of Conv (x = dY, W the Conv's weight, image = the
// Conv's input). Images run in parallel; a single image spreads its GEMM over the threads.
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
  const bool pointwise = g.IsPointwise();
  const double macs_per_image = static_cast<double>(in_channels) * psize * kdim;
  ParallelFor(batch, macs_per_image, [&](int64_t n0, int64_t n1) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(kdim * psize));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < group; ++gi) {
        const T* xg = x + (n * in_channels + gi * cg) * psize;
        T* yg = y + (n * out_channels + gi * mg) * osize;
        if (pointwise) {  // col is the output image itself: y_g = W_gᵀ · X_g (+ bias)
          T beta = T(0);
          if (bias != nullptr) {
            for (int64_t m = 0; m < mg; ++m) {
              std::fill(yg + m * osize, yg + (m + 1) * osize, bias[gi * mg + m]);
            }
            beta = T(1);
          }
          Gemm(true, false, kdim, psize, cg, T(1), w + gi * cg * kdim, kdim, xg, psize, beta, yg,
               psize);
          continue;
        }
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

}  // namespace conv_pool
}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_CONV_POOL_COMMON_H_
