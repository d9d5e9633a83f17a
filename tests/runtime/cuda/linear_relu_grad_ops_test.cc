// ottr::LinearReluGrad on CUDA (runtime/cuda/activation_ops.cc, kernels/activation_grad.cu) against
// the CPU reference (double sums, rounded once), the arena poisoned with NaN bytes (CudaExecutor) so
// an element the kernel fails to write shows up. Skipped without a device.
//
// Bounds (u = 2^-24). dX: the kernel's dY is a chain of K float FMAs, |dY' - dY| <= (K + 1)·u·
// Σ_j |dZ[r, j]·W[j, c]| (K roundings, then the CPU's one), and the ReLU mask is the same select on
// the same Y. dB and dW: float sums along a tree (a thread's rows, the block's 8 warps, the row
// blocks' partials), at most D = rows / 4 + 40 additions deep on any path, so |s' - s| <= D·u·
// Σ_r |term| for dW (terms dZ·Y) and, for dB, that over the kernel's dX plus the dX errors above
// summed over the column. dBz: one thread sums its block's rows in order, then the row blocks:
// depth <= rows + 40.
//
// The tensor-core weight gradient (under TF32, the default; LinearReluGradPlan::tc): dZ and Y
// rounded to TF32 (2^-11 relative each, 2^-10 for a product; 2^-9 allows truncation instead of
// rounding), accumulated in float32 by mma.sync along the block's rows (rows / 8 steps deep) and
// then the row blocks: |dW' - dW| <= (2^-9 + 2·(D + 1)·u)·Σ_r |dZ·Y|, the factor 2 for the tensor
// cores' accumulation, which need not round to nearest. dX, dB and dBz take the float32 path.
#include <cmath>
#include <cstdlib>
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

struct Dims {
  int64_t rows, cols, k;
  int64_t weight_rows = 0;  // > 0: {weight_rows}, dW and dBz keep their first rows only
};

// Counts the elements of `got` outside `bound(i)` of `want` (and any NaN), reporting the first few.
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

