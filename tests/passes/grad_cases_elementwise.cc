// Central-difference cases of the elementwise gradient rules (ir/grads/elementwise_grads.cc):
// broadcasting in both directions and against scalars, variadic ops, and inputs kept away from the
// points where an op is not differentiable (Max/Min ties, Abs at 0, Clip's bounds, Mod's jumps).
#include <cmath>
#include <random>

#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

// Random values with |x| in [lo, hi) and a random sign: away from 0.
Tensor AwayFromZero(std::vector<int64_t> dims, uint64_t seed, double lo = 0.5, double hi = 2.0) {
  Tensor t = RandomDouble(std::move(dims), seed, lo, hi);
  std::mt19937_64 rng(seed ^ 0x5eed);
  for (double& x : t.span<double>()) {
    if (rng() & 1) x = -x;
  }
  return t;
}

// Values in [lo, hi) moved to at least `margin` from each of `points`.
Tensor AwayFrom(std::vector<int64_t> dims, uint64_t seed, double lo, double hi,
                const std::vector<double>& points, double margin = 0.05) {
  Tensor t = RandomDouble(std::move(dims), seed, lo, hi);
  for (double& x : t.span<double>()) {
    for (double p : points) {
      if (std::abs(x - p) < margin) x = x >= p ? p + margin : p - margin;
    }
  }
  return t;
}

Tensor Scalar(double v) { return Tensor::Scalar<double>(v); }

// Shapes of two broadcast operands.
struct Pair {
  const char* name;
  std::vector<int64_t> a, b;
};
const std::vector<Pair>& BroadcastPairs() {
  static const std::vector<Pair> pairs = {
      {"same", {2, 3}, {2, 3}},
      {"b_rank_lower", {2, 3, 4}, {4}},
      {"a_rank_lower", {3, 1}, {2, 3, 4}},
      {"both_stretched", {2, 1, 4}, {3, 1}},
      {"b_scalar", {2, 3}, {}},
      {"a_scalar", {}, {3, 2}},
      {"b_ones", {2, 3}, {1, 1}},
  };
  return pairs;
}

void AddArithmetic(std::vector<GradCase>& cases) {
  uint64_t seed = 1;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    const bool div = std::string(op) == "Div";
    for (const Pair& p : BroadcastPairs()) {
      cases.push_back(Case(std::string(op) + "/" + p.name, op,
                           {RandomDouble(p.a, seed, -2.0, 2.0),
                            div ? AwayFromZero(p.b, seed + 1) : RandomDouble(p.b, seed + 1, -2.0, 2.0)}));
      seed += 2;
    }
  }
  // Only one input differentiated.
  GradCase square = Case("Mul/only_a", "Mul", {RandomDouble({3, 2}, 40), RandomDouble({2}, 41)});
  square.wrt = {0};
  cases.push_back(square);
  GradCase db = Case("Div/only_b", "Div", {RandomDouble({2, 3}, 42), AwayFromZero({2, 1}, 43)});
  db.wrt = {1};
  cases.push_back(db);
}

void AddUnary(std::vector<GradCase>& cases) {
  cases.push_back(Case("Neg", "Neg", {RandomDouble({2, 3}, 50)}));
  cases.push_back(Case("Neg/scalar", "Neg", {Scalar(0.7)}));
  cases.push_back(Case("Sqrt", "Sqrt", {RandomDouble({3, 4}, 51, 0.3, 3.0)}));
  cases.push_back(Case("Exp", "Exp", {RandomDouble({3, 4}, 52, -2.0, 2.0)}));
  cases.push_back(Case("Log", "Log", {RandomDouble({3, 4}, 53, 0.2, 4.0)}));
  cases.push_back(Case("Reciprocal", "Reciprocal", {AwayFromZero({3, 4}, 54)}));
  cases.push_back(Case("Abs", "Abs", {AwayFromZero({3, 4}, 55, 0.05, 2.0)}));
  cases.push_back(Case("Erf", "Erf", {RandomDouble({3, 4}, 56, -2.5, 2.5)}));
  cases.push_back(Case("Sin", "Sin", {RandomDouble({3, 4}, 57, -4.0, 4.0)}));
  cases.push_back(Case("Cos", "Cos", {RandomDouble({3, 4}, 58, -4.0, 4.0)}));
  cases.push_back(Case("Sqrt/empty_rank", "Sqrt", {Scalar(2.5)}));
}

