#include "tests/passes/gradient_check.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/autodiff.h"
#include "runtime/cpu/cpu_executor.h"

namespace ottr::testing {
namespace {

using ir::Tensor;

// `t` converted to float type `ft` (float inputs only).
Tensor ToType(const Tensor& t, ir::DType ft) {
  if (t.dtype() == ft || !ir::IsFloat(t.dtype())) return t;
  Tensor out(ft, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    ir::VisitDType(ft, [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) out.data<T>()[i] = ir::FromDouble<T>(t.GetAsDouble(i));
    });
  }
  return out;
}

// Builds  node(inputs) -> Σ_k ReduceSum(out_k * W_k)  with inputs as graph inputs.
struct LossGraph {
  std::unique_ptr<ir::Graph> graph;
  ir::Value* loss = nullptr;
  std::vector<ir::Value*> inputs;  // per case input (null when omitted)
};

absl::StatusOr<LossGraph> BuildLossGraph(const GradCase& c, ir::DType ft = ir::DType::kFloat64) {
  LossGraph lg;
  lg.graph = std::make_unique<ir::Graph>("gradcheck");
  ir::Graph& g = *lg.graph;
  g.set_opset_import("", ir::kMaxOnnxOpset);
  if (!c.domain.empty()) g.set_opset_import(c.domain, 1);
  ir::NodeSpec spec{c.op_type, c.domain, {}, {}, c.attrs, "op"};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      spec.inputs.push_back(nullptr);
      lg.inputs.push_back(nullptr);
      continue;
    }
    if (!ir::IsFloat(c.inputs[i].dtype())) {
      // Integer inputs (shapes, axes, indices, labels) are constants, as in real models, so
      // shape functions see their values and outputs get static shapes.
      OTTR_ASSIGN_OR_RETURN(ir::Value * v, g.AddInitializer(absl::StrCat("in", i), c.inputs[i]));
      spec.inputs.push_back(v);
      lg.inputs.push_back(nullptr);
      continue;
    }
    ir::TensorType t = c.inputs[i].type();
    t.dtype = ft;
    OTTR_ASSIGN_OR_RETURN(ir::Value * v, g.AddInput(absl::StrCat("in", i), t));
    spec.inputs.push_back(v);
    lg.inputs.push_back(v);
  }
  for (int i = 0; i < c.num_outputs; ++i) spec.output_names.push_back(absl::StrCat("out", i));
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  const ir::OpRegistry& registry = ir::OpRegistry::Global();
  OTTR_RETURN_IF_ERROR(registry.CheckNode(*n, g.opset(c.domain)));
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(registry, *n));
  std::vector<ir::Value*> terms;
  for (int k = 0; k < n->num_outputs(); ++k) {
    ir::Value* out = n->output(k);
    if (!ir::IsFloat(out->type().dtype)) continue;
    if (!c.outputs.empty() && std::find(c.outputs.begin(), c.outputs.end(), k) == c.outputs.end()) {
      continue;
    }
    if (!out->type().is_static()) {
      return absl::InvalidArgumentError(absl::StrCat("output ", k, " has no static shape: ",
                                                     out->type().ToString()));
    }
    // An output may have its own float type (LayerNormalization's Mean/InvStdDev follow
    // stash_type, e.g. float64 statistics of a float32 X): its term is computed in that type and
    // cast to `ft`. A type narrower than `ft` would swamp the central differences in rounding.
    const ir::DType out_type = out->type().dtype;
    if (ir::DTypeSize(out_type) < ir::DTypeSize(ft)) {
      return absl::InvalidArgumentError(absl::StrCat("output ", k, " has element type ", ir::DTypeName(out_type),
                                                     ", narrower than the checked type ", ir::DTypeName(ft)));
    }
    Tensor w = ToType(RandomDouble(ir::StaticDims(*out->type().shape), 1000 + k, 0.5, 1.5), out_type);
    OTTR_ASSIGN_OR_RETURN(ir::Value * wv, g.AddInitializer(absl::StrCat("w", k), std::move(w)));
    OTTR_ASSIGN_OR_RETURN(ir::Node * mul, g.AddNode({"Mul", "", {out, wv}, {absl::StrCat("m", k)}, {}, "m"}));
    OTTR_ASSIGN_OR_RETURN(ir::Node * sum, g.AddNode({"ReduceSum", "", {mul->output(0)}, {absl::StrCat("s", k)},
                                                     {{"keepdims", ir::Attribute(int64_t{0})}}, "s"}));
    ir::Value* term = sum->output(0);
    if (out_type != ft) {
      OTTR_ASSIGN_OR_RETURN(ir::Node * cast,
                            g.AddNode({"Cast", "", {term}, {absl::StrCat("c", k)},
                                       {{"to", ir::Attribute(static_cast<int64_t>(ft))}}, "c"}));
      term = cast->output(0);
    }
    terms.push_back(term);
  }
  if (terms.empty()) return absl::InvalidArgumentError("the op has no float output to check");
  ir::Value* loss = terms[0];
  if (terms.size() > 1) {
    OTTR_ASSIGN_OR_RETURN(ir::Node * s, g.AddNode({"Sum", "", terms, {"loss"}, {}, "loss"}));
    loss = s->output(0);
  }
  OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(registry, g));
  g.AddOutput(loss);
  lg.loss = loss;
  return lg;
}

