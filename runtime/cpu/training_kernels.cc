// CPU reference kernels of the ai.onnx.preview.training optimizers Adam, Adagrad and Momentum.
// Inputs: R (learning rate scalar), T (int64 update count scalar), then X1..Xn, G1..Gn and the
// per-tensor states; outputs: the new X1..Xn and the new states (see ir/ops/training_ops.cc).
// Each element is updated independently in double and rounded once to the tensor's type.
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/graph.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/norm_loss_helpers.h"

namespace ottr::runtime::cpu {
namespace {

using norm_loss::SetOutputFromDoubles;
using norm_loss::ToDoubles;

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// The scalars every optimizer reads, and the number of optimised tensors.
struct OptimizerInputs {
  double r = 0.0;
  int64_t t = 0;
  int n = 0;
};

// Validates R, T and the tensor groups: `groups` tensors per optimised tensor (X, G, states),
// each float/double and shaped like its X; `num_outputs` must be n * (groups - 1).
absl::StatusOr<OptimizerInputs> ReadOptimizerInputs(const KernelContext& ctx, int groups) {
  const int n_in = ctx.num_inputs() - 2;
  if (n_in <= 0 || n_in % groups != 0 || ctx.num_outputs() != n_in / groups * (groups - 1)) {
    return ctx.Error(absl::StrCat("expects R, T and ", groups, " tensors per optimised tensor, and ",
                                  groups - 1, " outputs per optimised tensor; got ",
                                  ctx.num_inputs(), " inputs and ", ctx.num_outputs(),
                                  " outputs"));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
  }
  OptimizerInputs in;
  in.n = n_in / groups;
  const Tensor& r = ctx.input(0);
  if ((r.dtype() != DType::kFloat32 && r.dtype() != DType::kFloat64) || r.num_elements() != 1) {
    return ctx.Error(absl::StrCat("the learning rate R must be a float or double scalar, got ",
                                  r.DebugString(2)));
  }
  const Tensor& t = ctx.input(1);
  if (t.dtype() != DType::kInt64 || t.num_elements() != 1) {
    return ctx.Error(absl::StrCat("the update count T must be an int64 scalar, got ",
                                  t.DebugString(2)));
  }
  in.r = r.GetAsDouble(0);
  in.t = t.data<int64_t>()[0];
  for (int i = 0; i < in.n; ++i) {
    const Tensor& x = ctx.input(2 + i);
    for (int g = 0; g < groups; ++g) {
      const Tensor& v = ctx.input(2 + g * in.n + i);
      if (v.dtype() != DType::kFloat32 && v.dtype() != DType::kFloat64) {
        return ctx.Unsupported(absl::StrCat("input ", 2 + g * in.n + i, " has element type ",
                                            ir::DTypeName(v.dtype()),
                                            "; expected float or double"));
      }
      if (v.dims() != x.dims()) {
        return ctx.Error(absl::StrCat("input ", 2 + g * in.n + i, " has shape ",
                                      DimsString(v.dims()), " but the tensor it belongs to (input ",
                                      2 + i, ") has shape ", DimsString(x.dims())));
      }
    }
  }
  return in;
}

// Runs `update` on every element of optimised tensor i. `update` gets the input values (X, G and
// the states, in input order) and writes the output values (new X, then the new states).
using ElementUpdate = std::function<void(const double* in, double* out)>;

void UpdateTensors(KernelContext& ctx, const OptimizerInputs& in, int groups,
                   const ElementUpdate& update) {
  const int n_out = groups - 1;
  for (int i = 0; i < in.n; ++i) {
    std::vector<std::vector<double>> inputs(groups);
    for (int g = 0; g < groups; ++g) inputs[g] = ToDoubles(ctx.input(2 + g * in.n + i));
    const size_t count = inputs[0].size();
    std::vector<std::vector<double>> outputs(n_out, std::vector<double>(count));
    std::vector<double> in_vals(groups), out_vals(n_out);
    for (size_t e = 0; e < count; ++e) {
      for (int g = 0; g < groups; ++g) in_vals[g] = inputs[g][e];
      update(in_vals.data(), out_vals.data());
      for (int o = 0; o < n_out; ++o) outputs[o][e] = out_vals[o];
    }
    for (int o = 0; o < n_out; ++o) {
      // Output o * n + i replaces input group (o == 0 ? X : state o), i.e. group o == 0 ? 0 : o + 1.
      const Tensor& like = ctx.input(2 + (o == 0 ? 0 : o + 1) * in.n + i);
      SetOutputFromDoubles(ctx, o * in.n + i, like.dtype(), like.dims(), outputs[o]);
    }
  }
}

// Adam:
//   g' = norm_coefficient * x + g
//   v' = alpha * v + (1 - alpha) * g'
//   h' = beta * h + (1 - beta) * g'^2
//   r' = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R
//   x' = (1 - norm_coefficient_post) * (x - r' * v' / (sqrt(h') + epsilon))
absl::Status AdamKernel(KernelContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(OptimizerInputs in, ReadOptimizerInputs(ctx, 4));
  const double alpha = ctx.attr_float("alpha", 0.9f);
  const double beta = ctx.attr_float("beta", 0.999f);
  const double epsilon = ctx.attr_float("epsilon", 1e-6f);
  const double norm = ctx.attr_float("norm_coefficient", 0.0f);
  const double norm_post = ctx.attr_float("norm_coefficient_post", 0.0f);
  double r = in.r;
  if (in.t > 0) {
    const double t = static_cast<double>(in.t);
    r = in.r * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t));
  }
  UpdateTensors(ctx, in, 4, [&](const double* v, double* out) {
    const double x = v[0], g = norm * v[0] + v[1];
    const double m = alpha * v[2] + (1.0 - alpha) * g;
    const double h = beta * v[3] + (1.0 - beta) * g * g;
    out[0] = (1.0 - norm_post) * (x - r * m / (std::sqrt(h) + epsilon));
    out[1] = m;
    out[2] = h;
  });
  return absl::OkStatus();
}

