// Whole training steps on the GPU: one step of each model in models/ against the CPU (TF32 off),
// CUDA Graph replay bitwise equal to eager launches, and 100 steps of the MLP whose loss curve
// follows the CPU's.
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/fused_gemm.h"
#include "importer/onnx_importer.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

class CudaTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

struct Step {
  std::unique_ptr<ir::Graph> forward, step;
  runtime::TensorMap feeds;
};

Step MakeStep(const std::string& model, int64_t batch, std::vector<int64_t> feature_dims, uint64_t seed,
              bool sgd = false, bool multi_tensor = false, bool channels_last = false, bool group_gemms = false,
              bool gemm_adam = false, bool float64 = false) {
  Step s;
  auto f = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(f.ok()) << f.status();
  s.forward = std::move(*f);
  if (float64) {  // the same model computing in float64 (testing::ToFloat64), for the CPU
    auto wide = testing::ToFloat64(*s.forward);
    EXPECT_TRUE(wide.ok()) << wide.status();
    s.forward = std::move(*wide);
  }
  passes::TrainingSpec spec;
  spec.batch = batch;
  // fuse-gemm-adam fuses only gradients nobody else reads: the steps of its test expose none.
  spec.expose_gradients = !gemm_adam;
  spec.multi_tensor_updates = multi_tensor;
  spec.channels_last = channels_last;
  // the CUDA pipeline: conv + ReLU, pool grad + ReLU grad fused; the GEMMs' epilogues and
  // fuse-gemm-adam (which runs with them) for gemm_adam on the multi-tensor side
  spec.fuse_epilogues = channels_last || (gemm_adam && multi_tensor);
  spec.group_gemms = group_gemms;
  spec.fuse_gemm_adam = gemm_adam;
  if (sgd) {
    spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
    spec.optimizer.momentum = 0.9f;
  }
  auto st = passes::BuildTrainingGraph(*s.forward, spec);
  EXPECT_TRUE(st.ok()) << st.status();
  s.step = std::move(*st);
  std::vector<int64_t> dims = {batch};
  dims.insert(dims.end(), feature_dims.begin(), feature_dims.end());
  s.feeds[s.forward->inputs()[0]->name()] = testing::RandomFloat(dims, seed, -1.0f, 1.0f);
  if (float64) {
    auto x = runtime::cpu::ew::CastTensor(s.feeds[s.forward->inputs()[0]->name()], ir::DType::kFloat64);
    EXPECT_TRUE(x.ok()) << x.status();
    s.feeds[s.forward->inputs()[0]->name()] = std::move(*x);
  }
  s.feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, seed + 1, 0, 9);
  s.feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  return s;
}

double Norm(const ir::Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) s += t.GetAsDouble(i) * t.GetAsDouble(i);
  return std::sqrt(s);
}

