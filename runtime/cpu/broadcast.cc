#include "runtime/cpu/broadcast.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::runtime::cpu {

absl::StatusOr<BroadcastPlan> BroadcastPlan::Make(
    const std::vector<std::vector<int64_t>>& operand_dims) {
  if (operand_dims.empty()) return absl::InvalidArgumentError("broadcast of no operands");
  BroadcastPlan p;
  p.num_operands_ = static_cast<int>(operand_dims.size());
  size_t rank = 0;
  for (const auto& d : operand_dims) rank = std::max(rank, d.size());

  // Output dims: per axis (right-aligned), every operand is 1 or the common size.
  p.out_dims_.assign(rank, 1);
  std::vector<int64_t> seen_from(rank, -1);  // which operand set out_dims_[i] (for messages)
  for (size_t k = 0; k < operand_dims.size(); ++k) {
    const std::vector<int64_t>& d = operand_dims[k];
    const size_t lead = rank - d.size();
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t v = d[i];
      if (v < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", v));
      int64_t& o = p.out_dims_[lead + i];
      if (v == 1 || v == o) continue;
      if (o == 1) {
        o = v;
        seen_from[lead + i] = static_cast<int64_t>(k);
        continue;
      }
      const auto& other = operand_dims[seen_from[lead + i]];
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes [", absl::StrJoin(other, ","), "] and [", absl::StrJoin(d, ","),
          "] cannot be broadcast (dimension ", v, " vs ", o, ")"));
    }
  }
  p.num_elements_ = 1;
  for (int64_t v : p.out_dims_) p.num_elements_ *= v;
  p.full_.resize(operand_dims.size());
  for (size_t k = 0; k < operand_dims.size(); ++k) {
    int64_t n = 1;
    for (int64_t v : operand_dims[k]) n *= v;
    p.full_[k] = n == p.num_elements_;
  }
  if (p.num_elements_ == 0) return p;

  // Per-axis element strides of each operand (0 where it is broadcast), dropping size-1 axes and
  // merging axis i into the previous kept axis p when every operand satisfies
  // stride[p] == stride[i] * out[i] (both contiguous, or both broadcast).
  const int nk = p.num_operands_;
  std::vector<std::vector<int64_t>> full_strides(rank, std::vector<int64_t>(nk, 0));
  for (int k = 0; k < nk; ++k) {
    const std::vector<int64_t>& d = operand_dims[k];
    const size_t lead = rank - d.size();
    int64_t s = 1;
    for (size_t i = d.size(); i-- > 0;) {
      full_strides[lead + i][k] = d[i] == 1 ? 0 : s;
      s *= d[i];
    }
  }
  for (size_t i = 0; i < rank; ++i) {
    if (p.out_dims_[i] == 1) continue;
    if (!p.dims_.empty()) {
      bool merge = true;
      for (int k = 0; k < nk && merge; ++k) {
        merge = p.strides_.back()[k] == full_strides[i][k] * p.out_dims_[i];
      }
      if (merge) {
        p.dims_.back() *= p.out_dims_[i];
        p.strides_.back() = full_strides[i];
        continue;
      }
    }
    p.dims_.push_back(p.out_dims_[i]);
    p.strides_.push_back(full_strides[i]);
  }
  if (p.dims_.empty()) {  // every axis has size 1 (or rank 0): one element
    p.dims_.push_back(1);
    p.strides_.push_back(std::vector<int64_t>(nk, 0));
  }
  return p;
}

}  // namespace ottr::runtime::cpu
