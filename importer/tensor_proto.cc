#include "importer/tensor_proto.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::importer {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::Tensor;

absl::Status Bad(const onnx::TensorProto& p, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "': ", msg));
}

// Reads the bytes of an external-data tensor, confined to the model's folder.
absl::StatusOr<std::string> ReadExternal(const onnx::TensorProto& p, const std::string& model_dir,
                                         size_t expected) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      if (!absl::SimpleAtoi(kv.value(), &offset) || offset < 0) {
        return Bad(p, absl::StrCat("bad external data offset '", kv.value(), "'"));
      }
    } else if (kv.key() == "length") {
      if (!absl::SimpleAtoi(kv.value(), &length) || length < 0) {
        return Bad(p, absl::StrCat("bad external data length '", kv.value(), "'"));
      }
    }
  }
  if (location.empty()) return Bad(p, "external data without a location");
  const fs::path rel(location);
  if (rel.is_absolute()) {
    return Bad(p, absl::StrCat("external data location '", location,
                               "' is an absolute path; it must be inside the model's folder"));
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(model_dir.empty() ? "." : model_dir), ec);
  const fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return Bad(p, absl::StrCat("cannot resolve external data location '", location, "'"));
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (b != base.end()) {
    return Bad(p, absl::StrCat("external data location '", location,
                               "' leaves the model's folder ", base.string()));
  }
  std::ifstream in(full, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("tensor '", p.name(), "': cannot open external "
                                                   "data file ", full.string()));
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (length < 0) length = static_cast<int64_t>(expected);
  if (static_cast<size_t>(length) != expected) {
    return Bad(p, absl::StrCat("external data length ", length, " does not match the ", expected,
                               " bytes of its shape and type"));
  }
  if (offset > size || length > size - offset) {
    return Bad(p, absl::StrCat("external data [", offset, ", ", offset + length, ") is past the end of ",
                               full.string(), " (", size, " bytes)"));
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) return Bad(p, absl::StrCat("cannot read external data from ", full.string()));
  return bytes;
}

template <typename Dst, typename Field>
absl::Status CopyField(const onnx::TensorProto& p, const Field& field, Tensor& t,
                       absl::string_view field_name) {
  if (static_cast<int64_t>(field.size()) != t.num_elements()) {
    return Bad(p, absl::StrCat(field_name, " has ", field.size(), " values, the shape needs ",
                               t.num_elements()));
  }
  Dst* out = static_cast<Dst*>(t.raw_data());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_same_v<Dst, ir::Half> || std::is_same_v<Dst, ir::BFloat16>) {
      out[i].bits = static_cast<uint16_t>(field.Get(i));
    } else {
      out[i] = static_cast<Dst>(field.Get(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& model_dir) {
  auto dtype_or = ir::DTypeFromOnnx(p.data_type());
  if (!dtype_or.ok()) {
    return absl::Status(dtype_or.status().code(),
                        absl::StrCat("tensor '", p.name(), "': ", dtype_or.status().message()));
  }
  const DType dtype = *dtype_or;
  if (p.has_segment()) return absl::UnimplementedError(absl::StrCat("tensor '", p.name(),
                                                                    "': segmented tensors"));
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    if (d < 0) return Bad(p, absl::StrCat("negative dimension ", d));
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) {
      return Bad(p, "element count overflows");
    }
    n *= d;
    dims.push_back(d);
  }
  const size_t bytes = static_cast<size_t>(n) * ir::DTypeSize(dtype);
  if (bytes > (size_t{1} << 40)) return Bad(p, "tensor is larger than 1 TiB");
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    OTTR_ASSIGN_OR_RETURN(std::string raw, ReadExternal(p, model_dir, bytes));
    Tensor t(dtype, dims);
    if (bytes) std::memcpy(t.raw_data(), raw.data(), bytes);
    return t;
  }
  // Check the data fits before allocating, so a tiny file cannot ask for a huge buffer.
  if (p.has_raw_data()) {
    if (p.raw_data().size() != bytes) {
      return Bad(p, absl::StrCat("raw_data has ", p.raw_data().size(), " bytes, ",
                                 ir::DTypeName(dtype), "[", n, " elements] needs ", bytes));
    }
    Tensor t(dtype, dims);
    if (bytes) std::memcpy(t.raw_data(), p.raw_data().data(), bytes);
    if (dtype == DType::kBool) {
      for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
    }
    return t;
  }
  const int64_t typed_count = p.float_data_size() + p.int32_data_size() + p.int64_data_size() +
                              p.double_data_size() + p.uint64_data_size() + p.string_data_size();
  if (typed_count != n) {
    return Bad(p, absl::StrCat("has ", typed_count, " values, its shape needs ", n));
  }
  Tensor t(dtype, dims);
  switch (dtype) {
    case DType::kFloat32: OTTR_RETURN_IF_ERROR(CopyField<float>(p, p.float_data(), t, "float_data")); break;
    case DType::kFloat64: OTTR_RETURN_IF_ERROR(CopyField<double>(p, p.double_data(), t, "double_data")); break;
    case DType::kInt64: OTTR_RETURN_IF_ERROR(CopyField<int64_t>(p, p.int64_data(), t, "int64_data")); break;
    case DType::kInt32: OTTR_RETURN_IF_ERROR(CopyField<int32_t>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kInt16: OTTR_RETURN_IF_ERROR(CopyField<int16_t>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kInt8: OTTR_RETURN_IF_ERROR(CopyField<int8_t>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kUInt16: OTTR_RETURN_IF_ERROR(CopyField<uint16_t>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kUInt8: OTTR_RETURN_IF_ERROR(CopyField<uint8_t>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kBool: OTTR_RETURN_IF_ERROR(CopyField<bool>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kFloat16: OTTR_RETURN_IF_ERROR(CopyField<ir::Half>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kBFloat16: OTTR_RETURN_IF_ERROR(CopyField<ir::BFloat16>(p, p.int32_data(), t, "int32_data")); break;
    case DType::kUInt32: OTTR_RETURN_IF_ERROR(CopyField<uint32_t>(p, p.uint64_data(), t, "uint64_data")); break;
    case DType::kUInt64: OTTR_RETURN_IF_ERROR(CopyField<uint64_t>(p, p.uint64_data(), t, "uint64_data")); break;
    default: return Bad(p, "unsupported element type");
  }
  return t;
}

onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(ir::DTypeToOnnx(t.dtype()));
  for (int64_t d : t.dims()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.nbytes()));
  return p;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create: ",
                                                              std::strerror(errno)));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": write failed: ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, Tensor>> ReadTensorFile(const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid ONNX TensorProto"));
  }
  auto t = TensorFromProto(p, fs::path(path).parent_path().string());
  if (!t.ok()) return AnnotateStatus(t.status(), path);
  return std::make_pair(p.name(), std::move(*t));
}

absl::Status WriteTensorFile(const std::string& path, const Tensor& t, const std::string& name) {
  return WriteFileAtomically(path, TensorToProto(t, name).SerializeAsString());
}

}  // namespace ottr::importer
