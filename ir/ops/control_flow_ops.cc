// Schemas and shape functions of Loop and If.
//
// Loop's body is a graph attribute with inputs (iteration_num: i64[], cond: bool[], carried...)
// and outputs (cond, carried..., scan outputs...); outer values it reads are captures of the body.
// The shape function refines the body's input types from the Loop's initial values (ONNX bodies
// often leave them untyped), re-infers the body and widens the carried types until they are a
// fixed point of one iteration, so that a carried value whose shape changes from one iteration to
// the next gets unknown dims instead of a wrong static type. Carried outputs get that type (the
// type of the initial values when the body keeps it); scan outputs get the body output's type
// with an unknown leading dim (the iteration count).
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

// The more specific of two descriptions of the same value (static dims win over symbols, symbols
// over unknown). nullopt when they contradict each other.
std::optional<TensorType> Specialize(const TensorType& a, const TensorType& b) {
  TensorType out;
  if (a.dtype != DType::kUndefined && b.dtype != DType::kUndefined && a.dtype != b.dtype) {
    return std::nullopt;
  }
  out.dtype = a.dtype != DType::kUndefined ? a.dtype : b.dtype;
  if (!a.has_rank() || !b.has_rank()) {
    out.shape = a.has_rank() ? a.shape : b.shape;
    return out;
  }
  if (a.rank() != b.rank()) return std::nullopt;
  Shape s(a.rank());
  for (int64_t i = 0; i < a.rank(); ++i) {
    const Dim& x = (*a.shape)[i];
    const Dim& y = (*b.shape)[i];
    if (x.is_static() && y.is_static() && x.value() != y.value()) return std::nullopt;
    s[i] = x.is_static() ? x : (y.is_static() ? y : (x.is_symbol() ? x : y));
  }
  out.shape = std::move(s);
  return out;
}

// The least specific type covering both: differing dims become unknown, differing ranks (or an
// unknown one) an unknown rank. Element types must agree where both are known.
absl::StatusOr<TensorType> Generalize(const InferenceContext& ctx, const TensorType& a,
                                      const TensorType& b, absl::string_view what) {
  if (a.dtype != DType::kUndefined && b.dtype != DType::kUndefined && a.dtype != b.dtype) {
    return ctx.Error(absl::StrCat(what, " is ", a.ToString(), " in one case and ", b.ToString(),
                                  " in the other"));
  }
  TensorType out(a.dtype != DType::kUndefined ? a.dtype : b.dtype, std::nullopt);
  if (a.has_rank() && b.has_rank() && a.rank() == b.rank()) {
    Shape s(a.rank());
    for (int64_t i = 0; i < a.rank(); ++i) {
      s[i] = (*a.shape)[i] == (*b.shape)[i] ? (*a.shape)[i] : Dim();
    }
    out.shape = std::move(s);
  }
  return out;
}

// The type a body input gets from its declaration and the value fed to it: the more specific
// of the two when they agree, the fed one when their shapes contradict; InvalidArgument when the
// element types differ.
absl::StatusOr<TensorType> Refine(const InferenceContext& ctx, const TensorType& declared,
                                  const TensorType& fed, absl::string_view what) {
  if (declared.dtype != DType::kUndefined && fed.dtype != DType::kUndefined &&
      declared.dtype != fed.dtype) {
    return ctx.Error(absl::StrCat(what, " is ", fed.ToString(), " but the body declares ",
                                  declared.ToString()));
  }
  if (std::optional<TensorType> t = Specialize(declared, fed)) return *t;
  return TensorType(fed.dtype != DType::kUndefined ? fed.dtype : declared.dtype, fed.shape);
}

absl::StatusOr<Graph*> GraphAttr(const InferenceContext& ctx, const std::string& name) {
  const Attribute* a = ctx.node().attr(name);
  if (a == nullptr || a->kind() != Kind::kGraph || a->g() == nullptr) {
    return ctx.Error(absl::StrCat("needs the graph attribute '", name, "'"));
  }
  return a->g().get();
}

