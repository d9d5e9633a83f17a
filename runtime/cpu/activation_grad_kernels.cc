// CPU kernels of the activation backward ops (schemas and math in ir/grads/activation_grads.cc):
//   ottr::{Relu,LeakyRelu,Sigmoid,Tanh,Gelu,Elu,Selu,Celu,Softplus,HardSigmoid,HardSwish,Mish,
//          Softsign,ThresholdedRelu}Grad(dY, Z) -> dX     and    ottr::PReluGrad(dY, X, slope);
//   ottr::LinearReluGrad(dZ, W, Y) -> (dX, dB[, dW, dBz]) (ir/ops/fused_ops.cc): a small linear
//     layer's data gradient through ReluGrad, the column sums, the weight gradient
//   ottr::ReluGradBiasGrad(dY, Y) -> (dX, dB) (ir/ops/fused_ops.cc): ReluGrad and the column
//   sums of dX, summed in double and rounded once to bias_type.
//
// Each elementwise op is a functor f(dy, z) over the compute type (float for float, float16 and
// bfloat16; double for double) run by one contiguous loop. Branches are bitwise selects and exp,
// tanh and erfc are the inline float versions of elementwise_common.h, so the float loops
// vectorise.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {
namespace {

using namespace ew;  // NOLINT: the element helpers are this file's vocabulary

std::string DimsString(const std::vector<int64_t>& dims) {
  return ir::ShapeToString(ir::ShapeFromDims(dims));
}

// σ(x) without overflow: e = e^(−|x|) ∈ (0, 1], σ = 1/(1 + e) for x ≥ 0, e/(1 + e) below.
template <typename C>
inline C Sigmoid(C x) {
  const C e = Exp(-std::fabs(x));
  const C r = C(1) / (C(1) + e);
  return Select(x >= C(0), r, e * r);
}

// A backward op without attributes.
#define OTTR_ACTIVATION_GRAD_(Name, expr)   \
  struct Name {                             \
    explicit Name(const KernelContext&) {}  \
    template <typename C>                   \
    C operator()(C dy, C z) const {         \
      return expr;                          \
    }                                       \
  };

// z = Y.
OTTR_ACTIVATION_GRAD_(ReluGradOp, Select(z > C(0), dy, C(0)))
OTTR_ACTIVATION_GRAD_(SigmoidGradOp, dy* z*(C(1) - z))
// 1 − Y² as (1 − Y)(1 + Y): 1 − Y is exact for |Y| ≥ 1/2, so no cancellation near |Y| = 1.
OTTR_ACTIVATION_GRAD_(TanhGradOp, dy*((C(1) - z) * (C(1) + z)))
// z = X.
OTTR_ACTIVATION_GRAD_(SoftplusGradOp, dy* Sigmoid(z))
OTTR_ACTIVATION_GRAD_(SoftsignGradOp, dy / ((C(1) + std::fabs(z)) * (C(1) + std::fabs(z))))
OTTR_ACTIVATION_GRAD_(HardSwishGradOp,
                      dy* Select(z < C(-3), C(0), Select(z <= C(3), z / C(3) + C(0.5), C(1))))
#undef OTTR_ACTIVATION_GRAD_

// d/dx x tanh(softplus(x)) = t + x (1 − t²) σ(x). With e = eˣ and n = e (e + 2):
// t = n / (n + 2) (tanh(log u) = (u² − 1)/(u² + 1), u = 1 + e), 1 − t² = 4 (n + 1) / (n + 2)²,
// σ = e / (1 + e). Past x = 20 the derivative is 1 in float and double (as in the forward).
struct MishGradOp {
  explicit MishGradOp(const KernelContext&) {}
  template <typename C>
  C operator()(C dy, C x) const {
    const C e = Exp(Select(x > C(20), C(20), x));
    const C n = e * (e + C(2));
    const C inv = C(1) / (n + C(2));
    const C t = n * inv;
    const C sech2 = C(4) * (n + C(1)) * inv * inv;
    const C sig = e / (C(1) + e);
    return dy * Select(x > C(20), C(1), t + x * sech2 * sig);
  }
};

struct LeakyReluGradOp {
  explicit LeakyReluGradOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 0.01f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    return dy * Select(x > C(0), C(1), C(alpha));
  }
  float alpha;
};

struct ThresholdedReluGradOp {
  explicit ThresholdedReluGradOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    return Select(x > C(alpha), dy, C(0));
  }
  float alpha;
};

struct EluGradOp {
  explicit EluGradOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    return dy * Select(x > C(0), C(1), C(alpha) * Exp(x));
  }
  float alpha;
};

struct SeluGradOp {
  explicit SeluGradOp(const KernelContext& ctx)
      : alpha(ctx.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(ctx.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    return dy * C(gamma) * Select(x > C(0), C(1), C(alpha) * Exp(x));
  }
  float alpha;
  float gamma;
};

struct CeluGradOp {
  explicit CeluGradOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    return dy * Select(x > C(0), C(1), Exp(x / C(alpha)));
  }
  float alpha;
};

