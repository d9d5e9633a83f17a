// Tests of the CUDA convolution and pooling ops (runtime/cuda/conv_pool_ops.cc,
// kernels/pool_kernels.cu) against the CPU reference, one node at a time with random (never
// zero) inputs, the CUDA arena poisoned with NaN bytes and a second replay that must reproduce
// the first bit for bit (deterministic algorithms and kernels). The backward ops get random dY
// directly (the gradient-graph cases in tests/gpu/cuda_ops_gputest.cc reach them only through
// a weighted-sum loss). Shapes cover each path: symmetric pads (cuDNN pads), asymmetric and
// SAME pads (explicitly padded copy / full image cropped), ConvTranspose output_padding past the
// stride and negative derived pads, groups, dilations, 1-D to 3-D, the benchmark CNN's Conv 3x3
// and MaxPool 2x2/2 shapes. Also: the algorithm cache (a second compile of a shape runs no
// search, also from a saved cache file). Skipped without a device.
//
// Tolerances (elementwise |got − want| <= atol + rtol·|want|), with TF32 off (FMA math):
//   float32 convolutions 1e-4: the CPU's GEMM and cuDNN sum up to a few thousand products of
//     values in [-1, 1) in different orders (and Winograd/FFT algorithms add transform rounding
//     of a few float ulps of the largest output); outputs are O(10), so rounding is ~1e-6..1e-5.
//   float64 1e-10; float16 4e-3 (one float16 ulp is ~1e-3 relative: both sides round a float
//     accumulation once, which can land on either side of a rounding boundary).
//   Pools: MaxPool copies the chosen element (exact); Average/Lp sum in double on both sides;
//   the backward pools sum the same float terms in the same (increasing window) order: 1e-5.
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/ops/channels_last.h"
#include "runtime/cpu/channels_last.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"

#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#endif

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Dims = std::vector<int64_t>;

const std::string kOttr(ir::kOttrDomain);

Attribute Ints(Dims v) { return Attribute(std::move(v)); }
Attribute Int(int64_t v) { return Attribute(v); }

double ConvTol(DType t) { return t == DType::kFloat32 ? 1e-4 : t == DType::kFloat64 ? 1e-10 : 4e-3; }

// A forward convolution geometry with the shapes of its operands.
struct ConvCase {
  std::string name;
  Dims x, w;
  Attrs attrs;
  bool bias = true;
};

std::vector<ConvCase> ConvCases() {
  return {
      {"3x3_pad1_bias", {2, 3, 6, 5}, {4, 3, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}},
      {"3x3_pad0_benchmark", {8, 16, 14, 14}, {32, 16, 3, 3}, {}},
      {"3x3_pad1_benchmark", {8, 16, 28, 28}, {16, 16, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}},
      {"asymmetric_pads_strides_dilations",
       {1, 2, 7, 8},
       {3, 2, 2, 3},
       {{"strides", Ints({2, 1})}, {"dilations", Ints({1, 2})}, {"pads", Ints({1, 0, 0, 2})}},
       false},
      {"group2", {2, 4, 5, 4}, {6, 2, 3, 3}, {{"group", Int(2)}}},
      {"depthwise_same_upper_stride2",
       {1, 3, 5, 6},
       {3, 1, 3, 3},
       {{"group", Int(3)}, {"auto_pad", Attribute("SAME_UPPER")}, {"strides", Ints({2, 2})}},
       false},
      {"1d_same_lower", {2, 2, 7}, {3, 2, 4}, {{"auto_pad", Attribute("SAME_LOWER")}}},
      {"1d_symmetric_stride2", {3, 4, 11}, {5, 4, 3}, {{"pads", Ints({1, 1})}, {"strides", Ints({2})}}},
      {"3d_asymmetric_pads", {1, 2, 4, 3, 4}, {2, 2, 2, 2, 3}, {{"pads", Ints({1, 0, 1, 0, 1, 1})}}},
      {"3d_symmetric", {2, 3, 5, 4, 4}, {4, 3, 3, 3, 3}, {{"pads", Ints({1, 1, 1, 1, 1, 1})}}},
      {"pointwise", {2, 3, 3, 4}, {5, 3, 1, 1}, {}},
      {"valid_stride3_unused_tail", {2, 1, 8, 8}, {2, 1, 3, 3}, {{"auto_pad", Attribute("VALID")}, {"strides", Ints({3, 3})}}},
  };
}

