// CPU kernels of the elementwise ops (see ir/ops/elementwise_ops.cc for the schemas).
//
// Semantics follow the ONNX spec and its NumPy reference:
//   - integer Add/Sub/Mul/Neg/Abs wrap modulo 2^bits; integer Div truncates toward zero (C);
//     integer division or Mod by zero is an InvalidArgument error (no meaningful result);
//   - Mod fmod=0: result has the divisor's sign (Python %), fmod=1: the dividend's (C fmod);
//   - Pow computes int^int exactly (wrapping), float^float in the base type, and mixed
//     float/int pairs in double (as NumPy's type promotion does) before converting to T;
//   - Max/Min propagate NaN; Clip with min > max yields max everywhere;
//   - Cast truncates float -> int toward zero, saturates out-of-range values and maps NaN to 0
//     (ONNX leaves both undefined), and rounds float/double/int -> float16/bfloat16 to nearest
//     even once (double is first rounded to float "to odd", which makes the second rounding exact).
// float16/bfloat16 compute in float and round on store.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cpu/kernel.h"

namespace ottr::runtime::cpu {

namespace ew {

float DoubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

template <typename D, typename S>
void CastLoop(const S* in, D* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ConvertElement<D>(in[i]);
}

}  // namespace

absl::StatusOr<Tensor> CastTensor(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  Tensor y(to, x.dims());
  const int64_t n = x.num_elements();
  bool ok = true;
  ir::VisitDType(x.dtype(), [&]<typename S>() {
    if constexpr (std::is_void_v<S>) {
      ok = false;
    } else {
      ir::VisitDType(to, [&]<typename D>() {
        if constexpr (std::is_void_v<D>) {
          ok = false;
        } else {
          CastLoop<D, S>(x.data<S>(), y.data<D>(), n);
        }
      });
    }
  });
  if (!ok) {
    return absl::UnimplementedError(absl::StrCat("cast from ", ir::DTypeName(x.dtype()), " to ",
                                                 ir::DTypeName(to), " is not supported"));
  }
  return y;
}

}  // namespace ew

namespace {

using namespace ew;  // NOLINT: the element helpers are this file's vocabulary

absl::Status UnsupportedType(const KernelContext& ctx, DType t) {
  return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), " is not supported"));
}

absl::StatusOr<BroadcastPlan> Plan(const KernelContext& ctx,
                                   const std::vector<std::vector<int64_t>>& dims) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make(dims);
  if (!p.ok()) return ctx.Error(p.status().message());
  return p;
}

absl::Status SameDType(const KernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return absl::OkStatus();
  return ctx.Error(absl::StrCat("inputs have different element types ", ir::DTypeName(a.dtype()),
                                " and ", ir::DTypeName(b.dtype())));
}

// out = f(a, b) with f on compute types (float for half types); O is the output element type.
template <typename T, typename O, typename F>
void RunBinary(const BroadcastPlan& plan, const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  if constexpr (kIsHalf<T>) {
    BroadcastBinary(plan, a.data<T>(), b.data<T>(), out.data<O>(),
                    [&f](T x, T y) { return Store<O>(f(Load(x), Load(y))); });
  } else {
    BroadcastBinary(plan, a.data<T>(), b.data<T>(), out.data<O>(), f);
  }
}

// InvalidArgument when an integer divisor tensor holds a zero (and the output is not empty).
template <typename T>
absl::Status CheckNoZeroDivisor(const KernelContext& ctx, const Tensor& b,
                                const BroadcastPlan& plan) {
  if constexpr (kIsInt<T>) {
    if (plan.num_elements() == 0) return absl::OkStatus();
    for (T v : b.span<T>()) {
      if (v == 0) return ctx.Error("integer division by zero");
    }
  }
  return absl::OkStatus();
}

// ---- Add, Sub, Mul, Div ---------------------------------------------------------------------

enum class Arith { kAdd, kSub, kMul, kDiv };

