// Input layout of the N-ary optimizer updates ottr::AdamUpdateN / ottr::SGDUpdateN (made by the
// group-optimizer-updates pass, ir/ops/ottr_training_ops.cc states the math):
//
//   (lr, step, p_0..p_n-1, g_0..g_n-1, states.., [grad_scale], [guard])
//
// Outputs: p'_0..p'_n-1, then the states' new values in the inputs' order, then the low-precision
// copies: attribute low_copies = ints[k..] (increasing parameter indices) and low_type (an ONNX
// float16 / bfloat16 code) add one output per listed parameter, Cast(p'_k, low_type), which the
// next step's forward reads instead of casting the parameter itself (optimizer-low-copies,
// passes/mixed_precision.h). A skipped update writes Cast(p_k).
//
// states: Adam m_0.., v_0..; SGD the momentum buffers b_0.. (or none). Two optional scalars come
// last, in this order:
//   grad_scale   attribute unscale = 1: a float scalar S (the loss scale); every gradient is
//                multiplied by 1/S (rounded to the tensors' type) before the update.
//   guard        attribute guarded = 1: a float scalar (the update is skipped when it is not
//                finite, e.g. the loss) or a bool scalar (skipped when false: the nan-guard and the
//                loss scaling pass ottr::AllFinite of the loss and every gradient).
// One header so the shape function, the planner's in-place rules, the CPU kernel, the CUDA op and
// TrainableParameters agree on the layout.
#ifndef OTTR_IR_OPTIMIZER_UPDATE_H_
#define OTTR_IR_OPTIMIZER_UPDATE_H_

#include "ir/graph.h"

namespace ottr::ir {

struct UpdateNLayout {
  int n = 0;            // tensors updated
  int states = 0;       // state tensors per parameter (Adam 2, SGD 0 or 1)
  int grad_scale = -1;  // input index of the loss scale, or -1
  int guard = -1;       // input index of the guard, or -1
  std::vector<int64_t> low_copies;  // parameters with a low-precision copy (attribute low_copies)
  int first_low = 0;    // output index of the first low-precision copy
  bool valid = false;   // the arity matches the op (n >= 1)
};

// The layout of `node`'s inputs from its op, arity and attributes (adam: AdamUpdateN, else
// SGDUpdateN). `valid` is false for an arity the op does not have.
inline UpdateNLayout UpdateNLayoutOf(const Node& node, bool adam) {
  UpdateNLayout l;
  int in = node.num_inputs();
  if (node.GetInt("guarded", 0) != 0) l.guard = --in;
  if (node.GetInt("unscale", 0) != 0) l.grad_scale = --in;
  in -= 2;  // lr, step
  l.low_copies = node.GetInts("low_copies");
  const int out = node.num_outputs() - static_cast<int>(l.low_copies.size());
  l.first_low = out;
  if (adam) {
    l.states = 2;
    l.n = in / 4;
    l.valid = l.n >= 1 && in == 4 * l.n && out == 3 * l.n;
  } else {
    l.states = in == 2 * out ? 0 : 1;
    l.n = l.states == 0 ? out : out / 2;
    l.valid = l.n >= 1 && in == (2 + l.states) * l.n && out == (1 + l.states) * l.n;
  }
  for (size_t j = 0; j < l.low_copies.size(); ++j) {
    if (l.low_copies[j] < 0 || l.low_copies[j] >= l.n || (j > 0 && l.low_copies[j] <= l.low_copies[j - 1])) {
      l.valid = false;
    }
  }
  return l;
}

inline UpdateNLayout UpdateNLayoutOf(const Node& node) {
  return UpdateNLayoutOf(node, node.op_type() == "AdamUpdateN");
}

}  // namespace ottr::ir

#endif  // OTTR_IR_OPTIMIZER_UPDATE_H_
