// The CPU reference of ottr::FusedGemm (runtime/cpu/fused_gemm_kernels.cc) against a naive
// double-precision evaluation of the contract in ir/fused_gemm.h, for every epilogue, both
// transposes and sizes whose ReLU mask rows have padding (N not a multiple of 128) or not.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/fused_gemm.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using ir::FusedEpilogue;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

double GeluTanh(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double GeluTanhDeriv(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

struct Shape {
  int64_t m, n, k;
  bool ta, tb;
};

void Check(FusedEpilogue e, const Shape& s) {
  SCOPED_TRACE(absl::StrCat(ir::FusedEpilogueName(e), " m", s.m, " n", s.n, " k", s.k, " ta", s.ta, " tb", s.tb));
  const Tensor a = testing::RandomFloat(s.ta ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k}, 1);
  const Tensor b = testing::RandomFloat(s.tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n}, 2);
  const Tensor bias = testing::RandomFloat({s.n}, 3);
  const Tensor pre = testing::RandomFloat({s.m, s.n}, 4, -3.0f, 3.0f);
  const int64_t row = ir::ReluMaskRowBytes(s.n);
  Tensor mask(ir::DType::kUInt8, {s.m, row});
  const Tensor bits = testing::RandomInt64({s.m, s.n}, 5, 0, 1);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      if (bits.data<int64_t>()[i * s.n + j]) mask.data<uint8_t>()[i * row + j / 8] |= uint8_t(1u << (j % 8));
    }
  }
  std::vector<Tensor> inputs = {a, b};
  if (ir::EpilogueTakesBias(e)) inputs.push_back(bias);
  if (ir::EpilogueTakesAux(e)) {
    inputs.push_back(Tensor());
    inputs.push_back(ir::EpilogueIsRelu(e) ? mask : pre);
  }
  std::map<std::string, ir::Attribute> attrs = {{"epilogue", ir::Attribute(ir::FusedEpilogueName(e))},
                                                {"alpha", ir::Attribute(0.5f)}};
  if (s.ta) attrs["transA"] = ir::Attribute(int64_t{1});
  if (s.tb) attrs["transB"] = ir::Attribute(int64_t{1});
  const int outs = ir::EpilogueWritesAux(e) || ir::EpilogueWritesBiasGrad(e) ? 2 : 1;
  auto got = testing::RunSingleNode(ir::kFusedGemmOp, inputs, attrs, outs, kOttr);
  ASSERT_TRUE(got.ok()) << got.status();

  auto A = [&](int64_t i, int64_t p) { return double(a.data<float>()[s.ta ? p * s.m + i : i * s.k + p]); };
  auto B = [&](int64_t p, int64_t j) { return double(b.data<float>()[s.tb ? j * s.k + p : p * s.n + j]); };
  std::vector<double> y(s.m * s.n), db(e == FusedEpilogue::kBgradA ? s.m : s.n, 0.0), aux(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < s.k; ++p) acc += A(i, p) * B(p, j);
      double v = 0.5 * acc;
      if (ir::EpilogueTakesBias(e)) v += bias.data<float>()[j];
      aux[i * s.n + j] = v;
      const double x = pre.data<float>()[i * s.n + j];
      switch (e) {
        case FusedEpilogue::kReluBias:
        case FusedEpilogue::kReluAuxBias: v = std::max(v, 0.0); break;
        case FusedEpilogue::kGeluBias:
        case FusedEpilogue::kGeluAuxBias: v = GeluTanh(v); break;
        case FusedEpilogue::kDRelu:
        case FusedEpilogue::kDReluBgrad: v = bits.data<int64_t>()[i * s.n + j] ? v : 0.0; break;
        case FusedEpilogue::kDGelu:
        case FusedEpilogue::kDGeluBgrad: v *= GeluTanhDeriv(x); break;
        default: break;
      }
      y[i * s.n + j] = v;
    }
  }
  if (e == FusedEpilogue::kBgradA) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t p = 0; p < s.k; ++p) db[i] += A(i, p);
    }
  } else if (e == FusedEpilogue::kBgradB) {
    for (int64_t j = 0; j < s.n; ++j) {
      for (int64_t p = 0; p < s.k; ++p) db[j] += B(p, j);
    }
  } else {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) db[j] += y[i * s.n + j];
    }
  }
  const Tensor& gy = (*got)[0];
  ASSERT_EQ(gy.dims(), (std::vector<int64_t>{s.m, s.n}));
  for (int64_t i = 0; i < s.m * s.n; ++i) {
    EXPECT_NEAR(gy.data<float>()[i], y[i], 1e-5 * (1 + std::abs(y[i]))) << "Y element " << i;
  }
  if (outs == 1) return;
  const Tensor& o1 = (*got)[1];
  if (e == FusedEpilogue::kReluAuxBias) {
    ASSERT_EQ(o1.dims(), (std::vector<int64_t>{s.m, row}));
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const bool bit = (o1.data<uint8_t>()[i * row + j / 8] >> (j % 8)) & 1u;
        // Skip values within rounding of 0, where the sign is not decided by the reference.
        if (std::abs(aux[i * s.n + j]) > 1e-5) EXPECT_EQ(bit, aux[i * s.n + j] > 0) << i << "," << j;
      }
    }
  } else if (e == FusedEpilogue::kGeluAuxBias) {
    for (int64_t i = 0; i < s.m * s.n; ++i) {
      EXPECT_NEAR(o1.data<float>()[i], aux[i], 1e-5 * (1 + std::abs(aux[i]))) << "pre-activation " << i;
    }
  } else {
    ASSERT_EQ(o1.num_elements(), static_cast<int64_t>(db.size()));
    for (size_t i = 0; i < db.size(); ++i) {
      EXPECT_NEAR(o1.data<float>()[i], db[i], 1e-5 * (1 + std::abs(db[i]))) << "bias gradient " << i;
    }
  }
}

TEST(FusedGemmKernelTest, EveryEpilogueMatchesItsDefinition) {
  for (FusedEpilogue e :
       {FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kReluAuxBias, FusedEpilogue::kGeluBias,
        FusedEpilogue::kGeluAuxBias, FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad, FusedEpilogue::kDGelu,
        FusedEpilogue::kDGeluBgrad, FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
    for (const Shape& s : {Shape{7, 10, 5, false, true}, Shape{16, 130, 9, true, false}, Shape{3, 128, 4, true, true},
                           Shape{5, 17, 300, false, false}}) {
      Check(e, s);
    }
  }
}

TEST(FusedGemmKernelTest, RejectsAMaskOfTheWrongShape) {
  const Tensor a = testing::RandomFloat({4, 8}, 1), b = testing::RandomFloat({8, 16}, 2);
  Tensor mask(ir::DType::kUInt8, {4, 2});  // one row of 16 bits, not RoundUp(16, 128) bits
  auto got = testing::RunSingleNode(ir::kFusedGemmOp, {a, b, Tensor(), mask},
                                    {{"epilogue", ir::Attribute("drelu")}}, 1, kOttr);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("aux"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace ottr
