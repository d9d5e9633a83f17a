// fuse-gemm-adam (passes/fuse_gemm_adam.cc): IR text in, the pass, the printed IR compared with
// the expected (the weight gradient and its bias gradient folded into one ottr::GemmAdamUpdate,
// the rest of the update left as it was, the values keeping their names), the same outputs bit
// for bit on the CPU reference; where it must not fire (k above the bound, a gradient read by
// another node, a guarded update); and whole training steps of the bundled MLP with and without
// the pass giving the same bits on the CPU (Adam and AdamW), every update in place.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
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

PassRun RunFuse(const std::string& text) { return testing::RunPassOnText(passes::CreateFuseGemmAdamPass(), text); }

constexpr char kAttrs[] =
    "{beta1 = 0.899999976, beta2 = 0.999000013, decoupled = 0, epsilon = 9.99999994e-09, weight_decay = 0.0}";

// A layer's weight [16, 32] and bias [16] from dy [batch, 16] and x [batch, 32], and a third
// parameter u [5] whose gradient is not a GEMM's; `gemm` is the weight gradient's node line.
std::string Graph(int64_t batch, const std::string& gemm, const std::string& extra = "",
                  const std::string& outputs = "") {
  return absl::StrCat(R"(graph "g" {
  opset ai.onnx 17
  input %lr : f32[]
  input %s : i64[]
  input %dy : f32[)", batch, R"(,16]
  input %x : f32[)", batch, R"(,32]
  input %w : f32[16,32]
  input %b : f32[16]
  input %u : f32[5]
  input %wm : f32[16,32]
  input %bm : f32[16]
  input %um : f32[5]
  input %wv : f32[16,32]
  input %bv : f32[16]
  input %uv : f32[5]
)", gemm, "\n", R"(  %du : f32[5] = Neg(%u) origin "c"
)", extra, R"(  %w.new : f32[16,32], %b.new : f32[16], %u.new : f32[5], %wm.new : f32[16,32], %bm.new : f32[16], %um.new : f32[5], %wv.new : f32[16,32], %bv.new : f32[16], %uv.new : f32[5] = ottr::AdamUpdateN(%lr, %s, %w, %b, %u, %dw, %db, %du, %wm, %bm, %um, %wv, %bv, %uv) )",
                      kAttrs, R"( origin "opt"
  output %w.new
  output %b.new
  output %u.new
  output %wm.new
  output %bm.new
  output %um.new
  output %wv.new
  output %bv.new
  output %uv.new
)", outputs, "}");
}

constexpr char kBgradA[] =
    R"(  %dw : f32[16,32], %db : f32[16] = ottr::FusedGemm(%dy, %x) {epilogue = "bgrada", transA = 1} origin "fc/grad")";

// Second moments must not be negative: v in [0, 1), the step 3, the rest in [-1, 1).
runtime::TensorMap Feeds(const ir::Graph& g) {
  runtime::TensorMap feeds = testing::RandomFeeds(g, 11);
  feeds["s"] = ir::Tensor::Scalar<int64_t>(3);
  feeds["lr"] = ir::Tensor::Scalar<float>(1e-2f);
  feeds["wv"] = testing::RandomFloat({16, 32}, 21, 0.0f, 1.0f);
  feeds["bv"] = testing::RandomFloat({16}, 22, 0.0f, 1.0f);
  feeds["uv"] = testing::RandomFloat({5}, 23, 0.0f, 1.0f);
  return feeds;
}

