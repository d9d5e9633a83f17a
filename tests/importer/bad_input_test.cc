// Bad input to the importer and the CPU executor: each case must end in a clear error status
// (right code, a message naming the problem) and never in a crash or a wrong result. Malformed
// models are built here with ONNX's own protobuf classes.
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "ir/tensor.h"
#include "onnx/onnx_pb.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kSymbolic = -1;  // a dim written as dim_param "N"

// ---- building models with the ONNX protobuf classes ----

onnx::ModelProto NewModel(int64_t opset = 17, const std::string& domain = "") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("bad_input_test");
  onnx::OperatorSetIdProto* o = m.add_opset_import();
  o->set_domain(domain);
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

void SetType(onnx::ValueInfoProto* vi, const std::string& name, int32_t elem_type,
             const std::vector<int64_t>& dims) {
  vi->set_name(name);
  onnx::TypeProto::Tensor* t = vi->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  onnx::TensorShapeProto* s = t->mutable_shape();
  for (int64_t d : dims) {
    if (d == kSymbolic) {
      s->add_dim()->set_dim_param("N");
    } else {
      s->add_dim()->set_dim_value(d);
    }
  }
}

void AddInput(onnx::ModelProto& m, const std::string& name, int32_t elem_type,
              const std::vector<int64_t>& dims) {
  SetType(m.mutable_graph()->add_input(), name, elem_type, dims);
}

void AddOutput(onnx::ModelProto& m, const std::string& name) {
  m.mutable_graph()->add_output()->set_name(name);
}

onnx::NodeProto* AddNode(onnx::ModelProto& m, const std::string& op,
                         const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs, const std::string& name,
                         const std::string& domain = "") {
  onnx::NodeProto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  n->set_domain(domain);
  for (const std::string& i : inputs) n->add_input(i);
  for (const std::string& o : outputs) n->add_output(o);
  return n;
}

// Float initializer with raw data.
void AddInitializer(onnx::ModelProto& m, const std::string& name, const ir::Tensor& t) {
  *m.mutable_graph()->add_initializer() = importer::TensorToProto(t, name);
}

// Float initializer whose data lives in an external file.
void AddExternalInitializer(onnx::ModelProto& m, const std::string& name,
                            const std::vector<int64_t>& dims, const std::string& location,
                            int64_t offset = -1, int64_t length = -1) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& k, const std::string& v) {
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  if (offset >= 0) add("offset", absl::StrCat(offset));
  if (length >= 0) add("length", absl::StrCat(length));
}

// y = Relu(x + w): one input x f32[2,3], one initializer w.
onnx::ModelProto AddReluModel() {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Add", {"x", "w"}, {"s"}, "add");
  AddNode(m, "Relu", {"s"}, {"y"}, "relu");
  AddOutput(m, "y");
  return m;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            absl::StrCat("ottr_bad_input_", info->name(), "_", static_cast<long>(::getpid()));
    fs::remove_all(root_);
    dir_ = root_ / "model";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `m` as dir_/model.onnx and imports it from there.
  absl::StatusOr<std::unique_ptr<ir::Graph>> ImportFromDir(const onnx::ModelProto& m) {
    const fs::path path = dir_ / "model.onnx";
    WriteAll(path, m.SerializeAsString());
    return importer::ImportModelFile(path.string());
  }

  fs::path root_;  // scratch folder; the model folder dir_ is inside it
  fs::path dir_;
};

// ---- files that are not ONNX models ----

TEST_F(BadInputTest, EmptyFile) {
  const fs::path p = dir_ / "empty.onnx";
  WriteAll(p, "");
  auto g = importer::ImportModelFile(p.string());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(g.status()), HasSubstr("empty file"));
  EXPECT_THAT(Message(g.status()), HasSubstr(p.string()));
}

TEST_F(BadInputTest, MissingFileAndFolder) {
  auto g = importer::ImportModelFile((dir_ / "nope.onnx").string());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(g.status()), HasSubstr("nope.onnx"));
  auto d = importer::ImportModelFile(dir_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(Message(d.status()), HasSubstr("directory"));
}

