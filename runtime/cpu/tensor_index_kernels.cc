// CPU kernels of the indexing and generator ops: Gather, GatherElements, ScatterElements, OneHot,
// CumSum, Trilu, Constant, ConstantOfShape and Range.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {
namespace {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

// Reads an int32/int64 index tensor; other element types are an error.
absl::StatusOr<std::vector<int64_t>> ReadIndices(const KernelContext& ctx, const Tensor& t) {
  if (t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64) {
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", ir::DTypeName(t.dtype())));
  }
  return t.ToInt64Vector();
}

// Maps an index in [-n, n) to [0, n); out of range is an error naming the value.
absl::StatusOr<int64_t> WrapIndex(const KernelContext& ctx, int64_t i, int64_t n, int64_t axis) {
  if (i < -n || i >= n) {
    return ctx.Error(absl::StrCat("index ", i, " is out of range [", -n, ", ", n - 1, "] on axis ",
                                  axis));
  }
  return i < 0 ? i + n : i;
}

absl::Status GatherKernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (data.rank() == 0) return ctx.Error("data must have rank >= 1");
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), data.rank()));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(ctx, indices));
  const int64_t n = data.dim(axis);
  for (int64_t& i : idx) {
    OTTR_ASSIGN_OR_RETURN(i, WrapIndex(ctx, i, n, axis));
  }
  std::vector<int64_t> out_dims(data.dims().begin(), data.dims().begin() + axis);
  out_dims.insert(out_dims.end(), indices.dims().begin(), indices.dims().end());
  out_dims.insert(out_dims.end(), data.dims().begin() + axis + 1, data.dims().end());
  Tensor& y = ctx.AllocateOutput(0, data.dtype(), out_dims);
  const size_t block = static_cast<size_t>(DimsProduct(data.dims(), axis + 1, data.rank())) *
                       ir::DTypeSize(data.dtype());
  const int64_t outer = DimsProduct(data.dims(), 0, axis);
  if (block == 0) return absl::OkStatus();
  const char* src = static_cast<const char*>(data.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t j = 0; j < idx.size(); ++j) {
      std::memcpy(dst, src + (o * n + idx[j]) * block, block);
      dst += block;
    }
  }
  return absl::OkStatus();
}

// For GatherElements and ScatterElements: the data offset of every element of `indices`, i.e. the
// element's own coordinates with the one on `axis` replaced by its index value.
absl::StatusOr<std::vector<int64_t>> ElementOffsets(const KernelContext& ctx,
                                                    const std::vector<int64_t>& data_dims,
                                                    const Tensor& indices, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(data_dims.size());
  if (indices.rank() != rank) {
    return ctx.Error(absl::StrCat("indices ", DimsString(indices.dims()),
                                  " must have the rank of data ", DimsString(data_dims)));
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis && indices.dim(d) > data_dims[d]) {
      return ctx.Error(absl::StrCat("indices ", DimsString(indices.dims()), " exceed data ",
                                    DimsString(data_dims), " in dim ", d));
    }
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(ctx, indices));
  const std::vector<int64_t> strides = RowMajorStrides(data_dims);
  std::vector<int64_t> coord(rank, 0);
  int64_t base = 0;  // offset of the coordinates without the axis term
  for (size_t k = 0; k < idx.size(); ++k) {
    OTTR_ASSIGN_OR_RETURN(const int64_t i, WrapIndex(ctx, idx[k], data_dims[axis], axis));
    idx[k] = base + i * strides[axis];
    for (int64_t a = rank - 1; a >= 0; --a) {
      if (++coord[a] < indices.dim(a)) {
        if (a != axis) base += strides[a];
        break;
      }
      if (a != axis) base -= strides[a] * (indices.dim(a) - 1);
      coord[a] = 0;
    }
  }
  return idx;
}

absl::Status GatherElementsKernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), data.rank()));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(ctx, data.dims(), indices, axis));
  Tensor& y = ctx.AllocateOutput(0, data.dtype(), indices.dims());
  VisitElementSize(ir::DTypeSize(data.dtype()), [&]<typename U>() {
    const U* s = static_cast<const U*>(data.raw_data());
    U* d = static_cast<U*>(y.raw_data());
    for (size_t k = 0; k < offsets.size(); ++k) d[k] = s[offsets[k]];
  });
  return absl::OkStatus();
}