template <Arith kOp>
absl::Status ArithKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OTTR_RETURN_IF_ERROR(SameDType(ctx, a, b));
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {a.dims(), b.dims()}));
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), plan.out_dims());
  return ir::VisitDType(a.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedType(ctx, a.dtype());
    } else {
      using C = ComputeType<T>;
      if constexpr (kOp == Arith::kAdd) {
        RunBinary<T, T>(plan, a, b, y, [](C x, C z) -> C {
          if constexpr (kIsInt<C>) return WrapAdd(x, z); else return x + z;
        });
      } else if constexpr (kOp == Arith::kSub) {
        RunBinary<T, T>(plan, a, b, y, [](C x, C z) -> C {
          if constexpr (kIsInt<C>) return WrapSub(x, z); else return x - z;
        });
      } else if constexpr (kOp == Arith::kMul) {
        RunBinary<T, T>(plan, a, b, y, [](C x, C z) -> C {
          if constexpr (kIsInt<C>) return WrapMul(x, z); else return x * z;
        });
      } else {
        OTTR_RETURN_IF_ERROR(CheckNoZeroDivisor<T>(ctx, b, plan));
        RunBinary<T, T>(plan, a, b, y, [](C x, C z) -> C {
          if constexpr (kIsSignedInt<C>) {
            return z == -1 ? WrapNeg(x) : static_cast<C>(x / z);  // INT_MIN / -1 wraps
          } else {
            return static_cast<C>(x / z);
          }
        });
      }
      return absl::OkStatus();
    }
  });
}

// ---- Mod ------------------------------------------------------------------------------------

absl::Status ModKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OTTR_RETURN_IF_ERROR(SameDType(ctx, a, b));
  const bool fmod = ctx.attr_int("fmod", 0) != 0;
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {a.dims(), b.dims()}));
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), plan.out_dims());
  return ir::VisitDType(a.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedType(ctx, a.dtype());
    } else {
      using C = ComputeType<T>;
      OTTR_RETURN_IF_ERROR(CheckNoZeroDivisor<T>(ctx, b, plan));
      RunBinary<T, T>(plan, a, b, y, [fmod](C x, C z) -> C {
        C r;
        if constexpr (kIsInt<C>) {
          if constexpr (kIsSignedInt<C>) {
            if (z == -1) return 0;  // INT_MIN % -1 is undefined in C++; the remainder is 0
          }
          r = static_cast<C>(x % z);
          if constexpr (kIsSignedInt<C>) {
            if (!fmod && r != 0 && ((r < 0) != (z < 0))) r = static_cast<C>(r + z);
          }
        } else {
          r = std::fmod(x, z);
          if (!fmod && r != 0 && ((r < 0) != (z < 0))) r += z;
        }
        return r;
      });
      return absl::OkStatus();
    }
  });
}

// ---- Pow ------------------------------------------------------------------------------------

// base^e for integers, wrapping like repeated multiplication; negative exponents give the
// truncated value of the true power (0 unless |base| == 1).
template <typename T, typename E>
T IntPow(T base, E e) {
  if constexpr (std::is_signed_v<E>) {
    if (e < 0) {
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<T>) {
        if (base == -1) return (e & 1) ? T(-1) : T(1);
      }
      return 0;
    }
  }
  using W = WrapType<T>;
  W result = 1;
  W b = static_cast<W>(base);
  for (uint64_t n = static_cast<uint64_t>(e); n != 0; n >>= 1) {
    if (n & 1) result = static_cast<W>(result * b);
    b = static_cast<W>(b * b);
  }
  return static_cast<T>(result);
}