// Steps on the CPU reference (per-parameter updates) and on the GPU (the grouped multi-tensor
// update, TF32 off) from the same state: loss, gradients and state agree to 1e-5 (float32 with
// different summation orders; Adam's v holds g², whose relative error is twice g's: 2e-5).
// Two exceptions, both stated by what they are:
//  - a gradient that is zero in exact arithmetic (a conv bias followed by BatchNorm) is fp32
//    cancellation noise on both sides: we assert ours is noise-sized (below 1e-5 of the largest
//    gradient), and the same for the state it feeds;
//  - Adam steps each element by about lr·sign(g), so an element whose gradient is within
//    rounding of zero may step either way: parameters may differ in at most 0.1% of elements,
//    by at most 2·lr. One Adam step is compared (a flipped element changes the next gradients).
// `channels_last`: the GPU step runs the nhwc-layout pass (the CPU step stays channels-first);
// `group_gemms`: the GPU step runs group-gemms (ottr::GroupedGemm nodes, grouped or separate as
// their compile timed).
// `gemm_adam`: the GPU step runs the GEMM epilogue passes and fuse-gemm-adam (each weight
// gradient and its Adam update one ottr::GemmAdamUpdate); neither step exposes its gradients.
// `float64_bound` (> 0): where the GPU and the CPU differ by more than 1e-5, both are measured
// against the CPU step computing in float64 (testing::ToFloat64): the CPU's float32 must be within
// 1e-5 of it (the reference is sound), and the GPU's within `float64_bound`, which the caller
// derives from its sums' lengths and cancellation. Two float32 results summed in different orders
// differ by about the sum of their errors, so where one of them (cuDNN's algorithm of the moment)
// is the less accurate, comparing them to each other can only be bounded by that error anyway.
void ExpectStepMatchesCpu(const std::string& model, std::vector<int64_t> feature_dims, bool sgd,
                          bool channels_last = false, bool group_gemms = false, bool gemm_adam = false,
                          double float64_bound = 0) {
  Step c = MakeStep(model, 32, feature_dims, 7, sgd, /*multi_tensor=*/false, false, false, gemm_adam);
  Step e;  // the float64 reference (float64_bound > 0 only)
  std::unique_ptr<runtime::cpu::CpuExecutor> exact;
  if (float64_bound > 0) {
    e = MakeStep(model, 32, feature_dims, 7, sgd, false, false, false, gemm_adam, /*float64=*/true);
    ASSERT_TRUE(e.step != nullptr);
    auto x = runtime::cpu::CpuExecutor::Create(*e.step);
    ASSERT_TRUE(x.ok()) << x.status();
    exact = std::move(*x);
  }
  // Within `tol` of the CPU's float32 result, or (float64_bound) both measured against float64.
  const auto expect_close = [&](const ir::Tensor& got, const ir::Tensor& want, const ir::Tensor* wide, double tol,
                                const std::string& what) {
    const double err = runtime::MaxRelativeError(got, want);
    if (wide == nullptr || err <= tol) {
      EXPECT_LE(err, tol) << what;
      return;
    }
    const double gpu = runtime::MaxRelativeError(got, *wide);
    const double cpu = runtime::MaxRelativeError(want, *wide);
    std::printf("  %s: %.3g from the CPU; from float64: GPU %.3g, CPU %.3g\n", what.c_str(), err, gpu, cpu);
    EXPECT_LE(cpu, tol) << what << " (the CPU's float32 against float64)";
    // Adam's v (tol 2e-5) holds g², twice g's relative error.
    EXPECT_LE(gpu, float64_bound * tol / 1e-5) << what << " (the GPU against float64)";
  };
  Step s = MakeStep(model, 32, feature_dims, 7, sgd, /*multi_tensor=*/true, channels_last, group_gemms, gemm_adam);
  if (gemm_adam) {
    int fused = 0;
    for (const ir::Node* n : s.step->nodes()) fused += n->op_type() == "GemmAdamUpdate";
    EXPECT_EQ(fused, 3) << model << ": fuse-gemm-adam should fuse every layer's weight gradient at batch 32";
  }
  if (group_gemms) {
    int grouped = 0;
    for (const ir::Node* n : s.step->nodes()) grouped += n->op_type() == ir::kGroupedGemmOp;
    EXPECT_GT(grouped, 0) << model << ": group-gemms did not fire";
  }
  if (channels_last) {
    int nhwc = 0;
    for (const ir::Node* n : s.step->nodes()) nhwc += n->GetString("layout", "") == "NHWC";
    EXPECT_GT(nhwc, 0) << model << ": the nhwc-layout pass did not fire";
  }
  auto cpu = runtime::cpu::CpuExecutor::Create(*c.step);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  cuda::CudaExecutorOptions o;
  o.tf32 = false;
  auto gpu = cuda::CudaExecutor::Create(*s.step, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(c.step->outputs().size(), s.step->outputs().size());
  const int steps = sgd ? 2 : 1;
  const double lr = 1e-2;
  std::set<std::string> noise;  // parameters whose gradient is zero in exact arithmetic
  double floor = 0;
  for (int k = 0; k < steps; ++k) {
    auto want = (*cpu)->Run(c.feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*gpu)->Run(s.feeds);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<ir::Tensor> wide;
    if (exact != nullptr) {
      auto w = exact->Run(e.feeds);
      ASSERT_TRUE(w.ok()) << w.status();
      wide = std::move(*w);
      ASSERT_EQ(wide.size(), got->size());
    }
    double largest = 0;
    for (const ir::Tensor& t : *want) largest = std::max(largest, Norm(t));
    floor = 1e-5 * largest;
    for (size_t i = 0; i < got->size(); ++i) {
      const std::string& name = s.step->outputs()[i]->name();
      ASSERT_EQ(name, c.step->outputs()[i]->name());
      if (absl::EndsWith(name, ".grad") && Norm((*want)[i]) < floor) {
        noise.insert(name.substr(0, name.size() - 5));
        EXPECT_LT(Norm((*got)[i]), floor) << model << " step " << k << " " << name << " is zero in exact arithmetic";
        continue;
      }
      if (exact != nullptr) {
        ASSERT_EQ(e.step->outputs()[i]->name(), name);
      }
      expect_close((*got)[i], (*want)[i], exact != nullptr ? &wide[i] : nullptr, 1e-5,
                   absl::StrCat(model, " step ", k, " output ", name));
    }
  }
  for (const ir::StateUpdate& u : c.step->updates()) {
    const std::string& name = u.target->name();
    const ir::Tensor* want = (*cpu)->State(name);
    ASSERT_NE(want, nullptr) << name;
    const ir::Tensor want_copy = *want;
    const ir::Tensor* got = (*gpu)->State(name);
    ASSERT_NE(got, nullptr) << name;
    const ir::Value* fv = c.forward->FindValue(name);
    const bool param = fv != nullptr && fv->is_initializer();
    std::string owner;
    for (const std::string& p : noise) {
      if (absl::StartsWith(name, p + ".")) owner = p;
    }
    if (!owner.empty()) {  // state fed by a noise gradient (momentum buffer, m, v)
      EXPECT_LT(Norm(*got), 2 * steps * floor) << model << " state " << name;
      continue;
    }
    if (!param || sgd) {
      const double tol = absl::EndsWith(name, ".v") ? 2e-5 : 1e-5;
      const ir::Tensor* wide = exact != nullptr ? exact->State(name) : nullptr;
      expect_close(*got, want_copy, wide, tol, absl::StrCat(model, " state ", name));
      continue;
    }
    int64_t flipped = 0;
    double worst = 0;
    for (int64_t i = 0; i < got->num_elements(); ++i) {
      const double d = std::abs(got->GetAsDouble(i) - want_copy.GetAsDouble(i));
      worst = std::max(worst, d);
      flipped += d > 1e-5 * std::abs(want_copy.GetAsDouble(i)) + 1e-7;
    }
    EXPECT_LE(worst, 2 * steps * lr * (1 + 1e-3)) << model << " param " << name;
    if (noise.count(name) == 0) {
      EXPECT_LE(flipped, std::max<int64_t>(2, got->num_elements() / 1000)) << model << " param " << name;
    }
  }
}

TEST_F(CudaTrainingTest, MlpStepMatchesCpu) {
  ExpectStepMatchesCpu("models/mlp/model.onnx", {784}, /*sgd=*/true);
  ExpectStepMatchesCpu("models/mlp/model.onnx", {784}, /*sgd=*/false);
}
// Without the epilogue passes each hidden layer's data and weight gradients are plain products of
// one ReLU backward's output: group-gemms makes two GroupedGemm nodes of them.
TEST_F(CudaTrainingTest, GroupedGemmMlpStepMatchesCpu) {
  ExpectStepMatchesCpu("models/mlp/model.onnx", {784}, /*sgd=*/true, /*channels_last=*/false, /*group_gemms=*/true);
  ExpectStepMatchesCpu("models/mlp/model.onnx", {784}, /*sgd=*/false, /*channels_last=*/false, /*group_gemms=*/true);
}
// Every layer's weight and bias gradients made and applied by ottr::GemmAdamUpdate (k = 32): the
// kernel's float32 sums in another order than the CPU's GEMM, the same bounds (Adam and AdamW).
TEST_F(CudaTrainingTest, GemmAdamMlpStepMatchesCpu) {
  ExpectStepMatchesCpu("models/mlp/model.onnx", {784}, /*sgd=*/false, false, false, /*gemm_adam=*/true);
}
TEST_F(CudaTrainingTest, CnnStepMatchesCpu) {
  ExpectStepMatchesCpu("models/cnn/model.onnx", {1, 28, 28}, /*sgd=*/true);
  ExpectStepMatchesCpu("models/cnn/model.onnx", {1, 28, 28}, /*sgd=*/false);
}
// The CNN with its convolutions, pools and ReLUs channels-last on the GPU (cuDNN NHWC kernels,
// the channels-last pool kernels) against the channels-first CPU step: the same bounds.
TEST_F(CudaTrainingTest, CnnChannelsLastStepMatchesCpu) {
  ExpectStepMatchesCpu("models/cnn/model.onnx", {1, 28, 28}, /*sgd=*/true, /*channels_last=*/true);
  ExpectStepMatchesCpu("models/cnn/model.onnx", {1, 28, 28}, /*sgd=*/false, /*channels_last=*/true);
}

// The small ResNet (BatchNorm in training mode, residual Adds, global average pool; nhwc-layout
// declines it, its BatchNormalizations staying channels-first): the same bounds, the conv
// biases before BatchNorm being the zero-in-exact-arithmetic gradients the bounds name, except
// where cuDNN's float32 convolution gradients are less accurate than 1e-5 (measured 1.05e-5 to
// 4.9e-5 from the CPU on H100s and H200s, which algorithm depending on the card and the
// autotuner; the CPU's float32 is within 2.5e-6 of float64 for every output,
// Float64ReferenceTest): against float64, 1e-4. A weight gradient sums n = 32 · 28 · 28 = 25088
// products (layer1; fewer below), whose float32 sum in blocks errs by about u · √n = 6e-8 · 158 =
// 9.4e-6 of the sum of the products' magnitudes, and BatchNorm's backward (dY minus its mean and
// its projection on x̂) leaves a sum several times smaller than that: up to 10 times here.
TEST_F(CudaTrainingTest, ResnetStepMatchesCpu) {
  ExpectStepMatchesCpu("models/resnet/model.onnx", {1, 28, 28}, /*sgd=*/true, false, false, false,
                       /*float64_bound=*/1e-4);
  ExpectStepMatchesCpu("models/resnet/model.onnx", {1, 28, 28}, /*sgd=*/false, false, false, false,
                       /*float64_bound=*/1e-4);
}

TEST_F(CudaTrainingTest, TorchCnnBnStepMatchesCpu) {
  ExpectStepMatchesCpu("models/torch_cnn_bn/model.onnx", {1, 28, 28}, /*sgd=*/true);
  ExpectStepMatchesCpu("models/torch_cnn_bn/model.onnx", {1, 28, 28}, /*sgd=*/false);
}

// The step of a pass under test on the GPU against the CPU reference of `cpu_step` (TF32 off) and,
// in TF32, against `plain_step` (the GPU step without the pass): every output (loss, gradients,
// updated state) within 1e-5 normwise against the CPU, 3e-5 in TF32. The fp32 bound is the
// callers' to justify. In TF32 a float32-level difference (summation order, ~1e-7 relative) in an
// operand of the next GEMM moves that element's TF32 rounding (a unit is 2^-11 = 4.9e-4 relative)
// with probability ~1e-7 / 2^-11 = 2e-4, which is ~sqrt(2e-4) · 2^-11 = 7e-6 normwise per GEMM the
// difference passes through: the first layer's weight gradient of a 3-layer MLP is two GEMMs
// down from the loss (measured on the H200: 9.6e-6 and 1.01e-5 for models/mlp at batch 4096,
// depending on the algorithms the autotuner picked in that process, against 4e-7 in fp32).
void ExpectTf32PassStepMatches(const ir::Graph& cpu_step, const ir::Graph& plain_step, const ir::Graph& gpu_step,
                               const runtime::TensorMap& feeds, double tf32_bound = 3e-5) {
  auto run_gpu = [&](const ir::Graph& step, bool tf32) -> std::vector<ir::Tensor> {
    cuda::CudaExecutorOptions o;
    o.tf32 = tf32;
    auto gpu = cuda::CudaExecutor::Create(step, o);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu.ok()) return {};
    auto got = (*gpu)->Run(feeds);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<ir::Tensor>{};
  };
  auto cpu = runtime::cpu::CpuExecutor::Create(cpu_step);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want_cpu = (*cpu)->Run(feeds);
  ASSERT_TRUE(want_cpu.ok()) << want_cpu.status();
  const std::vector<ir::Tensor> got_fp32 = run_gpu(gpu_step, false);
  const std::vector<ir::Tensor> got_tf32 = run_gpu(gpu_step, true);
  const std::vector<ir::Tensor> want_tf32 = run_gpu(plain_step, true);
  ASSERT_EQ(got_fp32.size(), want_cpu->size());
  ASSERT_EQ(got_tf32.size(), want_cpu->size());
  ASSERT_EQ(want_tf32.size(), want_cpu->size());
  for (size_t i = 0; i < want_cpu->size(); ++i) {
    const std::string& name = gpu_step.outputs()[i]->name();
    ASSERT_EQ(name, cpu_step.outputs()[i]->name());
    ASSERT_EQ(name, plain_step.outputs()[i]->name());
    const double fp32 = testing::NormwiseRelativeError(got_fp32[i], (*want_cpu)[i]);
    const double tf32 = testing::NormwiseRelativeError(got_tf32[i], want_tf32[i]);
    std::printf("  %-28s normwise fp32 vs cpu %.3g, tf32 vs without the passes %.3g\n", name.c_str(), fp32, tf32);
    EXPECT_LE(fp32, 1e-5) << name << " (fp32, against the CPU)";
    EXPECT_LE(tf32, tf32_bound) << name << " (TF32, against the step without the pass)";
  }
}

