// Tests of the CUDA reductions (runtime/cuda/reduction_ops.cc, kernels/reduction_*.cu) against
// the CPU reference: every Reduce* op on every element type it takes, on the shapes that pick each
// plan (row reduction by warps or blocks, short segments, column reduction with and without float4
// loads, split two-pass reductions, map, fill for empty sets), keepdims, noop_with_empty_axes;
// ArgMax/ArgMin with ties and NaN; ReduceProdGrad with zeros; run-to-run determinism. Skipped
// without a CUDA device.
#include <cstdio>
#include <limits>

#include "absl/strings/str_join.h"
#include "tests/runtime/cuda/tensor_cuda_test_util.h"

namespace ottr::testing::cuda_tensor {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

class CudaReductionOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

struct Shape {
  std::vector<int64_t> dims;
  std::vector<int64_t> axes;
};

// The plans: column [N,C]->[C] (bias gradient), row [N,C]->[N], conv bias [N,C,H,W]->[C] (long and
// short segments), a big column split, a big row split, full reduction, a column with a batch,
// alternating axes, a reduced axis of size 1 (map), and keepdims over several axes.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> s = {
      {{128, 512}, {0}},      {{128, 512}, {1}},        {{16, 8, 20, 20}, {0, 2, 3}},
      {{6, 5, 3, 3}, {0, 2, 3}}, {{20000, 24}, {0}},    {{3, 70000}, {1}},
      {{50000}, {}},          {{6, 7, 8}, {1}},         {{2, 3, 4, 5}, {1, 3}},
      {{5, 1, 6}, {1}},       {{4, 6, 9}, {-1, 0}},     {{1, 1}, {}},
      {{2, 130}, {0}},        {{33, 3}, {0}},
  };
  return s;
}

Case Reduce(const std::string& op, const Tensor& x, const std::vector<int64_t>& axes, int64_t keepdims,
            double rtol, double atol, int64_t noop = 0) {
  Case c{op, {In(x)}, {{"keepdims", Attribute(keepdims)}}, 1, "", rtol, atol};
  if (!axes.empty()) c.inputs.push_back(Const(I64(axes)));
  if (noop) c.attrs["noop_with_empty_axes"] = Attribute(noop);
  return c;
}

TEST_F(CudaReductionOpsTest, EveryOpEveryPlanFloat32) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    const bool positive = std::string(op) == "ReduceLogSum";
    for (const Shape& s : Shapes()) {
      SCOPED_TRACE(absl::StrCat(op, " over ", s.dims.size(), "-d axes ", s.axes.size()));
      const Tensor x = Random(DType::kFloat32, s.dims, 17, positive ? 0.1 : -1.0, 1.0);
      ExpectMatchesCpu(Reduce(op, x, s.axes, 1, 1e-5, 1e-4), /*twice=*/true);
      ExpectMatchesCpu(Reduce(op, x, s.axes, 0, 1e-5, 1e-4));
    }
  }
  // Prod over few elements per output, values near 1 (no overflow).
  for (const Shape& s : std::vector<Shape>{{{64, 16}, {0}}, {{16, 64}, {1}}, {{4, 3, 5, 6}, {0, 2, 3}}, {{40}, {}}}) {
    ExpectMatchesCpu(Reduce("ReduceProd", Random(DType::kFloat32, s.dims, 5, 0.9, 1.1), s.axes, 1, 1e-5, 1e-7));
  }
}

TEST_F(CudaReductionOpsTest, OtherElementTypes) {
  const std::vector<Shape> shapes = {{{128, 64}, {0}}, {{64, 128}, {1}}, {{5, 6, 7}, {0, 2}}, {{3000}, {}}, {{8, 3, 40, 40}, {0, 2, 3}}};
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                         "ReduceLogSumExp", "ReduceSumSquare"}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(op);
      ExpectMatchesCpu(Reduce(op, Random(DType::kFloat16, s.dims, 1), s.axes, 1, 2e-3, 2e-3));
      ExpectMatchesCpu(Reduce(op, Random(DType::kBFloat16, s.dims, 2), s.axes, 1, 1e-2, 1e-2));
      ExpectMatchesCpu(Reduce(op, Random(DType::kFloat64, s.dims, 3), s.axes, 0, 1e-12, 1e-13));
      ExpectMatchesCpu(Reduce(op, Random(DType::kInt32, s.dims, 4, -1000, 1000), s.axes, 1, 0, 0));
      ExpectMatchesCpu(Reduce(op, Random(DType::kInt64, s.dims, 5, -100000, 100000), s.axes, 0, 0, 0));
      ExpectMatchesCpu(Reduce(op, Random(DType::kUInt32, s.dims, 6, 0, 1000), s.axes, 1, 0, 0));
      ExpectMatchesCpu(Reduce(op, Random(DType::kInt8, s.dims, 7, -100, 100), s.axes, 1, 0, 0));
      ExpectMatchesCpu(Reduce(op, Random(DType::kUInt8, s.dims, 8, 0, 255), s.axes, 1, 0, 0));
    }
  }
  // Integer products wrap around exactly as the CPU's 64-bit arithmetic.
  ExpectMatchesCpu(Reduce("ReduceProd", Random(DType::kInt64, {30, 7}, 9, -50, 50), {0}, 1, 0, 0));
  ExpectMatchesCpu(Reduce("ReduceProd", Random(DType::kInt32, {7, 30}, 10, -9, 9), {1}, 1, 0, 0));
  ExpectMatchesCpu(Reduce("ReduceLogSum", Random(DType::kInt32, {7, 30}, 11, 1, 9), {1}, 1, 0, 0));
  // Bool: ReduceMax = any, ReduceMin = all.
  for (const Shape& s : shapes) {
    ExpectMatchesCpu(Reduce("ReduceMax", Random(DType::kBool, s.dims, 12), s.axes, 1, 0, 0));
    ExpectMatchesCpu(Reduce("ReduceMin", Random(DType::kBool, s.dims, 13), s.axes, 0, 0, 0));
  }
}

