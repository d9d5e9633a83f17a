#include "runtime/cpu/channels_last.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/ops/channels_last.h"
#include "ir/status.h"

namespace ottr::runtime::cpu {

Tensor PermuteTensor(const Tensor& t, const std::vector<int64_t>& perm) {
  const std::vector<int64_t>& in = t.dims();
  const int64_t rank = t.rank();
  Tensor out(t.dtype(), ir::PermuteDims(in, perm));
  const size_t es = ir::DTypeSize(t.dtype());
  std::vector<int64_t> in_stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * in[d + 1];
  std::vector<int64_t> stride(rank), count(rank, 0);  // input stride of each output axis
  for (int64_t d = 0; d < rank; ++d) stride[d] = in_stride[perm[d]];
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int64_t n = out.num_elements();
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * es, src + offset * es, es);
    for (int64_t d = rank - 1; d >= 0; --d) {
      offset += stride[d];
      if (++count[d] < out.dim(d)) break;
      offset -= stride[d] * count[d];
      count[d] = 0;
    }
  }
  return out;
}

KernelFn WithLayout(KernelFn channels_first) {
  return [inner = std::move(channels_first)](KernelContext& ctx) -> absl::Status {
    const std::string layout = ctx.attr_string(ir::kLayoutAttr, ir::kChannelsFirst);
    if (layout == ir::kChannelsFirst) return inner(ctx);
    if (layout != ir::kChannelsLast) {
      return ctx.Error(absl::StrCat("attribute 'layout' = \"", layout, "\" must be NCHW or NHWC"));
    }
    std::vector<Tensor> permuted(ctx.num_inputs());
    std::vector<const Tensor*> inputs(ctx.num_inputs(), nullptr);
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      const Tensor& t = ctx.input(i);
      if (t.rank() >= 3) {
        permuted[i] = PermuteTensor(t, ir::ToChannelsFirstPerm(t.rank()));
        inputs[i] = &permuted[i];
      } else {
        inputs[i] = &t;
      }
    }
    std::vector<Tensor> outputs(ctx.num_outputs());
    KernelContext first(ctx.node(), std::move(inputs), &outputs, &ctx.rng(),
                        [&ctx](const ir::Graph& body, const std::vector<Tensor>& in) { return ctx.RunSubgraph(body, in); });
    OTTR_RETURN_IF_ERROR(inner(first));
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      if (!outputs[i].defined()) continue;
      const Tensor last = outputs[i].rank() >= 3 ? PermuteTensor(outputs[i], ir::ToChannelsLastPerm(outputs[i].rank()))
                                                 : std::move(outputs[i]);
      Tensor& out = ctx.AllocateOutput(i, last.dtype(), last.dims());
      std::memcpy(out.raw_data(), last.raw_data(), last.nbytes());
    }
    return absl::OkStatus();
  };
}

}  // namespace ottr::runtime::cpu