// A linear layer big enough for kmajor-gemm-operands (1024 -> 1024 -> 10 at batch 1024: the first
// weight gradient is 1024 x 1024 x 1024). TF32 off, the GPU step with its operand transposed
// against the CPU step without: the rewrite is exact and only the summation order differs
// (norm-wise 1e-5, as above). TF32 on (the pass's reason to exist), against the GPU step without
// the pass: the forward and every other GEMM are the same kernels, and the weight gradient's
// products of TF32-rounded factors (11-bit significands) are exact in float32, so the two differ
// only in the order the k = 1024 products are summed (within the 3e-5 TF32 bound above, which
// also covers the later GEMMs' re-rounding; measured 0 here). (Against the CPU, TF32 moves
// ReLU masks and the softmax gradient's cancellations: ~1% norm-wise here, which says nothing
// about the pass.)
std::unique_ptr<ir::Graph> LinearReluLinear(int64_t batch, int64_t in, int64_t hidden, int64_t out) {
  auto g = std::make_unique<ir::Graph>("mlp");
  g->set_opset_import("", 17);
  ir::Value* x = *g->AddInput("x", ir::TensorType(ir::DType::kFloat32, ir::ShapeFromDims({batch, in})));
  const float s0 = 1.0f / std::sqrt(static_cast<float>(in)), s1 = 1.0f / std::sqrt(static_cast<float>(hidden));
  ir::Value* w0 = *g->AddInitializer("fc0.weight", testing::RandomFloat({hidden, in}, 41, -s0, s0));
  ir::Value* b0 = *g->AddInitializer("fc0.bias", testing::RandomFloat({hidden}, 42, -s0, s0));
  ir::Value* w1 = *g->AddInitializer("fc1.weight", testing::RandomFloat({out, hidden}, 43, -s1, s1));
  ir::Value* b1 = *g->AddInitializer("fc1.bias", testing::RandomFloat({out}, 44, -s1, s1));
  const std::map<std::string, ir::Attribute> tb = {{"transB", ir::Attribute(int64_t{1})}};
  ir::Node* h = *g->AddNode({"Gemm", "", {x, w0, b0}, {"h"}, tb, "fc0"});
  ir::Node* a = *g->AddNode({"Relu", "", {h->output(0)}, {"a"}, {}, "relu0"});
  ir::Node* y = *g->AddNode({"Gemm", "", {a->output(0), w1, b1}, {"logits"}, tb, "fc1"});
  g->AddOutput(y->output(0));
  return g;
}

