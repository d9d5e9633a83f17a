#include "runtime/tensor_compare.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::runtime {

absl::Status AllClose(const ir::Tensor& actual, const ir::Tensor& expected, double rtol,
                      double atol) {
  if (actual.dtype() != expected.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", ir::DTypeName(actual.dtype()),
                                                   ", expected ", ir::DTypeName(expected.dtype())));
  }
  if (actual.dims() != expected.dims()) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(actual.dims(), ","),
                                                   "], expected [",
                                                   absl::StrJoin(expected.dims(), ","), "]"));
  }
  const bool exact = !ir::IsFloat(actual.dtype());
  int64_t bad = 0;
  int64_t first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    bool ok;
    double err = 0.0;
    if (exact) {
      ok = actual.GetAsInt64(i) == expected.GetAsInt64(i);
      if (actual.dtype() == ir::DType::kUInt64) {
        ok = actual.data<uint64_t>()[i] == expected.data<uint64_t>()[i];
      }
      err = ok ? 0.0 : 1.0;
    } else {
      const double a = actual.GetAsDouble(i);
      const double e = expected.GetAsDouble(i);
      if (std::isnan(a) || std::isnan(e)) {
        ok = std::isnan(a) && std::isnan(e);
      } else if (std::isinf(a) || std::isinf(e)) {
        ok = a == e;
      } else {
        err = std::abs(a - e);
        ok = err <= atol + rtol * std::abs(e);
      }
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, err);
    }
  }
  if (bad == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      bad, " of ", actual.num_elements(), " elements differ; first at flat index ", first,
      ": got ", actual.GetAsDouble(first), ", expected ", expected.GetAsDouble(first),
      "; max abs error ", worst, " (rtol ", rtol, ", atol ", atol, ")"));
}

double MaxRelativeError(const ir::Tensor& a, const ir::Tensor& b) {
  double max_diff = 0.0;
  double max_ref = 0.0;
  for (int64_t i = 0; i < a.num_elements() && i < b.num_elements(); ++i) {
    const double x = a.GetAsDouble(i);
    const double y = b.GetAsDouble(i);
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (std::isnan(x)) continue;
    max_diff = std::max(max_diff, std::abs(x - y));
    max_ref = std::max(max_ref, std::abs(y));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

}  // namespace ottr::runtime
