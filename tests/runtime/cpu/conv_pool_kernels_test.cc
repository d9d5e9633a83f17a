// Tests of Conv, ConvTranspose and the pooling ops (schemas, shape functions, CPU kernels) against
// direct N-d loops written out here, on random shapes with groups, dilations, strides and pads.
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "runtime/cpu/gemm.h"
#include "tests/test_util.h"

namespace ottr::testing {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;
using Dims = std::vector<int64_t>;

Tensor Convert(const Tensor& t, DType dtype) {
  Tensor out(dtype, t.dims());
  ir::VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        out.data<T>()[i] = ir::FromDouble<T>(t.GetAsDouble(i));
      }
    }
  });
  return out;
}

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(actual.GetAsDouble(i))) << "element " << i;
      continue;
    }
    ASSERT_NEAR(actual.GetAsDouble(i), expected[i], tol * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

absl::StatusOr<std::unique_ptr<ir::Graph>> InferText(const std::string& text) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  if (!s.ok()) return s;
  return std::move(*g);
}

std::string TypeOf(const ir::Graph& g, const std::string& name) {
  return g.FindValue(name)->type().ToString();
}

int64_t Prod(const Dims& d) {
  int64_t p = 1;
  for (int64_t x : d) p *= x;
  return p;
}

// Multi-index of flat index i over dims (row-major).
Dims Unflatten(int64_t i, const Dims& dims) {
  Dims idx(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    idx[d] = i % dims[d];
    i /= dims[d];
  }
  return idx;
}

// Flat row-major offset of idx in dims, or -1 when outside.
int64_t Flatten(const Dims& idx, const Dims& dims) {
  int64_t off = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (idx[d] < 0 || idx[d] >= dims[d]) return -1;
    off = off * dims[d] + idx[d];
  }
  return off;
}

struct ConvSpec {
  Dims kernel, strides, dilations, pads;  // pads: begins then ends
  int64_t group = 1;
};

// Direct convolution in double with explicit pads. Output dims go to *out_dims.
std::vector<double> NaiveConv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvSpec& s,
                              Dims* out_dims) {
  const int64_t nd = x.rank() - 2, n = x.dim(0), c = x.dim(1), m = w.dim(0);
  const int64_t cg = c / s.group, mg = m / s.group;
  const Dims in(x.dims().begin() + 2, x.dims().end());
  Dims out(nd);
  for (int64_t d = 0; d < nd; ++d) {
    out[d] = (in[d] + s.pads[d] + s.pads[nd + d] - ((s.kernel[d] - 1) * s.dilations[d] + 1)) /
                 s.strides[d] +
             1;
  }
  *out_dims = {n, m};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  std::vector<double> y;
  for (int64_t in_ = 0; in_ < n; ++in_) {
    for (int64_t mm = 0; mm < m; ++mm) {
      const int64_t g = mm / mg;
      for (int64_t o = 0; o < Prod(out); ++o) {
        const Dims op = Unflatten(o, out);
        double sum = b ? b->GetAsDouble(mm) : 0.0;
        for (int64_t cc = 0; cc < cg; ++cc) {
          for (int64_t kk = 0; kk < Prod(s.kernel); ++kk) {
            const Dims kp = Unflatten(kk, s.kernel);
            Dims ip(nd);
            for (int64_t d = 0; d < nd; ++d) {
              ip[d] = op[d] * s.strides[d] - s.pads[d] + kp[d] * s.dilations[d];
            }
            const int64_t off = Flatten(ip, in);
            if (off < 0) continue;
            sum += x.GetAsDouble((in_ * c + g * cg + cc) * Prod(in) + off) *
                   w.GetAsDouble((mm * cg + cc) * Prod(s.kernel) + kk);
          }
        }
        y.push_back(sum);
      }
    }
  }
  return y;
}

std::map<std::string, Attribute> ConvAttrs(const ConvSpec& s, bool with_kernel_shape) {
  std::map<std::string, Attribute> a = {{"strides", Attribute(s.strides)},
                                        {"dilations", Attribute(s.dilations)},
                                        {"pads", Attribute(s.pads)},
                                        {"group", Attribute(s.group)}};
  if (with_kernel_shape) a["kernel_shape"] = Attribute(s.kernel);
  return a;
}