TEST_F(CudaTrainingTest, KMajorWeightGradientStepMatchesCpu) {
  const int64_t batch = 1024;
  auto forward = LinearReluLinear(batch, 1024, 1024, 10);
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.expose_gradients = true;
  spec.precision = passes::Precision::kTf32;
  auto cpu_step = passes::BuildTrainingGraph(*forward, spec);
  ASSERT_TRUE(cpu_step.ok()) << cpu_step.status();
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  auto plain_step = passes::BuildTrainingGraph(*forward, spec);
  ASSERT_TRUE(plain_step.ok()) << plain_step.status();
  spec.kmajor_gemm_operands = true;
  auto gpu_step = passes::BuildTrainingGraph(*forward, spec);
  ASSERT_TRUE(gpu_step.ok()) << gpu_step.status();
  int transposes = 0;
  for (const ir::Node* n : (*gpu_step)->nodes()) transposes += absl::EndsWith(n->output(0)->name(), ".kmajor");
  EXPECT_EQ(transposes, 1) << "kmajor-gemm-operands should transpose the first weight gradient's operand";
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 1024}, 45, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, 46, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  ExpectTf32PassStepMatches(**cpu_step, **plain_step, **gpu_step, feeds);
}

// The TF32 passes of tall steps, on the small MLP at batch 4096 (models/mlp: 784-512-512-10, layers
// fc1..fc3): pad-gemm-dims pads fc3's n = 10 to 12 (float32, 16-byte rows), kmajor-gemm-operands
// transposes fc2's weight for its data gradient (4096 x 512 x 512: tall and 1e9 multiply-adds),
// fuse-gemm-epilogue keeps both ReLUs in their large GEMMs (RELU_BIAS) and fuse-relu-grad-bgrad
// sums the bias gradients in the ReLU backward (fuse-linear-relu-grad, which changes the head's
// precision, is off here: LinearReluGradStepMatchesCpu below). Against the CPU reference of the plain step (TF32
// off: float32 sums over k <= 4096 random-signed terms in other orders, ~sqrt(k)·2^-24 = 4e-6
// relative, under 1e-5 normwise), and in TF32 against the GPU step without these passes (zeros
// added or values moved: the summation order differs, and with it, two GEMMs down, some TF32
// roundings: the 3e-5 of ExpectTf32PassStepMatches).
TEST_F(CudaTrainingTest, TallTf32PassesStepMatchesCpu) {
  const int64_t batch = 4096;
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.expose_gradients = true;
  spec.precision = passes::Precision::kTf32;
  auto cpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(cpu_step.ok()) << cpu_step.status();
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.large_relu_epilogue_tf32 = false;
  spec.fuse_relu_grad_bgrad = false;
  auto plain_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(plain_step.ok()) << plain_step.status();
  spec.large_relu_epilogue_tf32 = true;
  spec.fuse_relu_grad_bgrad = true;
  spec.kmajor_gemm_operands = true;
  spec.pad_tf32_gemms = true;
  spec.disabled_passes.insert("fuse-linear-relu-grad");
  auto gpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(gpu_step.ok()) << gpu_step.status();
  int pads = 0, weight_transposes = 0, relu_bias = 0, relu_bgrad = 0;
  for (const ir::Node* n : (*gpu_step)->nodes()) {
    pads += n->op_type() == "Pad";
    weight_transposes += n->op_type() == "Transpose" && n->input(0)->name() == "fc2.weight";
    relu_bias += n->GetString("epilogue", "") == "relu_bias";
    relu_bgrad += n->op_type() == "ReluGradBiasGrad";
    // fuse-linear-sce: the classifier, its loss and data gradient and fc2's ReLU backward with
    // its bias gradient in one node.
    relu_bgrad += n->op_type() == "LinearSoftmaxCrossEntropyWithGrad" && n->num_outputs() == 4;
  }
  EXPECT_GE(pads, 2) << "pad-gemm-dims should pad fc3's weight and bias";
  EXPECT_EQ(weight_transposes, 1) << "kmajor-gemm-operands should transpose fc2.weight for its data gradient";
  EXPECT_EQ(relu_bias, 2) << "both ReLUs should stay in their GEMMs";
  EXPECT_EQ(relu_bgrad, 2) << "both bias gradients should come from the ReLU backward";
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 784}, 47, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, 48, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  ExpectTf32PassStepMatches(**cpu_step, **plain_step, **gpu_step, feeds);
}

