// Window geometry of a sliding-window op resolved for one input, and the im2col / col2im pair the
// convolution kernels and their gradients are built on.
//
// A window at position o (per spatial axis) covers the image positions
//   i = o * stride - pad_begin + j * dilation,   j < kernel,
// and taps outside [0, image) read zeros. For Conv, its gradients and the pools the image is the
// input and the positions are the output; for ConvTranspose the image is the output and the
// positions the input (ConvTranspose is Conv's adjoint).
//
//   Im2Col: col[(c * K + k) * P + p] = image[c][i(p, k)]        (0 where i is outside the image)
//   Col2Im: image[c][i(p, k)] += col[(c * K + k) * P + p]       (taps outside are dropped)
// with K the kernel elements (row-major over the kernel axes) and P the positions (row-major).
// Col2Im is the adjoint of Im2Col, so a convolution's input gradient is col2im(Wᵀ · dY).
#ifndef OTTR_RUNTIME_CPU_IM2COL_H_
#define OTTR_RUNTIME_CPU_IM2COL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ottr::runtime::cpu::conv_pool {

inline int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

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
  // A 1x1 window with unit stride and no padding: im2col would copy the image unchanged.
  bool IsPointwise() const {
    if (kernel_size() != 1 || image != positions) return false;
    for (int64_t d = 0; d < nd; ++d) {
      if (stride[d] != 1 || pad_begin[d] != 0) return false;
    }
    return true;
  }
};