TEST(FuseGemmAdamTest, FusesAWeightGradientAndItsBias) {
  PassRun r = RunFuse(Graph(8, kBgradA));
  ASSERT_TRUE(r.after);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(IrBody(*r.after),
            absl::StrCat("  %du : f32[5] = Neg(%u) origin \"c\"\n"
                         "  %w.new : f32[16,32], %b.new : f32[16], %wm.new : f32[16,32], %bm.new : f32[16], "
                         "%wv.new : f32[16,32], %bv.new : f32[16] = ottr::GemmAdamUpdate(%lr, %s, %dy, %x, %w, %b, "
                         "%wm, %bm, %wv, %bv) {beta1 = 0.899999976, beta2 = 0.999000013, bias = \"a\", decoupled = 0, "
                         "epsilon = 9.99999994e-09, weight_decay = 0.0} origin \"fc/grad\"\n"
                         "  %u.new : f32[5], %um.new : f32[5], %uv.new : f32[5] = ottr::AdamUpdateN(%lr, %s, %u, %du, "
                         "%um, %uv) ",
                         kAttrs,
                         " origin \"opt\"\n"
                         "  output %w.new, %b.new, %u.new, %wm.new, %bm.new, %um.new, %wv.new, %bv.new, %uv.new\n"));
  EXPECT_TRUE(absl::StrContains(r.remarks, "into the update of w and b: one ottr::GemmAdamUpdate")) << r.remarks;
  testing::ExpectSameOutputsOn(r, Feeds(*r.before));
}

// The bias summed over B (bgradb: the layer stored as x·W with dW = xᵀ·dy) and an ONNX Gemm
// without bias gradient (the bias update stays grouped).
TEST(FuseGemmAdamTest, FusesBgradBAndPlainGemm) {
  {
    PassRun r = RunFuse(absl::StrReplaceAll(
        Graph(8, R"(  %dw : f32[16,32], %db : f32[32] = ottr::FusedGemm(%x2, %dy2) {epilogue = "bgradb", transA = 1} origin "fc/grad")"),
        {{"input %b : f32[16]", "input %b : f32[32]\n  input %x2 : f32[8,16]\n  input %dy2 : f32[8,32]"},
         {"input %bm : f32[16]", "input %bm : f32[32]"},
         {"input %bv : f32[16]", "input %bv : f32[32]"},
         {"%b.new : f32[16]", "%b.new : f32[32]"},
         {"%bm.new : f32[16]", "%bm.new : f32[32]"},
         {"%bv.new : f32[16]", "%bv.new : f32[32]"}}));
    ASSERT_TRUE(r.after);
    EXPECT_TRUE(r.changed);
    EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "bias = \"b\"")) << IrBody(*r.after);
    runtime::TensorMap feeds = testing::RandomFeeds(*r.before, 12);
    feeds["s"] = ir::Tensor::Scalar<int64_t>(2);
    for (const char* v : {"wv", "bv", "uv"}) {
      const ir::Tensor& t = feeds.at(v);
      feeds[v] = testing::RandomFloat(t.dims(), 30, 0.0f, 1.0f);
    }
    testing::ExpectSameOutputsOn(r, feeds);
  }
  {
    PassRun r = RunFuse(Graph(8, R"(  %dw : f32[16,32] = Gemm(%dy, %x) {transA = 1} origin "fc/grad"
  %db : f32[16] = Neg(%b) origin "e")"));
    ASSERT_TRUE(r.after);
    EXPECT_TRUE(r.changed);
    EXPECT_TRUE(absl::StrContains(IrBody(*r.after),
                                  "%w.new : f32[16,32], %wm.new : f32[16,32], %wv.new : f32[16,32] = "
                                  "ottr::GemmAdamUpdate(%lr, %s, %dy, %x, %w, %wm, %wv) {beta1"))
        << IrBody(*r.after);
    EXPECT_TRUE(absl::StrContains(IrBody(*r.after), "ottr::AdamUpdateN(%lr, %s, %b, %u, %db, %du, %bm, %um, %bv, %uv)"))
        << IrBody(*r.after);
    testing::ExpectSameOutputsOn(r, Feeds(*r.before));
  }
}

TEST(FuseGemmAdamTest, DeclinesALargeK) {
  PassRun r = RunFuse(Graph(512, kBgradA));
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(IrBody(*r.after), IrBody(*r.before));
  EXPECT_TRUE(absl::StrContains(r.remarks, "k = 512 > 256")) << r.remarks;
}

