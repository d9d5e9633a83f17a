// CPU kernels of the activation ops (see ir/ops/activation_ops.cc for the schemas and formulas).
// Each op is a functor over the compute type (float for float/float16/bfloat16, double for
// double), applied by one contiguous loop; the formulas are arranged so that exp never overflows
// for the branch that is kept (Sigmoid, Softplus, Mish).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {
namespace {

using namespace ew;  // NOLINT: the element helpers are this file's vocabulary

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
template <typename C>
inline C Softplus(C x) {
  return Select(x > C(0), x, C(0)) + std::log1p(Exp(-std::fabs(x)));
}

// x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2), since tanh(log u) = (u^2 - 1) /
// (u^2 + 1) with u = 1 + e^x. Past x = 20 the factor is 1 in float and double (2/n < 2^-53).
template <typename C>
inline C Mish(C x) {
  const C e = Exp(Select(x > C(20), C(20), x));
  const C n = e * (e + C(2));
  return Select(x > C(20), x, x * n / (n + C(2)));
}

// max(0, min(1, alpha x + beta)); NaN stays NaN.
template <typename C>
inline C HardSigmoid(C x, C alpha, C beta) {
  const C v = alpha * x + beta;
  const C lo = Select(v < C(0), C(0), v);
  return Select(lo > C(1), C(1), lo);
}

// An activation without attributes: ops take (const KernelContext&) so all share one kernel.
#define OTTR_ACTIVATION_(Name, Supports, expr)  \
  struct Name {                                  \
    explicit Name(const KernelContext&) {}       \
    template <typename T>                        \
    static constexpr bool kSupports = Supports;  \
    template <typename C>                        \
    C operator()(C x) const {                    \
      return expr;                               \
    }                                            \
  };

// NaN stays NaN (x < 0 is false), as with NumPy's maximum(x, 0).
OTTR_ACTIVATION_(ReluOp, kIsFloat<T> || kIsSignedInt<T>, Select(x < C(0), C(0), x))
OTTR_ACTIVATION_(TanhOp, kIsFloat<T>, Tanh(x))
OTTR_ACTIVATION_(SoftplusOp, kIsFloat<T>, Softplus(x))
OTTR_ACTIVATION_(SoftsignOp, kIsFloat<T>, x / (C(1) + std::fabs(x)))
OTTR_ACTIVATION_(MishOp, kIsFloat<T>, Mish(x))
// alpha = 1/6, beta = 1/2 are fixed by the spec.
OTTR_ACTIVATION_(HardSwishOp, kIsFloat<T>, x* HardSigmoid(x, C(1.0 / 6.0), C(0.5)))
#undef OTTR_ACTIVATION_

struct SigmoidOp {
  explicit SigmoidOp(const KernelContext&) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    const C e = Exp(-std::fabs(x));  // in (0, 1]: never overflows
    const C r = C(1) / (C(1) + e);
    return Select(x >= C(0), r, e * r);
  }
};

struct LeakyReluOp {
  explicit LeakyReluOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 0.01f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return Select(x < C(0), C(alpha) * x, x);
  }
  float alpha;
};

struct EluOp {
  explicit EluOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return Select(x > C(0), x, C(alpha) * Expm1(x));
  }
  float alpha;
};

struct SeluOp {
  explicit SeluOp(const KernelContext& ctx)
      : alpha(ctx.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(ctx.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return C(gamma) * Select(x > C(0), x, C(alpha) * Expm1(x));
  }
  float alpha;
  float gamma;
};

struct CeluOp {
  explicit CeluOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); the second term is 0 exactly for x >= 0.
    return Select(x > C(0), x, C(alpha) * Expm1(x / C(alpha)));
  }
  float alpha;
};

struct HardSigmoidOp {
  explicit HardSigmoidOp(const KernelContext& ctx)
      : alpha(ctx.attr_float("alpha", 0.2f)), beta(ctx.attr_float("beta", 0.5f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return HardSigmoid(x, C(alpha), C(beta));
  }
  float alpha;
  float beta;
};

struct ThresholdedReluOp {
  explicit ThresholdedReluOp(const KernelContext& ctx) : alpha(ctx.attr_float("alpha", 1.0f)) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return Select(x > C(alpha), x, C(0));
  }
  float alpha;
};

