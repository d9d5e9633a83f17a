// CPU kernels of the reductions and of ArgMax/ArgMin.
//
// With R the reduced positions of one output element and n = |R|:
//   Sum = Σx, Mean = Σx / n, Prod = Πx, Max = max x, Min = min x, L1 = Σ|x|, L2 = sqrt(Σx²),
//   SumSquare = Σx², LogSum = log Σx, LogSumExp = m + log Σ exp(x - m) with m = max x.
// Empty R (a reduced axis of size 0) gives the identity of the operation: 0 for the sums, 1 for
// Prod, -inf / the lowest value for Max, +inf / the highest value for Min, log 0 = -inf for
// LogSum and LogSumExp, and 0/0 = NaN for Mean, as ONNX's test_reduce_*_empty_set cases expect.
// Float types accumulate in double (half types are converted through float). Integer Sum, Prod,
// SumSquare, L1 and Mean are exact in 64 bits with wrap-around; integer L2, LogSum and LogSumExp
// compute in double and convert back truncating (as ONNX's reference casts NumPy's result).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {
namespace {

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Calls f(in_index, out_index) for every element of `dims` in row-major order, where out_index
// follows `out_strides` (0 on reduced axes).
template <typename F>
void ForEachReduced(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_strides,
                    F&& f) {
  const int64_t n = ir::NumElements(dims);
  if (n == 0) return;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) {
    f(0, 0);
    return;
  }
  std::vector<int64_t> coord(rank, 0);
  const int64_t inner = dims[rank - 1];
  const int64_t inner_stride = out_strides[rank - 1];
  int64_t out = 0;
  for (int64_t done = 0; done < n; done += inner) {
    for (int64_t k = 0; k < inner; ++k) f(done + k, out + k * inner_stride);
    for (int64_t a = rank - 2; a >= 0; --a) {
      if (++coord[a] < dims[a]) {
        out += out_strides[a];
        break;
      }
      out -= out_strides[a] * (dims[a] - 1);
      coord[a] = 0;
    }
  }
}

// The reduction in double (float types; and L2/LogSum/LogSumExp for integers).
template <typename T>
void ReduceInDouble(ReduceOp op, const Tensor& x, const std::vector<int64_t>& out_strides,
                    int64_t count, Tensor& y) {
  const int64_t n_out = y.num_elements();
  const T* s = x.data<T>();
  double init = 0.0;
  if (op == ReduceOp::kProd) init = 1.0;
  if (op == ReduceOp::kMax) init = -std::numeric_limits<double>::infinity();
  if (op == ReduceOp::kMin) init = std::numeric_limits<double>::infinity();
  std::vector<double> acc(n_out, init);
  std::vector<double> mx;
  if (op == ReduceOp::kLogSumExp) {
    mx.assign(n_out, -std::numeric_limits<double>::infinity());
    ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
      const double v = ir::ToDouble(s[i]);
      if (std::isnan(v) || v > mx[o]) mx[o] = std::isnan(mx[o]) ? mx[o] : v;
    });
  }
  ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
    const double v = ir::ToDouble(s[i]);
    double& a = acc[o];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
      case ReduceOp::kLogSum: a += v; break;
      case ReduceOp::kSumSquare:
      case ReduceOp::kL2: a += v * v; break;
      case ReduceOp::kL1: a += std::fabs(v); break;
      case ReduceOp::kProd: a *= v; break;
      case ReduceOp::kMax:
        if (std::isnan(v) || v > a) a = std::isnan(a) ? a : v;  // NaN propagates
        break;
      case ReduceOp::kMin:
        if (std::isnan(v) || v < a) a = std::isnan(a) ? a : v;
        break;
      case ReduceOp::kLogSumExp:
        // exp(v - m); when m is ±inf the result is decided by m alone below.
        if (std::isfinite(mx[o])) a += std::exp(v - mx[o]);
        break;
    }
  });
  T* d = y.data<T>();
  for (int64_t o = 0; o < n_out; ++o) {
    double r = acc[o];
    switch (op) {
      case ReduceOp::kMean: r = r / static_cast<double>(count); break;
      case ReduceOp::kL2: r = std::sqrt(r); break;
      case ReduceOp::kLogSum: r = std::log(r); break;
      case ReduceOp::kLogSumExp: r = std::isfinite(mx[o]) ? mx[o] + std::log(r) : mx[o]; break;
      default: break;
    }
    d[o] = SaturatingFromDouble<T>(r);
  }
}