// ottr::GatherGrad(dY, indices) {axis, shape}: dX = zeros(shape);
// dX[o, indices[j], i] += dY[o, j, i] with o over shape[:axis], j over the indices, i over
// shape[axis+1:]. Repeated indices accumulate. Float element types.
absl::Status GatherGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const std::vector<int64_t> x_dims = ctx.attr_ints("shape");
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  if (rank == 0) return ctx.Error("shape must have rank >= 1");
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), rank));
  std::vector<int64_t> y_dims(x_dims.begin(), x_dims.begin() + axis);
  y_dims.insert(y_dims.end(), indices.dims().begin(), indices.dims().end());
  y_dims.insert(y_dims.end(), x_dims.begin() + axis + 1, x_dims.end());
  if (dy.dims() != y_dims) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " does not match Gather's output ",
                                  DimsString(y_dims), " for data ", DimsString(x_dims),
                                  " and indices ", DimsString(indices.dims())));
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(ctx, indices));
  const int64_t n = x_dims[axis];
  for (int64_t& i : idx) {
    OTTR_ASSIGN_OR_RETURN(i, WrapIndex(ctx, i, n, axis));
  }
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  const int64_t outer = DimsProduct(x_dims, 0, axis);
  const int64_t inner = DimsProduct(x_dims, axis + 1, rank);
  const int64_t m = static_cast<int64_t>(idx.size());
  const bool ok = AccumulateInFloat(dy, dx, [&](auto* d, const auto* s) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < m; ++j) {
        auto* dst = d + (o * n + idx[j]) * inner;
        const auto* src = s + (o * m + j) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
      }
    }
  });
  if (!ok) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dy.dtype())));
  return absl::OkStatus();
}

// ottr::GatherElementsGrad(dY, indices) {axis, shape}: dX = zeros(shape); dX[p(k)] += dY[k], with
// p(k) the position GatherElements read for element k. Float element types.
absl::Status GatherElementsGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const std::vector<int64_t> x_dims = ctx.attr_ints("shape");
  OTTR_ASSIGN_OR_RETURN(const int64_t axis,
                        KernelAxis(ctx, ctx.attr_int("axis", 0), static_cast<int64_t>(x_dims.size())));
  if (dy.dims() != indices.dims()) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy.dims()), " must have the shape of indices ",
                                  DimsString(indices.dims())));
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(ctx, x_dims, indices, axis));
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), x_dims);
  const bool ok = AccumulateInFloat(dy, dx, [&](auto* d, const auto* s) {
    for (size_t k = 0; k < offsets.size(); ++k) d[offsets[k]] += s[k];
  });
  if (!ok) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dy.dtype())));
  return absl::OkStatus();
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

// a (op) b in T: floats through double, integers with two's-complement wrap-around, bool as
// or (add, max) / and (mul, min).
template <typename T>
T Combine(T a, T b, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    return (r == Reduction::kAdd || r == Reduction::kMax) ? (a || b) : (a && b);
  } else if constexpr (kIsFloatLike<T>) {
    const double x = ir::ToDouble(a), y = ir::ToDouble(b);
    switch (r) {
      case Reduction::kAdd: return ir::FromDouble<T>(x + y);
      case Reduction::kMul: return ir::FromDouble<T>(x * y);
      case Reduction::kMax: return std::isnan(x) || x >= y ? a : b;
      case Reduction::kMin: return std::isnan(x) || x <= y ? a : b;
      default: return b;
    }
  } else {
    switch (r) {
      case Reduction::kAdd: return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case Reduction::kMul: return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case Reduction::kMax: return std::max(a, b);
      case Reduction::kMin: return std::min(a, b);
      default: return b;
    }
  }
}

absl::Status ScatterElementsKernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), data.rank()));
  if (updates.dims() != indices.dims() || updates.dtype() != data.dtype()) {
    return ctx.Error(absl::StrCat("updates ", ir::DTypeName(updates.dtype()), DimsString(updates.dims()),
                                  " must have the shape of indices ", DimsString(indices.dims()),
                                  " and the element type of data ", ir::DTypeName(data.dtype())));
  }
  const std::string red = ctx.attr_string("reduction", "none");
  Reduction r;
  if (red == "none") {
    r = Reduction::kNone;
  } else if (red == "add") {
    r = Reduction::kAdd;
  } else if (red == "mul") {
    r = Reduction::kMul;
  } else if (red == "max") {
    r = Reduction::kMax;
  } else if (red == "min") {
    r = Reduction::kMin;
  } else {
    return ctx.Error(absl::StrCat("unknown reduction '", red, "'"));
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(ctx, data.dims(), indices, axis));
  Tensor& y = ctx.AllocateOutput(0, data.dtype(), data.dims());
  if (data.nbytes() > 0) std::memcpy(y.raw_data(), data.raw_data(), data.nbytes());
  // Updates apply in row-major order, so with duplicates and reduction "none" the last one wins.
  bool supported = true;
  ir::VisitDType(data.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T>) {
      supported = false;
    } else {
      T* d = y.data<T>();
      const T* u = updates.data<T>();
      for (size_t k = 0; k < offsets.size(); ++k) {
        d[offsets[k]] = r == Reduction::kNone ? u[k] : Combine<T>(d[offsets[k]], u[k], r);
      }
    }
  });
  if (!supported) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(data.dtype())));
  return absl::OkStatus();
}