TEST_F(BadInputTest, RandomBytes) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t size = std::vector<size_t>{1, 2, 7, 64, 1000, 65536}[seed % 6];
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto model = importer::ParseModelProto(bytes, "random.onnx");
    if (!model.ok()) {
      EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
      EXPECT_THAT(Message(model.status()), HasSubstr("random.onnx: not a valid ONNX model"));
      continue;
    }
    // A random string that happens to be well-formed protobuf must still not import.
    auto g = importer::ImportModel(*model);
    EXPECT_FALSE(g.ok()) << "seed " << seed << " imported random bytes";
  }
}

TEST_F(BadInputTest, TruncatedModels) {
  for (const char* name : {"mlp", "transformer"}) {
    const std::string bytes = ReadAll(testing::SourcePath(absl::StrCat("models/", name, "/model.onnx")));
    ASSERT_GT(bytes.size(), 10000u) << name;
    // The whole file imports (the control); every proper prefix must not.
    ASSERT_TRUE(importer::ImportModel(*importer::ParseModelProto(bytes, name)).ok()) << name;
    const size_t n = bytes.size();
    for (size_t cut : {size_t{1}, size_t{2}, size_t{3}, size_t{10}, size_t{100}, size_t{1000},
                       n / 3, n / 2, n - 1000, n - 100, n - 10, n - 1}) {
      SCOPED_TRACE(absl::StrCat(name, " cut at ", cut, " of ", n));
      auto model = importer::ParseModelProto(absl::string_view(bytes).substr(0, cut), "cut.onnx");
      if (!model.ok()) {
        EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(Message(model.status()), HasSubstr("not a valid ONNX model"));
        continue;
      }
      // A cut on a field boundary is well-formed protobuf, but the model is incomplete.
      auto g = importer::ImportModel(*model);
      EXPECT_FALSE(g.ok()) << "a truncated model imported";
    }
  }
}

TEST_F(BadInputTest, TruncatedModelFileNamesThePath) {
  const std::string bytes = ReadAll(testing::SourcePath("models/mlp/model.onnx"));
  const fs::path p = dir_ / "cut.onnx";
  WriteAll(p, bytes.substr(0, bytes.size() / 2));
  auto g = importer::ImportModelFile(p.string());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(g.status()), HasSubstr(p.string()));
  EXPECT_THAT(Message(g.status()), HasSubstr("truncated"));
}

// ---- malformed graphs ----

TEST_F(BadInputTest, MissingInitializer) {
  onnx::ModelProto m = AddReluModel();  // "w" is read but never defined
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(g.status()), HasSubstr("'add'"));
  EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));

  // The control: with the initializer it imports and runs.
  AddInitializer(m, "w", testing::RandomFloat({2, 3}, 1));
  auto ok = importer::ImportModel(m);
  ASSERT_TRUE(ok.ok()) << ok.status();
}

TEST_F(BadInputTest, GraphOutputNobodyComputes) {
  onnx::ModelProto m = AddReluModel();
  AddInitializer(m, "w", testing::RandomFloat({2, 3}, 1));
  AddOutput(m, "ghost");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("'ghost'"));
}

TEST_F(BadInputTest, UnknownOpNamesNodeOpDomainAndOpset) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Relu", {"x"}, {"r"}, "relu");
  AddNode(m, "FrobnicateTensor", {"r"}, {"y"}, "mystery_node");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg = Message(g.status());
  EXPECT_THAT(msg, HasSubstr("mystery_node"));
  EXPECT_THAT(msg, HasSubstr("FrobnicateTensor"));
  EXPECT_THAT(msg, HasSubstr("ai.onnx"));
  EXPECT_THAT(msg, HasSubstr("17"));
}

TEST_F(BadInputTest, UnknownOpOfACustomDomain) {
  onnx::ModelProto m = NewModel(17);
  onnx::OperatorSetIdProto* o = m.add_opset_import();
  o->set_domain("com.example.ops");
  o->set_version(3);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Fancy", {"x"}, {"y"}, "fancy_node", "com.example.ops");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg = Message(g.status());
  EXPECT_THAT(msg, HasSubstr("fancy_node"));
  EXPECT_THAT(msg, HasSubstr("Fancy"));
  EXPECT_THAT(msg, HasSubstr("com.example.ops"));
  EXPECT_THAT(msg, HasSubstr("3"));
}