// The Conv's output dims (for random dY of the backward ops), from the CPU reference.
absl::StatusOr<Dims> ConvOutputDims(const ConvCase& c) {
  Case fwd{"Conv", {In(RandomOf(DType::kFloat64, c.x, 1)), In(RandomOf(DType::kFloat64, c.w, 2))}, c.attrs};
  runtime::TensorMap feeds;
  OTTR_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> g, BuildGraph(fwd, &feeds));
  return ir::StaticDims(*g->outputs()[0]->type().shape);
}

TEST(CudaConvPoolOpsTest, ConvMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 1;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    for (const ConvCase& c : ConvCases()) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      std::vector<Input> ins = {In(RandomOf(t, c.x, ++seed)), In(RandomOf(t, c.w, ++seed))};
      if (c.bias) ins.push_back(In(RandomOf(t, {c.w[0]}, ++seed)));
      Case k{"Conv", ins, c.attrs};
      k.rtol = k.atol = ConvTol(t);
      ExpectMatchesCpu(k);
    }
  }
}

TEST(CudaConvPoolOpsTest, ConvGradInputAndFilterMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 100;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (const ConvCase& c : ConvCases()) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      auto y = ConvOutputDims(c);
      ASSERT_TRUE(y.ok()) << y.status();
      const Tensor dy = RandomOf(t, *y, ++seed);
      Attrs gi = c.attrs;
      gi["input_shape"] = Ints(c.x);
      Case input{"ConvGradInput", {In(dy), In(RandomOf(t, c.w, ++seed))}, gi, 1, kOttr};
      input.rtol = input.atol = ConvTol(t);
      ExpectMatchesCpu(input);
      Attrs gf = c.attrs;
      gf["kernel_shape"] = Ints(Dims(c.w.begin() + 2, c.w.end()));
      Case filter{"ConvGradFilter", {In(dy), In(RandomOf(t, c.x, ++seed))}, gf, 1, kOttr};
      // dW sums N · positions products per element (up to ~6000 here): 2e-4 for float32. cuDNN's
      // FFT/Winograd algorithms make an error relative to the whole tensor's magnitude (here up
      // to ~35), not each element's, so an element that cancels to ~0.7 may be off by 1e-3:
      // atol 5e-5 of the largest magnitude, 2e-3.
      filter.rtol = t == DType::kFloat32 ? 2e-4 : ConvTol(t);
      filter.atol = t == DType::kFloat32 ? 2e-3 : ConvTol(t);
      ExpectMatchesCpu(filter);
    }
  }
}

TEST(CudaConvPoolOpsTest, ConvTransposeMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct CT {
    std::string name;
    Dims x, w;
    Attrs attrs;
    bool bias;
  };
  const std::vector<CT> cases = {
      {"stride2_bias", {2, 3, 3, 3}, {3, 2, 3, 3}, {{"strides", Ints({2, 2})}}, true},
      {"symmetric_pads_output_padding",
       {1, 4, 5, 5},
       {4, 3, 3, 3},
       {{"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}, {"output_padding", Ints({1, 1})}},
       true},
      {"asymmetric_pads_output_padding",
       {1, 2, 3, 4},
       {2, 3, 3, 3},
       {{"strides", Ints({2, 3})}, {"pads", Ints({1, 0, 1, 1})}, {"output_padding", Ints({1, 2})}},
       false},
      {"group2_dilations", {1, 4, 3, 3}, {4, 1, 2, 2}, {{"group", Int(2)}, {"dilations", Ints({2, 2})}}, true},
      {"output_shape_negative_pads", {1, 2, 3, 3}, {2, 2, 3, 3}, {{"strides", Ints({2, 2})}, {"output_shape", Ints({9, 8})}}, false},
      {"output_shape_positive_pads",
       {1, 2, 3, 3},
       {2, 1, 3, 3},
       {{"strides", Ints({2, 2})}, {"output_shape", Ints({1, 1, 6, 5})}},
       true},
      {"same_upper", {2, 1, 3, 2}, {1, 2, 3, 3}, {{"strides", Ints({2, 2})}, {"auto_pad", Attribute("SAME_UPPER")}}, false},
      {"1d_same_lower", {2, 2, 4}, {2, 3, 2}, {{"strides", Ints({3})}, {"auto_pad", Attribute("SAME_LOWER")}}, false},
      {"1d_output_padding_past_stride", {1, 2, 4}, {2, 3, 3}, {{"output_padding", Ints({2})}}, true},
      {"3d", {1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {{"strides", Ints({1, 2, 2})}, {"pads", Ints({0, 1, 0, 1, 0, 1})}}, true},
      {"pointwise", {2, 3, 3, 2}, {3, 4, 1, 1}, {}, false},
      {"benchmark_upsample", {4, 16, 14, 14}, {16, 8, 2, 2}, {{"strides", Ints({2, 2})}}, true},
  };
  int seed = 300;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (const CT& c : cases) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      const int64_t group = c.attrs.count("group") ? c.attrs.at("group").i() : 1;
      std::vector<Input> ins = {In(RandomOf(t, c.x, ++seed)), In(RandomOf(t, c.w, ++seed))};
      if (c.bias) ins.push_back(In(RandomOf(t, {c.w[1] * group}, ++seed)));
      Case k{"ConvTranspose", ins, c.attrs};
      k.rtol = k.atol = ConvTol(t);
      ExpectMatchesCpu(k);
    }
  }
}

// A pooling geometry: X's dims and the op's attributes.
struct PoolCase {
  std::string name;
  Dims x;
  Attrs attrs;
};

std::vector<PoolCase> PoolCases() {
  return {
      {"2x2_stride2_benchmark", {8, 16, 28, 28}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}},
      {"2x2_stride2_odd", {2, 3, 5, 7}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}},
      {"overlapping_pads", {1, 2, 5, 5}, {{"kernel_shape", Ints({3, 3})}, {"pads", Ints({1, 1, 1, 1})}}},
      {"ceil_dilations_pads",
       {1, 2, 7, 6},
       {{"kernel_shape", Ints({2, 3})},
        {"strides", Ints({2, 2})},
        {"dilations", Ints({2, 1})},
        {"pads", Ints({0, 1, 1, 0})},
        {"ceil_mode", Int(1)}}},
      {"1d_same_upper", {2, 2, 7}, {{"kernel_shape", Ints({3})}, {"strides", Ints({2})}, {"auto_pad", Attribute("SAME_UPPER")}}},
      {"1d_same_lower", {2, 3, 6}, {{"kernel_shape", Ints({3})}, {"strides", Ints({2})}, {"auto_pad", Attribute("SAME_LOWER")}}},
      {"3d_pads", {1, 2, 4, 3, 4}, {{"kernel_shape", Ints({2, 2, 2})}, {"pads", Ints({1, 0, 0, 0, 1, 1})}}},
      {"3d_strides", {1, 1, 4, 4, 3}, {{"kernel_shape", Ints({2, 2, 2})}, {"strides", Ints({2, 1, 1})}}},
  };
}