TEST(ConvTest, MatchesDirectConvolutionOnRandomShapes) {
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  uint64_t seed = 1000;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t nd = 1 + trial % 3;
    ConvSpec s;
    const int64_t group = std::vector<int64_t>{1, 1, 2, 3}[pick(0, 3)];
    const int64_t cg = pick(1, 3), mg = pick(1, 3);
    s.group = group;
    Dims xd = {pick(1, 2), cg * group}, wd = {mg * group, cg};
    for (int64_t d = 0; d < nd; ++d) {
      s.kernel.push_back(pick(1, 3));
      s.strides.push_back(pick(1, 3));
      s.dilations.push_back(pick(1, 2));
    }
    for (int64_t d = 0; d < 2 * nd; ++d) s.pads.push_back(pick(0, 2));
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t ek = (s.kernel[d] - 1) * s.dilations[d] + 1;
      xd.push_back(std::max<int64_t>(ek, pick(1, nd == 3 ? 6 : 11)));
      wd.push_back(s.kernel[d]);
    }
    Tensor x = RandomFloat(xd, ++seed), w = RandomFloat(wd, ++seed);
    Tensor b = RandomFloat({mg * group}, ++seed);
    const bool with_bias = trial % 2 == 0;
    auto r = with_bias ? RunSingleNode("Conv", {x, w, b}, ConvAttrs(s, trial % 4 == 0))
                       : RunSingleNode("Conv", {x, w}, ConvAttrs(s, trial % 4 == 1));
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status();
    Dims want_dims;
    const std::vector<double> want = NaiveConv(x, w, with_bias ? &b : nullptr, s, &want_dims);
    ASSERT_EQ((*r)[0].dims(), want_dims) << "trial " << trial;
    ExpectNear((*r)[0], want, 1e-5);
  }
}