TEST_F(BadInputTest, DomainTheModelDoesNotImport) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Fancy", {"x"}, {"y"}, "fancy_node", "com.example.ops");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("fancy_node"));
  EXPECT_THAT(Message(g.status()), HasSubstr("com.example.ops"));
}

TEST_F(BadInputTest, UnsupportedOpset) {
  for (int64_t opset : {1, 6, 99}) {
    onnx::ModelProto m = NewModel(opset);
    AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
    AddNode(m, "Relu", {"x"}, {"y"}, "relu");
    AddOutput(m, "y");
    auto g = importer::ImportModel(m);
    ASSERT_FALSE(g.ok()) << opset;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(Message(g.status()), HasSubstr(absl::StrCat("opset ", opset)));
  }
}

TEST_F(BadInputTest, UnknownAttributeIsRejected) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  onnx::NodeProto* n = AddNode(m, "Relu", {"x"}, {"y"}, "relu_node");
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("bogus_knob");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(3);
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("relu_node"));
  EXPECT_THAT(Message(g.status()), HasSubstr("bogus_knob"));
}

TEST_F(BadInputTest, DTypeMismatchInGraph) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "a", onnx::TensorProto::FLOAT, {2, 3});
  AddInput(m, "b", onnx::TensorProto::INT64, {2, 3});
  AddNode(m, "Add", {"a", "b"}, {"y"}, "mixed_add");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(Message(g.status()), HasSubstr("mixed_add"));
}

TEST_F(BadInputTest, InitializerWithWrongByteCount) {
  onnx::ModelProto m = AddReluModel();
  onnx::TensorProto* w = m.mutable_graph()->add_initializer();
  *w = importer::TensorToProto(testing::RandomFloat({2, 3}, 1), "w");
  w->mutable_raw_data()->resize(5);  // 6 floats need 24 bytes
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));
}

TEST_F(BadInputTest, HugeDeclaredInitializerDoesNotAllocate) {
  // Dims that ask for 2^62 elements with no data behind them: an error, not an allocation.
  onnx::ModelProto m = AddReluModel();
  onnx::TensorProto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(int64_t{1} << 31);
  w->add_dims(int64_t{1} << 31);
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));
}

// ---- bad feeds at run time ----

class BadFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = importer::ImportModelFile(testing::SourcePath("models/mlp/model.onnx"));
    ASSERT_TRUE(g.ok()) << g.status();
    graph_ = std::move(*g);
    auto e = runtime::cpu::CpuExecutor::Create(*graph_);
    ASSERT_TRUE(e.ok()) << e.status();
    exec_ = std::move(*e);
  }
  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<runtime::cpu::CpuExecutor> exec_;
};

TEST_F(BadFeedTest, CorrectFeedRuns) {
  auto out = exec_->Run({{"x", testing::RandomFloat({3, 784}, 1)}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].dims(), (std::vector<int64_t>{3, 10}));
}

TEST_F(BadFeedTest, WrongInnerDim) {
  auto out = exec_->Run({{"x", testing::RandomFloat({2, 783}, 1)}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(out.status()), HasSubstr("'x'"));
  EXPECT_THAT(Message(out.status()), HasSubstr("783"));
  EXPECT_THAT(Message(out.status()), HasSubstr("784"));
}

TEST_F(BadFeedTest, WrongRank) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{784}, std::vector<int64_t>{1, 2, 784}}) {
    auto out = exec_->Run({{"x", testing::RandomFloat(dims, 1)}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(out.status()), HasSubstr("'x'"));
  }
}

