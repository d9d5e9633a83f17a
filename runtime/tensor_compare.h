// Numerical comparison of tensors as ONNX's test runner does it: same dtype and shape, then
// |actual - expected| <= atol + rtol * |expected| elementwise (NaN equals NaN); integer and bool
// tensors must match exactly.
#ifndef OTTR_RUNTIME_TENSOR_COMPARE_H_
#define OTTR_RUNTIME_TENSOR_COMPARE_H_

#include "absl/status/status.h"
#include "ir/tensor.h"

namespace ottr::runtime {

// OK, or InvalidArgument describing the first mismatch, the count and the largest error.
absl::Status AllClose(const ir::Tensor& actual, const ir::Tensor& expected, double rtol,
                      double atol);

// Normwise relative error max_i |a_i - b_i| / max_i |b_i| (float tensors of equal shape; NaN in
// one but not the other is infinite).
double MaxRelativeError(const ir::Tensor& a, const ir::Tensor& b);

}  // namespace ottr::runtime

#endif  // OTTR_RUNTIME_TENSOR_COMPARE_H_