Dims PoolOutputDims(const PoolCase& c) {
  Case fwd{"AveragePool", {In(RandomOf(DType::kFloat32, c.x, 1))}, c.attrs};
  runtime::TensorMap feeds;
  auto g = BuildGraph(fwd, &feeds);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? ir::StaticDims(*(*g)->outputs()[0]->type().shape) : Dims();
}

TEST(CudaConvPoolOpsTest, PoolsMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 500;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    // Both sides sum in double in the same order; float16/bfloat16 may round the double result
    // through float (one ulp apart in rare ties).
    const double tol = t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 1e-6 : t == DType::kFloat16 ? 1e-3 : 8e-3;
    for (const PoolCase& c : PoolCases()) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      const Tensor x = RandomOf(t, c.x, ++seed);
      Case max{"MaxPool", {In(x)}, c.attrs, 2};
      max.rtol = max.atol = 0;
      ExpectMatchesCpu(max);
      for (int64_t include : {0, 1}) {
        Attrs a = c.attrs;
        a["count_include_pad"] = Int(include);
        Case avg{"AveragePool", {In(x)}, a};
        avg.rtol = avg.atol = tol;
        ExpectMatchesCpu(avg);
      }
      for (int64_t p : {1, 2, 3}) {
        Attrs a = c.attrs;
        a["p"] = Int(p);
        Case lp{"LpPool", {In(x)}, a};
        lp.rtol = lp.atol = tol;
        ExpectMatchesCpu(lp);
      }
    }
  }
}