template <typename T, typename E>
void PowLoop(const BroadcastPlan& plan, const Tensor& a, const Tensor& b, Tensor& y) {
  const T* pa = a.data<T>();
  const E* pb = b.data<E>();
  T* py = y.data<T>();
  if constexpr (kIsInt<T> && kIsInt<E>) {
    BroadcastBinary(plan, pa, pb, py, [](T x, E e) { return IntPow(x, e); });
  } else if constexpr (std::is_same_v<T, E> && std::is_floating_point_v<T>) {
    if (b.num_elements() == 1 && (pb[0] == T(2) || pb[0] == T(1))) {
      // Common in training graphs (squares); x * x is what pow(x, 2) returns, exactly. A
      // one-element exponent leaves the output with a's elements in a's order.
      const bool square = pb[0] == T(2);
      UnaryLoop(pa, py, a.num_elements(), [square](T x) { return square ? x * x : x; });
      return;
    }
    BroadcastBinary(plan, pa, pb, py, [](T x, T e) { return std::pow(x, e); });
  } else if constexpr (kIsFloat<T> && !std::is_same_v<T, double> && kIsFloat<E> &&
                       !std::is_same_v<E, double>) {
    // float16/bfloat16/float pairs: NumPy computes these in (at most) float.
    BroadcastBinary(plan, pa, pb, py, [](T x, E e) {
      return Store<T>(std::pow(static_cast<float>(Load(x)), static_cast<float>(Load(e))));
    });
  } else {
    // Mixed pairs involving double or an integer: NumPy promotes to double; the result is
    // converted like Cast (integers truncate toward zero and saturate).
    BroadcastBinary(plan, pa, pb, py, [](T x, E e) {
      return ConvertElement<T>(std::pow(ir::ToDouble(x), ir::ToDouble(e)));
    });
  }
}

absl::Status PowKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {a.dims(), b.dims()}));
  Tensor& y = ctx.AllocateOutput(0, a.dtype(), plan.out_dims());
  return ir::VisitDType(a.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedType(ctx, a.dtype());
    } else {
      return ir::VisitDType(b.dtype(), [&]<typename E>() -> absl::Status {
        if constexpr (!kIsNumeric<E>) {
          return UnsupportedType(ctx, b.dtype());
        } else {
          PowLoop<T, E>(plan, a, b, y);
          return absl::OkStatus();
        }
      });
    }
  });
}

// ---- Unary math -----------------------------------------------------------------------------

// Each op: kSupports<T> says which element types it takes; operator() maps a compute value.
struct NegOp {
  template <typename T>
  static constexpr bool kSupports = kIsFloat<T> || kIsSignedInt<T>;
  template <typename C>
  C operator()(C x) const {
    if constexpr (kIsInt<C>) return WrapNeg(x); else return -x;
  }
};
struct AbsOp {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename C>
  C operator()(C x) const {
    if constexpr (kIsSignedInt<C>) {
      return x < 0 ? WrapNeg(x) : x;
    } else if constexpr (kIsInt<C>) {
      return x;
    } else {
      return std::fabs(x);
    }
  }
};
struct SignOp {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename C>
  C operator()(C x) const {
    if constexpr (kIsFloat<C>) {
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // keeps NaN and signed zero
    } else if constexpr (kIsSignedInt<C>) {
      return static_cast<C>((x > 0) - (x < 0));
    } else {
      return static_cast<C>(x != 0);
    }
  }
};
struct ErfOp {
  template <typename T>
  static constexpr bool kSupports = kIsNumeric<T>;
  template <typename C>
  C operator()(C x) const {
    if constexpr (kIsFloat<C>) {
      return Erf(x);  // inline float version (vectorises) for float and the half types
    } else {
      return ConvertElement<C>(std::erf(static_cast<double>(x)));
    }
  }
};

#define OTTR_FLOAT_UNARY_OP_(Name, expr)          \
  struct Name {                                   \
    template <typename T>                         \
    static constexpr bool kSupports = kIsFloat<T>; \
    template <typename C>                         \
    C operator()(C x) const {                     \
      return expr;                                \
    }                                             \
  };
OTTR_FLOAT_UNARY_OP_(SqrtOp, std::sqrt(x))
OTTR_FLOAT_UNARY_OP_(ExpOp, Exp(x))
OTTR_FLOAT_UNARY_OP_(LogOp, std::log(x))
OTTR_FLOAT_UNARY_OP_(ReciprocalOp, C(1) / x)
OTTR_FLOAT_UNARY_OP_(CeilOp, std::ceil(x))
OTTR_FLOAT_UNARY_OP_(FloorOp, std::floor(x))
OTTR_FLOAT_UNARY_OP_(RoundOp, std::nearbyint(x))  // default rounding mode: half to even
OTTR_FLOAT_UNARY_OP_(SinOp, std::sin(x))
OTTR_FLOAT_UNARY_OP_(CosOp, std::cos(x))
#undef OTTR_FLOAT_UNARY_OP_

