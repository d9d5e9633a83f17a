// Golden outputs against ONNX Runtime: every model under models/ runs on ottr's CPU executor and
// on ONNX Runtime's CPU build (npm onnxruntime-node, pinned in tests/golden/package.json, driven
// by tests/golden/run_ort.js) with the same seeded random inputs, and the outputs must agree to a
// normwise relative error max|a - b| / max|b| <= 1e-4. The model ottr's exporter writes back is
// also run by ONNX Runtime (which proves ONNX Runtime loads it) and must give the same outputs.
//
// Node.js and onnxruntime-node are installed by scripts/install-deps.sh (`make test` runs it);
// without them these tests fail, they do not skip.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/exporter.h"
#include "importer/onnx_importer.h"
#include "ir/dtype.h"
#include "ir/tensor.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::Tensor;

constexpr double kMaxRelError = 1e-4;
// Symbolic and unknown input dims get this size: not a power of two, so blocked loops see a
// remainder.
constexpr int64_t kBatch = 3;

// ---- a minimal JSON reader for run_ort.js's manifests (objects, arrays, strings, numbers) ----

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json* Get(const std::string& key) const {
    auto it = object.find(key);
    return it == object.end() ? nullptr : &it->second;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  // Parses the whole text; false on any syntax error.
  bool Parse(Json& out) {
    if (!Value(out)) return false;
    Skip();
    return pos_ == s_.size();
  }

 private:
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool String(std::string& out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return false;
        c = s_[pos_++];
        if (c == 'n') c = '\n';
        if (c == 't') c = '\t';
        if (c == 'u') return false;  // not produced for our names
      }
      out.push_back(c);
    }
    return pos_++ < s_.size();
  }
  bool Value(Json& out) {
    out = Json();
    Skip();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      out.kind = Json::Kind::kObject;
      if (Eat('}')) return true;
      do {
        std::string key;
        if (!String(key) || !Eat(':') || !Value(out.object[key])) return false;
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      ++pos_;
      out.kind = Json::Kind::kArray;
      if (Eat(']')) return true;
      do {
        out.array.emplace_back();
        if (!Value(out.array.back())) return false;
      } while (Eat(','));
      return Eat(']');
    }
    if (c == '"') {
      out.kind = Json::Kind::kString;
      return String(out.string);
    }
    for (const char* word : {"true", "false", "null"}) {
      if (s_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        out.kind = word[0] == 'n' ? Json::Kind::kNull : Json::Kind::kBool;
        out.number = word[0] == 't';
        return true;
      }
    }
    size_t used = 0;
    try {
      out.number = std::stod(s_.substr(pos_), &used);
    } catch (...) {
      return false;
    }
    out.kind = Json::Kind::kNumber;
    pos_ += used;
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

// ---- the interchange with run_ort.js: raw little-endian .bin files + manifest.json ----

// ONNX Runtime's dtype names (onnxruntime-common Tensor.type).
const std::vector<std::pair<DType, std::string>>& OrtTypeNames() {
  static const auto* names = new std::vector<std::pair<DType, std::string>>{
      {DType::kFloat32, "float32"}, {DType::kFloat64, "float64"}, {DType::kInt8, "int8"},
      {DType::kUInt8, "uint8"},     {DType::kInt16, "int16"},     {DType::kUInt16, "uint16"},
      {DType::kInt32, "int32"},     {DType::kUInt32, "uint32"},   {DType::kInt64, "int64"},
      {DType::kUInt64, "uint64"},   {DType::kBool, "bool"}};
  return *names;
}

std::string OrtTypeName(DType t) {
  for (const auto& [d, n] : OrtTypeNames()) {
    if (d == t) return n;
  }
  return "";
}

DType DTypeFromOrtName(const std::string& name) {
  for (const auto& [d, n] : OrtTypeNames()) {
    if (n == name) return d;
  }
  return DType::kUndefined;
}

void WriteFile(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteTensors(const fs::path& dir, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  fs::create_directories(dir);
  std::string manifest = "{\"tensors\": [\n";
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& [name, t] = tensors[k];
    const std::string file = absl::StrCat("input_", k, ".bin");
    WriteFile(dir / file, t.raw_data(), t.nbytes());
    std::string dims;
    for (int64_t d : t.dims()) absl::StrAppend(&dims, dims.empty() ? "" : ", ", d);
    absl::StrAppend(&manifest, k ? ",\n" : "", " {\"name\": \"", name, "\", \"dtype\": \"",
                    OrtTypeName(t.dtype()), "\", \"shape\": [", dims, "], \"file\": \"", file,
                    "\"}");
  }
  absl::StrAppend(&manifest, "\n]}\n");
  WriteFile(dir / "manifest.json", manifest.data(), manifest.size());
}

// Reads run_ort.js's outputs; an empty result with a test failure when they are malformed.
std::vector<std::pair<std::string, Tensor>> ReadTensors(const fs::path& dir) {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::string text = ReadFile(dir / "manifest.json");
  Json root;
  if (!JsonReader(text).Parse(root) || root.Get("tensors") == nullptr) {
    ADD_FAILURE() << dir / "manifest.json" << " is not a valid manifest:\n" << text;
    return {};
  }
  for (const Json& e : root.Get("tensors")->array) {
    const Json* name = e.Get("name");
    const Json* dtype = e.Get("dtype");
    const Json* shape = e.Get("shape");
    const Json* file = e.Get("file");
    if (!name || !dtype || !shape || !file || DTypeFromOrtName(dtype->string) == DType::kUndefined) {
      ADD_FAILURE() << "bad manifest entry in " << dir / "manifest.json";
      return {};
    }
    std::vector<int64_t> dims;
    for (const Json& d : shape->array) dims.push_back(static_cast<int64_t>(d.number));
    Tensor t(DTypeFromOrtName(dtype->string), dims);
    const std::string bytes = ReadFile(dir / file->string);
    if (bytes.size() != t.nbytes()) {
      ADD_FAILURE() << file->string << ": " << bytes.size() << " bytes, expected " << t.nbytes();
      return {};
    }
    if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
    out.emplace_back(name->string, std::move(t));
  }
  return out;
}

// Runs a shell command; returns its exit status (-1 when it did not exit normally) and its
// combined stdout and stderr.
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string output;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// Fails (not skips) the test when ONNX Runtime's Node.js package cannot be used.
::testing::AssertionResult OrtAvailable() {
  const auto [status, out] = RunCommand("node --version");
  if (status != 0) {
    return ::testing::AssertionFailure()
           << "Node.js is not installed (`node --version`: " << out
           << "); run scripts/install-deps.sh (make test does)";
  }
  const fs::path pkg = testing::SourcePath("tests/golden/node_modules/onnxruntime-node/package.json");
  if (!fs::exists(pkg)) {
    return ::testing::AssertionFailure()
           << pkg << " is missing: the npm package onnxruntime-node is not installed; run "
           << "scripts/install-deps.sh (make test does)";
  }
  return ::testing::AssertionSuccess();
}

// Runs `model` with ONNX Runtime on the tensors in `in_dir`, writing to `out_dir`.
::testing::AssertionResult RunOrt(const fs::path& model, const fs::path& in_dir,
                                  const fs::path& out_dir) {
  const std::string cmd = absl::StrCat("node ", Quote(testing::SourcePath("tests/golden/run_ort.js")),
                                       " ", Quote(model.string()), " ", Quote(in_dir.string()),
                                       " ", Quote(out_dir.string()));
  const auto [status, out] = RunCommand(cmd);
  if (status != 0) {
    return ::testing::AssertionFailure() << "ONNX Runtime failed on " << model << " (exit status "
                                         << status << "):\n" << out;
  }
  return ::testing::AssertionSuccess();
}

// A seeded random tensor for a graph input: symbolic and unknown dims become kBatch; floats are
// uniform in [-1, 1), integers in [0, 10), never all zero.
Tensor RandomInput(const ir::TensorType& type, uint64_t seed) {
  std::vector<int64_t> dims;
  for (const ir::Dim& d : type.shape.value_or(ir::Shape{})) {
    dims.push_back(d.is_static() ? d.value() : kBatch);
  }
  if (type.dtype == DType::kFloat32) return testing::RandomFloat(dims, seed);
  Tensor t(type.dtype, dims);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = IsFloat(type.dtype)
                         ? std::uniform_real_distribution<double>(-1.0, 1.0)(rng)
                         : static_cast<double>(std::uniform_int_distribution<int>(0, 9)(rng));
    ir::VisitDType(type.dtype, [&]<typename T>() {
      if constexpr (std::is_void_v<T>) {
        ADD_FAILURE() << "input of unsupported dtype " << ir::DTypeName(type.dtype);
      } else if constexpr (std::is_same_v<T, bool>) {
        t.template data<T>()[i] = v >= 5;
      } else {
        t.template data<T>()[i] = ir::FromDouble<T>(v);
      }
    });
  }
  return t;
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  const fs::path root = testing::SourcePath("models");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.is_directory() && fs::exists(e.path() / "model.onnx")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Compares ottr's outputs with ONNX Runtime's: same names, dtypes and shapes, and a normwise
// relative error within kMaxRelError.
void ExpectSameOutputs(const std::vector<std::pair<std::string, Tensor>>& ort,
                       const ir::Graph& graph, const std::vector<Tensor>& ottr,
                       const std::string& what) {
  ASSERT_EQ(ort.size(), ottr.size()) << what;
  for (size_t k = 0; k < ottr.size(); ++k) {
    SCOPED_TRACE(absl::StrCat(what, ", output ", k, " '", graph.outputs()[k]->name(), "'"));
    EXPECT_EQ(ort[k].first, graph.outputs()[k]->name());
    ASSERT_EQ(ort[k].second.dtype(), ottr[k].dtype());
    ASSERT_EQ(ort[k].second.dims(), ottr[k].dims());
    if (IsFloat(ottr[k].dtype())) {
      const double err = runtime::MaxRelativeError(ottr[k], ort[k].second);
      std::printf("[  golden  ] %s, output '%s': max relative error %.3g\n", what.c_str(),
                  ort[k].first.c_str(), err);
      EXPECT_LE(err, kMaxRelError) << "ottr " << ottr[k].DebugString() << "\nORT  "
                                   << ort[k].second.DebugString();
    } else {
      EXPECT_TRUE(ottr[k].BitwiseEquals(ort[k].second))
          << "ottr " << ottr[k].DebugString() << "\nORT  " << ort[k].second.DebugString();
    }
  }
}

TEST(OrtGoldenTest, ModelsArePresent) {
  // The script that writes them: models/make_models.py.
  const std::vector<std::string> names = ModelNames();
  for (const char* want : {"cnn", "mlp", "transformer"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << "models/" << want;
  }
}

TEST(OrtGoldenTest, MalformedManifestIsReported) {
  // The reader must not accept garbage (otherwise a broken run_ort.js could pass silently).
  Json j;
  EXPECT_FALSE(JsonReader("{\"tensors\": [").Parse(j));
  EXPECT_FALSE(JsonReader("{\"a\" 1}").Parse(j));
  ASSERT_TRUE(JsonReader("{\"tensors\": [{\"shape\": [2, 3]}], \"x\": true}").Parse(j));
  const Json* tensors = j.Get("tensors");
  ASSERT_NE(tensors, nullptr);
  ASSERT_EQ(tensors->array.size(), 1u);
  const Json* shape = tensors->array[0].Get("shape");
  ASSERT_NE(shape, nullptr);
  ASSERT_EQ(shape->array.size(), 2u);
  EXPECT_EQ(shape->array[1].number, 3);
}

class OrtGoldenModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("ottr_golden_", GetParam(), "_", static_cast<long>(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // kept for a look when the test failed
  }
  fs::path dir_;
};

TEST_P(OrtGoldenModelTest, MatchesOnnxRuntime) {
  ASSERT_TRUE(OrtAvailable());
  const fs::path model = testing::SourcePath("models/" + GetParam() + "/model.onnx");
  auto graph = importer::ImportModelFile(model.string());
  ASSERT_TRUE(graph.ok()) << graph.status();

  std::vector<std::pair<std::string, Tensor>> inputs;
  runtime::TensorMap feeds;
  uint64_t seed = 1234;
  for (const ir::Value* in : (*graph)->inputs()) {
    Tensor t = RandomInput(in->type(), seed++);
    feeds[in->name()] = t;
    inputs.emplace_back(in->name(), t);
  }
  WriteTensors(dir_ / "inputs", inputs);

  // ottr on the imported model (symbolic batch dims kept symbolic).
  auto exec = runtime::cpu::CpuExecutor::Create(**graph);
  ASSERT_TRUE(exec.ok()) << exec.status();
  auto outputs = (*exec)->Run(feeds);
  ASSERT_TRUE(outputs.ok()) << outputs.status();

  // ONNX Runtime on the original file.
  ASSERT_TRUE(RunOrt(model, dir_ / "inputs", dir_ / "ort"));
  ExpectSameOutputs(ReadTensors(dir_ / "ort"), **graph, *outputs, "ORT on " + model.string());

  // ONNX Runtime on ottr's export of the imported graph.
  const fs::path exported = dir_ / "exported.onnx";
  absl::Status s = importer::ExportModelFile(**graph, exported.string());
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(RunOrt(exported, dir_ / "inputs", dir_ / "ort_exported"));
  ExpectSameOutputs(ReadTensors(dir_ / "ort_exported"), **graph, *outputs,
                    "ORT on ottr's export of " + model.string());
}

INSTANTIATE_TEST_SUITE_P(Models, OrtGoldenModelTest, ::testing::ValuesIn(ModelNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ottr