TEST_F(CudaReductionOpsTest, EmptySetsAndNoop) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    SCOPED_TRACE(op);
    // A reduced axis of size 0: the identity of the op (NaN for Mean).
    ExpectMatchesCpu(Reduce(op, Tensor(DType::kFloat32, {3, 0, 2}), {1}, 1, 0, 0));
    ExpectMatchesCpu(Reduce(op, Tensor(DType::kInt64, {0, 4}), {0}, 0, 0, 0));
    // No outputs.
    ExpectMatchesCpu(Reduce(op, Tensor(DType::kFloat32, {0, 4}), {1}, 1, 0, 0));
    // noop_with_empty_axes: elementwise.
    ExpectMatchesCpu(Reduce(op, Random(DType::kFloat32, {3, 4}, 1, 0.1, 2.0), {}, 1, 1e-6, 1e-7, 1));
    Case empty_axes = Reduce(op, Random(DType::kFloat32, {3, 4}, 2, 0.1, 2.0), {}, 0, 1e-6, 1e-7);
    empty_axes.inputs.push_back(Const(Tensor(DType::kInt64, {0})));  // empty axes: reduce all
    ExpectMatchesCpu(empty_axes);
  }
}

TEST_F(CudaReductionOpsTest, NaNAndInfinities) {
  Tensor x = Random(DType::kFloat32, {4, 300}, 3);
  x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[300 + 7] = std::numeric_limits<float>::infinity();
  x.data<float>()[600 + 9] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 300; ++i) x.data<float>()[900 + i] = -std::numeric_limits<float>::infinity();
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceL2"}) {
    ExpectMatchesCpu(Reduce(op, x, {1}, 1, 1e-5, 1e-6));
    ExpectMatchesCpu(Reduce(op, x, {0}, 1, 1e-5, 1e-6));
  }
}

TEST_F(CudaReductionOpsTest, ArgMaxArgMin) {
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (int64_t last : {0, 1}) {
      for (int64_t keep : {0, 1}) {
        const Attrs base = {{"select_last_index", Attribute(last)}, {"keepdims", Attribute(keep)}};
        auto run = [&](const Tensor& x, int64_t axis) {
          Attrs a = base;
          a["axis"] = Attribute(axis);
          ExpectMatchesCpu({op, {In(x)}, a});
        };
        // Many ties (few distinct values), rows and columns, long rows (block per row).
        const Tensor ties = Random(DType::kInt32, {40, 33}, 1, 0, 3);
        run(ties, 0);
        run(ties, 1);
        run(Random(DType::kFloat32, {3, 10000}, 2), 1);
        run(Random(DType::kFloat32, {5, 6, 7}, 3), 1);
        run(Random(DType::kFloat16, {9, 70}, 4), -1);
        run(Random(DType::kInt64, {9, 70}, 5, -3, 3), 0);
        run(Random(DType::kUInt8, {64, 5}, 6, 0, 4), 0);
        run(Random(DType::kFloat64, {17}, 7), 0);
        Tensor nan = Random(DType::kFloat32, {4, 50}, 8);
        nan.data<float>()[10] = std::numeric_limits<float>::quiet_NaN();
        nan.data<float>()[40] = std::numeric_limits<float>::quiet_NaN();
        nan.data<float>()[120] = std::numeric_limits<float>::quiet_NaN();
        run(nan, 1);
        run(nan, 0);
      }
    }
  }
}

TEST_F(CudaReductionOpsTest, ReduceProdGradWithZeros) {
  Tensor x = Random(DType::kFloat32, {4, 6, 5}, 1, 0.5, 1.5);
  x.data<float>()[0] = 0.0f;                        // group of the first output: one zero
  x.data<float>()[31] = 0.0f;                       // another group: two zeros
  x.data<float>()[36] = 0.0f;
  for (const std::vector<int64_t>& dy : std::vector<std::vector<int64_t>>{{1, 6, 5}, {4, 1, 1}, {1, 1, 1}, {4, 6, 5}, {4, 1, 5}}) {
    ExpectMatchesCpu({"ReduceProdGrad", {In(x), In(Random(DType::kFloat32, dy, 2))}, {}, 1, std::string(ir::kOttrDomain),
                      1e-5, 1e-6});
  }
  ExpectMatchesCpu({"ReduceProdGrad", {In(Random(DType::kFloat16, {8, 3}, 3, 0.5, 1.5)), In(Random(DType::kFloat16, {1, 3}, 4))},
                    {}, 1, std::string(ir::kOttrDomain), 2e-3, 2e-3});
  ExpectMatchesCpu({"ReduceProdGrad", {In(Random(DType::kFloat64, {3, 5000}, 5, 0.999, 1.001)), In(Random(DType::kFloat64, {3, 1}, 6))},
                    {}, 1, std::string(ir::kOttrDomain), 1e-10, 1e-12});
}

}  // namespace
}  // namespace ottr::testing::cuda_tensor
