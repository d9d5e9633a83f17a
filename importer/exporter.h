// ir::Graph -> ONNX ModelProto. Nodes are written in their canonical form under the opset that
// form needs (at least the imported one, and 18 for ai.onnx so that inputs such as ReduceMean's
// axes are valid); initializers carry the graph's current data (e.g. trained parameters).
#ifndef OTTR_IMPORTER_EXPORTER_H_
#define OTTR_IMPORTER_EXPORTER_H_

#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "onnx/onnx_pb.h"

namespace ottr::importer {

// The ai.onnx opset exported graphs declare at least (the canonical forms are valid from here).
inline constexpr int64_t kMinExportOpset = 18;

absl::StatusOr<onnx::ModelProto> ExportModel(const ir::Graph& graph);
// Exports and writes atomically (temporary file + rename).
absl::Status ExportModelFile(const ir::Graph& graph, const std::string& path);

// Replaces the data of every initializer of `model`'s main graph that `graph` has under the same
// name (same type and shape required), keeping everything else of the original file.
absl::Status UpdateInitializers(const ir::Graph& graph, onnx::ModelProto& model);

}  // namespace ottr::importer

#endif  // OTTR_IMPORTER_EXPORTER_H_
