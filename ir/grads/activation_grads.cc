#include "ir/gradient.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

// Y = max(X, 0):  dX = dY where Y > 0, else 0.
absl::Status ReluGrad(GradientBuilder& b) {
  OTTR_ASSIGN_OR_RETURN(Value * zero, b.Scalar(0.0, b.output(0)->type().dtype));
  OTTR_ASSIGN_OR_RETURN(Value * pos, b.Emit1("Greater", {b.output(0), zero}));
  OTTR_ASSIGN_OR_RETURN(Value * g, b.Emit1("Where", {pos, b.output_grad(0), zero}));
  b.set_input_grad(0, g);
  return absl::OkStatus();
}

}  // namespace

void RegisterActivationGradients(OpRegistry& r) { r.SetGradient("", "Relu", ReluGrad); }

}  // namespace ottr::ir