// fuse-linear-relu-grad on the small MLP at batch 4096 (above fuse-linear-sce's 1024 rows): fc3's
// data and weight gradients and fc2's ReLU backward in one ottr::LinearReluGrad. TF32 off, against
// the CPU reference of the plain step: float32 sums in other orders (1e-5 normwise, as above). In
// TF32, against the GPU step without the pass: the pass computes fc3's two products in float32
// where the GEMMs rounded their operands to TF32 (2^-11 relative each, so 2^-10 per product), and
// every gradient below fc3 inherits that difference through the TF32 GEMMs of the backward (each
// re-rounding its operands, which adds no more than its own 2^-11 to a difference it passes on
// normwise): bound 2^-10 normwise (measured 1.8e-4 to 4.8e-4 on the H200). The feeds are those of
// TallTf32PassesStepMatchesCpu. With seeds 49 and 50 the GPU steps with and without the pass both
// missed the CPU by 7.7e-4 normwise in fc1's and fc2's gradients (and agreed with each other to
// 2.4e-7): the size of one ReLU mask element that differs between the GPU's and the CPU's float32
// forward (a pre-activation within rounding of zero; the likely cause, not established).
TEST_F(CudaTrainingTest, LinearReluGradStepMatchesCpu) {
  const int64_t batch = 4096;
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.expose_gradients = true;
  spec.precision = passes::Precision::kTf32;
  auto cpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(cpu_step.ok()) << cpu_step.status();
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.pad_tf32_gemms = true;
  // fuse-linear-sce-relu-grad (below) would take the LinearReluGrad with the head's forward.
  spec.disabled_passes = {"fuse-linear-relu-grad", "fuse-linear-sce-relu-grad"};
  auto plain_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(plain_step.ok()) << plain_step.status();
  spec.disabled_passes = {"fuse-linear-sce-relu-grad"};
  auto gpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(gpu_step.ok()) << gpu_step.status();
  int fused = 0;
  for (const ir::Node* n : (*gpu_step)->nodes()) fused += n->op_type() == "LinearReluGrad" && n->num_outputs() == 4;
  EXPECT_EQ(fused, 1) << "fuse-linear-relu-grad should take fc3's data and weight gradients";
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 784}, 47, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, 48, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  ExpectTf32PassStepMatches(**cpu_step, **plain_step, **gpu_step, feeds, std::ldexp(1.0, -10));
}

