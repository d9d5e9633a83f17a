// CPU reference of ottr::FusedGemm (contract: ir/fused_gemm.h).
//
// Each epilogue performs the same arithmetic, in the same order, as the unfused nodes it replaces,
// so a fused step graph computes the same bits as the unfused one on the CPU:
//   bias epilogues: bias broadcast into Y, then GemmGeneric with beta = 1 (Gemm's C path);
//   relu: Select(x < 0, 0, x) (Relu); tanh GELU: GeluTanhOp of activation_kernels.cc;
//   drelu: Select(mask, dy, 0) (ReluGrad with [Y > 0]); dgelu: GeluTanhGradOp's formula;
//   bias gradients: the column (or row) sums accumulate in double in row order, as ReduceSum.
// With output_type f32 on 16-bit A and B, A and B are widened to float (exact) and the float32
// path runs: the product accumulates in float and is rounded once to float, where the 16-bit
// default (GemmGeneric: float accumulation, one rounding to the 16-bit type) rounds once to the
// 16-bit type. A Cast to f32 after the default therefore differs from it by that one rounding.
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

using ir::FusedEpilogue;
using namespace ew;  // NOLINT: Load/Store/Select/Exp of the elementwise kernels

// The tanh GELU of GeluTanhOp (activation_kernels.cc), same expression.
template <typename C>
OTTR_EW_INLINE C GeluTanh(C x) {
  const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
  const C e = Exp(C(-2) * std::fabs(u));
  const C r = C(1) / (C(1) + e);
  return x * Select(u >= C(0), r, e * r);
}

// dy · gelu'(x) as GeluTanhGradOp (activation_grad_kernels.cc), same expression.
template <typename C>
OTTR_EW_INLINE C GeluTanhGrad(C dy, C x) {
  constexpr double kBeta = 0.7978845608028654;  // √(2/π)
  constexpr double kKappa = 0.044715;
  const C x2 = x * x;
  const C u = C(kBeta) * (x + C(kKappa) * x2 * x);
  const C e = Exp(C(-2) * std::fabs(u));
  const C r = C(1) / (C(1) + e);
  const C s = Select(u >= C(0), r, e * r);
  const C d = C(kBeta) * (C(1) + C(3 * kKappa) * x2);
  return dy * (s + C(2) * x * e * r * r * d);
}

// Float copy of a 16-bit tensor (exact).
Tensor Widen(const Tensor& t) {
  Tensor out(DType::kFloat32, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data<float>()[i] = static_cast<float>(t.GetAsDouble(i));
  return out;
}

// a, b: the operands in Y's element type T (ctx's inputs, or their widened copies).
template <typename T>
absl::Status RunFused(KernelContext& ctx, const Tensor& a, const Tensor& b, FusedEpilogue e, bool ta, bool tb,
                      int64_t m, int64_t n, int64_t k, float alpha) {
  using C = ComputeType<T>;
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), {m, n});
  T* yp = y.data<T>();
  double beta = 0.0;
  if (ir::EpilogueTakesBias(e)) {
    const T* bias = ctx.input(2).data<T>();
    for (int64_t i = 0; i < m; ++i) std::memcpy(yp + i * n, bias, n * sizeof(T));
    beta = 1.0;
  }
  if (m > 0 && n > 0) {
    GemmGeneric<T>(ta, tb, m, n, k, alpha, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), beta, yp, n);
  }
  const int64_t mask_row = ir::ReluMaskRowBytes(n);
  switch (e) {
    case FusedEpilogue::kNone:
    case FusedEpilogue::kBias:
    case FusedEpilogue::kBgradA:
    case FusedEpilogue::kBgradB:
      break;
    case FusedEpilogue::kReluBias:
      for (int64_t i = 0; i < m * n; ++i) yp[i] = Store<T>(Select(Load(yp[i]) < C(0), C(0), Load(yp[i])));
      break;
    case FusedEpilogue::kReluAuxBias: {
      Tensor& mask = ctx.AllocateOutput(1, DType::kUInt8, {m, mask_row});
      uint8_t* mp = mask.data<uint8_t>();
      std::memset(mp, 0, m * mask_row);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const C x = Load(yp[i * n + j]);
          if (x > C(0)) mp[i * mask_row + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
          yp[i * n + j] = Store<T>(Select(x < C(0), C(0), x));
        }
      }
      break;
    }
    case FusedEpilogue::kGeluBias:
    case FusedEpilogue::kGeluAuxBias: {
      if (e == FusedEpilogue::kGeluAuxBias) {
        Tensor& pre = ctx.AllocateOutput(1, a.dtype(), {m, n});
        std::memcpy(pre.data<T>(), yp, m * n * sizeof(T));
      }
      for (int64_t i = 0; i < m * n; ++i) yp[i] = Store<T>(GeluTanh(Load(yp[i])));
      break;
    }
    case FusedEpilogue::kDRelu:
    case FusedEpilogue::kDReluBgrad: {
      const uint8_t* mp = ctx.input(3).data<uint8_t>();
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const bool on = (mp[i * mask_row + j / 8] >> (j % 8)) & 1u;
          if (!on) yp[i * n + j] = Store<T>(C(0));
        }
      }
      break;
    }
    case FusedEpilogue::kDGelu:
    case FusedEpilogue::kDGeluBgrad: {
      const T* pre = ctx.input(3).data<T>();
      for (int64_t i = 0; i < m * n; ++i) yp[i] = Store<T>(GeluTanhGrad(Load(yp[i]), Load(pre[i])));
      break;
    }
  }
  if (!ir::EpilogueWritesBiasGrad(e)) return absl::OkStatus();
  // Bias gradients: sums in double, rows in increasing order (ReduceSum's order).
  if (e == FusedEpilogue::kBgradA) {
    // db[i] = Σ_k op(A)[i, k]: A [M, K] sums its rows (axis 1), Aᵀ (A [K, M]) its columns (axis 0).
    Tensor& db = ctx.AllocateOutput(1, a.dtype(), {m});
    std::vector<double> acc(m, 0.0);
    const T* ap = a.data<T>();
    for (int64_t r = 0; r < a.dim(0); ++r) {
      for (int64_t c = 0; c < a.dim(1); ++c) acc[ta ? c : r] += ir::ToDouble(ap[r * a.dim(1) + c]);
    }
    for (int64_t i = 0; i < m; ++i) db.data<T>()[i] = ir::FromDouble<T>(acc[i]);
    return absl::OkStatus();
  }
  const T* src = yp;  // drelu/dgelu: Σ_i Y[i, :]
  int64_t rows = m, cols = n;
  bool by_column = true;  // sum over rows, one result per column
  if (e == FusedEpilogue::kBgradB) {
    // db[j] = Σ_k op(B)[k, j]: B [K, N] sums its columns (axis 0), Bᵀ (B [N, K]) its rows (axis 1).
    src = b.data<T>();
    rows = b.dim(0);
    cols = b.dim(1);
    by_column = !tb;
  }
  Tensor& db = ctx.AllocateOutput(1, a.dtype(), {n});
  std::vector<double> acc(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) acc[by_column ? c : r] += ir::ToDouble(src[r * cols + c]);
  }
  for (int64_t j = 0; j < n; ++j) db.data<T>()[j] = ir::FromDouble<T>(acc[j]);
  return absl::OkStatus();
}

