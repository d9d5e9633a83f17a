// Tests of the CUDA normalisation and dropout ops (runtime/cuda/normalization_ops.cc,
// kernels/norm_kernels.cu, kernels/dropout_kernels.cu) against the CPU reference, on the shapes
// that select each kernel path: LayerNorm rows in registers (4..32 lanes) and one block per
// row, parameters indexed by column or through a broadcast map; BatchNorm statistics in one or
// several chunks per channel, vectorised and scalar elementwise passes; Group/Instance norm
// with per-channel and per-group parameters. Dropout: the identity paths exactly, and the
// training path by its invariants (the CPU's random stream differs). Skipped without a device.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

double Tol(DType t) { return t == DType::kFloat32 ? 2e-5 : t == DType::kFloat64 ? 1e-11 : 2e-2; }

TEST(CudaNormalizationOpsTest, LayerNormalizationMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct Shape {
    std::vector<int64_t> x;
    int64_t axis;
    std::vector<int64_t> scale;  // also B
  };
  const std::vector<Shape> shapes = {
      {{6, 3}, -1, {3}},          {{6, 33}, -1, {33}},          {{4, 3, 256}, -1, {256}}, {{5, 1000}, 1, {1000}},
      {{3, 2, 2000}, -1, {2000}}, {{2, 3, 4, 5}, 1, {3, 4, 5}}, {{2, 3, 4, 5}, 1, {5}},   {{2, 3, 4, 5}, 2, {1, 5}},
      {{4, 6}, 0, {4, 6}},        {{4, 6}, 1, {4, 1}},  // Scale varies over the rows: the general map
  };
  int seed = 10;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " X rank ", s.x.size(), " axis ", s.axis));
      const Tensor x = RandomOf(t, s.x, ++seed, -2.0, 3.0);
      const Tensor scale = RandomOf(t, s.scale, ++seed, 0.5, 1.5);
      const Tensor bias = RandomOf(t, s.scale, ++seed);
      const Attrs attrs = {{"axis", Attribute(s.axis)}, {"epsilon", Attribute(1e-4f)}};
      Case c{"LayerNormalization", {In(x), In(scale), In(bias)}, attrs, 3};
      c.rtol = c.atol = Tol(t);
      ExpectMatchesCpu(c);
      Case no_bias{"LayerNormalization", {In(x), In(scale)}, attrs, 1};
      no_bias.rtol = no_bias.atol = Tol(t);
      ExpectMatchesCpu(no_bias);
    }
  }
}

TEST(CudaNormalizationOpsTest, LayerNormalizationStashTypeDouble) {
  OTTR_REQUIRE_CUDA_DEVICE();
  Case c{"LayerNormalization",
         {In(RandomOf(DType::kFloat32, {7, 20}, 1)), In(RandomOf(DType::kFloat32, {20}, 2))},
         {{"stash_type", Attribute(int64_t{11})}},
         3};
  ExpectMatchesCpu(c);
}

TEST(CudaNormalizationOpsTest, LayerNormalizationGradMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct Shape {
    std::vector<int64_t> x;
    int64_t axis;
    std::vector<int64_t> scale;
  };
  const std::vector<Shape> shapes = {{{6, 3}, -1, {3}},           {{64, 100}, -1, {100}},    {{300, 40}, 1, {40}},
                                     {{3, 2, 1500}, 2, {1500}},   {{2, 3, 4, 5}, 1, {4, 5}}, {{2, 3, 4, 5}, 1, {5}},
                                     {{2048, 16}, -1, {16}}};
  int seed = 50;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " X rank ", s.x.size(), " axis ", s.axis));
      const Tensor x = RandomOf(t, s.x, ++seed, -2.0, 2.0);
      const Tensor dy = RandomOf(t, s.x, ++seed);
      const Tensor scale = RandomOf(t, s.scale, ++seed, 0.5, 1.5);
      const Attrs attrs = {{"axis", Attribute(s.axis)}, {"epsilon", Attribute(1e-5f)}};
      Case c{"LayerNormalizationGrad", {In(dy), In(x), In(scale)}, attrs, 3, kOttr};
      c.rtol = c.atol = 10 * Tol(t);
      ExpectMatchesCpu(c);
      // With the forward's statistics as inputs (computed by the CPU here).
      int64_t axis = s.axis < 0 ? s.axis + static_cast<int64_t>(s.x.size()) : s.axis;
      std::vector<int64_t> stat_dims(s.x.begin(), s.x.begin() + axis);
      stat_dims.resize(s.x.size(), 1);
      int64_t rows = 1, cols = 1;
      for (int64_t d = 0; d < static_cast<int64_t>(s.x.size()); ++d) (d < axis ? rows : cols) *= s.x[d];
      Tensor mean(DType::kFloat32, stat_dims), inv(DType::kFloat32, stat_dims);
      for (int64_t r = 0; r < rows; ++r) {
        double m = 0, q = 0;
        for (int64_t k = 0; k < cols; ++k) m += x.GetAsDouble(r * cols + k);
        m /= cols;
        for (int64_t k = 0; k < cols; ++k) q += (x.GetAsDouble(r * cols + k) - m) * (x.GetAsDouble(r * cols + k) - m);
        mean.data<float>()[r] = static_cast<float>(m);
        inv.data<float>()[r] = static_cast<float>(1.0 / std::sqrt(q / cols + 1e-5));
      }
      Case with_stats{"LayerNormalizationGrad", {In(dy), In(x), In(scale), In(mean), In(inv)}, attrs, 3, kOttr};
      with_stats.rtol = with_stats.atol = t == DType::kFloat64 ? 1e-6 : 1e-4;
      ExpectMatchesCpu(with_stats);
      Case dx_only{"LayerNormalizationGrad", {In(dy), In(x), In(scale)}, attrs, 1, kOttr};
      dx_only.rtol = dx_only.atol = 10 * Tol(t);
      ExpectMatchesCpu(dx_only);
    }
  }
}