// Exact integer reductions: Sum, Mean, Prod, SumSquare, L1 with 64-bit wrap-around; Max, Min.
template <typename T>
void ReduceInteger(ReduceOp op, const Tensor& x, const std::vector<int64_t>& out_strides,
                   int64_t count, Tensor& y) {
  const int64_t n_out = y.num_elements();
  const T* s = x.data<T>();
  T* d = y.data<T>();
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
    const bool is_max = op == ReduceOp::kMax;
    std::fill(d, d + n_out, is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
      d[o] = is_max ? std::max(d[o], s[i]) : std::min(d[o], s[i]);
    });
    return;
  }
  std::vector<uint64_t> acc(n_out, op == ReduceOp::kProd ? 1 : 0);
  ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
    const uint64_t v = static_cast<uint64_t>(s[i]);  // modular: two's complement for signed
    switch (op) {
      case ReduceOp::kProd: acc[o] *= v; break;
      case ReduceOp::kSumSquare: acc[o] += v * v; break;
      case ReduceOp::kL1: acc[o] += (std::is_signed_v<T> && s[i] < 0) ? uint64_t{0} - v : v; break;
      default: acc[o] += v; break;
    }
  });
  for (int64_t o = 0; o < n_out; ++o) {
    if (op == ReduceOp::kMean) {
      if (count == 0) {
        d[o] = T(0);
      } else if constexpr (std::is_signed_v<T>) {
        d[o] = static_cast<T>(static_cast<int64_t>(acc[o]) / count);  // truncates toward zero
      } else {
        d[o] = static_cast<T>(acc[o] / static_cast<uint64_t>(count));
      }
    } else {
      d[o] = static_cast<T>(acc[o]);
    }
  }
}

absl::Status ReduceKernel(KernelContext& ctx, ReduceOp op) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  const bool noop = ctx.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (ctx.has_input(1)) axes = ctx.input(1).ToInt64Vector();
  std::vector<bool> reduce(rank, false);
  if (axes.empty()) {
    // Reducing over no axes (noop) leaves every element on its own: the op becomes elementwise.
    if (!noop) reduce.assign(rank, true);
  } else {
    absl::StatusOr<std::vector<int64_t>> ax = ir::WrapAxes(axes, rank);
    if (!ax.ok()) return ctx.Error(ax.status().message());
    for (int64_t a : *ax) reduce[a] = true;
  }
  std::vector<int64_t> full_dims(rank), out_dims;
  int64_t count = 1;
  for (int64_t i = 0; i < rank; ++i) {
    full_dims[i] = reduce[i] ? 1 : x.dim(i);
    if (reduce[i]) count *= x.dim(i);
    if (!reduce[i] || keepdims) out_dims.push_back(full_dims[i]);
  }
  std::vector<int64_t> out_strides = RowMajorStrides(full_dims);
  for (int64_t i = 0; i < rank; ++i) {
    if (reduce[i]) out_strides[i] = 0;
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), out_dims);
  absl::Status status = absl::OkStatus();
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T>) {
      status = ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(x.dtype())));
    } else if constexpr (std::is_same_v<T, bool>) {
      if (op != ReduceOp::kMax && op != ReduceOp::kMin) {
        status = ctx.Unsupported("bool inputs (only ReduceMax and ReduceMin take bool)");
        return;
      }
      // Max = any, Min = all; the empty set gives false / true.
      const bool is_max = op == ReduceOp::kMax;
      bool* d = y.data<bool>();
      std::fill(d, d + y.num_elements(), !is_max);
      const bool* s = x.data<bool>();
      ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
        d[o] = is_max ? (d[o] || s[i]) : (d[o] && s[i]);
      });
    } else if constexpr (kIsFloatLike<T>) {
      ReduceInDouble<T>(op, x, out_strides, count, y);
    } else {
      if (op == ReduceOp::kL2 || op == ReduceOp::kLogSum || op == ReduceOp::kLogSumExp) {
        ReduceInDouble<T>(op, x, out_strides, count, y);
      } else {
        ReduceInteger<T>(op, x, out_strides, count, y);
      }
    }
  });
  return status;
}

