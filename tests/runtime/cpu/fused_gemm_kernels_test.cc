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
        if (std::abs(aux[i * s.n + j]) > 1e-5) {
          EXPECT_EQ(bit, aux[i * s.n + j] > 0) << i << "," << j;
        }
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
       {FusedEpilogue::kNone, FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kReluAuxBias,
        FusedEpilogue::kGeluBias, FusedEpilogue::kGeluAuxBias, FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad,
        FusedEpilogue::kDGelu, FusedEpilogue::kDGeluBgrad, FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
    for (const Shape& s : {Shape{7, 10, 5, false, true}, Shape{16, 130, 9, true, false}, Shape{3, 128, 4, true, true},
                           Shape{5, 17, 300, false, false}}) {
      Check(e, s);
    }
  }
}

// bf16 (and f16) copies of float tensors, and the float values of those copies (exact).
Tensor To16(const Tensor& t, ir::DType d) {
  Tensor out(d, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const float f = t.data<float>()[i];
    if (d == ir::DType::kBFloat16) {
      out.data<ir::BFloat16>()[i] = ir::FloatToBFloat16(f);
    } else {
      out.data<ir::Half>()[i] = ir::FloatToHalf(f);
    }
  }
  return out;
}
Tensor Widened(const Tensor& t) {
  Tensor out(ir::DType::kFloat32, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data<float>()[i] = static_cast<float>(t.GetAsDouble(i));
  return out;
}

// output_type = f32 on 16-bit operands (ir/fused_gemm.h): Y (and the bias gradient, GELU
// pre-activation) is the float32 FusedGemm of the widened operands, bit for bit: float
// accumulation, one rounding to float. And where the epilogue commutes with rounding (none, bias,
// ReLU, the masks), rounding that Y to the 16-bit type gives the
// default 16-bit output exactly (with a bias exact in 16 bits): the two differ by that one
// rounding only.
TEST(FusedGemmKernelTest, SixteenBitOperandsWithFloat32OutputRoundOnceToFloat32) {
  for (ir::DType low : {ir::DType::kBFloat16, ir::DType::kFloat16}) {
    for (FusedEpilogue e :
         {FusedEpilogue::kNone, FusedEpilogue::kBias, FusedEpilogue::kReluBias, FusedEpilogue::kReluAuxBias,
          FusedEpilogue::kGeluBias, FusedEpilogue::kGeluAuxBias, FusedEpilogue::kDRelu, FusedEpilogue::kDReluBgrad,
          FusedEpilogue::kDGelu, FusedEpilogue::kDGeluBgrad, FusedEpilogue::kBgradA, FusedEpilogue::kBgradB}) {
      for (const Shape& s :
           {Shape{7, 10, 5, false, true}, Shape{16, 130, 9, true, false}, Shape{5, 17, 300, false, false}}) {
        SCOPED_TRACE(absl::StrCat(ir::DTypeName(low), " ", ir::FusedEpilogueName(e), " m", s.m, " n", s.n, " k", s.k));
        const std::vector<int64_t> ad = s.ta ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k};
        const std::vector<int64_t> bd = s.tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
        const Tensor a = To16(testing::RandomFloat(ad, 1), low);
        const Tensor b = To16(testing::RandomFloat(bd, 2), low);
        const Tensor bias16 = To16(testing::RandomFloat({s.n}, 3), low);
        const Tensor pre16 = To16(testing::RandomFloat({s.m, s.n}, 4, -3.0f, 3.0f), low);
        Tensor mask(ir::DType::kUInt8, {s.m, ir::ReluMaskRowBytes(s.n)});
        const Tensor bits = testing::RandomInt64({s.m, ir::ReluMaskRowBytes(s.n)}, 5, 0, 255);
        for (int64_t i = 0; i < mask.num_elements(); ++i) mask.data<uint8_t>()[i] = uint8_t(bits.data<int64_t>()[i]);
        auto inputs = [&](const Tensor& x, const Tensor& y, const Tensor& bias, const Tensor& pre) {
          std::vector<Tensor> in = {x, y};
          if (ir::EpilogueTakesBias(e)) in.push_back(bias);
          if (ir::EpilogueTakesAux(e)) {
            in.push_back(Tensor());
            in.push_back(ir::EpilogueIsRelu(e) ? mask : pre);
          }
          return in;
        };
        std::map<std::string, ir::Attribute> attrs = {{"epilogue", ir::Attribute(ir::FusedEpilogueName(e))}};
        if (s.ta) attrs["transA"] = ir::Attribute(int64_t{1});
        if (s.tb) attrs["transB"] = ir::Attribute(int64_t{1});
        const int outs = ir::EpilogueWritesAux(e) || ir::EpilogueWritesBiasGrad(e) ? 2 : 1;
        auto f32 = testing::RunSingleNode(ir::kFusedGemmOp,
                                          inputs(Widened(a), Widened(b), Widened(bias16), Widened(pre16)), attrs, outs,
                                          kOttr);
        auto low16 = testing::RunSingleNode(ir::kFusedGemmOp, inputs(a, b, bias16, pre16), attrs, outs, kOttr);
        attrs["output_type"] = ir::Attribute(int64_t{1});
        auto mixed = testing::RunSingleNode(ir::kFusedGemmOp, inputs(a, b, Widened(bias16), Widened(pre16)), attrs,
                                            outs, kOttr);
        ASSERT_TRUE(f32.ok() && low16.ok() && mixed.ok()) << f32.status() << low16.status() << mixed.status();
        for (int o = 0; o < outs; ++o) {
          EXPECT_TRUE((*mixed)[o].BitwiseEquals((*f32)[o])) << "output " << o;
        }
        const bool commutes = e != FusedEpilogue::kGeluBias && e != FusedEpilogue::kGeluAuxBias &&
                              e != FusedEpilogue::kDGelu && e != FusedEpilogue::kDGeluBgrad;
        if (commutes) {
          EXPECT_TRUE(To16((*mixed)[0], low).BitwiseEquals((*low16)[0])) << "Y rounded to " << ir::DTypeName(low);
        }
      }
    }
  }
}

TEST(FusedGemmKernelTest, OutputTypeIsTheOperandsTypeOrFloat32) {
  const Tensor a = To16(testing::RandomFloat({4, 8}, 1), ir::DType::kBFloat16);
  const Tensor b = To16(testing::RandomFloat({8, 16}, 2), ir::DType::kBFloat16);
  // bf16 operands into f16: not a widening.
  auto got = testing::RunSingleNode(ir::kFusedGemmOp, {a, b},
                                    {{"epilogue", ir::Attribute("none")}, {"output_type", ir::Attribute(int64_t{10})}},
                                    1, kOttr);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("output_type"), std::string::npos) << got.status();
  // A 16-bit bias with an f32 output: the bias must have Y's type.
  auto bias = testing::RunSingleNode(
      ir::kFusedGemmOp, {a, b, To16(testing::RandomFloat({16}, 3), ir::DType::kBFloat16)},
      {{"epilogue", ir::Attribute("bias")}, {"output_type", ir::Attribute(int64_t{1})}}, 1, kOttr);
  ASSERT_FALSE(bias.ok());
  EXPECT_NE(bias.status().message().find("bias"), std::string::npos) << bias.status();
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
