// ONNX ModelProto -> ir::Graph.
//
// The importer reads the model with ONNX's own protobuf classes, checks the opsets, converts
// initializers (raw, typed or external data), graph inputs/outputs and value_info types, and
// imports each node into the canonical (newest-opset) form of its op (see canonicalize.h), running
// the op's shape function as it goes. Errors carry the node index and name.
#ifndef OTTR_IMPORTER_ONNX_IMPORTER_H_
#define OTTR_IMPORTER_ONNX_IMPORTER_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "onnx/onnx_pb.h"

namespace ottr::importer {

struct ImportOptions {
  std::string model_dir;  // folder external data paths are relative to (and confined to)
  // Binds symbolic input dims by name (e.g. {"N", 128}) before shape inference.
  std::vector<std::pair<std::string, int64_t>> bind_dims;
};

// Parses `bytes` as a ModelProto; InvalidArgument when they are not a well-formed ONNX model.
absl::StatusOr<onnx::ModelProto> ParseModelProto(absl::string_view bytes, absl::string_view what);
absl::StatusOr<onnx::ModelProto> LoadModelProto(const std::string& path);

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModel(const onnx::ModelProto& model,
                                                       const ImportOptions& options = {});
// Reads and imports a model file; external data is looked up next to it.
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModelFile(const std::string& path,
                                                           ImportOptions options = {});

// A model's TrainingInfoProto as ottr runs it: `step` is the main graph with the algorithm's
// nodes merged in (they read the main graph's values by name), the algorithm's outputs as graph
// outputs and each update_binding as a state update; `initialization` (optional) computes initial
// values, bound to initializers by `initialization_binding` (initializer, output name).
struct TrainingInfoImport {
  std::unique_ptr<ir::Graph> step;
  std::unique_ptr<ir::Graph> initialization;
  std::vector<std::pair<std::string, std::string>> initialization_binding;
};
absl::StatusOr<TrainingInfoImport> ImportTrainingInfo(const onnx::ModelProto& model,
                                                      const ImportOptions& options = {});

// The ir::TensorType described by an ONNX ValueInfoProto (tensor types only).
absl::StatusOr<ir::TensorType> TypeFromValueInfo(const onnx::ValueInfoProto& vi);

}  // namespace ottr::importer

#endif  // OTTR_IMPORTER_ONNX_IMPORTER_H_
