// Host-side construction of the broadcast plans of elementwise.h (plain C++, used at compile
// time by runtime/cuda/elementwise_ops.cc and activation_ops.cc).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_PLAN_H_
#define OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/kernels/elementwise.h"

namespace ottr::cuda::kernels {

// Magic numbers for dividing by d >= 1 (elementwise.h FastDivisor): s = ceil(log2 d),
// magic = floor(2^64 (2^s − d) / d) + 1.
inline FastDivisor MakeFastDivisor(uint64_t d) {
  FastDivisor f;
  f.divisor = d == 0 ? 1 : d;
  uint32_t s = 0;
  while (s < 64 && (uint64_t{1} << s) < f.divisor) ++s;
  f.shift = s;
  using U128 = unsigned __int128;
  const U128 two_s = U128{1} << s;
  f.magic = static_cast<uint64_t>(((two_s - f.divisor) << 64) / f.divisor + 1);
  return f;
}

// Dims of length 1 removed, the rest merged into groups that every operand walks the same way.
struct CollapsedDim {
  int64_t size = 1;
  std::vector<int64_t> strides;  // per operand, of the group's innermost original dim (0: broadcast)
};

// Collapses the broadcast of `operands` to `out` (outermost first). False with `error` set when
// an operand has more dims than the output or a dim that is neither 1 nor the output's.
inline bool CollapseBroadcast(const std::vector<int64_t>& out,
                              const std::vector<std::vector<int64_t>>& operands,
                              std::vector<CollapsedDim>* dims, std::string* error) {
  const size_t rank = out.size();
  const size_t k_count = operands.size();
  std::vector<std::vector<int64_t>> padded(k_count), stride(k_count);
  for (size_t k = 0; k < k_count; ++k) {
    const std::vector<int64_t>& d = operands[k];
    if (d.size() > rank) {
      *error = "operand " + std::to_string(k) + " has more dims than the output";
      return false;
    }
    padded[k].assign(rank - d.size(), 1);
    padded[k].insert(padded[k].end(), d.begin(), d.end());
    stride[k].assign(rank, 0);
    int64_t s = 1;
    for (size_t i = rank; i-- > 0;) {
      if (padded[k][i] != 1 && padded[k][i] != out[i]) {
        *error = "operand " + std::to_string(k) + " dim " + std::to_string(i) + " (" +
                 std::to_string(padded[k][i]) + ") cannot broadcast to the output's " +
                 std::to_string(out[i]);
        return false;
      }
      stride[k][i] = padded[k][i] == 1 ? 0 : s;
      s *= padded[k][i];
    }
  }
  dims->clear();
  std::vector<bool> prev_full;
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    std::vector<bool> full(k_count);
    for (size_t k = 0; k < k_count; ++k) full[k] = padded[k][i] == out[i];
    if (!dims->empty() && full == prev_full) {
      dims->back().size *= out[i];
      for (size_t k = 0; k < k_count; ++k) dims->back().strides[k] = stride[k][i];
    } else {
      CollapsedDim c;
      c.size = out[i];
      c.strides.resize(k_count);
      for (size_t k = 0; k < k_count; ++k) c.strides[k] = stride[k][i];
      dims->push_back(std::move(c));
    }
    prev_full = full;
  }
  return true;
}

// The IndexPlan<N> of `operands` (at most N; missing ones read with stride 0) broadcast to `out`.
// False with `error` set when they do not broadcast or more than kMaxRank dims remain.
template <int N>
bool MakeIndexPlan(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& operands,
                   IndexPlan<N>* plan, std::string* error) {
  if (static_cast<int>(operands.size()) > N) {
    *error = "too many operands";
    return false;
  }
  std::vector<CollapsedDim> dims;
  if (!CollapseBroadcast(out, operands, &dims, error)) return false;
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    *error = "the broadcast needs " + std::to_string(dims.size()) + " dims after merging; at most " +
             std::to_string(kMaxRank) + " are supported";
    return false;
  }
  *plan = IndexPlan<N>();
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  plan->n = n;
  if (dims.empty()) {  // every dim is 1
    plan->rank = 1;
    plan->dims[0] = MakeFastDivisor(1);
    return true;
  }
  plan->rank = static_cast<int>(dims.size());
  for (int d = 0; d < plan->rank; ++d) {
    const CollapsedDim& c = dims[dims.size() - 1 - d];  // innermost first
    plan->dims[d] = MakeFastDivisor(static_cast<uint64_t>(c.size));
    for (size_t k = 0; k < operands.size(); ++k) plan->strides[d][k] = c.strides[k];
  }
  for (size_t k = 0; k < operands.size(); ++k) plan->inner_contiguous[k] = plan->strides[0][k] == 1;
  return true;
}

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_ELEMENTWISE_PLAN_H_
