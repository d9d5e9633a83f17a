// ottr::LinearSceReluGrad on CUDA (runtime/cuda/loss_ops.cc, kernels/linear_sce_relu_grad.cu)
// against the CPU reference, the arena poisoned with NaN bytes (CudaExecutor) so an element the
// kernel fails to write shows up; each case run twice with other inputs on one executor (the
// counters must be left zero), the second inputs again for bitwise replay. Skipped without a device.
//
// Bounds (u = 2^-24; this test computes the row's logits z, probabilities p and scale = dloss /
// count in double from the inputs):
// - logits: Y and W rounded to TF32 (2^-11 relative each, a product 2^-10; 2^-9 allows
//   truncation), float32 sums N / 8 + 16 deep: E_r = (2^-9 + (N / 8 + 20)·u)·max_j Σ_c |Y·W| + |b|·u.
// - dlogits: ∂p_j/∂z_i = p_j (δ_ij − p_i), so |Δp_j| <= 2·p_j·E_r to first order; with the roundings
//   of log_prob to float32 and expf (a few ulp of p_j): |ΔdZ_rj| <= scale·(4·p_rj·E_r + 8u·(p_rj + 1)).
//   Twice the first-order term covers the second order for E_r < 0.1 (these inputs: E_r < 1e-3).
// - dX = (dZ·W) ⊙ [Y > 0]: the split-TF32 products err by about 2^-21 of Σ_j |dZ·W|, K float32
//   adds: |ΔdX| <= Σ_j |ΔdZ_rj|·|W_jc| + 64u·Σ_j |dZ_rj·W_jc| (the mask is the same select).
// - dB = Σ_r dX: the kernel's float32 tree, at most D = 2·rows / (16·grid) + 48 deep with a grid of
//   at least rows / 16 / 8 blocks... bounded here by D = rows / 8 + 64: Σ_r bound(dX) + D·u·Σ_r |dX|.
// - dW = dZᵀ·Y in TF32: (2^-9 + 2·(D + 1)·u)·Σ_r |dZ·Y| + Σ_r |ΔdZ_rj|·|Y_rc|.
// - dBz = Σ_r dZ: Σ_r |ΔdZ_rj| + D·u·Σ_r |dZ_rj|.
// - loss: log p moves by at most 2·E_r per row: mean(2·E_r) + 1e-6·|loss|.
// A missing row, a wrong column or class, or a wrong mask moves a value by a whole term, far
// outside these bounds at these sizes (checked by the counts below: dX has zeros and non-zeros).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"
#include "tests/test_util.h"

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

struct Shape {
  int64_t rows, cols, k, classes, weight_rows;
  bool bias, labels64;
  float smoothing;
  int64_t ignore;  // labels drawn from [ignore, classes): ignore_index among them when < 0
};

template <typename BoundFn>
int CountOutside(const char* what, const Tensor& got, const Tensor& want, BoundFn bound) {
  EXPECT_EQ(got.dims(), want.dims()) << what;
  if (got.dims() != want.dims()) return 1;
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i), b = bound(i);
    if (!(std::abs(g - w) <= b) && bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << g << ", CPU " << w << ", bound " << b;
  }
  return bad;
}