struct NotOp {
  template <typename T>
  static constexpr bool kSupports = std::is_same_v<T, bool>;
  bool operator()(bool x) const { return !x; }
};

template <typename Op>
absl::Status UnaryKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), x.dims());
  return ir::VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (Op::template kSupports<T>) {
      UnaryLoop(x.data<T>(), y.data<T>(), x.num_elements(), Op{});
      return absl::OkStatus();
    } else {
      return UnsupportedType(ctx, x.dtype());
    }
  });
}

// ---- Sum, Mean, Max, Min --------------------------------------------------------------------

enum class Variadic { kSum, kMean, kMax, kMin };

template <Variadic kOp>
absl::Status VariadicKernel(KernelContext& ctx) {
  std::vector<const Tensor*> in;
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!in.empty()) OTTR_RETURN_IF_ERROR(SameDType(ctx, *in[0], ctx.input(i)));
    in.push_back(&ctx.input(i));
    dims.push_back(ctx.input(i).dims());
  }
  if (in.empty()) return ctx.Error("needs at least one input");
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan all, Plan(ctx, dims));
  const DType dtype = in[0]->dtype();
  Tensor& y = ctx.AllocateOutput(0, dtype, all.out_dims());
  return ir::VisitDType(dtype, [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T> || (kOp == Variadic::kMean && !kIsFloat<T>)) {
      return UnsupportedType(ctx, dtype);
    } else {
      using C = ComputeType<T>;
      T* py = y.data<T>();
      auto combine = [](T acc_t, T v_t) {
        const C acc = Load(acc_t);
        const C v = Load(v_t);
        C r;
        if constexpr (kOp == Variadic::kMax || kOp == Variadic::kMin) {
          bool keep = kOp == Variadic::kMax ? acc > v : acc < v;
          if constexpr (kIsFloat<C>) keep = keep | std::isnan(acc);  // NaN in either propagates
          r = Select(keep, acc, v);
        } else if constexpr (kIsInt<C>) {
          r = WrapAdd(acc, v);
        } else {
          r = acc + v;
        }
        return Store<T>(r);
      };
      // y = op(in[0], in[1]) in one pass when those two already span the output, else
      // y = broadcast(in[0]); then y = op(y, in[k]) for the rest (y is full-shaped, so it may be
      // both an operand and the output).
      size_t next = 1;
      OTTR_ASSIGN_OR_RETURN(BroadcastPlan first,
                            Plan(ctx, {in[0]->dims(), in[in.size() > 1 ? 1 : 0]->dims()}));
      if (in.size() > 1 && first.out_dims() == y.dims()) {
        BroadcastBinary(first, in[0]->data<T>(), in[1]->data<T>(), py, combine);
        next = 2;
      } else {
        OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {y.dims(), in[0]->dims()}));
        BroadcastBinary(plan, py, in[0]->data<T>(), py, [](T, T v) { return v; });
      }
      for (size_t k = next; k < in.size(); ++k) {
        OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {y.dims(), in[k]->dims()}));
        BroadcastBinary(plan, py, in[k]->data<T>(), py, combine);
      }
      if constexpr (kOp == Variadic::kMean) {
        const C n = static_cast<C>(in.size());
        UnaryLoop(py, py, y.num_elements(), [n](C v) { return v / n; });
      }
      return absl::OkStatus();
    }
  });
}

// ---- Comparisons and logic ------------------------------------------------------------------

enum class Cmp { kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual };

