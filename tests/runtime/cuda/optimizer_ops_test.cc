// Tests of the CUDA optimizer ops (runtime/cuda/optimizer_ops.cc, kernels/optimizer_kernels.cu)
// against the CPU reference: ottr::AdamUpdate / SGDUpdate must match it bit for bit in float32
// (same operation order, no fused multiply-add), the ai.onnx.preview.training optimizers to
// rounding. Also the multi-tensor launchers with a device table. Skipped without a device.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"

#ifdef OTTR_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda/kernels/optimizer_kernels.h"
#endif

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);
const std::string kTraining(ir::kTrainingDomain);

TEST(CudaOptimizerOpsTest, AdamUpdateMatchesCpuBitwise) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 1;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{8192 * 3 + 5}}) {
      for (int64_t step : {int64_t{1}, int64_t{2}, int64_t{1000}}) {
        for (int variant = 0; variant < 3; ++variant) {
          SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " n ", n, " step ", step, " variant ", variant));
          const Tensor p = RandomOf(t, {n}, ++seed);
          const Tensor g = RandomOf(t, {n}, ++seed);
          const Tensor m = RandomOf(t, {n}, ++seed, -0.1, 0.1);
          const Tensor v = RandomOf(t, {n}, ++seed, 0.0, 0.01);
          Attrs attrs = {{"beta1", Attribute(0.85f)}, {"beta2", Attribute(0.995f)}, {"epsilon", Attribute(1e-7f)}};
          if (variant > 0) attrs["weight_decay"] = Attribute(0.01f);
          if (variant == 2) attrs["decoupled"] = Attribute(int64_t{1});
          Case c{"AdamUpdate",
                 {In(p), In(g), In(ScalarOf<float>(1e-3f)), In(ScalarOf<int64_t>(step)), In(m), In(v)},
                 attrs,
                 3,
                 kOttr};
          c.rtol = t == DType::kFloat32 ? 1e-7 : 1e-15;  // pow() may differ in the last bit
          c.atol = 0.0;
          ExpectMatchesCpu(c);
        }
      }
    }
  }
}

TEST(CudaOptimizerOpsTest, SgdUpdateMatchesCpuBitwise) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 100;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : {int64_t{3}, int64_t{10000}}) {
      for (int64_t step : {int64_t{1}, int64_t{5}}) {
        for (int variant = 0; variant < 4; ++variant) {
          SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " n ", n, " step ", step, " variant ", variant));
          const Tensor p = RandomOf(t, {n}, ++seed);
          const Tensor g = RandomOf(t, {n}, ++seed);
          const Tensor buf = RandomOf(t, {n}, ++seed);
          Attrs attrs = {{"momentum", Attribute(0.9f)}, {"dampening", Attribute(variant == 3 ? 0.1f : 0.0f)}};
          if (variant >= 1) attrs["weight_decay"] = Attribute(1e-2f);
          if (variant == 2) attrs["nesterov"] = Attribute(int64_t{1});
          std::vector<Input> ins = {In(p), In(g), In(ScalarOf<float>(0.05f)), In(ScalarOf<int64_t>(step))};
          Case plain{"SGDUpdate", ins, attrs, 1, kOttr};
          plain.rtol = plain.atol = 0.0;
          ExpectMatchesCpu(plain);
          ins.push_back(In(buf));
          Case momentum{"SGDUpdate", ins, attrs, 2, kOttr};
          momentum.rtol = momentum.atol = 0.0;
          ExpectMatchesCpu(momentum);
        }
      }
    }
  }
}

// ai.onnx.preview.training optimizers over two tensors of different sizes.
TEST(CudaOptimizerOpsTest, OnnxTrainingOptimizersMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 300;
  const Tensor x1 = RandomOf(DType::kFloat32, {3, 5}, ++seed), x2 = RandomOf(DType::kFloat32, {9000}, ++seed);
  const Tensor g1 = RandomOf(DType::kFloat32, {3, 5}, ++seed), g2 = RandomOf(DType::kFloat32, {9000}, ++seed);
  const Tensor s1 = RandomOf(DType::kFloat32, {3, 5}, ++seed, 0.0, 1.0), s2 = RandomOf(DType::kFloat32, {9000}, ++seed, 0.0, 1.0);
  const Tensor h1 = RandomOf(DType::kFloat32, {3, 5}, ++seed, 0.0, 1.0), h2 = RandomOf(DType::kFloat32, {9000}, ++seed, 0.0, 1.0);
  for (int64_t step : {int64_t{0}, int64_t{3}}) {
    const Input r = In(ScalarOf<float>(0.1f));
    const Input tt = In(ScalarOf<int64_t>(step));
    Case adam{"Adam",
              {r, tt, In(x1), In(x2), In(g1), In(g2), In(s1), In(s2), In(h1), In(h2)},
              {{"norm_coefficient", Attribute(0.01f)}, {"norm_coefficient_post", Attribute(0.02f)}},
              6,
              kTraining};
    ExpectMatchesCpu(adam);
    Case adagrad{"Adagrad",
                 {r, tt, In(x1), In(x2), In(g1), In(g2), In(h1), In(h2)},
                 {{"decay_factor", Attribute(0.1f)}, {"norm_coefficient", Attribute(0.01f)}},
                 4,
                 kTraining};
    ExpectMatchesCpu(adagrad);
    for (const char* mode : {"standard", "nesterov"}) {
      Case momentum{"Momentum",
                    {r, tt, In(x1), In(x2), In(g1), In(g2), In(s1), In(s2)},
                    {{"alpha", Attribute(0.9f)},
                     {"beta", Attribute(0.5f)},
                     {"norm_coefficient", Attribute(0.01f)},
                     {"mode", Attribute(std::string(mode))}},
                    4,
                    kTraining};
      ExpectMatchesCpu(momentum);
    }
  }
}