absl::Status InferLoop(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(Graph * body, GraphAttr(ctx, "body"));
  const int n_carried = ctx.num_inputs() - 2;
  const int n_scan = ctx.num_outputs() - n_carried;
  if (n_carried < 0 || n_scan < 0) {
    return ctx.Error(absl::StrCat("has ", ctx.num_inputs(), " inputs and ", ctx.num_outputs(),
                                  " outputs; expected (M, cond, N carried) inputs and N carried "
                                  "plus K scan outputs"));
  }
  if (static_cast<int>(body->inputs().size()) != 2 + n_carried ||
      static_cast<int>(body->outputs().size()) != 1 + n_carried + n_scan) {
    return ctx.Error(absl::StrCat("the body has ", body->inputs().size(), " inputs and ",
                                  body->outputs().size(), " outputs; the Loop needs ",
                                  2 + n_carried, " inputs (iteration, cond, ", n_carried,
                                  " carried) and ", 1 + n_carried + n_scan, " outputs (cond, ",
                                  n_carried, " carried, ", n_scan, " scan)"));
  }
  if (ctx.has_input(0)) {
    const TensorType& m = ctx.input_type(0);
    if (m.dtype != DType::kUndefined && m.dtype != DType::kInt64) {
      return ctx.Error(absl::StrCat("M must be int64, got ", m.ToString()));
    }
  }
  for (int i = 0; i < n_carried; ++i) {
    if (!ctx.has_input(2 + i)) return ctx.Error(absl::StrCat("loop-carried input ", i, " is missing"));
  }
  // Body inputs 0 and 1 are the iteration number and the condition. Where a declared body input
  // contradicts what the Loop feeds it, the fed type wins (the declaration may be an earlier
  // refinement, e.g. before a batch size was bound); only element types must agree.
  const TensorType fixed[2] = {TensorType(DType::kInt64, Shape{}), TensorType(DType::kBool, Shape{})};
  for (int k = 0; k < 2; ++k) {
    OTTR_ASSIGN_OR_RETURN(TensorType t, Refine(ctx, body->inputs()[k]->type(), fixed[k],
                                               absl::StrCat("body input ", k)));
    body->inputs()[k]->set_type(t);
  }
  std::vector<TensorType> carried(n_carried);
  for (int i = 0; i < n_carried; ++i) {
    OTTR_ASSIGN_OR_RETURN(carried[i], Refine(ctx, body->inputs()[2 + i]->type(),
                                             ctx.input_type(2 + i),
                                             absl::StrCat("loop-carried input ", i)));
  }
  // Widen until one more iteration changes nothing. Each round only loses information, so a few
  // rounds suffice; the last resort is an unknown rank.
  const OpRegistry& registry = OpRegistry::Global();
  constexpr int kMaxRounds = 4;
  for (int round = 0;; ++round) {
    for (int i = 0; i < n_carried; ++i) body->inputs()[2 + i]->set_type(carried[i]);
    absl::Status s = InferGraphShapes(registry, *body);
    if (!s.ok()) return AnnotateStatus(s, absl::StrCat(ctx.node().Describe(), ": body"));
    bool changed = false;
    for (int i = 0; i < n_carried; ++i) {
      OTTR_ASSIGN_OR_RETURN(
          TensorType g, Generalize(ctx, carried[i], body->outputs()[1 + i]->type(),
                                   absl::StrCat("loop-carried value ", i)));
      if (round + 1 >= kMaxRounds && !(g == carried[i])) g.shape.reset();
      if (!(g == carried[i])) {
        carried[i] = g;
        changed = true;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n_carried; ++i) ctx.set_output_type(i, carried[i]);
  for (int j = 0; j < n_scan; ++j) {
    const TensorType& t = body->outputs()[1 + n_carried + j]->type();
    std::optional<Shape> s;
    if (t.has_rank()) {
      s = Shape{Dim()};
      s->insert(s->end(), t.shape->begin(), t.shape->end());
    }
    ctx.set_output_type(n_carried + j, TensorType(t.dtype, s));
  }
  return absl::OkStatus();
}

absl::Status InferIf(InferenceContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(Graph * then_branch, GraphAttr(ctx, "then_branch"));
  OTTR_ASSIGN_OR_RETURN(Graph * else_branch, GraphAttr(ctx, "else_branch"));
  const size_t n = ctx.num_outputs();
  if (then_branch->outputs().size() != n || else_branch->outputs().size() != n) {
    return ctx.Error(absl::StrCat("has ", n, " outputs but the branches have ",
                                  then_branch->outputs().size(), " and ",
                                  else_branch->outputs().size()));
  }
  const TensorType& cond = ctx.input_type(0);
  if (cond.dtype != DType::kUndefined && cond.dtype != DType::kBool) {
    return ctx.Error(absl::StrCat("cond must be bool, got ", cond.ToString()));
  }
  // A constant condition decides the branch, and with it the exact output types.
  const Graph* taken = nullptr;
  if (const Tensor* c = ctx.input_constant(0); c != nullptr && c->num_elements() == 1) {
    taken = c->GetAsDouble(0) != 0.0 ? then_branch : else_branch;
  }
  for (size_t i = 0; i < n; ++i) {
    const TensorType& a = then_branch->outputs()[i]->type();
    const TensorType& b = else_branch->outputs()[i]->type();
    OTTR_ASSIGN_OR_RETURN(TensorType g, Generalize(ctx, a, b, absl::StrCat("output ", i)));
    ctx.set_output_type(i, taken ? taken->outputs()[i]->type() : g);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowOps(OpRegistry& r) {
  // Autodiff does not go through control flow: differentiating a Loop or If would need gradient
  // subgraphs (and, for Loop, the per-iteration values kept), which ottr does not build. Both ops
  // are marked not differentiable, so autodiff treats their outputs as constants; parameters used
  // only inside a body or branch get no gradient.
  // M and cond may both be omitted (""), so no input is required by position.
  r.Register(OpSchemaBuilder("", "Loop").Opsets(7).Inputs(0, -1).Outputs(1, -1)
                 .Attr("body", Kind::kGraph, /*required=*/true).Shape(InferLoop)
                 .NotDifferentiable().Build());
  r.Register(OpSchemaBuilder("", "If").Opsets(7).Inputs(1, 1).Outputs(1, -1)
                 .Attr("then_branch", Kind::kGraph, /*required=*/true)
                 .Attr("else_branch", Kind::kGraph, /*required=*/true)
                 .Shape(InferIf).NotDifferentiable().Build());
}

}  // namespace ottr::ir
