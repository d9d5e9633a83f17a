#include "ir/verifier.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace ottr::ir {
namespace {

absl::Status Fail(const Graph& g, absl::string_view msg) {
  return absl::FailedPreconditionError(absl::StrCat("verifier: graph '", g.name(), "': ", msg));
}

}  // namespace

absl::Status VerifyGraph(const Graph& graph, const OpRegistry& registry) {
  absl::flat_hash_set<const Value*> defined;
  for (const Value* v : graph.inputs()) defined.insert(v);
  for (const Value* v : graph.captures()) defined.insert(v);
  for (const Value* v : graph.initializers()) {
    defined.insert(v);
    const Tensor* t = v->initializer();
    if (t == nullptr || t->type() != v->type()) {
      return Fail(graph, absl::StrCat("initializer '", v->name(), "' has type ",
                                      v->type().ToString(), " but its data is ",
                                      t ? t->type().ToString() : "missing"));
    }
  }
  const std::vector<Node*> nodes = graph.nodes();
  for (const Node* n : nodes) {
    for (const Value* out : n->outputs()) {
      if (out->producer() != n) {
        return Fail(graph, absl::StrCat(n->Describe(), ": output '", out->name(),
                                        "' does not name it as producer"));
      }
      defined.insert(out);
    }
  }
  for (const Node* n : nodes) {
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Value* in = n->input(i);
      if (in == nullptr) continue;
      if (!defined.contains(in)) {
        return Fail(graph, absl::StrCat(n->Describe(), ": input ", i, " '", in->name(),
                                        "' is not defined in this graph"));
      }
      const auto& uses = in->uses();
      if (std::find(uses.begin(), uses.end(), Use{const_cast<Node*>(n), i}) == uses.end()) {
        return Fail(graph, absl::StrCat(n->Describe(), ": input ", i, " '", in->name(),
                                        "' is missing from its use list"));
      }
    }
    const int64_t opset = graph.opset(n->domain());
    absl::Status s = registry.CheckNode(*n, opset == 0 && n->domain() == kOttrDomain ? 1 : opset);
    if (!s.ok()) return Fail(graph, s.message());
    for (const auto& [name, a] : n->attrs()) {
      if (a.kind() == Attribute::Kind::kGraph) {
        absl::Status sub = VerifyGraph(*a.g(), registry);
        if (!sub.ok()) return Fail(graph, absl::StrCat(n->Describe(), ": subgraph '", name,
                                                       "': ", sub.message()));
      }
    }
  }
  for (const Value* v : defined) {
    for (const Use& u : v->uses()) {
      if (u.node->input(u.index) != v) {
        return Fail(graph, absl::StrCat("use list of '", v->name(), "' names input ", u.index,
                                        " of ", u.node->Describe(), " which reads another value"));
      }
    }
  }
  for (const Value* v : graph.outputs()) {
    if (!defined.contains(v)) {
      return Fail(graph, absl::StrCat("graph output '", v->name(), "' is not defined"));
    }
  }
  for (const StateUpdate& u : graph.updates()) {
    if (!defined.contains(u.value) || !u.target->is_initializer() || u.target->type() != u.value->type()) {
      return Fail(graph, absl::StrCat("bad state update of '", u.target->name(), "' by '",
                                      u.value->name(), "'"));
    }
  }
  auto order = graph.TopoOrder();
  if (!order.ok()) return Fail(graph, order.status().message());
  return absl::OkStatus();
}

}  // namespace ottr::ir