TEST(CudaNormalizationOpsTest, BatchNormalizationMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const std::vector<std::vector<int64_t>> shapes = {{8, 16, 5, 5}, {32, 3}, {64, 2, 32, 32}, {2, 5, 7}, {3, 4, 4}};
  int seed = 80;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    for (const std::vector<int64_t>& x_dims : shapes) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " rank ", x_dims.size(), " N ", x_dims[0], " C ", x_dims[1]));
      const int64_t c = x_dims[1];
      const Tensor x = RandomOf(t, x_dims, ++seed, -1.0, 3.0);
      // Parameters in float32 even for other X types (ONNX allows distinct types).
      const DType pt = t == DType::kFloat16 ? DType::kFloat32 : t;
      const Tensor scale = RandomOf(pt, {c}, ++seed, 0.5, 1.5);
      const Tensor bias = RandomOf(pt, {c}, ++seed);
      const Tensor mean = RandomOf(pt, {c}, ++seed);
      const Tensor var = RandomOf(pt, {c}, ++seed, 0.5, 2.0);
      const std::vector<Input> ins = {In(x), In(scale), In(bias), In(mean), In(var)};
      Case inference{"BatchNormalization", ins, {{"epsilon", Attribute(1e-3f)}}};
      inference.rtol = inference.atol = Tol(t);
      ExpectMatchesCpu(inference);
      Case training{"BatchNormalization",
                    ins,
                    {{"training_mode", Attribute(int64_t{1})}, {"momentum", Attribute(0.8f)}},
                    3};
      training.rtol = training.atol = Tol(t);
      ExpectMatchesCpu(training);
      // Gradients: batch statistics, then fixed ones.
      const Tensor dy = RandomOf(t, x_dims, ++seed);
      Case grad_batch{"BatchNormalizationGrad", {In(dy), In(x), In(scale)}, {{"epsilon", Attribute(1e-5f)}}, 3, kOttr};
      grad_batch.rtol = grad_batch.atol = 10 * Tol(t);
      ExpectMatchesCpu(grad_batch);
      Case grad_fixed{"BatchNormalizationGrad",
                      {In(dy), In(x), In(scale), In(mean), In(var)},
                      {{"epsilon", Attribute(1e-5f)}},
                      3,
                      kOttr};
      grad_fixed.rtol = grad_fixed.atol = 10 * Tol(t);
      ExpectMatchesCpu(grad_fixed);
    }
  }
}

TEST(CudaNormalizationOpsTest, GroupAndInstanceNormalizationMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 200;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (const std::vector<int64_t>& x_dims :
         std::vector<std::vector<int64_t>>{{2, 6, 5, 5}, {3, 4, 100}, {4, 8}, {1, 12, 33, 33}}) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " rank ", x_dims.size()));
      const int64_t c = x_dims[1];
      const Tensor x = RandomOf(t, x_dims, ++seed, -1.0, 2.0);
      const Tensor scale_c = RandomOf(t, {c}, ++seed, 0.5, 1.5);
      const Tensor bias_c = RandomOf(t, {c}, ++seed);
      Case in{"InstanceNormalization", {In(x), In(scale_c), In(bias_c)}, {{"epsilon", Attribute(1e-4f)}}};
      in.rtol = in.atol = Tol(t);
      ExpectMatchesCpu(in);
      for (int64_t groups : {int64_t{1}, int64_t{2}, c}) {
        const Tensor scale_g = RandomOf(t, {groups}, ++seed, 0.5, 1.5);
        const Tensor bias_g = RandomOf(t, {groups}, ++seed);
        const Attrs attrs = {{"num_groups", Attribute(groups)}, {"epsilon", Attribute(1e-5f)}};
        Case per_channel{"GroupNormalization", {In(x), In(scale_c), In(bias_c)}, attrs};
        per_channel.rtol = per_channel.atol = Tol(t);
        ExpectMatchesCpu(per_channel);
        Case per_group{"GroupNormalization", {In(x), In(scale_g), In(bias_g)}, attrs};
        per_group.rtol = per_group.atol = Tol(t);
        ExpectMatchesCpu(per_group);
        if (t == DType::kBFloat16) continue;
        const Tensor dy = RandomOf(t, x_dims, ++seed);
        for (const Tensor& scale : {scale_c, scale_g}) {
          Case g{"GroupNormalizationGrad", {In(dy), In(x), In(scale)}, attrs, 3, kOttr};
          g.rtol = g.atol = 10 * Tol(t);
          ExpectMatchesCpu(g);
        }
      }
    }
  }
}

