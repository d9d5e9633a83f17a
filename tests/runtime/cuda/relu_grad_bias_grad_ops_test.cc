// ottr::ReluGradBiasGrad on CUDA (runtime/cuda/activation_ops.cc, kernels/activation_grad.cu)
// against the CPU reference, the arena poisoned with NaN bytes (CudaExecutor) so a column the
// kernel fails to write shows up; then the bf16 MLP step with fuse-relu-grad-bgrad on the GPU
// against the same graph on the CPU. Skipped without a device.
//
// Bounds. dX is a select of dY: bit for bit. dB: the CPU sums in double and rounds once; the
// kernel sums in float along a tree (a thread's rows, the block's 8 warps, then the row blocks'
// partials), at most D = rows / 4 + 8 additions deep on any path, so |s' - s| <= D · u32 ·
// Σ_r |dX[r, c]| (recursive summation bound; u64 · D for double). A 16-bit bias type then rounds
// both sums, each by at most its unit roundoff u (2^-8 bf16, 2^-11 f16): |y - w| <= |s' - s| +
// u·(|s| + |s'|) <= |s' - s| + u·(|w| + |y|) / (1 - u). (A sum close to a rounding boundary may
// round to neighbouring 16-bit values on the two sides: one ulp apart, not half.)
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/training.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"
#include "tests/test_util.h"

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

struct Shape2 {
  int64_t rows, cols;
};

// The bound of the header on column c of dX.
double BiasBound(const Tensor& dx, int64_t c, DType bias_type) {
  const int64_t rows = dx.dim(0), cols = dx.dim(1);
  double abs_sum = 0;
  for (int64_t r = 0; r < rows; ++r) abs_sum += std::abs(dx.GetAsDouble(r * cols + c));
  const double depth = static_cast<double>(rows) / 4 + 8;
  const double unit = dx.dtype() == DType::kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  return depth * unit * abs_sum;
}

double OutputUlp(DType t) {
  switch (t) {
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    case DType::kFloat16: return std::ldexp(1.0, -11);
    default: return 0.0;
  }
}