absl::Status OneHotKernel(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const Tensor& depth_t = ctx.input(1);
  const Tensor& values = ctx.input(2);
  if (depth_t.num_elements() != 1) return ctx.Error("depth must have exactly one element");
  if (values.num_elements() != 2) {
    return ctx.Error(absl::StrCat("values must hold [off, on], got ", DimsString(values.dims())));
  }
  const double depth_d = depth_t.GetAsDouble(0);
  if (!(depth_d >= 1) || depth_d > 1e12) return ctx.Error(absl::StrCat("depth ", depth_d, " is not positive"));
  const int64_t depth = static_cast<int64_t>(depth_d);
  const int64_t r = indices.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range for indices ", DimsString(indices.dims())));
  }
  if (axis < 0) axis += r + 1;
  std::vector<int64_t> out_dims = indices.dims();
  out_dims.insert(out_dims.begin() + axis, depth);
  Tensor& y = ctx.AllocateOutput(0, values.dtype(), out_dims);
  const int64_t outer = DimsProduct(indices.dims(), 0, axis);
  const int64_t inner = DimsProduct(indices.dims(), axis, r);
  VisitElementSize(ir::DTypeSize(values.dtype()), [&]<typename U>() {
    const U off = static_cast<const U*>(values.raw_data())[0];
    const U on = static_cast<const U*>(values.raw_data())[1];
    U* d = static_cast<U*>(y.raw_data());
    std::fill(d, d + y.num_elements(), off);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const double v = indices.GetAsDouble(o * inner + i);
        if (!std::isfinite(v)) continue;
        int64_t k = static_cast<int64_t>(v);
        if (k < 0) k += depth;  // negative indices count from the end
        if (k >= 0 && k < depth) d[(o * depth + k) * inner + i] = on;
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CumSumKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& axis_t = ctx.input(1);
  if (axis_t.num_elements() != 1 ||
      (axis_t.dtype() != DType::kInt32 && axis_t.dtype() != DType::kInt64)) {
    return ctx.Error("axis must be an int32 or int64 scalar");
  }
  if (x.rank() == 0) return ctx.Error("input must have rank >= 1");
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, axis_t.GetAsInt64(0), x.rank()));
  const bool exclusive = ctx.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr_int("reverse", 0) != 0;
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), x.dims());
  const int64_t outer = DimsProduct(x.dims(), 0, axis);
  const int64_t len = x.dim(axis);
  const int64_t inner = DimsProduct(x.dims(), axis + 1, x.rank());
  bool supported = true;
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T> || std::is_same_v<T, bool>) {
      supported = false;
    } else {
      // Floats accumulate in double; integers in 64 bits with wrap-around.
      using Acc = std::conditional_t<kIsFloatLike<T>, double, uint64_t>;
      const T* s = x.data<T>();
      T* d = y.data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          Acc acc = 0;
          for (int64_t step = 0; step < len; ++step) {
            const int64_t k = reverse ? len - 1 - step : step;
            const int64_t pos = (o * len + k) * inner + i;
            Acc v;
            if constexpr (kIsFloatLike<T>) {
              v = ir::ToDouble(s[pos]);
            } else {
              v = static_cast<uint64_t>(s[pos]);
            }
            if (!exclusive) acc += v;
            if constexpr (kIsFloatLike<T>) {
              d[pos] = ir::FromDouble<T>(acc);
            } else {
              d[pos] = static_cast<T>(acc);
            }
            if (exclusive) acc += v;
          }
        }
      }
    }
  });
  if (!supported) return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(x.dtype())));
  return absl::OkStatus();
}

