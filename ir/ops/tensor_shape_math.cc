#include "ir/ops/tensor_shape_math.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::ir {

absl::StatusOr<int64_t> WrapAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<std::vector<int64_t>> WrapAxes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  std::vector<bool> seen(std::max<int64_t>(rank, 0), false);
  for (int64_t a : axes) {
    absl::StatusOr<int64_t> w = WrapAxis(a, rank);
    if (!w.ok()) return w.status();
    if (seen[*w]) {
      return absl::InvalidArgumentError(
          absl::StrCat("axes [", absl::StrJoin(axes, ","), "] name axis ", *w, " twice"));
    }
    seen[*w] = true;
    out.push_back(*w);
  }
  return out;
}

namespace {

// Common validation of Reshape's shape values.
absl::Status CheckReshapeValues(const std::vector<int64_t>& shape, bool allowzero,
                                int64_t in_rank) {
  int minus_ones = 0;
  bool zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t v = shape[i];
    if (v < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has a negative dim ", v));
    }
    if (v == -1) ++minus_ones;
    if (v == 0) {
      zero = true;
      if (!allowzero && in_rank >= 0 && static_cast<int64_t>(i) >= in_rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("shape [", absl::StrJoin(shape, ","), "] copies dim ", i,
                         " (a 0) but the input has rank ", in_rank));
      }
    }
  }
  if (minus_ones > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has more than one -1"));
  }
  if (allowzero && zero && minus_ones > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape [", absl::StrJoin(shape, ","), "] has both 0 and -1 with allowzero=1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ResolveReshape(const std::vector<int64_t>& in_dims,
                                                    const std::vector<int64_t>& shape,
                                                    bool allowzero) {
  absl::Status s = CheckReshapeValues(shape, allowzero, static_cast<int64_t>(in_dims.size()));
  if (!s.ok()) return s;
  std::vector<int64_t> out(shape.size());
  int64_t infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      infer = static_cast<int64_t>(i);
      continue;
    }
    out[i] = (shape[i] == 0 && !allowzero) ? in_dims[i] : shape[i];
    if (__builtin_mul_overflow(known, out[i], &known)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape to [", absl::StrJoin(shape, ","),
                                                     "]: the element count overflows"));
    }
  }
  const int64_t total = NumElements(in_dims);
  if (infer >= 0) {
    if (known == 0 || total % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reshape [", absl::StrJoin(in_dims, ","), "] to [",
                       absl::StrJoin(shape, ","), "]: the -1 dim cannot be inferred"));
    }
    out[infer] = total / known;
  } else if (known != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape [", absl::StrJoin(in_dims, ","), "] (", total,
                     " elements) to [", absl::StrJoin(out, ","), "] (", known, " elements)"));
  }
  return out;
}

absl::StatusOr<Shape> ResolveReshapeSymbolic(const Shape& in, const std::vector<int64_t>& shape,
                                             bool allowzero) {
  absl::Status s = CheckReshapeValues(shape, allowzero, static_cast<int64_t>(in.size()));
  if (!s.ok()) return s;
  if (IsStatic(in)) {
    absl::StatusOr<std::vector<int64_t>> d = ResolveReshape(StaticDims(in), shape, allowzero);
    if (!d.ok()) return d.status();
    return ShapeFromDims(*d);
  }
  Shape out(shape.size());
  int64_t infer = -1;
  // Input dims not yet matched by an output dim: the -1 is what remains of them.
  std::vector<bool> used(in.size(), false);
  int64_t out_static = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (shape[i] == 0 && !allowzero) {
      out[i] = in[i];
      used[i] = true;  // a copied dim cancels against itself, whatever it is
      continue;
    }
    out[i] = Dim(shape[i]);
    if (__builtin_mul_overflow(out_static, shape[i], &out_static)) return out;  // the -1 stays unknown
  }
  if (infer < 0) return out;
  int64_t in_static = 1;
  std::vector<std::string> in_symbols;
  bool in_unknown = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (used[i]) continue;
    if (in[i].is_static()) {
      if (__builtin_mul_overflow(in_static, in[i].value(), &in_static)) in_unknown = true;
    } else if (in[i].is_symbol()) {
      in_symbols.push_back(in[i].symbol());
    } else {
      in_unknown = true;
    }
  }
  if (in_unknown || out_static == 0 || in_static % out_static != 0) {
    out[infer] = Dim();
  } else if (in_symbols.empty()) {
    out[infer] = Dim(in_static / out_static);
  } else if (in_symbols.size() == 1 && in_static == out_static) {
    out[infer] = Dim::Symbol(in_symbols[0]);
  } else {
    out[infer] = Dim();
  }
  return out;
}

SliceRange ComputeSliceRange(int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceRange r;
  r.step = step;
  // Negative indices count from the end; the sums cannot overflow because dim >= 0 and the
  // negative branch only adds to negative values.
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (dim == 0) return r;  // nothing to take (and the clamp ranges below would be empty)
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    r.start = start;
    // ceil((end - start) / step), written so that a huge step cannot overflow.
    r.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    r.start = start;
    // ceil((end - start) / step) = ceil((start - end) / -step) for step < 0.
    const uint64_t neg = static_cast<uint64_t>(-(step + 1)) + 1;  // -step without overflow
    r.count = start > end
                  ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / neg + 1)
                  : 0;
  }
  return r;
}

