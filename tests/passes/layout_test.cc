// nhwc-layout (passes/layout.cc): IR text in, the pass, the printed IR and remarks compared with
// the expected; the graph run before and after on the CPU reference (whose channels-last kernels
// transpose to channels-first and back, runtime/cpu/channels_last.h), where the forward values are
// the same bits (the same kernels on the same numbers) and a training step differs only in the
// summation order of the bias gradients (ReduceSum over another axis order: ≤ a few float32
// roundings, ~1e-6 relative). Where the pass must not fire the IR is unchanged and the remark
// says why.
#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/layout.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::RandomFeeds;
using testing::RunOnCpu;

testing::PassRun RunLayout(const std::string& text) {
  return testing::RunPassOnText(passes::CreateNhwcLayoutPass(), text);
}

constexpr char kConvReluPool[] = R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,10,10]
  input %w : f32[4,3,3,3]
  input %b : f32[4]
  input %w2 : f32[4,4,3,3]
  %c : f32[2,4,8,8] = Conv(%x, %w, %b) {kernel_shape = ints[3, 3]} origin "conv"
  %r : f32[2,4,8,8] = Relu(%c) origin "relu"
  %c2 : f32[2,4,8,8] = Conv(%r, %w2) {pads = ints[1, 1, 1, 1]} origin "conv2"
  %p : f32[2,4,4,4] = MaxPool(%c2) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool"
  %f : f32[2,64] = Flatten(%p) {axis = 1} origin "flatten"
  output %f
})";

TEST(NhwcLayoutTest, ConvReluPoolRunChannelsLastWithTransposesAtTheEdge) {
  testing::PassRun r = RunLayout(kConvReluPool);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %x.nhwc : f32[2,10,10,3] = Transpose(%x) {perm = ints[0, 2, 3, 1]} origin \"conv\"\n"
            "  %w.nhwc : f32[4,3,3,3] = Transpose(%w) {perm = ints[0, 2, 3, 1]} origin \"conv\"\n"
            "  %c.nhwc : f32[2,8,8,4] = ottr::Conv(%x.nhwc, %w.nhwc, %b) {kernel_shape = ints[3, 3], layout = "
            "\"NHWC\"} origin \"conv\"\n"
            "  %r.nhwc : f32[2,8,8,4] = Relu(%c.nhwc) origin \"relu\"\n"
            "  %w2.nhwc : f32[4,3,3,4] = Transpose(%w2) {perm = ints[0, 2, 3, 1]} origin \"conv2\"\n"
            "  %c2.nhwc : f32[2,8,8,4] = ottr::Conv(%r.nhwc, %w2.nhwc) {layout = \"NHWC\", pads = ints[1, 1, 1, 1]} "
            "origin \"conv2\"\n"
            "  %p.nhwc : f32[2,4,4,4] = ottr::MaxPool(%c2.nhwc) {kernel_shape = ints[2, 2], layout = \"NHWC\", strides "
            "= ints[2, 2]} origin \"pool\"\n"
            "  %p : f32[2,4,4,4] = Transpose(%p.nhwc) {perm = ints[0, 3, 1, 2]} origin \"pool\"\n"
            "  %f : f32[2,64] = Flatten(%p) {axis = 1} origin \"flatten\"\n"
            "  output %f\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "converted 4 nodes (2 convolutions) to channels-last; 2 activation "
                                           "tensors transposed at the edge"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 5);  // bit for bit: the same kernels on the same numbers
}

// A single-channel input moves a dim of size 1: a Reshape, not a Transpose.
TEST(NhwcLayoutTest, SingleChannelInputIsReshaped) {
  testing::PassRun r = RunLayout(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,1,9,9]
  input %w : f32[5,1,3,3]
  %c : f32[2,5,7,7] = Conv(%x, %w) {kernel_shape = ints[3, 3], pads = ints[0, 0, 0, 0]} origin "conv"
  %r : f32[2,5,7,7] = Relu(%c) origin "relu"
  output %r
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  const std::string body = IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(body, "%x.nhwc : f32[2,9,9,1] = Reshape(%x, %x.nhwc.shape)")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%w.nhwc : f32[5,3,3,1] = Reshape(%w, %w.nhwc.shape)")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%r : f32[2,5,7,7] = Transpose(%r.nhwc) {perm = ints[0, 3, 1, 2]}")) << body;
  testing::ExpectSameOutputs(r, 5);  // bit for bit: the same kernels on the same numbers
}

