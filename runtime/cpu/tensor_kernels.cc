// CPU kernels of the layout ops: Reshape, Flatten, Squeeze, Unsqueeze, Identity (views of the
// input, no copy), Transpose, Expand, Slice (strided copies), Concat, Split, Tile, Pad, Shape and
// Size. They move elements by byte width, so every element type works. The indexing and
// generator ops are in tensor_index_kernels.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {

void RegisterTensorIndexKernels(KernelRegistry& r);  // tensor_index_kernels.cc

namespace {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

absl::Status SetView(KernelContext& ctx, const Tensor& x, std::vector<int64_t> dims) {
  absl::StatusOr<Tensor> v = x.Reshaped(std::move(dims));
  if (!v.ok()) return ctx.Error(v.status().message());
  ctx.SetOutput(0, *std::move(v));
  return absl::OkStatus();
}

absl::Status ReshapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& shape = ctx.input(1);
  if (shape.rank() != 1) {
    return ctx.Error(absl::StrCat("shape must be 1-D, got ", DimsString(shape.dims())));
  }
  absl::StatusOr<std::vector<int64_t>> dims =
      ir::ResolveReshape(x.dims(), shape.ToInt64Vector(), ctx.attr_int("allowzero", 0) != 0);
  if (!dims.ok()) return ctx.Error(dims.status().message());
  return SetView(ctx, x, *std::move(dims));
}

absl::Status FlattenKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < -x.rank() || axis > x.rank()) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for input ", DimsString(x.dims())));
  }
  if (axis < 0) axis += x.rank();
  return SetView(ctx, x, {DimsProduct(x.dims(), 0, axis), DimsProduct(x.dims(), axis, x.rank())});
}

absl::Status SqueezeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> out;
  if (!ctx.has_input(1) || ctx.input(1).num_elements() == 0) {
    for (int64_t d : x.dims()) {
      if (d != 1) out.push_back(d);
    }
  } else {
    absl::StatusOr<std::vector<int64_t>> axes = ir::WrapAxes(ctx.input(1).ToInt64Vector(), x.rank());
    if (!axes.ok()) return ctx.Error(axes.status().message());
    std::vector<bool> drop(x.rank(), false);
    for (int64_t a : *axes) {
      if (x.dim(a) != 1) {
        return ctx.Error(absl::StrCat("cannot squeeze axis ", a, " of ", DimsString(x.dims()),
                                      ": its size is not 1"));
      }
      drop[a] = true;
    }
    for (int64_t i = 0; i < x.rank(); ++i) {
      if (!drop[i]) out.push_back(x.dim(i));
    }
  }
  return SetView(ctx, x, std::move(out));
}

absl::Status UnsqueezeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> axes_in = ctx.input(1).ToInt64Vector();
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axes_in.size());
  absl::StatusOr<std::vector<int64_t>> axes = ir::WrapAxes(axes_in, out_rank);
  if (!axes.ok()) return ctx.Error(axes.status().message());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) inserted[a] = true;
  std::vector<int64_t> out;
  int64_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : x.dim(k++));
  return SetView(ctx, x, std::move(out));
}

absl::Status IdentityKernel(KernelContext& ctx) {
  ctx.SetOutput(0, ctx.input(0));
  return absl::OkStatus();
}

absl::Status TransposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    return ctx.Error(absl::StrCat("perm ", DimsString(perm), " does not match input ",
                                  DimsString(x.dims())));
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(x.dims());
  std::vector<int64_t> out_dims(rank), strides(rank);
  std::vector<bool> seen(rank, false);
  for (int64_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) {
      return ctx.Error(absl::StrCat("perm ", DimsString(perm), " is not a permutation"));
    }
    seen[perm[i]] = true;
    out_dims[i] = x.dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  StridedCopy(y.raw_data(), x.raw_data(), ir::DTypeSize(x.dtype()), out_dims, strides, 0);
  return absl::OkStatus();
}