absl::StatusOr<SliceSpec> MakeSliceSpec(int64_t rank, const std::vector<int64_t>& starts,
                                        const std::vector<int64_t>& ends,
                                        const std::optional<std::vector<int64_t>>& axes,
                                        const std::optional<std::vector<int64_t>>& steps) {
  SliceSpec spec;
  const size_t n = starts.size();
  if (ends.size() != n || (axes && axes->size() != n) || (steps && steps->size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "starts, ends, axes and steps must have equal lengths (", n, ", ", ends.size(), ", ",
        axes ? static_cast<int64_t>(axes->size()) : -1, ", ",
        steps ? static_cast<int64_t>(steps->size()) : -1, ")"));
  }
  if (axes) {
    absl::StatusOr<std::vector<int64_t>> a = WrapAxes(*axes, rank);
    if (!a.ok()) return a.status();
    spec.axes = *a;
  } else {
    if (static_cast<int64_t>(n) > rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, " starts given for rank ", rank));
    }
    for (size_t i = 0; i < n; ++i) spec.axes.push_back(static_cast<int64_t>(i));
  }
  spec.starts = starts;
  spec.ends = ends;
  spec.steps = steps ? *steps : std::vector<int64_t>(n, 1);
  for (int64_t st : spec.steps) {
    if (st == 0) return absl::InvalidArgumentError("slice step must not be 0");
  }
  return spec;
}

absl::StatusOr<std::vector<int64_t>> SplitSizes(int64_t dim,
                                                const std::optional<std::vector<int64_t>>& split,
                                                int64_t num_outputs, int64_t n_outputs) {
  if (split) {
    if (static_cast<int64_t>(split->size()) != n_outputs) {
      return absl::InvalidArgumentError(absl::StrCat("split has ", split->size(),
                                                     " sizes for ", n_outputs, " outputs"));
    }
    int64_t sum = 0;
    for (int64_t v : *split) {
      if (v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("split sizes [", absl::StrJoin(*split, ","), "] must be >= 0"));
      }
      sum += v;
    }
    if (sum != dim) {
      return absl::InvalidArgumentError(absl::StrCat("split sizes [", absl::StrJoin(*split, ","),
                                                     "] sum to ", sum, ", not the dim ", dim));
    }
    return *split;
  }
  if (num_outputs > 0) {
    if (num_outputs != n_outputs) {
      return absl::InvalidArgumentError(absl::StrCat("num_outputs is ", num_outputs,
                                                     " but the node has ", n_outputs,
                                                     " outputs"));
    }
    const int64_t chunk = (dim + num_outputs - 1) / num_outputs;
    std::vector<int64_t> out(num_outputs, chunk);
    out.back() = dim - chunk * (num_outputs - 1);
    if (out.back() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot split a dim of ", dim, " into ",
                                                     num_outputs, " chunks of ceil(", dim, "/",
                                                     num_outputs, ")=", chunk));
    }
    return out;
  }
  if (n_outputs <= 0 || dim % n_outputs != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split a dim of ", dim, " into ",
                                                   n_outputs, " equal parts"));
  }
  return std::vector<int64_t>(n_outputs, dim / n_outputs);
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> PadAmounts(
    int64_t rank, const std::vector<int64_t>& pads,
    const std::optional<std::vector<int64_t>>& axes) {
  std::vector<int64_t> ax;
  if (axes) {
    absl::StatusOr<std::vector<int64_t>> a = WrapAxes(*axes, rank);
    if (!a.ok()) return a.status();
    ax = *a;
  } else {
    for (int64_t i = 0; i < rank; ++i) ax.push_back(i);
  }
  if (pads.size() != 2 * ax.size()) {
    return absl::InvalidArgumentError(absl::StrCat("pads has ", pads.size(), " values, expected ",
                                                   2 * ax.size(), " (2 per padded axis)"));
  }
  std::vector<std::pair<int64_t, int64_t>> out(rank, {0, 0});
  for (size_t i = 0; i < ax.size(); ++i) out[ax[i]] = {pads[i], pads[i + ax.size()]};
  return out;
}

absl::StatusOr<int64_t> RangeCountOf(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  if (start.num_elements() != 1 || limit.num_elements() != 1 || delta.num_elements() != 1) {
    return absl::InvalidArgumentError("start, limit and delta must be scalars");
  }
  if (limit.dtype() != start.dtype() || delta.dtype() != start.dtype()) {
    return absl::InvalidArgumentError("start, limit and delta must have one element type");
  }
  return VisitDType(start.dtype(), [&]<typename T>() -> absl::StatusOr<int64_t> {
    if constexpr (std::is_void_v<T> || std::is_same_v<T, bool>) {
      return absl::InvalidArgumentError(
          absl::StrCat("Range does not take element type ", DTypeName(start.dtype())));
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return RangeCount<float>(static_cast<float>(ToDouble(start.data<T>()[0])),
                               static_cast<float>(ToDouble(limit.data<T>()[0])),
                               static_cast<float>(ToDouble(delta.data<T>()[0])));
    } else {
      return RangeCount<T>(start.data<T>()[0], limit.data<T>()[0], delta.data<T>()[0]);
    }
  });
}

Dim DimProduct(const std::vector<Dim>& dims) {
  int64_t p = 1;
  const Dim* other = nullptr;
  int n_other = 0;
  for (const Dim& d : dims) {
    if (d.is_static()) {
      if (__builtin_mul_overflow(p, d.value(), &p)) return Dim();  // too large to know
    } else {
      other = &d;
      ++n_other;
    }
  }
  if (n_other == 0) return Dim(p);
  if (p == 0) return Dim(0);
  if (n_other == 1 && p == 1) return *other;
  return Dim();
}

}  // namespace ottr::ir
