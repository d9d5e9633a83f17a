// CPU kernels for MatMul and Gemm, both on the blocked GEMM of gemm.h.
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

// Runs f.template operator()<T>() for the numeric element types GemmGeneric supports (floats
// and integers); other types are Unimplemented.
template <typename F>
absl::Status VisitGemmType(const KernelContext& ctx, DType t, F&& f) {
  if (t == DType::kBool || (!ir::IsFloat(t) && !ir::IsInteger(t))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), " is not supported"));
  }
  ir::VisitDType(t, [&]<typename T>() {
    if constexpr (!std::is_void_v<T> && !std::is_same_v<T, bool>) f.template operator()<T>();
  });
  return absl::OkStatus();
}

// MatMul with NumPy semantics: A [..., M, K] x B [..., K, N] -> [batch, M, N], where the batch
// dims broadcast and a 1-D operand is promoted to a matrix ([1, K] for A, [K, 1] for B) whose
// added dim is then dropped from the result.
absl::Status MatMulKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != b.dtype()) {
    return ctx.Error(
        absl::StrCat("A is ", ir::DTypeName(a.dtype()), " but B is ", ir::DTypeName(b.dtype())));
  }
  if (a.rank() == 0 || b.rank() == 0) {
    return ctx.Error(absl::StrCat("operands must have rank >= 1, got A ", DimsString(a.dims()),
                                  " and B ", DimsString(b.dims())));
  }
  std::vector<int64_t> ad = a.dims();
  std::vector<int64_t> bd = b.dims();
  const bool a_vector = ad.size() == 1;
  const bool b_vector = bd.size() == 1;
  if (a_vector) ad.insert(ad.begin(), 1);
  if (b_vector) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2];
  const int64_t k = ad[ad.size() - 1];
  const int64_t n = bd[bd.size() - 1];
  if (bd[bd.size() - 2] != k) {
    return ctx.Error(absl::StrCat("inner dimensions differ: A ", DimsString(a.dims()), " and B ",
                                  DimsString(b.dims())));
  }
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2);
  std::vector<int64_t> b_batch(bd.begin(), bd.end() - 2);
  std::optional<std::vector<int64_t>> batch = ir::BroadcastDims(a_batch, b_batch);
  if (!batch) {
    return ctx.Error(absl::StrCat("batch dimensions cannot be broadcast: A ", DimsString(a.dims()),
                                  " and B ", DimsString(b.dims())));
  }
  std::vector<int64_t> out_dims = *batch;
  if (!a_vector) out_dims.push_back(m);
  if (!b_vector) out_dims.push_back(n);
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), out_dims);
  const int64_t num_batches = ir::NumElements(*batch);
  if (num_batches == 0 || m == 0 || n == 0) return absl::OkStatus();

  // Per-dim matrix strides of A and B over the output batch (0 where an operand broadcasts).
  const size_t rank = batch->size();
  a_batch.insert(a_batch.begin(), rank - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), rank - b_batch.size(), 1);
  std::vector<int64_t> a_stride(rank, 0);
  std::vector<int64_t> b_stride(rank, 0);
  for (int64_t d = static_cast<int64_t>(rank) - 1, sa = 1, sb = 1; d >= 0; --d) {
    a_stride[d] = a_batch[d] == 1 ? 0 : sa;
    b_stride[d] = b_batch[d] == 1 ? 0 : sb;
    sa *= a_batch[d];
    sb *= b_batch[d];
  }
  const bool b_shared = ir::NumElements(b_batch) == 1;

  return VisitGemmType(ctx, a.dtype(), [&]<typename T>() {
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    if (b_shared) {
      // One B for every batch: the batches of A are consecutive rows of one (batch*M) x K matrix.
      GemmGeneric<T>(false, false, num_batches * m, n, k, 1.0, ap, k, bp, n, 0.0, yp, n);
      return;
    }
    // Batches run in parallel (each GEMM then on one thread); a single large one threads inside.
    ParallelFor(num_batches, static_cast<double>(m) * n * k, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int64_t ao = 0;
        int64_t bo = 0;
        for (int64_t d = static_cast<int64_t>(rank) - 1, rem = i; d >= 0; --d) {
          const int64_t idx = rem % (*batch)[d];
          rem /= (*batch)[d];
          ao += idx * a_stride[d];
          bo += idx * b_stride[d];
        }
        GemmGeneric<T>(false, false, m, n, k, 1.0, ap + ao * m * k, k, bp + bo * k * n, n, 0.0,
                       yp + i * m * n, n);
      }
    });
  });
}