// Two runs of one compiled executor on different inputs: the per-strip counters must be left at
// zero by the first, or the second would not write dB (it would keep the first run's values).
// Each shape also with the third output dXT (kmajor-gemm-operands), once with dX read and once
// with nobody reading dX (the kernel then writes only dXT): dXT is dX transposed, bit for bit.
TEST(CudaReluGradBiasGradTest, MatchesCpuOnEveryTypeAndShape) {
  OTTR_REQUIRE_CUDA_DEVICE();
  // The MLP 4096x4's layers, the small MLP's at batch 8192, odd column counts (the scalar path
  // and a partial strip), a single row, more row blocks than rows per block, rows not a multiple
  // of the transposed tile's 32 (8190, 37, 129).
  const std::vector<std::pair<DType, Shape2>> shapes = {
      {DType::kFloat32, {4096, 4096}}, {DType::kBFloat16, {4096, 4096}}, {DType::kFloat32, {8192, 512}},
      {DType::kBFloat16, {4096, 1000}}, {DType::kFloat32, {37, 101}},    {DType::kBFloat16, {129, 300}},
      {DType::kFloat16, {64, 72}},      {DType::kFloat64, {100, 66}},     {DType::kFloat32, {1, 300}},
      {DType::kFloat32, {20000, 8}},    {DType::kFloat32, {8190, 784}},   {DType::kFloat32, {129, 260}}};
  enum class Form { kPlain, kTransposed, kOnlyTransposed };
  uint64_t seed = 1;
  for (const auto& [t, s] : shapes) {
    std::vector<DType> bias_types = {t};
    if (t == DType::kBFloat16 || t == DType::kFloat16) bias_types.push_back(DType::kFloat32);
    for (DType bt : bias_types) {
      for (Form form : {Form::kPlain, Form::kTransposed, Form::kOnlyTransposed}) {
        SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), "[", s.rows, ",", s.cols, "] -> ", ir::DTypeName(bt), " form ",
                                  static_cast<int>(form)));
        Attrs attrs;
        if (bt != t) attrs["bias_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(bt)));
        Case c("ReluGradBiasGrad", {In(RandomOf(t, {s.rows, s.cols}, seed)), In(RandomOf(t, {s.rows, s.cols}, seed + 1))},
               attrs, form == Form::kPlain ? 2 : 3, kOttr);
        if (form == Form::kOnlyTransposed) c.unread_outputs = {0};
        runtime::TensorMap feeds_a;
        auto g = BuildGraph(c, &feeds_a);
        ASSERT_TRUE(g.ok()) << g.status();
        runtime::TensorMap feeds_b = {{"in0", RandomOf(t, {s.rows, s.cols}, seed + 2)},
                                      {"in1", RandomOf(t, {s.rows, s.cols}, seed + 3)}};
        seed += 4;
        // The CPU reference of the plain form (its dX is the reference of dXT too).
        Case plain("ReluGradBiasGrad", c.inputs, attrs, 2, kOttr);
        runtime::TensorMap unused;
        auto g_plain = BuildGraph(plain, &unused);
        ASSERT_TRUE(g_plain.ok()) << g_plain.status();
        auto cpu = runtime::cpu::CpuExecutor::Create(**g_plain);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        cuda::CudaExecutorOptions o;
        o.tf32 = false;
        auto gpu = cuda::CudaExecutor::Create(**g, o);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        for (const runtime::TensorMap* feeds : {&feeds_a, &feeds_b}) {
          auto want = (*cpu)->Run(*feeds);
          ASSERT_TRUE(want.ok()) << want.status();
          auto got = (*gpu)->Run(*feeds);
          ASSERT_TRUE(got.ok()) << got.status();
          const size_t n_out = form == Form::kPlain ? 2u : form == Form::kTransposed ? 3u : 2u;
          ASSERT_EQ(got->size(), n_out);
          const int db_at = form == Form::kOnlyTransposed ? 0 : 1;
          if (form != Form::kOnlyTransposed) {
            EXPECT_TRUE((*got)[0].BitwiseEquals((*want)[0])) << "dX\n got  " << (*got)[0].DebugString(12)
                                                              << "\n want " << (*want)[0].DebugString(12);
          }
          if (form != Form::kPlain) {
            const Tensor& dxt = (*got)[db_at + 1];
            ASSERT_EQ(dxt.dims(), (std::vector<int64_t>{s.cols, s.rows}));
            int wrong = 0;
            for (int64_t r = 0; r < s.rows; ++r) {
              for (int64_t col = 0; col < s.cols; ++col) {
                const double w = (*want)[0].GetAsDouble(r * s.cols + col), y = dxt.GetAsDouble(col * s.rows + r);
                if (!(y == w) && wrong++ < 5) ADD_FAILURE() << "dXT[" << col << ", " << r << "] = " << y << ", dX " << w;
              }
            }
            EXPECT_EQ(wrong, 0);
          }
          const Tensor& db = (*got)[db_at];
          ASSERT_EQ(db.dtype(), bt);
          int bad = 0;
          for (int64_t col = 0; col < s.cols; ++col) {
            const double w = (*want)[1].GetAsDouble(col), y = db.GetAsDouble(col);
            const double u = OutputUlp(bt);
            const double bound = BiasBound((*want)[0], col, bt) + u * (std::abs(w) + std::abs(y)) / (1 - u);
            if (!(std::abs(y - w) <= bound) && bad++ < 5) {
              ADD_FAILURE() << "dB[" << col << "] = " << y << ", CPU " << w << ", bound " << bound;
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

// The bf16 MLP step with fuse-relu-grad-bgrad (fuse-gemm-dact-bgrad off, so the ReluGrads stay
// as they do at 4096x4) on the GPU against the same graph on the CPU (ExpectBf16MlpStepMatchesCpu:
// u = 2^-8 normwise per gradient, u/4 on the loss).
TEST(CudaReluGradBiasGradTest, Bf16MlpStepMatchesTheSameGraphOnCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  auto forward = importer::ImportModelFile(SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 128;
  spec.precision = passes::Precision::kBf16;
  spec.expose_gradients = true;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  spec.narrow_exact_ops = true;
  spec.fuse_relu_grad_bgrad = true;
  spec.disabled_passes = {"fuse-gemm-dact-bgrad"};
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  int fused = 0;
  for (const ir::Node* n : (*step)->nodes()) fused += n->op_type() == "ReluGradBiasGrad";
  EXPECT_EQ(fused, 2);
  ExpectBf16MlpStepMatchesCpu(**step, 41);
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