TEST(ConvTest, DepthwiseAndPointwiseAndLargeIm2col) {
  // Depthwise 3x3 (group = C, one filter per channel, with a channel multiplier of 2).
  ConvSpec dw{{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 8};
  Tensor x = RandomFloat({2, 8, 10, 9}, 1), w = RandomFloat({16, 1, 3, 3}, 2);
  auto r = RunSingleNode("Conv", {x, w}, ConvAttrs(dw, true));
  ASSERT_TRUE(r.ok()) << r.status();
  Dims dims;
  ExpectNear((*r)[0], NaiveConv(x, w, nullptr, dw, &dims), 1e-5);
  // Pointwise 1x1 (no im2col).
  ConvSpec pw{{1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1};
  Tensor w1 = RandomFloat({5, 8, 1, 1}, 3), b1 = RandomFloat({5}, 4);
  r = RunSingleNode("Conv", {x, w1, b1}, ConvAttrs(pw, false));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaiveConv(x, w1, &b1, pw, &dims), 1e-5);
  // A LeNet-like layer big enough for the blocked and threaded GEMM.
  ConvSpec big{{5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, 1};
  Tensor xb = RandomFloat({2, 16, 28, 28}, 5), wb = RandomFloat({32, 16, 5, 5}, 6);
  r = RunSingleNode("Conv", {xb, wb}, ConvAttrs(big, true));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaiveConv(xb, wb, nullptr, big, &dims), 1e-4);
}

TEST(ConvTest, ThreadCountDoesNotChangeResults) {
  // Batch 6: images run in parallel; batch 1: the GEMM itself is split. Bit-identical either way.
  ConvSpec s{{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1};
  for (int64_t batch : {6, 1}) {
    Tensor x = RandomFloat({batch, 16, 24, 24}, 1), w = RandomFloat({32, 16, 3, 3}, 2);
    std::vector<Tensor> outs;
    for (int threads : {1, 2, 5}) {
      runtime::cpu::SetGemmMaxThreads(threads);
      auto r = RunSingleNode("Conv", {x, w}, ConvAttrs(s, false));
      ASSERT_TRUE(r.ok()) << r.status();
      outs.push_back((*r)[0]);
      r = RunSingleNode("ConvTranspose", {x, RandomFloat({16, 8, 3, 3}, 3)});
      ASSERT_TRUE(r.ok()) << r.status();
      outs.push_back((*r)[0]);
      r = RunSingleNode("MaxPool", {x}, {{"kernel_shape", Attribute(Dims{3, 3})}});
      ASSERT_TRUE(r.ok()) << r.status();
      outs.push_back((*r)[0]);
    }
    runtime::cpu::SetGemmMaxThreads(0);
    for (size_t i = 3; i < outs.size(); ++i) {
      EXPECT_TRUE(outs[i].BitwiseEquals(outs[i % 3])) << "batch " << batch << " output " << i;
    }
    Dims dims;
    ExpectNear(outs[0], NaiveConv(x, w, nullptr, s, &dims), 1e-5);
  }
}

TEST(ConvTest, AutoPadModes) {
  // in 7, kernel 3, stride 2, dilation 2 (extent 5): SAME -> out 4, total pad (4-1)*2+5-7 = 4;
  // in 6: out 3, total (3-1)*2+5-6 = 3 -> UPPER (1, 2), LOWER (2, 1). VALID: (7-5)/2+1 = 2.
  Tensor x = RandomFloat({1, 2, 7, 6}, 1), w = RandomFloat({3, 2, 3, 3}, 2);
  struct Case {
    const char* auto_pad;
    Dims pads;
    Dims out;
  };
  for (const Case& c :
       {Case{"SAME_UPPER", {2, 1, 2, 2}, {4, 3}}, Case{"SAME_LOWER", {2, 2, 2, 1}, {4, 3}},
        Case{"VALID", {0, 0, 0, 0}, {2, 1}}}) {
    ConvSpec s{{3, 3}, {2, 2}, {2, 2}, c.pads, 1};
    std::map<std::string, Attribute> attrs = {{"auto_pad", Attribute(c.auto_pad)},
                                              {"strides", Attribute(s.strides)},
                                              {"dilations", Attribute(s.dilations)}};
    auto r = RunSingleNode("Conv", {x, w}, attrs);
    ASSERT_TRUE(r.ok()) << c.auto_pad << ": " << r.status();
    Dims dims;
    const std::vector<double> want = NaiveConv(x, w, nullptr, s, &dims);
    EXPECT_EQ((*r)[0].dims(), (Dims{1, 3, c.out[0], c.out[1]})) << c.auto_pad;
    ASSERT_EQ((*r)[0].dims(), dims) << c.auto_pad;
    ExpectNear((*r)[0], want, 1e-5);
  }
}

TEST(ConvTest, HalfDoubleAndBFloat16) {
  ConvSpec s{{3, 2}, {1, 2}, {1, 1}, {1, 0, 1, 1}, 2};
  Tensor x = RandomFloat({2, 4, 6, 7}, 1), w = RandomFloat({6, 2, 3, 2}, 2),
         b = RandomFloat({6}, 3);
  for (DType t : {DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    Tensor xt = Convert(x, t), wt = Convert(w, t), bt = Convert(b, t);
    auto r = RunSingleNode("Conv", {xt, wt, bt}, ConvAttrs(s, false));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].dtype(), t);
    Dims dims;
    ExpectNear((*r)[0], NaiveConv(xt, wt, &bt, s, &dims),
               t == DType::kFloat64   ? 1e-12
               : t == DType::kFloat16 ? 3e-3
                                      : 3e-2);
  }
}

TEST(ConvTest, BadInputsAreErrors) {
  Tensor x = RandomFloat({1, 4, 5, 5}, 1);
  // Channels: W expects 3 * group(1) input channels.
  auto r = RunSingleNode("Conv", {x, RandomFloat({2, 3, 3, 3}, 2)});
  EXPECT_FALSE(r.ok());
  // Kernel larger than the padded input.
  r = RunSingleNode("Conv", {x, RandomFloat({2, 4, 7, 3}, 2)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("larger"), std::string::npos) << r.status();
  // Wrong bias length.
  r = RunSingleNode("Conv", {x, RandomFloat({2, 4, 3, 3}, 2), RandomFloat({3}, 3)});
  EXPECT_FALSE(r.ok());
  // kernel_shape disagreeing with W; wrong-sized strides; bad auto_pad.
  r = RunSingleNode("Conv", {x, RandomFloat({2, 4, 3, 3}, 2)},
                    {{"kernel_shape", Attribute(Dims{2, 2})}});
  EXPECT_FALSE(r.ok());
  r = RunSingleNode("Conv", {x, RandomFloat({2, 4, 3, 3}, 2)}, {{"strides", Attribute(Dims{1})}});
  EXPECT_FALSE(r.ok());
  r = RunSingleNode("Conv", {x, RandomFloat({2, 4, 3, 3}, 2)}, {{"auto_pad", Attribute("SAME")}});
  EXPECT_FALSE(r.ok());
  // Group not dividing the output channels.
  r = RunSingleNode("Conv", {x, RandomFloat({3, 2, 3, 3}, 2)}, {{"group", Attribute(int64_t{2})}});
  EXPECT_FALSE(r.ok());
  // Integer input.
  r = RunSingleNode("Conv",
                    {Tensor(DType::kInt32, {1, 1, 3, 3}), Tensor(DType::kInt32, {1, 1, 1, 1})});
  EXPECT_FALSE(r.ok());
  // Rank 2 input.
  r = RunSingleNode("Conv", {RandomFloat({2, 3}, 1), RandomFloat({2, 3}, 2)});
  EXPECT_FALSE(r.ok());
}

TEST(ConvTest, ShapeInferenceKeepsSymbolsAndLeavesUnknownSpatialDims) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,3,32,H]
    input %w : f32[16,3,5,5]
    input %x3 : f32[N,4,9,9,9]
    input %w3 : f32[8,2,3,3,3]
    input %wt : f32[4,2,3,3,3]
    %y : f32[*] = Conv(%x, %w) {pads = ints[2, 2, 2, 2], strides = ints[2, 1]} origin "c"
    %z : f32[*] = Conv(%x3, %w3) {group = 2, auto_pad = "SAME_UPPER", strides = ints[2, 2, 2]} origin "c3"
    %t : f32[*] = ConvTranspose(%x3, %wt) {group = 2, strides = ints[2, 2, 2]} origin "t"
    output %y, %z, %t
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f32[N,16,16,?]");
  EXPECT_EQ(TypeOf(**g, "z"), "f32[N,8,5,5,5]");
  EXPECT_EQ(TypeOf(**g, "t"), "f32[N,4,19,19,19]");
}