// fuse-linear-sce-relu-grad on the small MLP at batch 4096 (the default TF32 pipeline): fc3's
// forward, the loss and LinearReluGrad in one ottr::LinearSceReluGrad. The node runs only with TF32
// on, so both comparisons are of TF32 steps: against the GPU step without the pass (LinearReluGrad
// after cuBLASLt's TF32 classifier GEMM and the loss kernel), the logits differ by the two TF32
// products' roundings and summation orders (each within 2^-10 of Σ|y·w|, as in
// LinearReluGradStepMatchesCpu), dX and dW are computed as LinearReluGrad computes them (float32-
// level and TF32): bound 2^-10 normwise, as there (measured 3.2e-5 on the H100). The distance of
// both TF32 steps from the float32 CPU reference is printed, not bounded here: the gradients are
// sums over 4096 rows of random-signed terms, so TF32's 2^-10 relative per product, relative to
// Σ|terms|, is up to 2% of the sums themselves normwise (measured 1.1-2.1% with and without the
// pass alike); the float32 comparisons with the CPU are the other tests' (TF32 off).
TEST_F(CudaTrainingTest, LinearSceReluGradStepMatchesCpu) {
  const int64_t batch = 4096;
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = batch;
  spec.expose_gradients = true;
  spec.precision = passes::Precision::kTf32;
  auto cpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(cpu_step.ok()) << cpu_step.status();
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.pad_tf32_gemms = true;
  spec.disabled_passes = {"fuse-linear-sce-relu-grad"};
  auto plain_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(plain_step.ok()) << plain_step.status();
  spec.disabled_passes.clear();
  auto gpu_step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(gpu_step.ok()) << gpu_step.status();
  int fused = 0;
  for (const ir::Node* n : (*gpu_step)->nodes()) fused += n->op_type() == "LinearSceReluGrad";
  EXPECT_EQ(fused, 1) << "fuse-linear-sce-relu-grad should take fc3's forward, the loss and the head's backward";
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({batch, 784}, 47, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({batch}, 48, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  auto run_gpu = [&](const ir::Graph& step) -> std::vector<ir::Tensor> {
    cuda::CudaExecutorOptions o;
    o.tf32 = true;
    auto gpu = cuda::CudaExecutor::Create(step, o);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu.ok()) return {};
    auto got = (*gpu)->Run(feeds);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<ir::Tensor>{};
  };
  auto cpu = runtime::cpu::CpuExecutor::Create(**cpu_step);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto want_cpu = (*cpu)->Run(feeds);
  ASSERT_TRUE(want_cpu.ok()) << want_cpu.status();
  const std::vector<ir::Tensor> with = run_gpu(**gpu_step);
  const std::vector<ir::Tensor> without = run_gpu(**plain_step);
  ASSERT_EQ(with.size(), want_cpu->size());
  ASSERT_EQ(without.size(), want_cpu->size());
  for (size_t i = 0; i < with.size(); ++i) {
    const std::string& name = (*gpu_step)->outputs()[i]->name();
    ASSERT_EQ(name, (*plain_step)->outputs()[i]->name());
    ASSERT_EQ(name, (*cpu_step)->outputs()[i]->name());
    const double pass = testing::NormwiseRelativeError(with[i], without[i]);
    const double ref = testing::NormwiseRelativeError(with[i], (*want_cpu)[i]);
    const double ref_without = testing::NormwiseRelativeError(without[i], (*want_cpu)[i]);
    std::printf("  %-28s normwise with vs without the pass %.3g, vs cpu %.3g (without the pass %.3g)\n",
                name.c_str(), pass, ref, ref_without);
    EXPECT_LE(pass, std::ldexp(1.0, -10)) << name << " (TF32, against the step without the pass)";
  }
}

// A TF32 pass that fuses GEMMs into one of ottr's kernels (fuse-mlp-step's ottr::MlpStep, the
// whole step in one cooperative launch; fuse-gemm-adam's ottr::GemmAdamUpdate, each weight
// gradient on the tensor cores with its Adam update) against the same TF32 step without the pass
// on the GPU (cuBLASLt's TF32 GEMMs) and the float32 CPU reference, three
// steps from the same state, at 128 rows (the small MLP's benchmark batch) and 300 (a partial
// 32-row tile), every 7th label ignored. Both GPU steps round the GEMM operands to TF32 (10-bit
// mantissas), and Adam's m / sqrt(v) turns the small gradients' rounding into whole-lr steps, so
// after three steps both are a few percent from the float32 reference in the moments (printed).
// The fused step must be no further from the reference than the library's TF32 step, within a
// factor 2 (two independent roundings of the same size) plus 2^-12; each loss within 2^-10 of the
// unfused step's, and the loss must fall. A wrong index or a lost term is off by O(1).
// `pass` is the pass's name, `op` its node's op type, `nodes_wanted` how many of them the step
// should have at batch 128 and at `other_batch` (300 unless given).
void ExpectTf32FusedStepMatchesTheUnfusedStep(const std::string& pass, const std::string& op, int nodes_wanted,
                                              void (*enable)(passes::TrainingSpec&), int64_t other_batch = 300) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  for (int64_t batch : {int64_t{128}, other_batch}) {
    SCOPED_TRACE(batch);
    passes::TrainingSpec spec;
    spec.batch = batch;
    spec.precision = passes::Precision::kTf32;
    spec.multi_tensor_updates = true;
    spec.fuse_epilogues = true;
    enable(spec);
    auto fused = passes::BuildTrainingGraph(**forward, spec);
    ASSERT_TRUE(fused.ok()) << fused.status();
    int nodes = 0;
    for (const ir::Node* n : (*fused)->nodes()) nodes += n->op_type() == op;
    ASSERT_EQ(nodes, nodes_wanted) << pass << " should make " << nodes_wanted << " " << op;
    spec.disabled_passes = {pass};
    auto plain = passes::BuildTrainingGraph(**forward, spec);
    ASSERT_TRUE(plain.ok()) << plain.status();
    cuda::CudaExecutorOptions o;
    o.tf32 = true;
    auto a = cuda::CudaExecutor::Create(**fused, o);
    auto b = cuda::CudaExecutor::Create(**plain, o);
    auto c = runtime::cpu::CpuExecutor::Create(**fused);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      runtime::TensorMap feeds;
      feeds["x"] = testing::RandomFloat({batch, 784}, 60, -1.0f, 1.0f);  // one batch: the loss must fall
      ir::Tensor labels = testing::RandomInt64({batch}, 70, 0, 9);
      for (int64_t i = 0; i < batch; i += 7) labels.data<int64_t>()[i] = -100;
      feeds[passes::kLabelsInput] = labels;
      feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
      auto ra = (*a)->Run(feeds);
      auto rb = (*b)->Run(feeds);
      auto rc = (*c)->Run(feeds);
      ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok());
      const double la = (*ra)[0].GetAsDouble(0), lb = (*rb)[0].GetAsDouble(0), lc = (*rc)[0].GetAsDouble(0);
      std::printf("  batch %lld step %d loss fused %.7f unfused %.7f cpu %.7f\n", static_cast<long long>(batch), step,
                  la, lb, lc);
      EXPECT_LE(std::abs(la - lb), std::ldexp(1.0, -10) * std::abs(lb)) << "step " << step;
      losses.push_back(la);
    }
    EXPECT_LT(losses[2], losses[0]);
    for (const ir::StateUpdate& u : (*fused)->updates()) {
      const std::string& name = u.target->name();
      const ir::Tensor* ta = (*a)->State(name);
      ASSERT_NE(ta, nullptr) << name;
      const ir::Tensor got = *ta;
      const ir::Tensor* tb = (*b)->State(name);
      ASSERT_NE(tb, nullptr) << name;
      const ir::Tensor* tc = (*c)->State(name);
      ASSERT_NE(tc, nullptr) << name;
      if (got.dtype() != ir::DType::kFloat32) {
        EXPECT_TRUE(got.BitwiseEquals(*tb)) << name;  // the step counter
        continue;
      }
      const double pass = testing::NormwiseRelativeError(got, *tb);
      const double fused = testing::NormwiseRelativeError(got, *tc);
      const double lib = testing::NormwiseRelativeError(*tb, *tc);
      std::printf("  %-22s normwise from the cpu: fused %.3g, unfused %.3g; fused vs unfused %.3g\n", name.c_str(),
                  fused, lib, pass);
      EXPECT_LE(fused, 2.0 * lib + std::ldexp(1.0, -12)) << name;
    }
  }
}

TEST_F(CudaTrainingTest, MlpStepMatchesTheUnfusedStep) {
  ExpectTf32FusedStepMatchesTheUnfusedStep("fuse-mlp-step", "MlpStep", 1,
                                           [](passes::TrainingSpec& s) { s.fuse_mlp_step = true; });
}

// Batch 128 and 100 (k = 100 is off the MMA's 8 rows: the last step's rows are zero-filled), every
// layer's weight and bias (the pass fuses k <= 256 only).
TEST_F(CudaTrainingTest, Tf32GemmAdamStepMatchesTheUnfusedStep) {
  ExpectTf32FusedStepMatchesTheUnfusedStep(
      "fuse-gemm-adam", "GemmAdamUpdate", 3,
      [](passes::TrainingSpec& s) {
        s.fuse_gemm_adam = true;
        s.expose_gradients = false;
      },
      /*other_batch=*/100);
}

TEST_F(CudaTrainingTest, GraphReplayEqualsEagerLaunches) {
  Step s = MakeStep("models/mlp/model.onnx", 64, {784}, 3);
  cuda::CudaExecutorOptions graph_opt, eager_opt;
  eager_opt.use_cuda_graph = false;
  auto a = cuda::CudaExecutor::Create(*s.step, graph_opt);
  auto b = cuda::CudaExecutor::Create(*s.step, eager_opt);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int k = 0; k < 5; ++k) {
    auto ra = (*a)->Run(s.feeds);
    auto rb = (*b)->Run(s.feeds);
    ASSERT_TRUE(ra.ok() && rb.ok());
    for (size_t i = 0; i < ra->size(); ++i) EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "step " << k;
  }
  EXPECT_GT((*a)->stats().launches_per_step, 0);
}