absl::StatusOr<double> EvalLoss(runtime::cpu::CpuExecutor& exec, const std::vector<ir::Value*>& ins,
                                const std::vector<Tensor>& values) {
  runtime::TensorMap feeds;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i] != nullptr) feeds[ins[i]->name()] = values[i];
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<Tensor> out, exec.Run(feeds));
  return out[0].GetAsDouble(0);
}

}  // namespace

Tensor RandomDouble(std::vector<int64_t> dims, uint64_t seed, double lo, double hi) {
  Tensor t(ir::DType::kFloat64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& x : t.span<double>()) x = dist(rng);
  return t;
}

absl::StatusOr<GradientGraph> BuildGradientGraph(const GradCase& c, ir::DType dtype) {
  OTTR_ASSIGN_OR_RETURN(LossGraph lg, BuildLossGraph(c, dtype));
  std::vector<int> wrt = c.wrt;
  if (wrt.empty()) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].defined() && ir::IsFloat(c.inputs[i].dtype())) wrt.push_back(static_cast<int>(i));
    }
  }
  std::vector<ir::Value*> params;
  for (int i : wrt) params.push_back(lg.inputs[i]);
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Value*> grads, passes::BuildGradients(*lg.graph, lg.loss, params));
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] == nullptr) return absl::InvalidArgumentError(absl::StrCat("no gradient for input ", wrt[k]));
    lg.graph->AddOutput(grads[k]);
  }
  GradientGraph out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (lg.inputs[i] != nullptr) out.feeds[lg.inputs[i]->name()] = ToType(c.inputs[i], dtype);
  }
  out.graph = std::move(lg.graph);
  return out;
}

absl::Status CheckGradient(const GradCase& c) {
  OTTR_ASSIGN_OR_RETURN(LossGraph lg, BuildLossGraph(c));
  std::vector<int> wrt = c.wrt;
  if (wrt.empty()) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].defined() && ir::IsFloat(c.inputs[i].dtype())) wrt.push_back(static_cast<int>(i));
    }
  }
  // Loss-only graph for the numeric side (built before the gradient nodes are appended).
  OTTR_ASSIGN_OR_RETURN(LossGraph plain, BuildLossGraph(c));
  OTTR_ASSIGN_OR_RETURN(auto loss_exec, runtime::cpu::CpuExecutor::Create(*plain.graph));

  std::vector<ir::Value*> params;
  for (int i : wrt) params.push_back(lg.inputs[i]);
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Value*> grads,
                        passes::BuildGradients(*lg.graph, lg.loss, params));
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no gradient for input ", wrt[k]));
    }
    lg.graph->AddOutput(grads[k]);
  }
  OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(*lg.graph));
  runtime::TensorMap feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (lg.inputs[i] != nullptr) feeds[lg.inputs[i]->name()] = c.inputs[i];
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<Tensor> out, exec->Run(feeds));
  std::vector<Tensor> values;
  for (const Tensor& t : c.inputs) values.push_back(t.defined() ? t.Clone() : Tensor());
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int i = wrt[k];
    const Tensor& analytic = out[1 + k];
    Tensor& x = values[i];
    for (int64_t e = 0; e < x.num_elements(); ++e) {
      double* p = &x.data<double>()[e];
      const double saved = *p;
      *p = saved + c.h;
      OTTR_ASSIGN_OR_RETURN(double up, EvalLoss(*loss_exec, plain.inputs, values));
      *p = saved - c.h;
      OTTR_ASSIGN_OR_RETURN(double down, EvalLoss(*loss_exec, plain.inputs, values));
      *p = saved;
      const double numeric = (up - down) / (2 * c.h);
      const double a = analytic.GetAsDouble(e);
      if (!(std::abs(a - numeric) <= c.atol + c.rtol * std::max(std::abs(numeric), std::abs(a)))) {
        return absl::InternalError(absl::StrCat(c.name, ": d loss / d input ", i, " element ", e,
                                                ": analytic ", a, ", central difference ", numeric));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ottr::testing