// ---------------------------------------------------------------------------------------------
// ConvTranspose

struct ConvTSpec {
  Dims kernel, strides, dilations, pads, output_padding;
  int64_t group = 1;
};

// Direct scatter: y[n, g*mg + mm, i*s - pad + k*d] += x[n, c, i] * w[c, mm, k].
std::vector<double> NaiveConvTranspose(const Tensor& x, const Tensor& w, const Tensor* b,
                                       const ConvTSpec& s, Dims* out_dims) {
  const int64_t nd = x.rank() - 2, n = x.dim(0), c = x.dim(1), mg = w.dim(1);
  const int64_t cg = c / s.group, m = mg * s.group;
  const Dims in(x.dims().begin() + 2, x.dims().end());
  Dims out(nd);
  for (int64_t d = 0; d < nd; ++d) {
    out[d] = s.strides[d] * (in[d] - 1) + s.output_padding[d] + (s.kernel[d] - 1) * s.dilations[d] +
             1 - s.pads[d] - s.pads[nd + d];
  }
  *out_dims = {n, m};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  for (int64_t d : out) {
    if (d <= 0) return {};
  }
  std::vector<double> y(n * m * Prod(out), 0.0);
  for (int64_t in_ = 0; in_ < n; ++in_) {
    for (int64_t mm = 0; mm < m; ++mm) {
      for (int64_t o = 0; o < Prod(out); ++o)
        y[(in_ * m + mm) * Prod(out) + o] = b ? b->GetAsDouble(mm) : 0.0;
    }
    for (int64_t cc = 0; cc < c; ++cc) {
      const int64_t g = cc / cg;
      for (int64_t i = 0; i < Prod(in); ++i) {
        const Dims ip = Unflatten(i, in);
        for (int64_t mm = 0; mm < mg; ++mm) {
          for (int64_t kk = 0; kk < Prod(s.kernel); ++kk) {
            const Dims kp = Unflatten(kk, s.kernel);
            Dims op(nd);
            for (int64_t d = 0; d < nd; ++d) {
              op[d] = ip[d] * s.strides[d] - s.pads[d] + kp[d] * s.dilations[d];
            }
            const int64_t off = Flatten(op, out);
            if (off < 0) continue;
            y[(in_ * m + g * mg + mm) * Prod(out) + off] +=
                x.GetAsDouble((in_ * c + cc) * Prod(in) + i) *
                w.GetAsDouble((cc * mg + mm) * Prod(s.kernel) + kk);
          }
        }
      }
    }
  }
  return y;
}

