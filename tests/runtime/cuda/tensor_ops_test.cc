// Tests of the CUDA layout, indexing and generator ops (runtime/cuda/tensor_ops.cc,
// kernels/tensor_*.cu) against the CPU reference, on random inputs (never all zero) and on the
// shapes that pick each kernel path: contiguous runs (memcpy), widened words, tiled and generic
// transposes, more than 32 Concat parts, the CUB path of GatherGrad with repeated indices, every
// Pad mode, block-scan CumSum, run-time scalars read on the device, empty tensors. Skipped
// without a CUDA device (label gpu via the GPU machine's runs).
#include <limits>

#include "tests/runtime/cuda/tensor_cuda_test_util.h"

namespace ottr::testing::cuda_tensor {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

class CudaTensorOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaTensorOpsTest, ViewsCopyWhenTheirOutputIsAGraphOutput) {
  const Tensor x = Random(DType::kFloat32, {2, 3, 4}, 1);
  ExpectMatchesCpu({"Reshape", {In(x), Const(I64({4, -1}))}});
  ExpectMatchesCpu({"Reshape", {In(x), Const(I64({0, 12}))}});
  ExpectMatchesCpu({"Flatten", {In(x)}, {{"axis", Attribute(int64_t{2})}}});
  ExpectMatchesCpu({"Unsqueeze", {In(x), Const(I64({0, -1}))}});
  ExpectMatchesCpu({"Squeeze", {In(Random(DType::kInt64, {1, 5, 1}, 2, -9, 9)), Const(I64({0}))}});
  ExpectMatchesCpu({"Squeeze", {In(Random(DType::kFloat16, {1, 5, 1}, 3))}});
  ExpectMatchesCpu({"Identity", {In(Random(DType::kBool, {7}, 4))}});
  ExpectMatchesCpu({"Identity", {In(Tensor(DType::kFloat32, {0, 3}))}});
}

TEST_F(CudaTensorOpsTest, ShapeAndSize) {
  const Tensor x = Random(DType::kFloat32, {2, 3, 4, 5}, 1);
  ExpectMatchesCpu({"Shape", {In(x)}});
  ExpectMatchesCpu({"Shape", {In(x)}, {{"start", Attribute(int64_t{1})}, {"end", Attribute(int64_t{-1})}}});
  ExpectMatchesCpu({"Shape", {In(x)}, {{"start", Attribute(int64_t{-10})}}});
  ExpectMatchesCpu({"Shape", {In(Tensor::Scalar<float>(1.0f))}});
  ExpectMatchesCpu({"Size", {In(x)}});
  ExpectMatchesCpu({"Size", {In(Tensor(DType::kInt32, {3, 0}))}});
}

TEST_F(CudaTensorOpsTest, TransposeEveryPermutationOfRank3) {
  const std::vector<std::vector<int64_t>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto& dims : std::vector<std::vector<int64_t>>{{2, 3, 4}, {3, 40, 50}, {40, 3, 50}, {17, 33, 65}}) {
    const Tensor x = Random(DType::kFloat32, dims, 7);
    for (const auto& p : perms) ExpectMatchesCpu({"Transpose", {In(x)}, {{"perm", Attribute(p)}}});
  }
}

TEST_F(CudaTensorOpsTest, TransposeDtypesAndShapes) {
  // 2-D tiled, default perm (reverse), every element width.
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kUInt8, DType::kInt64, DType::kBool}) {
    ExpectMatchesCpu({"Transpose", {In(Random(t, {70, 45}, 11, 0, 100))}});
  }
  // NCHW <-> NHWC, size-1 axes, rank 5, empty.
  const Tensor nchw = Random(DType::kFloat32, {4, 32, 7, 9}, 12);
  ExpectMatchesCpu({"Transpose", {In(nchw)}, {{"perm", Attribute(std::vector<int64_t>{0, 2, 3, 1})}}});
  ExpectMatchesCpu({"Transpose", {In(Random(DType::kFloat32, {4, 7, 9, 32}, 13))},
                    {{"perm", Attribute(std::vector<int64_t>{0, 3, 1, 2})}}});
  ExpectMatchesCpu({"Transpose", {In(Random(DType::kFloat32, {5, 1, 7, 1}, 14))},
                    {{"perm", Attribute(std::vector<int64_t>{3, 2, 1, 0})}}});
  ExpectMatchesCpu({"Transpose", {In(Random(DType::kInt32, {2, 3, 4, 5, 6}, 15, -50, 50))},
                    {{"perm", Attribute(std::vector<int64_t>{4, 1, 3, 0, 2})}}});
  ExpectMatchesCpu({"Transpose", {In(Tensor(DType::kFloat32, {0, 20, 20}))},
                    {{"perm", Attribute(std::vector<int64_t>{2, 0, 1})}}});
  ExpectMatchesCpu({"Transpose", {In(Tensor::Scalar<float>(2.5f))}});
}