absl::Status TriluKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return ctx.Error(absl::StrCat("input ", DimsString(x.dims()), " must have rank >= 2"));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    if (ctx.input(1).num_elements() != 1) return ctx.Error("k must be a scalar");
    k = ctx.input(1).GetAsInt64(0);
  }
  const bool upper = ctx.attr_int("upper", 1) != 0;
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), x.dims());
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = DimsProduct(x.dims(), 0, x.rank() - 2);
  const size_t es = ir::DTypeSize(x.dtype());
  const char* s = static_cast<const char*>(x.raw_data());
  char* d = static_cast<char*>(y.raw_data());  // zero-filled: all-zero bytes are 0 in every type
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        // Upper keeps j - i >= k; lower keeps j - i <= k.
        const bool keep = upper ? (j - i >= k) : (j - i <= k);
        if (!keep) continue;
        const int64_t pos = (m * rows + i) * cols + j;
        std::memcpy(d + pos * es, s + pos * es, es);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ConstantKernel(KernelContext& ctx) {
  const ir::Attribute* a = ctx.node().attr("value");
  if (a == nullptr || a->kind() != ir::Attribute::Kind::kTensor) {
    return ctx.Error("needs a 'value' tensor attribute");
  }
  // The attribute's buffer is shared: kernels never write to their inputs.
  ctx.SetOutput(0, a->t());
  return absl::OkStatus();
}

absl::Status ConstantOfShapeKernel(KernelContext& ctx) {
  const std::vector<int64_t> dims = ctx.input(0).ToInt64Vector();
  for (int64_t v : dims) {
    if (v < 0) return ctx.Error(absl::StrCat("shape ", DimsString(dims), " has a negative dim"));
  }
  Tensor value = Tensor::Scalar<float>(0.0f);
  if (const ir::Attribute* a = ctx.node().attr("value")) {
    if (a->kind() != ir::Attribute::Kind::kTensor || a->t().num_elements() != 1) {
      return ctx.Error("'value' must be a tensor with one element");
    }
    value = a->t();
  }
  Tensor& y = ctx.AllocateOutput(0, value.dtype(), dims);
  VisitElementSize(ir::DTypeSize(value.dtype()), [&]<typename U>() {
    const U v = *static_cast<const U*>(value.raw_data());
    U* d = static_cast<U*>(y.raw_data());
    std::fill(d, d + y.num_elements(), v);
  });
  return absl::OkStatus();
}

// Range: out[i] = start + i * delta for i < max(ceil((limit - start) / delta), 0), in the element
// type (integers wrap; half types compute in float).
absl::Status RangeKernel(KernelContext& ctx) {
  const Tensor& start = ctx.input(0);
  const Tensor& limit = ctx.input(1);
  const Tensor& delta = ctx.input(2);
  absl::StatusOr<int64_t> n = ir::RangeCountOf(start, limit, delta);
  if (!n.ok()) return ctx.Error(n.status().message());
  Tensor& y = ctx.AllocateOutput(0, start.dtype(), {*n});
  ir::VisitDType(start.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T> || std::is_same_v<T, bool>) {
      // RangeCountOf rejected these.
    } else {
      const T s = start.data<T>()[0], dl = delta.data<T>()[0];
      T* d = y.data<T>();
      for (int64_t i = 0; i < *n; ++i) {
        if constexpr (std::is_integral_v<T>) {
          d[i] = static_cast<T>(static_cast<uint64_t>(s) +
                                static_cast<uint64_t>(i) * static_cast<uint64_t>(dl));
        } else if constexpr (kIsFloatLike<T> && !std::is_floating_point_v<T>) {
          const float v = static_cast<float>(ir::ToDouble(s)) +
                          static_cast<float>(i) * static_cast<float>(ir::ToDouble(dl));
          d[i] = ir::FromDouble<T>(v);
        } else {
          d[i] = s + static_cast<T>(i) * dl;
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorIndexKernels(KernelRegistry& r) {
  r.Register("", "Gather", GatherKernel);
  r.Register("", "GatherElements", GatherElementsKernel);
  r.Register("", "ScatterElements", ScatterElementsKernel);
  r.Register("", "OneHot", OneHotKernel);
  r.Register("", "CumSum", CumSumKernel);
  r.Register("", "Trilu", TriluKernel);
  r.Register("", "Constant", ConstantKernel);
  r.Register("", "ConstantOfShape", ConstantOfShapeKernel);
  r.Register("", "Range", RangeKernel);
  r.Register("ottr", "GatherGrad", GatherGradKernel);
  r.Register("ottr", "GatherElementsGrad", GatherElementsGradKernel);
}

}  // namespace ottr::runtime::cpu
