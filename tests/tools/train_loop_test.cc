// End-to-end tests of the training loop on the CPU: standard ONNX training (TrainingInfoProto)
// against NumPy, bit-identical resume, NaN handling and bad input.
#include "tools/train_loop.h"

#include <functional>
#include <filesystem>

#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "runtime/checkpoint.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr::tools {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("ottr_train_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::map<std::string, ir::Tensor> Initializers(const std::string& path) {
  std::map<std::string, ir::Tensor> out;
  auto model = importer::LoadModelProto(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  for (const auto& tp : model->graph().initializer()) {
    auto t = importer::TensorFromProto(tp);
    if (t.ok()) out[tp.name()] = *t;
  }
  return out;
}

// A random classification set shaped for models/mlp (784 features, 10 classes).
runtime::DataSource RandomMlpData(int64_t n, uint64_t seed) {
  runtime::DataSource d;
  d.train.features = testing::RandomFloat({n, 784}, seed, 0.0f, 1.0f);
  d.train.labels = testing::RandomInt64({n}, seed + 1, 0, 9);
  return d;
}

TrainConfig MlpConfig() {
  TrainConfig c;
  c.spec.batch = 16;
  c.spec.loss.kind = passes::LossSpec::Kind::kSoftmaxCrossEntropy;
  c.schedule.lr = 1e-3;
  c.schedule.kind = LrSchedule::Kind::kCosine;  // depends on the step: resume must get it right
  c.log_every = 0;
  c.seed = 5;
  return c;
}

TEST(TrainLoopTest, StandardOnnxTrainingMatchesNumPy) {
  // models/onnx_training/model.onnx carries a TrainingInfoProto (Gradient + Momentum); its script
  // replayed the same 20 steps in NumPy.
  const std::string dir = TempDir("onnx_training");
  auto data = runtime::LoadData(testing::SourcePath("models/onnx_training/batches"), {});
  ASSERT_TRUE(data.ok()) << data.status();
  TrainConfig c;
  c.out = dir + "/trained.onnx";
  c.log_every = 0;
  c.max_steps = 20;
  ASSERT_TRUE(RunTraining(testing::SourcePath("models/onnx_training/model.onnx"), *data, c).ok());
  auto got = Initializers(c.out);
  for (const char* name : {"W", "B"}) {
    auto want = importer::ReadTensorFile(testing::SourcePath(std::string("models/onnx_training/expected/") + name + ".pb"));
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.count(name));
    EXPECT_LE(runtime::MaxRelativeError(got[name], want->second), 1e-5) << name;
    // Trained: far from the initialization graph's W / the initial B.
    EXPECT_GT(runtime::MaxRelativeError(got[name], Initializers(testing::SourcePath("models/onnx_training/model.onnx"))[name]), 0.1);
  }
}

// 8 steps, a checkpoint, a resumed run to 18 steps: the same parameters as 18 uninterrupted
// steps. `first` and `second` adjust the configs of the two halves (the uninterrupted run takes
// `second`'s).
void ExpectResumeBitIdentical(const std::string& tag, const std::function<void(TrainConfig&)>& first_mod,
                              const std::function<void(TrainConfig&)>& second_mod) {
  const std::string dir = TempDir(tag);
  const std::string model = testing::SourcePath("models/mlp/model.onnx");
  const runtime::DataSource data = RandomMlpData(96, 3);  // 6 steps per epoch
  TrainConfig full = MlpConfig();
  second_mod(full);
  full.epochs = 3;
  full.out = dir + "/full.onnx";
  ASSERT_TRUE(RunTraining(model, data, full).ok());

  TrainConfig first = MlpConfig();
  first_mod(first);
  first.epochs = 3;
  first.checkpoint = dir + "/ckpt";
  first.stop_after = 8;  // mid-epoch 2
  ASSERT_TRUE(RunTraining(model, data, first).ok());
  auto ckpt = runtime::ReadCheckpoint(first.checkpoint);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->meta["steps_done"], "8");
  TrainConfig second = MlpConfig();
  second_mod(second);
  second.epochs = 3;
  second.resume = first.checkpoint;
  second.out = dir + "/resumed.onnx";
  absl::Status st = RunTraining(model, data, second);
  ASSERT_TRUE(st.ok()) << st;

  auto a = Initializers(full.out);
  auto b = Initializers(second.out);
  auto initial = Initializers(model);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(t.BitwiseEquals(b[name])) << name << " differs after resuming";
    EXPECT_FALSE(t.BitwiseEquals(initial[name])) << name << " was not trained";
  }
}

