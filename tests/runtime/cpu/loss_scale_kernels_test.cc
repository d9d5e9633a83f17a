// CPU reference kernels of loss scaling (runtime/cpu/ottr_training_kernels.cc) against their
// contracts written out here: ottr::AllFinite over mixed float types, ottr::LossScaleUpdate on
// each branch (torch.amp's _amp_update_scale_), and the N-ary updates' unscale (gradient times
// T(1/S)) and guard (a skipped update returns its inputs bit for bit). These are the references
// the CUDA kernels are tested against (tests/runtime/cuda/loss_scale_ops_test.cc).
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

Tensor Of(DType t, const Tensor& f32) {
  Tensor out(t, f32.dims());
  ir::VisitDType(t, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      for (int64_t i = 0; i < f32.num_elements(); ++i) out.data<T>()[i] = ir::FromDouble<T>(f32.GetAsDouble(i));
    }
  });
  return out;
}

bool AllFinite(const std::vector<Tensor>& xs) {
  auto out = RunSingleNode("AllFinite", xs, {}, 1, kOttr);
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kBool);
  return out.ok() && (*out)[0].data<bool>()[0];
}

TEST(LossScaleKernelsTest, AllFiniteOverMixedTypes) {
  std::vector<Tensor> xs;
  int seed = 1;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    xs.push_back(Of(t, RandomFloat({37}, ++seed, -1000.0f, 1000.0f)));
  }
  EXPECT_TRUE(AllFinite(xs));
  for (size_t k = 0; k < xs.size(); ++k) {
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<Tensor> ys;
      for (const Tensor& x : xs) ys.push_back(x.Clone());
      ir::VisitDType(ys[k].dtype(), [&]<typename T>() {
        if constexpr (!std::is_void_v<T>) ys[k].data<T>()[static_cast<int64_t>(17 + k)] = ir::FromDouble<T>(bad);
      });
      EXPECT_FALSE(AllFinite(ys)) << "tensor " << k << " value " << bad;
    }
  }
  // float16's largest finite value is finite; 70000 rounds to infinity in float16.
  EXPECT_TRUE(AllFinite({Of(DType::kFloat16, Tensor::FromVector<float>({1}, {65504.0f}))}));
  EXPECT_FALSE(AllFinite({Of(DType::kFloat16, Tensor::FromVector<float>({1}, {70000.0f}))}));
  EXPECT_FALSE(RunSingleNode("AllFinite", {Tensor::Scalar<int64_t>(1)}, {}, 1, kOttr).ok()) << "integer input";
}

struct ScaleOut {
  double scale;
  int64_t good;
};

ScaleOut Update(float scale, int64_t good, bool ok, int64_t interval = 4) {
  auto out = RunSingleNode("LossScaleUpdate", {Tensor::Scalar<float>(scale), Tensor::Scalar<int64_t>(good), Tensor::Scalar<bool>(ok)},
                           {{"growth_interval", Attribute(interval)}}, 2, kOttr);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {NAN, -1};
  return {(*out)[0].GetAsDouble(0), (*out)[1].GetAsInt64(0)};
}

TEST(LossScaleKernelsTest, LossScaleUpdateBranches) {
  // Overflow: halve, restart the count.
  EXPECT_EQ(Update(1024.0f, 2, false).scale, 512.0);
  EXPECT_EQ(Update(1024.0f, 2, false).good, 0);
  // A good step below the interval: count.
  EXPECT_EQ(Update(1024.0f, 2, true).scale, 1024.0);
  EXPECT_EQ(Update(1024.0f, 2, true).good, 3);
  // The interval-th good step: double, restart.
  EXPECT_EQ(Update(1024.0f, 3, true).scale, 2048.0);
  EXPECT_EQ(Update(1024.0f, 3, true).good, 0);
  // A growth that overflows float32 keeps the scale (and restarts the count, as PyTorch).
  EXPECT_EQ(Update(3e38f, 3, true).scale, static_cast<double>(3e38f));
  EXPECT_EQ(Update(3e38f, 3, true).good, 0);
  // interval 1: every good step doubles.
  EXPECT_EQ(Update(8.0f, 0, true, 1).scale, 16.0);
  EXPECT_FALSE(RunSingleNode("LossScaleUpdate", {Tensor::Scalar<float>(1), Tensor::Scalar<int64_t>(0), Tensor::Scalar<bool>(true)},
                             {{"growth_interval", Attribute(int64_t{0})}}, 2, kOttr)
                   .ok());
}

TEST(LossScaleKernelsTest, UpdateNUnscalesAndSkips) {
  // SGD without momentum: p' = p - lr · (g · T(1/S)). S = 3 is not a power of two, so T(1/S)
  // is a rounded factor: the expectation rounds it the same way.
  const Tensor p = RandomFloat({5}, 1), q = RandomFloat({3}, 2);
  const Tensor gp = RandomFloat({5}, 3, -30.0f, 30.0f), gq = RandomFloat({3}, 4, -30.0f, 30.0f);
  const float lr = 0.125f, scale = 3.0f;
  const float inv = static_cast<float>(1.0 / scale);
  for (int guard : {-1, 0, 1}) {
    SCOPED_TRACE(guard);
    std::vector<Tensor> ins = {Tensor::Scalar<float>(lr), Tensor::Scalar<int64_t>(1), p, q, gp, gq, Tensor::Scalar<float>(scale)};
    std::map<std::string, Attribute> attrs = {{"unscale", Attribute(int64_t{1})}};
    if (guard >= 0) {
      ins.push_back(Tensor::Scalar<bool>(guard == 1));
      attrs["guarded"] = Attribute(int64_t{1});
    }
    auto out = RunSingleNode("SGDUpdateN", ins, attrs, 2, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int k = 0; k < 2; ++k) {
      const Tensor& x = k == 0 ? p : q;
      const Tensor& g = k == 0 ? gp : gq;
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const float want = guard == 0 ? x.data<float>()[i] : x.data<float>()[i] - lr * (g.data<float>()[i] * inv);
        EXPECT_EQ((*out)[k].data<float>()[i], want) << "tensor " << k << " element " << i;
      }
    }
  }
  // A float guard: NaN skips, a finite value does not.
  for (float guard : {std::numeric_limits<float>::quiet_NaN(), 1.0f}) {
    auto out = RunSingleNode("SGDUpdateN", {Tensor::Scalar<float>(lr), Tensor::Scalar<int64_t>(1), p, gp, Tensor::Scalar<float>(guard)},
                             {{"guarded", Attribute(int64_t{1})}}, 1, kOttr);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].BitwiseEquals(p), std::isnan(guard));
  }
  // The scale must be a float scalar.
  EXPECT_FALSE(RunSingleNode("SGDUpdateN", {Tensor::Scalar<float>(lr), Tensor::Scalar<int64_t>(1), p, gp, Tensor::Scalar<int64_t>(2)},
                             {{"unscale", Attribute(int64_t{1})}}, 1, kOttr)
                   .ok());
}

}  // namespace
}  // namespace ottr::testing