TEST(CudaConvPoolOpsTest, MaxPoolIndicesStorageOrderIntegersAndNaN) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const Attrs attrs = {{"kernel_shape", Ints({2, 3})}, {"strides", Ints({1, 2})}, {"pads", Ints({1, 1, 0, 1})}};
  for (int64_t order : {0, 1}) {
    Attrs a = attrs;
    a["storage_order"] = Int(order);
    Case c{"MaxPool", {In(RandomOf(DType::kFloat32, {2, 2, 4, 5}, 7))}, a, 2};
    c.rtol = c.atol = 0;
    ExpectMatchesCpu(c);
    Case only_indices{"MaxPool", {In(RandomOf(DType::kFloat32, {2, 2, 4, 5}, 8))}, a, 2};
    only_indices.unread_outputs = {0};
    ExpectMatchesCpu(only_indices);
  }
  for (DType t : {DType::kUInt8, DType::kInt8, DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(ir::DTypeName(t));
    // Small integers: many ties, where the first maximum must win on both sides.
    Case c{"MaxPool", {In(RandomOf(t, {2, 3, 6, 6}, 9, 0.0, 20.0))}, attrs, 2};
    c.rtol = c.atol = 0;
    ExpectMatchesCpu(c);
  }
  // NaN propagates (the first NaN of a window wins), also into MaxPoolGrad's routing.
  Tensor x = RandomOf(DType::kFloat32, {1, 2, 6, 6}, 10);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[41] = std::numeric_limits<float>::quiet_NaN();
  Case nan{"MaxPool", {In(x)}, attrs, 2};
  nan.rtol = nan.atol = 0;
  ExpectMatchesCpu(nan);
  Case global{"GlobalMaxPool", {In(x)}};
  ExpectMatchesCpu(global);
  const Dims y = PoolOutputDims({"nan", {1, 2, 6, 6}, attrs});
  Case grad{"MaxPoolGrad", {In(RandomOf(DType::kFloat32, y, 11)), In(x)}, attrs, 1, kOttr};
  grad.rtol = grad.atol = 1e-6;
  ExpectMatchesCpu(grad);
}

TEST(CudaConvPoolOpsTest, PoolGradsMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 700;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    const double tol = t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 1e-5 : 2e-3;
    for (const PoolCase& c : PoolCases()) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      const Dims y = PoolOutputDims(c);
      const Tensor x = RandomOf(t, c.x, ++seed);
      const Tensor dy = RandomOf(t, y, ++seed);
      Case max{"MaxPoolGrad", {In(dy), In(x)}, c.attrs, 1, kOttr};
      max.rtol = max.atol = tol;
      ExpectMatchesCpu(max);
      for (int64_t include : {0, 1}) {
        Attrs a = c.attrs;
        a["count_include_pad"] = Int(include);
        a["input_shape"] = Ints(c.x);
        Case avg{"AveragePoolGrad", {In(dy)}, a, 1, kOttr};
        avg.rtol = avg.atol = tol;
        ExpectMatchesCpu(avg);
      }
      if (t == DType::kFloat16) continue;
      for (int64_t p : {1, 2, 3}) {
        Attrs a = c.attrs;
        a["p"] = Int(p);
        // Y from the CPU forward, so that dX sees the true norms.
        Case fwd{"LpPool", {In(x)}, a};
        runtime::TensorMap feeds;
        auto g = BuildGraph(fwd, &feeds);
        ASSERT_TRUE(g.ok()) << g.status();
        auto cpu = runtime::cpu::CpuExecutor::Create(**g);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        auto y_val = (*cpu)->Run(feeds);
        ASSERT_TRUE(y_val.ok()) << y_val.status();
        Case lp{"LpPoolGrad", {In(dy), In(x), In((*y_val)[0])}, a, 1, kOttr};
        lp.rtol = lp.atol = t == DType::kFloat64 ? 1e-10 : 1e-5;
        ExpectMatchesCpu(lp);
      }
    }
  }
}

// The tiled fast path of MaxPool / MaxPoolGrad (kernel == stride, no padding, no dilation,
// floor mode: one thread per window; 2x2 windows of even-width rows read as aligned pairs): exact
// against the CPU reference (the forward copies the chosen element; the backward writes dY
// there, 0 + dY as the reference adds into zeros, and 0 elsewhere, including the rows / columns
// past the last full window). Inputs have many ties (values in {0, 1, 2}: the first maximum in
// row-major window order wins), NaN (the first NaN wins; also a window whose first tap is NaN
// and one of two NaNs), and -0 in dY.
ir::Tensor WithTiesAndNaN(DType t, const Dims& dims, uint64_t seed) {
  const Tensor r = RandomOf(DType::kFloat64, dims, seed, 0.0, 3.0);
  Tensor x(t, dims);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ir::VisitDType(t, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      T* p = x.data<T>();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const double v = std::floor(r.data<double>()[i]);
        p[i] = ir::FromDouble<T>(i % 37 == 5 || i % 53 == 0 || i % 53 == 1 ? nan : v);
      }
    }
  });
  return x;
}