struct HardSigmoidGradOp {
  explicit HardSigmoidGradOp(const KernelContext& ctx)
      : alpha(ctx.attr_float("alpha", 0.2f)), beta(ctx.attr_float("beta", 0.5f)) {}
  template <typename C>
  C operator()(C dy, C x) const {
    const C v = C(alpha) * x + C(beta);
    return Select((v > C(0)) & (v < C(1)), dy * C(alpha), C(0));
  }
  float alpha;
  float beta;
};

// Both forms are arranged so that nothing cancels in the left tail, where the derivative is tiny
// and 1 + erf and 1 + tanh would lose every digit:
//   none: Φ(x) = erfc(−x/√2) / 2;
//   tanh: with e = e^(−2|u|) and r = 1 / (1 + e), (1 + t) / 2 = σ(2u) = (u ≥ 0 ? r : e r) and
//         1 − t² = 4 σ(2u) σ(−2u) = 4 e r², so dX = dY · (σ(2u) + 2 X e r² · √(2/π) (1 + 3κX²)).
// (Two functors rather than one with a flag, so each loop is branch-free.)
struct GeluTanhGradOp {
  explicit GeluTanhGradOp(const KernelContext&) {}
  template <typename C>
  C operator()(C dy, C x) const {
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
};

struct GeluErfGradOp {
  explicit GeluErfGradOp(const KernelContext&) {}
  template <typename C>
  C operator()(C dy, C x) const {
    const C cdf = C(0.5) * Erfc(x * C(-0.7071067811865476));  // −x / √2
    const C pdf = Exp(C(-0.5) * x * x) * C(0.3989422804014327);  // 1 / √(2π)
    return dy * (cdf + x * pdf);
  }
};

// dX = Op(dY, Z) for dY and Z of one float type and shape.
template <typename Op>
absl::Status ActivationGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& z = ctx.input(1);
  if (dy.dtype() != z.dtype() || dy.dims() != z.dims()) {
    return ctx.Error(absl::StrCat("dY ", ir::DTypeName(dy.dtype()), DimsString(dy.dims()),
                                  " and the forward tensor ", ir::DTypeName(z.dtype()),
                                  DimsString(z.dims()), " must have one type and shape"));
  }
  const Op op(ctx);
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), dy.dims());
  return ir::VisitDType(dy.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (kIsFloat<T>) {
      BinaryLoop(dy.data<T>(), z.data<T>(), dx.data<T>(), dy.num_elements(), op);
      return absl::OkStatus();
    } else {
      return ctx.Unsupported(
          absl::StrCat("element type ", ir::DTypeName(dy.dtype()), " is not supported"));
    }
  });
}

// ReluGradBiasGrad(dY, Y) -> (dX, dB[, dXT]): dX as ReluGrad, dB[c] = Σ_r dX[r, c] in double,
// dXT[c, r] = dX[r, c].
absl::Status ReluGradBiasGradKernel(KernelContext& ctx) {
  OTTR_RETURN_IF_ERROR(ActivationGradKernel<ReluGradOp>(ctx));
  const Tensor& dx = ctx.output(0);
  if (dx.dims().size() != 2) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dx.dims()), " must be 2-D"));
  }
  const int64_t rows = dx.dims()[0], cols = dx.dims()[1];
  ir::DType bt = dx.dtype();
  if (ctx.node().attr("bias_type") != nullptr) {
    OTTR_ASSIGN_OR_RETURN(bt, ir::DTypeFromOnnx(static_cast<int32_t>(ctx.attr_int("bias_type", 0))));
  }
  Tensor& db = ctx.AllocateOutput(1, bt, {cols});
  Tensor* dxt = ctx.num_outputs() > 2 ? &ctx.AllocateOutput(2, dx.dtype(), {cols, rows}) : nullptr;
  return ir::VisitDType(dx.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (kIsFloat<T>) {
      if (dxt != nullptr) {
        const T* src = dx.data<T>();
        T* dst = dxt->data<T>();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
        }
      }
      const std::vector<double> acc =
          ColumnSumsInDouble(dx.data<T>(), rows, cols, [](T v) { return static_cast<double>(Load(v)); });
      return ir::VisitDType(bt, [&]<typename B>() -> absl::Status {
        if constexpr (kIsFloat<B>) {
          for (int64_t c = 0; c < cols; ++c) db.data<B>()[c] = ConvertElement<B, double>(acc[c]);
          return absl::OkStatus();
        } else {
          return ctx.Unsupported(absl::StrCat("bias_type ", ir::DTypeName(bt), " is not supported"));
        }
      });
    } else {
      return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(dx.dtype()), " is not supported"));
    }
  });
}

}  // namespace