TEST(ConvTransposeTest, MatchesDirectScatterOnRandomShapes) {
  std::mt19937_64 rng(9);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  uint64_t seed = 2000;
  for (int trial = 0; trial < 45; ++trial) {
    const int64_t nd = 1 + trial % 3;
    ConvTSpec s;
    s.group = pick(1, 2);
    const int64_t cg = pick(1, 3), mg = pick(1, 3);
    Dims xd = {pick(1, 2), cg * s.group}, wd = {cg * s.group, mg};
    for (int64_t d = 0; d < nd; ++d) {
      s.kernel.push_back(pick(1, 3));
      s.strides.push_back(pick(1, 3));
      s.dilations.push_back(pick(1, 2));
      s.output_padding.push_back(pick(0, s.strides.back() - 1));
      xd.push_back(pick(1, nd == 3 ? 4 : 6));
      wd.push_back(s.kernel.back());
    }
    for (int64_t d = 0; d < 2 * nd; ++d) s.pads.push_back(pick(0, 1));
    Tensor x = RandomFloat(xd, ++seed), w = RandomFloat(wd, ++seed);
    Tensor b = RandomFloat({mg * s.group}, ++seed);
    std::map<std::string, Attribute> attrs = {{"strides", Attribute(s.strides)},
                                              {"dilations", Attribute(s.dilations)},
                                              {"pads", Attribute(s.pads)},
                                              {"output_padding", Attribute(s.output_padding)},
                                              {"group", Attribute(s.group)}};
    Dims want_dims;
    const std::vector<double> want = NaiveConvTranspose(x, w, &b, s, &want_dims);
    bool positive = true;
    for (size_t d = 2; d < want_dims.size(); ++d) positive = positive && want_dims[d] > 0;
    if (!positive) continue;
    auto r = RunSingleNode("ConvTranspose", {x, w, b}, attrs);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status();
    ASSERT_EQ((*r)[0].dims(), want_dims) << "trial " << trial;
    ExpectNear((*r)[0], want, 1e-5);
  }
}

TEST(ConvTransposeTest, OutputShapeAndAutoPadDerivePads) {
  Tensor x = RandomFloat({1, 2, 3, 4}, 1), w = RandomFloat({2, 3, 3, 3}, 2);
  // Natural size with stride 2: 2*(3-1)+3 = 7 and 2*(4-1)+3 = 9.
  // output_shape [5, 10]: totals 2 and -1 -> pads (1 begin, 1 end) and (0, -1).
  auto r =
      RunSingleNode("ConvTranspose", {x, w},
                    {{"strides", Attribute(Dims{2, 2})}, {"output_shape", Attribute(Dims{5, 10})}});
  ASSERT_TRUE(r.ok()) << r.status();
  ConvTSpec s{{3, 3}, {2, 2}, {1, 1}, {1, 0, 1, -1}, {0, 0}, 1};
  Dims dims;
  std::vector<double> want = NaiveConvTranspose(x, w, nullptr, s, &dims);
  ASSERT_EQ((*r)[0].dims(), (Dims{1, 3, 5, 10}));
  ExpectNear((*r)[0], want, 1e-5);
  // The same with the full-rank spelling of output_shape.
  r = RunSingleNode(
      "ConvTranspose", {x, w},
      {{"strides", Attribute(Dims{2, 2})}, {"output_shape", Attribute(Dims{1, 3, 5, 10})}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], want, 1e-5);
  // SAME_UPPER: output = in * stride = [6, 8]; totals 1 and 1 -> pads (0, 1) each.
  r = RunSingleNode("ConvTranspose", {x, w},
                    {{"strides", Attribute(Dims{2, 2})}, {"auto_pad", Attribute("SAME_UPPER")}});
  ASSERT_TRUE(r.ok()) << r.status();
  ConvTSpec su{{3, 3}, {2, 2}, {1, 1}, {0, 0, 1, 1}, {0, 0}, 1};
  want = NaiveConvTranspose(x, w, nullptr, su, &dims);
  ASSERT_EQ((*r)[0].dims(), (Dims{1, 3, 6, 8}));
  ExpectNear((*r)[0], want, 1e-5);
  // SAME_LOWER puts the odd padding first.
  r = RunSingleNode("ConvTranspose", {x, w},
                    {{"strides", Attribute(Dims{2, 2})}, {"auto_pad", Attribute("SAME_LOWER")}});
  ASSERT_TRUE(r.ok()) << r.status();
  ConvTSpec sl{{3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 0}, {0, 0}, 1};
  want = NaiveConvTranspose(x, w, nullptr, sl, &dims);
  ExpectNear((*r)[0], want, 1e-5);
}

TEST(ConvTransposeTest, BadInputsAreErrors) {
  Tensor x = RandomFloat({1, 4, 3, 3}, 1);
  EXPECT_FALSE(RunSingleNode("ConvTranspose", {x, RandomFloat({3, 2, 3, 3}, 2)}).ok());
  EXPECT_FALSE(RunSingleNode("ConvTranspose", {x, RandomFloat({4, 2, 3, 3}, 2)},
                             {{"group", Attribute(int64_t{3})}})
                   .ok());
  EXPECT_FALSE(RunSingleNode("ConvTranspose", {x, RandomFloat({4, 2, 3, 3}, 2)},
                             {{"pads", Attribute(Dims{4, 4, 4, 4})}})
                   .ok());
  EXPECT_FALSE(RunSingleNode("ConvTranspose", {x, RandomFloat({4, 2, 3, 3}, 2)},
                             {{"output_shape", Attribute(Dims{5})}})
                   .ok());
}