TEST_F(BadFeedTest, WrongDType) {
  auto out = exec_->Run({{"x", testing::RandomInt64({2, 784}, 1, 0, 9)}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(out.status()), HasSubstr("'x'"));
  EXPECT_THAT(Message(out.status()), HasSubstr("i64"));
}

TEST_F(BadFeedTest, MissingAndUnknownInputs) {
  auto missing = exec_->Run({});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(Message(missing.status()), HasSubstr("'x'"));
  auto unknown = exec_->Run({{"x", testing::RandomFloat({2, 784}, 1)},
                             {"z", testing::RandomFloat({2}, 2)}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(Message(unknown.status()), HasSubstr("'z'"));
}

TEST(BadFeedSymbolicTest, ShapesOnlyKnownAtRunTimeMustAgree) {
  // x : f32[N, K] (both symbolic) times w : f32[4, 3]; shape inference cannot see that K must be
  // 4, so the kernel has to refuse x = [2, 5] at run time.
  onnx::ModelProto m = NewModel(17);
  onnx::ValueInfoProto* x = m.mutable_graph()->add_input();
  SetType(x, "x", onnx::TensorProto::FLOAT, {kSymbolic, kSymbolic});
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param("K");
  AddInitializer(m, "w", testing::RandomFloat({4, 3}, 1));
  AddNode(m, "MatMul", {"x", "w"}, {"y"}, "mm");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = runtime::cpu::CpuExecutor::Create(**g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  auto good = (*exec)->Run({{"x", testing::RandomFloat({2, 4}, 2)}});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)[0].dims(), (std::vector<int64_t>{2, 3}));
  auto bad = (*exec)->Run({{"x", testing::RandomFloat({2, 5}, 2)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("mm"));
}

TEST(BadFeedSymbolicTest, SameSymbolBoundToDifferentSizes) {
  // a, b : f32[N]; fed [3] and [4] they do not broadcast: an error, not a crash.
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "a", onnx::TensorProto::FLOAT, {kSymbolic});
  AddInput(m, "b", onnx::TensorProto::FLOAT, {kSymbolic});
  AddNode(m, "Add", {"a", "b"}, {"y"}, "add_ab");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = runtime::cpu::CpuExecutor::Create(**g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  auto bad = (*exec)->Run({{"a", testing::RandomFloat({3}, 1)}, {"b", testing::RandomFloat({4}, 2)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("add_ab"));
}

// ---- graphs that are malformed in other ways ----

TEST_F(BadInputTest, ValueDefinedTwice) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Relu", {"x"}, {"y"}, "first");
  AddNode(m, "Neg", {"x"}, {"y"}, "second");  // SSA: 'y' already has a producer
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("'y'"));
}

TEST_F(BadInputTest, WrongNumberOfInputsOrOutputs) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m, "Relu", {"x", "x"}, {"y"}, "relu_two_inputs");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("relu_two_inputs"));

  onnx::ModelProto m2 = NewModel(17);
  AddInput(m2, "x", onnx::TensorProto::FLOAT, {2, 3});
  AddNode(m2, "Relu", {"x"}, {}, "relu_no_output");
  AddOutput(m2, "x");
  auto g2 = importer::ImportModel(m2);
  ASSERT_FALSE(g2.ok());
  EXPECT_THAT(Message(g2.status()), HasSubstr("relu_no_output"));
}

TEST_F(BadInputTest, AttributeOfTheWrongKind) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "a", onnx::TensorProto::FLOAT, {2, 3});
  AddInput(m, "b", onnx::TensorProto::FLOAT, {4, 3});
  onnx::NodeProto* n = AddNode(m, "Gemm", {"a", "b"}, {"y"}, "gemm_node");
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("transB");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("yes");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("gemm_node"));
  EXPECT_THAT(Message(g.status()), HasSubstr("transB"));
}

TEST_F(BadInputTest, IncompatibleStaticShapes) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "a", onnx::TensorProto::FLOAT, {2, 3});
  AddInput(m, "b", onnx::TensorProto::FLOAT, {4, 5});
  AddNode(m, "MatMul", {"a", "b"}, {"y"}, "mm_node");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(Message(g.status()), HasSubstr("mm_node"));
}

TEST_F(BadInputTest, NegativeInputDim) {
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {2, 3});
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(1)->set_dim_value(-3);
  AddNode(m, "Relu", {"x"}, {"y"}, "relu");
  AddOutput(m, "y");
  auto g = importer::ImportModel(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(Message(g.status()), HasSubstr("'x'"));
}

// ---- values only known at run time: kernels must refuse them with an error ----