// Programmatic dependent launches (CudaExecutorOptions::programmatic_launch, kernels/pdl.cuh)
// compute exactly what ordinary launches compute, step after step, in the CUDA Graph and eagerly,
// on the benchmark's TF32 pipeline: ottr's small GEMM (where the autotuner picks it) and its
// bias-gradient finish, the fused classifier and loss, the ReLU backward with its bias gradient,
// the k-slice sum and the grouped Adam each wait in the kernel for the launch before;
// a kernel that read or wrote before that wait would race with it and differ here (the kernels
// are deterministic, so any difference is a race). The autotuner times ottr's GEMM launched
// programmatically apart (" pdl" in its key) and may pick another tile or a cuBLASLt kernel, which
// sums in another order (it did on an H100: the batch-128 data gradient); the programmatic
// executors take the ordinary one's choices (ShareChoicesWithProgrammaticLaunchesForTesting after
// it compiled), so only the launches differ. The MLP's step at 128 must have programmatic
// edges (else this compares ordinary launches with themselves there: its batch-128 data gradient
// is ottr's GEMM right after the classifier's kernel on the main stream); the others' are printed.
TEST_F(CudaTrainingTest, ProgrammaticLaunchesEqualOrdinaryOnes) {
  struct Model {
    const char* path;
    std::vector<int64_t> dims;
    int64_t batch;
  };
  for (const Model& m : {Model{"models/mlp/model.onnx", {784}, 128}, Model{"models/mlp/model.onnx", {784}, 4096},
                         Model{"models/cnn/model.onnx", {1, 28, 28}, 64}}) {
    SCOPED_TRACE(absl::StrCat(m.path, " batch ", m.batch));
    auto forward = importer::ImportModelFile(testing::SourcePath(m.path));
    ASSERT_TRUE(forward.ok()) << forward.status();
    passes::TrainingSpec spec;
    spec.batch = m.batch;
    spec.precision = passes::Precision::kTf32;
    passes::UseCudaPipeline(spec);  // as `ottr bench` runs it
    auto step = passes::BuildTrainingGraph(**forward, spec);
    ASSERT_TRUE(step.ok()) << step.status();
    cuda::CudaExecutorOptions plain, graph_pdl, eager_pdl;
    plain.programmatic_launch = false;
    graph_pdl.programmatic_launch = true;
    eager_pdl.programmatic_launch = true;
    eager_pdl.use_cuda_graph = false;
    auto a = cuda::CudaExecutor::Create(**step, plain);
    auto b = cuda::CudaExecutor::Create(**step, graph_pdl);
    auto c = cuda::CudaExecutor::Create(**step, eager_pdl);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    runtime::TensorMap feeds;
    std::vector<int64_t> dims = {m.batch};
    dims.insert(dims.end(), m.dims.begin(), m.dims.end());
    feeds[passes::kLabelsInput] = testing::RandomInt64({m.batch}, 61, 0, 9);
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
    for (int k = 0; k < 3; ++k) {
      feeds[(*forward)->inputs()[0]->name()] = testing::RandomFloat(dims, 200 + k, -1.0f, 1.0f);
      auto ra = (*a)->Run(feeds);
      ASSERT_TRUE(ra.ok()) << ra.status();
      if (k == 0) {
        const int shared = cuda::CudaLibraries::ShareChoicesWithProgrammaticLaunchesForTesting();
        if (m.batch == 128) {
          EXPECT_GT(shared, 0) << "the ordinary step chose no ottr GEMM to share";
        }
      }
      auto rb = (*b)->Run(feeds);
      auto rc = (*c)->Run(feeds);
      ASSERT_TRUE(rb.ok() && rc.ok()) << rb.status() << rc.status();
      for (size_t i = 0; i < ra->size(); ++i) {
        EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "graph, step " << k << " output " << (*step)->outputs()[i]->name();
        EXPECT_TRUE((*ra)[i].BitwiseEquals((*rc)[i])) << "eager, step " << k << " output " << (*step)->outputs()[i]->name();
      }
    }
    for (const ir::StateUpdate& u : (*step)->updates()) {
      const ir::Tensor* sa = (*a)->State(u.target->name());
      const ir::Tensor* sb = (*b)->State(u.target->name());
      const ir::Tensor* sc = (*c)->State(u.target->name());
      ASSERT_TRUE(sa != nullptr && sb != nullptr && sc != nullptr);
      EXPECT_TRUE(sa->BitwiseEquals(*sb)) << u.target->name();
      EXPECT_TRUE(sa->BitwiseEquals(*sc)) << u.target->name();
    }
    std::printf("  %s batch %lld: %lld programmatic edges in a step of %lld launches\n", m.path,
                static_cast<long long>(m.batch), static_cast<long long>((*b)->stats().programmatic_edges),
                static_cast<long long>((*b)->stats().launches_per_step));
    if (m.batch == 128) {
      EXPECT_GT((*b)->stats().programmatic_edges, 0) << "no launch of the step was programmatic";
    }
    EXPECT_EQ((*a)->stats().programmatic_edges, 0);
    EXPECT_EQ((*a)->stats().launches_per_step, (*b)->stats().launches_per_step);
  }
}