void AddVariadic(std::vector<GradCase>& cases) {
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    const std::string o = op;
    cases.push_back(Case(o + "/single", op, {RandomDouble({2, 3}, 60)}));
    cases.push_back(Case(o + "/two_same_shape", op, {RandomDouble({3, 4}, 61), RandomDouble({3, 4}, 62)}));
    cases.push_back(Case(o + "/three_broadcast", op,
                         {RandomDouble({2, 3, 4}, 63), RandomDouble({4}, 64), RandomDouble({3, 1}, 65)}));
    cases.push_back(Case(o + "/broadcast_first_small", op,
                         {RandomDouble({1, 4}, 66), RandomDouble({3, 4}, 67), Scalar(0.1)}));
  }
}

void AddPow(std::vector<GradCase>& cases) {
  // Float exponent tensors (both inputs differentiated): base > 0 so ln A exists.
  for (const Pair& p : BroadcastPairs()) {
    cases.push_back(Case(std::string("Pow/float_exponent_") + p.name, "Pow",
                         {RandomDouble(p.a, 70, 0.4, 2.0), RandomDouble(p.b, 71, -2.0, 2.5)}));
  }
  // Integer exponents are constants (initializers): only the base is differentiated, and it may
  // be negative.
  cases.push_back(Case("Pow/int_exponent_tensor", "Pow",
                       {AwayFromZero({2, 3}, 72), Tensor::FromVector<int64_t>({3}, {2, 3, -1})}));
  cases.push_back(Case("Pow/int_exponent_tensor_broadcast_base", "Pow",
                       {AwayFromZero({3}, 73), Tensor::FromVector<int32_t>({2, 3}, {0, 1, 2, 3, -2, 4})}));
  for (int64_t e : {0, 1, 2, 3, -2}) {
    cases.push_back(Case("Pow/int_scalar_exponent_" + std::string(e < 0 ? "m" : "") +
                             std::to_string(std::abs(e)),
                         "Pow", {AwayFromZero({2, 3}, 74 + e), Tensor::Scalar<int64_t>(e)}));
  }
  cases.push_back(Case("Pow/int_exponent_one_element_1d", "Pow",
                       {AwayFromZero({}, 80), Tensor::FromVector<int64_t>({1}, {3})}));
  // A float exponent differentiated alone.
  GradCase e_only = Case("Pow/only_exponent", "Pow", {RandomDouble({2, 3}, 81, 0.3, 3.0), RandomDouble({3}, 82)});
  e_only.wrt = {1};
  cases.push_back(e_only);
}

// Mod with A = B · (q + f), f ∈ [0.15, 0.85] away from the jumps at integer quotients.
Tensor ModDividend(const Tensor& b, const std::vector<int64_t>& dims, uint64_t seed) {
  Tensor a(ir::DType::kFloat64, dims);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> q(-3, 3);
  std::uniform_real_distribution<double> f(0.15, 0.85);
  // b is broadcast along a's leading dims (b's dims are a suffix of a's).
  const int64_t nb = b.num_elements();
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    a.data<double>()[i] = b.data<double>()[i % nb] * (q(rng) + f(rng));
  }
  return a;
}

