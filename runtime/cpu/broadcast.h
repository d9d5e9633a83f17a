// NumPy-style broadcast iteration for elementwise CPU kernels.
//
// A BroadcastPlan maps every element of the broadcast output (row-major over out_dims()) to one
// element of each operand. Dimensions are collapsed before iteration: size-1 output dims are
// dropped and adjacent dims are merged wherever every operand walks them the same way
// (contiguously, or not at all). What is left is a loop nest whose innermost loop -- a "run" of
// run_length() consecutive output elements -- reads each operand with stride 0 (broadcast) or 1
// (contiguous). So:
//   - operands that all have the output's shape give one run over the whole tensor, stride 1;
//   - a scalar (or all-ones shape) operand gets stride 0 everywhere: again one run;
//   - [N,C,H,W] + [C,1,1] gives N*C runs of H*W, the bias read with stride 0.
// BroadcastBinary / BroadcastTernary specialise the run loop on the strides, so the compiler sees
// plain `out[i] = f(a[i], b)` loops it can vectorise; `f` is a template argument (inlined, no
// virtual call or std::function per element).
//
// Example (out = a + b for float tensors a, b):
//   OTTR_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make({a.dims(), b.dims()}));
//   Tensor& y = ctx.AllocateOutput(0, DType::kFloat32, plan.out_dims());
//   BroadcastBinary(plan, a.data<float>(), b.data<float>(), y.data<float>(),
//                   [](float x, float z) { return x + z; });
#ifndef OTTR_RUNTIME_CPU_BROADCAST_H_
#define OTTR_RUNTIME_CPU_BROADCAST_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ottr::runtime::cpu {

class BroadcastPlan {
 public:
  // Plans the broadcast of `operand_dims` (any number >= 1 of operands). InvalidArgument with
  // both shapes in the message when two operands cannot be broadcast; callers usually wrap it
  // with ctx.Error(status.message()) to name the node.
  static absl::StatusOr<BroadcastPlan> Make(const std::vector<std::vector<int64_t>>& operand_dims);

  // The broadcast output shape and its element count.
  const std::vector<int64_t>& out_dims() const { return out_dims_; }
  int64_t num_elements() const { return num_elements_; }
  int num_operands() const { return num_operands_; }

  // Elements per run (>= 1 unless the output is empty) and the number of runs; runs cover the
  // output in order: run r is output elements [r * run_length(), (r + 1) * run_length()).
  int64_t run_length() const { return dims_.empty() ? 0 : dims_.back(); }
  int64_t num_runs() const { return run_length() == 0 ? 0 : num_elements_ / run_length(); }
  // Inner stride of operand k within a run: 0 (one element repeated) or 1 (contiguous).
  int64_t inner_stride(int k) const { return strides_.empty() ? 0 : strides_.back()[k]; }
  // True when operand k has as many elements as the output, i.e. element i of the output reads
  // element i of the operand.
  bool is_full(int k) const { return full_[k]; }

  // Calls fn(int64_t out_offset, const int64_t* operand_offsets, int64_t n) once per run, in
  // output order, where operand_offsets[k] is the element index of operand k at the run's start.
  template <typename Fn>
  void ForEachRun(Fn&& fn) const;

 private:
  std::vector<int64_t> out_dims_;
  int64_t num_elements_ = 0;
  int num_operands_ = 0;
  std::vector<bool> full_;
  // Collapsed loop nest, outermost first; strides_[d][k] = element stride of operand k in dim d.
  std::vector<int64_t> dims_;
  std::vector<std::vector<int64_t>> strides_;
};

template <typename Fn>
void BroadcastPlan::ForEachRun(Fn&& fn) const {
  if (num_elements_ == 0) return;
  const int nd = static_cast<int>(dims_.size());
  const int64_t n = dims_.back();
  std::vector<int64_t> offsets(num_operands_, 0);
  std::vector<int64_t> index(nd, 0);
  const int64_t runs = num_elements_ / n;
  for (int64_t r = 0; r < runs; ++r) {
    fn(r * n, static_cast<const int64_t*>(offsets.data()), n);
    // Odometer over the outer dims (all but the innermost).
    for (int d = nd - 2; d >= 0; --d) {
      const std::vector<int64_t>& s = strides_[d];
      if (++index[d] < dims_[d]) {
        for (int k = 0; k < num_operands_; ++k) offsets[k] += s[k];
        break;
      }
      index[d] = 0;
      for (int k = 0; k < num_operands_; ++k) offsets[k] -= s[k] * (dims_[d] - 1);
    }
  }
}

// out[i] = f(a[ia(i)], b[ib(i)]) for every element i of plan.out_dims(), where the plan was made
// from {a's dims, b's dims}. `out` may alias `a` or `b` only when that operand is_full().
template <typename A, typename B, typename O, typename F>
void BroadcastBinary(const BroadcastPlan& plan, const A* a, const B* b, O* out, F&& f) {
  const bool sa = plan.inner_stride(0) != 0;
  const bool sb = plan.inner_stride(1) != 0;
  plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    O* po = out + o;
    if (sa && sb) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (sa) {
      const B vb = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    } else if (sb) {
      const A va = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    } else {
      const O v = f(*pa, *pb);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

// out[i] = f(a[ia(i)], b[ib(i)], c[ic(i)]) over a plan made from {a, b, c}'s dims (e.g. Where).
template <typename A, typename B, typename C, typename O, typename F>
void BroadcastTernary(const BroadcastPlan& plan, const A* a, const B* b, const C* c, O* out,
                      F&& f) {
  const bool sa = plan.inner_stride(0) != 0;
  const bool sb = plan.inner_stride(1) != 0;
  const bool sc = plan.inner_stride(2) != 0;
  plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    const C* pc = c + off[2];
    O* po = out + o;
    if (sa && sb && sc) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i], pc[i]);
    } else if (sa && !sb && !sc) {  // e.g. Where(cond, scalar, scalar), Clip-like patterns
      const B vb = *pb;
      const C vc = *pc;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb, vc);
    } else {
      const int64_t ia = sa, ib = sb, ic = sc;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i * ia], pb[i * ib], pc[i * ic]);
    }
  });
}

}  // namespace ottr::runtime::cpu

#endif  // OTTR_RUNTIME_CPU_BROADCAST_H_
