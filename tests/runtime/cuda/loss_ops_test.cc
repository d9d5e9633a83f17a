// Tests of the CUDA softmax-family and classification-loss ops (runtime/cuda/loss_ops.cc,
// kernels/softmax_kernels.cu, kernels/loss_kernels.cu) against the CPU reference, on the shapes
// that select each kernel layout: rows of 1..1024 in registers (4..32 lanes per row), rows of
// more than 1024 (one block per row), a non-last axis (one thread per column), one-block and
// multi-block (partials + final sum) loss reductions. Skipped without a device.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/fused_gemm.h"
#include "tests/runtime/cuda/norm_loss_cuda_test_util.h"

namespace ottr::testing::norm_loss_cuda {
namespace {

using ir::Attribute;
using ir::DType;
using ir::Tensor;

const std::string kOttr(ir::kOttrDomain);

// Softmax / LogSoftmax / Hardmax and the backward ops over every layout and float type.
TEST(CudaLossOpsTest, SoftmaxFamilyMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct Shape {
    std::vector<int64_t> dims;
    int64_t axis;
  };
  const std::vector<Shape> shapes = {{{37, 3}, -1},     {{37, 10}, -1},      {{5, 3, 33}, -1}, {{9, 300}, 1},
                                     {{4, 1024}, -1},   {{3, 2500}, -1},     {{3, 7, 5}, 1},   {{2, 3, 4}, 0},
                                     {{1, 1}, 0},       {{6, 1}, -1},        {{0, 5}, -1}};
  int seed = 1;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : t == DType::kFloat64 ? 1e-12 : 1e-2;
    for (const Shape& s : shapes) {
      SCOPED_TRACE(absl::StrCat(ir::DTypeName(t), " ", s.dims.size(), "-D axis ", s.axis));
      const Attrs axis = {{"axis", Attribute(s.axis)}};
      const Tensor x = RandomOf(t, s.dims, ++seed, -4.0, 4.0);
      for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
        Case c{op, {In(x)}, axis};
        c.rtol = tol;
        c.atol = tol;
        ExpectMatchesCpu(c);
      }
      const Tensor dy = RandomOf(t, s.dims, ++seed);
      const Tensor y = RandomOf(t, s.dims, ++seed, 0.0, 1.0);
      const Tensor logy = RandomOf(t, s.dims, ++seed, -5.0, 0.0);
      Case g{"SoftmaxGrad", {In(dy), In(y)}, axis, 1, kOttr};
      g.rtol = g.atol = tol;
      ExpectMatchesCpu(g);
      Case lg{"LogSoftmaxGrad", {In(dy), In(logy)}, axis, 1, kOttr};
      lg.rtol = lg.atol = tol;
      ExpectMatchesCpu(lg);
    }
  }
}

// Hardmax picks the first maximum among ties (integer-valued inputs make ties common).
TEST(CudaLossOpsTest, HardmaxBreaksTiesLikeCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{64, 7}, {8, 100}, {3, 2000}, {4, 6, 3}}) {
    Tensor x = RandomOf(DType::kFloat32, dims, 7, 0.0, 3.0);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = std::floor(x.data<float>()[i]);
    for (int64_t axis : {int64_t{-1}, int64_t{1}}) {
      Case c{"Hardmax", {In(x)}, {{"axis", Attribute(axis)}}};
      c.rtol = c.atol = 0.0;
      ExpectMatchesCpu(c);
    }
  }
}

TEST(CudaLossOpsTest, SoftmaxOfOneDimensionalInput) {
  OTTR_REQUIRE_CUDA_DEVICE();
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    ExpectMatchesCpu(Case{op, {In(RandomOf(DType::kFloat32, {5}, 3))}, {{"axis", Attribute(int64_t{0})}}});
  }
}

// ottr::SoftmaxCrossEntropy and its gradient: single-block and multi-block reductions, C up to
// and over 1024, ignored rows, label smoothing, int32 labels, float64.
struct Sce {
  int64_t n, c;
  float smoothing;
  bool int32;
  DType t;
};