TEST(CudaConvPoolOpsTest, TiledMaxPoolFastPathMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct TiledCase {
    std::string name;
    Dims x;
    Dims kernel;
  };
  const std::vector<TiledCase> cases = {
      {"2x2_benchmark", {4, 8, 24, 24}, {2, 2}},
      {"2x2_odd_height_and_width", {2, 3, 7, 9}, {2, 2}},
      {"2x2_odd_height_even_width", {3, 2, 5, 6}, {2, 2}},
      {"3x3_tails", {2, 2, 10, 11}, {3, 3}},
      {"2x3", {2, 3, 6, 9}, {2, 3}},
      {"1d_kernel2", {2, 3, 9}, {2}},
  };
  int seed = 1200;
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (const TiledCase& c : cases) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      const Attrs attrs = {{"kernel_shape", Ints(c.kernel)}, {"strides", Ints(c.kernel)}};
      for (const Tensor& x : {RandomOf(t, c.x, ++seed), WithTiesAndNaN(t, c.x, ++seed)}) {
        Case max{"MaxPool", {In(x)}, attrs};
        max.rtol = max.atol = 0;
        ExpectMatchesCpu(max);
        for (int64_t order : {0, 1}) {
          Attrs a = attrs;
          a["storage_order"] = Int(order);
          Case indices{"MaxPool", {In(x)}, a, 2};
          indices.rtol = indices.atol = 0;
          ExpectMatchesCpu(indices);
        }
        Tensor dy = RandomOf(t, PoolOutputDims({c.name, c.x, attrs}), ++seed);
        ir::VisitDType(t, [&]<typename T>() {
          if constexpr (!std::is_void_v<T>) dy.data<T>()[1] = ir::FromDouble<T>(-0.0);
        });
        Case grad{"MaxPoolGrad", {In(dy), In(x)}, attrs, 1, kOttr};
        grad.rtol = grad.atol = 0;
        ExpectMatchesCpu(grad);
      }
    }
  }
  // Integers (MaxPool only): small values, many ties.
  for (DType t : {DType::kUInt8, DType::kInt32, DType::kInt64}) {
    for (const TiledCase& c : cases) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      const Attrs attrs = {{"kernel_shape", Ints(c.kernel)}, {"strides", Ints(c.kernel)}};
      Case max{"MaxPool", {In(RandomOf(t, c.x, ++seed, 0.0, 4.0))}, attrs, 2};
      max.rtol = max.atol = 0;
      ExpectMatchesCpu(max);
    }
  }
}

TEST(CudaConvPoolOpsTest, GlobalPoolsMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 900;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    for (const Dims& x_dims : std::vector<Dims>{{2, 3, 4, 5}, {2, 3, 5}, {3, 4}, {8, 64, 7, 7}, {2, 3, 40, 50}, {1, 2, 2, 3, 2}}) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " rank ", x_dims.size(), " ", x_dims.back()));
      const Tensor x = RandomOf(t, x_dims, ++seed, 0.3, 1.3);
      const double tol = t == DType::kFloat16 ? 1e-3 : 1e-6;
      Case avg{"GlobalAveragePool", {In(x)}};
      avg.rtol = avg.atol = tol;
      ExpectMatchesCpu(avg);
      Case max{"GlobalMaxPool", {In(x)}};
      max.rtol = max.atol = 0;
      ExpectMatchesCpu(max);
      for (int64_t p : {1, 2, 3}) {
        Case lp{"GlobalLpPool", {In(x)}, {{"p", Int(p)}}};
        lp.rtol = lp.atol = tol;
        ExpectMatchesCpu(lp);
      }
    }
  }
}

TEST(CudaConvPoolOpsTest, BFloat16ConvolutionsMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  // bfloat16 in and out, float32 accumulation on both sides (cuDNN's CUDNN_DATA_FLOAT compute
  // type; the CPU widens to float and rounds once): the sums differ only in order, so the results
  // differ by at most one bfloat16 rounding step (2^-7 relative) where a sum lies near a rounding
  // boundary: 2 steps of tolerance. The 2-D geometries (what mixed-precision CNNs use).
  int seed = 700;
  const DType t = DType::kBFloat16;
  const double tol = 2 * std::ldexp(1.0, -7);
  for (const ConvCase& c : ConvCases()) {
    if (c.x.size() != 4) continue;
    SCOPED_TRACE(c.name);
    std::vector<Input> ins = {In(RandomOf(t, c.x, ++seed)), In(RandomOf(t, c.w, ++seed))};
    if (c.bias) ins.push_back(In(RandomOf(t, {c.w[0]}, ++seed)));
    Case k{"Conv", ins, c.attrs};
    k.rtol = k.atol = tol;
    ExpectMatchesCpu(k);
    auto y = ConvOutputDims(c);
    ASSERT_TRUE(y.ok()) << y.status();
    const Tensor dy = RandomOf(t, *y, ++seed);
    Attrs gi = c.attrs;
    gi["input_shape"] = Ints(c.x);
    Case input{"ConvGradInput", {In(dy), In(RandomOf(t, c.w, ++seed))}, gi, 1, kOttr};
    input.rtol = input.atol = tol;
    ExpectMatchesCpu(input);
    Attrs gf = c.attrs;
    gf["kernel_shape"] = Ints(Dims(c.w.begin() + 2, c.w.end()));
    Case filter{"ConvGradFilter", {In(dy), In(RandomOf(t, c.x, ++seed))}, gf, 1, kOttr};
    filter.rtol = filter.atol = tol;
    ExpectMatchesCpu(filter);
  }
}

