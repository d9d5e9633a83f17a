// testing::ToFloat64: the float64 copy of a model that the GPU training tests measure float32
// results against (CudaTrainingTest.ResnetStepMatchesCpu). Here, on the CPU: the copy's training
// step computes in float64 and the same function as the float32 step.
#include <cmath>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

// The ResNet (convolutions, BatchNormalization in training mode, residual Adds) at batch 8, SGD
// with momentum, one step in float32 and in float64 from the same parameters and batch. Every
// output of the float64 step is float64 and within 1e-3 of the float32 one: float32's own error
// through these layers is ~1e-5 (the GPU test's measurements), while a wrong conversion (a
// parameter or an op computing something else) would be off by O(1). The two are not equal
// (float32 rounds), which a copy that still computed in float32 would be.
TEST(Float64ReferenceTest, ResnetStepComputesTheSameInFloat64) {
  auto forward = importer::ImportModelFile(testing::SourcePath("models/resnet/model.onnx"));
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto wide_forward = testing::ToFloat64(**forward);
  ASSERT_TRUE(wide_forward.ok()) << wide_forward.status();
  ASSERT_EQ((*wide_forward)->initializers().size(), (*forward)->initializers().size());
  for (const ir::Value* v : (*wide_forward)->initializers()) {
    EXPECT_EQ(v->initializer()->dtype(), ir::DType::kFloat64) << v->name();
    const ir::Value* narrow = (*forward)->FindValue(v->name());
    ASSERT_NE(narrow, nullptr) << v->name() << " was renamed";
    auto back = runtime::cpu::ew::CastTensor(*v->initializer(), ir::DType::kFloat32);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back->BitwiseEquals(*narrow->initializer())) << v->name();
  }
  passes::TrainingSpec spec;
  spec.batch = 8;
  spec.expose_gradients = true;
  spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
  spec.optimizer.momentum = 0.9f;
  auto narrow_step = passes::BuildTrainingGraph(**forward, spec);
  auto wide_step = passes::BuildTrainingGraph(**wide_forward, spec);
  ASSERT_TRUE(narrow_step.ok()) << narrow_step.status();
  ASSERT_TRUE(wide_step.ok()) << wide_step.status();
  runtime::TensorMap narrow_feeds, wide_feeds;
  const std::string x = (*forward)->inputs()[0]->name();
  narrow_feeds[x] = testing::RandomFloat({8, 1, 28, 28}, 5, -1.0f, 1.0f);
  auto wide_x = runtime::cpu::ew::CastTensor(narrow_feeds[x], ir::DType::kFloat64);
  ASSERT_TRUE(wide_x.ok());
  wide_feeds[x] = *wide_x;
  narrow_feeds[passes::kLabelsInput] = wide_feeds[passes::kLabelsInput] = testing::RandomInt64({8}, 6, 0, 9);
  narrow_feeds[passes::kLrInput] = wide_feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(1e-2f);
  auto narrow = runtime::cpu::CpuExecutor::Create(**narrow_step);
  auto wide = runtime::cpu::CpuExecutor::Create(**wide_step);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  ASSERT_TRUE(wide.ok()) << wide.status();
  auto a = (*narrow)->Run(narrow_feeds);
  auto b = (*wide)->Run(wide_feeds);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  double largest = 0;
  for (size_t i = 0; i < a->size(); ++i) largest = std::max(largest, runtime::MaxRelativeError((*a)[i], (*b)[i]));
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string& name = (*narrow_step)->outputs()[i]->name();
    ASSERT_EQ((*wide_step)->outputs()[i]->name(), name);
    EXPECT_EQ((*b)[i].dtype(), ir::DType::kFloat64) << name;
    // A conv bias before BatchNorm has a gradient that is zero in exact arithmetic: both sides are
    // rounding noise there, compared in absolute terms.
    const bool noise = absl::EndsWith(name, ".bias.grad") && testing::NormwiseRelativeError((*b)[i], (*a)[i]) > 0.5;
    if (!noise) {
      EXPECT_LE(runtime::MaxRelativeError((*a)[i], (*b)[i]), 1e-3) << name;
    }
  }
  EXPECT_GT(largest, 0.0) << "the float64 step gave float32's bits: it does not compute in float64";
  for (const ir::StateUpdate& u : (*wide_step)->updates()) {
    const ir::Tensor* s = (*wide)->State(u.target->name());
    ASSERT_NE(s, nullptr) << u.target->name();
    if (ir::IsFloat(s->dtype())) {  // not the int64 step counter
      EXPECT_EQ(s->dtype(), ir::DType::kFloat64) << u.target->name();
    }
  }
}

// A float32 tensor in an attribute (a Constant's value) would stay float32: ToFloat64 says so.
TEST(Float64ReferenceTest, RefusesFloat32AttributeTensors) {
  ir::Graph g;
  auto x = g.AddInput("x", ir::TensorType(ir::DType::kFloat32, ir::ShapeFromDims({2})));
  ASSERT_TRUE(x.ok());
  auto c = g.AddNode({"Constant", "", {}, {"c"}, {{"value", ir::Attribute(testing::RandomFloat({2}, 1))}}, "c"});
  ASSERT_TRUE(c.ok()) << c.status();
  auto add = g.AddNode({"Add", "", {*x, (*c)->outputs()[0]}, {"y"}, {}, "add"});
  ASSERT_TRUE(add.ok()) << add.status();
  g.AddOutput((*add)->outputs()[0]);
  auto wide = testing::ToFloat64(g);
  ASSERT_FALSE(wide.ok());
  EXPECT_TRUE(absl::StrContains(wide.status().message(), "node 'c' (Constant)")) << wide.status();
  EXPECT_TRUE(absl::StrContains(wide.status().message(), "float32 tensor attribute")) << wide.status();
}

}  // namespace
}  // namespace ottr