// Every shape twice on one compiled executor (different inputs: the counters must be left zero by
// the first run, or the second would not write the sums), with and without the weight gradient,
// and once with dX and dW unread (written to the workspace; dB and dBz still right).
// `mma`: the TF32 tensor-core weight gradient (TF32 on), else float32 throughout (TF32 off and
// OTTR_LRG_MMA=0: either alone keeps the float32 sums).
void ExpectLinearReluGradMatchesCpu(bool mma) {
  // The small MLP's head at batch 8192 and the MLP 4096x4's at 4096 (classes padded to 12), odd
  // column counts (the scalar path, a partial strip), every kernel size (K 1..16), one row, a
  // narrow tall matrix (many row blocks for one strip), rows not a multiple of the 32-row pass.
  const std::vector<Dims> shapes = {{8192, 512, 12}, {4096, 1000, 12}, {37, 101, 10}, {1, 300, 3},
                                    {129, 64, 16},   {20000, 8, 1},    {300, 130, 7}, {513, 66, 5},
                                    // the padded classifier with its slices folded (10 of 12 rows), odd sizes
                                    {8192, 512, 12, 10}, {301, 70, 16, 9}};
  enum class Form { kHeadOnly, kWithWeightGrad, kUnreadDxDw };
  const double u = std::ldexp(1.0, -24);
  uint64_t seed = 101;
  for (const Dims& s : shapes) {
    for (Form form : {Form::kHeadOnly, Form::kWithWeightGrad, Form::kUnreadDxDw}) {
      SCOPED_TRACE(absl::StrCat("[", s.rows, ",", s.cols, "] k ", s.k, " weight_rows ", s.weight_rows, " form ",
                                static_cast<int>(form)));
      const int outputs = form == Form::kHeadOnly ? 2 : 4;
      auto inputs = [&](uint64_t at) {
        return std::vector<Input>{In(RandomOf(DType::kFloat32, {s.rows, s.k}, at)),
                                  In(RandomOf(DType::kFloat32, {s.k, s.cols}, at + 1)),
                                  In(RandomOf(DType::kFloat32, {s.rows, s.cols}, at + 2))};
      };
      Attrs attrs;
      if (s.weight_rows > 0 && form != Form::kHeadOnly) attrs["weight_rows"] = s.weight_rows;
      Case c("LinearReluGrad", inputs(seed), attrs, outputs, kOttr);
      if (form == Form::kUnreadDxDw) c.unread_outputs = {0, 2};
      runtime::TensorMap feeds_a;
      auto g = BuildGraph(c, &feeds_a);
      ASSERT_TRUE(g.ok()) << g.status();
      const std::vector<Input> other = inputs(seed + 3);
      runtime::TensorMap feeds_b = {{"in0", other[0].value}, {"in1", other[1].value}, {"in2", other[2].value}};
      seed += 6;
      // The CPU reference with every output read.
      Case full("LinearReluGrad", c.inputs, attrs, outputs, kOttr);
      runtime::TensorMap unused;
      auto g_full = BuildGraph(full, &unused);
      ASSERT_TRUE(g_full.ok()) << g_full.status();
      auto cpu = runtime::cpu::CpuExecutor::Create(**g_full);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      cuda::CudaExecutorOptions o;
      o.tf32 = mma;
      struct Unset {  // the executor reads the variable when it compiles, at its first run
        ~Unset() { unsetenv("OTTR_LRG_MMA"); }
      } unset;
      setenv("OTTR_LRG_MMA", mma ? "1" : "0", 1);
      auto gpu = cuda::CudaExecutor::Create(**g, o);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      for (const runtime::TensorMap* feeds : {&feeds_a, &feeds_b}) {
        auto want = (*cpu)->Run(*feeds);
        ASSERT_TRUE(want.ok()) << want.status();
        auto got = (*gpu)->Run(*feeds);
        unsetenv("OTTR_LRG_MMA");
        ASSERT_TRUE(got.ok()) << got.status();
        const Tensor& dz = feeds->at("in0");
        const Tensor& w = feeds->at("in1");
        const Tensor& y = feeds->at("in2");
        // Σ_j |dZ[r, j]·W[j, c]|, per element of dX.
        std::vector<double> abs_dot(s.rows * s.cols, 0.0);
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t col = 0; col < s.cols; ++col) {
            double a = 0;
            for (int64_t j = 0; j < s.k; ++j) a += std::abs(dz.GetAsDouble(r * s.k + j) * w.GetAsDouble(j * s.cols + col));
            abs_dot[r * s.cols + col] = a;
          }
        }
        const double depth = static_cast<double>(s.rows) / 4 + 40;
        const Tensor& want_dx = (*want)[0];
        int bad = 0;
        size_t at = 0;
        if (form != Form::kUnreadDxDw) {
          bad += CountOutside("dX", (*got)[at++], want_dx,
                              [&](int64_t i) { return (s.k + 1) * u * abs_dot[i]; });
        }
        bad += CountOutside("dB", (*got)[at++], (*want)[1], [&](int64_t col) {
          double abs_dx = 0, dx_err = 0;
          for (int64_t r = 0; r < s.rows; ++r) {
            abs_dx += std::abs(want_dx.GetAsDouble(r * s.cols + col));
            if (y.GetAsDouble(r * s.cols + col) > 0) dx_err += (s.k + 1) * u * abs_dot[r * s.cols + col];
          }
          return depth * u * (abs_dx + dx_err) + dx_err;
        });
        if (form == Form::kWithWeightGrad) {
          bad += CountOutside("dW", (*got)[at++], (*want)[2], [&](int64_t i) {
            const int64_t j = i / s.cols, col = i % s.cols;
            double a = 0;
            for (int64_t r = 0; r < s.rows; ++r) a += std::abs(dz.GetAsDouble(r * s.k + j) * y.GetAsDouble(r * s.cols + col));
            return mma ? (std::ldexp(1.0, -9) + 2 * (depth + 1) * u) * a : (depth + 1) * u * a;
          });
        }
        if (form != Form::kHeadOnly) {
          bad += CountOutside("dBz", (*got)[at++], (*want)[3], [&](int64_t j) {
            double a = 0;
            for (int64_t r = 0; r < s.rows; ++r) a += std::abs(dz.GetAsDouble(r * s.k + j));
            return (s.rows + 40) * u * a;
          });
        }
        EXPECT_EQ(at, got->size());
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

TEST(CudaLinearReluGradTest, MatchesCpuOnEveryShape) {
  OTTR_REQUIRE_CUDA_DEVICE();
  ExpectLinearReluGradMatchesCpu(/*mma=*/false);
}

// The same shapes and bounds with the weight gradient on the tensor cores (the bound above).
TEST(CudaLinearReluGradTest, TensorCoreWeightGradMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  ExpectLinearReluGradMatchesCpu(/*mma=*/true);
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