// x Φ(x) with Φ(x) = erfc(−x/√2) / 2, and x σ(2u) for the tanh form ((1 + tanh u) / 2 = σ(2u)):
// neither cancels in the left tail, where 1 + erf and 1 + tanh would lose every digit. Two
// functors rather than one with a flag, so each loop is branch-free.
struct GeluTanhOp {
  explicit GeluTanhOp(const KernelContext&) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    // u = sqrt(2 / pi) (x + 0.044715 x^3)
    const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
    const C e = Exp(C(-2) * std::fabs(u));
    const C r = C(1) / (C(1) + e);
    return x * Select(u >= C(0), r, e * r);
  }
};

struct GeluErfOp {
  explicit GeluErfOp(const KernelContext&) {}
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T>;
  template <typename C>
  C operator()(C x) const {
    return C(0.5) * x * Erfc(x * C(-0.7071067811865476));  // -x / sqrt(2)
  }
};

template <typename Op>
absl::Status ActivationKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Op op(ctx);
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), x.dims());
  return ir::VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (Op::template kSupports<T>) {
      UnaryLoop(x.data<T>(), y.data<T>(), x.num_elements(), op);
      return absl::OkStatus();
    } else {
      return ctx.Unsupported(
          absl::StrCat("element type ", ir::DTypeName(x.dtype()), " is not supported"));
    }
  });
}

absl::Status GeluKernel(KernelContext& ctx) {
  const std::string approximate = ctx.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return ctx.Error(absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"",
                                  approximate, "\""));
  }
  return approximate == "tanh" ? ActivationKernel<GeluTanhOp>(ctx) : ActivationKernel<GeluErfOp>(ctx);
}

// PRelu: y = x < 0 ? slope * x : x, slope broadcast against x.
absl::Status PReluKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  if (x.dtype() != slope.dtype()) {
    return ctx.Error(absl::StrCat("X and slope have different element types ",
                                  ir::DTypeName(x.dtype()), " and ",
                                  ir::DTypeName(slope.dtype())));
  }
  absl::StatusOr<BroadcastPlan> plan = BroadcastPlan::Make({x.dims(), slope.dims()});
  if (!plan.ok()) return ctx.Error(plan.status().message());
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), plan->out_dims());
  return ir::VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return ctx.Unsupported(
          absl::StrCat("element type ", ir::DTypeName(x.dtype()), " is not supported"));
    } else {
      BroadcastBinary(*plan, x.data<T>(), slope.data<T>(), y.data<T>(), [](T xt, T st) -> T {
        if constexpr (kIsInt<T>) {
          if constexpr (std::is_signed_v<T>) {
            return xt < 0 ? WrapMul(st, xt) : xt;
          } else {
            return xt;
          }
        } else {
          const ComputeType<T> v = Load(xt);
          return Store<T>(Select(v < 0, Load(st) * v, v));
        }
      });
      return absl::OkStatus();
    }
  });
}

}  // namespace

void RegisterActivationGradKernels(KernelRegistry& r);  // activation_grad_kernels.cc

void RegisterActivationKernels(KernelRegistry& r) {
  r.Register("", "Relu", ActivationKernel<ReluOp>);
  r.Register("", "LeakyRelu", ActivationKernel<LeakyReluOp>);
  r.Register("", "PRelu", PReluKernel);
  r.Register("", "Sigmoid", ActivationKernel<SigmoidOp>);
  r.Register("", "Tanh", ActivationKernel<TanhOp>);
  r.Register("", "Gelu", GeluKernel);
  r.Register("", "Softplus", ActivationKernel<SoftplusOp>);
  r.Register("", "Softsign", ActivationKernel<SoftsignOp>);
  r.Register("", "Elu", ActivationKernel<EluOp>);
  r.Register("", "Selu", ActivationKernel<SeluOp>);
  r.Register("", "Celu", ActivationKernel<CeluOp>);
  r.Register("", "HardSigmoid", ActivationKernel<HardSigmoidOp>);
  r.Register("", "HardSwish", ActivationKernel<HardSwishOp>);
  r.Register("", "ThresholdedRelu", ActivationKernel<ThresholdedReluOp>);
  r.Register("", "Mish", ActivationKernel<MishOp>);
  RegisterActivationGradKernels(r);
}

}  // namespace ottr::runtime::cpu
