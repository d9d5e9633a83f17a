// ottr::FusedGemm on CUDA (runtime/cuda/gemm_ops.cc: one cublasLtMatmul with the epilogue)
// against the CPU reference (runtime/cpu/fused_gemm_kernels.cc), TF32 off, the arena poisoned
// with NaN bytes so an element the epilogue fails to write shows up. Then the fused MLP and CNN
// training steps on the GPU against the unfused steps on the CPU. Skipped without a device.
//
// Bounds: float32 GEMMs over K <= 784 terms in another summation order, and bias gradients
// summed in float on the GPU (double on the CPU): rtol 1e-4, atol 1e-4. cuBLASLt's GELU may
// evaluate tanh differently from the CPU's: rtol 1e-3 for the GELU epilogues.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/fused_gemm.h"
#include "passes/training.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"
#include "tests/test_util.h"

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::Attribute;
using ir::DType;
using ir::FusedEpilogue;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

struct Dims {
  int64_t m, n, k;
  bool ta, tb;
};

// Layer shapes of the benchmarks (MLP 784-512-512-10 at batch 128, weight gradients with transA)
// and odd ones: N not a multiple of 128 (mask row padding) or of 4 (unaligned rows).
const std::vector<Dims> kDims = {{128, 512, 784, false, true}, {128, 10, 512, false, true},
                                 {512, 784, 128, true, false}, {10, 512, 128, true, false},
                                 {64, 100, 48, false, false},  {32, 256, 64, true, true}};

// A ReLU mask of [m, n] with random bits (padding bits random too: they must not be read).
Tensor RandomMask(int64_t m, int64_t n, uint64_t seed) {
  const int64_t row = ir::ReluMaskRowBytes(n);
  const Tensor r = RandomInt64({m, row}, seed, 0, 255);
  Tensor mask(DType::kUInt8, {m, row});
  for (int64_t i = 0; i < m * row; ++i) mask.data<uint8_t>()[i] = static_cast<uint8_t>(r.data<int64_t>()[i]);
  return mask;
}

Case MakeCase(FusedEpilogue e, const Dims& d, uint64_t seed) {
  std::vector<Input> ins = {
      In(RandomFloat(d.ta ? std::vector<int64_t>{d.k, d.m} : std::vector<int64_t>{d.m, d.k}, seed)),
      In(RandomFloat(d.tb ? std::vector<int64_t>{d.n, d.k} : std::vector<int64_t>{d.k, d.n}, seed + 1))};
  if (ir::EpilogueTakesBias(e)) ins.push_back(In(RandomFloat({d.n}, seed + 2)));
  if (ir::EpilogueTakesAux(e)) {
    ins.push_back(Omitted());
    ins.push_back(In(ir::EpilogueIsRelu(e) ? RandomMask(d.m, d.n, seed + 3) : RandomFloat({d.m, d.n}, seed + 3, -3, 3)));
  }
  Attrs attrs = {{"epilogue", Attribute(ir::FusedEpilogueName(e))}};
  if (d.ta) attrs["transA"] = Attribute(int64_t{1});
  if (d.tb) attrs["transB"] = Attribute(int64_t{1});
  const int outs = ir::EpilogueWritesAux(e) || ir::EpilogueWritesBiasGrad(e) ? 2 : 1;
  Case c(ir::kFusedGemmOp, ins, attrs, outs, kOttr);
  const bool gelu = e == FusedEpilogue::kGeluBias || e == FusedEpilogue::kGeluAuxBias ||
                    e == FusedEpilogue::kDGelu || e == FusedEpilogue::kDGeluBgrad;
  c.rtol = gelu ? 1e-3 : 1e-4;
  // cuBLASLt evaluates the tanh-form GELU derivative in its own way (~1e-6 relative per term);
  // a DGELU_BGRAD bias gradient sums 128 such terms of magnitude up to ~100 and may cancel to
  // ~0.3, so its error is relative to the terms, not the sum: atol 1e-3 for GELU.
  c.atol = gelu ? 1e-3 : 1e-4;
  return c;
}