// The channels-last forms (layout = "NHWC", made by the nhwc-layout pass) against the CPU
// reference, which transposes to channels-first, runs the kernels above and transposes back: the
// 2-D cases with group 1 and symmetric pads (what the pass converts), including the benchmark
// CNN's first convolution (one input channel), a strided one, the tiled 2x2/2 max pool with a
// partial last row and column, and an overlapping 3x3/2 pool with padding (the generic kernels).
// float32 with FMA math (the same 1e-4 as the channels-first cases), float16 and bfloat16 on
// tensor cores (one rounding step of the 16-bit type either way: 2 steps).
TEST(CudaConvPoolOpsTest, ChannelsLastMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  auto last = [](const Tensor& t) { return runtime::cpu::PermuteTensor(t, ir::ToChannelsLastPerm(t.rank())); };
  // Up to 4 input channels the direct kernels run (kernels/small_conv_kernels.h: the 3x3x1,
  // 3x3x3 and 5x5x1 unrolled variants and the generic one), beyond that cuDNN's NHWC kernels.
  const std::vector<ConvCase> cases = {
      {"small_3x3_pad1_bias", {2, 3, 6, 5}, {4, 3, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}},
      {"small_c1_benchmark_conv1", {4, 1, 28, 28}, {32, 1, 3, 3}, {}},
      {"small_5x5_c1_stride2_pad2", {3, 1, 11, 9}, {7, 1, 5, 5}, {{"pads", Ints({2, 2, 2, 2})}, {"strides", Ints({2, 2})}}},
      {"small_generic_2x3_c2_dilated", {2, 2, 9, 10}, {6, 2, 2, 3}, {{"dilations", Ints({2, 1})}}, false},
      {"small_pointwise", {2, 3, 3, 4}, {5, 3, 1, 1}, {}},
      {"cudnn_3x3_pad0_benchmark", {8, 16, 14, 14}, {32, 16, 3, 3}, {}},
      {"cudnn_stride2_pad1_no_bias", {2, 8, 9, 9}, {8, 8, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 2})}}, false},
  };
  int seed = 900;
  // TF32 (float32 on tensor cores, cuDNN's graph-API engines): both operands rounded to 10
  // mantissa bits, ≤ 2^-10 relative per product; over the m products of an output (values in
  // [-1, 1), rms product 1/3) the rounding errors add like a random walk: 4σ = 4 · √m · 2^-10 / 3
  // absolute (m = C·kh·kw forward, K·kh·kw data gradient, N·OH·OW filter gradient).
  auto tf32_tol = [](int64_t m) { return 4.0 * std::sqrt(static_cast<double>(m)) * std::ldexp(1.0, -10) / 3.0; };
  for (auto [t, tf32] : std::vector<std::pair<DType, bool>>{
           {DType::kFloat32, false}, {DType::kFloat32, true}, {DType::kFloat16, false}, {DType::kBFloat16, false}}) {
    const double tol = t == DType::kFloat32 ? 1e-4 : t == DType::kFloat16 ? 4e-3 : 2 * std::ldexp(1.0, -7);
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), tf32 ? " tf32 " : " ", c.name));
      Attrs a = c.attrs;
      a["layout"] = Attribute("NHWC");
      std::vector<Input> ins = {In(last(RandomOf(t, c.x, ++seed))), In(last(RandomOf(t, c.w, ++seed)))};
      if (c.bias) ins.push_back(In(RandomOf(t, {c.w[0]}, ++seed)));
      Case fwd{"Conv", ins, a, 1, kOttr};
      fwd.rtol = fwd.atol = tf32 ? tf32_tol(c.w[1] * c.w[2] * c.w[3]) : tol;
      fwd.tf32 = tf32;
      ExpectMatchesCpu(fwd);
      // With the fused ReLU (fuse-conv-activation): in the small kernels, the graph engines'
      // epilogue, or after the legacy convolution.
      Case act = fwd;
      act.attrs["activation"] = Attribute("relu");
      ExpectMatchesCpu(act);
      auto y = ConvOutputDims(c);
      ASSERT_TRUE(y.ok()) << y.status();
      const Tensor dy = last(RandomOf(t, *y, ++seed));
      Attrs gi = a;
      gi["input_shape"] = Ints(c.x);
      Case input{"ConvGradInput", {In(dy), In(last(RandomOf(t, c.w, ++seed)))}, gi, 1, kOttr};
      input.rtol = input.atol = tf32 ? tf32_tol(c.w[0] * c.w[2] * c.w[3]) : tol;
      input.tf32 = tf32;
      ExpectMatchesCpu(input);
      Attrs gf = a;
      gf["kernel_shape"] = Ints(Dims(c.w.begin() + 2, c.w.end()));
      Case filter{"ConvGradFilter", {In(dy), In(last(RandomOf(t, c.x, ++seed)))}, gf, 1, kOttr};
      filter.rtol = filter.atol = tf32 ? tf32_tol((*y)[0] * (*y)[2] * (*y)[3]) : tol;
      filter.tf32 = tf32;
      ExpectMatchesCpu(filter);
    }
    if (tf32) continue;  // the pools are the same kernels
    const std::vector<PoolCase> pools = {
        {"tiled_2x2_partial", {2, 7, 9, 5}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}},
        {"tiled_benchmark", {4, 64, 24, 24}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}},
        {"overlap_3x3_s2_pad1",
         {2, 6, 9, 8},
         {{"kernel_shape", Ints({3, 3})}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}}},
    };
    for (const PoolCase& c : pools) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", c.name));
      Attrs a = c.attrs;
      a["layout"] = Attribute("NHWC");
      const Tensor x = RandomOf(t, c.x, ++seed);
      Case fwd{"MaxPool", {In(last(x))}, a, 1, kOttr};
      fwd.rtol = fwd.atol = 0;  // the chosen element, copied
      ExpectMatchesCpu(fwd);
      const Tensor dy = last(RandomOf(t, PoolOutputDims(c), ++seed));
      Case grad{"MaxPoolGrad", {In(dy), In(last(x))}, a, 1, kOttr};
      grad.rtol = grad.atol = t == DType::kFloat32 ? 1e-5 : 2e-3;
      ExpectMatchesCpu(grad);
      // relu_mask (fuse-maxpool-relu-grad), channels-last and channels-first.
      Case masked = grad;
      masked.attrs["relu_mask"] = Int(1);
      ExpectMatchesCpu(masked);
      Attrs first = c.attrs;
      first["relu_mask"] = Int(1);
      Case masked_first{"MaxPoolGrad", {In(RandomOf(t, PoolOutputDims(c), ++seed)), In(x)}, first, 1, kOttr};
      masked_first.rtol = masked_first.atol = grad.rtol;
      ExpectMatchesCpu(masked_first);
    }
  }
}

