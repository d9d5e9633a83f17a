#include "tests/passes/gradient_check.h"

namespace ottr::testing {

std::vector<GradCase> LinalgGradCases() {
  std::vector<GradCase> cases;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      GradCase c;
      c.name = "Gemm_tA" + std::to_string(ta) + "_tB" + std::to_string(tb);
      c.op_type = "Gemm";
      c.inputs = {RandomDouble(ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}, 1),
                  RandomDouble(tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, 2),
                  RandomDouble({5}, 3)};
      c.attrs = {{"transA", ir::Attribute(int64_t{ta})}, {"transB", ir::Attribute(int64_t{tb})},
                 {"alpha", ir::Attribute(0.7f)}, {"beta", ir::Attribute(1.3f)}};
      cases.push_back(c);
    }
  }
  GradCase full_c;
  full_c.name = "Gemm_full_C_no_bias_broadcast";
  full_c.op_type = "Gemm";
  full_c.inputs = {RandomDouble({2, 3}, 4), RandomDouble({3, 4}, 5), RandomDouble({2, 1}, 6)};
  cases.push_back(full_c);
  GradCase no_c;
  no_c.name = "Gemm_without_C";
  no_c.op_type = "Gemm";
  no_c.inputs = {RandomDouble({2, 3}, 7), RandomDouble({4, 3}, 8)};
  no_c.attrs = {{"transB", ir::Attribute(int64_t{1})}};
  cases.push_back(no_c);

  struct Shapes {
    const char* name;
    std::vector<int64_t> a, b;
  };
  for (const Shapes& s : {Shapes{"MatMul_2d", {3, 4}, {4, 2}}, Shapes{"MatMul_batched", {2, 3, 4}, {2, 4, 5}},
                          Shapes{"MatMul_broadcast_b", {2, 3, 4}, {4, 5}},
                          Shapes{"MatMul_broadcast_batch", {2, 1, 3, 4}, {3, 4, 2}},
                          Shapes{"MatMul_vec_mat", {4}, {2, 4, 3}}, Shapes{"MatMul_mat_vec", {2, 3, 4}, {4}},
                          Shapes{"MatMul_vec_vec", {4}, {4}}}) {
    GradCase c;
    c.name = s.name;
    c.op_type = "MatMul";
    c.inputs = {RandomDouble(s.a, 11), RandomDouble(s.b, 12)};
    cases.push_back(c);
  }
  return cases;
}

}  // namespace ottr::testing