void AddMod(std::vector<GradCase>& cases) {
  for (int64_t fmod : {0, 1}) {
    const std::string m = "Mod/fmod" + std::to_string(fmod);
    Tensor b = AwayFromZero({3}, 90 + fmod, 0.7, 2.0);
    cases.push_back(Case(m + "_broadcast_divisor", "Mod", {ModDividend(b, {2, 3}, 92 + fmod), b},
                         {{"fmod", Attribute(fmod)}}));
    Tensor b2 = AwayFromZero({2, 3}, 94 + fmod, 0.7, 2.0);
    cases.push_back(Case(m + "_same_shape", "Mod", {ModDividend(b2, {2, 3}, 96 + fmod), b2},
                         {{"fmod", Attribute(fmod)}}));
  }
}

void AddWhere(std::vector<GradCase>& cases) {
  const Tensor cond = Tensor::FromVector<bool>({2, 3}, {true, false, false, true, true, false});
  cases.push_back(Case("Where/same_shape", "Where", {cond, RandomDouble({2, 3}, 100), RandomDouble({2, 3}, 101)}));
  cases.push_back(Case("Where/broadcast_values", "Where",
                       {cond, RandomDouble({3}, 102), RandomDouble({2, 1}, 103)}));
  cases.push_back(Case("Where/broadcast_condition", "Where",
                       {Tensor::FromVector<bool>({3}, {false, true, true}), RandomDouble({2, 3}, 104),
                        Scalar(0.25)}));
  cases.push_back(Case("Where/values_larger_than_condition", "Where",
                       {Tensor::FromVector<bool>({2, 1, 1}, {true, false}), RandomDouble({3}, 105),
                        RandomDouble({2, 1}, 106)}));
}

void AddClip(std::vector<GradCase>& cases) {
  const double lo = -0.5, hi = 0.7;
  cases.push_back(Case("Clip/min_and_max", "Clip",
                       {AwayFrom({3, 4}, 110, -2.0, 2.0, {lo, hi}), Scalar(lo), Scalar(hi)}));
  cases.push_back(Case("Clip/min_only", "Clip", {AwayFrom({3, 4}, 111, -2.0, 2.0, {lo}), Scalar(lo)}));
  cases.push_back(Case("Clip/max_only", "Clip",
                       {AwayFrom({3, 4}, 112, -2.0, 2.0, {hi}), Tensor(), Scalar(hi)}));
  cases.push_back(Case("Clip/no_bounds", "Clip", {RandomDouble({2, 3}, 113)}));
  cases.push_back(Case("Clip/min_greater_than_max", "Clip",
                       {RandomDouble({2, 3}, 114), Scalar(0.6), Scalar(-0.3)}));
  cases.push_back(Case("Clip/one_element_bounds", "Clip",
                       {AwayFrom({2, 2, 3}, 115, -2.0, 2.0, {lo, hi}),
                        Tensor::FromVector<double>({1}, {lo}), Tensor::FromVector<double>({1}, {hi})}));
  GradCase x_only = Case("Clip/only_x", "Clip", {AwayFrom({4}, 116, -2.0, 2.0, {lo, hi}), Scalar(lo), Scalar(hi)});
  x_only.wrt = {0};
  cases.push_back(x_only);
  GradCase hi_only = Case("Clip/only_max", "Clip", {AwayFrom({5}, 117, -2.0, 2.0, {lo, hi}), Scalar(lo), Scalar(hi)});
  hi_only.wrt = {2};
  cases.push_back(hi_only);
}

void AddCast(std::vector<GradCase>& cases) {
  cases.push_back(Case("Cast/double_to_double", "Cast", {RandomDouble({2, 3}, 120)},
                       {{"to", Attribute(int64_t{11})}}));
  GradCase like = Case("CastLike/double", "CastLike", {RandomDouble({2, 3}, 121), RandomDouble({1}, 122)});
  like.wrt = {0};  // the target only supplies a type
  cases.push_back(like);
}

}  // namespace

std::vector<GradCase> ElementwiseGradCases() {
  std::vector<GradCase> cases;
  AddArithmetic(cases);
  AddUnary(cases);
  AddVariadic(cases);
  AddPow(cases);
  AddMod(cases);
  AddWhere(cases);
  AddClip(cases);
  AddCast(cases);
  return cases;
}

}  // namespace ottr::testing