TEST(FuseGemmAdamTest, DeclinesAGradientReadElsewhere) {
  PassRun r = RunFuse(Graph(8, kBgradA, "  %n : f32[16,32] = Neg(%dw) origin \"d\"\n", "  output %n\n"));
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "dw is read by more than the update")) << r.remarks;
  PassRun r2 = RunFuse(Graph(8, kBgradA, "  %n : f32[16] = Neg(%db) origin \"d\"\n", "  output %n\n"));
  ASSERT_TRUE(r2.after);
  EXPECT_FALSE(r2.changed);
  EXPECT_TRUE(absl::StrContains(r2.remarks, "its bias gradient db is read by more than the update")) << r2.remarks;
}

TEST(FuseGemmAdamTest, DeclinesAGuardedUpdate) {
  std::string text = Graph(8, kBgradA);
  text = absl::StrReplaceAll(text, {{"input %uv : f32[5]", "input %uv : f32[5]\n  input %ok : bool[]"},
                                    {"%bv, %uv) {", "%bv, %uv, %ok) {guarded = 1, "}});
  PassRun r = RunFuse(text);
  ASSERT_TRUE(r.after);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(absl::StrContains(r.remarks, "it is guarded")) << r.remarks;
}

// Whole steps of the bundled MLP (784-512-512-10) at batch 16 with the CUDA tools' pipeline, with
// and without the pass: every layer's weight fused (three nodes), every update in place, and three
// steps giving the same loss and state bits on the CPU reference.
class FuseGemmAdamStepTest : public ::testing::TestWithParam<passes::OptimizerSpec::Kind> {};

TEST_P(FuseGemmAdamStepTest, SameBitsAsTheGroupedUpdate) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  passes::TrainingSpec spec;
  spec.batch = 16;
  spec.optimizer.kind = GetParam();
  spec.optimizer.weight_decay = 0.01f;
  spec.multi_tensor_updates = true;
  spec.fuse_epilogues = true;
  spec.fuse_gemm_adam = true;
  spec.precision = passes::Precision::kTf32;  // the CUDA tools' pipeline; the CPU computes float32
  auto fused = passes::BuildTrainingGraph(**forward, spec);
  spec.disabled_passes.insert("fuse-gemm-adam");
  auto plain = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(fused.ok() && plain.ok()) << fused.status() << plain.status();
  EXPECT_EQ(testing::CountOps(**plain, "GemmAdamUpdate"), 0);
  EXPECT_EQ(testing::CountOps(**fused, "GemmAdamUpdate"), 3);
  auto plan = passes::PlanMemory(**fused);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->update_copies.empty()) << passes::FormatPlan(*plan);
  EXPECT_TRUE(passes::VerifyPlan(**fused, *plan).ok());

  auto a = runtime::cpu::CpuExecutor::Create(**plain);
  auto b = runtime::cpu::CpuExecutor::Create(**fused);
  ASSERT_TRUE(a.ok() && b.ok());
  runtime::TensorMap feeds;
  feeds["x"] = testing::RandomFloat({16, 784}, 5, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = testing::RandomInt64({16}, 6, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  for (int k = 0; k < 3; ++k) {
    auto ra = (*a)->Run(feeds);
    auto rb = (*b)->Run(feeds);
    ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
    EXPECT_TRUE((*ra)[0].BitwiseEquals((*rb)[0])) << "loss of step " << k;
  }
  ASSERT_EQ((*plain)->updates().size(), (*fused)->updates().size());
  for (const ir::StateUpdate& u : (*plain)->updates()) {
    const ir::Tensor* x = (*a)->State(u.target->name());
    const ir::Tensor* y = (*b)->State(u.target->name());
    ASSERT_TRUE(x && y) << u.target->name();
    EXPECT_TRUE(x->BitwiseEquals(*y)) << u.target->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FuseGemmAdamStepTest,
                         ::testing::Values(passes::OptimizerSpec::Kind::kAdam, passes::OptimizerSpec::Kind::kAdamW));

}  // namespace
}  // namespace ottr
