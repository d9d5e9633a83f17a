#include "ir/ops/channels_last.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

TensorType PermuteType(const TensorType& t, const std::vector<int64_t>& perm) {
  if (!t.has_rank()) return t;
  Shape s;
  for (int64_t p : perm) s.push_back((*t.shape)[p]);
  return TensorType(t.dtype, std::move(s));
}

}  // namespace

bool IsChannelsLast(const Node& n) { return n.GetString(kLayoutAttr, kChannelsFirst) == kChannelsLast; }

std::vector<int64_t> ToChannelsLastPerm(int64_t rank) {
  std::vector<int64_t> p = {0};
  for (int64_t i = 2; i < rank; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}

std::vector<int64_t> ToChannelsFirstPerm(int64_t rank) {
  std::vector<int64_t> p = {0, rank - 1};
  for (int64_t i = 1; i < rank - 1; ++i) p.push_back(i);
  return p;
}

std::vector<int64_t> PermuteDims(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out;
  out.reserve(perm.size());
  for (int64_t p : perm) out.push_back(dims[p]);
  return out;
}

ShapeFn WithLayout(ShapeFn channels_first) {
  return [inner = std::move(channels_first)](InferenceContext& ctx) -> absl::Status {
    const std::string layout = ctx.node().GetString(kLayoutAttr, kChannelsFirst);
    if (layout == kChannelsFirst) return inner(ctx);
    if (layout != kChannelsLast) {
      return ctx.Error(absl::StrCat("attribute 'layout' = \"", layout, "\" must be \"", kChannelsFirst, "\" or \"",
                                    kChannelsLast, "\""));
    }
    std::vector<TensorType> permuted(ctx.num_inputs());
    std::vector<const TensorType*> types(ctx.num_inputs(), nullptr);
    std::vector<const Tensor*> constants(ctx.num_inputs(), nullptr);
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      const TensorType& t = ctx.input_type(i);
      if (t.has_rank() && t.rank() >= 3) {
        permuted[i] = PermuteType(t, ToChannelsFirstPerm(t.rank()));
        types[i] = &permuted[i];
      } else {
        types[i] = &t;
        constants[i] = ctx.input_constant(i);
      }
    }
    InferenceContext first(ctx.node(), std::move(types), std::move(constants));
    OTTR_RETURN_IF_ERROR(inner(first));
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      const std::optional<TensorType>& t = first.output_types()[i];
      if (!t) continue;
      ctx.set_output_type(i, t->has_rank() && t->rank() >= 3 ? PermuteType(*t, ToChannelsLastPerm(t->rank())) : *t);
    }
    return absl::OkStatus();
  };
}

}  // namespace ottr::ir