// ---------------------------------------------------------------------------------------------
// Pools

struct PoolSpec {
  Dims kernel, strides, dilations, pads;
  bool ceil_mode = false;
};

// Output size per axis, PyTorch rule: with ceil_mode the last window must start inside the
// input or the begin padding.
Dims PoolOut(const Dims& in, const PoolSpec& s) {
  const size_t nd = in.size();
  Dims out(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t span =
        in[d] + s.pads[d] + s.pads[nd + d] - ((s.kernel[d] - 1) * s.dilations[d] + 1);
    out[d] = s.ceil_mode ? (span + s.strides[d] - 1) / s.strides[d] + 1 : span / s.strides[d] + 1;
    if (s.ceil_mode && (out[d] - 1) * s.strides[d] >= in[d] + s.pads[d]) --out[d];
  }
  return out;
}

enum class PoolKind { kMax, kAvgExclude, kAvgInclude, kLp2 };

// Reference pooling; for kMax also the flat argmax (row- or column-major spatial index).
std::vector<double> NaivePool(const Tensor& x, const PoolSpec& s, PoolKind kind, Dims* out_dims,
                              std::vector<int64_t>* argmax = nullptr, bool colmajor = false) {
  const int64_t nd = x.rank() - 2, planes = x.dim(0) * x.dim(1);
  const Dims in(x.dims().begin() + 2, x.dims().end());
  const Dims out = PoolOut(in, s);
  *out_dims = {x.dim(0), x.dim(1)};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  std::vector<double> y;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t o = 0; o < Prod(out); ++o) {
      const Dims op = Unflatten(o, out);
      double best = -std::numeric_limits<double>::infinity(), sum = 0.0;
      int64_t best_idx = -1, count = 0, padded = 0;
      for (int64_t kk = 0; kk < Prod(s.kernel); ++kk) {
        const Dims kp = Unflatten(kk, s.kernel);
        Dims ip(nd);
        bool in_padded = true;
        for (int64_t d = 0; d < nd; ++d) {
          ip[d] = op[d] * s.strides[d] - s.pads[d] + kp[d] * s.dilations[d];
          in_padded = in_padded && ip[d] < in[d] + s.pads[nd + d];
        }
        padded += in_padded;
        const int64_t off = Flatten(ip, in);
        if (off < 0) continue;
        const double v = x.GetAsDouble(p * Prod(in) + off);
        ++count;
        sum += kind == PoolKind::kLp2 ? v * v : v;
        if (v > best) {
          best = v;
          int64_t cm = 0, stride = 1;
          for (int64_t d = 0; d < nd; ++d) {
            cm += ip[d] * stride;
            stride *= in[d];
          }
          best_idx = p * Prod(in) + (colmajor ? cm : off);
        }
      }
      switch (kind) {
        case PoolKind::kMax:
          y.push_back(best);
          break;
        case PoolKind::kAvgExclude:
          y.push_back(sum / count);
          break;
        case PoolKind::kAvgInclude:
          y.push_back(sum / padded);
          break;
        case PoolKind::kLp2:
          y.push_back(std::sqrt(sum));
          break;
      }
      if (argmax) argmax->push_back(best_idx);
    }
  }
  return y;
}

std::map<std::string, Attribute> PoolAttrs(const PoolSpec& s) {
  return {{"kernel_shape", Attribute(s.kernel)},
          {"strides", Attribute(s.strides)},
          {"dilations", Attribute(s.dilations)},
          {"pads", Attribute(s.pads)},
          {"ceil_mode", Attribute(int64_t{s.ceil_mode})}};
}

PoolSpec RandomPoolSpec(std::mt19937_64& rng, int64_t nd, Dims* xd) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  PoolSpec s;
  *xd = {pick(1, 2), pick(1, 3)};
  for (int64_t d = 0; d < nd; ++d) {
    s.kernel.push_back(pick(1, 3));
    s.strides.push_back(pick(1, 3));
    s.dilations.push_back(pick(1, 2));
  }
  for (int64_t d = 0; d < 2 * nd; ++d) {
    // Pads must stay below the kernel extent so that every window sees the input.
    s.pads.push_back(std::min<int64_t>(pick(0, 2), s.kernel[d % nd] - 1));
  }
  for (int64_t d = 0; d < nd; ++d) {
    xd->push_back(
        std::max<int64_t>((s.kernel[d] - 1) * s.dilations[d] + 1, pick(2, nd == 3 ? 6 : 10)));
  }
  s.ceil_mode = pick(0, 1) == 1;
  return s;
}

