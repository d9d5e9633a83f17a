#include "runtime/executor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::runtime {

absl::Status CheckFeed(const ir::Value& input, const Tensor& t) {
  const ir::TensorType& want = input.type();
  const std::string got = absl::StrCat(ir::DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","),
                                       "]");
  if (want.dtype != ir::DType::kUndefined && want.dtype != t.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' is ", got,
                                                   ", the model expects ", want.ToString()));
  }
  if (want.has_rank()) {
    bool ok = want.rank() == t.rank();
    for (int64_t i = 0; ok && i < t.rank(); ++i) {
      const ir::Dim& d = (*want.shape)[i];
      ok = !d.is_static() || d.value() == t.dim(i);
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' has shape ", got,
                                                     ", the model expects ", want.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ottr::runtime