TEST_F(CudaTensorOpsTest, ExpandAndTile) {
  ExpectMatchesCpu({"Expand", {In(Random(DType::kFloat32, {3, 1}, 1)), Const(I64({2, 3, 4}))}});
  ExpectMatchesCpu({"Expand", {In(Random(DType::kFloat16, {1, 4}, 2)), Const(I64({5, 1}))}});
  ExpectMatchesCpu({"Expand", {In(Tensor::Scalar<int64_t>(-3)), Const(I64({6}))}});
  ExpectMatchesCpu({"Expand", {In(Random(DType::kFloat32, {8, 16}, 3)), Const(I64({3, 1, 16}))}});
  ExpectMatchesCpu({"Expand", {In(Random(DType::kFloat32, {2, 1}, 4)), Const(I64({2, 0}))}});
  ExpectMatchesCpu({"Tile", {In(Random(DType::kFloat32, {2, 3}, 5)), Const(I64({2, 2}))}});
  ExpectMatchesCpu({"Tile", {In(Random(DType::kInt64, {2, 1, 3}, 6, -9, 9)), Const(I64({1, 4, 3}))}});
  ExpectMatchesCpu({"Tile", {In(Random(DType::kUInt8, {5, 4}, 7, 0, 255)), Const(I64({3, 1}))}});
  ExpectMatchesCpu({"Tile", {In(Random(DType::kFloat32, {2, 3}, 8)), Const(I64({0, 2}))}});
}

TEST_F(CudaTensorOpsTest, Slice) {
  const Tensor x = Random(DType::kFloat32, {6, 7, 8}, 1);
  auto slice = [&](const Tensor& data, std::vector<int64_t> starts, std::vector<int64_t> ends,
                   std::vector<int64_t> axes, std::vector<int64_t> steps) {
    std::vector<Input> in = {In(data), Const(I64(starts)), Const(I64(ends))};
    if (!axes.empty()) in.push_back(Const(I64(axes)));
    if (!steps.empty()) {
      if (axes.empty()) in.push_back(Omitted());
      in.push_back(Const(I64(steps)));
    }
    ExpectMatchesCpu({"Slice", in});
  };
  slice(x, {1}, {4}, {0}, {});                       // contiguous rows: memcpy
  slice(x, {0, 2}, {6, 6}, {0, 2}, {});              // inner run of 4
  slice(x, {5, -1}, {0, 0}, {1, 2}, {-2, -3});       // negative steps
  slice(x, {-100, 1}, {100, 1000}, {-1, -2}, {3, 1});  // clamping
  slice(x, {3}, {3}, {1}, {});                       // empty
  slice(x, {1, 1, 1}, {5, 6, 7}, {}, {2, 2, 2});
  slice(Random(DType::kInt64, {10, 4}, 2, -99, 99), {2}, {9}, {0}, {3});
  slice(Random(DType::kFloat16, {9, 12}, 3), {0, 4}, {9, 12}, {0, 1}, {});  // 8 halves = 16 bytes
  slice(Random(DType::kBool, {9, 13}, 4), {1, 3}, {8, 11}, {0, 1}, {});
}

