#include "runtime/data.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"

namespace ottr::runtime {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::Tensor;

// Reads a whole file, inflating it when it is gzip-compressed.
absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  if (!fs::exists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated file (", msg, ")"));
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  gzclose(f);
  return out;
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

absl::StatusOr<ArrayDataset> LoadIdxPair(const std::string& images, const std::string& labels,
                                         const DataOptions& o) {
  OTTR_ASSIGN_OR_RETURN(Tensor x, ReadIdx(images));
  OTTR_ASSIGN_OR_RETURN(Tensor y, ReadIdx(labels));
  return PrepareArrays(std::move(x), std::move(y), o.normalize, o.mean, o.stddev);
}

std::string FirstExisting(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (fs::exists(c)) return c;
  }
  return "";
}

absl::StatusOr<DataSource> LoadIdxDir(const std::string& dir, const DataOptions& o) {
  auto find = [&](const std::string& stem) {
    return FirstExisting({absl::StrCat(dir, "/", stem, ".gz"), absl::StrCat(dir, "/", stem)});
  };
  const std::string xi = find("train-images-idx3-ubyte");
  const std::string yi = find("train-labels-idx1-ubyte");
  if (xi.empty() || yi.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no train-images-idx3-ubyte[.gz] and "
                                                 "train-labels-idx1-ubyte[.gz]"));
  }
  DataSource src;
  OTTR_ASSIGN_OR_RETURN(src.train, LoadIdxPair(xi, yi, o));
  const std::string xt = find("t10k-images-idx3-ubyte");
  const std::string yt = find("t10k-labels-idx1-ubyte");
  if (!xt.empty() && !yt.empty()) {
    OTTR_ASSIGN_OR_RETURN(src.test, LoadIdxPair(xt, yt, o));
  }
  return src;
}

absl::StatusOr<DataSource> LoadStepDir(const std::string& dir) {
  DataSource src;
  src.kind = DataSource::Kind::kSteps;
  for (int64_t k = 0;; ++k) {
    const fs::path step = fs::path(dir) / absl::StrCat("step_", k);
    if (!fs::is_directory(step)) break;
    TensorMap feeds;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(step)) {
      if (e.is_regular_file() && e.path().extension() == ".pb") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      OTTR_ASSIGN_OR_RETURN(auto named, importer::ReadTensorFile(f.string()));
      std::string name = named.first.empty() ? f.stem().string() : named.first;
      if (f.stem() == "labels") name = "labels";
      if (feeds.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(step.string(), ": two files feed '", name, "'"));
      }
      feeds[name] = std::move(named.second);
    }
    if (feeds.empty()) return absl::NotFoundError(absl::StrCat(step.string(), ": no .pb files"));
    src.steps.push_back(std::move(feeds));
  }
  if (src.steps.empty()) return absl::NotFoundError(absl::StrCat(dir, ": no step_0 folder"));
  return src;
}

template <typename T>
void ConvertToFloat(const Tensor& in, float* out) {
  const T* p = in.data<T>();
  for (int64_t i = 0; i < in.num_elements(); ++i) out[i] = static_cast<float>(ir::ToDouble(p[i]));
}

}  // namespace