TEST(PoolTest, MaxPoolMatchesNaiveWithIndices) {
  std::mt19937_64 rng(11);
  uint64_t seed = 3000;
  for (int trial = 0; trial < 60; ++trial) {
    Dims xd;
    const PoolSpec s = RandomPoolSpec(rng, 1 + trial % 3, &xd);
    const bool colmajor = trial % 2 == 1;
    Tensor x = RandomFloat(xd, ++seed);
    auto attrs = PoolAttrs(s);
    attrs["storage_order"] = Attribute(int64_t{colmajor});
    auto r = RunSingleNode("MaxPool", {x}, attrs, 2);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status();
    Dims dims;
    std::vector<int64_t> argmax;
    const std::vector<double> want = NaivePool(x, s, PoolKind::kMax, &dims, &argmax, colmajor);
    ASSERT_EQ((*r)[0].dims(), dims) << "trial " << trial;
    ASSERT_EQ((*r)[1].dims(), dims);
    ASSERT_EQ((*r)[1].dtype(), DType::kInt64);
    ExpectNear((*r)[0], want, 0.0);
    for (size_t i = 0; i < argmax.size(); ++i) {
      ASSERT_EQ((*r)[1].data<int64_t>()[i], argmax[i]) << "trial " << trial << " element " << i;
    }
  }
}

TEST(PoolTest, MaxPoolIntegerAndHalfTypes) {
  PoolSpec s{{2, 2}, {2, 1}, {1, 1}, {0, 1, 1, 0}, true};
  Tensor xf = RandomFloat({1, 2, 5, 4}, 1, -100.0f, 100.0f);
  for (DType t :
       {DType::kInt8, DType::kUInt8, DType::kFloat16, DType::kFloat64, DType::kBFloat16}) {
    Tensor x = Convert(t == DType::kUInt8 ? RandomFloat({1, 2, 5, 4}, 2, 0.0f, 250.0f) : xf, t);
    auto r = RunSingleNode("MaxPool", {x}, PoolAttrs(s));
    ASSERT_TRUE(r.ok()) << ir::DTypeName(t) << ": " << r.status();
    EXPECT_EQ((*r)[0].dtype(), t);
    Dims dims;
    ExpectNear((*r)[0], NaivePool(x, s, PoolKind::kMax, &dims), 0.0);
  }
}

TEST(PoolTest, AveragePoolBothPadCountingModes) {
  std::mt19937_64 rng(12);
  uint64_t seed = 4000;
  for (int trial = 0; trial < 60; ++trial) {
    Dims xd;
    const PoolSpec s = RandomPoolSpec(rng, 1 + trial % 3, &xd);
    const bool include = trial % 2 == 0;
    Tensor x = RandomFloat(xd, ++seed);
    auto attrs = PoolAttrs(s);
    attrs["count_include_pad"] = Attribute(int64_t{include});
    auto r = RunSingleNode("AveragePool", {x}, attrs);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status();
    Dims dims;
    const std::vector<double> want =
        NaivePool(x, s, include ? PoolKind::kAvgInclude : PoolKind::kAvgExclude, &dims);
    ASSERT_EQ((*r)[0].dims(), dims) << "trial " << trial;
    ExpectNear((*r)[0], want, 1e-6);
  }
}

TEST(PoolTest, LpPoolMatchesNaive) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 12; ++trial) {
    Dims xd;
    const PoolSpec s = RandomPoolSpec(rng, 1 + trial % 3, &xd);
    Tensor x = RandomFloat(xd, 5000 + trial);
    auto r = RunSingleNode("LpPool", {x}, PoolAttrs(s));
    ASSERT_TRUE(r.ok()) << r.status();
    Dims dims;
    ExpectNear((*r)[0], NaivePool(x, s, PoolKind::kLp2, &dims), 1e-6);
  }
}