// Single-block and multi-block reductions (the warp kernel), C over 1024 (the block kernel),
// smoothing, int32 labels, float64; `big` is one more row shape (the SCE tests differ there).
std::vector<Sce> SceCases(Sce big) {
  return {{128, 10, 0.0f, false, DType::kFloat32}, {128, 10, 0.1f, true, DType::kFloat32},
          big,                                     {300, 1000, 0.05f, false, DType::kFloat32},
          {7, 3000, 0.0f, false, DType::kFloat32}, {40, 3000, 0.2f, false, DType::kFloat32},
          {50, 3, 0.0f, true, DType::kFloat64},    {33000, 5, 0.0f, false, DType::kFloat32}};
}

TEST(CudaLossOpsTest, SoftmaxCrossEntropyMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 100;
  for (const Sce& s : SceCases({4096, 10, 0.0f, false, DType::kFloat32})) {
    SCOPED_TRACE(absl::StrCat("N=", s.n, " C=", s.c, " eps=", s.smoothing));
    const Tensor logits = RandomOf(s.t, {s.n, s.c}, ++seed, -5.0, 5.0);
    // Labels in [-1, C): -1 is the ignore_index here, about 1 in C+1 rows.
    const Tensor labels = Labels({s.n}, ++seed, -1, s.c - 1, s.int32);
    const Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})}, {"label_smoothing", Attribute(s.smoothing)}};
    Case f{"SoftmaxCrossEntropy", {In(logits), In(labels)}, attrs, 2, kOttr};
    f.rtol = 1e-5;
    f.atol = 1e-6;
    ExpectMatchesCpu(f);
    Case loss_only = f;
    loss_only.unread_outputs = {1};
    ExpectMatchesCpu(loss_only);
    const Tensor lp = RandomOf(s.t, {s.n, s.c}, ++seed, -6.0, -0.01);
    const Tensor dloss = s.t == DType::kFloat64 ? ScalarOf<double>(0.75) : ScalarOf<float>(0.75f);
    Case b{"SoftmaxCrossEntropyGrad", {In(dloss), In(lp), In(labels)}, attrs, 1, kOttr};
    b.rtol = 1e-5;
    b.atol = 1e-8;
    ExpectMatchesCpu(b);
  }
}

// ottr::SoftmaxCrossEntropyWithGrad (fuse-sce-grad) over the same shapes, with dlogits in the
// logits' type and, for float32 logits, in bf16 and f16 (the folded Cast). Bounds: the loss and
// float32 dlogits as the unfused ops above (1e-5 relative: exp and log in double on both sides,
// log_prob rounded to float32 once); a 16-bit dlogits is the float32 value rounded once more, so
// a float32 difference at a rounding boundary may move it by one unit of the 16-bit type: up to
// 2^-7 of the value in bf16 (7 stored significand bits; the unit is 2^-7 relative at the bottom
// of a binade), 2^-10 in f16.
TEST(CudaLossOpsTest, SoftmaxCrossEntropyWithGradMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 700;
  // The MLP 4096x4's loss shape besides the common cases.
  for (const Sce& s : SceCases({4096, 1000, 0.0f, false, DType::kFloat32})) {
    std::vector<DType> grad_types = {s.t};
    if (s.t == DType::kFloat32) grad_types = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
    for (DType g : grad_types) {
      SCOPED_TRACE(absl::StrCat("N=", s.n, " C=", s.c, " eps=", s.smoothing, " dlogits ", ir::DTypeName(g)));
      const Tensor logits = RandomOf(s.t, {s.n, s.c}, ++seed, -5.0, 5.0);
      const Tensor labels = Labels({s.n}, ++seed, -1, s.c - 1, s.int32);
      const Tensor dloss = s.t == DType::kFloat64 ? ScalarOf<double>(0.75) : ScalarOf<float>(0.75f);
      Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})}, {"label_smoothing", Attribute(s.smoothing)}};
      if (g != s.t) attrs["grad_type"] = Attribute(static_cast<int64_t>(ir::DTypeToOnnx(g)));
      Case f{"SoftmaxCrossEntropyWithGrad", {In(logits), In(labels), In(dloss)}, attrs, 2, kOttr};
      f.rtol = g == DType::kBFloat16 ? std::ldexp(1.0, -7) : g == DType::kFloat16 ? std::ldexp(1.0, -10) : 1e-5;
      f.atol = 1e-8;
      ExpectMatchesCpu(f);
      Case loss_only = f;
      loss_only.unread_outputs = {1};
      ExpectMatchesCpu(loss_only);
    }
  }
}

