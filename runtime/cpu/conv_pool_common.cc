#include "runtime/cpu/conv_pool_common.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/conv_pool_geometry.h"

namespace ottr::runtime::cpu::conv_pool {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

absl::StatusOr<Geometry> ResolveGeometry(const KernelContext& ctx,
                                         const std::vector<int64_t>& x_dims,
                                         const std::vector<int64_t>* w_dims, WindowOp op) {
  if (x_dims.size() < 3) {
    return ctx.Error(absl::StrCat("input X ", DimsString(x_dims),
                                  " must have rank >= 3 (N x C x D1 x ... x Dn)"));
  }
  const int64_t nd = static_cast<int64_t>(x_dims.size()) - 2;
  auto attrs =
      ir::ReadWindowAttrs(ctx.node(), nd, op == WindowOp::kPool, op == WindowOp::kConvTranspose);
  if (!attrs.ok()) return ctx.Error(attrs.status().message());
  if (w_dims != nullptr) {
    if (w_dims->size() != x_dims.size()) {
      return ctx.Error(
          absl::StrCat("W ", DimsString(*w_dims), " must have the rank of X ", DimsString(x_dims)));
    }
    const std::vector<int64_t> ws(w_dims->begin() + 2, w_dims->end());
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
    const int64_t in = x_dims[2 + i];
    auto axis = op == WindowOp::kConvTranspose ? ir::ResolveConvTransposeAxis(*attrs, i, in)
                                               : ir::ResolveWindowAxis(*attrs, i, in);
    if (!axis.ok()) {
      return ctx.Error(absl::StrCat("X ", DimsString(x_dims), ": ", axis.status().message()));
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

PoolWindows::PoolWindows(const Geometry& g)
    : g_(g), inside_(g.nd), padded_count_(g.nd), taps_(g.nd) {
  for (int64_t d = 0; d < g.nd; ++d) {
    inside_[d].resize(g.positions[d]);
    padded_count_[d].resize(g.positions[d]);
    taps_[d].resize(g.positions[d]);
    for (int64_t o = 0; o < g.positions[d]; ++o) {
      for (int64_t j = 0; j < g.kernel[d]; ++j) {
        const int64_t i = o * g.stride[d] - g.pad_begin[d] + j * g.dilation[d];
        if (i >= 0 && i < g.image[d]) inside_[d][o].push_back(i);
        if (i < g.image[d] + g.pad_end[d]) ++padded_count_[d][o];
      }
      const std::vector<int64_t>& in = inside_[d][o];
      if (!in.empty()) taps_[d][o] = {in.front(), static_cast<int64_t>(in.size())};
    }
  }
}

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

}  // namespace ottr::runtime::cpu::conv_pool