// Adagrad:
//   r  = R / (1 + T * decay_factor)
//   g' = norm_coefficient * x + g
//   h' = h + g'^2
//   x' = x - r * g' / (sqrt(h') + epsilon)
absl::Status AdagradKernel(KernelContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(OptimizerInputs in, ReadOptimizerInputs(ctx, 3));
  const double decay = ctx.attr_float("decay_factor", 0.0f);
  const double epsilon = ctx.attr_float("epsilon", 1e-6f);
  const double norm = ctx.attr_float("norm_coefficient", 0.0f);
  const double r = in.r / (1.0 + static_cast<double>(in.t) * decay);
  UpdateTensors(ctx, in, 3, [&](const double* v, double* out) {
    const double x = v[0], g = norm * v[0] + v[1];
    const double h = v[2] + g * g;
    out[0] = x - r * g / (std::sqrt(h) + epsilon);
    out[1] = h;
  });
  return absl::OkStatus();
}

// Momentum (beta' = T > 0 ? beta : 1):
//   g' = norm_coefficient * x + g
//   v' = alpha * v + beta' * g'
//   standard: x' = x - R * v'
//   nesterov: x' = x - R * (g' + alpha * v')
absl::Status MomentumKernel(KernelContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(OptimizerInputs in, ReadOptimizerInputs(ctx, 3));
  const std::string mode = ctx.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") {
    return ctx.Error(absl::StrCat("mode must be 'standard' or 'nesterov', got '", mode, "'"));
  }
  const bool nesterov = mode == "nesterov";
  const double alpha = ctx.attr_float("alpha", 0.0f);
  const double beta = in.t > 0 ? ctx.attr_float("beta", 0.0f) : 1.0;
  const double norm = ctx.attr_float("norm_coefficient", 0.0f);
  const double r = in.r;
  UpdateTensors(ctx, in, 3, [&](const double* v, double* out) {
    const double x = v[0], g = norm * v[0] + v[1];
    const double m = alpha * v[2] + beta * g;
    out[0] = nesterov ? x - r * (g + alpha * m) : x - r * m;
    out[1] = m;
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterTrainingKernels(KernelRegistry& r) {
  const std::string domain(ir::kTrainingDomain);
  r.Register(domain, "Adam", AdamKernel);
  r.Register(domain, "Adagrad", AdagradKernel);
  r.Register(domain, "Momentum", MomentumKernel);
}

}  // namespace ottr::runtime::cpu
