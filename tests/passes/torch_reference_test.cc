// Whole training steps against PyTorch: every model in tests/data/torch-reference (exported by
// torch.onnx.export, with PyTorch's own gradients and parameters after 3 steps of Adam, SGD with
// momentum and AdamW) and tests/data/models-reference (ottr's models/, references computed by
// models/make_torch_references.py) is imported, trained 3 steps on the same batches, and compared:
// step-0 loss and gradients, and every parameter after the third step, to 1e-5 relative
// (normwise per tensor: float32 sums over a few hundred terms in another order differ by ~1e-7).
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/data.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

namespace fs = std::filesystem;

struct RefCase {
  std::string model_dir;
  std::string optimizer;  // adam, sgd_momentum, adamw
};

void PrintTo(const RefCase& c, std::ostream* os) {
  *os << fs::path(c.model_dir).filename().string() << "/" << c.optimizer;
}

std::vector<RefCase> Cases() {
  std::vector<RefCase> out;
  std::vector<fs::path> dirs;
  // Exported by PyTorch 2.11 (shared/torch-reference), and ottr's own models/ with references
  // from models/make_torch_references.py (PyTorch 1.13).
  for (const char* root : {"tests/data/torch-reference", "tests/data/models-reference"}) {
    for (const auto& e : fs::directory_iterator(testing::SourcePath(root))) {
      if (e.is_directory() && fs::exists(e.path() / "reference.json")) dirs.push_back(e.path());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) {
    for (const char* opt : {"adam", "sgd_momentum", "adamw"}) {
      if (fs::exists(d / opt)) out.push_back({d.string(), opt});
    }
  }
  return out;
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The optimizer's block of reference.json: its "spec" string and its "losses" list.
struct Reference {
  std::string spec;
  std::vector<double> losses;
};

Reference ParseReference(const std::string& json, const std::string& optimizer) {
  Reference r;
  const size_t at = json.find("\"" + optimizer + "\": {");
  if (at == std::string::npos) return r;
  const std::string block = json.substr(at, json.find(']', at) - at);
  std::smatch m;
  if (std::regex_search(block, m, std::regex("\"spec\": \"([^\"]*)\""))) r.spec = m[1];
  const size_t l = block.find("\"losses\"");
  if (l != std::string::npos) {
    std::string nums = block.substr(block.find('[', l) + 1);
    std::regex num("-?[0-9.]+(e-?[0-9]+)?");
    for (auto it = std::sregex_iterator(nums.begin(), nums.end(), num); it != std::sregex_iterator(); ++it) {
      double v;
      if (absl::SimpleAtod(it->str(), &v)) r.losses.push_back(v);
    }
  }
  return r;
}

double SpecValue(const std::string& spec, const std::string& key, double def) {
  std::smatch m;
  if (std::regex_search(spec, m, std::regex("'" + key + "': \\(?(-?[0-9.e-]+)"))) {
    double v;
    if (absl::SimpleAtod(m[1].str(), &v)) return v;
  }
  return def;
}

double Norm(const ir::Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) s += t.GetAsDouble(i) * t.GetAsDouble(i);
  return std::sqrt(s);
}

class TorchReferenceTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(TorchReferenceTest, MatchesPyTorchGradientsAndParameters) {
  const RefCase& c = GetParam();
  const fs::path dir(c.model_dir);
  const Reference ref = ParseReference(ReadText(dir / "reference.json"), c.optimizer);
  ASSERT_FALSE(ref.spec.empty()) << "no spec for " << c.optimizer;
  ASSERT_EQ(ref.losses.size(), 3u);

  std::string model = (dir / "model.onnx").string();
  if (!fs::exists(model)) {  // models-reference names a model of models/
    std::string rel = ReadText(dir / "model_path.txt");
    while (!rel.empty() && std::isspace(static_cast<unsigned char>(rel.back()))) rel.pop_back();
    model = testing::SourcePath(rel);
  }
  auto forward = importer::ImportModelFile(model);
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto data = runtime::LoadData((dir / "batches").string(), {});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->steps.size(), 3u);

  passes::TrainingSpec spec;
  spec.batch = data->steps[0].at("labels").dim(0);
  spec.loss.kind = passes::LossSpec::Kind::kSoftmaxCrossEntropy;
  spec.loss.output = "logits";
  spec.expose_gradients = true;
  passes::OptimizerSpec& o = spec.optimizer;
  const double lr = SpecValue(ref.spec, "lr", -1);
  ASSERT_GT(lr, 0);
  if (c.optimizer == "sgd_momentum") {
    o.kind = passes::OptimizerSpec::Kind::kSgd;
    o.momentum = static_cast<float>(SpecValue(ref.spec, "momentum", 0));
    o.dampening = static_cast<float>(SpecValue(ref.spec, "dampening", 0));
    o.nesterov = ref.spec.find("'nesterov': True") != std::string::npos;
  } else {
    o.kind = c.optimizer == "adamw" ? passes::OptimizerSpec::Kind::kAdamW : passes::OptimizerSpec::Kind::kAdam;
    o.beta1 = static_cast<float>(SpecValue(ref.spec, "betas", 0.9));
    std::smatch m;
    if (std::regex_search(ref.spec, m, std::regex("'betas': \\([0-9.]+, ([0-9.]+)\\)"))) {
      o.beta2 = static_cast<float>(std::stod(m[1]));
    }
    o.epsilon = static_cast<float>(SpecValue(ref.spec, "eps", 1e-8));
  }
  o.weight_decay = static_cast<float>(SpecValue(ref.spec, "weight_decay", 0));

  auto step = passes::BuildTrainingGraph(**forward, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  auto exec = runtime::cpu::CpuExecutor::Create(**step);
  ASSERT_TRUE(exec.ok()) << exec.status();
  // Outputs: loss, then "<param>.grad" for each trained parameter.
  const auto& outs = (*step)->outputs();
  std::set<std::string> noise_gradient;
  for (int k = 0; k < 3; ++k) {
    runtime::TensorMap feeds = data->steps[k];
    feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(static_cast<float>(lr));
    auto result = (*exec)->Run(feeds);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR((*result)[0].GetAsDouble(0), ref.losses[k], 1e-5 * std::abs(ref.losses[k]))
        << "loss of step " << k;
    if (k != 0) continue;
    std::vector<std::pair<std::string, ir::Tensor>> wants;
    double largest = 0;
    for (const auto& e : fs::directory_iterator(dir / c.optimizer / "grads_step0")) {
      auto want = importer::ReadTensorFile(e.path().string());
      ASSERT_TRUE(want.ok()) << want.status();
      largest = std::max(largest, Norm(want->second));
      wants.push_back(*std::move(want));
    }
    ASSERT_FALSE(wants.empty());
    // A gradient that is zero in exact arithmetic (a conv bias followed by BatchNorm, which
    // subtracts the batch mean) comes out of both frameworks as fp32 cancellation noise; for it
    // we assert only that ours is noise-sized too (below 1e-5 of the largest gradient).
    const double floor = 1e-5 * largest;
    for (const auto& [name, want] : wants) {
      const std::string grad_name = passes::GradName(name);
      auto it = std::find_if(outs.begin(), outs.end(), [&](const ir::Value* v) { return v->name() == grad_name; });
      ASSERT_NE(it, outs.end()) << "no gradient for " << name;
      const ir::Tensor& got = (*result)[it - outs.begin()];
      ASSERT_EQ(got.dims(), want.dims()) << grad_name;
      if (Norm(want) < floor) {
        EXPECT_LT(Norm(got), floor) << grad_name << " is zero in exact arithmetic";
        noise_gradient.insert(name);
      } else {
        EXPECT_LE(runtime::MaxRelativeError(got, want), 1e-5) << grad_name;
      }
    }
  }
  int compared = 0;
  for (const auto& e : fs::directory_iterator(dir / c.optimizer / "params_after")) {
    auto want = importer::ReadTensorFile(e.path().string());
    ASSERT_TRUE(want.ok()) << want.status();
    const ir::Tensor* got = (*exec)->State(want->first);
    ASSERT_NE(got, nullptr) << "no parameter " << want->first;
    const bool adam = c.optimizer != "sgd_momentum";
    if (!adam) {
      EXPECT_LE(runtime::MaxRelativeError(*got, want->second), 1e-5) << want->first << " after 3 steps";
    } else {
      // Adam steps each element by lr * m / (sqrt(v) + eps): about lr * sign(gradient). An element
      // whose gradient is within fp32 rounding of zero (or, for a noise gradient, every element)
      // can step either way, so summation order alone flips a handful of elements by up to
      // 2 * lr per step. Everything else must agree to 1e-5.
      const bool noise = noise_gradient.count(want->first) > 0;
      int64_t flipped = 0;
      double worst = 0;
      for (int64_t i = 0; i < got->num_elements(); ++i) {
        const double g = got->GetAsDouble(i), w = want->second.GetAsDouble(i);
        const double d = std::abs(g - w);
        worst = std::max(worst, d);
        if (d > 1e-5 * std::abs(w) + 1e-7) ++flipped;
      }
      EXPECT_LE(worst, 2 * 3 * lr * (1 + 1e-3)) << want->first << ": more than Adam's largest step";
      if (!noise) {
        EXPECT_LE(flipped, std::max<int64_t>(2, got->num_elements() / 1000))
            << want->first << ": elements that differ after 3 steps";
      }
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(AllModels, TorchReferenceTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<RefCase>& info) {
                           std::string n = fs::path(info.param.model_dir).filename().string() + "_" +
                                           info.param.optimizer;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ottr
