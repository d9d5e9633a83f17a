// group-gemms (passes/group_gemms.cc): IR text in, the pass, the printed IR compared with the
// expected; the cases where it must not fire (an epilogue, C, a product that reads another, two
// element types, a lone product); the same bits before and after on the CPU reference; and whole
// steps of the bundled MLP with and without the pass.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/fused_gemm.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "passes/fusion_passes.h"
#include "passes/memory_planner.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::PassRun;

PassRun RunGroup(const std::string& text) { return testing::RunPassOnText(passes::CreateGroupGemmsPass(), text); }

// A layer's data and weight gradients both read dY, made by the Relu before them: one node, in
// the products' order, each keeping its transposes and alpha; the MatMul of another layer ready
// at the same point joins them. The CPU reference runs each product as the Gemm kernel does, so
// the outputs are the same bits.
TEST(GroupGemmsTest, GroupsProductsReadyAtTheSamePoint) {
  PassRun r = RunGroup(R"(graph "g" {
  opset ai.onnx 17
  input %z : f32[64,32]
  input %w : f32[32,48]
  input %x : f32[64,48]
  input %v : f32[32,16]
  %dy : f32[64,32] = Relu(%z) origin "act"
  %dx : f32[64,48] = Gemm(%dy, %w) origin "fc/dx"
  %dw : f32[32,48] = Gemm(%dy, %x) {alpha = 0.5, transA = 1} origin "fc/dw"
  %p : f32[64,16] = MatMul(%dy, %v) origin "other"
  output %dx
  output %dw
  output %p
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %dy : f32[64,32] = Relu(%z) origin \"act\"\n"
            "  %dx : f32[64,48], %dw : f32[32,48], %p : f32[64,16] = ottr::GroupedGemm(%dy, %w, %dy, %x, %dy, %v) "
            "{alpha = floats[1.0, 0.5, 1.0], transA = ints[0, 1, 0], transB = ints[0, 0, 0]} origin \"fc/dx\"\n"
            "  output %dx, %dw, %p\n");
  EXPECT_TRUE(absl::StrContains(r.remarks, "grouped node 'fc/dx' (Gemm) + node 'fc/dw' (Gemm) + node 'other' (MatMul) "
                                           "-> ottr::GroupedGemm (3 products)"))
      << r.remarks;
  testing::ExpectSameOutputs(r, 7);
}

// An ottr::FusedGemm "none" (what fold-gemm-casts and the backward passes leave) and a Gemm with
// transB are plain products too.
TEST(GroupGemmsTest, TakesFusedGemmNoneAndTransposedB) {
  PassRun r = RunGroup(R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[16,24]
  input %b : f32[24,8]
  input %c : f32[40,24]
  %y0 : f32[16,8] = ottr::FusedGemm(%a, %b) {epilogue = "none"} origin "p0"
  %y1 : f32[16,40] = Gemm(%a, %c) {transB = 1} origin "p1"
  output %y0
  output %y1
})");
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            "  %y0 : f32[16,8], %y1 : f32[16,40] = ottr::GroupedGemm(%a, %b, %a, %c) {alpha = floats[1.0, 1.0], "
            "transA = ints[0, 0], transB = ints[0, 1]} origin \"p0\"\n"
            "  output %y0, %y1\n");
  testing::ExpectSameOutputs(r, 8);
}

// Nothing to group: an epilogue (a GEMM is fused or grouped), C, a product that reads another's
// output (ready after it, alone there), products of two element types at one point, and a lone
// product. Each says why.
TEST(GroupGemmsTest, DeclinesEpiloguesDependentProductsAndMixedTypes) {
  PassRun r = RunGroup(R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[16,24]
  input %b : f32[24,8]
  input %bias : f32[8]
  input %ah : bf16[16,24]
  input %bh : bf16[24,8]
  input %e : f32[8,4]
  %fused : f32[16,8] = ottr::FusedGemm(%a, %b, %bias) {epilogue = "bias"} origin "fused"
  %withc : f32[16,8] = Gemm(%a, %b, %bias) origin "withc"
  %first : f32[16,8] = Gemm(%a, %b) origin "first"
  %second : f32[16,4] = Gemm(%first, %e) origin "second"
  %half : bf16[16,8] = MatMul(%ah, %bh) origin "half"
  output %fused
  output %withc
  output %second
  output %half
})");
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'fused' (ottr.FusedGemm): it has the epilogue bias"))
      << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'withc' (Gemm): it adds C")) << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks,
                                "declined node 'first' (Gemm): no other plain product of its type is ready at the "
                                "same point (after the step's inputs)"))
      << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'second' (Gemm): no other plain product of its type is "
                                           "ready at the same point (after node 'first' (Gemm))"))
      << r.remarks;
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'half' (MatMul): no other plain product of its type"))
      << r.remarks;
}

