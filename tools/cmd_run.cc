// `ottr run MODEL --inputs DIR [--outputs DIR] [--device cpu]`: inference on ONNX TensorProto
// files. Input files bind to graph inputs by the TensorProto's name, or else by their order
// (input_0.pb, input_1.pb, ...).
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"
#include "passes/lower_gradient.h"
#include "runtime/cpu/cpu_executor.h"
#include "tools/cli_common.h"
#include "tools/device.h"

namespace ottr::tools {

namespace fs = std::filesystem;

absl::Status CmdRun(const std::vector<std::string>& argv) {
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"inputs", "outputs", "device"}, {}));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("run takes one MODEL");
  if (!args.has("inputs")) return absl::InvalidArgumentError("run needs --inputs DIR");
  const std::string device = args.get("device", "cpu");
  OTTR_ASSIGN_OR_RETURN(auto graph, importer::ImportModelFile(args.positional()[0]));
  OTTR_RETURN_IF_ERROR(passes::LowerForExecution(*graph));
  OTTR_ASSIGN_OR_RETURN(auto exec, MakeExecutor(*graph, device));
  const std::string in_dir = args.get("inputs");
  if (!fs::is_directory(in_dir)) return absl::NotFoundError(absl::StrCat(in_dir, ": no such folder"));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(in_dir)) {
    if (e.is_regular_file() && e.path().extension() == ".pb") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  runtime::TensorMap feeds;
  size_t positional = 0;
  for (const fs::path& f : files) {
    OTTR_ASSIGN_OR_RETURN(auto named, importer::ReadTensorFile(f.string()));
    std::string name = named.first;
    const ir::Value* v = name.empty() ? nullptr : graph->FindValue(name);
    if (v == nullptr || v->kind() != ir::Value::Kind::kInput) {
      if (positional >= graph->inputs().size()) {
        return absl::InvalidArgumentError(absl::StrCat(f.string(), ": the model has only ",
                                                       graph->inputs().size(), " inputs"));
      }
      name = graph->inputs()[positional++]->name();
    }
    feeds[name] = std::move(named.second);
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Tensor> outputs, exec->Run(feeds));
  const std::string out_dir = args.get("outputs");
  if (!out_dir.empty()) fs::create_directories(out_dir);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string& name = graph->outputs()[k]->name();
    std::printf("%s = %s\n", name.c_str(), outputs[k].DebugString().c_str());
    if (!out_dir.empty()) {
      OTTR_RETURN_IF_ERROR(importer::WriteTensorFile(
          (fs::path(out_dir) / absl::StrCat("output_", k, ".pb")).string(), outputs[k], name));
    }
  }
  return absl::OkStatus();
}

}  // namespace ottr::tools
