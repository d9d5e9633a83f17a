// "infer-shapes": binds the batch size and named symbols, then infers every value's type.
//
//   before (batch 128):  input %x : f32[N,784]      %h : f32[N,512] = Gemm(%x, %w, %b)
//   after:               input %x : f32[128,784]    %h : f32[128,512] = Gemm(%x, %w, %b)
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/standard_passes.h"

namespace ottr::passes {
namespace {

class InferShapesPass : public Pass {
 public:
  InferShapesPass(int64_t batch, std::vector<std::pair<std::string, int64_t>> dims)
      : batch_(batch), dims_(std::move(dims)) {}
  absl::string_view name() const override { return "infer-shapes"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    const std::string before = graph.ToString();
    for (ir::Value* in : graph.inputs()) {
      ir::TensorType t = in->type();
      if (!t.has_rank()) continue;
      for (size_t d = 0; d < t.shape->size(); ++d) {
        ir::Dim& dim = (*t.shape)[d];
        if (d == 0 && batch_ > 0 && !dim.is_static()) dim = ir::Dim(batch_);
        for (const auto& [sym, value] : dims_) {
          if (dim.is_symbol() && dim.symbol() == sym) dim = ir::Dim(value);
        }
      }
      in->set_type(std::move(t));
    }
    OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), graph));
    return graph.ToString() != before;
  }

 private:
  int64_t batch_;
  std::vector<std::pair<std::string, int64_t>> dims_;
};

}  // namespace

std::unique_ptr<Pass> CreateInferShapesPass(int64_t batch,
                                            std::vector<std::pair<std::string, int64_t>> dims) {
  return std::make_unique<InferShapesPass>(batch, std::move(dims));
}

}  // namespace ottr::passes