absl::Status ExpandKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> shape = ctx.input(1).ToInt64Vector();
  for (int64_t v : shape) {
    if (v < 0) return ctx.Error(absl::StrCat("shape ", DimsString(shape), " has a negative dim"));
  }
  std::optional<std::vector<int64_t>> out = ir::BroadcastDims(x.dims(), shape);
  if (!out) {
    return ctx.Error(absl::StrCat("cannot expand ", DimsString(x.dims()), " to ", DimsString(shape)));
  }
  const int64_t rank = static_cast<int64_t>(out->size());
  const std::vector<int64_t> in_strides = RowMajorStrides(x.dims());
  std::vector<int64_t> strides(rank, 0);
  for (int64_t i = 0; i < x.rank(); ++i) {
    const int64_t o = rank - x.rank() + i;
    strides[o] = x.dim(i) == 1 ? 0 : in_strides[i];
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), *out);
  StridedCopy(y.raw_data(), x.raw_data(), ir::DTypeSize(x.dtype()), *out, strides, 0);
  return absl::OkStatus();
}

// Slice as a strided view of data with dims `x_dims`: the output dims, the per-axis strides into
// the data (negative for negative steps) and the offset of the first element taken. Inputs are
// Slice's (or SliceGrad's) starts, ends, [axes], [steps] at positions 1..4.
struct SliceView {
  std::vector<int64_t> out_dims;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};
absl::StatusOr<SliceView> MakeSliceView(const KernelContext& ctx, const std::vector<int64_t>& x_dims) {
  std::optional<std::vector<int64_t>> axes, steps;
  if (ctx.has_input(3)) axes = ctx.input(3).ToInt64Vector();
  if (ctx.has_input(4)) steps = ctx.input(4).ToInt64Vector();
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  absl::StatusOr<ir::SliceSpec> spec = ir::MakeSliceSpec(
      rank, ctx.input(1).ToInt64Vector(), ctx.input(2).ToInt64Vector(), axes, steps);
  if (!spec.ok()) return ctx.Error(spec.status().message());
  const std::vector<int64_t> in_strides = RowMajorStrides(x_dims);
  SliceView v{x_dims, in_strides, 0};
  for (size_t i = 0; i < spec->axes.size(); ++i) {
    const int64_t a = spec->axes[i];
    const ir::SliceRange r =
        ir::ComputeSliceRange(x_dims[a], spec->starts[i], spec->ends[i], spec->steps[i]);
    v.out_dims[a] = r.count;
    v.strides[a] = in_strides[a] * r.step;
    if (r.count > 0) v.offset += r.start * in_strides[a];
  }
  return v;
}

absl::Status SliceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  OTTR_ASSIGN_OR_RETURN(const SliceView v, MakeSliceView(ctx, x.dims()));
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), v.out_dims);
  StridedCopy(y.raw_data(), x.raw_data(), ir::DTypeSize(x.dtype()), v.out_dims, v.strides, v.offset);
  return absl::OkStatus();
}

// ottr::SliceGrad(dY, starts, ends, [axes], [steps]) {shape}: dX = zeros(shape) with dY written
// into the positions Slice reads. Slice positions are distinct, so plain stores suffice, and any
// element type works.
absl::Status SliceGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const std::vector<int64_t> x_dims = ctx.attr_ints("shape");
  OTTR_ASSIGN_OR_RETURN(const SliceView v, MakeSliceView(ctx, x_dims));
  if (v.out_dims != dy.dims()) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " does not match the slice ",
                                  DimsString(v.out_dims), " of ", DimsString(x_dims)));
  }
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  StridedScatter(dx.raw_data(), dy.raw_data(), ir::DTypeSize(dy.dtype()), v.out_dims, v.strides,
                 v.offset);
  return absl::OkStatus();
}

absl::Status ConcatKernel(KernelContext& ctx) {
  if (ctx.num_inputs() == 0 || !ctx.has_input(0)) return ctx.Error("needs at least one input");
  const Tensor& first = ctx.input(0);
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), first.rank()));
  std::vector<int64_t> out_dims = first.dims();
  out_dims[axis] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
    const Tensor& t = ctx.input(i);
    bool ok = t.dtype() == first.dtype() && t.rank() == first.rank();
    for (int64_t d = 0; ok && d < t.rank(); ++d) ok = d == axis || t.dim(d) == first.dim(d);
    if (!ok) {
      return ctx.Error(absl::StrCat("input ", i, " ", ir::DTypeName(t.dtype()), DimsString(t.dims()),
                                    " does not match input 0 ", ir::DTypeName(first.dtype()),
                                    DimsString(first.dims()), " outside axis ", axis));
    }
    out_dims[axis] += t.dim(axis);
  }
  Tensor& y = ctx.AllocateOutput(0, first.dtype(), out_dims);
  const size_t es = ir::DTypeSize(first.dtype());
  const int64_t outer = DimsProduct(out_dims, 0, axis);
  const int64_t inner = DimsProduct(out_dims, axis + 1, out_dims.size());
  char* dst = static_cast<char*>(y.raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      const size_t block = static_cast<size_t>(t.dim(axis) * inner) * es;
      if (block == 0) continue;
      std::memcpy(dst, static_cast<const char*>(t.raw_data()) + o * block, block);
      dst += block;
    }
  }
  return absl::OkStatus();
}

