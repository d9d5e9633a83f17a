// Training checkpoints: named tensors (parameters, optimizer state, step counter) plus text
// metadata (epoch, position, random-generator state), written to a temporary file and renamed so
// an interrupted write never replaces a good checkpoint.
//
// File layout: "ottr-checkpoint 1\n", then "meta <key> <len>\n<value>\n" records, then
// "tensor <name-len> <proto-len>\n<name><TensorProto bytes>\n" records, then "end\n".
#ifndef OTTR_RUNTIME_CHECKPOINT_H_
#define OTTR_RUNTIME_CHECKPOINT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "ir/tensor.h"

namespace ottr::runtime {

struct Checkpoint {
  std::map<std::string, std::string> meta;
  std::map<std::string, ir::Tensor> tensors;
};

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& ckpt);
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace ottr::runtime

#endif  // OTTR_RUNTIME_CHECKPOINT_H_
