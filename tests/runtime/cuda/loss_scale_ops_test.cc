// CUDA ops of loss scaling and the nan-guard against the CPU reference, on random inputs, with
// the CUDA arena poisoned (NaN bytes) before the run so an unwritten output shows up
// (norm_loss_cuda_test_util.h):
//   - ottr::AdamUpdateN / SGDUpdateN with unscale = 1 (gradients times T(1/S)) and a guard, bool
//     or float, that passes (the update runs) or trips (outputs equal inputs). Float32 must match
//     bit for bit: the same operations in the same order, no fused multiply-add; Adam's bias
//     corrections use pow(), which may differ in the last bit between libm and CUDA (rtol 1e-7,
//     as the existing AdamUpdate test), SGD has no pow (rtol 0). A skipped update is a copy: exact.
//   - ottr::AllFinite over many tensors of every float type (more than one launch's worth),
//     with a NaN or an infinity planted at random places: exact (a bool).
//   - ottr::LossScaleUpdate on each branch (backoff, count, growth, growth that overflows): exact
//     (products of powers of two, and the same double-then-round as the CPU).
#include <cmath>
#include <limits>
#include <random>
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

// Tensor sizes of one group: below, at and across a chunk (2048) and a vector (4) boundary.
const std::vector<int64_t> kSizes = {7, 2048, 5000, 1};

enum class Guard { kNone, kBoolTrue, kBoolFalse, kFloatFinite, kFloatNan };

Input GuardInput(Guard g) {
  switch (g) {
    case Guard::kBoolTrue: return In(ScalarOf<bool>(true));
    case Guard::kBoolFalse: return In(ScalarOf<bool>(false));
    case Guard::kFloatFinite: return In(ScalarOf<float>(2.5f));
    case Guard::kFloatNan: return In(ScalarOf<float>(std::numeric_limits<float>::quiet_NaN()));
    case Guard::kNone: break;
  }
  return Omitted();
}

const char* GuardName(Guard g) {
  switch (g) {
    case Guard::kNone: return "none";
    case Guard::kBoolTrue: return "bool true";
    case Guard::kBoolFalse: return "bool false";
    case Guard::kFloatFinite: return "float finite";
    case Guard::kFloatNan: return "float NaN";
  }
  return "?";
}

TEST(CudaLossScaleOpsTest, AdamUpdateNUnscaledAndGuardedMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 1000;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (bool unscale : {false, true}) {
      for (Guard guard : {Guard::kNone, Guard::kBoolTrue, Guard::kBoolFalse, Guard::kFloatFinite, Guard::kFloatNan}) {
        if (!unscale && guard == Guard::kNone) continue;  // the plain form has its own tests
        SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), unscale ? " unscale" : "", " guard ", GuardName(guard)));
        const int n = static_cast<int>(kSizes.size());
        std::vector<Input> ins = {In(ScalarOf<float>(1e-3f)), In(ScalarOf<int64_t>(3))};
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed)));
        // Scaled gradients: about S times a true gradient of magnitude 1.
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed, unscale ? -4096.0 : -1.0, unscale ? 4096.0 : 1.0)));
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed, -0.1, 0.1)));
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed, 0.0, 0.01)));
        Attrs attrs = {{"beta1", Attribute(0.9f)}, {"beta2", Attribute(0.999f)}, {"epsilon", Attribute(1e-8f)},
                       {"weight_decay", Attribute(0.01f)}, {"decoupled", Attribute(int64_t{1})}};
        if (unscale) {
          ins.push_back(In(ScalarOf<float>(4096.0f)));
          attrs["unscale"] = Attribute(int64_t{1});
        }
        if (guard != Guard::kNone) {
          ins.push_back(GuardInput(guard));
          attrs["guarded"] = Attribute(int64_t{1});
        }
        Case c{"AdamUpdateN", ins, attrs, 3 * n, kOttr};
        c.rtol = t == DType::kFloat32 ? 1e-7 : 1e-15;
        c.atol = 0.0;
        ExpectMatchesCpu(c);
      }
    }
  }
}