// Imports `m` and runs it on the CPU reference.
absl::StatusOr<std::vector<ir::Tensor>> ImportAndRun(const onnx::ModelProto& m,
                                                     const runtime::TensorMap& feeds) {
  auto g = importer::ImportModel(m);
  if (!g.ok()) return g.status();
  auto exec = runtime::cpu::CpuExecutor::Create(**g);
  if (!exec.ok()) return exec.status();
  return (*exec)->Run(feeds);
}

ir::Tensor I64(std::vector<int64_t> dims, std::vector<int64_t> v) {
  return ir::Tensor::FromVector<int64_t>(std::move(dims), v);
}

// y = OP(x : f32[?...], s : i64[k]) for shape-taking ops (ConstantOfShape has no x).
onnx::ModelProto ShapeOpModel(const std::string& op, bool with_data) {
  onnx::ModelProto m = NewModel(17);
  if (with_data) AddInput(m, "x", onnx::TensorProto::FLOAT, {kSymbolic});
  AddInput(m, "s", onnx::TensorProto::INT64, {kSymbolic});
  if (with_data) {
    AddNode(m, op, {"x", "s"}, {"y"}, "shape_op");
  } else {
    AddNode(m, op, {"s"}, {"y"}, "shape_op");
  }
  AddOutput(m, "y");
  return m;
}

TEST(RuntimeBadInputTest, HugeOutputShapeIsAnErrorNotACrash) {
  // A fed shape asking for 2^40 (or 2^62) floats: the executor must fail cleanly
  // (ResourceExhausted / InvalidArgument), not abort in the allocator or overflow a size.
  for (int64_t big : {int64_t{1} << 40, int64_t{1} << 62}) {
    SCOPED_TRACE(big);
    auto c = ImportAndRun(ShapeOpModel("ConstantOfShape", false), {{"s", I64({2}, {big, 4})}});
    EXPECT_FALSE(c.ok()) << "ConstantOfShape allocated " << big << "x4 elements";
    auto e = ImportAndRun(ShapeOpModel("Expand", true),
                          {{"x", testing::RandomFloat({1}, 1)}, {"s", I64({2}, {big, 4})}});
    EXPECT_FALSE(e.ok()) << "Expand allocated " << big << "x4 elements";
    auto t = ImportAndRun(ShapeOpModel("Tile", true),
                          {{"x", testing::RandomFloat({3}, 1)}, {"s", I64({1}, {big})}});
    EXPECT_FALSE(t.ok()) << "Tile allocated " << big << "x3 elements";
  }
}