absl::Status SplitKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), x.rank()));
  std::optional<std::vector<int64_t>> split;
  if (ctx.has_input(1)) split = ctx.input(1).ToInt64Vector();
  const int64_t num_outputs = ctx.attr_int("num_outputs", 0);
  if (split && num_outputs > 0) {
    return ctx.Error("the split input and the num_outputs attribute are mutually exclusive");
  }
  absl::StatusOr<std::vector<int64_t>> sizes =
      ir::SplitSizes(x.dim(axis), split, num_outputs, ctx.num_outputs());
  if (!sizes.ok()) return ctx.Error(sizes.status().message());
  const size_t es = ir::DTypeSize(x.dtype());
  const int64_t outer = DimsProduct(x.dims(), 0, axis);
  const int64_t inner = DimsProduct(x.dims(), axis + 1, x.rank());
  const size_t in_block = static_cast<size_t>(x.dim(axis) * inner) * es;
  size_t start = 0;  // byte offset of this output's slab inside one outer block
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    std::vector<int64_t> dims = x.dims();
    dims[axis] = (*sizes)[i];
    Tensor& y = ctx.AllocateOutput(i, x.dtype(), dims);
    const size_t block = static_cast<size_t>((*sizes)[i] * inner) * es;
    if (block > 0) {
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(static_cast<char*>(y.raw_data()) + o * block,
                    static_cast<const char*>(x.raw_data()) + o * in_block + start, block);
      }
    }
    start += block;
  }
  return absl::OkStatus();
}

absl::Status TileKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> repeats = ctx.input(1).ToInt64Vector();
  if (static_cast<int64_t>(repeats.size()) != x.rank()) {
    return ctx.Error(absl::StrCat("repeats ", DimsString(repeats), " must have one value per dim of ",
                                  DimsString(x.dims())));
  }
  std::vector<int64_t> out_dims(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (repeats[i] < 0) return ctx.Error(absl::StrCat("repeats ", DimsString(repeats), " has a negative value"));
    if (__builtin_mul_overflow(x.dim(i), repeats[i], &out_dims[i])) {
      return ctx.Error(absl::StrCat("repeats ", DimsString(repeats), " of ", DimsString(x.dims()),
                                    " overflow the element count"));
    }
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  const int64_t n = y.num_elements();
  if (n == 0) return absl::OkStatus();
  const std::vector<int64_t> in_strides = RowMajorStrides(x.dims());
  const int64_t rank = x.rank();
  VisitElementSize(ir::DTypeSize(x.dtype()), [&]<typename U>() {
    const U* s = static_cast<const U*>(x.raw_data());
    U* d = static_cast<U*>(y.raw_data());
    // Odometer over output coordinates, tracking the source coordinate (coord mod in_dim).
    std::vector<int64_t> src(rank, 0), coord(rank, 0);
    int64_t pos = 0;
    for (int64_t k = 0; k < n; ++k) {
      d[k] = s[pos];
      for (int64_t a = rank - 1; a >= 0; --a) {
        if (++coord[a] < out_dims[a]) {
          if (++src[a] == x.dim(a)) {  // wrap around to the next tile
            pos -= in_strides[a] * (x.dim(a) - 1);
            src[a] = 0;
          } else {
            pos += in_strides[a];
          }
          break;
        }
        pos -= in_strides[a] * src[a];
        src[a] = 0;
        coord[a] = 0;
      }
    }
  });
  return absl::OkStatus();
}

// Source index along one axis for output position o of Pad, in the input cropped by the negative
// pads (length n, starting at `crop`); -1 means "the constant value".
int64_t PadSource(int64_t j, int64_t n, int64_t crop, const std::string& mode) {
  if (j >= 0 && j < n) return crop + j;
  if (mode == "constant") return -1;
  if (mode == "edge") return crop + std::clamp<int64_t>(j, 0, n - 1);
  if (mode == "wrap") return crop + ((j % n) + n) % n;
  // reflect: mirror about the first and last element without repeating them (NumPy's
  // 'reflect'), i.e. a triangle wave of period 2(n-1).
  if (n == 1) return crop;
  const int64_t period = 2 * (n - 1);
  int64_t m = ((j % period) + period) % period;
  if (m >= n) m = period - m;
  return crop + m;
}