// Gemm: Y = alpha * op(A) * op(B) + beta * C with C broadcast (unidirectionally) to [M, N].
absl::Status GemmKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool trans_a = ctx.attr_int("transA", 0) != 0;
  const bool trans_b = ctx.attr_int("transB", 0) != 0;
  const double alpha = ctx.attr_float("alpha", 1.0f);
  const double beta = ctx.attr_float("beta", 1.0f);
  if (a.rank() != 2 || b.rank() != 2) {
    return ctx.Error(
        absl::StrCat("A ", DimsString(a.dims()), " and B ", DimsString(b.dims()), " must be 2-D"));
  }
  if (a.dtype() != b.dtype() || (ctx.has_input(2) && ctx.input(2).dtype() != a.dtype())) {
    return ctx.Error("A, B and C must have the same element type");
  }
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != kb) {
    return ctx.Error(absl::StrCat("inner dimensions differ: A ", DimsString(a.dims()),
                                  trans_a ? " (transA)" : "", " and B ", DimsString(b.dims()),
                                  trans_b ? " (transB)" : ""));
  }
  const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  int64_t c_rows = 1;
  int64_t c_cols = 1;
  if (c != nullptr) {
    const std::vector<int64_t>& cd = c->dims();
    if (cd.size() == 2) {
      c_rows = cd[0];
      c_cols = cd[1];
    } else if (cd.size() == 1) {
      c_cols = cd[0];
    }
    if (cd.size() > 2 || (c_rows != 1 && c_rows != m) || (c_cols != 1 && c_cols != n)) {
      return ctx.Error(absl::StrCat("C ", DimsString(cd), " does not broadcast to the output [", m,
                                    ",", n, "]"));
    }
  }
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), {m, n});
  if (m == 0 || n == 0) return absl::OkStatus();
  return VisitGemmType(ctx, a.dtype(), [&]<typename T>() {
    T* yp = y.data<T>();
    double beta_used = 0.0;
    if (c != nullptr && beta != 0.0) {
      const T* cp = c->data<T>();
      for (int64_t i = 0; i < m; ++i) {
        const T* row = cp + (c_rows == 1 ? 0 : i * c_cols);
        for (int64_t j = 0; j < n; ++j) yp[i * n + j] = row[c_cols == 1 ? 0 : j];
      }
      beta_used = beta;
    }
    GemmGeneric<T>(trans_a, trans_b, m, n, k, alpha, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
                   beta_used, yp, n);
  });
}

// ottr::GroupedGemm (ir/ops/fused_ops.cc): Yi = alpha[i] · op(Ai) · op(Bi), each product as the Gemm
// kernel computes it without C (GemmGeneric, beta 0): the same bits as the Gemm nodes it groups.
absl::Status GroupedGemmKernel(KernelContext& ctx) {
  const int count = ctx.num_outputs();
  const std::vector<int64_t> ta = ctx.attr_ints("transA"), tb = ctx.attr_ints("transB");
  const std::vector<float> alpha = ctx.attr_floats("alpha");
  if (ctx.num_inputs() != 2 * count || static_cast<int>(ta.size()) != count ||
      static_cast<int>(tb.size()) != count || static_cast<int>(alpha.size()) != count) {
    return ctx.Error(absl::StrCat("needs 2 inputs per output and transA, transB and alpha with one entry per output (",
                                  ctx.num_inputs(), " inputs, ", count, " outputs)"));
  }
  for (int i = 0; i < count; ++i) {
    const Tensor& a = ctx.input(2 * i);
    const Tensor& b = ctx.input(2 * i + 1);
    if (a.rank() != 2 || b.rank() != 2 || a.dtype() != b.dtype() || !ir::IsFloat(a.dtype())) {
      return ctx.Error(absl::StrCat("product ", i, ": A ", DimsString(a.dims()), " and B ", DimsString(b.dims()),
                                    " must be 2-D of one float type"));
    }
    const int64_t m = ta[i] ? a.dim(1) : a.dim(0), k = ta[i] ? a.dim(0) : a.dim(1);
    const int64_t kb = tb[i] ? b.dim(1) : b.dim(0), n = tb[i] ? b.dim(0) : b.dim(1);
    if (k != kb) {
      return ctx.Error(absl::StrCat("product ", i, ": inner dimensions differ: A ", DimsString(a.dims()),
                                    ta[i] ? " (transA)" : "", " and B ", DimsString(b.dims()),
                                    tb[i] ? " (transB)" : ""));
    }
    Tensor& y = ctx.AllocateOutput(i, a.dtype(), {m, n});
    if (m == 0 || n == 0) continue;
    OTTR_RETURN_IF_ERROR(VisitGemmType(ctx, a.dtype(), [&]<typename T>() {
      GemmGeneric<T>(ta[i] != 0, tb[i] != 0, m, n, k, static_cast<double>(alpha[i]), a.data<T>(), a.dim(1),
                     b.data<T>(), b.dim(1), 0.0, y.data<T>(), n);
    }));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgKernels(KernelRegistry& r) {
  r.Register("", "MatMul", MatMulKernel);
  r.Register("", "Gemm", GemmKernel);
  r.Register(std::string(ir::kOttrDomain), ir::kGroupedGemmOp, GroupedGemmKernel);
}

}  // namespace ottr::runtime::cpu
