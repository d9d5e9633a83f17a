// Deterministic text form of a graph; parser.h reads it back.
//
//   graph "main" {
//     opset ai.onnx 17
//     input %x : f32[N,784]
//     init %fc1.bias : f32[2] = [0.5, -1.0]
//     init %fc1.weight : f32[512,784] = elided
//     %h : f32[N,512] = Gemm(%x, %fc1.weight, %fc1.bias) {transB = 1} origin "/fc1/Gemm"
//     %y : f32[N,512], %m : bool[N,512] = Dropout(%h, _, _) origin "drop"
//     output %y
//     update %w <- %w.new           (training steps: state updates)
//   }
//
// Ops outside ai.onnx print as `domain::Op`; `_` is an omitted input; attributes are sorted by name;
// lists carry their kind (`ints[0, 1]`, `floats[]`); tensors print as `tensor<f32[2] 1.0, 2.0>`.
// Nodes print in topological order. Constants with more than `max_inline_elements` elements print
// as `elided` (the parser reads those back as zeros), unless the limit is negative.
#ifndef OTTR_IR_PRINTER_H_
#define OTTR_IR_PRINTER_H_

#include <string>

#include "ir/graph.h"

namespace ottr::ir {

struct PrintOptions {
  int64_t max_inline_elements = 16;  // < 0: print every constant in full
};

std::string PrintGraph(const Graph& graph, const PrintOptions& options = {});
std::string PrintNode(const Node& node, const PrintOptions& options = {});
// `%name`, quoted when the name has characters outside [A-Za-z0-9_.:/-].
std::string PrintValueName(const std::string& name);

}  // namespace ottr::ir

#endif  // OTTR_IR_PRINTER_H_