absl::Status FusedGemmKernel(KernelContext& ctx) {
  const std::string name = ctx.attr_string("epilogue", "bias");
  const std::optional<FusedEpilogue> e = ir::ParseFusedEpilogue(name);
  if (!e) return ctx.Error(absl::StrCat("unknown epilogue \"", name, "\""));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.rank() != 2 || b.rank() != 2 || a.dtype() != b.dtype()) {
    return ctx.Error("A and B must be 2-D with one element type");
  }
  const bool ta = ctx.attr_int("transA", 0) != 0;
  const bool tb = ctx.attr_int("transB", 0) != 0;
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  if ((tb ? b.dim(1) : b.dim(0)) != k) return ctx.Error("inner dimensions differ");
  if (ir::EpilogueTakesBias(*e) && (!ctx.has_input(2) || ctx.input(2).num_elements() != n)) {
    return ctx.Error(absl::StrCat("epilogue ", name, " needs a bias of ", n, " elements"));
  }
  if (ir::EpilogueTakesAux(*e)) {
    if (!ctx.has_input(3)) return ctx.Error(absl::StrCat("epilogue ", name, " needs its aux input"));
    const std::vector<int64_t> want = ir::EpilogueIsRelu(*e) ? std::vector<int64_t>{m, ir::ReluMaskRowBytes(n)}
                                                             : std::vector<int64_t>{m, n};
    if (ctx.input(3).dims() != want) return ctx.Error("aux input has the wrong shape");
  }
  const float alpha = ctx.attr_float("alpha", 1.0f);
  const DType y_type = static_cast<DType>(ctx.attr_int("output_type", ir::DTypeToOnnx(a.dtype())));
  if (y_type != a.dtype()) {
    if (y_type != DType::kFloat32 || (a.dtype() != DType::kBFloat16 && a.dtype() != DType::kFloat16)) {
      return ctx.Unsupported(absl::StrCat("output type ", ir::DTypeName(y_type), " for ", ir::DTypeName(a.dtype()),
                                          " operands (only f32 for f16/bf16)"));
    }
    for (int i : {2, 3}) {
      if (ctx.has_input(i) && ctx.input(i).dtype() != y_type && !(i == 3 && ir::EpilogueIsRelu(*e))) {
        return ctx.Error(absl::StrCat("input ", i, " is ", ir::DTypeName(ctx.input(i).dtype()),
                                      ", not the output type ", ir::DTypeName(y_type)));
      }
    }
    return RunFused<float>(ctx, Widen(a), Widen(b), *e, ta, tb, m, n, k, alpha);
  }
  switch (a.dtype()) {
    case DType::kFloat32: return RunFused<float>(ctx, a, b, *e, ta, tb, m, n, k, alpha);
    case DType::kFloat64: return RunFused<double>(ctx, a, b, *e, ta, tb, m, n, k, alpha);
    case DType::kFloat16: return RunFused<ir::Half>(ctx, a, b, *e, ta, tb, m, n, k, alpha);
    case DType::kBFloat16: return RunFused<ir::BFloat16>(ctx, a, b, *e, ta, tb, m, n, k, alpha);
    default:
      return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(a.dtype()), " is not supported"));
  }
}

}  // namespace

void RegisterFusedGemmKernels(KernelRegistry& r) {
  r.Register(std::string(ir::kOttrDomain), ir::kFusedGemmOp, FusedGemmKernel);
}

}  // namespace ottr::runtime::cpu