TEST(RuntimeBadInputTest, NegativeFedShape) {
  auto c = ImportAndRun(ShapeOpModel("ConstantOfShape", false), {{"s", I64({2}, {-3, 4})}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(Message(c.status()), HasSubstr("shape_op"));
  auto r = ImportAndRun(ShapeOpModel("Reshape", true),
                        {{"x", testing::RandomFloat({6}, 1)}, {"s", I64({2}, {-2, -3})}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Message(r.status()), HasSubstr("shape_op"));
}

TEST(RuntimeBadInputTest, ReshapeToTheWrongElementCount) {
  auto good = ImportAndRun(ShapeOpModel("Reshape", true),
                           {{"x", testing::RandomFloat({6}, 1)}, {"s", I64({2}, {2, 3})}});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)[0].dims(), (std::vector<int64_t>{2, 3}));
  auto bad = ImportAndRun(ShapeOpModel("Reshape", true),
                          {{"x", testing::RandomFloat({6}, 1)}, {"s", I64({2}, {4, 2})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("shape_op"));
}

TEST(RuntimeBadInputTest, GatherIndexOutOfRange) {
  onnx::ModelProto m = NewModel(17);
  AddInitializer(m, "data", testing::RandomFloat({3, 4}, 1));
  AddInput(m, "i", onnx::TensorProto::INT64, {kSymbolic});
  AddNode(m, "Gather", {"data", "i"}, {"y"}, "gather_node");
  AddOutput(m, "y");
  auto good = ImportAndRun(m, {{"i", I64({2}, {2, -3})}});  // negative counts from the end
  ASSERT_TRUE(good.ok()) << good.status();
  for (int64_t bad_index : {int64_t{3}, int64_t{-4}, int64_t{1} << 40, INT64_MIN}) {
    SCOPED_TRACE(bad_index);
    auto bad = ImportAndRun(m, {{"i", I64({2}, {0, bad_index})}});
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(Message(bad.status()), HasSubstr("gather_node"));
  }
}

TEST(RuntimeBadInputTest, IntegerDivisionByZero) {
  // ONNX leaves integer division by zero undefined; ottr must report it, not raise SIGFPE.
  for (const char* op : {"Div", "Mod"}) {
    SCOPED_TRACE(op);
    onnx::ModelProto m = NewModel(17);
    AddInput(m, "a", onnx::TensorProto::INT64, {kSymbolic});
    AddInput(m, "b", onnx::TensorProto::INT64, {kSymbolic});
    AddNode(m, op, {"a", "b"}, {"y"}, "div_node");
    AddOutput(m, "y");
    auto good = ImportAndRun(m, {{"a", I64({2}, {7, -9})}, {"b", I64({2}, {2, 4})}});
    ASSERT_TRUE(good.ok()) << good.status();
    auto zero = ImportAndRun(m, {{"a", I64({2}, {7, 9})}, {"b", I64({2}, {2, 0})}});
    ASSERT_FALSE(zero.ok());
    EXPECT_THAT(Message(zero.status()), HasSubstr("div_node"));
    // INT64_MIN / -1 overflows (and traps on x86 like division by zero).
    auto overflow = ImportAndRun(m, {{"a", I64({1}, {INT64_MIN})}, {"b", I64({1}, {-1})}});
    (void)overflow;  // an error or a defined value; reaching this line is the test
  }
}

TEST(RuntimeBadInputTest, SliceWithExtremeBounds) {
  // starts/ends at the int64 limits clamp to the data (no overflow in the index arithmetic).
  onnx::ModelProto m = NewModel(17);
  AddInput(m, "x", onnx::TensorProto::FLOAT, {5});
  AddInput(m, "starts", onnx::TensorProto::INT64, {1});
  AddInput(m, "ends", onnx::TensorProto::INT64, {1});
  AddInput(m, "steps", onnx::TensorProto::INT64, {1});
  AddInitializer(m, "axes", I64({1}, {0}));
  AddNode(m, "Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "slice_node");
  AddOutput(m, "y");
  const ir::Tensor x = testing::RandomFloat({5}, 3);
  auto all = ImportAndRun(m, {{"x", x}, {"starts", I64({1}, {INT64_MIN})},
                              {"ends", I64({1}, {INT64_MAX})}, {"steps", I64({1}, {1})}});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE((*all)[0].BitwiseEquals(x)) << (*all)[0].DebugString();
  auto reversed = ImportAndRun(m, {{"x", x}, {"starts", I64({1}, {INT64_MAX})},
                                   {"ends", I64({1}, {INT64_MIN})}, {"steps", I64({1}, {-1})}});
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  ASSERT_EQ((*reversed)[0].dims(), (std::vector<int64_t>{5}));
  EXPECT_EQ((*reversed)[0].data<float>()[0], x.data<float>()[4]);
  auto extreme_step = ImportAndRun(m, {{"x", x}, {"starts", I64({1}, {INT64_MAX})},
                                       {"ends", I64({1}, {INT64_MIN})},
                                       {"steps", I64({1}, {INT64_MIN})}});
  ASSERT_TRUE(extreme_step.ok()) << extreme_step.status();
  ASSERT_EQ((*extreme_step)[0].dims(), (std::vector<int64_t>{1}));
  EXPECT_EQ((*extreme_step)[0].data<float>()[0], x.data<float>()[4]);
  auto zero_step = ImportAndRun(m, {{"x", x}, {"starts", I64({1}, {0})},
                                    {"ends", I64({1}, {5})}, {"steps", I64({1}, {0})}});
  ASSERT_FALSE(zero_step.ok());
  EXPECT_THAT(Message(zero_step.status()), HasSubstr("slice_node"));
}

// ---- external data ----

TEST_F(BadInputTest, ExternalDataInsideTheFolderLoads) {
  // The control for the cases below: same model, data where it belongs.
  const std::vector<float> w = {1.5f, -2.f, 3.f, 0.25f, -1.f, 7.f};
  WriteAll(dir_ / "weights.bin", "PAD!" + FloatBytes(w));
  fs::create_directories(dir_ / "sub");
  WriteAll(dir_ / "sub" / "w2.bin", FloatBytes(w));
  onnx::ModelProto m = AddReluModel();
  AddExternalInitializer(m, "w", {2, 3}, "weights.bin", 4, 24);
  auto g = ImportFromDir(m);
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Tensor* t = (*g)->FindValue("w")->initializer();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<float>(t->span<float>().begin(), t->span<float>().end()), w);

  onnx::ModelProto m2 = AddReluModel();
  AddExternalInitializer(m2, "w", {2, 3}, "sub/../sub/w2.bin");
  auto g2 = ImportFromDir(m2);
  ASSERT_TRUE(g2.ok()) << g2.status();
}

TEST_F(BadInputTest, ExternalDataEscapingTheFolderIsRejected) {
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  WriteAll(root_ / "outside.bin", data);  // exists: only the location makes it wrong
  fs::create_symlink(root_ / "outside.bin", dir_ / "link.bin");
  fs::create_directories(dir_ / "sub");
  for (const std::string& location :
       {std::string("../outside.bin"), std::string("sub/../../outside.bin"),
        (root_ / "outside.bin").string(), std::string("/etc/passwd"), std::string("link.bin")}) {
    SCOPED_TRACE(location);
    onnx::ModelProto m = AddReluModel();
    AddExternalInitializer(m, "w", {2, 3}, location);
    auto g = ImportFromDir(m);
    ASSERT_FALSE(g.ok()) << "external data at '" << location << "' was read";
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));
    EXPECT_THAT(Message(g.status()), HasSubstr(location));
  }
}

TEST_F(BadInputTest, ExternalDataFileMissing) {
  onnx::ModelProto m = AddReluModel();
  AddExternalInitializer(m, "w", {2, 3}, "absent.bin");
  auto g = ImportFromDir(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));
  EXPECT_THAT(Message(g.status()), HasSubstr("absent.bin"));
}

