// libFuzzer target for the ONNX importer: any byte string must give either a graph or an error
// status, never a crash, a sanitizer report, a hang or an unbounded allocation.
//
// Per input: ParseModelProto -> ImportModel -> (when it imports) shape inference over the whole
// graph -> verifier -> CPU executor creation. The graph is not run: running is bounded by the
// model's sizes, which a fuzzer may set to anything.
//
// Built with -DOTTR_FUZZ=ON and clang (make fuzz; scripts/run-fuzzer.sh runs it).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"
#include "runtime/cpu/cpu_executor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto model = ottr::importer::ParseModelProto(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  if (!model.ok()) return 0;
  ottr::importer::ImportOptions options;
  // External data resolves inside a folder that does not exist, so the fuzzer exercises the
  // location checks without reading files of the machine.
  options.model_dir = "/nonexistent/ottr-fuzz-model-dir";
  auto graph = ottr::importer::ImportModel(*model, options);
  if (!graph.ok()) return 0;
  if (!ottr::ir::InferGraphShapes(ottr::ir::OpRegistry::Global(), **graph).ok()) return 0;
  if (!ottr::ir::VerifyGraph(**graph).ok()) return 0;
  auto exec = ottr::runtime::cpu::CpuExecutor::Create(**graph);
  (void)exec;
  return 0;
}