TEST(CudaFusedGemmTest, EveryEpilogueMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 1;
  for (FusedEpilogue e :
       {FusedEpilogue::kNone, FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kGeluBias, FusedEpilogue::kGeluAuxBias,
        FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad, FusedEpilogue::kDGelu, FusedEpilogue::kDGeluBgrad,
        FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
    for (const Dims& d : kDims) {
      if ((e == FusedEpilogue::kGeluAuxBias || e == FusedEpilogue::kDGelu || e == FusedEpilogue::kDGeluBgrad) &&
          d.n % 8 != 0) {
        continue;  // the passes never make these (aux leading dimension rule)
      }
      // cuBLASLt 13.1 on the H200 has no kernel (CUBLAS_STATUS_NOT_SUPPORTED) for bgrada without
      // transA or bgradb with transB; fuse-gemm-bgrad only makes bgrada with transA = 1 and
      // bgradb with transB = 0 (the layouts of dW = dYᵀ·X and dW = Xᵀ·dY).
      if ((e == FusedEpilogue::kBgradA && !d.ta) || (e == FusedEpilogue::kBgradB && d.tb)) continue;
      SCOPED_TRACE(absl::StrCat(ir::FusedEpilogueName(e), " m", d.m, " n", d.n, " k", d.k, " ta", d.ta, " tb", d.tb));
      ExpectMatchesCpu(MakeCase(e, d, seed += 10));
    }
  }
}

// bf16 A and B with output_type f32 (fold-gemm-casts' FusedGemms; ir/fused_gemm.h): D, the bias,
// the GELU pre-activation and the bias gradients in f32 (cublasLtMatmul's CUBLAS_COMPUTE_32F with
// 16BF A/B and 32F C/D). The products of bf16 values are exact in float, so both sides compute the
// same float32 sums in different orders: the float32 bounds above apply. Every epilogue, "none"
// included, but relu_aux_bias, left out as in EveryEpilogueMatchesCpu (its mask bits near 0 are
// compared by ReluAuxMaskHasTheDocumentedBitLayout; relu_bias covers its Y).
Tensor ToBf16(const Tensor& t) {
  Tensor out(DType::kBFloat16, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data<ir::BFloat16>()[i] = ir::FloatToBFloat16(t.data<float>()[i]);
  return out;
}

TEST(CudaFusedGemmTest, Bf16OperandsWithFloat32OutputMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 900;
  for (FusedEpilogue e :
       {FusedEpilogue::kNone, FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kGeluBias,
        FusedEpilogue::kGeluAuxBias, FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad, FusedEpilogue::kDGelu,
        FusedEpilogue::kDGeluBgrad, FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
    for (const Dims& d : kDims) {
      if ((e == FusedEpilogue::kGeluAuxBias || e == FusedEpilogue::kDGelu || e == FusedEpilogue::kDGeluBgrad) &&
          d.n % 8 != 0) {
        continue;
      }
      if ((e == FusedEpilogue::kBgradA && !d.ta) || (e == FusedEpilogue::kBgradB && d.tb)) continue;
      SCOPED_TRACE(absl::StrCat("bf16->f32 ", ir::FusedEpilogueName(e), " m", d.m, " n", d.n, " k", d.k, " ta", d.ta,
                                " tb", d.tb));
      Case c = MakeCase(e, d, seed += 10);  // f32 inputs; A and B rounded to bf16 below
      c.inputs[0].value = ToBf16(c.inputs[0].value);
      c.inputs[1].value = ToBf16(c.inputs[1].value);
      c.attrs["output_type"] = Attribute(int64_t{1});
      ExpectMatchesCpu(c);
    }
  }
}

// relu_aux_bias: Y as above; the mask's valid bits (row i, bit j < N) must equal the CPU's
// [pre-activation > 0], which checks ir/fused_gemm.h's reading of cuBLASLt's bit layout. The
// padding bits are unspecified and not compared.
TEST(CudaFusedGemmTest, ReluAuxMaskHasTheDocumentedBitLayout) {
  OTTR_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 500;
  for (const Dims& d : kDims) {
    SCOPED_TRACE(absl::StrCat("m", d.m, " n", d.n, " k", d.k));
    const Case c = MakeCase(FusedEpilogue::kReluAuxBias, d, seed += 10);
    runtime::TensorMap feeds;
    auto g = BuildGraph(c, &feeds);
    ASSERT_TRUE(g.ok()) << g.status();
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto want = (*cpu)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = RunCuda(c, 1);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<Tensor>& out = (*got)[0];
    EXPECT_TRUE(runtime::AllClose(out[0], (*want)[0], c.rtol, c.atol).ok());
    const int64_t row = ir::ReluMaskRowBytes(d.n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        const int gb = (out[1].data<uint8_t>()[i * row + j / 8] >> (j % 8)) & 1;
        const int wb = ((*want)[1].data<uint8_t>()[i * row + j / 8] >> (j % 8)) & 1;
        // A pre-activation within rounding of 0 may take either sign: allow where |Y| is tiny.
        const float y = (*want)[0].data<float>()[i * d.n + j];
        if (gb != wb && !(y == 0.0f || std::abs(y) < 1e-5f)) ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

// The forward's mask feeding the backward on the same device: independent of how the bits are
// laid out, the pair must compute what the CPU pair computes.
TEST(CudaFusedGemmTest, ReluAuxBiasThenDReluBgrad) {
  OTTR_REQUIRE_CUDA_DEVICE();
  auto g = std::make_unique<ir::Graph>("pair");
  g->set_opset_import("", ir::kMaxOnnxOpset);
  runtime::TensorMap feeds;
  auto input = [&](const std::string& name, std::vector<int64_t> dims, uint64_t seed) {
    feeds[name] = RandomFloat(dims, seed);
    return *g->AddInput(name, ir::TensorType(DType::kFloat32, ir::ShapeFromDims(dims)));
  };
  ir::Value* x = input("x", {128, 784}, 1);
  ir::Value* w1 = input("w1", {512, 784}, 2);
  ir::Value* b1 = input("b1", {512}, 3);
  ir::Value* dy = input("dy", {128, 10}, 4);
  ir::Value* w2 = input("w2", {10, 512}, 5);
  auto f = g->AddNode({ir::kFusedGemmOp, kOttr, {x, w1, b1}, {"a", "mask"},
                       {{"epilogue", Attribute("relu_aux_bias")}, {"transB", Attribute(int64_t{1})}}, "fc1"});
  ASSERT_TRUE(f.ok());
  auto b = g->AddNode({ir::kFusedGemmOp, kOttr, {dy, w2, nullptr, (*f)->output(1)}, {"dh", "db"},
                       {{"epilogue", Attribute("drelu_bgrad")}}, "fc2/grad"});
  ASSERT_TRUE(b.ok());
  g->AddOutput((*f)->output(0));
  g->AddOutput((*b)->output(0));
  g->AddOutput((*b)->output(1));
  ASSERT_TRUE(ir::InferGraphShapes(ir::OpRegistry::Global(), *g).ok());
  auto cpu = runtime::cpu::CpuExecutor::Create(*g);
  ASSERT_TRUE(cpu.ok());
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok());
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(*g, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < want->size(); ++i) {
    EXPECT_LE(runtime::MaxRelativeError((*got)[i], (*want)[i]), 1e-4) << "output " << g->outputs()[i]->name();
  }
}

// One training step of each model fused on the GPU (the CUDA tools' pipeline) against the unfused
// step on the CPU: loss and every gradient (normwise relative error 1e-4).
void ExpectFusedStepMatchesUnfusedCpu(const std::string& model, std::vector<int64_t> x_dims) {
  auto forward = importer::ImportModelFile(SourcePath(model));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = x_dims[0];
  spec.expose_gradients = true;
  auto plain = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  auto fused = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(fused.ok()) << fused.status();
  int fused_nodes = 0;
  for (const ir::Node* n : (*fused)->nodes()) fused_nodes += n->op_type() == ir::kFusedGemmOp;
  EXPECT_GT(fused_nodes, 0);
  runtime::TensorMap feeds;
  feeds[(*forward)->inputs()[0]->name()] = RandomFloat(x_dims, 7, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = RandomInt64({x_dims[0]}, 8, 0, 9);
  feeds[passes::kLrInput] = Tensor::Scalar<float>(1e-3f);
  auto cpu = runtime::cpu::CpuExecutor::Create(**plain);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want = (*cpu)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(**fused, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run(feeds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    ASSERT_EQ((*plain)->outputs()[i]->name(), (*fused)->outputs()[i]->name());
    EXPECT_LE(runtime::MaxRelativeError((*got)[i], (*want)[i]), 1e-4) << (*plain)->outputs()[i]->name();
  }
}

// The bf16 training step as the CUDA tools build it (mixed precision, fold-gemm-casts, fused
// epilogues, multi-tensor Adam) on the GPU against the same graph on the CPU reference. Both run
// the same 16-bit operands with float32 accumulation; they differ in the order of the float32 sums
// (~1e-6 relative), which moves a bf16 Cast by one step (2u) only for a value within that of a
// rounding boundary: far below u normwise. Bound: u per gradient (normwise), u/4 on the loss, as
// tests/gpu/mixed_precision_gputest.cc (ReLU flips of the MLP are as rare there).
TEST(CudaFusedGemmTest, FoldedBf16MlpStepMatchesTheSameGraphOnCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  auto forward = importer::ImportModelFile(SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 128;
  spec.precision = passes::Precision::kBf16;
  spec.expose_gradients = true;
  spec.fuse_epilogues = true;
  spec.multi_tensor_updates = true;
  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  int f32_outputs = 0;
  for (const ir::Node* n : (*step)->nodes()) {
    f32_outputs += n->op_type() == ir::kFusedGemmOp && n->has_attr("output_type");
  }
  EXPECT_GE(f32_outputs, 8);  // 3 forward, 2 dX, 3 weight gradients
  ExpectBf16MlpStepMatchesCpu(**step, 31);
}

TEST(CudaFusedGemmTest, FusedMlpStepMatchesUnfusedCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  ExpectFusedStepMatchesUnfusedCpu("models/mlp/model.onnx", {128, 784});
}

TEST(CudaFusedGemmTest, FusedCnnStepMatchesUnfusedCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  ExpectFusedStepMatchesUnfusedCpu("models/cnn/model.onnx", {32, 1, 28, 28});
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
