// `ottr test-data DIR...`: runs ONNX backend-test folders (model.onnx plus test_data_set_N/ with
// input_K.pb and output_K.pb) on the CPU reference and compares as ONNX's runner does.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"
#include "passes/lower_gradient.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tools/cli_common.h"
#include "tools/device.h"

namespace ottr::tools {
namespace {

namespace fs = std::filesystem;

// One line of the expectations file: "test_name reason..." (an expected failure), or
// "test_name tolerance RTOL ATOL reason..." (passes with the given tolerance).
struct Expectation {
  bool expect_failure = false;
  double rtol = -1.0;
  double atol = -1.0;
  std::string reason;
};

absl::StatusOr<std::map<std::string, Expectation>> ReadExpectations(const std::string& path) {
  std::map<std::string, Expectation> out;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<std::string> words = absl::StrSplit(l, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    Expectation e;
    size_t reason_from = 1;
    if (words.size() >= 4 && words[1] == "tolerance") {
      if (!absl::SimpleAtod(words[2], &e.rtol) || !absl::SimpleAtod(words[3], &e.atol)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", lineno, ": bad tolerance"));
      }
      reason_from = 4;
    } else {
      e.expect_failure = true;
    }
    for (size_t i = reason_from; i < words.size(); ++i) absl::StrAppend(&e.reason, i > reason_from ? " " : "", words[i]);
    if (e.reason.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", lineno, ": '", words[0],
                                                     "' needs a reason"));
    }
    out[words[0]] = e;
  }
  return out;
}

// Runs one test folder; OK when every data set matches.
absl::Status RunTest(const fs::path& dir, double rtol, double atol, const std::string& device,
                     const DeviceOptions& dopt) {
  OTTR_ASSIGN_OR_RETURN(auto graph, importer::ImportModelFile((dir / "model.onnx").string()));
  OTTR_RETURN_IF_ERROR(passes::LowerForExecution(*graph));
  OTTR_ASSIGN_OR_RETURN(auto exec, MakeExecutor(*graph, device, dopt));
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return absl::NotFoundError("no test_data_set_* folder");
  for (const fs::path& set : sets) {
    runtime::TensorMap feeds;
    for (size_t k = 0; k < graph->inputs().size(); ++k) {
      const fs::path f = set / absl::StrCat("input_", k, ".pb");
      if (!fs::exists(f)) continue;  // optional input left out
      OTTR_ASSIGN_OR_RETURN(auto named, importer::ReadTensorFile(f.string()));
      feeds[graph->inputs()[k]->name()] = std::move(named.second);
    }
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Tensor> outputs, exec->Run(feeds));
    for (size_t k = 0; k < outputs.size(); ++k) {
      const fs::path f = set / absl::StrCat("output_", k, ".pb");
      if (!fs::exists(f)) continue;
      OTTR_ASSIGN_OR_RETURN(auto expected, importer::ReadTensorFile(f.string()));
      absl::Status s = runtime::AllClose(outputs[k], expected.second, rtol, atol);
      if (!s.ok()) {
        return AnnotateStatus(s, absl::StrCat(set.filename().string(), " output ", k, " '",
                                              graph->outputs()[k]->name(), "'"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CmdTestData(const std::vector<std::string>& argv, int* exit_code) {
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"expected-failures", "rtol", "atol", "filter", "device"},
                                               {"verbose", "no-tf32", "no-cuda-graph", "skip-without-device"}));
  const std::string device = ResolveDevice(args.get("device", "cpu"));
  if (device == "cuda" && args.has("skip-without-device") && ResolveDevice("auto") != "cuda") {
    std::printf("skipped: no CUDA device visible\n");
    *exit_code = 77;  // CTest's SKIP_RETURN_CODE
    return absl::OkStatus();
  }
  DeviceOptions dopt;
  dopt.tf32 = !args.has("no-tf32");
  dopt.cuda_graph = !args.has("no-cuda-graph");
  if (args.positional().empty()) return absl::InvalidArgumentError("test-data needs a folder");
  OTTR_ASSIGN_OR_RETURN(double rtol, args.get_double("rtol", 1e-3));
  OTTR_ASSIGN_OR_RETURN(double atol, args.get_double("atol", 1e-7));
  std::map<std::string, Expectation> expectations;
  if (args.has("expected-failures")) {
    OTTR_ASSIGN_OR_RETURN(expectations, ReadExpectations(args.get("expected-failures")));
  }
  const std::string filter = args.get("filter");
  std::vector<fs::path> tests;
  for (const std::string& d : args.positional()) {
    if (!fs::is_directory(d)) return absl::NotFoundError(absl::StrCat(d, ": no such folder"));
    if (fs::exists(fs::path(d) / "model.onnx")) {
      tests.push_back(d);
      continue;
    }
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
    }
  }
  std::sort(tests.begin(), tests.end());
  int passed = 0, failed = 0, skipped = 0;
  for (const fs::path& t : tests) {
    const std::string name = t.filename().string();
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    auto it = expectations.find(name);
    const Expectation* exp = it == expectations.end() ? nullptr : &it->second;
    const double r = exp && exp->rtol >= 0 ? exp->rtol : rtol;
    const double a = exp && exp->atol >= 0 ? exp->atol : atol;
    absl::Status s = RunTest(t, r, a, device, dopt);
    if (exp && exp->expect_failure) {
      if (s.ok()) {
        ++failed;
        std::printf("FAIL %s: passed but is listed as an expected failure (%s); remove it\n",
                    name.c_str(), exp->reason.c_str());
      } else {
        ++skipped;
        std::printf("SKIP %s: expected failure: %s\n", name.c_str(), exp->reason.c_str());
        if (args.has("verbose")) std::printf("     %s\n", std::string(s.message()).c_str());
      }
    } else if (s.ok()) {
      ++passed;
      if (args.has("verbose")) std::printf("PASS %s\n", name.c_str());
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), std::string(s.message()).c_str());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  *exit_code = failed == 0 ? 0 : 1;
  return absl::OkStatus();
}

}  // namespace ottr::tools