// {classes = K}: the loss over the first K columns of padded rows (pad-gemm-dims' Slice folded),
// dlogits as wide with zeros past K, in one block, in a multi-block grid (the one-launch
// cooperative path), and in the block kernel (K > 1024). Bounds as above.
TEST(CudaLossOpsTest, SoftmaxCrossEntropyWithGradOverPaddedRows) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 900;
  struct Padded {
    int64_t n, width, classes;
  };
  for (const Padded& p : std::vector<Padded>{{128, 12, 10}, {8192, 12, 10}, {300, 1008, 1000}, {40, 3008, 3000}}) {
    for (DType g : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(absl::StrCat("N=", p.n, " width ", p.width, " classes ", p.classes, " dlogits ", ir::DTypeName(g)));
      const Tensor logits = RandomOf(DType::kFloat32, {p.n, p.width}, ++seed, -5.0, 5.0);
      const Tensor labels = Labels({p.n}, ++seed, -1, p.classes - 1, false);
      Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})}, {"classes", Attribute(p.classes)}};
      if (g != DType::kFloat32) attrs["grad_type"] = Attribute(static_cast<int64_t>(ir::DTypeToOnnx(g)));
      Case f{"SoftmaxCrossEntropyWithGrad", {In(logits), In(labels), In(ScalarOf<float>(0.75f))}, attrs, 2, kOttr};
      f.rtol = g == DType::kBFloat16 ? std::ldexp(1.0, -7) : 1e-5;
      f.atol = 1e-8;
      ExpectMatchesCpu(f);
      auto got = RunCuda(f, 1);
      ASSERT_TRUE(got.ok()) << got.status();
      const Tensor& d = (*got)[0][1];
      int64_t nonzero_pad = 0;
      for (int64_t i = 0; i < p.n; ++i) {
        for (int64_t j = p.classes; j < p.width; ++j) nonzero_pad += d.GetAsDouble(i * p.width + j) != 0.0;
      }
      EXPECT_EQ(nonzero_pad, 0);  // poisoned before the kernel: a column it skipped would be NaN
      Case loss_only = f;
      loss_only.unread_outputs = {1};
      ExpectMatchesCpu(loss_only);
    }
  }
}

// The third output (fuse-sce-bgrad): dbias[j] = Σ_i dlogits[i, j], summed by the loss kernel, in
// one block (warp rows, 4 and 16 lanes), in the cooperative grid (warp rows of 16 and 32x32
// lanes: the MLP 4096x4's [4096, 1000]), and in the block kernel (rows of more than 1024) with
// one and with several blocks; padded rows ({classes}) and ignored labels included. The loss and
// dlogits as above. dbias against the CPU: a lane adds at most 32 of its rows' gradients in
// float32 (4 passes of a one-block grid times 8 row groups of 4 lanes) before the double sums, so
// its error is at most 32 u Σ_i |d_ij| (u = 2^-24) beyond that of dlogits (1e-5 relative each,
// so 1e-5 Σ_i |d_ij|), plus one rounding of the result (2^-24 |want|, doubled for the CPU's).
// Each output is poisoned before the kernel runs (the executor's NaN fill), and two replays
// give the same bits.
// dbias (`got`) against the CPU's (`want`) from the CPU's dlogits `d` [n, width]: the bound above;
// columns from `classes` on are padding, exactly zero.
void ExpectColumnSumsMatch(const Tensor& d, const Tensor& want, const Tensor& got, int64_t classes) {
  const int64_t n = d.dim(0), width = d.dim(1);
  ASSERT_EQ(got.num_elements(), width);
  int bad = 0;
  double largest = 0;
  for (int64_t j = 0; j < width; ++j) {
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::abs(d.GetAsDouble(i * width + j));
    const double w = want.GetAsDouble(j), v = got.GetAsDouble(j);
    const double bound = (1e-5 + 32 * std::ldexp(1.0, -24)) * mag + std::ldexp(1.0, -23) * std::abs(w);
    if (!(std::abs(v - w) <= bound) && bad++ < 5) {
      ADD_FAILURE() << "dbias[" << j << "] = " << v << ", CPU " << w << ", bound " << bound;
    }
    if (j >= classes) {
      EXPECT_EQ(v, 0.0) << "padding column " << j;
    }
    largest = std::max(largest, std::abs(w));
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(largest, 0.0);
}

TEST(CudaLossOpsTest, SoftmaxCrossEntropyWithGradSumsTheColumns) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 1300;
  struct Shape {
    int64_t n, width, classes;
  };
  for (const Shape& p : std::vector<Shape>{{128, 12, 10},
                                           {100, 3, 3},
                                           {8192, 12, 10},
                                           {4096, 1000, 1000},
                                           {300, 1008, 1000},
                                           {40, 3008, 3000},
                                           {3, 2000, 2000}}) {
    SCOPED_TRACE(absl::StrCat("N=", p.n, " width ", p.width, " classes ", p.classes));
    const Tensor logits = RandomOf(DType::kFloat32, {p.n, p.width}, ++seed, -5.0, 5.0);
    const Tensor labels = Labels({p.n}, ++seed, -1, p.classes - 1, false);
    Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})}, {"label_smoothing", Attribute(0.05f)}};
    if (p.classes != p.width) attrs["classes"] = Attribute(p.classes);
    Case f{"SoftmaxCrossEntropyWithGrad", {In(logits), In(labels), In(ScalarOf<float>(0.75f))}, attrs, 3, kOttr};
    runtime::TensorMap feeds;
    auto g = BuildGraph(f, &feeds);
    ASSERT_TRUE(g.ok()) << g.status();
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto want = (*cpu)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = RunCuda(f, 2);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<Tensor>& out = (*got)[0];
    ASSERT_EQ(out.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE((*got)[1][i].BitwiseEquals(out[i])) << "output " << i << " differs between two replays";
    }
    for (size_t i = 0; i < 2; ++i) {
      const absl::Status st = runtime::AllClose(out[i], (*want)[i], 1e-5, 1e-8);
      EXPECT_TRUE(st.ok()) << "output " << i << ": " << st;
    }
    ExpectColumnSumsMatch((*want)[1], (*want)[2], out[2], p.classes);
  }
}