// The stride-1 data gradient run as a forward convolution of dY with the transposed, flipped
// filter (conv_pool_ops.cc, taken when cuDNN times it faster; forced here), channels-first and
// channels-last, pads 0 to k − 1, against the CPU reference: the tolerances of the cases above.
TEST(CudaConvPoolOpsTest, DataGradientAsForwardConvolutionMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  setenv("OTTR_CONV_DGRAD_AS_FORWARD", "1", 1);
  auto last = [](const Tensor& t) { return runtime::cpu::PermuteTensor(t, ir::ToChannelsLastPerm(t.rank())); };
  const std::vector<ConvCase> cases = {
      {"3x3_pad0", {4, 16, 12, 12}, {32, 16, 3, 3}, {}},
      {"3x3_pad1", {2, 8, 9, 7}, {16, 8, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}},
      {"5x3_pad_full", {2, 8, 9, 9}, {8, 8, 5, 3}, {{"pads", Ints({4, 2, 4, 2})}}},
  };
  int seed = 1300;
  for (bool channels_last : {false, true}) {
    for (DType t : {DType::kFloat16, DType::kBFloat16}) {
      const double tol = t == DType::kFloat16 ? 4e-3 : 2 * std::ldexp(1.0, -7);
      for (const ConvCase& c : cases) {
        SCOPED_TRACE(absl::StrCat(channels_last ? "nhwc " : "nchw ", ir::DTypeName(t), " ", c.name));
        auto y = ConvOutputDims(c);
        ASSERT_TRUE(y.ok()) << y.status();
        Attrs a = c.attrs;
        a["input_shape"] = Ints(c.x);
        Tensor dy = RandomOf(t, *y, ++seed), w = RandomOf(t, c.w, ++seed);
        if (channels_last) {
          a["layout"] = Attribute("NHWC");
          dy = last(dy);
          w = last(w);
        }
        Case input{"ConvGradInput", {In(dy), In(w)}, a, 1, kOttr};
        input.rtol = input.atol = tol;
        ExpectMatchesCpu(input);
      }
    }
  }
  unsetenv("OTTR_CONV_DGRAD_AS_FORWARD");
}