TEST(CudaLinearSceReluGradTest, MatchesCpuOnEveryWidth) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const std::vector<Shape> shapes = {
      {8192, 512, 12, 10, 10, true, true, 0.0f, -100},  // the small MLP's head at batch 8192
      {1100, 128, 16, 16, 16, false, false, 0.1f, -1},  // int32 labels, ignored rows, no bias
      {37, 512, 12, 10, 12, true, true, 0.0f, -1},      // one partial tile, one block
      {3000, 256, 1, 1, 1, true, true, 0.0f, -100},     // one class
      {20000, 512, 12, 10, 10, true, true, 0.2f, -1},   // several tiles per block, a partial last one
  };
  const double u = std::ldexp(1.0, -24);
  uint64_t seed = 701;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(absl::StrCat("[", s.rows, ",", s.cols, "] k ", s.k, " classes ", s.classes, " weight_rows ",
                              s.weight_rows));
    auto feeds_for = [&](uint64_t at) {
      runtime::TensorMap f;
      f["in0"] = RandomOf(DType::kFloat32, {s.rows, s.cols}, at, -1.0, 2.0);
      f["in1"] = RandomOf(DType::kFloat32, {s.k, s.cols}, at + 1, -0.2, 0.2);
      if (s.bias) f["in2"] = RandomOf(DType::kFloat32, {s.k}, at + 2, -1.0, 1.0);
      Tensor labels(s.labels64 ? DType::kInt64 : DType::kInt32, {s.rows});
      const Tensor draw = RandomInt64({s.rows}, at + 3, s.ignore < 0 ? -1 : 0, s.classes - 1);
      int64_t kept = 0;
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t v = draw.data<int64_t>()[i] < 0 ? s.ignore : draw.data<int64_t>()[i];
        kept += v != s.ignore;
        if (s.labels64) {
          labels.data<int64_t>()[i] = v;
        } else {
          labels.data<int32_t>()[i] = static_cast<int32_t>(v);
        }
      }
      f["in3"] = labels;
      f["in4"] = Tensor::Scalar<float>(0.75f);
      f["in5"] = Tensor::Scalar<int64_t>(kept);
      return f;
    };
    runtime::TensorMap feeds_a = feeds_for(seed), feeds_b = feeds_for(seed + 10);
    seed += 20;
    std::vector<Input> inputs = {In(feeds_a["in0"]), In(feeds_a["in1"]),
                                 s.bias ? In(feeds_a["in2"]) : Omitted(), In(feeds_a["in3"]),
                                 In(feeds_a["in4"]), In(feeds_a["in5"])};
    Attrs attrs;
    attrs["classes"] = s.classes;
    attrs["weight_rows"] = s.weight_rows;
    attrs["label_smoothing"] = s.smoothing;
    attrs["ignore_index"] = s.ignore;
    Case c("LinearSceReluGrad", inputs, attrs, 5, kOttr);
    runtime::TensorMap unused;
    auto g = BuildGraph(c, &unused);
    ASSERT_TRUE(g.ok()) << g.status();
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cuda::CudaExecutorOptions o;
    o.tf32 = true;
    auto gpu = cuda::CudaExecutor::Create(**g, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::vector<Tensor> first_b;
    for (const runtime::TensorMap* feeds : {&feeds_a, &feeds_b, &feeds_b}) {
      auto want = (*cpu)->Run(*feeds);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(*feeds);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), 5u);
      if (feeds == &feeds_b) {
        if (first_b.empty()) {
          first_b = *got;
        } else {
          for (size_t i = 0; i < 5; ++i) EXPECT_TRUE((*got)[i].BitwiseEquals(first_b[i])) << "replay, output " << i;
        }
      }
      const Tensor& y = feeds->at("in0");
      const Tensor& w = feeds->at("in1");
      const Tensor& lab = feeds->at("in3");
      const double scale = 0.75 / static_cast<double>(feeds->at("in5").data<int64_t>()[0]);
      // Per row: E_r, p_rj, dZ_rj in double.
      std::vector<double> e(s.rows), p(s.rows * s.k, 0.0), dz(s.rows * s.k, 0.0), dz_bound(s.rows * s.k, 0.0);
      for (int64_t r = 0; r < s.rows; ++r) {
        std::vector<double> z(s.k);
        double worst = 0, bias_abs = 0;
        for (int64_t j = 0; j < s.k; ++j) {
          double acc = s.bias ? feeds->at("in2").GetAsDouble(j) : 0.0, a = 0;
          bias_abs = std::max(bias_abs, std::abs(acc));
          for (int64_t col = 0; col < s.cols; ++col) {
            const double t = y.GetAsDouble(r * s.cols + col) * w.GetAsDouble(j * s.cols + col);
            acc += t;
            a += std::abs(t);
          }
          z[j] = acc;
          worst = std::max(worst, a);
        }
        e[r] = (std::ldexp(1.0, -9) + (s.cols / 8.0 + 20) * u) * worst + bias_abs * u;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s.classes; ++j) m = std::max(m, z[j]);
        for (int64_t j = 0; j < s.classes; ++j) sum += std::exp(z[j] - m);
        const int64_t label = lab.GetAsInt64(r);
        for (int64_t j = 0; j < s.classes; ++j) {
          p[r * s.k + j] = std::exp(z[j] - m) / sum;
          if (label == s.ignore) continue;
          const double target = (j == label ? 1.0 - s.smoothing : 0.0) + s.smoothing / s.classes;
          dz[r * s.k + j] = scale * (p[r * s.k + j] - target);
          dz_bound[r * s.k + j] = scale * (4 * p[r * s.k + j] * e[r] + 8 * u * (p[r * s.k + j] + 1));
        }
      }
      const double depth = s.rows / 8.0 + 64;
      int bad = 0;
      bad += CountOutside("loss", (*got)[0], (*want)[0], [&](int64_t) {
        double sum = 0;
        int64_t n = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          if (lab.GetAsInt64(r) == s.ignore) continue;
          sum += 2 * e[r];
          ++n;
        }
        return sum / std::max<int64_t>(n, 1) + 1e-6 * std::abs((*want)[0].GetAsDouble(0)) + 1e-7;
      });
      std::vector<double> dx_bound(s.rows * s.cols, 0.0);
      int64_t zeros = 0;
      for (int64_t r = 0; r < s.rows; ++r) {
        for (int64_t col = 0; col < s.cols; ++col) {
          if (!(y.GetAsDouble(r * s.cols + col) > 0)) {
            ++zeros;
            continue;
          }
          double prop = 0, mag = 0;
          for (int64_t j = 0; j < s.k; ++j) {
            prop += dz_bound[r * s.k + j] * std::abs(w.GetAsDouble(j * s.cols + col));
            mag += std::abs(dz[r * s.k + j] * w.GetAsDouble(j * s.cols + col));
          }
          dx_bound[r * s.cols + col] = prop + 64 * u * mag;
        }
      }
      EXPECT_GT(zeros, 0);
      EXPECT_LT(zeros, s.rows * s.cols);
      const Tensor& want_dx = (*want)[1];
      bad += CountOutside("dX", (*got)[1], want_dx, [&](int64_t i) { return dx_bound[i]; });
      bad += CountOutside("dB", (*got)[2], (*want)[2], [&](int64_t col) {
        double b = 0, mag = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          b += dx_bound[r * s.cols + col];
          mag += std::abs(want_dx.GetAsDouble(r * s.cols + col));
        }
        return b + depth * u * mag;
      });
      bad += CountOutside("dW", (*got)[3], (*want)[3], [&](int64_t i) {
        const int64_t j = i / s.cols, col = i % s.cols;
        double prop = 0, mag = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          const double yv = std::abs(y.GetAsDouble(r * s.cols + col));
          prop += dz_bound[r * s.k + j] * yv;
          mag += std::abs(dz[r * s.k + j]) * yv;
        }
        return prop + (std::ldexp(1.0, -9) + 2 * (depth + 1) * u) * mag;
      });
      bad += CountOutside("dBz", (*got)[4], (*want)[4], [&](int64_t j) {
        double prop = 0, mag = 0;
        for (int64_t r = 0; r < s.rows; ++r) {
          prop += dz_bound[r * s.k + j];
          mag += std::abs(dz[r * s.k + j]);
        }
        return prop + depth * u * mag + 1e-12;
      });
      EXPECT_EQ(bad, 0);
    }
  }
}

