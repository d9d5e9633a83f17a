// ottr's small TF32 GEMM (runtime/cuda/kernels/small_gemm.h), forced through LtGemm in every
// configuration (tile, chunk depth of K) that fits, against a double-precision reference of the same
// TF32-rounded operands. Outputs, masks and bias gradients are poisoned (NaN bytes) before the
// kernel runs. Skipped without a device.
//
// Bound: the kernel rounds A and B to TF32 (cvt.rna: nearest, ties away) and the reference rounds
// them the same way, so products agree exactly (two 11-bit significands fit float32) and only the
// float32 accumulation differs: at most K·u·Σ_k|a·b| (u = 2^-24, recursive summation of K terms;
// ×2 for tensor-core accumulation that may truncate) plus one rounding of the epilogue's sum. An
// indexing or layout mistake, or operands not rounded to TF32 (error ~2^-11 relative per term),
// is far outside it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/fused_gemm.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/kernels/small_gemm.h"
#include "runtime/cuda/lt_gemm.h"

namespace ottr::cuda {
namespace {

// The TF32 value of x as cvt.rna.tf32.f32 makes it (finite x).
float RoundToTf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & ~0x1fffu;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
  GemmEpilogue epilogue;
};

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(T), 4)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> HostCopy(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Runs `gc` in configuration `config` (-1: whichever kernel LtGemm chooses, kAuto) and checks D,
// the mask and the bias gradient. Leading dimensions are padded by `pad` elements: 3 leaves rows
// unaligned (the kernel's scalar path), 4 keeps them on 16 bytes (its cp.async vector path).
void ExpectConfigMatches(CudaLibraries& libs, const GemmCase& gc, int config, uint32_t seed, int pad = 4) {
  SCOPED_TRACE(absl::StrCat("m", gc.m, " n", gc.n, " k", gc.k, " ta", gc.ta, " tb", gc.tb, " epilogue ",
                            static_cast<int>(gc.epilogue), " config ", config, " pad ", pad));
  GemmConfig c;
  c.trans_a = gc.ta;
  c.trans_b = gc.tb;
  c.m = gc.m;
  c.n = gc.n;
  c.k = gc.k;
  c.lda = (gc.ta ? gc.m : gc.k) + pad;
  c.ldb = (gc.tb ? gc.k : gc.n) + pad;
  c.ldc = gc.n + pad;
  c.alpha = 0.75f;
  c.epilogue = gc.epilogue;
  const bool relu_fwd = gc.epilogue == GemmEpilogue::kReluBias || gc.epilogue == GemmEpilogue::kReluAuxBias;
  const bool bias_in = relu_fwd || gc.epilogue == GemmEpilogue::kBias;
  const bool mask_out = gc.epilogue == GemmEpilogue::kReluAuxBias;
  const bool mask_in = gc.epilogue == GemmEpilogue::kDRelu || gc.epilogue == GemmEpilogue::kDReluBgrad;
  const bool bgrad = gc.epilogue == GemmEpilogue::kDReluBgrad;
  // kBgradB in LtGemm's (cuBLASLt's) terms: the sums of our op(A) over K, [M].
  const bool bgrad_a = gc.epilogue == GemmEpilogue::kBgradB;
  const int64_t mask_row = ir::ReluMaskRowBytes(gc.n);
  if (mask_out || mask_in) c.aux_ld = mask_row * 8;
  if (config >= 0) {
    c.kernel = GemmConfig::Kernel::kOttr;
    c.ottr_config = config;
  }
  auto gemm = LtGemm::Create(libs, c);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  if (config >= 0) {
    ASSERT_EQ((*gemm)->ottr_config(), config);
  }
  // cuBLASLt (when kAuto chose it) may convert to TF32 another way: then each product may differ
  // by its two operands' TF32 roundings, 2^-10 relative.
  const double conversion = (*gemm)->ottr_config() >= 0 ? 0.0 : 1.0 / 1024;

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a((gc.ta ? gc.k : gc.m) * c.lda), b((gc.tb ? gc.n : gc.k) * c.ldb), bias(gc.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  for (float& x : bias) x = u(rng);
  std::vector<uint8_t> mask(gc.m * mask_row);
  for (uint8_t& x : mask) x = static_cast<uint8_t>(rng());
  float* da = DeviceCopy(a);
  float* db = DeviceCopy(b);
  float* dbias = DeviceCopy(bias);
  // Poison: NaN bytes in D (and the padding between its rows), the mask written, the bias gradient.
  float* dd = DeviceCopy(std::vector<float>(gc.m * c.ldc, std::nanf("")));
  uint8_t* dmask = DeviceCopy(mask_out ? std::vector<uint8_t>(mask.size(), 0xa5) : mask);
  const int64_t grad_len = bgrad_a ? gc.m : gc.n;
  float* dgrad = DeviceCopy(std::vector<float>(grad_len, std::nanf("")));
  void* workspace = nullptr;  // cuBLASLt's, when kAuto chose it
  ASSERT_EQ(cudaMalloc(&workspace, std::max<int64_t>((*gemm)->workspace_bytes(), 256)), cudaSuccess);
  const void* bias_arg = bias_in ? static_cast<const void*>(dbias) : (bgrad || bgrad_a) ? dgrad : nullptr;
  ASSERT_TRUE((*gemm)->Run(da, db, dd, bias_arg, (mask_out || mask_in) ? dmask : nullptr, workspace, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> d = HostCopy(dd, gc.m * c.ldc);
  const std::vector<uint8_t> got_mask = HostCopy(dmask, mask.size());
  const std::vector<float> grad = HostCopy(dgrad, grad_len);

  constexpr double kU = 1.0 / (1 << 24);
  std::vector<double> want(gc.m * gc.n), bound(gc.m * gc.n);
  int64_t bad = 0, bad_mask = 0;
  for (int64_t i = 0; i < gc.m; ++i) {
    for (int64_t j = 0; j < gc.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < gc.k; ++q) {
        const double x = RoundToTf32(gc.ta ? a[q * c.lda + i] : a[i * c.lda + q]);
        const double y = RoundToTf32(gc.tb ? b[j * c.ldb + q] : b[q * c.ldb + j]);
        s += x * y;
        mag += std::abs(x * y);
      }
      double v = c.alpha * s;
      double err = c.alpha * (2.0 * gc.k * kU + conversion) * mag;
      if (bias_in) v += bias[j];
      err += 2 * kU * (std::abs(v) + (bias_in ? std::abs(bias[j]) : 0.0));
      if (mask_out) {
        const int bit = (got_mask[i * mask_row + j / 8] >> (j % 8)) & 1;
        if (std::abs(v) > err && bit != (v > 0 ? 1 : 0)) ++bad_mask;
      }
      if (relu_fwd && v < 0) v = 0;
      if (mask_in && ((mask[i * mask_row + j / 8] >> (j % 8)) & 1) == 0) v = 0, err = 0;
      want[i * gc.n + j] = v;
      bound[i * gc.n + j] = err;
      const float g = d[i * c.ldc + j];
      if (!(std::abs(g - v) <= err)) {
        if (bad++ < 5) ADD_FAILURE() << "D[" << i << ", " << j << "] = " << g << ", want " << v << " ± " << err;
      }
    }
    for (int64_t j = gc.n; j < c.ldc; ++j) {
      if (!std::isnan(d[i * c.ldc + j])) ++bad;  // the padding between rows is not written
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_mask, 0);
  if (bgrad) {
    for (int64_t j = 0; j < gc.n; ++j) {
      double s = 0, err = 0, mag = 0;
      for (int64_t i = 0; i < gc.m; ++i) {
        s += want[i * gc.n + j];
        err += bound[i * gc.n + j];
        mag += std::abs(want[i * gc.n + j]);
      }
      err += 2.0 * gc.m * kU * mag;
      EXPECT_LE(std::abs(grad[j] - s), err) << "bias gradient " << j;
    }
  }
  if (bgrad_a) {  // float32 sums of A's values (not TF32), any order: 2·K·u·Σ|a|
    for (int64_t i = 0; i < gc.m; ++i) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < gc.k; ++q) {
        const double x = gc.ta ? a[q * c.lda + i] : a[i * c.lda + q];
        s += x;
        mag += std::abs(x);
      }
      EXPECT_LE(std::abs(grad[i] - s), 2.0 * gc.k * kU * mag) << "bias gradient " << i;
    }
  }
  // With counters (as the executor gives them: zero, its own), the last row tile of each column
  // strip adds the partial bias gradients in the same launch: the same bits as the second kernel,
  // whichever tile is last, run after run, and the counters left zero for the next run.
  const int64_t counter_bytes = (*gemm)->counter_bytes();
  if (bgrad && (*gemm)->ottr_config() >= 0 && counter_bytes > 0) {
    void* counters = DeviceCopy(std::vector<uint8_t>(counter_bytes, 0));
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE(absl::StrCat("with counters, run ", run));
      ASSERT_EQ(cudaMemcpy(dgrad, std::vector<float>(gc.n, std::nanf("")).data(), gc.n * sizeof(float),
                           cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_TRUE((*gemm)->Run(da, db, dd, dgrad, dmask, workspace, nullptr, counters).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> again = HostCopy(dgrad, gc.n);
      EXPECT_EQ(std::memcmp(again.data(), grad.data(), gc.n * sizeof(float)), 0) << "bias gradient differs";
      for (uint8_t x : HostCopy(static_cast<uint8_t*>(counters), counter_bytes)) ASSERT_EQ(x, 0) << "counter left set";
    }
    cudaFree(counters);
  } else if (bgrad && (*gemm)->ottr_config() >= 0) {
    int bm = 0, bn = 0, bk = 0;
    kernels::SmallGemmConfigShape((*gemm)->ottr_config(), &bm, &bn, &bk);
    EXPECT_GE(bm, gc.m) << "a tile shorter than M needs counters";
  }
  for (void* p : std::initializer_list<void*>{da, db, dbias, dd, dmask, dgrad, workspace}) cudaFree(p);
}

bool Fits(int config, const GemmCase& gc) {
  kernels::SmallGemmArgs p;
  p.m = gc.m;
  p.n = gc.n;
  p.k = gc.k;
  p.trans_a = gc.ta;
  p.trans_b = gc.tb;
  p.epilogue = gc.epilogue == GemmEpilogue::kDReluBgrad ? kernels::SmallGemmEpilogue::kDReluBgrad
               : gc.epilogue == GemmEpilogue::kBgradB   ? kernels::SmallGemmEpilogue::kBgradA
                                                        : kernels::SmallGemmEpilogue::kNone;
  static float workspace;  // LtGemm hands every configuration its workspace (partial bias gradients)
  p.bias_grad_partial = &workspace;
  return kernels::SmallGemmConfigFits(config, p);
}

TEST(SmallGemmTest, EveryTileMatchesTheTf32Reference) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto libs = CudaLibraries::Create(/*tf32=*/true);
  ASSERT_TRUE(libs.ok()) << libs.status();
  using E = GemmEpilogue;
  // The small MLP's GEMMs at batch 128 (forward, data and weight gradients; fc3 padded to 12; its
  // weight gradient with the bias gradient, kBgradB: cuBLASLt's B is our A) and odd shapes: edges
  // in M, N and K that no tile divides, every pair of transposes.
  const std::vector<GemmCase> cases = {
      {128, 512, 784, false, true, E::kReluAuxBias}, {128, 12, 512, false, true, E::kBias},
      {128, 512, 12, false, false, E::kDReluBgrad},  {128, 512, 512, false, false, E::kDRelu},
      {512, 784, 128, true, false, E::kDefault},     {37, 50, 29, true, true, E::kBias},
      {100, 20, 70, false, true, E::kReluBias},      {61, 300, 33, true, false, E::kReluAuxBias},
      {90, 45, 17, false, false, E::kDReluBgrad},    {5, 130, 200, true, true, E::kDRelu},
      {33, 17, 1, false, false, E::kDefault},       {12, 512, 128, true, false, E::kBgradB},
      {10, 300, 77, false, true, E::kBgradB},        {70, 40, 1000, true, true, E::kBgradB}};
  uint32_t seed = 1;
  for (const GemmCase& gc : cases) {
    int ran = 0;
    for (int t = 0; t < kernels::SmallGemmConfigCount(); ++t) {
      if (!Fits(t, gc)) continue;
      ExpectConfigMatches(**libs, gc, t, seed++);
      ++ran;
    }
    EXPECT_GT(ran, 0);
  }
}

// kAuto on a shape the kernel is eligible for: whichever kernel wins, the result is right, and a
// second GEMM of the same shape reuses the choice.
TEST(SmallGemmTest, AutoChoiceIsCachedAndCorrect) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto libs = CudaLibraries::Create(/*tf32=*/true);
  ASSERT_TRUE(libs.ok()) << libs.status();
  const GemmCase gc = {128, 512, 784, false, true, GemmEpilogue::kReluAuxBias};
  ExpectConfigMatches(**libs, gc, -1, 77);
  const int64_t misses = (*libs)->cache_misses();
  ExpectConfigMatches(**libs, gc, -1, 78);
  EXPECT_EQ((*libs)->cache_misses(), misses);
}

TEST(SmallGemmTest, ForcedKernelRefusesWhatItCannotRun) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto libs = CudaLibraries::Create(/*tf32=*/true);
  ASSERT_TRUE(libs.ok()) << libs.status();
  GemmConfig c;
  c.m = c.n = c.k = 64;
  c.kernel = GemmConfig::Kernel::kOttr;
  c.epilogue = GemmEpilogue::kBgradA;  // not one of its epilogues
  EXPECT_FALSE(LtGemm::Create(**libs, c).ok());
  c.epilogue = GemmEpilogue::kDefault;
  c.beta = 1.0f;  // accumulating into D is cuBLASLt's
  EXPECT_FALSE(LtGemm::Create(**libs, c).ok());
  c.beta = 0.0f;
  auto no_tf32 = CudaLibraries::Create(/*tf32=*/false);
  ASSERT_TRUE(no_tf32.ok());
  EXPECT_FALSE(LtGemm::Create(**no_tf32, c).ok());  // --no-tf32 keeps float32 GEMMs exact
  EXPECT_TRUE(LtGemm::Create(**libs, c).ok());
}

}  // namespace
}  // namespace ottr::cuda