// Backward ops, an elementwise reader of two region values, and the bias gradient's ReduceSum
// (axes [0, 2, 3] -> [0, 1, 2]); the weight gradient leaves the region as OIHW.
TEST(NhwcLayoutTest, GradientsAndBiasReductionFollow) {
  testing::PassRun r = RunLayout(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,3,8,8]
  input %w : f32[6,3,3,3]
  input %dy : f32[2,6,8,8]
  %c : f32[2,6,8,8] = Conv(%x, %w) {kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1]} origin "conv"
  %d : f32[2,6,8,8] = ottr::ReluGrad(%dy, %c) origin "relu/grad"
  %dx : f32[2,3,8,8] = ottr::ConvGradInput(%d, %w) {input_shape = ints[2, 3, 8, 8], kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1]} origin "conv/grad"
  %dw : f32[6,3,3,3] = ottr::ConvGradFilter(%d, %x) {kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1]} origin "conv/grad"
  %axes : i64[3] = Constant() {value = tensor<i64[3] [0, 2, 3]>} origin "conv/grad"
  %db : f32[6] = ReduceSum(%d, %axes) {keepdims = 0} origin "conv/grad"
  output %dx
  output %dw
  output %db
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  const std::string body = IrBody(*r.after);
  EXPECT_TRUE(absl::StrContains(body, "%dy.nhwc : f32[2,8,8,6] = Transpose(%dy) {perm = ints[0, 2, 3, 1]}")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%d.nhwc : f32[2,8,8,6] = ottr::ReluGrad(%dy.nhwc, %c.nhwc)")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%axes.nhwc : i64[3] = Constant() {value = tensor<i64[3] [0, 1, 2]>}")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%db : f32[6] = ReduceSum(%d.nhwc, %axes.nhwc) {keepdims = 0}")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%dw.nhwc : f32[6,3,3,3] = ottr::ConvGradFilter(%d.nhwc, %x.nhwc)")) << body;
  EXPECT_TRUE(absl::StrContains(body, "%dw : f32[6,3,3,3] = Transpose(%dw.nhwc) {perm = ints[0, 3, 1, 2]}")) << body;
  EXPECT_FALSE(absl::StrContains(body, "%axes : i64[3]")) << "the old axes are dead\n" << body;
  // dx and dw are exact (same kernels, same numbers); db sums in another order.
  const runtime::TensorMap feeds = RandomFeeds(*r.before, 9);
  const std::vector<ir::Tensor> want = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> got = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].BitwiseEquals(want[0]));
  EXPECT_TRUE(got[1].BitwiseEquals(want[1]));
  ASSERT_EQ(got[2].dims(), want[2].dims());
  // 128 terms of magnitude ≤ ~5 summed in float32 in two orders: ≤ 2 · 127 · 2^-24 · Σ|terms|.
  for (int64_t i = 0; i < want[2].num_elements(); ++i) {
    EXPECT_NEAR(got[2].GetAsDouble(i), want[2].GetAsDouble(i), 2 * 127 * std::ldexp(1.0, -24) * 128 * 5) << i;
  }
}

