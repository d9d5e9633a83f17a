// GFLOP/s of the CPU GEMM (runtime/cpu/gemm.h) on the shapes of the Fashion-MNIST MLP
// 784-512-512-10 at batch 128 (forward, dX and dW of each layer) and a few square sizes, with one
// thread and with all of them. The "GFLOP" counter is printed as a rate, i.e. GFLOP/s (wall-clock
// time).
//
//   build/bench/ottr_gemm_bench [--benchmark_filter=REGEX]
//
// Shape names read m x n x k and the layout: nn = A * B, nt = A * B^T (a Linear layer's forward
// with W stored [out, in]), tn = A^T * B (its weight gradient dW = X^T * dY).
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "runtime/cpu/gemm.h"

namespace {

using ottr::runtime::cpu::Gemm;

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool ta, tb;
};

constexpr Shape kShapes[] = {
    // Forward: X [128,784] * W1^T -> [128,512]; then 512 -> 512 and 512 -> 10.
    {"fc1_fwd", 128, 512, 784, false, true},
    {"fc1_fwd", 128, 512, 784, false, false},
    {"fc2_fwd", 128, 512, 512, false, true},
    {"fc3_fwd", 128, 10, 512, false, true},
    // Backward, input gradients dX = dY * W.
    {"fc3_dx", 128, 512, 10, false, false},
    {"fc2_dx", 128, 512, 512, false, false},
    {"fc1_dx", 128, 784, 512, false, false},
    // Backward, weight gradients dW = X^T * dY ([in, out] layout) or dY^T * X ([out, in]).
    {"fc1_dw", 784, 512, 128, true, false},
    {"fc1_dw", 512, 784, 128, true, false},
    {"fc2_dw", 512, 512, 128, true, false},
    {"fc3_dw", 512, 10, 128, true, false},
    // Square references.
    {"square", 256, 256, 256, false, false},
    {"square", 1024, 1024, 1024, false, false},
};

template <typename T>
void BM_Gemm(benchmark::State& state, Shape s, int threads) {
  ottr::runtime::cpu::SetGemmMaxThreads(threads);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
  for (T& x : a) x = static_cast<T>(dist(rng));
  for (T& x : b) x = static_cast<T>(dist(rng));
  const int64_t lda = s.ta ? s.m : s.k;
  const int64_t ldb = s.tb ? s.k : s.n;
  for (auto _ : state) {
    Gemm(s.ta, s.tb, s.m, s.n, s.k, T(1), a.data(), lda, b.data(), ldb, T(0), c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ottr::runtime::cpu::GemmKernelName(sizeof(T) == 8));
  ottr::runtime::cpu::SetGemmMaxThreads(0);
}

}  // namespace

int main(int argc, char** argv) {
  const int all = ottr::runtime::cpu::GemmMaxThreads();
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  for (const Shape& s : kShapes) {
    for (int threads : thread_counts) {
      const std::string layout = absl::StrCat(s.ta ? "t" : "n", s.tb ? "t" : "n");
      const std::string name = absl::StrCat("f32/", s.name, "/", s.m, "x", s.n, "x", s.k, "_",
                                            layout, "/threads:", threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemm<float>, s, threads)->UseRealTime();
    }
  }
  for (int threads : thread_counts) {
    const Shape s = {"square", 512, 512, 512, false, false};
    benchmark::RegisterBenchmark(
        absl::StrCat("f64/square/512x512x512_nn/threads:", threads).c_str(), BM_Gemm<double>, s,
        threads)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