template <Cmp kOp>
absl::Status CompareKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OTTR_RETURN_IF_ERROR(SameDType(ctx, a, b));
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {a.dims(), b.dims()}));
  Tensor& y = ctx.AllocateOutput(0, DType::kBool, plan.out_dims());
  return ir::VisitDType(a.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (std::is_void_v<T>) {
      return UnsupportedType(ctx, a.dtype());
    } else {
      using C = ComputeType<T>;
      RunBinary<T, bool>(plan, a, b, y, [](C x, C z) -> bool {
        if constexpr (kOp == Cmp::kEqual) return x == z;
        if constexpr (kOp == Cmp::kLess) return x < z;
        if constexpr (kOp == Cmp::kGreater) return x > z;
        if constexpr (kOp == Cmp::kLessOrEqual) return x <= z;
        if constexpr (kOp == Cmp::kGreaterOrEqual) return x >= z;
      });
      return absl::OkStatus();
    }
  });
}

enum class Logic { kAnd, kOr, kXor };

template <Logic kOp>
absl::Status LogicKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::kBool || b.dtype() != DType::kBool) {
    return ctx.Error(absl::StrCat("inputs must be bool, got ", ir::DTypeName(a.dtype()), " and ",
                                  ir::DTypeName(b.dtype())));
  }
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {a.dims(), b.dims()}));
  Tensor& y = ctx.AllocateOutput(0, DType::kBool, plan.out_dims());
  BroadcastBinary(plan, a.data<bool>(), b.data<bool>(), y.data<bool>(), [](bool x, bool z) {
    if constexpr (kOp == Logic::kAnd) return x && z;
    if constexpr (kOp == Logic::kOr) return x || z;
    if constexpr (kOp == Logic::kXor) return x != z;
  });
  return absl::OkStatus();
}

// ---- Where ----------------------------------------------------------------------------------

// Unsigned integer of `bytes` bytes: Where only moves bits, so it dispatches on element size.
template <size_t bytes>
using Bits = std::conditional_t<
    bytes == 1, uint8_t,
    std::conditional_t<bytes == 2, uint16_t, std::conditional_t<bytes == 4, uint32_t, uint64_t>>>;

absl::Status WhereKernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& z = ctx.input(2);
  if (c.dtype() != DType::kBool) {
    return ctx.Error(absl::StrCat("condition must be bool, got ", ir::DTypeName(c.dtype())));
  }
  OTTR_RETURN_IF_ERROR(SameDType(ctx, x, z));
  OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, Plan(ctx, {c.dims(), x.dims(), z.dims()}));
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), plan.out_dims());
  auto run = [&]<typename B>() {
    BroadcastTernary(plan, c.data<bool>(), static_cast<const B*>(x.raw_data()),
                     static_cast<const B*>(z.raw_data()), static_cast<B*>(y.raw_data()),
                     [](bool cond, B u, B v) { return cond ? u : v; });
  };
  switch (ir::DTypeSize(x.dtype())) {
    case 1: run.template operator()<Bits<1>>(); break;
    case 2: run.template operator()<Bits<2>>(); break;
    case 4: run.template operator()<Bits<4>>(); break;
    case 8: run.template operator()<Bits<8>>(); break;
    default: return UnsupportedType(ctx, x.dtype());
  }
  return absl::OkStatus();
}

// ---- Clip -----------------------------------------------------------------------------------

absl::Status ClipKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    OTTR_RETURN_IF_ERROR(SameDType(ctx, x, ctx.input(i)));
    if (ctx.input(i).num_elements() != 1) {
      return ctx.Error(absl::StrCat(i == 1 ? "min" : "max", " must be a scalar, got ",
                                    ctx.input(i).num_elements(), " elements"));
    }
  }
  Tensor& y = ctx.AllocateOutput(0, x.dtype(), x.dims());
  return ir::VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedType(ctx, x.dtype());
    } else {
      using C = ComputeType<T>;
      const C lo = ctx.has_input(1) ? Load(ctx.input(1).data<T>()[0])
                                    : (kIsFloat<C> ? -std::numeric_limits<C>::infinity()
                                                   : std::numeric_limits<C>::lowest());
      const C hi = ctx.has_input(2) ? Load(ctx.input(2).data<T>()[0])
                                    : (kIsFloat<C> ? std::numeric_limits<C>::infinity()
                                                   : std::numeric_limits<C>::max());
      // min(max(x, lo), hi): with lo > hi every element becomes hi; NaN stays NaN.
      UnaryLoop(x.data<T>(), y.data<T>(), x.num_elements(), [lo, hi](C v) {
        const C t = Select(v < lo, lo, v);
        return Select(t > hi, hi, t);
      });
      return absl::OkStatus();
    }
  });
}