TEST(CudaNormalizationOpsTest, NormalizationRejectsBadParameters) {
  OTTR_REQUIRE_CUDA_DEVICE();
  // num_groups that does not divide C is caught by the CUDA compile of the backward op.
  Case g{"GroupNormalizationGrad",
         {In(RandomOf(DType::kFloat32, {2, 6, 3}, 1)), In(RandomOf(DType::kFloat32, {2, 6, 3}, 2)),
          In(RandomOf(DType::kFloat32, {6}, 3))},
         {{"num_groups", Attribute(int64_t{4})}},
         1,
         kOttr};
  ExpectCudaRejects(g, absl::StatusCode::kInvalidArgument);
}

// Inference mode (no training_mode, a constant false, or ratio 0): output = input, mask true.
TEST(CudaNormalizationOpsTest, DropoutIdentityMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const Tensor x = RandomOf(DType::kFloat32, {7, 33}, 1);
  ExpectMatchesCpu(Case{"Dropout", {In(x)}, {}, 2});
  ExpectMatchesCpu(Case{"Dropout", {In(x)}, {}, 1});
  ExpectMatchesCpu(Case{"Dropout", {In(x), Omitted(), Const(ScalarOf<bool>(false))}, {}, 2});
  // Run-time (device) training flag false: the kernel copies.
  ExpectMatchesCpu(Case{"Dropout", {In(x), In(ScalarOf<float>(0.3f)), In(ScalarOf<bool>(false))}, {}, 2});
  // Training with ratio 0.
  ExpectMatchesCpu(Case{"Dropout", {In(x), In(ScalarOf<float>(0.0f)), In(ScalarOf<bool>(true))}, {}, 2});
  const Tensor mask = Labels({7, 33}, 2, 0, 1);
  Tensor bmask(DType::kBool, {7, 33});
  for (int64_t i = 0; i < bmask.num_elements(); ++i) bmask.data<bool>()[i] = mask.data<int64_t>()[i] != 0;
  ExpectMatchesCpu(Case{"DropoutGrad", {In(x), In(bmask)}, {}, 1, kOttr});
  ExpectMatchesCpu(Case{"DropoutGrad", {In(x), In(bmask), In(ScalarOf<float>(0.4f)), In(ScalarOf<bool>(true))}, {}, 1, kOttr});
  ExpectMatchesCpu(Case{"DropoutGrad", {In(x), In(bmask), In(ScalarOf<float>(0.4f)), In(ScalarOf<bool>(false))}, {}, 1, kOttr});
}

// Training: y = x · mask / (1 − ratio), about ratio of the elements dropped, and a replayed
// graph draws a different mask each step.
TEST(CudaNormalizationOpsTest, DropoutTrainingDrawsNewMasks) {
  OTTR_REQUIRE_CUDA_DEVICE();
  for (DType t : {DType::kFloat32, DType::kFloat16}) {
    for (int64_t n : {int64_t{40003}, int64_t{4096}}) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " n ", n));
      const Tensor x = RandomOf(t, {n}, 3, 0.5, 1.5);
      const float ratio = 0.3f;
      Case c{"Dropout", {In(x), In(ScalarOf<float>(ratio)), Const(ScalarOf<bool>(true))}, {}, 2};
      auto runs = RunCuda(c, 3);
      ASSERT_TRUE(runs.ok()) << runs.status();
      int64_t differ = 0;
      for (int r = 0; r < 3; ++r) {
        const Tensor& y = (*runs)[r][0];
        const Tensor& mask = (*runs)[r][1];
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = mask.data<bool>()[i];
          dropped += !keep;
          const double want = keep ? x.GetAsDouble(i) / (1.0 - ratio) : 0.0;
          ASSERT_NEAR(y.GetAsDouble(i), want, t == DType::kFloat32 ? 1e-6 : 1e-2) << "element " << i;
        }
        EXPECT_NEAR(static_cast<double>(dropped) / n, ratio, 0.03);
        if (r > 0) {
          for (int64_t i = 0; i < n; ++i) differ += (*runs)[r][1].data<bool>()[i] != (*runs)[r - 1][1].data<bool>()[i];
        }
      }
      EXPECT_GT(differ, n / 4) << "masks repeat between replays";
      // The same executor without graph replay: launches one by one also advance the counter.
      auto eager = RunCuda(c, 2, /*use_cuda_graph=*/false);
      ASSERT_TRUE(eager.ok()) << eager.status();
      EXPECT_FALSE((*eager)[0][1].BitwiseEquals((*eager)[1][1]));
    }
  }
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