// ottr::CountLabels, and ottr::SoftmaxCrossEntropyWithGrad reading that count (count-labels-early:
// its fourth input) instead of counting the labels in its grid: one block, the multi-block warp
// grid (no longer cooperative), the block kernel (rows of more than 1024), with and without the
// column sums (still cooperative for those). The count is exact (CountLabels against the CPU's,
// int32 and int64 labels, some ignored); the loss, dlogits and the column sums against the CPU
// with the bounds above (the CPU checks the count it is given against the labels); and dlogits
// bit for bit those of the same node without the count: both take dloss / count in double from
// the same integer count, and each row's terms are the same code. Outputs poisoned first (the
// executor's NaN fill), two replays bitwise equal.
TEST(CudaLossOpsTest, SoftmaxCrossEntropyWithGradReadsTheLabelsCount) {
  OTTR_REQUIRE_CUDA_DEVICE();
  int seed = 1700;
  for (const bool int32 : {false, true}) {
    for (const int64_t n : {1, 100, 1000, 8192, 70000}) {
      SCOPED_TRACE(absl::StrCat("CountLabels of ", n, int32 ? " int32" : " int64", " labels"));
      // -1 is ignored (1 in 13); -3 and -2 are counted (CountLabels checks no range).
      const Tensor labels = Labels({n}, ++seed, -3, 9, int32);
      Case c{"CountLabels", {In(labels)}, {{"ignore_index", Attribute(int64_t{-1})}}, 1, kOttr};
      c.rtol = 0;
      c.atol = 0;
      ExpectMatchesCpu(c);
    }
  }
  struct Shape {
    int64_t n, width, classes;
    bool col_sums;
  };
  for (const Shape& p : std::vector<Shape>{{128, 12, 10, false},
                                           {8192, 12, 10, false},
                                           {8192, 12, 10, true},
                                           {4096, 1000, 1000, true},
                                           {4096, 1000, 1000, false},
                                           {300, 1008, 1000, false},
                                           {40, 3008, 3000, true}}) {
    SCOPED_TRACE(absl::StrCat("N=", p.n, " width ", p.width, " classes ", p.classes, p.col_sums ? " column sums" : ""));
    const Tensor logits = RandomOf(DType::kFloat32, {p.n, p.width}, ++seed, -5.0, 5.0);
    const Tensor labels = Labels({p.n}, ++seed, -1, p.classes - 1, false);
    int64_t kept = 0;
    for (int64_t i = 0; i < p.n; ++i) kept += labels.data<int64_t>()[i] != -1;
    Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})}, {"label_smoothing", Attribute(0.05f)}};
    if (p.classes != p.width) attrs["classes"] = Attribute(p.classes);
    const int outs = p.col_sums ? 3 : 2;
    Case counted{"SoftmaxCrossEntropyWithGrad",
                 {In(logits), In(labels), In(ScalarOf<float>(0.75f)), In(ScalarOf<int64_t>(kept))}, attrs, outs, kOttr};
    counted.atol = 1e-8;
    runtime::TensorMap feeds;
    auto g = BuildGraph(counted, &feeds);
    ASSERT_TRUE(g.ok()) << g.status();
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto want = (*cpu)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    Case self{"SoftmaxCrossEntropyWithGrad", {In(logits), In(labels), In(ScalarOf<float>(0.75f))}, attrs, outs, kOttr};
    auto a = RunCuda(counted, 2);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = RunCuda(self, 1);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE((*a)[0][1].BitwiseEquals((*b)[0][1])) << "dlogits with the count differ from those counted in the grid";
    for (int i = 0; i < outs; ++i) {
      EXPECT_TRUE((*a)[1][i].BitwiseEquals((*a)[0][i])) << "output " << i << " differs between two replays";
    }
    for (int i = 0; i < 2; ++i) {
      const absl::Status st = runtime::AllClose((*a)[0][i], (*want)[i], 1e-5, 1e-8);
      EXPECT_TRUE(st.ok()) << "output " << i << " against the CPU: " << st;
    }
    if (p.col_sums) ExpectColumnSumsMatch((*want)[1], (*want)[2], (*a)[0][2], p.classes);
  }
}