// ---- Cast, CastLike -------------------------------------------------------------------------

absl::Status CastTo(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == to) {
    ctx.SetOutput(0, x);  // same buffer: kernels never write their inputs, so sharing is safe
    return absl::OkStatus();
  }
  absl::StatusOr<Tensor> y = CastTensor(x, to);
  if (!y.ok()) return ctx.Unsupported(y.status().message());
  ctx.SetOutput(0, *std::move(y));
  return absl::OkStatus();
}

absl::Status CastKernel(KernelContext& ctx) {
  const int64_t to = ctx.attr_int("to", 0);
  absl::StatusOr<DType> t = ir::DTypeFromOnnx(static_cast<int32_t>(to));
  if (!t.ok()) return ctx.Unsupported(absl::StrCat("cast to ONNX type ", to, ": ", t.status().message()));
  return CastTo(ctx, *t);
}

absl::Status CastLikeKernel(KernelContext& ctx) { return CastTo(ctx, ctx.input(1).dtype()); }

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& r) {
  r.Register("", "Add", ArithKernel<Arith::kAdd>);
  r.Register("", "Sub", ArithKernel<Arith::kSub>);
  r.Register("", "Mul", ArithKernel<Arith::kMul>);
  r.Register("", "Div", ArithKernel<Arith::kDiv>);
  r.Register("", "Mod", ModKernel);
  r.Register("", "Pow", PowKernel);

  r.Register("", "Neg", UnaryKernel<NegOp>);
  r.Register("", "Abs", UnaryKernel<AbsOp>);
  r.Register("", "Sign", UnaryKernel<SignOp>);
  r.Register("", "Erf", UnaryKernel<ErfOp>);
  r.Register("", "Sqrt", UnaryKernel<SqrtOp>);
  r.Register("", "Exp", UnaryKernel<ExpOp>);
  r.Register("", "Log", UnaryKernel<LogOp>);
  r.Register("", "Reciprocal", UnaryKernel<ReciprocalOp>);
  r.Register("", "Ceil", UnaryKernel<CeilOp>);
  r.Register("", "Floor", UnaryKernel<FloorOp>);
  r.Register("", "Round", UnaryKernel<RoundOp>);
  r.Register("", "Sin", UnaryKernel<SinOp>);
  r.Register("", "Cos", UnaryKernel<CosOp>);
  r.Register("", "Not", UnaryKernel<NotOp>);

  r.Register("", "Sum", VariadicKernel<Variadic::kSum>);
  r.Register("", "Mean", VariadicKernel<Variadic::kMean>);
  r.Register("", "Max", VariadicKernel<Variadic::kMax>);
  r.Register("", "Min", VariadicKernel<Variadic::kMin>);

  r.Register("", "Equal", CompareKernel<Cmp::kEqual>);
  r.Register("", "Less", CompareKernel<Cmp::kLess>);
  r.Register("", "Greater", CompareKernel<Cmp::kGreater>);
  r.Register("", "LessOrEqual", CompareKernel<Cmp::kLessOrEqual>);
  r.Register("", "GreaterOrEqual", CompareKernel<Cmp::kGreaterOrEqual>);
  r.Register("", "And", LogicKernel<Logic::kAnd>);
  r.Register("", "Or", LogicKernel<Logic::kOr>);
  r.Register("", "Xor", LogicKernel<Logic::kXor>);
  r.Register("", "Where", WhereKernel);

  r.Register("", "Clip", ClipKernel);
  r.Register("", "Cast", CastKernel);
  r.Register("", "CastLike", CastLikeKernel);
}

}  // namespace ottr::runtime::cpu