absl::StatusOr<Tensor> ReadIdx(const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(std::string bytes, ReadMaybeGzip(path));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (", why, ")"));
  };
  if (bytes.size() < 4) return bad("shorter than its header");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (p[0] != 0 || p[1] != 0) return bad("bad magic");
  DType t;
  switch (p[2]) {
    case 0x08: t = DType::kUInt8; break;
    case 0x09: t = DType::kInt8; break;
    case 0x0B: t = DType::kInt16; break;
    case 0x0C: t = DType::kInt32; break;
    case 0x0D: t = DType::kFloat32; break;
    case 0x0E: t = DType::kFloat64; break;
    default: return bad(absl::StrCat("unknown type code ", int{p[2]}));
  }
  const int rank = p[3];
  if (rank == 0 || bytes.size() < 4 + 4u * rank) return bad("truncated header");
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    dims.push_back(BigEndian32(p + 4 + 4 * i));
    n *= dims.back();
  }
  const size_t offset = 4 + 4u * rank;
  const size_t need = static_cast<size_t>(n) * ir::DTypeSize(t);
  if (bytes.size() - offset != need) {
    return absl::DataLossError(absl::StrCat(path, ": IDX data has ", bytes.size() - offset,
                                            " bytes, its header [", absl::StrJoin(dims, ","),
                                            "] needs ", need, " (truncated or corrupt)"));
  }
  Tensor out(t, dims);
  const size_t es = ir::DTypeSize(t);
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {  // big-endian elements
    for (size_t b = 0; b < es; ++b) dst[i * es + b] = p[offset + i * es + (es - 1 - b)];
  }
  return out;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(std::string bytes, importer::ReadFileBytes(path));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npy file (", why, ")"));
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("bad magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return bad(absl::StrCat("version ", major));
  }
  if (bytes.size() < header_start + header_len) return bad("truncated header");
  const std::string header = bytes.substr(header_start, header_len);
  auto field = [&](const std::string& key) -> std::string {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) return "";
    size_t v = header.find(':', k);
    return v == std::string::npos ? "" : header.substr(v + 1);
  };
  std::string descr = field("descr");
  const size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos) return bad("no descr");
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  if (absl::StrContains(field("fortran_order").substr(0, 7), "True")) {
    return absl::UnimplementedError(absl::StrCat(path, ": Fortran-order arrays are not supported"));
  }
  static const std::vector<std::pair<std::string, DType>> kTypes = {
      {"|b1", DType::kBool}, {"|u1", DType::kUInt8}, {"|i1", DType::kInt8}, {"<u2", DType::kUInt16},
      {"<i2", DType::kInt16}, {"<u4", DType::kUInt32}, {"<i4", DType::kInt32}, {"<u8", DType::kUInt64},
      {"<i8", DType::kInt64}, {"<f2", DType::kFloat16}, {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}};
  DType t = DType::kUndefined;
  for (const auto& [d, dt] : kTypes) {
    if (d == descr) t = dt;
  }
  if (t == DType::kUndefined) {
    return absl::UnimplementedError(absl::StrCat(path, ": .npy element type '", descr, "' is not supported"));
  }
  std::string shape = field("shape");
  const size_t l = shape.find('('), r = shape.find(')');
  if (l == std::string::npos || r == std::string::npos) return bad("no shape");
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(shape.substr(l + 1, r - l - 1), ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) return bad("bad shape");
    dims.push_back(d);
  }
  const size_t data = header_start + header_len;
  Tensor out(t, dims);
  if (bytes.size() - data != out.nbytes()) {
    return absl::DataLossError(absl::StrCat(path, ": .npy data has ", bytes.size() - data,
                                            " bytes, shape (", absl::StrJoin(dims, ","), ") needs ",
                                            out.nbytes()));
  }
  if (out.nbytes()) std::memcpy(out.raw_data(), bytes.data() + data, out.nbytes());
  return out;
}

absl::Status WriteNpy(const std::string& path, const Tensor& t) {
  std::string descr;
  switch (t.dtype()) {
    case DType::kFloat32: descr = "<f4"; break;
    case DType::kFloat64: descr = "<f8"; break;
    case DType::kInt64: descr = "<i8"; break;
    case DType::kInt32: descr = "<i4"; break;
    case DType::kUInt8: descr = "|u1"; break;
    default: return absl::UnimplementedError("WriteNpy: unsupported element type");
  }
  std::string shape = absl::StrJoin(t.dims(), ", ");
  if (t.rank() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    shape, "), }");
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return importer::WriteFileAtomically(path, bytes);
}

absl::StatusOr<ArrayDataset> PrepareArrays(Tensor features, Tensor labels, Normalize norm,
                                           float mean, float stddev) {
  if (features.rank() < 1 || labels.rank() < 1 || features.dim(0) != labels.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "features [", absl::StrJoin(features.dims(), ","), "] and labels [",
        absl::StrJoin(labels.dims(), ","), "] disagree on the number of examples"));
  }
  ArrayDataset out;
  const bool bytes = features.dtype() == DType::kUInt8;
  Tensor f(DType::kFloat32, features.dims());
  absl::Status st = ir::VisitDType(features.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (std::is_void_v<T>) {
      return absl::UnimplementedError("unsupported feature element type");
    } else {
      ConvertToFloat<T>(features, f.data<float>());
      return absl::OkStatus();
    }
  });
  OTTR_RETURN_IF_ERROR(st);
  if (norm != Normalize::kNone) {
    const float scale = bytes ? 1.0f / 255.0f : 1.0f;
    const bool standardize = norm == Normalize::kStandardize;
    for (float& x : f.span<float>()) {
      x *= scale;
      if (standardize) x = (x - mean) / stddev;
    }
  }
  out.features = std::move(f);
  if (ir::IsInteger(labels.dtype())) {
    Tensor l(DType::kInt64, labels.dims());
    for (int64_t i = 0; i < labels.num_elements(); ++i) l.data<int64_t>()[i] = labels.GetAsInt64(i);
    out.labels = std::move(l);
  } else {
    out.labels = std::move(labels);
  }
  return out;
}

