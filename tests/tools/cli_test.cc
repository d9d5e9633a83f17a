// The `ottr` program on bad input: it must exit with status exactly 1 (never a signal) and print
// exactly one line `ottr <command>: error: ...` on stderr that names the problem. The binary is
// the one built next to these tests (OTTR_BINARY_DIR/tools/ottr).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "importer/tensor_proto.h"
#include "ir/tensor.h"
#include "onnx/onnx_pb.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  bool exited = false;  // false: killed by a signal (or not run)
  int exit_status = -1;
  int signal = 0;
  std::string out;
  std::string err;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           absl::StrCat("ottr_cli_", info->name(), "_", static_cast<long>(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(fs::exists(Binary())) << Binary() << " is not built";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Binary() { return absl::StrCat(OTTR_BINARY_DIR, "/tools/ottr"); }

  // Runs `ottr ARGS...` with stdout and stderr captured in files (no shell interpretation of
  // the arguments: each is quoted).
  Result Ottr(const std::vector<std::string>& args) {
    std::string cmd = "exec " + Quote(Binary());
    for (const std::string& a : args) absl::StrAppend(&cmd, " ", Quote(a));
    const fs::path out = dir_ / "stdout.txt";
    const fs::path err = dir_ / "stderr.txt";
    absl::StrAppend(&cmd, " </dev/null >", Quote(out.string()), " 2>", Quote(err.string()));
    const int status = std::system(cmd.c_str());
    Result r;
    if (status != -1 && WIFEXITED(status)) {
      r.exited = true;
      r.exit_status = WEXITSTATUS(status);
    } else if (status != -1 && WIFSIGNALED(status)) {
      r.signal = WTERMSIG(status);
    }
    r.out = ReadAll(out);
    r.err = ReadAll(err);
    return r;
  }

  // Asserts the error contract for `ottr <cmd> ...`: exit status 1, not a signal, and stderr is
  // one line starting "ottr <cmd>: error:" that contains every one of `mentions`.
  void ExpectOneLineError(const Result& r, const std::string& cmd,
                          const std::vector<std::string>& mentions) {
    ASSERT_TRUE(r.exited) << "ottr " << cmd << " was killed by signal " << r.signal << "\nstderr: "
                          << r.err;
    EXPECT_EQ(r.exit_status, 1) << "stderr: " << r.err;
    std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 1u) << "stderr must be one line, got:\n" << r.err;
    EXPECT_THAT(lines[0], StartsWith(absl::StrCat("ottr ", cmd, ": error: ")));
    for (const std::string& m : mentions) EXPECT_THAT(lines[0], HasSubstr(m));
  }

  // A model file: y = Relu(x) with x : f32[N,3], written with ONNX's protobuf classes; when
  // `external_location` is set, it also adds an initializer w : f32[3] read from that file and
  // y = Relu(x + w).
  fs::path WriteReluModel(const std::string& op = "Relu", const std::string& external_location = "") {
    onnx::ModelProto m;
    m.set_ir_version(8);
    onnx::OperatorSetIdProto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(17);
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name("g");
    onnx::ValueInfoProto* x = g->add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("N");
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(3);
    std::string in = "x";
    if (!external_location.empty()) {
      onnx::TensorProto* w = g->add_initializer();
      w->set_name("w");
      w->set_data_type(onnx::TensorProto::FLOAT);
      w->add_dims(3);
      w->set_data_location(onnx::TensorProto::EXTERNAL);
      onnx::StringStringEntryProto* e = w->add_external_data();
      e->set_key("location");
      e->set_value(external_location);
      onnx::NodeProto* add = g->add_node();
      add->set_op_type("Add");
      add->set_name("add");
      add->add_input("x");
      add->add_input("w");
      add->add_output("s");
      in = "s";
    }
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name("the_node");
    n->add_input(in);
    n->add_output("y");
    g->add_output()->set_name("y");
    fs::create_directories(dir_ / "m");
    const fs::path p = dir_ / "m" / "model.onnx";
    WriteAll(p, m.SerializeAsString());
    return p;
  }

  // An inputs folder with one tensor file.
  fs::path WriteInputs(const ir::Tensor& t, const std::string& name = "x") {
    const fs::path d = dir_ / "inputs";
    fs::create_directories(d);
    absl::Status s = importer::WriteTensorFile((d / "input_0.pb").string(), t, name);
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }

  fs::path dir_;
};

// ---- the controls: good input succeeds ----

TEST_F(CliTest, InspectBundledModel) {
  Result r = Ottr({"inspect", testing::SourcePath("models/mlp/model.onnx")});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // 784*512+512 + 512*512+512 + 512*10+10
  EXPECT_THAT(r.out, HasSubstr("parameters: 669706"));
  EXPECT_THAT(r.out, HasSubstr("Gemm"));
}