// ottr::LinearSoftmaxCrossEntropyWithGrad (fuse-linear-sce) against the CPU reference on the
// shapes that pick each launch: the MLP's classifier at batch 128 (a block per row,
// LinearSceRowKernel, each counting the labels itself), batch 8192 (a cooperative grid, warps
// looping over rows), 4099 rows of 32 classes (a lane per class, int32 labels, the last block
// partly empty), a [K, C] weight with K % 4 != 0 and no mask (element copies), a single row (one
// block), 2000 rows (cooperative), and a block per row in two passes over K.
// Tolerances: the GPU adds each logit's K products in float32 FMA (32 lanes, then a
// reduce-scatter; a block per row: then its 4 warps), the CPU in its own order, so each logit
// differs by at most 2 K u S (u = 2^-24, S = max over classes of sum_k |x_k W(j, k)|, the
// accumulated error of both orders); the softmax is 1-Lipschitz per entry in the max norm of the
// logits, so each p_ij by at most 2 dz (then scaled by dloss / count into dlogits), and the loss
// by 2 dz; dx_ik = sum_j dlogits_ij W(j, k) adds the dlogits error times sum_j |W(j, k)| and
// C u sum_j |dlogits_ij W(j, k)| of its own rounding. Each bound gets the CPU reference's 1e-5
// relative of the SCE kernels on top. Outputs are poisoned by the executor before the kernel
// runs, and two replays must give the same bits.
TEST(CudaLossOpsTest, LinearSoftmaxCrossEntropyWithGradMatchesCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  enum Act { kNoAct, kMask, kReluX };
  struct Shape {
    int64_t n, k, c;
    bool trans_b;
    Act act;
    bool bias;
    int64_t pad = 0;    // padded classifier columns past the c classes ({classes = c})
    bool sums = false;  // the column sums of dx (output 3)
  };
  int seed = 1500;
  const double u = std::ldexp(1.0, -24);
  for (const Shape& p : std::vector<Shape>{{128, 512, 10, true, kMask, true},
                                           {8192, 512, 10, true, kMask, true},
                                           {4099, 64, 32, true, kMask, false},
                                           {37, 30, 17, false, kNoAct, true},
                                           {1, 20, 3, true, kMask, true},
                                           {2000, 128, 5, true, kNoAct, true},
                                           // the small MLP's head at batch 8192 (12 columns)
                                           {8192, 512, 10, true, kReluX, true, 2, true},
                                           {128, 512, 10, true, kReluX, true, 2, true},
                                           {1, 20, 3, true, kReluX, true, 1, true},
                                           {37, 30, 17, false, kReluX, true, 3, false},
                                           {2000, 100, 7, true, kReluX, false, 1, true},
                                           // a block per row: two passes of 512 columns (the
                                           // second partial), 16 classes; no activation, padded
                                           {300, 1000, 16, true, kReluX, false},
                                           {64, 512, 10, true, kNoAct, true, 2}}) {
    const int64_t ldc = p.c + p.pad;
    SCOPED_TRACE(absl::StrCat("N=", p.n, " K=", p.k, " C=", p.c, " of ", ldc, " transB ", p.trans_b, " act ", p.act,
                              " bias ", p.bias, " sums ", p.sums));
    // x <= 0 in about a third of the entries where dx goes through x's ReLU.
    const Tensor x = RandomOf(DType::kFloat32, {p.n, p.k}, ++seed, p.act == kReluX ? -1.0 : 0.0, 2.0);
    const std::vector<int64_t> w_dims = p.trans_b ? std::vector<int64_t>{ldc, p.k} : std::vector<int64_t>{p.k, ldc};
    const Tensor w = RandomOf(DType::kFloat32, w_dims, ++seed, -0.2, 0.2);
    const Tensor b = RandomOf(DType::kFloat32, {ldc}, ++seed, -0.5, 0.5);
    const Tensor labels = Labels({p.n}, ++seed, -1, p.c - 1, p.n % 2 == 1);
    const Tensor mask = RandomOf(DType::kUInt8, {p.n, ir::ReluMaskRowBytes(p.k)}, ++seed, 0.0, 255.9);
    const float dloss = 0.75f;
    Attrs attrs = {{"ignore_index", Attribute(int64_t{-1})},
                   {"label_smoothing", Attribute(0.05f)},
                   {"transB", Attribute(int64_t{p.trans_b ? 1 : 0})}};
    if (p.pad > 0) attrs["classes"] = Attribute(p.c);
    if (p.act == kReluX) attrs["relu_x"] = Attribute(int64_t{1});
    std::vector<Input> ins = {In(x), In(w), p.bias ? In(b) : Omitted(), In(labels), In(ScalarOf<float>(dloss))};
    if (p.act == kMask) ins.push_back(In(mask));
    const size_t outs = p.sums ? 4 : 3;
    Case f{"LinearSoftmaxCrossEntropyWithGrad", ins, attrs, static_cast<int>(outs), kOttr};
    runtime::TensorMap feeds;
    auto g = BuildGraph(f, &feeds);
    ASSERT_TRUE(g.ok()) << g.status();
    auto cpu = runtime::cpu::CpuExecutor::Create(**g);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto want = (*cpu)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = RunCuda(f, 2);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<Tensor>& out = (*got)[0];
    ASSERT_EQ(out.size(), outs);
    for (size_t i = 0; i < outs; ++i) {
      EXPECT_TRUE((*got)[1][i].BitwiseEquals(out[i])) << "output " << i << " differs between two replays";
    }
    auto wat = [&](int64_t j, int64_t kk) { return w.data<float>()[p.trans_b ? j * p.k + kk : kk * ldc + j]; };
    int64_t count = 0;
    for (int64_t i = 0; i < p.n; ++i) count += labels.GetAsDouble(i) != -1 ? 1 : 0;
    const double scale = dloss / static_cast<double>(count);
    std::vector<double> wsum(p.k, 0.0);  // sum_j |W(j, k)| over the classes
    for (int64_t kk = 0; kk < p.k; ++kk) {
      for (int64_t j = 0; j < p.c; ++j) wsum[kk] += std::abs(wat(j, kk));
    }
    const Tensor& d = (*want)[1];
    const Tensor& dx = (*want)[2];
    double max_dz = 0;
    int bad = 0;
    double dx_mag = 0;
    int64_t relu_cleared = 0;
    std::vector<double> sum_bound(p.k, 0.0), sum_abs(p.k, 0.0);  // per column of dx
    for (int64_t i = 0; i < p.n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < p.c; ++j) {
        double sj = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) sj += std::abs(x.data<float>()[i * p.k + kk] * wat(j, kk));
        s = std::max(s, sj);
      }
      const double dz = 2 * p.k * u * s;
      max_dz = std::max(max_dz, dz);
      const bool ignored = labels.GetAsDouble(i) == -1;
      double dd_max = 0;
      for (int64_t j = 0; j < ldc; ++j) {
        const double want_d = d.GetAsDouble(i * ldc + j), got_d = out[1].GetAsDouble(i * ldc + j);
        if (j >= p.c) {
          EXPECT_EQ(got_d, 0.0) << "dlogits[" << i << ", " << j << "], a padded column";
          continue;
        }
        const double bound = ignored ? 0.0 : scale * 2 * dz + 1e-5 * std::abs(want_d) + 1e-8;
        dd_max = std::max(dd_max, bound);
        if (!(std::abs(got_d - want_d) <= bound) && bad++ < 5) {
          ADD_FAILURE() << "dlogits[" << i << ", " << j << "] = " << got_d << ", CPU " << want_d << ", bound " << bound;
        }
      }
      for (int64_t kk = 0; kk < p.k; ++kk) {
        double own = 0;
        for (int64_t j = 0; j < p.c; ++j) own += std::abs(d.GetAsDouble(i * ldc + j) * wat(j, kk));
        const double want_x = dx.GetAsDouble(i * p.k + kk), got_x = out[2].GetAsDouble(i * p.k + kk);
        const double bound = dd_max * wsum[kk] + 2 * p.c * u * own + 1e-5 * std::abs(want_x) + 1e-9;
        dx_mag += std::abs(want_x);
        sum_bound[kk] += bound;
        sum_abs[kk] += std::abs(want_x) + bound;
        if (!(std::abs(got_x - want_x) <= bound) && bad++ < 5) {
          ADD_FAILURE() << "dx[" << i << ", " << kk << "] = " << got_x << ", CPU " << want_x << ", bound " << bound;
        }
        if (p.act == kMask && !((mask.data<uint8_t>()[i * ir::ReluMaskRowBytes(p.k) + kk / 8] >> (kk % 8)) & 1u)) {
          EXPECT_EQ(got_x, 0.0) << "dx[" << i << ", " << kk << "] under a clear mask bit";
        }
        if (p.act == kReluX && !(x.data<float>()[i * p.k + kk] > 0.0f)) {
          ++relu_cleared;
          EXPECT_EQ(got_x, 0.0) << "dx[" << i << ", " << kk << "] where x <= 0";
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(dx_mag, 0.0);
    if (p.act == kReluX) {
      EXPECT_GT(relu_cleared, p.n * p.k / 5);
    }
    if (p.sums) {
      // The column sums: each dx error carried into its column, plus float32 sums over at most
      // n rows per warp (n·u of the column's absolute sum), then double.
      const Tensor& db = (*want)[3];
      double db_mag = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double want_s = db.GetAsDouble(kk), got_s = out[3].GetAsDouble(kk);
        const double bound = sum_bound[kk] + p.n * u * sum_abs[kk] + 1e-9;
        db_mag += std::abs(want_s);
        if (!(std::abs(got_s - want_s) <= bound) && bad++ < 10) {
          ADD_FAILURE() << "dbias[" << kk << "] = " << got_s << ", CPU " << want_s << ", bound " << bound;
        }
      }
      EXPECT_GT(db_mag, 0.0);
    }
    const double want_loss = (*want)[0].GetAsDouble(0), got_loss = out[0].GetAsDouble(0);
    EXPECT_NEAR(got_loss, want_loss, 2 * max_dz + 1e-5 * std::abs(want_loss));
    EXPECT_GT(want_loss, 0.0);
  }
}