TEST_F(CudaTensorOpsTest, SliceGradWritesZerosOutsideTheSlice) {
  auto grad = [&](std::vector<int64_t> shape, std::vector<int64_t> starts, std::vector<int64_t> ends,
                  std::vector<int64_t> axes, std::vector<int64_t> steps, std::vector<int64_t> dy_dims,
                  DType t = DType::kFloat32) {
    ExpectMatchesCpu({"SliceGrad",
                      {In(Random(t, dy_dims, 9)), Const(I64(starts)), Const(I64(ends)), Const(I64(axes)),
                       Const(I64(steps))},
                      {{"shape", Attribute(shape)}},
                      1,
                      kOttr});
  };
  grad({6, 7}, {1, 0}, {5, 7}, {0, 1}, {1, 1}, {4, 7});
  grad({6, 7}, {5, -1}, {0, 0}, {0, 1}, {-2, -3}, {3, 2});
  grad({6, 7, 3}, {0}, {7}, {1}, {3}, {6, 3, 3}, DType::kFloat16);
  grad({6, 7}, {2}, {2}, {0}, {1}, {0, 7});
}

TEST_F(CudaTensorOpsTest, ConcatAndSplit) {
  ExpectMatchesCpu({"Concat",
                    {In(Random(DType::kFloat32, {2, 3, 4}, 1)), In(Random(DType::kFloat32, {2, 5, 4}, 2)),
                     In(Random(DType::kFloat32, {2, 0, 4}, 3)), In(Random(DType::kFloat32, {2, 1, 4}, 4))},
                    {{"axis", Attribute(int64_t{1})}}});
  ExpectMatchesCpu({"Concat", {In(Random(DType::kInt8, {3, 5}, 5, -100, 100)), In(Random(DType::kInt8, {3, 3}, 6, -100, 100))},
                    {{"axis", Attribute(int64_t{-1})}}});
  ExpectMatchesCpu({"Concat", {In(Random(DType::kFloat16, {4, 2}, 7)), In(Random(DType::kFloat16, {1, 2}, 8))},
                    {{"axis", Attribute(int64_t{0})}}});
  // More parts than one launch takes.
  std::vector<Input> many;
  for (int i = 0; i < 40; ++i) many.push_back(In(Random(DType::kFloat32, {3, 1 + i % 3, 8}, 100 + i)));
  ExpectMatchesCpu({"Concat", many, {{"axis", Attribute(int64_t{1})}}});

  const Tensor x = Random(DType::kFloat32, {4, 10, 6}, 20);
  ExpectMatchesCpu({"Split", {In(x), Const(I64({2, 5, 3}))}, {{"axis", Attribute(int64_t{1})}}, 3});
  ExpectMatchesCpu({"Split", {In(x)}, {{"axis", Attribute(int64_t{1})}, {"num_outputs", Attribute(int64_t{3})}}, 3});
  ExpectMatchesCpu({"Split", {In(x)}, {{"axis", Attribute(int64_t{0})}}, 2});
  ExpectMatchesCpu({"Split", {In(Random(DType::kInt64, {5, 7}, 21, -5, 5)), Const(I64({0, 7}))},
                    {{"axis", Attribute(int64_t{-1})}}, 2});
  ExpectMatchesCpu({"Split", {In(Random(DType::kUInt8, {3, 9}, 22, 0, 200)), Const(I64({4, 5}))},
                    {{"axis", Attribute(int64_t{1})}}, 2});
}

TEST_F(CudaTensorOpsTest, Gather) {
  const Tensor data = Random(DType::kFloat32, {10, 16}, 1);
  ExpectMatchesCpu({"Gather", {In(data), In(Vec<int64_t>({5}, {0, 9, -1, 3, 3}))}});
  ExpectMatchesCpu({"Gather", {In(data), In(Vec<int32_t>({2, 2}, {1, -16, 15, 0}))}, {{"axis", Attribute(int64_t{1})}}});
  ExpectMatchesCpu({"Gather", {In(data), In(Tensor::Scalar<int64_t>(7))}});
  ExpectMatchesCpu({"Gather", {In(Random(DType::kFloat16, {3, 5, 7}, 2)), In(Vec<int64_t>({3}, {4, 0, 4}))},
                    {{"axis", Attribute(int64_t{1})}}});
  ExpectMatchesCpu({"Gather", {In(Random(DType::kBool, {6, 3}, 3)), In(Vec<int32_t>({4}, {5, 5, 0, -6}))}});
  ExpectMatchesCpu({"Gather", {In(Random(DType::kInt64, {6}, 4, -9, 9)), In(Vec<int64_t>({2, 3}, {0, 1, 2, 3, 4, 5}))}});
  ExpectMatchesCpu({"Gather", {In(data), In(Tensor(DType::kInt64, {0}))}});
}

