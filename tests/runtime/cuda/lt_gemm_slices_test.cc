// LtGemm with k in parts (GemmConfig::slices, and kAuto's k-sliced candidates): cuBLASLt runs
// the parts as one strided-batched product into the workspace and kernels::SumKSlices adds them
// into D. Random operands, D and the workspace poisoned with NaN bytes, padded leading
// dimensions; checked against a double-precision product on the host. Skipped without a device.
//
// Bounds, per element and normwise. Per element: (c + 2·k·u)·Σ_q |a·b| with u = 2^-24 (float32
// accumulation of k terms, ×2 for the tensor cores' order and the parts' sum) and c the operands'
// conversion: 0 in float32, 2^-9 with TF32 (each operand rounded or truncated to 10 bits,
// 2^-10 relative each). Normwise, ‖D − ref‖ / ‖ref‖: 2^-8 with TF32 (the conversions' errors are
// independent, ~2^-11 relative in practice), 1e-5 in float32. A part left out, read twice or
// offset by a row moves the result by about 1/√parts of its norm: far outside either bound.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/lt_gemm.h"

namespace ottr::cuda {
namespace {

struct SliceCase {
  int64_t m, n, k;
  bool ta, tb;
  int pad;  // elements added to every leading dimension
};

float* Upload(const std::vector<float>& v) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(float), 4)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<float*>(p);
}

// Runs `sc` with `slices` forced (0: kAuto) and checks D.
void ExpectSlicedGemmMatches(CudaLibraries& libs, const SliceCase& sc, int slices, uint32_t seed) {
  SCOPED_TRACE(absl::StrCat("m", sc.m, " n", sc.n, " k", sc.k, " ta", sc.ta, " tb", sc.tb, " pad", sc.pad,
                            " slices ", slices, " tf32 ", libs.tf32()));
  GemmConfig c;
  c.trans_a = sc.ta;
  c.trans_b = sc.tb;
  c.m = sc.m;
  c.n = sc.n;
  c.k = sc.k;
  c.lda = (sc.ta ? sc.m : sc.k) + sc.pad;
  c.ldb = (sc.tb ? sc.k : sc.n) + sc.pad;
  c.ldc = sc.n + sc.pad;
  c.alpha = 0.75f;
  c.slices = slices;
  auto gemm = LtGemm::Create(libs, c);
  ASSERT_TRUE(gemm.ok()) << gemm.status();

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a((sc.ta ? sc.k : sc.m) * c.lda), b((sc.tb ? sc.n : sc.k) * c.ldb);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  float* da = Upload(a);
  float* db = Upload(b);
  float* dd = Upload(std::vector<float>(sc.m * c.ldc, std::nanf("")));
  const int64_t ws_floats = std::max<int64_t>((*gemm)->workspace_bytes() / 4, 64);
  float* workspace = Upload(std::vector<float>(ws_floats, std::nanf("")));
  ASSERT_TRUE((*gemm)->Run(da, db, dd, nullptr, nullptr, workspace, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> d(sc.m * c.ldc);
  ASSERT_EQ(cudaMemcpy(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dd),
                  static_cast<void*>(workspace)}) {
    cudaFree(p);
  }

  constexpr double kU = 1.0 / (1 << 24);
  const double conversion = libs.tf32() ? 1.0 / 512 : 0.0;
  const double normwise = libs.tf32() ? 1.0 / 256 : 1e-5;
  double err2 = 0, ref2 = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < sc.m; ++i) {
    for (int64_t j = 0; j < sc.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < sc.k; ++q) {
        const double x = a[sc.ta ? q * c.lda + i : i * c.lda + q];
        const double y = b[sc.tb ? j * c.ldb + q : q * c.ldb + j];
        s += x * y;
        mag += std::fabs(x * y);
      }
      s *= c.alpha;
      mag *= c.alpha;
      const double got = d[i * c.ldc + j];
      const double bound = (conversion + 2.0 * static_cast<double>(sc.k) * kU) * mag + 1e-30;
      if (!(std::fabs(got - s) <= bound) && bad++ < 5) {
        ADD_FAILURE() << "D[" << i << "," << j << "] = " << got << ", want " << s << " within " << bound;
      }
      err2 += (got - s) * (got - s);
      ref2 += s * s;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_LE(std::sqrt(err2 / ref2), normwise);
}

const SliceCase kCases[] = {
    {256, 200, 8192, false, false, 4},  // a first layer's weight gradient with dY written K-major
    {200, 256, 4096, true, false, 0},   // dYᵀ·X with both operands MN-major
    {96, 128, 4096, false, true, 8},    // both K-major
};

TEST(LtGemmSlicesTest, ForcedPartsMatchTheProduct) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  for (bool tf32 : {true, false}) {
    auto libs = CudaLibraries::Create(tf32);
    ASSERT_TRUE(libs.ok()) << libs.status();
    uint32_t seed = 11;
    for (const SliceCase& sc : kCases) {
      for (int slices : {2, 4, 8}) ExpectSlicedGemmMatches(**libs, sc, slices, seed++);
    }
  }
}

// kAuto on a shape whose k-sliced candidates are timed: whichever wins, D is right, and a second
// GEMM of the shape takes the cached choice (with its parts) and is right too.
TEST(LtGemmSlicesTest, AutoChoiceIsCachedAndCorrect) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto libs = CudaLibraries::Create(/*tf32=*/true);
  ASSERT_TRUE(libs.ok()) << libs.status();
  const SliceCase sc = {256, 200, 8192, false, false, 4};
  ExpectSlicedGemmMatches(**libs, sc, 0, 21);
  const int64_t misses = (*libs)->cache_misses();
  ExpectSlicedGemmMatches(**libs, sc, 0, 22);
  EXPECT_EQ((*libs)->cache_misses(), misses);
}

TEST(LtGemmSlicesTest, RefusesWhatPartsCannotRun) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device visible";
  auto libs = CudaLibraries::Create(/*tf32=*/true);
  ASSERT_TRUE(libs.ok()) << libs.status();
  GemmConfig c;
  c.m = 64;
  c.n = 64;
  c.k = 4096;
  c.slices = 3;  // 4096 / 3 is not whole
  EXPECT_FALSE(LtGemm::Create(**libs, c).ok());
  c.slices = 4;
  c.epilogue = GemmEpilogue::kBias;  // the parts' sum has no epilogue
  EXPECT_FALSE(LtGemm::Create(**libs, c).ok());
  c.epilogue = GemmEpilogue::kDefault;
  c.beta = 1.0f;
  EXPECT_FALSE(LtGemm::Create(**libs, c).ok());
  c.beta = 0.0f;
  EXPECT_TRUE(LtGemm::Create(**libs, c).ok());
}

}  // namespace
}  // namespace ottr::cuda