namespace internal {

// Decomposes flat kernel index k (row-major over g.kernel) into per-axis offsets.
inline void KernelOffsets(const Geometry& g, int64_t k, std::vector<int64_t>& offs) {
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

// Range [lo, hi) of the n last-axis positions o whose image index base + o * s is in [0, w).
inline void ValidRange(int64_t n, int64_t s, int64_t base, int64_t w, int64_t& lo, int64_t& hi) {
  // base + o * s >= 0  <=>  o >= ceil(-base / s);  base + o * s < w  <=>  o < ceil((w - base) / s).
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  lo = std::clamp<int64_t>(ceil_div(-base, s), 0, n);
  hi = std::clamp<int64_t>(ceil_div(w - base, s), lo, n);
}

// The 1-D/2-D case as (height, width) pairs; a 1-D geometry has height 1.
struct Plane2D {
  int64_t in_h, in_w, out_h, out_w, k_h, k_w, s_h, s_w, d_h, d_w, p_h, p_w;
};

inline Plane2D AsPlane2D(const Geometry& g) {
  if (g.nd == 1) {
    return {1, g.image[0],  1, g.positions[0], 1, g.kernel[0],
            1, g.stride[0], 1, g.dilation[0],  0, g.pad_begin[0]};
  }
  return {g.image[0],  g.image[1],  g.positions[0], g.positions[1], g.kernel[0],    g.kernel[1],
          g.stride[0], g.stride[1], g.dilation[0],  g.dilation[1],  g.pad_begin[0], g.pad_begin[1]};
}

// Im2Col for 1-D and 2-D geometries: direct loops (no per-row callbacks), and for unit stride a
// plain copy loop the compiler vectorises (rows are short: a call to memcpy costs more).
template <typename T>
void Im2Col2D(const T* image, int64_t channels, const Plane2D& q, T* col) {
  T* dst = col;
  for (int64_t c = 0; c < channels; ++c) {
    const T* plane = image + c * q.in_h * q.in_w;
    for (int64_t i = 0; i < q.k_h; ++i) {
      for (int64_t j = 0; j < q.k_w; ++j) {
        const int64_t base = j * q.d_w - q.p_w;  // column of output column 0
        int64_t lo, hi;
        ValidRange(q.out_w, q.s_w, base, q.in_w, lo, hi);
        for (int64_t oh = 0; oh < q.out_h; ++oh, dst += q.out_w) {
          const int64_t ih = oh * q.s_h - q.p_h + i * q.d_h;
          if (ih < 0 || ih >= q.in_h) {
            std::fill(dst, dst + q.out_w, T(0));
            continue;
          }
          const T* __restrict src = plane + ih * q.in_w + base;
          T* __restrict out = dst;
          for (int64_t o = 0; o < lo; ++o) out[o] = T(0);
          if (q.s_w == 1) {
            for (int64_t o = lo; o < hi; ++o) out[o] = src[o];
          } else {
            for (int64_t o = lo; o < hi; ++o) out[o] = src[o * q.s_w];
          }
          for (int64_t o = hi; o < q.out_w; ++o) out[o] = T(0);
        }
      }
    }
  }
}

// Col2Im for 1-D and 2-D geometries (see Im2Col2D).
template <typename T>
void Col2Im2D(const T* col, int64_t channels, const Plane2D& q, T* image) {
  const T* from = col;
  for (int64_t c = 0; c < channels; ++c) {
    T* plane = image + c * q.in_h * q.in_w;
    for (int64_t i = 0; i < q.k_h; ++i) {
      for (int64_t j = 0; j < q.k_w; ++j) {
        const int64_t base = j * q.d_w - q.p_w;
        int64_t lo, hi;
        ValidRange(q.out_w, q.s_w, base, q.in_w, lo, hi);
        for (int64_t oh = 0; oh < q.out_h; ++oh, from += q.out_w) {
          const int64_t ih = oh * q.s_h - q.p_h + i * q.d_h;
          if (ih < 0 || ih >= q.in_h) continue;
          T* __restrict dst = plane + ih * q.in_w + base;
          const T* __restrict src = from;
          if (q.s_w == 1) {
            for (int64_t o = lo; o < hi; ++o) dst[o] += src[o];
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o * q.s_w] += src[o];
          }
        }
      }
    }
  }
}

// Any number of spatial axes, through ForEachPositionRow.
template <typename T>
void Im2ColND(const T* image, int64_t channels, const Geometry& g, T* col) {
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
      internal::KernelOffsets(g, k, koffs);
      const int64_t base = koffs[last] * g.dilation[last] - g.pad_begin[last];
      int64_t lo, hi;
      internal::ValidRange(width, s, base, g.image[last], lo, hi);
      internal::ForEachPositionRow(g, koffs, [&](int64_t row, bool valid) {
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

template <typename T>
void Col2ImND(const T* col, int64_t channels, const Geometry& g, T* image) {
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
      internal::KernelOffsets(g, k, koffs);
      const int64_t base = koffs[last] * g.dilation[last] - g.pad_begin[last];
      int64_t lo, hi;
      internal::ValidRange(width, s, base, g.image[last], lo, hi);
      internal::ForEachPositionRow(g, koffs, [&](int64_t row, bool valid) {
        if (valid) {
          T* __restrict dst = dst_image + row + base;
          const T* __restrict from = src;
          if (s == 1) {
            for (int64_t o = lo; o < hi; ++o) dst[o] += from[o];  // contiguous: vectorised
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o * s] += from[o];
          }
        }
        src += width;
      });
    }
  }
}

}  // namespace internal

// col[(c * K + k) * P + p] = image[c][position p, kernel offset k], 0 outside the image.
template <typename T>
void Im2Col(const T* image, int64_t channels, const Geometry& g, T* col) {
  if (g.nd <= 2) {
    internal::Im2Col2D(image, channels, internal::AsPlane2D(g), col);
  } else {
    internal::Im2ColND(image, channels, g, col);
  }
}

// image[c][position p, kernel offset k] += col[(c * K + k) * P + p] (the adjoint of Im2Col). The
// caller initialises `image` (zeros, or a bias).
template <typename T>
void Col2Im(const T* col, int64_t channels, const Geometry& g, T* image) {
  if (g.nd <= 2) {
    internal::Col2Im2D(col, channels, internal::AsPlane2D(g), image);
  } else {
    internal::Col2ImND(col, channels, g, image);
  }
}

}  // namespace ottr::runtime::cpu::conv_pool

#endif  // OTTR_RUNTIME_CPU_IM2COL_H_