TEST_F(CudaTensorOpsTest, GatherGradSumsRepeatedIndicesDeterministically) {
  auto grad = [](std::vector<int64_t> shape, int64_t axis, const Tensor& idx, DType t, uint64_t seed,
                 double rtol = 0.0, double atol = 0.0) {
    std::vector<int64_t> dy(shape.begin(), shape.begin() + axis);
    dy.insert(dy.end(), idx.dims().begin(), idx.dims().end());
    dy.insert(dy.end(), shape.begin() + axis + 1, shape.end());
    Case c{"GatherGrad", {In(Random(t, dy, seed)), In(idx)},
           {{"axis", Attribute(axis)}, {"shape", Attribute(shape)}}, 1, kOttr, rtol, atol};
    ExpectMatchesCpu(c, /*twice=*/true);
  };
  grad({10, 16}, 0, Vec<int64_t>({6}, {3, 3, -7, 9, 0, 3}), DType::kFloat32, 1);
  grad({4, 6, 5}, 1, Vec<int32_t>({2, 2}, {5, 0, 5, -1}), DType::kFloat32, 2);
  grad({8}, 0, Tensor::Scalar<int64_t>(2), DType::kFloat32, 3);
  grad({12, 64}, 0, Random(DType::kInt64, {1000}, 4, -12, 11), DType::kFloat32, 4);  // the sorted path
  grad({50, 3}, 0, Random(DType::kInt32, {3000}, 5, 0, 49), DType::kFloat16, 5, 1e-3, 1e-3);
  grad({7, 9}, 1, Random(DType::kInt64, {40}, 6, 0, 8), DType::kFloat64, 6);
  grad({5, 4}, 0, Tensor(DType::kInt64, {0}), DType::kFloat32, 7);
}

TEST_F(CudaTensorOpsTest, GatherElementsAndGrad) {
  const Tensor data = Random(DType::kFloat32, {4, 5}, 1);
  ExpectMatchesCpu({"GatherElements", {In(data), In(Vec<int64_t>({4, 2}, {0, 4, -1, 2, 3, 3, 1, 0}))},
                    {{"axis", Attribute(int64_t{1})}}});
  ExpectMatchesCpu({"GatherElements", {In(data), In(Vec<int32_t>({2, 5}, {0, 1, 2, 3, -4, 3, 2, 1, 0, 0}))}});
  ExpectMatchesCpu({"GatherElements", {In(Random(DType::kInt8, {3, 4, 2}, 2, -50, 50)),
                                       In(Random(DType::kInt64, {3, 6, 1}, 3, -4, 3))},
                    {{"axis", Attribute(int64_t{1})}}});
  ExpectMatchesCpu({"GatherElementsGrad",
                    {In(Random(DType::kFloat32, {4, 6}, 4)), In(Random(DType::kInt64, {4, 6}, 5, -5, 4))},
                    {{"axis", Attribute(int64_t{1})}, {"shape", Attribute(std::vector<int64_t>{4, 5})}},
                    1,
                    kOttr});
  ExpectMatchesCpu({"GatherElementsGrad",
                    {In(Random(DType::kFloat16, {2, 3}, 6)), In(Random(DType::kInt32, {2, 3}, 7, 0, 4))},
                    {{"axis", Attribute(int64_t{0})}, {"shape", Attribute(std::vector<int64_t>{5, 4})}},
                    1,
                    kOttr});
}

