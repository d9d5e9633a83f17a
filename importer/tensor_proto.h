// ONNX TensorProto <-> ir::Tensor, including typed fields, raw_data and external data files.
#ifndef OTTR_IMPORTER_TENSOR_PROTO_H_
#define OTTR_IMPORTER_TENSOR_PROTO_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "ir/tensor.h"
#include "onnx/onnx_pb.h"

namespace ottr::importer {

// Converts a TensorProto. External data is read from `model_dir` (the folder of the model file);
// a location that is absolute or resolves outside that folder is rejected. Errors name the
// tensor.
absl::StatusOr<ir::Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const std::string& model_dir = "");
// Serialises a tensor into raw_data.
onnx::TensorProto TensorToProto(const ir::Tensor& t, const std::string& name);

// Reads a serialised TensorProto file (ONNX backend-test .pb); returns its name too.
absl::StatusOr<std::pair<std::string, ir::Tensor>> ReadTensorFile(const std::string& path);
// Writes a TensorProto file (temporary file + rename).
absl::Status WriteTensorFile(const std::string& path, const ir::Tensor& t, const std::string& name);

// Reads a whole file; NotFound / InvalidArgument with the path on failure.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so a crash
// never leaves a half-written file under the final name.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);

}  // namespace ottr::importer

#endif  // OTTR_IMPORTER_TENSOR_PROTO_H_