absl::StatusOr<DataSource> LoadData(const std::string& spec, const DataOptions& options) {
  if (spec == "fashion-mnist" || spec == "mnist") {
    const std::string dir = absl::StrCat("/usr/share/datasets/", spec);
    if (!fs::is_directory(dir)) {
      return absl::NotFoundError(absl::StrCat(
          dir, " is missing: install the Debian package dataset-", spec,
          " (scripts/install-deps.sh does)"));
    }
    return LoadIdxDir(dir, options);
  }
  if (absl::StrContains(spec, ".npy")) {
    std::vector<std::string> files = absl::StrSplit(spec, ',');
    if (files.size() != 2 && files.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat("--data ", spec,
                                                     ": expected X.npy,Y.npy[,XTEST.npy,YTEST.npy]"));
    }
    DataSource src;
    OTTR_ASSIGN_OR_RETURN(Tensor x, ReadNpy(files[0]));
    OTTR_ASSIGN_OR_RETURN(Tensor y, ReadNpy(files[1]));
    OTTR_ASSIGN_OR_RETURN(src.train, PrepareArrays(std::move(x), std::move(y), options.normalize,
                                                   options.mean, options.stddev));
    if (files.size() == 4) {
      OTTR_ASSIGN_OR_RETURN(Tensor xt, ReadNpy(files[2]));
      OTTR_ASSIGN_OR_RETURN(Tensor yt, ReadNpy(files[3]));
      OTTR_ASSIGN_OR_RETURN(src.test, PrepareArrays(std::move(xt), std::move(yt), options.normalize,
                                                    options.mean, options.stddev));
    }
    return src;
  }
  if (!fs::exists(spec)) return absl::NotFoundError(absl::StrCat("--data ", spec, ": no such file or folder"));
  if (fs::is_directory(fs::path(spec) / "step_0")) return LoadStepDir(spec);
  if (fs::is_directory(spec)) return LoadIdxDir(spec, options);
  return absl::InvalidArgumentError(absl::StrCat("--data ", spec, ": not a data set ottr can read "
                                                 "(fashion-mnist, mnist, a folder of IDX files or "
                                                 "step_K batches, or X.npy,Y.npy)"));
}

absl::StatusOr<TensorMap> MakeBatch(const ArrayDataset& data, const std::vector<int64_t>& indices,
                                    const std::string& input_name,
                                    const std::vector<int64_t>& feature_dims,
                                    const std::string& labels_name) {
  const int64_t per = data.features.num_elements() / std::max<int64_t>(data.size(), 1);
  if (ir::NumElements(feature_dims) != per) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an example of the data has ", per, " values, the model input '", input_name,
        "' takes [", absl::StrJoin(feature_dims, ","), "] per example"));
  }
  const int64_t b = static_cast<int64_t>(indices.size());
  std::vector<int64_t> dims = {b};
  dims.insert(dims.end(), feature_dims.begin(), feature_dims.end());
  Tensor x(DType::kFloat32, dims);
  const int64_t lper = data.labels.num_elements() / std::max<int64_t>(data.size(), 1);
  std::vector<int64_t> ldims = data.labels.dims();
  ldims[0] = b;
  Tensor y(data.labels.dtype(), ldims);
  const size_t les = ir::DTypeSize(y.dtype());
  for (int64_t i = 0; i < b; ++i) {
    const int64_t src = indices[i];
    if (src < 0 || src >= data.size()) return absl::OutOfRangeError("example index out of range");
    std::memcpy(x.data<float>() + i * per, data.features.data<float>() + src * per, per * sizeof(float));
    std::memcpy(static_cast<char*>(y.raw_data()) + i * lper * les,
                static_cast<const char*>(data.labels.raw_data()) + src * lper * les, lper * les);
  }
  TensorMap feeds;
  feeds[input_name] = std::move(x);
  feeds[labels_name] = std::move(y);
  return feeds;
}

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1;
  auto next = [&state]() {  // SplitMix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(next() % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace ottr::runtime