// Every row ignored: the mean is 0/0 = NaN on both.
TEST(CudaLossOpsTest, SoftmaxCrossEntropyAllIgnoredIsNan) {
  OTTR_REQUIRE_CUDA_DEVICE();
  Tensor labels = Labels({6}, 1, -100, -100);
  Case f{"SoftmaxCrossEntropy", {In(RandomOf(DType::kFloat32, {6, 4}, 2)), In(labels)}, {}, 2, kOttr};
  ExpectMatchesCpu(f);
}

// An out-of-range label cannot raise an error on the device: the loss becomes NaN.
TEST(CudaLossOpsTest, SoftmaxCrossEntropyBadLabelGivesNan) {
  OTTR_REQUIRE_CUDA_DEVICE();
  Tensor labels = Labels({5}, 1, 0, 3);
  labels.data<int64_t>()[2] = 9;
  Case f{"SoftmaxCrossEntropy", {In(RandomOf(DType::kFloat32, {5, 4}, 2)), In(labels)}, {}, 1, kOttr};
  auto got = RunCuda(f, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(std::isnan((*got)[0][0].data<float>()[0]));
}

// ONNX SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss over reductions, weights,
// ignore_index and N-d inputs, and their ottr backward ops (with the weights gradient).
TEST(CudaLossOpsTest, ClassificationLossesMatchCpu) {
  OTTR_REQUIRE_CUDA_DEVICE();
  struct Shape {
    std::vector<int64_t> dims;  // [N, C, d...]
  };
  const std::vector<Shape> shapes = {{{8, 5}}, {{3, 5, 2, 4}}, {{2, 7, 9}}, {{40, 3, 500}}, {{300, 10}}};
  int seed = 300;
  for (const Shape& s : shapes) {
    std::vector<int64_t> ldims = s.dims;
    const int64_t c = ldims[1];
    ldims.erase(ldims.begin() + 1);
    const Tensor x = RandomOf(DType::kFloat32, s.dims, ++seed, -3.0, 3.0);
    const Tensor logp = RandomOf(DType::kFloat32, s.dims, ++seed, -5.0, -0.01);
    const Tensor weights = RandomOf(DType::kFloat32, {c}, ++seed, 0.1, 2.0);
    const Tensor labels = Labels(ldims, ++seed, 0, c - 1);
    for (const char* reduction : {"mean", "sum", "none"}) {
      for (bool use_weights : {false, true}) {
        for (bool ignore : {false, true}) {
          SCOPED_TRACE(absl::StrCat(s.dims.size(), "-D reduction ", reduction, use_weights ? " weights" : "",
                                    ignore ? " ignore_index" : ""));
          Attrs attrs = {{"reduction", Attribute(std::string(reduction))}};
          if (ignore) attrs["ignore_index"] = Attribute(int64_t{1});
          std::vector<Input> ins = {In(x), In(labels)};
          if (use_weights) ins.push_back(In(weights));
          Case sce{"SoftmaxCrossEntropyLoss", ins, attrs, 2};
          ExpectMatchesCpu(sce);
          ins[0] = In(logp);
          Case nll{"NegativeLogLikelihoodLoss", ins, attrs, 1};
          ExpectMatchesCpu(nll);
          // Backward: dloss shaped like the loss.
          const bool none = std::string(reduction) == "none";
          const Tensor dloss = none ? RandomOf(DType::kFloat32, ldims, ++seed) : ScalarOf<float>(1.25f);
          std::vector<Input> gins = {In(dloss), In(logp), In(labels)};
          if (use_weights) gins.push_back(In(weights));
          for (const char* op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
            Case g{op, gins, attrs, use_weights ? 2 : 1, kOttr};
            g.atol = 1e-6;
            g.rtol = 1e-5;
            ExpectMatchesCpu(g);
          }
        }
      }
    }
  }
}

// Large position counts take the multi-block reduction path.
TEST(CudaLossOpsTest, NllLossLargeReduction) {
  OTTR_REQUIRE_CUDA_DEVICE();
  const Tensor logp = RandomOf(DType::kFloat32, {4, 6, 9000}, 5, -5.0, -0.01);
  const Tensor labels = Labels({4, 9000}, 6, 0, 5);
  for (const char* reduction : {"mean", "sum"}) {
    Case nll{"NegativeLogLikelihoodLoss", {In(logp), In(labels)}, {{"reduction", Attribute(std::string(reduction))}}};
    nll.rtol = 1e-5;
    ExpectMatchesCpu(nll);
  }
}

TEST(CudaLossOpsTest, LossRejectsBadShapes) {
  OTTR_REQUIRE_CUDA_DEVICE();
  // Labels that do not match the scores pass shape inference only when dims are unknown, so
  // check the CUDA compile-time validation through the gradient op, whose shape function does
  // not look at the labels.
  Case g{"NegativeLogLikelihoodLossGrad",
         {In(ScalarOf<float>(1.0f)), In(RandomOf(DType::kFloat32, {4, 3}, 1)), In(Labels({5}, 2, 0, 2))},
         {},
         1,
         kOttr};
  ExpectCudaRejects(g, absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ottr::testing::norm_loss_cuda