void LinearReluGradRows(const float* pz, const float* pw, const float* py, int64_t rows, int64_t cols, int64_t k,
                        int64_t m, float* pdx, float* db, float* dw, float* dbz) {
  if (m > 0) {
    std::vector<double> sum_w(k * cols, 0.0), sum_z(k, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        const double z = pz[r * k + j];
        sum_z[j] += z;
        for (int64_t c = 0; c < cols; ++c) sum_w[j * cols + c] += z * py[r * cols + c];
      }
    }
    for (int64_t i = 0; i < m * cols; ++i) dw[i] = static_cast<float>(sum_w[i]);
    for (int64_t j = 0; j < m; ++j) dbz[j] = static_cast<float>(sum_z[j]);
  }
  std::vector<double> sum_b(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double g = 0;
      for (int64_t j = 0; j < k; ++j) g += static_cast<double>(pz[r * k + j]) * pw[j * cols + c];
      const float v = py[r * cols + c] > 0.0f ? static_cast<float>(g) : 0.0f;
      pdx[r * cols + c] = v;
      sum_b[c] += v;
    }
  }
  for (int64_t c = 0; c < cols; ++c) db[c] = static_cast<float>(sum_b[c]);
}

namespace {

// LinearReluGrad(dZ, W, Y) -> (dX, dB[, dW, dBz]) (ir/ops/fused_ops.cc): every sum in double, each
// result rounded once to float32.
absl::Status LinearReluGradKernel(KernelContext& ctx) {
  const Tensor& dz = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (dz.dtype() != ir::DType::kFloat32 || w.dtype() != ir::DType::kFloat32 || y.dtype() != ir::DType::kFloat32 ||
      dz.dims().size() != 2 || w.dims().size() != 2 || y.dims().size() != 2 || dz.dims()[1] != w.dims()[0] ||
      dz.dims()[0] != y.dims()[0] || w.dims()[1] != y.dims()[1]) {
    return ctx.Error(absl::StrCat("dZ ", DimsString(dz.dims()), ", W ", DimsString(w.dims()), " and Y ",
                                  DimsString(y.dims()), " must be f32 [R, K], [K, N], [R, N]"));
  }
  const int64_t rows = y.dims()[0], cols = y.dims()[1], k = w.dims()[0];
  float* dw = nullptr;
  float* dbz = nullptr;
  int64_t m = 0;
  if (ctx.num_outputs() > 2) {
    // {weight_rows = M}: only dW's and dBz's first M rows (each value as without the attribute).
    m = ctx.attr_int("weight_rows", k);
    if (m < 1 || m > k) return ctx.Error(absl::StrCat("weight_rows = ", m, " must be 1 to K = ", k));
    dw = ctx.AllocateOutput(2, ir::DType::kFloat32, {m, cols}).data<float>();
    dbz = ctx.AllocateOutput(3, ir::DType::kFloat32, {m}).data<float>();
  }
  // dX may be Y's buffer (memory_planner.cc's in-place rules): LinearReluGradRows reads Y for dW
  // before it writes dX, and each element of Y before the element of dX in its place.
  float* dx = ctx.AllocateOutput(0, ir::DType::kFloat32, {rows, cols}).data<float>();
  float* db = ctx.AllocateOutput(1, ir::DType::kFloat32, {cols}).data<float>();
  LinearReluGradRows(dz.data<float>(), w.data<float>(), y.data<float>(), rows, cols, k, m, dx, db, dw, dbz);
  return absl::OkStatus();
}

absl::Status GeluGradKernel(KernelContext& ctx) {
  const std::string approximate = ctx.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return ctx.Error(absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"",
                                  approximate, "\""));
  }
  return approximate == "tanh" ? ActivationGradKernel<GeluTanhGradOp>(ctx)
                               : ActivationGradKernel<GeluErfGradOp>(ctx);
}

