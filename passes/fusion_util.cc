#include "passes/fusion_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"

namespace ottr::passes::fusion {

std::optional<std::vector<int64_t>> ConstInts(const ir::Value* v) {
  const ir::Tensor* t = nullptr;
  if (v == nullptr) return std::nullopt;
  if (v->initializer() != nullptr) {
    t = v->initializer();
  } else if (v->producer() != nullptr && IsOnnx(v->producer(), "Constant")) {
    const ir::Attribute* a = v->producer()->attr("value");
    if (a != nullptr && a->kind() == ir::Attribute::Kind::kTensor) t = &a->t();
  }
  if (t == nullptr || !ir::IsInteger(t->dtype())) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t->num_elements(); ++i) out.push_back(static_cast<int64_t>(t->GetAsDouble(i)));
  return out;
}

void Remark(std::ostream* out, absl::string_view pass, absl::string_view text) {
  if (out != nullptr) *out << "// " << pass << ": " << text << "\n";
}

std::string UnsupportedDType(ir::DType t) {
  if (t == ir::DType::kFloat32 || t == ir::DType::kFloat16 || t == ir::DType::kBFloat16) return "";
  return absl::StrCat("unsupported element type ", ir::DTypeName(t),
                      " (the fused epilogues run on f32, f16 and bf16)");
}

ir::Node* SoleUser(const ir::Value* v) {
  if (v == nullptr || v->uses().size() != 1 || v->graph()->IsRoot(v)) return nullptr;
  return v->uses()[0].node;
}

bool IsOnnx(const ir::Node* n, absl::string_view op) {
  return n != nullptr && n->domain().empty() && n->op_type() == op;
}

bool IsOttr(const ir::Node* n, absl::string_view op) {
  return n != nullptr && n->domain() == ir::kOttrDomain && n->op_type() == op;
}

std::optional<ir::FusedEpilogue> FusedEpilogueOf(const ir::Node* n) {
  if (!IsOttr(n, ir::kFusedGemmOp)) return std::nullopt;
  return ir::ParseFusedEpilogue(n->GetString("epilogue", "bias"));
}

bool IsPlainGemm(const ir::Node* n) {
  if (FusedEpilogueOf(n) == ir::FusedEpilogue::kNone) {
    // fall through to the operand checks
  } else if (!IsOnnx(n, "Gemm") || (n->has_input(2) && n->GetFloat("beta", 1.0f) != 0.0f)) {
    return false;
  }
  for (int i : {0, 1}) {
    const ir::TensorType& t = n->input(i)->type();
    if (!t.is_static() || t.rank() != 2) return false;
  }
  return true;
}

void CopyOutputType(const ir::Node* from, std::map<std::string, ir::Attribute>& attrs) {
  if (const ir::Attribute* a = from->attr("output_type"); a != nullptr) attrs["output_type"] = *a;
}

std::optional<BiasGradMatch> MatchBiasGrad(ir::Node* s, int* axis, std::string* why) {
  if (!IsOnnx(s, "ReduceSum")) return std::nullopt;
  const ir::TensorType& dt = s->input(0)->type();
  if (!dt.is_static() || dt.rank() != 2) {
    *why = absl::StrCat("sums a ", dt.ToString(), ", not a matrix");
    return std::nullopt;
  }
  const std::optional<std::vector<int64_t>> axes = ConstInts(s->input(1));
  if (!axes || axes->size() != 1) {
    *why = "does not reduce one constant axis";
    return std::nullopt;
  }
  *axis = static_cast<int>((*axes)[0] < 0 ? (*axes)[0] + 2 : (*axes)[0]);
  if (*axis != 0 && *axis != 1) {
    *why = "axis out of range";
    return std::nullopt;
  }
  BiasGradMatch m;
  m.chain.push_back(s);
  m.result = s->output(0);
  if (s->GetInt("keepdims", 1) != 0) {
    ir::Node* r = SoleUser(s->output(0));
    if (!IsOnnx(r, "Reshape") || r->output(0)->type().rank() != 1) {
      *why = absl::StrCat("the kept-dims sum ", s->output(0)->type().ToString(),
                          " is not only reshaped to a vector (another user)");
      return std::nullopt;
    }
    m.chain.push_back(r);
    m.result = r->output(0);
  }
  return m;
}

bool AppendCastTo(BiasGradMatch& m, ir::DType to) {
  ir::Node* c = SoleUser(m.result);
  if (!IsOnnx(c, "Cast") || c->output(0)->type().dtype != to) return false;
  m.chain.push_back(c);
  m.result = c->output(0);
  return true;
}

std::optional<BiasGradMatch> FindBiasGrad(const ir::Value* d, int axis) {
  for (const ir::Use& u : d->uses()) {
    if (u.index != 0 || !IsOnnx(u.node, "ReduceSum")) continue;
    int a = -1;
    std::string why;
    std::optional<BiasGradMatch> m = MatchBiasGrad(u.node, &a, &why);
    if (m && a == axis) return m;
  }
  return std::nullopt;
}

absl::StatusOr<ir::Node*> AddInferred(ir::Graph& g, ir::NodeSpec spec) {
  OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(spec)));
  // Constant nodes feed the shape function with their values (Reshape's shape, Pad's pads,
  // Slice's starts and ends), as in ir::InferGraphShapes.
  std::vector<const ir::Tensor*> constants;
  for (int i = 0; i < n->num_inputs(); ++i) {
    const ir::Node* p = n->input(i) != nullptr ? n->input(i)->producer() : nullptr;
    constants.push_back(IsOnnx(p, "Constant") && p->has_attr("value") ? &p->attr("value")->t() : nullptr);
  }
  OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *n, constants));
  return n;
}

absl::Status EraseDead(ir::Graph& g, const std::vector<ir::Node*>& nodes) {
  std::vector<ir::Node*> constants;
  for (ir::Node* n : nodes) {
    for (ir::Value* in : n->inputs()) {
      if (in != nullptr && IsOnnx(in->producer(), "Constant")) constants.push_back(in->producer());
    }
    OTTR_RETURN_IF_ERROR(g.EraseNode(n));
  }
  for (ir::Node* c : constants) {
    // A Constant may feed several erased nodes: erase it once, when it is still there and dead.
    bool present = false;
    for (ir::Node* n : g.nodes()) present |= n == c;
    if (present && c->output(0)->uses().empty() && !g.IsRoot(c->output(0))) {
      OTTR_RETURN_IF_ERROR(g.EraseNode(c));
    }
  }
  return absl::OkStatus();
}

std::vector<ir::Node*> GroupedUpdates(const ir::Graph& g) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes()) {
    if (IsOttr(n, "AdamUpdateN") || IsOttr(n, "SGDUpdateN")) out.push_back(n);
  }
  return out;
}

Depths ValueDepths(const std::vector<ir::Node*>& topo_order) {
  Depths depth;
  for (const ir::Node* n : topo_order) {
    int d = 0;
    for (const ir::Value* in : n->inputs()) {
      if (in == nullptr) continue;
      auto it = depth.find(in);
      d = std::max(d, (it == depth.end() ? 0 : it->second) + 1);
    }
    for (const ir::Value* out : n->outputs()) {
      if (out != nullptr) depth[out] = d;
    }
  }
  return depth;
}

int DepthOf(const Depths& depths, const ir::Value* v) {
  auto it = depths.find(v);
  return it == depths.end() ? 0 : it->second;
}

}  // namespace ottr::passes::fusion
