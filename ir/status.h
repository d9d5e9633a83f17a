// Status helpers used across ottr: early return on error, assign-or-return, and internal checks.
#ifndef OTTR_IR_STATUS_H_
#define OTTR_IR_STATUS_H_

#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OTTR_STATUS_CONCAT_INNER_(a, b) a##b
#define OTTR_STATUS_CONCAT_(a, b) OTTR_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define OTTR_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::absl::Status _ottr_status = (expr);          \
    if (!_ottr_status.ok()) return _ottr_status;   \
  } while (0)

// `OTTR_ASSIGN_OR_RETURN(auto x, F())` binds the value of a StatusOr or returns its error.
#define OTTR_ASSIGN_OR_RETURN(lhs, expr) \
  OTTR_ASSIGN_OR_RETURN_IMPL_(OTTR_STATUS_CONCAT_(_ottr_statusor_, __LINE__), lhs, expr)
#define OTTR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

namespace ottr::internal {

// Collects a message with operator<< and converts to an Internal status naming file:line.
class RetCheckBuilder {
 public:
  RetCheckBuilder(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  template <typename T>
  RetCheckBuilder& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }
  operator absl::Status() const { return absl::InternalError(stream_.str()); }  // NOLINT
  template <typename T>
  operator absl::StatusOr<T>() const {  // NOLINT
    return absl::InternalError(stream_.str());
  }

 private:
  std::ostringstream stream_;
};

}  // namespace ottr::internal

// `OTTR_RET_CHECK(cond) << "detail";` returns Internal (our own bug) with file:line when !cond.
#define OTTR_RET_CHECK(cond) \
  if (cond) {                \
  } else /* NOLINT */        \
    return ::ottr::internal::RetCheckBuilder(__FILE__, __LINE__, #cond)

namespace ottr {

// Prefixes the message of a non-OK status with context, keeping the code.
absl::Status AnnotateStatus(const absl::Status& status, absl::string_view context);

}  // namespace ottr

#endif  // OTTR_IR_STATUS_H_