// Pad's geometry for data dims `x_dims`: the output dims and, per axis, the source index along
// that axis of every output position (-1: the constant value). Inputs are Pad's pads and [axes].
struct PadPlan {
  std::vector<int64_t> out_dims;
  std::vector<std::vector<int64_t>> source;
};
absl::StatusOr<PadPlan> MakePadPlan(const KernelContext& ctx, const std::vector<int64_t>& x_dims,
                                    const std::string& mode, const Tensor& pads,
                                    const Tensor* axes_t) {
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.Error(absl::StrCat("unknown mode '", mode, "'"));
  }
  std::optional<std::vector<int64_t>> axes;
  if (axes_t != nullptr) axes = axes_t->ToInt64Vector();
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> amounts =
      ir::PadAmounts(rank, pads.ToInt64Vector(), axes);
  if (!amounts.ok()) return ctx.Error(amounts.status().message());
  PadPlan plan;
  plan.out_dims.resize(rank);
  plan.source.resize(rank);
  for (int64_t a = 0; a < rank; ++a) {
    const auto [b, e] = (*amounts)[a];
    const int64_t crop_b = std::max<int64_t>(0, -b), crop_e = std::max<int64_t>(0, -e);
    const int64_t n = x_dims[a] - crop_b - crop_e;
    if (n < 0) {
      return ctx.Error(absl::StrCat("pads on axis ", a, " (", b, ", ", e, ") remove more than its ",
                                    x_dims[a], " elements"));
    }
    const int64_t pb = std::max<int64_t>(0, b), pe = std::max<int64_t>(0, e);
    plan.out_dims[a] = n + pb + pe;
    if (n == 0 && (pb > 0 || pe > 0) && mode != "constant") {
      return ctx.Error(absl::StrCat("mode '", mode, "' cannot pad the empty axis ", a));
    }
    plan.source[a].resize(plan.out_dims[a]);
    for (int64_t o = 0; o < plan.out_dims[a]; ++o) {
      plan.source[a][o] = PadSource(o - pb, n, crop_b, mode);
    }
  }
  return plan;
}

// Calls f(out_pos, in_pos) for every output position of `plan` whose outer coordinates all have a
// source (in_pos = offset of the outer coordinates' sources; the innermost axis is left to f via
// plan.source.back()). Row-major over the output. Requires rank >= 1.
template <typename F>
void ForEachPadRow(const PadPlan& plan, const std::vector<int64_t>& in_strides, F&& f) {
  const int64_t rank = static_cast<int64_t>(plan.out_dims.size());
  const int64_t total = ir::NumElements(plan.out_dims);
  const int64_t inner = plan.out_dims[rank - 1];
  if (total == 0) return;
  std::vector<int64_t> coord(rank, 0);
  for (int64_t done = 0; done < total; done += inner) {
    // Offset of the outer coordinates, or -1 when one of them lies in the constant padding.
    int64_t base = 0;
    for (int64_t a = 0; a + 1 < rank && base >= 0; ++a) {
      const int64_t si = plan.source[a][coord[a]];
      base = si < 0 ? -1 : base + si * in_strides[a];
    }
    f(done, base);
    for (int64_t a = rank - 2; a >= 0; --a) {
      if (++coord[a] < plan.out_dims[a]) break;
      coord[a] = 0;
    }
  }
}