// Outputs nobody reads go to the workspace; the others are still right (here dX alone is read).
TEST(CudaLinearSceReluGradTest, UnreadOutputsGoToTheWorkspace) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const int64_t rows = 2000, cols = 512, k = 12;
  Tensor labels = RandomInt64({rows}, 91, 0, 9);
  std::vector<Input> inputs = {In(RandomOf(DType::kFloat32, {rows, cols}, 92, -1.0, 2.0)),
                               In(RandomOf(DType::kFloat32, {k, cols}, 93, -0.2, 0.2)),
                               In(RandomOf(DType::kFloat32, {k}, 94)),
                               In(labels),
                               In(Tensor::Scalar<float>(1.0f)),
                               In(Tensor::Scalar<int64_t>(rows))};
  Attrs attrs;
  attrs["classes"] = int64_t{10};
  Case c("LinearSceReluGrad", inputs, attrs, 5, kOttr);
  c.unread_outputs = {0, 2, 3, 4};
  c.tf32 = true;
  runtime::TensorMap feeds;
  auto g = BuildGraph(c, &feeds);
  ASSERT_TRUE(g.ok()) << g.status();
  auto cpu = runtime::cpu::CpuExecutor::Create(**g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = true;
  auto gpu = cuda::CudaExecutor::Create(**g, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto want = (*cpu)->Run(feeds);
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(got->size(), 1u);
  // dX within 1e-3 relative normwise (the TF32 logits' effect; the full bound is the test above).
  EXPECT_LE(NormwiseRelativeError((*got)[0], (*want)[0]), 1e-3);
  EXPECT_GT(NormwiseRelativeError((*want)[0], Tensor(DType::kFloat32, {rows, cols})), 0.5);
}

// TF32 off: the executor refuses the node (the pass makes it only in TF32 steps).
TEST(CudaLinearSceReluGradTest, RefusedWithoutTf32) {
  OTTR_REQUIRE_CUDA_DEVICE();
  std::vector<Input> inputs = {In(RandomOf(DType::kFloat32, {64, 128}, 95)), In(RandomOf(DType::kFloat32, {4, 128}, 96)),
                               Omitted(), In(RandomInt64({64}, 97, 0, 3)), In(Tensor::Scalar<float>(1.0f)),
                               In(Tensor::Scalar<int64_t>(64))};
  Case c("LinearSceReluGrad", inputs, {}, 5, kOttr);
  runtime::TensorMap feeds;
  auto g = BuildGraph(c, &feeds);
  ASSERT_TRUE(g.ok()) << g.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(**g, o);
  absl::Status s = gpu.ok() ? (*gpu)->Run(feeds).status() : gpu.status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TF32 is off"), std::string::npos) << s;
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