TEST(PoolTest, AutoPadSameAndValid) {
  // in 7, kernel 3, stride 2: SAME -> out 4, total (4-1)*2+3-7 = 2 -> (1, 1);
  // in 6: out 3, total 1 -> UPPER (0, 1), LOWER (1, 0). VALID: (7-3)/2+1 = 3, (6-3)/2+1 = 2.
  Tensor x = RandomFloat({1, 2, 7, 6}, 1);
  struct Case {
    const char* auto_pad;
    Dims pads;
  };
  for (const Case& c : {Case{"SAME_UPPER", {1, 0, 1, 1}}, Case{"SAME_LOWER", {1, 1, 1, 0}},
                        Case{"VALID", {0, 0, 0, 0}}}) {
    PoolSpec s{{3, 3}, {2, 2}, {1, 1}, c.pads, false};
    for (const char* op : {"MaxPool", "AveragePool"}) {
      auto r = RunSingleNode(op, {x},
                             {{"auto_pad", Attribute(c.auto_pad)},
                              {"kernel_shape", Attribute(s.kernel)},
                              {"strides", Attribute(s.strides)}});
      ASSERT_TRUE(r.ok()) << op << " " << c.auto_pad << ": " << r.status();
      Dims dims;
      const std::vector<double> want = NaivePool(
          x, s, std::string(op) == "MaxPool" ? PoolKind::kMax : PoolKind::kAvgExclude, &dims);
      ASSERT_EQ((*r)[0].dims(), dims) << op << " " << c.auto_pad;
      ExpectNear((*r)[0], want, 1e-6);
    }
  }
}

TEST(PoolTest, GlobalPools) {
  Tensor x = RandomFloat({2, 3, 4, 5, 2}, 1);
  Dims in = {4, 5, 2};
  PoolSpec whole{in, {1, 1, 1}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}, false};
  Dims dims;
  auto r = RunSingleNode("GlobalAveragePool", {x});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dims(), (Dims{2, 3, 1, 1, 1}));
  ExpectNear((*r)[0], NaivePool(x, whole, PoolKind::kAvgExclude, &dims), 1e-6);
  r = RunSingleNode("GlobalMaxPool", {x});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaivePool(x, whole, PoolKind::kMax, &dims), 0.0);
  r = RunSingleNode("GlobalLpPool", {x});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaivePool(x, whole, PoolKind::kLp2, &dims), 1e-6);
  r = RunSingleNode("GlobalAveragePool", {Convert(x, DType::kFloat16)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat16);
  ExpectNear((*r)[0], NaivePool(Convert(x, DType::kFloat16), whole, PoolKind::kAvgExclude, &dims),
             1e-3);
  EXPECT_FALSE(RunSingleNode("GlobalAveragePool", {RandomFloat({3}, 1)}).ok());
}

TEST(PoolTest, BadAttributesAreErrors) {
  Tensor x = RandomFloat({1, 1, 4, 4}, 1);
  EXPECT_FALSE(RunSingleNode("MaxPool", {x}).ok());  // kernel_shape is required
  EXPECT_FALSE(RunSingleNode("MaxPool", {x}, {{"kernel_shape", Attribute(Dims{5, 5})}}).ok());
  EXPECT_FALSE(RunSingleNode("MaxPool", {x}, {{"kernel_shape", Attribute(Dims{2})}}).ok());
  EXPECT_FALSE(
      RunSingleNode("MaxPool", {x},
                    {{"kernel_shape", Attribute(Dims{2, 2})}, {"strides", Attribute(Dims{0, 1})}})
          .ok());
  EXPECT_FALSE(RunSingleNode("MaxPool", {x},
                             {{"kernel_shape", Attribute(Dims{2, 2})},
                              {"storage_order", Attribute(int64_t{2})}})
                   .ok());
  EXPECT_FALSE(RunSingleNode("AveragePool", {x},
                             {{"kernel_shape", Attribute(Dims{2, 2})},
                              {"pads", Attribute(Dims{1, 1, -1, 1})}})
                   .ok());
  EXPECT_FALSE(RunSingleNode("AveragePool", {Tensor(DType::kInt32, {1, 1, 4, 4})},
                             {{"kernel_shape", Attribute(Dims{2, 2})}})
                   .ok());
}

TEST(PoolTest, ShapeInferenceWithSymbols) {
  auto g = InferText(R"(graph "g" {
    input %x : f32[N,C,32,W]
    %y : f32[*], %i : i64[*] = MaxPool(%x) {kernel_shape = ints[3, 3], strides = ints[2, 2], ceil_mode = 1} origin "mp"
    %a : f32[*] = AveragePool(%x) {kernel_shape = ints[2, 2], auto_pad = "SAME_UPPER", strides = ints[3, 3]} origin "ap"
    %g : f32[*] = GlobalAveragePool(%x) origin "gap"
    output %y, %i, %a, %g
  })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(TypeOf(**g, "y"), "f32[N,C,16,?]");
  EXPECT_EQ(TypeOf(**g, "i"), "i64[N,C,16,?]");
  EXPECT_EQ(TypeOf(**g, "a"), "f32[N,C,11,?]");
  EXPECT_EQ(TypeOf(**g, "g"), "f32[N,C,1,1]");
}

}  // namespace
}  // namespace ottr::testing