#ifdef OTTR_HAVE_CUDA

// Compiles node n0 of `c` for CUDA against `libs` (no executor: only the op's compile step).
absl::Status CompileOnly(const Case& c, cuda::CudaLibraries& libs) {
  runtime::TensorMap feeds;
  OTTR_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> g, BuildGraph(c, &feeds));
  const ir::Node* n = g->nodes().at(0);
  std::vector<ir::TensorType> ins, outs;
  std::vector<const ir::Tensor*> constants;
  for (const ir::Value* v : n->inputs()) {
    ins.push_back(v->type());
    constants.push_back(nullptr);
  }
  for (const ir::Value* v : n->outputs()) outs.push_back(v->type());
  cuda::OpCompileContext ctx(*n, ins, outs, constants, libs);
  const cuda::OpCompiler* fn = cuda::CudaOpRegistry::Global().Find(c.domain, c.op);
  if (fn == nullptr) return absl::NotFoundError(c.op);
  return (*fn)(ctx).status();
}

TEST(CudaConvPoolOpsTest, SecondCompileOfSameConvHitsAlgoCache) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const std::string file = ::testing::TempDir() + "/ottr_conv_algo_cache.txt";
  std::remove(file.c_str());
  // Other tests' compiles must not serve this one from the process-wide cache.
  cuda::CudaLibraries::ClearProcessCacheForTesting();
  auto libs = cuda::CudaLibraries::Create(/*tf32=*/false, file);
  ASSERT_TRUE(libs.ok()) << libs.status();
  const Attrs attrs = {{"pads", Ints({1, 1, 1, 1})}};
  const Case conv{"Conv", {In(RandomOf(DType::kFloat32, {4, 8, 12, 12}, 1)), In(RandomOf(DType::kFloat32, {8, 8, 3, 3}, 2))}, attrs};
  Attrs gf = attrs;
  gf["kernel_shape"] = Ints({3, 3});
  const Case filter{"ConvGradFilter",
                    {In(RandomOf(DType::kFloat32, {4, 8, 12, 12}, 3)), In(RandomOf(DType::kFloat32, {4, 8, 12, 12}, 4))},
                    gf,
                    1,
                    kOttr};

  ASSERT_EQ((*libs)->algo_searches(), 0);
  ASSERT_TRUE(CompileOnly(conv, **libs).ok());
  EXPECT_EQ((*libs)->algo_searches(), 1);
  const int64_t hits = (*libs)->cache_hits();
  ASSERT_TRUE(CompileOnly(conv, **libs).ok());
  EXPECT_EQ((*libs)->algo_searches(), 1) << "the second compile of the same Conv searched again";
  EXPECT_EQ((*libs)->cache_hits(), hits + 1);

  // Another direction of the same geometry is another key; so is another batch size.
  ASSERT_TRUE(CompileOnly(filter, **libs).ok());
  EXPECT_EQ((*libs)->algo_searches(), 2);
  const Case other_batch{"Conv", {In(RandomOf(DType::kFloat32, {2, 8, 12, 12}, 5)), In(RandomOf(DType::kFloat32, {8, 8, 3, 3}, 6))}, attrs};
  ASSERT_TRUE(CompileOnly(other_batch, **libs).ok());
  EXPECT_EQ((*libs)->algo_searches(), 3);

  // The choices persist through the --algo-cache file: a fresh CudaLibraries searches nothing.
  ASSERT_TRUE((*libs)->Save().ok());
  cuda::CudaLibraries::ClearProcessCacheForTesting();  // only the file may serve these
  auto reloaded = cuda::CudaLibraries::Create(/*tf32=*/false, file);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_TRUE(CompileOnly(conv, **reloaded).ok());
  ASSERT_TRUE(CompileOnly(filter, **reloaded).ok());
  EXPECT_EQ((*reloaded)->algo_searches(), 0);
  EXPECT_EQ((*reloaded)->cache_hits(), 2);
  // TF32 changes the math mode, hence the key: that executor searches for itself.
  auto tf32 = cuda::CudaLibraries::Create(/*tf32=*/true, file);
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  ASSERT_TRUE(CompileOnly(conv, **tf32).ok());
  EXPECT_EQ((*tf32)->algo_searches(), 1);
  std::remove(file.c_str());
}

#endif  // OTTR_HAVE_CUDA

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
