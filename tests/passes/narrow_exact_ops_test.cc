// narrow-exact-ops (passes/narrow_exact_ops.cc): IR text in, the pass, the printed IR compared
// with the expected; cases where it must not fire; and bf16 / fp16 training steps of models/mlp
// and models/cnn on the CPU reference with and without the pass, which must give the same bits
// (the narrowed ops are selects and copies, exact in any float type) while removing Casts.
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/verifier.h"
#include "passes/fusion_passes.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/pass_test_util.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using testing::IrBody;
using testing::ParseInferred;

bool RunNarrow(ir::Graph& g, std::string* remarks) {
  auto pass = passes::CreateNarrowExactOpsPass();
  std::ostringstream r;
  pass->set_remarks(&r);
  auto changed = pass->Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  absl::Status v = ir::VerifyGraph(g);
  EXPECT_TRUE(v.ok()) << v << "\n" << g.ToString();
  *remarks = r.str();
  return changed.ok() && *changed;
}

TEST(NarrowExactOpsTest, ReluAndPoolBetweenCastsRunInBf16) {
  auto g = ParseInferred(R"(graph "g" {
  opset ai.onnx 17
  input %c.bf16 : bf16[2,4,8,8]
  %c : f32[2,4,8,8] = Cast(%c.bf16) {to = 1} origin "conv"
  %r : f32[2,4,8,8] = Relu(%c) origin "relu"
  %p : f32[2,4,4,4] = MaxPool(%r) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "pool"
  %p.bf16 : bf16[2,4,4,4] = Cast(%p) {to = 16} origin "next"
  output %p.bf16
  output %r
})");
  ASSERT_TRUE(g);
  std::string remarks;
  EXPECT_TRUE(RunNarrow(*g, &remarks));
  // The structure that matters: Relu and MaxPool in bf16, %r still f32 for its reader (a graph
  // output), and no f32 MaxPool.
  const std::string body = IrBody(*g);
  // %p.bf16 is a graph output, so its Cast pair stays (the output keeps its name and node).
  EXPECT_EQ(body,
            "  %r.low : bf16[2,4,8,8] = Relu(%c.bf16) origin \"relu\"\n"
            "  %r : f32[2,4,8,8] = Cast(%r.low) {to = 1} origin \"relu\"\n"
            "  %p.low : bf16[2,4,4,4] = MaxPool(%r.low) {kernel_shape = ints[2, 2], strides = ints[2, 2]} origin "
            "\"pool\"\n"
            "  %p : f32[2,4,4,4] = Cast(%p.low) {to = 1} origin \"pool\"\n"
            "  %p.bf16 : bf16[2,4,4,4] = Cast(%p) {to = 16} origin \"next\"\n"
            "  output %p.bf16, %r\n");
  EXPECT_TRUE(absl::StrContains(body, "= Relu(%c.bf16)")) << body;
  EXPECT_TRUE(absl::StrContains(body, "bf16[2,4,4,4] = MaxPool(")) << body;
  EXPECT_FALSE(absl::StrContains(body, "f32[2,4,4,4] = MaxPool(")) << body;
  EXPECT_TRUE(absl::StrContains(remarks, "narrowed node 'relu' (Relu) to bf16")) << remarks;
}

TEST(NarrowExactOpsTest, DeclinesOverlappingPoolGradientsAndMixedTypes) {
  auto g = ParseInferred(R"(graph "g" {
  opset ai.onnx 17
  input %dy.bf16 : bf16[2,4,3,3]
  input %x.bf16 : bf16[2,4,8,8]
  input %y.f16 : f16[2,4,8,8]
  %dy : f32[2,4,3,3] = Cast(%dy.bf16) {to = 1} origin "g"
  %x : f32[2,4,8,8] = Cast(%x.bf16) {to = 1} origin "g"
  %y : f32[2,4,8,8] = Cast(%y.f16) {to = 1} origin "g"
  %dx : f32[2,4,8,8] = ottr::MaxPoolGrad(%dy, %x) {kernel_shape = ints[3, 3], strides = ints[2, 2]} origin "overlap"
  %m : f32[2,4,8,8] = ottr::ReluGrad(%x, %y) origin "mixed"
  output %dx
  output %m
})");
  ASSERT_TRUE(g);
  const std::string before = IrBody(*g);
  std::string remarks;
  EXPECT_FALSE(RunNarrow(*g, &remarks));
  EXPECT_EQ(IrBody(*g), before);
}

struct StepOut {
  std::map<std::string, ir::Tensor> outputs;
  int casts = 0;
};

StepOut RunStep(const std::string& model, std::vector<int64_t> x_dims, passes::Precision p, bool narrow) {
  StepOut s;
  auto forward = importer::ImportModelFile(testing::SourcePath(model));
  EXPECT_TRUE(forward.ok()) << forward.status();
  if (!forward.ok()) return s;
  passes::TrainingSpec spec;
  spec.batch = x_dims[0];
  spec.precision = p;
  spec.expose_gradients = true;
  spec.narrow_exact_ops = narrow;
  spec.loss_scale.kind = passes::LossScaleSpec::Kind::kNone;
  const testing::ModelStep m = testing::RunStepOnCpu(**forward, x_dims, spec, 1e-3f);
  if (!m.step) return s;
  for (const ir::Node* n : m.step->nodes()) s.casts += n->op_type() == "Cast";
  for (size_t i = 0; i < m.outputs.size(); ++i) s.outputs[m.step->outputs()[i]->name()] = m.outputs[i];
  return s;
}

TEST(NarrowExactOpsTest, Bf16AndFp16StepsGiveTheSameBitsWithFewerCasts) {
  for (passes::Precision p : {passes::Precision::kBf16, passes::Precision::kFp16}) {
    for (const auto& [model, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"models/mlp/model.onnx", {8, 784}}, {"models/cnn/model.onnx", {4, 1, 28, 28}}}) {
      SCOPED_TRACE(absl::StrCat(model, " ", passes::PrecisionName(p)));
      const StepOut wide = RunStep(model, dims, p, false);
      const StepOut low = RunStep(model, dims, p, true);
      ASSERT_FALSE(wide.outputs.empty());
      ASSERT_EQ(wide.outputs.size(), low.outputs.size());
      EXPECT_LT(low.casts, wide.casts);
      for (const auto& [name, want] : wide.outputs) {
        ASSERT_TRUE(low.outputs.contains(name)) << name;
        EXPECT_TRUE(low.outputs.at(name).BitwiseEquals(want)) << name;
      }
    }
  }
}

}  // namespace
}  // namespace ottr