TEST(TrainLoopTest, ResumeEndsBitIdenticalToAnUninterruptedRun) {
  ExpectResumeBitIdentical("resume", [](TrainConfig&) {}, [](TrainConfig&) {});
}

// bf16 with the optimizer writing the parameters' bf16 copies (optimizer-low-copies): the copies
// are state and come back from the checkpoint; a checkpoint written without them (the first half
// casting its parameters each step) resumes too, the copies recomputed from the parameters.
TEST(TrainLoopTest, Bf16ResumeWithOptimizerCopiesEndsBitIdentical) {
  auto bf16 = [](bool copies) {
    return [copies](TrainConfig& c) {
      c.spec.precision = passes::Precision::kBf16;
      c.spec.multi_tensor_updates = true;
      c.spec.optimizer_low_copies = copies;
    };
  };
  ExpectResumeBitIdentical("resume_bf16", bf16(true), bf16(true));
  ExpectResumeBitIdentical("resume_bf16_old", bf16(false), bf16(true));
}

TEST(TrainLoopTest, NonFiniteLossStopsNamingTheStepAndKeepsTheCheckpoint) {
  const std::string dir = TempDir("nan");
  const std::string model = testing::SourcePath("models/mlp/model.onnx");
  const runtime::DataSource data = RandomMlpData(64, 9);
  TrainConfig c = MlpConfig();
  c.spec.optimizer.kind = passes::OptimizerSpec::Kind::kSgd;
  c.schedule.kind = LrSchedule::Kind::kConstant;
  c.schedule.lr = 1e30;  // diverges within a few steps
  c.epochs = 5;
  c.checkpoint = dir + "/ckpt";
  c.checkpoint_every = 1;
  absl::Status s = RunTraining(model, data, c);
  ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("non-finite"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("step "), absl::string_view::npos) << s;
  // The last checkpoint holds finite parameters from before the bad step.
  auto ckpt = runtime::ReadCheckpoint(c.checkpoint);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const auto& [name, t] : ckpt->tensors) {
    if (!ir::IsFloat(t.dtype())) continue;
    for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_TRUE(std::isfinite(t.GetAsDouble(i))) << name;
  }
  // With --nan-policy skip the run completes.
  c.nan_skip = true;
  c.checkpoint.clear();
  EXPECT_TRUE(RunTraining(model, data, c).ok());
}

TEST(TrainLoopTest, BadInputGivesClearErrors) {
  const std::string model = testing::SourcePath("models/mlp/model.onnx");
  TrainConfig c = MlpConfig();
  c.epochs = 1;
  // Labels out of range.
  runtime::DataSource bad_labels = RandomMlpData(32, 1);
  bad_labels.train.labels.data<int64_t>()[5] = 10;
  absl::Status s = RunTraining(model, bad_labels, c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("label 10"), absl::string_view::npos) << s;
  // Examples of the wrong size for the model's input.
  runtime::DataSource wrong = RandomMlpData(32, 1);
  wrong.train.features = testing::RandomFloat({32, 100}, 1);
  s = RunTraining(model, wrong, c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("784"), absl::string_view::npos) << s;
  // An output folder that does not exist fails before training.
  c.out = "/nonexistent-ottr-dir/trained.onnx";
  s = RunTraining(model, RandomMlpData(32, 1), c);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // A missing data file.
  EXPECT_EQ(runtime::LoadData("/nonexistent/x.npy,/nonexistent/y.npy", {}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ottr::tools