// The step spread over 4 streams (CudaExecutorOptions::streams; graph capture and eager
// launches) computes exactly what one stream computes, step after step: every kernel is
// deterministic, so any difference is a dependency (data or arena reuse) the stream assignment
// missed.
TEST_F(CudaTrainingTest, MultiStreamStepsEqualOneStream) {
  struct Model {
    const char* path;
    std::vector<int64_t> dims;
    bool channels_last;
  };
  for (const Model& m : {Model{"models/mlp/model.onnx", {784}, false}, Model{"models/cnn/model.onnx", {1, 28, 28}, true},
                         Model{"models/resnet/model.onnx", {1, 28, 28}, false}}) {
    SCOPED_TRACE(m.path);
    Step s = MakeStep(m.path, 64, m.dims, 13, /*sgd=*/false, /*multi_tensor=*/true, m.channels_last);
    cuda::CudaExecutorOptions one, graph4, eager4;
    one.streams = 1;
    graph4.streams = 4;
    eager4.streams = 4;
    eager4.use_cuda_graph = false;
    auto a = cuda::CudaExecutor::Create(*s.step, one);
    auto b = cuda::CudaExecutor::Create(*s.step, graph4);
    auto c = cuda::CudaExecutor::Create(*s.step, eager4);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    for (int k = 0; k < 3; ++k) {
      s.feeds[s.forward->inputs()[0]->name()] = testing::RandomFloat([&] {
        std::vector<int64_t> d = {64};
        d.insert(d.end(), m.dims.begin(), m.dims.end());
        return d;
      }(), 100 + k, -1.0f, 1.0f);
      auto ra = (*a)->Run(s.feeds);
      auto rb = (*b)->Run(s.feeds);
      auto rc = (*c)->Run(s.feeds);
      ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok()) << ra.status() << rb.status() << rc.status();
      for (size_t i = 0; i < ra->size(); ++i) {
        EXPECT_TRUE((*ra)[i].BitwiseEquals((*rb)[i])) << "graph, step " << k << " output " << s.step->outputs()[i]->name();
        EXPECT_TRUE((*ra)[i].BitwiseEquals((*rc)[i])) << "eager, step " << k << " output " << s.step->outputs()[i]->name();
      }
    }
    for (const ir::StateUpdate& u : s.step->updates()) {
      const ir::Tensor* sa = (*a)->State(u.target->name());
      const ir::Tensor* sb = (*b)->State(u.target->name());
      ASSERT_TRUE(sa != nullptr && sb != nullptr);
      EXPECT_TRUE(sa->BitwiseEquals(*sb)) << u.target->name();
    }
    EXPECT_EQ((*a)->stats().launches_per_step, (*b)->stats().launches_per_step);
  }
}

TEST_F(CudaTrainingTest, SubmittedStepsEqualRunSteps) {
  // The pipelined path (pinned staging, copy stream, losses drained later) computes exactly what
  // Run() computes, step for step, with a different batch each step (both staging slots used).
  Step s = MakeStep("models/mlp/model.onnx", 64, {784}, 21, /*sgd=*/false, /*multi_tensor=*/true);
  auto a = cuda::CudaExecutor::Create(*s.step);
  auto b = cuda::CudaExecutor::Create(*s.step);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<double> run_losses;
  std::vector<runtime::TensorMap> batches;
  for (int k = 0; k < 7; ++k) {
    runtime::TensorMap f = s.feeds;
    f["x"] = testing::RandomFloat({64, 784}, 100 + k, -1.0f, 1.0f);
    f[passes::kLabelsInput] = testing::RandomInt64({64}, 200 + k, 0, 9);
    batches.push_back(f);
    auto r = (*a)->Run(f);
    ASSERT_TRUE(r.ok()) << r.status();
    run_losses.push_back((*r)[0].GetAsDouble(0));
  }
  std::vector<double> submitted;
  for (int k = 0; k < 7; ++k) {
    ASSERT_TRUE((*b)->Submit(batches[k]).ok());
    if (k == 2 || k == 6) {
      auto d = (*b)->DrainScalars();
      ASSERT_TRUE(d.ok()) << d.status();
      for (const auto& v : *d) submitted.push_back(v.at(0));
    }
  }
  ASSERT_EQ(submitted.size(), run_losses.size());
  for (size_t k = 0; k < submitted.size(); ++k) EXPECT_EQ(submitted[k], run_losses[k]) << "step " << k;
  for (const ir::StateUpdate& u : s.step->updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    ASSERT_NE(x, nullptr);
    const ir::Tensor xa = *x;
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_NE(y, nullptr);
    EXPECT_TRUE(xa.BitwiseEquals(*y)) << u.target->name();
  }
}

TEST_F(CudaTrainingTest, StateSetBeforeTheFirstRunResumesExactly) {
  // Resuming on CUDA: a fresh executor given the state of one that ran 3 steps (SetState before
  // its first run) takes the 4th step exactly as the original does.
  Step s = MakeStep("models/mlp/model.onnx", 64, {784}, 31, /*sgd=*/false, /*multi_tensor=*/true);
  auto a = cuda::CudaExecutor::Create(*s.step);
  ASSERT_TRUE(a.ok());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE((*a)->Run(s.feeds).ok());
  auto b = cuda::CudaExecutor::Create(*s.step);
  ASSERT_TRUE(b.ok());
  for (const ir::StateUpdate& u : s.step->updates()) {
    const ir::Tensor* t = (*a)->State(u.target->name());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE((*b)->SetState(u.target->name(), *t).ok()) << u.target->name();
  }
  auto ra = (*a)->Run(s.feeds);
  auto rb = (*b)->Run(s.feeds);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "loss of the resumed step";
  for (const ir::StateUpdate& u : s.step->updates()) {
    const ir::Tensor x = *(*a)->State(u.target->name());
    EXPECT_TRUE(x.BitwiseEquals(*(*b)->State(u.target->name()))) << u.target->name();
  }
}

TEST_F(CudaTrainingTest, HundredMlpStepsFollowTheCpuLossCurve) {
  // TF32 GEMMs (10-bit mantissa) perturb each step by ~1e-3 relative; Adam's normalised updates
  // keep the trajectories close: losses agree to 2% over 100 steps.
  Step s = MakeStep("models/mlp/model.onnx", 128, {784}, 11);
  auto cpu = runtime::cpu::CpuExecutor::Create(*s.step);
  auto gpu = cuda::CudaExecutor::Create(*s.step);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  double first = 0, last = 0;
  for (int k = 0; k < 100; ++k) {
    auto c = (*cpu)->Run(s.feeds);
    auto g = (*gpu)->Run(s.feeds);
    ASSERT_TRUE(c.ok() && g.ok());
    const double lc = (*c)[0].GetAsDouble(0), lg = (*g)[0].GetAsDouble(0);
    EXPECT_NEAR(lg, lc, 0.02 * std::abs(lc) + 1e-3) << "step " << k;
    if (k == 0) first = lg;
    last = lg;
  }
  EXPECT_LT(last, 0.5 * first);  // it learns (the same batch, memorised)
}

}  // namespace
}  // namespace ottr
