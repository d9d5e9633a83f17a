// Training data: IDX files (MNIST/Fashion-MNIST, gzip or raw), .npy arrays, and folders of ONNX
// TensorProto batches (one folder per step, for exact reproducibility), behind one interface.
#ifndef OTTR_RUNTIME_DATA_H_
#define OTTR_RUNTIME_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/tensor.h"
#include "runtime/executor.h"

namespace ottr::runtime {

// Reads an IDX file (big-endian header: magic 0x0000TTNN, then N dims; types u8, i8, i16, i32,
// f32, f64), gzip-compressed or raw. Errors name the file.
absl::StatusOr<ir::Tensor> ReadIdx(const std::string& path);
// Reads a NumPy .npy array (format 1.0/2.0/3.0, little-endian, C order; bool, (u)int8..64,
// float16/32/64).
absl::StatusOr<ir::Tensor> ReadNpy(const std::string& path);
// Writes a .npy file (tests and tools).
absl::Status WriteNpy(const std::string& path, const ir::Tensor& t);

enum class Normalize { kNone, kScale, kStandardize };

// An in-memory set of examples: features [N, ...] (float32 after normalisation) and labels [N].
struct ArrayDataset {
  ir::Tensor features;
  ir::Tensor labels;
  int64_t size() const { return features.defined() ? features.dim(0) : 0; }
};

// Converts integer features to float32 and normalises: kScale divides by 255 (uint8 data) and
// kStandardize subtracts `mean` and divides by `stddev` after scaling. Labels become int64
// (integer labels) or stay float (regression targets).
absl::StatusOr<ArrayDataset> PrepareArrays(ir::Tensor features, ir::Tensor labels, Normalize norm,
                                           float mean, float stddev);

// Where the data of `--data SPEC` comes from.
struct DataSource {
  enum class Kind { kArrays, kSteps };
  Kind kind = Kind::kArrays;
  ArrayDataset train;
  ArrayDataset test;                // empty when there is none
  std::vector<TensorMap> steps;     // kSteps: one feed map per step (graph input names, "labels")
};

struct DataOptions {
  Normalize normalize = Normalize::kScale;
  float mean = 0.0f;
  float stddev = 1.0f;
};

// SPEC is one of:
//   fashion-mnist | mnist             the Debian data sets (/usr/share/datasets/...)
//   DIR with step_0/ step_1/ ...      TensorProto batches: each file's name is the input it feeds,
//                                     or "labels"
//   DIR with train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] (t10k-* = test set)
//   X.npy,Y.npy[,XTEST.npy,YTEST.npy]
absl::StatusOr<DataSource> LoadData(const std::string& spec, const DataOptions& options);

// Gathers the examples `indices` into a batch whose features have `feature_dims` per example
// (the model input's dims after the batch dim; the element count must match the data's).
absl::StatusOr<TensorMap> MakeBatch(const ArrayDataset& data, const std::vector<int64_t>& indices,
                                    const std::string& input_name,
                                    const std::vector<int64_t>& feature_dims,
                                    const std::string& labels_name);

// A deterministic permutation of [0, n) for epoch `epoch` of a run seeded with `seed` (the same
// on every platform: Fisher-Yates over a SplitMix64 stream).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace ottr::runtime

#endif  // OTTR_RUNTIME_DATA_H_