TEST_F(CudaTensorOpsTest, ScatterElementsAppliesDuplicatesInOrder) {
  const Tensor idx = Vec<int64_t>({2, 4}, {1, 1, -3, 0, 2, 2, 2, 0});
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt32, DType::kInt64, DType::kFloat64}) {
      ExpectMatchesCpu({"ScatterElements",
                        {In(Random(t, {3, 4}, 1, -9, 9)), In(idx), In(Random(t, {2, 4}, 2, -9, 9))},
                        {{"reduction", Attribute(std::string(red))}}});
    }
    ExpectMatchesCpu({"ScatterElements",
                      {In(Random(DType::kBool, {3, 4}, 3)), In(idx), In(Random(DType::kBool, {2, 4}, 4))},
                      {{"reduction", Attribute(std::string(red))}}});
  }
  ExpectMatchesCpu({"ScatterElements",
                    {In(Random(DType::kFloat32, {3, 5}, 5)), In(Vec<int32_t>({3, 2}, {4, 0, 1, 1, -1, 2})),
                     In(Random(DType::kFloat32, {3, 2}, 6))},
                    {{"axis", Attribute(int64_t{1})}}});
}

TEST_F(CudaTensorOpsTest, PadEveryMode) {
  const Tensor x = Random(DType::kFloat32, {3, 4, 5}, 1);
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    const Attrs a = {{"mode", Attribute(std::string(mode))}};
    ExpectMatchesCpu({"Pad", {In(x), Const(I64({1, 2, 3, 2, 1, 0}))}, a});
    ExpectMatchesCpu({"Pad", {In(x), Const(I64({0, 0, 2, 0, 0, 3}))}, a});   // last axis only
    ExpectMatchesCpu({"Pad", {In(x), Const(I64({2, 0, 0, 1, 0, 0}))}, a});   // widened rows
    ExpectMatchesCpu({"Pad", {In(x), Const(I64({-1, 1, 0, 0, 2, -2}))}, a});  // negative pads
    ExpectMatchesCpu({"Pad", {In(x), Const(I64({1, 3})), Omitted(), Const(I64({-2}))}, a});
    ExpectMatchesCpu({"Pad", {In(Random(DType::kInt32, {4, 6}, 2, -50, 50)), Const(I64({1, 2, 2, 1}))}, a});
    ExpectMatchesCpu({"Pad", {In(Random(DType::kFloat16, {2, 8}, 3)), Const(I64({0, 3, 1, 4}))}, a});
  }
  // The pad value: a constant, a run-time value read on the device, one of another type.
  ExpectMatchesCpu({"Pad", {In(x), Const(I64({1, 1, 1, 1, 1, 1})), Const(Tensor::Scalar<float>(2.5f))}});
  ExpectMatchesCpu({"Pad", {In(x), Const(I64({0, 1, 1, 0, 1, 1})), In(Tensor::Scalar<float>(-1.25f))}});
  ExpectMatchesCpu({"Pad", {In(Random(DType::kInt64, {3, 2}, 4, -9, 9)), Const(I64({1, 1, 1, 1})),
                            Const(Tensor::Scalar<int64_t>(-7))}});
  ExpectMatchesCpu({"Pad", {In(Random(DType::kUInt8, {4, 16}, 5, 0, 200)), Const(I64({1, 0, 1, 0})),
                            In(Tensor::Scalar<uint8_t>(9))}});
  ExpectMatchesCpu({"Pad", {In(Tensor::Scalar<float>(3.0f)), Const(Tensor(DType::kInt64, {0}))}});
}

TEST_F(CudaTensorOpsTest, PadGradSumsEveryCopy) {
  for (const char* mode : {"reflect", "edge", "wrap", "constant"}) {
    ExpectMatchesCpu({"PadGrad",
                      {In(Random(DType::kFloat32, {7, 10}, 1)), Const(I64({2, 3, 1, 2}))},
                      {{"mode", Attribute(std::string(mode))}, {"shape", Attribute(std::vector<int64_t>{4, 5})}},
                      1,
                      kOttr});
    ExpectMatchesCpu({"PadGrad",
                      {In(Random(DType::kFloat16, {3, 11}, 2)), Const(I64({4, 3})), Const(I64({1}))},
                      {{"mode", Attribute(std::string(mode))}, {"shape", Attribute(std::vector<int64_t>{3, 4})}},
                      1,
                      kOttr});
  }
}

