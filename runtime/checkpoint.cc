#include "runtime/checkpoint.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"

namespace ottr::runtime {

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& ckpt) {
  std::string out = "ottr-checkpoint 1\n";
  for (const auto& [k, v] : ckpt.meta) absl::StrAppend(&out, "meta ", k, " ", v.size(), "\n", v, "\n");
  for (const auto& [name, t] : ckpt.tensors) {
    const std::string proto = importer::TensorToProto(t, name).SerializeAsString();
    absl::StrAppend(&out, "tensor ", name.size(), " ", proto.size(), "\n", name, proto, "\n");
  }
  out += "end\n";
  return importer::WriteFileAtomically(path, out);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(std::string bytes, importer::ReadFileBytes(path));
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt checkpoint (", why, ")"));
  };
  size_t pos = 0;
  auto line = [&]() -> std::optional<std::string> {
    const size_t nl = bytes.find('\n', pos);
    if (nl == std::string::npos) return std::nullopt;
    std::string l = bytes.substr(pos, nl - pos);
    pos = nl + 1;
    return l;
  };
  auto header = line();
  if (!header || *header != "ottr-checkpoint 1") return bad("not an ottr checkpoint");
  Checkpoint ckpt;
  while (true) {
    auto l = line();
    if (!l) return bad("truncated");
    if (*l == "end") return ckpt;
    std::vector<std::string> w = absl::StrSplit(*l, ' ');
    if (w.size() == 3 && w[0] == "meta") {
      size_t len;
      if (!absl::SimpleAtoi(w[2], &len) || pos + len + 1 > bytes.size()) return bad("meta record");
      ckpt.meta[w[1]] = bytes.substr(pos, len);
      pos += len + 1;
    } else if (w.size() == 3 && w[0] == "tensor") {
      size_t nlen, plen;
      if (!absl::SimpleAtoi(w[1], &nlen) || !absl::SimpleAtoi(w[2], &plen) ||
          pos + nlen + plen + 1 > bytes.size()) {
        return bad("tensor record");
      }
      const std::string name = bytes.substr(pos, nlen);
      onnx::TensorProto p;
      if (!p.ParseFromArray(bytes.data() + pos + nlen, static_cast<int>(plen))) return bad(name);
      pos += nlen + plen + 1;
      auto t = importer::TensorFromProto(p);
      if (!t.ok()) return bad(t.status().message());
      ckpt.tensors[name] = std::move(*t);
    } else {
      return bad(absl::StrCat("unknown record '", l->substr(0, 20), "'"));
    }
  }
}

}  // namespace ottr::runtime