TEST_F(BadInputTest, ExternalDataFileTooShort) {
  WriteAll(dir_ / "short.bin", FloatBytes({1, 2, 3, 4, 5}));  // 20 bytes; 24 needed
  {
    onnx::ModelProto m = AddReluModel();
    AddExternalInitializer(m, "w", {2, 3}, "short.bin");
    auto g = ImportFromDir(m);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(g.status()), HasSubstr("'w'"));
    EXPECT_THAT(Message(g.status()), HasSubstr("past the end"));
  }
  {
    // The file is long enough, the offset pushes the range past its end.
    WriteAll(dir_ / "long.bin", FloatBytes({1, 2, 3, 4, 5, 6, 7}));
    onnx::ModelProto m = AddReluModel();
    AddExternalInitializer(m, "w", {2, 3}, "long.bin", 8);
    auto g = ImportFromDir(m);
    ASSERT_FALSE(g.ok());
    EXPECT_THAT(Message(g.status()), HasSubstr("past the end"));
  }
}

TEST_F(BadInputTest, ExternalDataBadOffsetOrLength) {
  WriteAll(dir_ / "w.bin", FloatBytes({1, 2, 3, 4, 5, 6, 7, 8}));
  struct Case {
    std::string key, value, expect;
  };
  for (const Case& c : {Case{"offset", "-4", "offset"}, Case{"offset", "abc", "offset"},
                        Case{"length", "20", "length"}, Case{"length", "-1x", "length"},
                        Case{"offset", "99999999999999999999", "offset"}}) {
    SCOPED_TRACE(c.key + "=" + c.value);
    onnx::ModelProto m = AddReluModel();
    AddExternalInitializer(m, "w", {2, 3}, "w.bin");
    onnx::StringStringEntryProto* e =
        m.mutable_graph()->mutable_initializer(0)->add_external_data();
    e->set_key(c.key);
    e->set_value(c.value);
    auto g = ImportFromDir(m);
    ASSERT_FALSE(g.ok());
    EXPECT_THAT(Message(g.status()), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace ottr