// ArgMax/ArgMin: NaN counts as larger (ArgMax) or smaller (ArgMin) than every number, so the
// first NaN is picked, as NumPy does; select_last_index picks the last of equal candidates.
absl::Status ArgReduceKernel(KernelContext& ctx, bool is_max) {
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return ctx.Error("input must have rank >= 1");
  OTTR_ASSIGN_OR_RETURN(const int64_t axis, KernelAxis(ctx, ctx.attr_int("axis", 0), x.rank()));
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  const bool last = ctx.attr_int("select_last_index", 0) != 0;
  const int64_t len = x.dim(axis);
  std::vector<int64_t> out_dims = x.dims();
  if (keepdims) {
    out_dims[axis] = 1;
  } else {
    out_dims.erase(out_dims.begin() + axis);
  }
  const int64_t outer = DimsProduct(x.dims(), 0, axis);
  const int64_t inner = DimsProduct(x.dims(), axis + 1, x.rank());
  if (len == 0 && outer * inner > 0) {
    return ctx.Error(absl::StrCat("cannot take the arg", is_max ? "max" : "min",
                                  " of the empty axis ", axis));
  }
  int64_t* d = ctx.AllocateOutput(0, DType::kInt64, out_dims).data<int64_t>();
  absl::Status status = absl::OkStatus();
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T>) {
      status = ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(x.dtype())));
    } else {
      const T* s = x.data<T>();
      // Order key: -1 when a comes before b in the "best first" order, 0 when tied, 1 after.
      auto compare = [&](T a, T b) -> int {
        if constexpr (kIsFloatLike<T>) {
          const double u = ir::ToDouble(a), v = ir::ToDouble(b);
          const bool un = std::isnan(u), vn = std::isnan(v);
          if (un || vn) return un && vn ? 0 : (un ? -1 : 1);
          if (u == v) return 0;
          return (is_max ? u > v : u < v) ? -1 : 1;
        } else {
          if (a == b) return 0;
          return (is_max ? a > b : a < b) ? -1 : 1;
        }
      };
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = s + o * len * inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < len; ++k) {
            const int c = compare(p[k * inner], p[best * inner]);
            if (c < 0 || (c == 0 && last)) best = k;
          }
          d[o * inner + i] = best;
        }
      }
    }
  });
  return status;
}

// ottr::ReduceProdGrad(X, dYk) -> dX with dX_i = dYk[g(i)] · Π_{j ∈ G(i), j != i} X_j, where the
// group G(i) is the set of positions of X that broadcast onto the same dYk element g(i) (dYk has
// X's rank, each dim equal to X's or 1). Per group: the product P of its non-zero elements and
// the count z of zeros; then dX_i = dY · (z = 0: P / X_i; z = 1: P at the zero, 0 elsewhere;
// z >= 2: 0). Float element types, computed in double.
absl::Status ReduceProdGradKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  bool ok = x.rank() == dy.rank() && x.dtype() == dy.dtype();
  for (int64_t a = 0; ok && a < x.rank(); ++a) ok = dy.dim(a) == 1 || dy.dim(a) == x.dim(a);
  if (!ok) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(dy.dtype()), "[", absl::StrJoin(dy.dims(), ","),
                                  "] must have the type and rank of X ", ir::DTypeName(x.dtype()),
                                  "[", absl::StrJoin(x.dims(), ","), "] with each dim equal or 1"));
  }
  std::vector<int64_t> out_strides = RowMajorStrides(dy.dims());
  for (int64_t a = 0; a < x.rank(); ++a) {
    if (dy.dim(a) == 1) out_strides[a] = 0;
  }
  Tensor& dx = ctx.AllocateOutput(0, x.dtype(), x.dims());
  absl::Status status = absl::OkStatus();
  ir::VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_void_v<T> || !kIsFloatLike<T>) {
      status = ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(x.dtype())));
    } else {
      const T* xs = x.data<T>();
      const T* g = dy.data<T>();
      T* d = dx.data<T>();
      std::vector<double> prod(dy.num_elements(), 1.0);
      std::vector<int64_t> zeros(dy.num_elements(), 0);
      ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
        const double v = ir::ToDouble(xs[i]);
        if (v == 0.0) {
          ++zeros[o];
        } else {
          prod[o] *= v;
        }
      });
      ForEachReduced(x.dims(), out_strides, [&](int64_t i, int64_t o) {
        const double v = ir::ToDouble(xs[i]);
        double others = 0.0;
        if (zeros[o] == 0) {
          others = prod[o] / v;
        } else if (zeros[o] == 1 && v == 0.0) {
          others = prod[o];
        }
        d[i] = ir::FromDouble<T>(ir::ToDouble(g[o]) * others);
      });
    }
  });
  return status;
}

}  // namespace

void RegisterReductionKernels(KernelRegistry& r) {
  const std::pair<const char*, ReduceOp> ops[] = {
      {"ReduceSum", ReduceOp::kSum},       {"ReduceMean", ReduceOp::kMean},
      {"ReduceMax", ReduceOp::kMax},       {"ReduceMin", ReduceOp::kMin},
      {"ReduceProd", ReduceOp::kProd},     {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},         {"ReduceLogSum", ReduceOp::kLogSum},
      {"ReduceLogSumExp", ReduceOp::kLogSumExp}, {"ReduceSumSquare", ReduceOp::kSumSquare}};
  for (const auto& [name, op] : ops) {
    const ReduceOp o = op;
    r.Register("", name, [o](KernelContext& ctx) { return ReduceKernel(ctx, o); });
  }
  r.Register("", "ArgMax", [](KernelContext& ctx) { return ArgReduceKernel(ctx, true); });
  r.Register("", "ArgMin", [](KernelContext& ctx) { return ArgReduceKernel(ctx, false); });
  r.Register("ottr", "ReduceProdGrad", ReduceProdGradKernel);
}

}  // namespace ottr::runtime::cpu