TEST_F(CliTest, RunWritesOutputs) {
  const fs::path model = WriteReluModel();
  ir::Tensor x = ir::Tensor::FromVector<float>({2, 3}, {-1.f, 2.f, -3.f, 4.f, 0.5f, -0.5f});
  const fs::path in = WriteInputs(x);
  Result r = Ottr({"run", model.string(), "--inputs", in.string(), "--outputs",
                   (dir_ / "out").string()});
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto y = importer::ReadTensorFile((dir_ / "out" / "output_0.pb").string());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->first, "y");
  EXPECT_TRUE(y->second.BitwiseEquals(
      ir::Tensor::FromVector<float>({2, 3}, {0.f, 2.f, 0.f, 4.f, 0.5f, 0.f})))
      << y->second.DebugString();
}

// ---- not a model ----

TEST_F(CliTest, EmptyFile) {
  WriteAll(dir_ / "empty.onnx", "");
  ExpectOneLineError(Ottr({"inspect", (dir_ / "empty.onnx").string()}), "inspect",
                     {"empty.onnx", "empty file"});
  WriteInputs(testing::RandomFloat({1, 3}, 1));
  ExpectOneLineError(Ottr({"run", (dir_ / "empty.onnx").string(), "--inputs",
                           (dir_ / "inputs").string()}),
                     "run", {"empty.onnx", "empty file"});
}

TEST_F(CliTest, MissingFile) {
  ExpectOneLineError(Ottr({"inspect", (dir_ / "absent.onnx").string()}), "inspect",
                     {"absent.onnx", "no such file"});
}

TEST_F(CliTest, RandomBytes) {
  std::mt19937_64 rng(7);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteAll(dir_ / "random.onnx", bytes);
  ExpectOneLineError(Ottr({"inspect", (dir_ / "random.onnx").string()}), "inspect",
                     {"random.onnx", "not a valid ONNX model"});
}

TEST_F(CliTest, TruncatedModel) {
  const std::string bytes = ReadAll(testing::SourcePath("models/mlp/model.onnx"));
  for (size_t cut : {size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    WriteAll(dir_ / "cut.onnx", bytes.substr(0, cut));
    ExpectOneLineError(Ottr({"inspect", (dir_ / "cut.onnx").string()}), "inspect", {"cut.onnx"});
  }
}

// ---- models ottr cannot run ----

TEST_F(CliTest, UnknownOp) {
  const fs::path model = WriteReluModel("FrobnicateTensor");
  ExpectOneLineError(Ottr({"inspect", model.string()}), "inspect", {"FrobnicateTensor"});
  WriteInputs(testing::RandomFloat({2, 3}, 1));
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "inputs").string()}), "run",
                     {"the_node", "FrobnicateTensor", "ai.onnx", "17"});
}

TEST_F(CliTest, ExternalDataEscapingTheFolder) {
  WriteAll(dir_ / "outside.bin", std::string(12, '\1'));
  const fs::path model = WriteReluModel("Relu", "../outside.bin");
  WriteInputs(testing::RandomFloat({2, 3}, 1));
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "inputs").string()}), "run",
                     {"'w'", "../outside.bin"});
}

// ---- bad inputs to `ottr run` ----

TEST_F(CliTest, RunWithWrongShape) {
  const fs::path model = WriteReluModel();
  WriteInputs(testing::RandomFloat({2, 4}, 1));
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "inputs").string()}), "run",
                     {"'x'", "f32[2,4]"});
}

TEST_F(CliTest, RunWithWrongDType) {
  const fs::path model = WriteReluModel();
  WriteInputs(testing::RandomInt64({2, 3}, 1, 0, 9));
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "inputs").string()}), "run",
                     {"'x'", "i64"});
}

TEST_F(CliTest, RunWithCorruptInputFile) {
  const fs::path model = WriteReluModel();
  fs::create_directories(dir_ / "inputs");
  WriteAll(dir_ / "inputs" / "input_0.pb", std::string("\xff\xff\xff garbage", 12));
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "inputs").string()}), "run",
                     {"input_0.pb"});
}

TEST_F(CliTest, RunWithoutInputs) {
  const fs::path model = WriteReluModel();
  ExpectOneLineError(Ottr({"run", model.string()}), "run", {"--inputs"});
  fs::create_directories(dir_ / "none");
  ExpectOneLineError(Ottr({"run", model.string(), "--inputs", (dir_ / "none").string()}), "run",
                     {"'x'"});
}

TEST_F(CliTest, UnknownFlag) {
  ExpectOneLineError(Ottr({"inspect", "--frobnicate", testing::SourcePath("models/mlp/model.onnx")}),
                     "inspect", {"frobnicate"});
}

