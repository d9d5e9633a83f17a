// `ottr inspect MODEL`: opsets, inputs and outputs with shapes, parameter count, op histogram and
// the ops ottr cannot run. Works from the ModelProto so that it reports every unsupported op, not
// only the first one the importer meets.
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "tools/cli_common.h"

namespace ottr::tools {

absl::Status CmdInspect(const std::vector<std::string>& argv) {
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {}, {}));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("inspect takes one MODEL");
  const std::string path = args.positional()[0];
  OTTR_ASSIGN_OR_RETURN(onnx::ModelProto model, importer::LoadModelProto(path));
  std::printf("model: %s\n", path.c_str());
  std::printf("ir_version: %lld, producer: %s %s\n", static_cast<long long>(model.ir_version()),
              model.producer_name().c_str(), model.producer_version().c_str());
  std::map<std::string, int64_t> opsets;
  for (const auto& o : model.opset_import()) {
    const std::string d = o.domain().empty() || o.domain() == "ai.onnx" ? "" : o.domain();
    opsets[d] = o.version();
    std::printf("opset: %s %lld\n", d.empty() ? "ai.onnx" : d.c_str(),
                static_cast<long long>(o.version()));
  }
  std::map<std::string, int> histogram;
  std::map<std::string, std::string> unsupported;
  const ir::OpRegistry& registry = ir::OpRegistry::Global();
  const runtime::cpu::KernelRegistry& kernels = runtime::cpu::KernelRegistry::Global();
  for (const onnx::NodeProto& n : model.graph().node()) {
    const std::string d = n.domain() == "ai.onnx" ? "" : n.domain();
    const std::string key = d.empty() ? n.op_type() : absl::StrCat(d, "::", n.op_type());
    ++histogram[key];
    const ir::OpSchema* s = registry.Find(d, n.op_type());
    const int64_t opset = opsets.count(d) ? opsets[d] : 0;
    if (s == nullptr) {
      unsupported[key] = "unknown op";
    } else if (d.empty() && (opset < s->min_opset || opset > s->max_opset)) {
      unsupported[key] = absl::StrCat("opset ", opset, " outside ", s->min_opset, "..", s->max_opset);
    } else if (kernels.Find(d, n.op_type()) == nullptr) {
      unsupported[key] = "no CPU kernel";
    }
  }
  auto graph = importer::ImportModelFile(path);
  int64_t params = 0, param_tensors = 0;
  if (graph.ok()) {
    std::printf("inputs:\n");
    for (const ir::Value* v : (*graph)->inputs()) {
      std::printf("  %s : %s\n", v->name().c_str(), v->type().ToString().c_str());
    }
    std::printf("outputs:\n");
    for (const ir::Value* v : (*graph)->outputs()) {
      std::printf("  %s : %s\n", v->name().c_str(), v->type().ToString().c_str());
    }
    for (const ir::Value* v : (*graph)->initializers()) {
      if (!ir::IsFloat(v->type().dtype)) continue;
      params += v->initializer()->num_elements();
      ++param_tensors;
    }
    std::printf("parameters: %lld in %lld float initializers\n", static_cast<long long>(params),
                static_cast<long long>(param_tensors));
  }
  std::printf("nodes: %d\n", model.graph().node_size());
  for (const auto& [op, count] : histogram) std::printf("  %-28s %d\n", op.c_str(), count);
  if (unsupported.empty() && graph.ok()) {
    std::printf("ottr can run every op of this model\n");
    return absl::OkStatus();
  }
  for (const auto& [op, why] : unsupported) {
    std::printf("unsupported: %s (%s)\n", op.c_str(), why.c_str());
  }
  if (!graph.ok()) return graph.status();
  return absl::UnimplementedError(absl::StrCat(unsupported.size(), " op(s) of ", path,
                                               " cannot run: ",
                                               absl::StrJoin(unsupported, ", ", [](std::string* s, const auto& kv) {
                                                 s->append(kv.first);
                                               })));
}

}  // namespace ottr::tools