#ifdef OTTR_HAVE_CUDA
// The multi-tensor launcher with a device table updates every tensor exactly like one
// single-tensor launch per tensor (and so like the CPU reference), and like one packed launch of
// all six (the table passed by value).
TEST(CudaOptimizerOpsTest, MultiTensorAdamMatchesSingleTensor) {
  OTTR_REQUIRE_CUDA_DEVICE();
  using cuda::kernels::MultiTensorEntry;
  const std::vector<int64_t> sizes = {1, 5, 8192, 8193, 100000, 3};
  std::vector<std::vector<float>> host(4 * sizes.size());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (size_t k = 0; k < host.size(); ++k) {
    host[k].resize(sizes[k / 4]);
    for (float& x : host[k]) x = (k % 4 == 3) ? std::fabs(uni(rng)) * 0.01f : uni(rng);
  }
  // Three copies of every buffer: the table launch (in place), per-tensor launches, one packed launch.
  std::vector<void*> dev_a(host.size()), dev_b(host.size()), dev_c(host.size());
  for (size_t k = 0; k < host.size(); ++k) {
    for (void** d : {&dev_a[k], &dev_b[k], &dev_c[k]}) {
      ASSERT_EQ(cudaMalloc(d, host[k].size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(*d, host[k].data(), host[k].size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  const float lr = 1e-3f;
  const int64_t step = 7;
  void *d_lr, *d_step;
  ASSERT_EQ(cudaMalloc(&d_lr, 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_step, 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_lr, &lr, 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_step, &step, 8, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::kernels::OptimizerScalars s;
  s.lr = d_lr;
  s.step = d_step;
  cuda::kernels::AdamHyper h;
  h.weight_decay = 0.01f;
  h.decoupled = true;
  auto entry = [&](const std::vector<void*>& d, size_t i) {
    MultiTensorEntry e;
    e.param = d[4 * i];
    e.grad = d[4 * i + 1];
    e.state0 = d[4 * i + 2];
    e.state1 = d[4 * i + 3];
    e.param_out = d[4 * i];
    e.state0_out = d[4 * i + 2];
    e.state1_out = d[4 * i + 3];
    e.numel = sizes[i];
    return e;
  };
  std::vector<MultiTensorEntry> table;
  for (size_t i = 0; i < sizes.size(); ++i) table.push_back(entry(dev_a, i));
  const int64_t chunks = cuda::kernels::FillChunkOffsets(table.data(), static_cast<int>(table.size()));
  void* d_table;
  ASSERT_EQ(cudaMalloc(&d_table, table.size() * sizeof(MultiTensorEntry)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_table, table.data(), table.size() * sizeof(MultiTensorEntry), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cuda::kernels::LaunchMultiTensorAdam(static_cast<MultiTensorEntry*>(d_table), static_cast<int>(table.size()),
                                                 chunks, 1, h, s, nullptr),
            cudaSuccess);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const MultiTensorEntry e = entry(dev_b, i);
    ASSERT_EQ(cuda::kernels::LaunchPackedAdam(&e, 1, 1, h, s, nullptr), cudaSuccess);
  }
  std::vector<MultiTensorEntry> packed;
  for (size_t i = 0; i < sizes.size(); ++i) packed.push_back(entry(dev_c, i));
  ASSERT_EQ(cuda::kernels::LaunchPackedAdam(packed.data(), static_cast<int>(packed.size()), 1, h, s, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t k = 0; k < host.size(); ++k) {
    std::vector<float> a(host[k].size()), b(host[k].size()), c(host[k].size());
    ASSERT_EQ(cudaMemcpy(a.data(), dev_a[k], a.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.data(), dev_b[k], b.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(c.data(), dev_c[k], c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "buffer " << k;
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "buffer " << k << ", packed launch";
    if (k % 4 == 0) {
      EXPECT_NE(std::memcmp(a.data(), host[k].data(), a.size() * 4), 0) << "param " << k / 4 << " unchanged";
    }
  }
  for (size_t k = 0; k < host.size(); ++k) {
    cudaFree(dev_a[k]);
    cudaFree(dev_b[k]);
    cudaFree(dev_c[k]);
  }
  cudaFree(d_lr);
  cudaFree(d_step);
  cudaFree(d_table);
}
#endif

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