absl::Status PadKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string mode = ctx.attr_string("mode", "constant");
  OTTR_ASSIGN_OR_RETURN(const PadPlan plan,
                        MakePadPlan(ctx, x.dims(), mode, ctx.input(1),
                                    ctx.has_input(3) ? &ctx.input(3) : nullptr));
  const std::vector<int64_t>& out_dims = plan.out_dims;
  const int64_t rank = x.rank();
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  const int64_t total = y.num_elements();
  if (total == 0) return absl::OkStatus();
  // The pad value in the output's element type (default 0).
  Tensor value(x.dtype(), {});
  if (ctx.has_input(2) && ctx.input(2).num_elements() > 0) {
    const Tensor& v = ctx.input(2);
    if (v.dtype() == x.dtype()) {
      std::memcpy(value.raw_data(), v.raw_data(), ir::DTypeSize(x.dtype()));
    } else {
      // ONNX requires the data's type; older-opset rewrites may produce a float value for data
      // whose type was unknown at import, so convert numerically.
      const double d = v.GetAsDouble(0);
      ir::VisitDType(x.dtype(), [&]<typename T>() {
        if constexpr (!std::is_void_v<T>) value.data<T>()[0] = SaturatingFromDouble<T>(d);
      });
    }
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(x.dims());
  VisitElementSize(ir::DTypeSize(x.dtype()), [&]<typename U>() {
    const U* s = static_cast<const U*>(x.raw_data());
    const U pad = *static_cast<const U*>(value.raw_data());
    U* d = static_cast<U*>(y.raw_data());
    if (rank == 0) {
      d[0] = s[0];
      return;
    }
    const std::vector<int64_t>& inner_src = plan.source[rank - 1];
    const int64_t inner = out_dims[rank - 1];
    ForEachPadRow(plan, in_strides, [&](int64_t done, int64_t base) {
      for (int64_t k = 0; k < inner; ++k) {
        d[done + k] = (base < 0 || inner_src[k] < 0) ? pad : s[base + inner_src[k]];
      }
    });
  });
  return absl::OkStatus();
}

// ottr::PadGrad(dY, pads, [axes]) {mode, shape}: dX = zeros(shape); dX[source(o)] += dY[o] for
// every output position o of Pad that copies an input element (reflect/edge/wrap repeat input
// elements, so several o may share a source). Float element types.
absl::Status PadGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const std::vector<int64_t> x_dims = ctx.attr_ints("shape");
  OTTR_ASSIGN_OR_RETURN(const PadPlan plan,
                        MakePadPlan(ctx, x_dims, ctx.attr_string("mode", "constant"), ctx.input(1),
                                    ctx.has_input(2) ? &ctx.input(2) : nullptr));
  if (plan.out_dims != dy.dims()) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " does not match Pad's output ",
                                  DimsString(plan.out_dims), " for input ", DimsString(x_dims)));
  }
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  const std::vector<int64_t> in_strides = RowMajorStrides(x_dims);
  const bool ok = AccumulateInFloat(dy, dx, [&](auto* d, const auto* s) {
    if (rank == 0) {
      d[0] += s[0];
      return;
    }
    const std::vector<int64_t>& inner_src = plan.source[rank - 1];
    const int64_t inner = plan.out_dims[rank - 1];
    ForEachPadRow(plan, in_strides, [&](int64_t done, int64_t base) {
      if (base < 0) return;
      for (int64_t k = 0; k < inner; ++k) {
        if (inner_src[k] >= 0) d[base + inner_src[k]] += s[done + k];
      }
    });
  });
  if (!ok) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dy.dtype())));
  return absl::OkStatus();
}

absl::Status ShapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t start = ctx.attr_int("start", 0), end = ctx.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  const int64_t n = std::max<int64_t>(end - start, 0);
  Tensor& y = ctx.AllocateOutput(0, DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = x.dim(start + i);
  return absl::OkStatus();
}

absl::Status SizeKernel(KernelContext& ctx) {
  ctx.AllocateOutput(0, DType::kInt64, {}).data<int64_t>()[0] = ctx.input(0).num_elements();
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorKernels(KernelRegistry& r) {
  r.Register("", "Reshape", ReshapeKernel);
  r.Register("", "Flatten", FlattenKernel);
  r.Register("", "Squeeze", SqueezeKernel);
  r.Register("", "Unsqueeze", UnsqueezeKernel);
  r.Register("", "Identity", IdentityKernel);
  r.Register("", "Transpose", TransposeKernel);
  r.Register("", "Expand", ExpandKernel);
  r.Register("", "Slice", SliceKernel);
  r.Register("", "Concat", ConcatKernel);
  r.Register("", "Split", SplitKernel);
  r.Register("", "Tile", TileKernel);
  r.Register("", "Pad", PadKernel);
  r.Register("", "Shape", ShapeKernel);
  r.Register("", "Size", SizeKernel);
  r.Register("ottr", "SliceGrad", SliceGradKernel);
  r.Register("ottr", "PadGrad", PadGradKernel);
  RegisterTensorIndexKernels(r);
}

}  // namespace ottr::runtime::cpu
