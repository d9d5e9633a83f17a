// Central-difference cases of the reduction gradient rules (ir/grads/reduction_grads.cc): every
// reduction with keepdims 1 and 0, explicit (also negative) axes, no axes (reduce all) and
// noop_with_empty_axes. Inputs stay away from the non-differentiable points (L1 at 0, L2 at the
// origin, Max/Min at 3-way ties; a 2-way tie is fine: its central difference is 1/2, the even
// split the rule gives).
#include "tests/passes/gradient_check.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::Tensor;

Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>({n}, v);
}

GradCase Case(std::string name, std::string op, std::vector<Tensor> inputs,
              std::map<std::string, Attribute> attrs = {}) {
  GradCase c;
  c.name = std::move(name);
  c.op_type = std::move(op);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

// The same set of axis/keepdims variants for one op, on inputs drawn from [lo, hi).
void AddVariants(std::vector<GradCase>& v, const std::string& op, uint64_t seed, double lo,
                 double hi) {
  auto x = [&](std::vector<int64_t> dims, uint64_t k) {
    return RandomDouble(dims, seed + k, lo, hi);
  };
  v.push_back(Case(op + "/axis1_keepdims", op, {x({2, 3, 4}, 0), I64({1})}));
  v.push_back(Case(op + "/axes_no_keepdims", op, {x({2, 3, 4}, 1), I64({0, -1})},
                   {{"keepdims", Attribute(0)}}));
  v.push_back(Case(op + "/all_axes", op, {x({3, 4}, 2)}, {{"keepdims", Attribute(0)}}));
  v.push_back(Case(op + "/all_axes_keepdims", op, {x({2, 1, 3}, 3)}));
  v.push_back(Case(op + "/empty_axes_reduce_all", op,
                   {x({2, 3}, 4), Tensor(ir::DType::kInt64, {0})}, {{"keepdims", Attribute(0)}}));
  v.push_back(Case(op + "/noop_with_empty_axes", op, {x({2, 3}, 5), Tensor(ir::DType::kInt64, {0})},
                   {{"noop_with_empty_axes", Attribute(1)}, {"keepdims", Attribute(0)}}));
  v.push_back(Case(op + "/noop_no_axes_input", op, {x({3, 2}, 6)},
                   {{"noop_with_empty_axes", Attribute(1)}}));
  v.push_back(Case(op + "/size1_axis_no_keepdims", op, {x({3, 1, 2}, 7), I64({-2, 2})},
                   {{"keepdims", Attribute(0)}}));
}

}  // namespace

std::vector<GradCase> ReductionGradCases() {
  std::vector<GradCase> v;
  AddVariants(v, "ReduceSum", 100, -1.0, 1.0);
  AddVariants(v, "ReduceMean", 200, -1.0, 1.0);
  AddVariants(v, "ReduceSumSquare", 300, -1.0, 1.0);
  AddVariants(v, "ReduceL1", 400, 0.1, 1.0);  // |x| is smooth away from 0
  {
    // Mixed signs for L1 (no element near 0).
    Tensor x = Tensor::FromVector<double>({2, 3}, {-0.7, 0.4, -1.2, 0.9, -0.3, 0.5});
    v.push_back(Case("ReduceL1/mixed_signs", "ReduceL1", {x, I64({1})}));
  }
  AddVariants(v, "ReduceL2", 500, -1.0, 1.0);
  AddVariants(v, "ReduceLogSum", 600, 0.5, 1.5);
  AddVariants(v, "ReduceLogSumExp", 700, -2.0, 2.0);
  AddVariants(v, "ReduceMax", 800, -1.0, 1.0);
  AddVariants(v, "ReduceMin", 900, -1.0, 1.0);
  AddVariants(v, "ReduceProd", 1000, 0.5, 1.5);
  {
    Tensor x = Tensor::FromVector<double>({2, 3}, {0.3, 0.8, 0.3, -0.5, 0.1, -0.5});
    v.push_back(Case("ReduceMax/two_way_tie", "ReduceMax", {x, I64({1})}));
    v.push_back(
        Case("ReduceMin/two_way_tie", "ReduceMin", {x, I64({-1})}, {{"keepdims", Attribute(0)}}));
  }
  {
    // One zero in row 0 (its gradient is the product of the others; the others get 0), two
    // zeros in row 1 (all gradients 0), none in row 2.
    Tensor x = Tensor::FromVector<double>({3, 3}, {0.7, 0.0, -1.3, 0.0, 0.9, 0.0, 1.1, -0.6, 0.8});
    v.push_back(
        Case("ReduceProd/zeros", "ReduceProd", {x, I64({1})}, {{"keepdims", Attribute(0)}}));
    v.push_back(Case("ReduceProd/zeros_all", "ReduceProd", {x}));
  }
  return v;
}

}  // namespace ottr::testing