TEST_F(CudaTensorOpsTest, Generators) {
  ir::Tensor iv(DType::kInt64, {});
  iv.data<int64_t>()[0] = -4;
  ExpectMatchesCpu({"ConstantOfShape", {Const(I64({3, 4}))}, {{"value", Attribute(iv)}}});
  ExpectMatchesCpu({"ConstantOfShape", {Const(I64({5}))}});
  ir::Tensor hv = Random(DType::kFloat16, {1}, 3);
  ExpectMatchesCpu({"ConstantOfShape", {Const(I64({33}))}, {{"value", Attribute(hv)}}});
  ExpectMatchesCpu({"ConstantOfShape", {Const(I64({2, 0}))}});
  ExpectMatchesCpu({"Range", {Const(Tensor::Scalar<float>(0.5f)), Const(Tensor::Scalar<float>(10.0f)),
                              Const(Tensor::Scalar<float>(0.3f))}});
  ExpectMatchesCpu({"Range", {Const(Tensor::Scalar<int32_t>(10)), Const(Tensor::Scalar<int32_t>(-7)),
                              Const(Tensor::Scalar<int32_t>(-3))}});
  ExpectMatchesCpu({"Range", {Const(Tensor::Scalar<int64_t>(5)), Const(Tensor::Scalar<int64_t>(5)),
                              Const(Tensor::Scalar<int64_t>(1))}});
  ExpectMatchesCpu({"Range", {Const(Tensor::Scalar<double>(-1.0)), Const(Tensor::Scalar<double>(1.0)),
                              Const(Tensor::Scalar<double>(0.125))}});
  ExpectMatchesCpu({"OneHot", {In(Vec<int64_t>({2, 3}, {0, 4, -1, 2, 7, -6})), Const(Tensor::Scalar<int64_t>(5)),
                               In(Vec<float>({2}, {-0.5f, 3.0f}))}});
  ExpectMatchesCpu({"OneHot", {In(Vec<float>({4}, {1.7f, -2.2f, 0.0f, 9.0f})), Const(Tensor::Scalar<float>(3.0f)),
                               In(Vec<int32_t>({2}, {0, 1}))},
                    {{"axis", Attribute(int64_t{0})}}});
}

TEST_F(CudaTensorOpsTest, CumSum) {
  for (int64_t excl : {0, 1}) {
    for (int64_t rev : {0, 1}) {
      const Attrs a = {{"exclusive", Attribute(excl)}, {"reverse", Attribute(rev)}};
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kFloat32, {3, 5, 4}, 1)), Const(I64Scalar(1))}, a, 1, "", 1e-6, 1e-6});
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kFloat32, {3, 3000}, 2)), Const(I64Scalar(-1))}, a, 1, "", 1e-6, 1e-6});
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kInt32, {2, 700}, 3, -1000, 1000)), Const(I64Scalar(1))}, a});
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kInt64, {6, 2}, 4, -9, 9)), Const(I64Scalar(0))}, a});
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kFloat64, {300}, 5)), Const(Tensor::Scalar<int32_t>(0))}, a, 1, "", 1e-12, 1e-12});  // block scan: another summation order
      ExpectMatchesCpu({"CumSum", {In(Random(DType::kFloat16, {2, 400}, 6)), Const(I64Scalar(1))}, a, 1, "", 1e-3, 1e-3});
    }
  }
}

TEST_F(CudaTensorOpsTest, Trilu) {
  const Tensor x = Random(DType::kFloat32, {2, 5, 7}, 1);
  for (int64_t upper : {0, 1}) {
    const Attrs a = {{"upper", Attribute(upper)}};
    ExpectMatchesCpu({"Trilu", {In(x)}, a});
    ExpectMatchesCpu({"Trilu", {In(x), Const(I64Scalar(2))}, a});
    ExpectMatchesCpu({"Trilu", {In(x), In(I64Scalar(-3))}, a});  // k read on the device
    ExpectMatchesCpu({"Trilu", {In(Random(DType::kInt64, {6, 4}, 2, -9, 9)), Const(I64Scalar(-1))}, a});
  }
}

TEST_F(CudaTensorOpsTest, RejectsAxesThatAreNotCompileTimeConstants) {
  // CumSum's output shape does not depend on the axis, so inference succeeds; the plan needs it.
  ExpectCudaRejects({"CumSum", {In(Random(DType::kFloat32, {4, 3}, 1)), In(I64Scalar(1))}},
                    absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ottr::testing::cuda_tensor