// --precision: the bench row names it (tf32 is plain float32 on the CPU), `passes` shows the casts
// and --keep-fp32's exception; contradictions are one-line errors.
TEST_F(CliTest, PrecisionFlag) {
  const std::string mlp = testing::SourcePath("models/mlp/model.onnx");
  for (const auto& [flags, column] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--precision", "bf16"}, ",cpu,bf16,"},
           {{"--precision", "fp16"}, ",cpu,fp16,"},
           {{"--no-tf32"}, ",cpu,fp32,"},
           {{}, ",cpu,fp32,"}}) {
    std::vector<std::string> args = {"bench", mlp, "--device", "cpu", "--batch", "4", "--steps", "10", "--windows", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    Result r = Ottr(args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.exit_status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(column));
  }
  Result p = Ottr({"passes", mlp, "--precision", "bf16", "--keep-fp32", "^fc3$", "--fuse-epilogues", "off"});
  ASSERT_TRUE(p.exited);
  EXPECT_EQ(p.exit_status, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("%h1.bf16 : bf16[64,512] = Gemm(%x.bf16, %fc1.weight.bf16, %fc1.bias.bf16)"));
  EXPECT_THAT(p.out, HasSubstr("%logits : f32[64,10] = Gemm(%a2, %fc3.weight, %fc3.bias)"));
  ExpectOneLineError(Ottr({"passes", mlp, "--precision", "fp8"}), "passes", {"--precision fp8"});
  ExpectOneLineError(Ottr({"passes", mlp, "--precision", "tf32", "--no-tf32"}), "passes", {"--no-tf32"});
  ExpectOneLineError(Ottr({"passes", mlp, "--keep-fp32", "fc1"}), "passes", {"--keep-fp32"});
  ExpectOneLineError(Ottr({"passes", mlp, "--precision", "bf16", "--keep-fp32", "("}), "passes", {"--keep-fp32"});
}

// `ottr passes` shows the pipeline `ottr train --device D` runs: the CUDA one (with the grouped
// optimizer split per step) unless --device cpu, which has none of the GPU passes.
TEST_F(CliTest, PassesShowTheDevicePipeline) {
  const std::string mlp = testing::SourcePath("models/mlp/model.onnx");
  const auto names = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"passes", mlp, "--optimizer", "adam", "--list-passes"};
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = Ottr(args);
    EXPECT_TRUE(r.exited && r.exit_status == 0) << r.err;
    return std::vector<std::string>(absl::StrSplit(r.out, '\n', absl::SkipEmpty()));
  };
  const std::vector<std::string> cuda = names({});
  EXPECT_EQ(names({"--device", "cuda"}), cuda);
  for (const char* p : {"fuse-gemm-epilogue", "fuse-linear-sce", "nhwc-layout", "kmajor-gemm-operands",
                        "group-optimizer-updates", "split-optimizer-updates"}) {
    EXPECT_THAT(cuda, Contains(std::string(p)));
  }
  const std::vector<std::string> cuda_plain = names({"--multi-tensor-optimizer", "off", "--fuse-epilogues", "off"});
  EXPECT_THAT(cuda_plain, Not(Contains(std::string("split-optimizer-updates"))));
  EXPECT_THAT(cuda_plain, Not(Contains(std::string("fuse-gemm-epilogue"))));
  const std::vector<std::string> cpu = names({"--device", "cpu"});
  EXPECT_THAT(cpu, Contains(std::string("autodiff")));
  for (const char* p : {"fuse-gemm-epilogue", "nhwc-layout", "split-optimizer-updates"}) {
    EXPECT_THAT(cpu, Not(Contains(std::string(p))));
  }
  ExpectOneLineError(Ottr({"passes", mlp, "--device", "gpu"}), "passes", {"--device gpu"});
}

TEST_F(CliTest, BenchTraceNeedsTheGpu) {
  ExpectOneLineError(Ottr({"bench", testing::SourcePath("models/mlp/model.onnx"), "--device", "cpu", "--batch", "4",
                           "--trace", (dir_ / "trace.txt").string()}),
                     "bench", {"--trace needs --device cuda"});
  ExpectOneLineError(Ottr({"bench", testing::SourcePath("models/mlp/model.onnx"), "--device", "cpu",
                           "--large-relu-epilogue-tf32", "sometimes"}),
                     "bench", {"--large-relu-epilogue-tf32 must be on or off"});
}

TEST_F(CliTest, TestDataOnMissingFolder) {
  ExpectOneLineError(Ottr({"test-data", (dir_ / "absent").string()}), "test-data", {"absent"});
}

}  // namespace
}  // namespace ottr
