#include "ir/status.h"

#include "absl/strings/str_cat.h"

namespace ottr {

absl::Status AnnotateStatus(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace ottr
