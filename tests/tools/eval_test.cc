// Evaluation in inference mode: a BatchNormalization exported in training mode normalises with its
// running statistics, so one example's logits no longer depend on the rest of its batch.
#include "tools/eval.h"

#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

int TrainingModeBatchNorms(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node* node : g.nodes()) {
    n += node->op_type() == "BatchNormalization" && node->GetInt("training_mode", 0) != 0;
  }
  return n;
}

// Logits of example 0 when the other 7 examples of the batch come from `seed`.
ir::Tensor FirstLogits(const ir::Graph& g, uint64_t seed) {
  ir::Tensor x = testing::RandomFloat({8, 1, 28, 28}, seed, 0.0f, 1.0f);
  const ir::Tensor first = testing::RandomFloat({1, 1, 28, 28}, 1, 0.0f, 1.0f);
  std::copy(first.data<float>(), first.data<float>() + 784, x.data<float>());
  auto exec = runtime::cpu::CpuExecutor::Create(g);
  EXPECT_TRUE(exec.ok()) << exec.status();
  auto out = (*exec)->Run({{"x", x}});
  EXPECT_TRUE(out.ok()) << out.status();
  ir::Tensor row(ir::DType::kFloat32, {10});
  std::copy((*out)[0].data<float>(), (*out)[0].data<float>() + 10, row.data<float>());
  return row;
}

TEST(EvalTest, BatchNormRunsOnRunningStatistics) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/torch_cnn_bn/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  ASSERT_EQ(TrainingModeBatchNorms(**forward), 2);
  // Training mode: batch statistics, so the other examples change example 0's logits.
  EXPECT_GT(runtime::MaxRelativeError(FirstLogits(**forward, 2), FirstLogits(**forward, 3)), 1e-3);

  auto eval = (*forward)->Clone();
  ASSERT_TRUE(tools::ToInferenceMode(*eval).ok());
  EXPECT_EQ(TrainingModeBatchNorms(*eval), 0);
  EXPECT_EQ(eval->outputs()[0]->name(), "logits");
  // Inference mode: example 0's logits are its own, bit for bit.
  EXPECT_TRUE(FirstLogits(*eval, 2).BitwiseEquals(FirstLogits(*eval, 3)));
}

}  // namespace
}  // namespace ottr