// Nine products ready at one point: a node of kGroupedGemmMaxProducts (8) and one left over.
TEST(GroupGemmsTest, SplitsGroupsAtTheLargestNode) {
  std::string text = R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[8,8]
  input %b : f32[8,8]
)";
  for (int i = 0; i < 9; ++i) {
    text += "  %y" + std::to_string(i) + " : f32[8,8] = Gemm(%a, %b) {alpha = " + std::to_string(i + 1) +
            ".0} origin \"p" + std::to_string(i) + "\"\n";
  }
  for (int i = 0; i < 9; ++i) text += "  output %y" + std::to_string(i) + "\n";
  text += "}";
  PassRun r = RunGroup(text);
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(testing::CountOps(*r.after, ir::kGroupedGemmOp), 1);
  EXPECT_EQ(testing::CountOps(*r.after, "Gemm"), 1);
  EXPECT_TRUE(absl::StrContains(r.remarks, "declined node 'p8' (Gemm): left over after groups of 8")) << r.remarks;
  testing::ExpectSameOutputs(r, 9);
}

// The shape function refuses what a node cannot be, naming the product and the reason.
absl::Status InferText(const std::string& text) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  return ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
}

TEST(GroupGemmsTest, ShapeInferenceRejectsMismatches) {
  const absl::Status inner = InferText(R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[4,5]
  input %b : f32[6,3]
  %y0 : f32[4,3], %y1 : f32[4,3] = ottr::GroupedGemm(%a, %b, %a, %b) {alpha = floats[1, 1], transA = ints[0, 0], transB = ints[0, 0]}
  output %y0
  output %y1
})");
  EXPECT_TRUE(absl::StrContains(inner.message(), "product 0: inner dimensions differ: A f32[4,5] and B f32[6,3]"))
      << inner;
  const absl::Status entries = InferText(R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[4,5]
  input %b : f32[5,3]
  %y0 : f32[4,3], %y1 : f32[4,3] = ottr::GroupedGemm(%a, %b, %a, %b) {alpha = floats[1], transA = ints[0, 0], transB = ints[0, 0]}
  output %y0
  output %y1
})");
  EXPECT_TRUE(absl::StrContains(entries.message(), "(4 inputs, 2 outputs, 2 / 2 / 1 entries)")) << entries;
  const absl::Status types = InferText(R"(graph "g" {
  opset ai.onnx 17
  input %a : f32[4,5]
  input %b : f32[5,3]
  input %h : bf16[5,3]
  %y0 : f32[4,3], %y1 : f32[4,3] = ottr::GroupedGemm(%a, %b, %a, %h) {alpha = floats[1, 1], transA = ints[0, 0], transB = ints[0, 0]}
  output %y0
  output %y1
})");
  EXPECT_TRUE(absl::StrContains(types.message(), "product 1: A f32[4,5] and B bf16[5,3] must be static 2-D matrices"))
      << types;
}

// Whole steps of the bundled MLP without the epilogue passes (float32: each hidden layer's data
// and weight gradients are plain products that read the same ReLU backward's output) with and
// without the pass: the two deeper layers' pairs become GroupedGemm nodes (the first layer has no
// data gradient), the plan verifies, and three steps of Adam give the same loss and state bits on
// the CPU reference.
TEST(GroupGemmsTest, MlpStepsGiveTheSameBits) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.multi_tensor_updates = true;
  spec.group_gemms = true;
  std::ostringstream remarks;
  passes::PassManagerOptions options;
  options.remarks = &remarks;
  auto grouped = passes::BuildTrainingGraph(**forward, spec, options);
  spec.group_gemms = false;
  auto plain = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(grouped.ok() && plain.ok()) << grouped.status() << plain.status();
  EXPECT_EQ(testing::CountOps(**grouped, ir::kGroupedGemmOp), 2) << remarks.str();
  EXPECT_EQ(testing::CountOps(**plain, "Gemm") - testing::CountOps(**grouped, "Gemm"), 4);
  EXPECT_TRUE(absl::StrContains(remarks.str(), "group-gemms: grouped node 'fc3/grad' (Gemm) + node 'fc3/grad' (Gemm)"))
      << remarks.str();
  auto plan = passes::PlanMemory(**grouped);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(passes::VerifyPlan(**grouped, *plan).ok());

  auto a = runtime::cpu::CpuExecutor::Create(**plain);
  auto b = runtime::cpu::CpuExecutor::Create(**grouped);
  ASSERT_TRUE(a.ok() && b.ok());
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({16, 784}, 5, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({16}, 6, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-3f);
  for (int k = 0; k < 3; ++k) {
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "loss of step " << k;
  }
  ASSERT_EQ((*plain)->updates().size(), (*grouped)->updates().size());
  for (const ir::StateUpdate& u : (*plain)->updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_TRUE(x && y) << u.target->name();
    EXPECT_TRUE(x->BitwiseEquals(*y)) << u.target->name();
  }
}

}  // namespace
}  // namespace ottr