TEST(CudaLossScaleOpsTest, SgdUpdateNUnscaledAndGuardedMatchesCpuBitwise) {
  OTTR_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 2000;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    for (bool momentum : {false, true}) {
      for (Guard guard : {Guard::kBoolTrue, Guard::kBoolFalse, Guard::kFloatNan}) {
        SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), momentum ? " momentum" : "", " guard ", GuardName(guard)));
        const int n = static_cast<int>(kSizes.size());
        std::vector<Input> ins = {In(ScalarOf<float>(0.05f)), In(ScalarOf<int64_t>(4))};
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed)));
        for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed, -300.0, 300.0)));
        if (momentum) {
          for (int64_t s : kSizes) ins.push_back(In(RandomOf(t, {s}, ++seed)));
        }
        // A scale that is not a power of two: T(1/S) is then a rounded factor both sides share.
        ins.push_back(In(ScalarOf<float>(300.0f)));
        ins.push_back(GuardInput(guard));
        Attrs attrs = {{"momentum", Attribute(momentum ? 0.9f : 0.0f)}, {"weight_decay", Attribute(1e-2f)},
                       {"unscale", Attribute(int64_t{1})}, {"guarded", Attribute(int64_t{1})}};
        Case c{"SGDUpdateN", ins, attrs, (momentum ? 2 : 1) * n, kOttr};
        c.rtol = c.atol = 0.0;
        ExpectMatchesCpu(c);
      }
    }
  }
}

Tensor PoisonAt(Tensor t, uint64_t seed, double value) {
  std::mt19937_64 rng(seed);
  const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(t.num_elements()));
  ir::VisitDType(t.dtype(), [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) t.data<T>()[i] = ir::FromDouble<T>(value);
  });
  return t;
}

TEST(CudaLossScaleOpsTest, AllFiniteMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  const double kInf = std::numeric_limits<double>::infinity();
  const double kNan = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 3000;
  // 70 tensors: two launches (64 per launch), sizes 1..~9000.
  for (int planted : {-1, 0, 5, 63, 64, 69}) {
    for (double bad : {kInf, -kInf, kNan}) {
      if (planted < 0 && bad != kInf) continue;
      SCOPED_TRACE(absl::StrCat("non-finite in tensor ", planted, " value ", bad));
      std::vector<Input> ins;
      std::mt19937_64 rng(++seed);
      for (int k = 0; k < 70; ++k) {
        const int64_t size = 1 + static_cast<int64_t>(rng() % 9000);
        Tensor x = RandomOf(types[k % types.size()], {size}, ++seed, -1000.0, 1000.0);
        if (k == planted) x = PoisonAt(std::move(x), ++seed, bad);
        ins.push_back(In(std::move(x)));
      }
      Case c{"AllFinite", ins, {}, 1, kOttr};
      c.rtol = c.atol = 0.0;
      ExpectMatchesCpu(c);
      auto got = RunCuda(c, 1);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ((*got)[0][0].data<bool>()[0], planted < 0);
    }
  }
}

TEST(CudaLossScaleOpsTest, LossScaleUpdateMatchesCpuOnEveryBranch) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct Branch {
    float scale;
    int64_t good;
    bool ok;
    const char* what;
  };
  for (const Branch& b : {Branch{65536.0f, 0, false, "overflow: backoff"}, Branch{65536.0f, 3, true, "count"},
                          Branch{65536.0f, 4, true, "growth at the interval"},
                          Branch{3e38f, 4, true, "growth would overflow float32: kept"},
                          Branch{1.5f, 10, false, "backoff resets the count"}}) {
    SCOPED_TRACE(b.what);
    Case c{"LossScaleUpdate",
           {In(ScalarOf<float>(b.scale)), In(ScalarOf<int64_t>(b.good)), In(ScalarOf<bool>(b.ok))},
           {{"growth_interval", Attribute(int64_t{5})}, {"growth_factor", Attribute(2.0f)},
            {"backoff_factor", Attribute(0.5f)}},
           2,
           kOttr};
    c.rtol = c.atol = 0.0;
    ExpectMatchesCpu(c);
  }
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