// Σ_i (x_i > 0 ? 0 : x_i · dy_i) over n elements (x with stride sx ∈ {0, 1}), in double with
// eight independent partial sums so the additions pipeline.
template <typename T>
double NegativePartDot(const T* x, int64_t sx, const T* dy, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double xv = static_cast<double>(Load(x[(i + k) * sx]));
      acc[k] += xv > 0 ? 0.0 : xv * static_cast<double>(Load(dy[i + k]));
    }
  }
  for (; i < n; ++i) {
    const double xv = static_cast<double>(Load(x[i * sx]));
    acc[0] += xv > 0 ? 0.0 : xv * static_cast<double>(Load(dy[i]));
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// PReluGrad(dY, X, slope) -> (dX, dSlope); dY has the broadcast shape of X and slope.
absl::Status PReluGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& slope = ctx.input(2);
  if (x.dtype() != dy.dtype() || slope.dtype() != dy.dtype()) {
    return ctx.Error(absl::StrCat("dY, X and slope must have one element type, got ",
                                  ir::DTypeName(dy.dtype()), ", ", ir::DTypeName(x.dtype()),
                                  " and ", ir::DTypeName(slope.dtype())));
  }
  absl::StatusOr<BroadcastPlan> plan = BroadcastPlan::Make({x.dims(), slope.dims()});
  if (!plan.ok()) return ctx.Error(plan.status().message());
  if (plan->out_dims() != dy.dims()) {
    return ctx.Error(absl::StrCat("dY has shape ", DimsString(dy.dims()),
                                  " but X and slope broadcast to ",
                                  DimsString(plan->out_dims())));
  }
  Tensor& dx = ctx.AllocateOutput(0, dy.dtype(), dy.dims());
  Tensor& dslope = ctx.AllocateOutput(1, slope.dtype(), slope.dims());
  return ir::VisitDType(dy.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsFloat<T>) {
      return ctx.Unsupported(
          absl::StrCat("element type ", ir::DTypeName(dy.dtype()), " is not supported"));
    } else {
      using C = ComputeType<T>;
      const T* pdy = dy.data<T>();
      const T* px = x.data<T>();
      const T* ps = slope.data<T>();
      T* pdx = dx.data<T>();
      std::vector<double> acc(slope.num_elements(), 0.0);
      const int64_t sx = plan->inner_stride(0);
      const bool slope_runs = plan->inner_stride(1) != 0;
      plan->ForEachRun([&](int64_t o, const int64_t* off, int64_t n) {
        const T* rx = px + off[0];
        const T* rdy = pdy + o;
        T* rdx = pdx + o;
        if (!slope_runs) {
          // One slope value for the run (e.g. slope [C,1,1] against [N,C,H,W]).
          const C s = Load(ps[off[1]]);
          if (sx == 1) {
            for (int64_t i = 0; i < n; ++i) {
              const C xv = Load(rx[i]);
              const C d = Load(rdy[i]);
              rdx[i] = Store<T>(Select(xv > C(0), d, s * d));
            }
          } else {
            const C xv = Load(*rx);
            for (int64_t i = 0; i < n; ++i) {
              const C d = Load(rdy[i]);
              rdx[i] = Store<T>(Select(xv > C(0), d, s * d));
            }
          }
          acc[off[1]] += NegativePartDot(rx, sx, rdy, n);
        } else {
          const T* rs = ps + off[1];
          double* racc = acc.data() + off[1];
          for (int64_t i = 0; i < n; ++i) {
            const C xv = Load(rx[i * sx]);
            const C d = Load(rdy[i]);
            rdx[i] = Store<T>(Select(xv > C(0), d, Load(rs[i]) * d));
            racc[i] += xv > C(0) ? 0.0 : static_cast<double>(xv) * static_cast<double>(d);
          }
        }
      });
      T* pds = dslope.data<T>();
      for (size_t k = 0; k < acc.size(); ++k) pds[k] = Store<T>(static_cast<C>(acc[k]));
      return absl::OkStatus();
    }
  });
}

}  // namespace

void RegisterActivationGradKernels(KernelRegistry& r) {
  const std::string d(ir::kOttrDomain);
  r.Register(d, "ReluGrad", ActivationGradKernel<ReluGradOp>);
  r.Register(d, "ReluGradBiasGrad", ReluGradBiasGradKernel);
  r.Register(d, "LinearReluGrad", LinearReluGradKernel);
  r.Register(d, "LeakyReluGrad", ActivationGradKernel<LeakyReluGradOp>);
  r.Register(d, "SigmoidGrad", ActivationGradKernel<SigmoidGradOp>);
  r.Register(d, "TanhGrad", ActivationGradKernel<TanhGradOp>);
  r.Register(d, "GeluGrad", GeluGradKernel);
  r.Register(d, "EluGrad", ActivationGradKernel<EluGradOp>);
  r.Register(d, "SeluGrad", ActivationGradKernel<SeluGradOp>);
  r.Register(d, "CeluGrad", ActivationGradKernel<CeluGradOp>);
  r.Register(d, "SoftplusGrad", ActivationGradKernel<SoftplusGradOp>);
  r.Register(d, "HardSigmoidGrad", ActivationGradKernel<HardSigmoidGradOp>);
  r.Register(d, "HardSwishGrad", ActivationGradKernel<HardSwishGradOp>);
  r.Register(d, "MishGrad", ActivationGradKernel<MishGradOp>);
  r.Register(d, "SoftsignGrad", ActivationGradKernel<SoftsignGradOp>);
  r.Register(d, "ThresholdedReluGrad", ActivationGradKernel<ThresholdedReluGradOp>);
  r.Register(d, "PReluGrad", PReluGradKernel);
}

}  // namespace ottr::runtime::cpu