TEST(NhwcLayoutTest, DeclinesWhatChannelsLastCannotRun) {
  // Asymmetric pads (cuDNN pads symmetrically), group 2, and a max pool whose Indices are read.
  testing::PassRun r = RunLayout(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,4,8,8]
  input %w : f32[4,4,3,3]
  input %wg : f32[4,2,3,3]
  %a : f32[2,4,7,7] = Conv(%x, %w) {kernel_shape = ints[3, 3], pads = ints[1, 1, 0, 0]} origin "asym"
  %g : f32[2,4,6,6] = Conv(%x, %wg) {group = 2, kernel_shape = ints[3, 3]} origin "grouped"
  %p : f32[2,4,4,4], %i : i64[2,4,4,4] = MaxPool(%x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool"
  output %a
  output %g
  output %p
  output %i
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'asym' (Conv): asymmetric padding on axis 0 (1 / 0")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'grouped' (Conv): group 2 (only group 1)")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'pool' (MaxPool): its Indices output is read")) << r.remarks;
}

// A convolution between two channels-first nodes it cannot take along (BatchNormalization) would
// transpose more activations than it has convolutions: the whole graph is left alone.
TEST(NhwcLayoutTest, DeclinesWhenTheEdgeCostsMoreThanTheConvolutions) {
  testing::PassRun r = RunLayout(R"(graph "g" {
  opset ai.onnx 17
  input %x : f32[2,4,8,8]
  input %w : f32[4,4,3,3]
  input %s : f32[4]
  input %bb : f32[4]
  input %m : f32[4]
  input %v : f32[4]
  %n : f32[2,4,8,8] = BatchNormalization(%x, %s, %bb, %m, %v) origin "bn"
  %c : f32[2,4,8,8] = Conv(%n, %w) {kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1]} origin "conv"
  %n2 : f32[2,4,8,8] = BatchNormalization(%c, %s, %bb, %m, %v) origin "bn2"
  output %n2
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined the graph: 2 activation tensors would be transposed at the "
                                           "region's edge for 1 convolutions"))
      << r.remarks;
}

// models/cnn's training step with and without the pass on the CPU reference: the loss and the
// weight gradients are the same bits, the bias gradients (ReduceSum in another order) agree to
// float32 summation error, and the step has its convolutions channels-last.
TEST(NhwcLayoutTest, CnnTrainingStepMatchesChannelsFirst) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/cnn/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto run = [&](bool channels_last, int* nhwc_nodes) {
    passes::TrainingSpec spec;
    spec.batch = 4;
    spec.expose_gradients = true;
    spec.fuse_epilogues = true;
    spec.channels_last = channels_last;
    auto step = passes::BuildTrainingGraph(**forward, spec);
    EXPECT_TRUE(step.ok()) << step.status();
    *nhwc_nodes = 0;
    for (const ir::Node* n : (*step)->nodes()) *nhwc_nodes += n->GetString("layout", "") == "NHWC";
    runtime::TensorMap feeds;
    feeds[(*forward)->inputs()[0]->name()] = testing::RandomFloat({4, 1, 28, 28}, 3, -1.0f, 1.0f);
    feeds[passes::kLabelsInput] = testing::RandomInt64({4}, 4, 0, 9);
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
    std::map<std::string, ir::Tensor> out;
    std::vector<ir::Tensor> values = RunOnCpu(**step, feeds);
    for (size_t i = 0; i < values.size(); ++i) out[(*step)->outputs()[i]->name()] = values[i];
    return out;
  };
  int first_nodes = 0, last_nodes = 0;
  const auto want = run(false, &first_nodes);
  const auto got = run(true, &last_nodes);
  EXPECT_EQ(first_nodes, 0);
  EXPECT_EQ(last_nodes, 7);  // 2 Conv, MaxPool, MaxPoolGrad, 1 ConvGradInput (conv2), 2 ConvGradFilter
  ASSERT_EQ(want.size(), got.size());
  ASSERT_GT(want.size(), 5u);
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    const ir::Tensor& g = got.at(name);
    ASSERT_EQ(g.dims(), w.dims()) << name;
    if (!absl::StrContains(name, "bias.grad") || absl::StrContains(name, "fc")) {
      EXPECT_TRUE(g.BitwiseEquals(w)) << name;
      continue;
    }
    double err = 0, norm = 0;
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      err = std::max(err, std::abs(g.GetAsDouble(i) - w.GetAsDouble(i)));
      norm = std::max(norm, std::abs(w.GetAsDouble(i)));
    }
    // 4·26·26 = 2704 terms: float32 summation in two orders differs by ≤ ~n·2^-24 relative to
    // Σ|terms|; in practice ≤ 1e-5 of the largest element.
    EXPECT_LE(err, 1e-5 * std::max(norm, 1e-3)) << name;
  }
}

}  // namespace
}  // namespace ottr
