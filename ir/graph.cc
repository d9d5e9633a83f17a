#include "ir/graph.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "ir/printer.h"

namespace ottr::ir {

// --- Node ---------------------------------------------------------------------------------------

std::string Node::QualifiedOpType() const {
  return domain_.empty() ? op_type_ : absl::StrCat(domain_, ".", op_type_);
}

std::string Node::Describe() const {
  return absl::StrCat("node '", origin_, "' (", QualifiedOpType(), ")");
}

bool Node::output_used(int i) const {
  const Value* v = output(i);
  return v != nullptr && (!v->uses().empty() || graph_->IsRoot(v));
}

const Attribute* Node::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

int64_t Node::GetInt(const std::string& name, int64_t def) const {
  const Attribute* a = attr(name);
  return a && a->kind() == Attribute::Kind::kInt ? a->i() : def;
}
float Node::GetFloat(const std::string& name, float def) const {
  const Attribute* a = attr(name);
  if (a && a->kind() == Attribute::Kind::kFloat) return a->f();
  if (a && a->kind() == Attribute::Kind::kInt) return static_cast<float>(a->i());
  return def;
}
std::string Node::GetString(const std::string& name, const std::string& def) const {
  const Attribute* a = attr(name);
  return a && a->kind() == Attribute::Kind::kString ? a->s() : def;
}
std::vector<int64_t> Node::GetInts(const std::string& name, std::vector<int64_t> def) const {
  const Attribute* a = attr(name);
  return a && a->kind() == Attribute::Kind::kInts ? a->ints() : def;
}
std::vector<float> Node::GetFloats(const std::string& name, std::vector<float> def) const {
  const Attribute* a = attr(name);
  return a && a->kind() == Attribute::Kind::kFloats ? a->floats() : def;
}

// --- Graph --------------------------------------------------------------------------------------

Graph::Graph(std::string name) : name_(std::move(name)) {}
Graph::~Graph() = default;

int64_t Graph::opset(const std::string& domain) const {
  auto it = opset_imports_.find(domain);
  return it == opset_imports_.end() ? 0 : it->second;
}

Value* Graph::NewValue(const std::string& name, Value::Kind kind) {
  auto v = std::make_unique<Value>();
  v->id_ = next_value_id_++;
  v->name_ = name;
  v->kind_ = kind;
  v->graph_ = this;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  by_name_[name] = raw;
  return raw;
}

absl::StatusOr<Value*> Graph::AddInput(const std::string& name, TensorType type) {
  if (name.empty()) return absl::InvalidArgumentError("graph input with an empty name");
  if (by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is defined twice"));
  }
  Value* v = NewValue(name, Value::Kind::kInput);
  v->type_ = std::move(type);
  inputs_.push_back(v);
  return v;
}

absl::StatusOr<Value*> Graph::AddInitializer(const std::string& name, Tensor data) {
  if (name.empty()) return absl::InvalidArgumentError("initializer with an empty name");
  if (by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is defined twice"));
  }
  Value* v = NewValue(name, Value::Kind::kInitializer);
  v->type_ = data.type();
  v->initializer_ = std::move(data);
  initializers_.push_back(v);
  return v;
}

absl::StatusOr<Value*> Graph::AddCapture(const std::string& name, TensorType type) {
  if (by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is defined twice"));
  }
  Value* v = NewValue(name, Value::Kind::kCapture);
  v->type_ = std::move(type);
  captures_.push_back(v);
  return v;
}

absl::StatusOr<Node*> Graph::AddNode(NodeSpec spec) {
  for (const std::string& n : spec.output_names) {
    if (!n.empty() && by_name_.contains(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value '", n, "' is defined twice (output of node '", spec.origin, "' (", spec.op_type,
          "))"));
    }
  }
  for (Value* in : spec.inputs) {
    if (in != nullptr && in->graph_ != this) {
      return absl::InternalError(absl::StrCat("node '", spec.origin, "' reads value '", in->name(),
                                              "' of another graph"));
    }
  }
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  n->id_ = next_node_id_++;
  n->op_type_ = std::move(spec.op_type);
  n->domain_ = std::move(spec.domain);
  n->attrs_ = std::move(spec.attrs);
  n->origin_ = std::move(spec.origin);
  n->graph_ = this;
  n->inputs_ = std::move(spec.inputs);
  for (int i = 0; i < n->num_inputs(); ++i) {
    if (n->inputs_[i] != nullptr) n->inputs_[i]->uses_.push_back({n, i});
  }
  for (size_t i = 0; i < spec.output_names.size(); ++i) {
    std::string name = spec.output_names[i];
    if (name.empty()) name = UniqueName(absl::StrCat(n->origin_.empty() ? n->op_type_ : n->origin_,
                                                     ":", i));
    Value* v = NewValue(name, Value::Kind::kNodeOutput);
    v->producer_ = n;
    v->producer_index_ = static_cast<int>(i);
    n->outputs_.push_back(v);
  }
  nodes_.push_back(std::move(node));
  return n;
}

void Graph::AddOutput(Value* v) { outputs_.push_back(v); }

absl::Status Graph::AddUpdate(Value* target, Value* value) {
  if (!target->is_initializer()) {
    return absl::InvalidArgumentError(absl::StrCat("state update target '", target->name(),
                                                   "' is not an initializer"));
  }
  if (target->type() != value->type()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state update of '", target->name(), "' (", target->type().ToString(), ") by '",
        value->name(), "' (", value->type().ToString(), "): types differ"));
  }
  for (const StateUpdate& u : updates_) {
    if (u.target == target) {
      return absl::InvalidArgumentError(absl::StrCat("'", target->name(), "' is updated twice"));
    }
  }
  updates_.push_back({target, value});
  return absl::OkStatus();
}
void Graph::SetOutput(int i, Value* v) { outputs_[i] = v; }

absl::Status Graph::SetInitializerData(Value* v, Tensor data) {
  if (!v->is_initializer()) {
    return absl::InvalidArgumentError(absl::StrCat("'", v->name(), "' is not an initializer"));
  }
  if (data.dtype() != v->initializer_->dtype() || data.dims() != v->initializer_->dims()) {
    return absl::InvalidArgumentError(absl::StrCat("new data for '", v->name(), "' is ",
                                                   data.type().ToString(), ", expected ",
                                                   v->type_.ToString()));
  }
  v->initializer_ = std::move(data);
  return absl::OkStatus();
}

void Graph::RemoveUse(Value* v, Node* node, int index) {
  auto it = std::find(v->uses_.begin(), v->uses_.end(), Use{node, index});
  if (it != v->uses_.end()) v->uses_.erase(it);
}

void Graph::SetNodeInput(Node* node, int index, Value* v) {
  if (index >= node->num_inputs()) node->inputs_.resize(index + 1, nullptr);
  if (Value* old = node->inputs_[index]) RemoveUse(old, node, index);
  node->inputs_[index] = v;
  if (v != nullptr) v->uses_.push_back({node, index});
}

void Graph::AppendNodeInput(Node* node, Value* v) { SetNodeInput(node, node->num_inputs(), v); }

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) {
    u.node->inputs_[u.index] = to;
    to->uses_.push_back(u);
  }
  from->uses_.clear();
  for (Value*& o : outputs_) {
    if (o == from) o = to;
  }
  for (StateUpdate& u : updates_) {
    if (u.value == from) u.value = to;
  }
}

absl::Status Graph::EraseNode(Node* node) {
  for (Value* out : node->outputs_) {
    if (!out->uses_.empty() || IsRoot(out)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot erase ", node->Describe(), ": output '", out->name(), "' is still used"));
    }
  }
  for (int i = 0; i < node->num_inputs(); ++i) {
    if (node->inputs_[i] != nullptr) RemoveUse(node->inputs_[i], node, i);
  }
  for (Value* out : node->outputs_) {
    by_name_.erase(out->name_);
    std::erase_if(values_, [out](const std::unique_ptr<Value>& p) { return p.get() == out; });
  }
  std::erase_if(nodes_, [node](const std::unique_ptr<Node>& p) { return p.get() == node; });
  return absl::OkStatus();
}

absl::Status Graph::EraseValue(Value* v) {
  if (v->producer_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", v->name(), "' is a node output; erase its node"));
  }
  bool is_target = false;
  for (const StateUpdate& u : updates_) is_target |= u.target == v;
  if (!v->uses_.empty() || IsRoot(v) || is_target) {
    return absl::FailedPreconditionError(absl::StrCat("cannot erase '", v->name(),
                                                      "': it is still used"));
  }
  std::erase(inputs_, v);
  std::erase(initializers_, v);
  std::erase(captures_, v);
  by_name_.erase(v->name_);
  std::erase_if(values_, [v](const std::unique_ptr<Value>& p) { return p.get() == v; });
  return absl::OkStatus();
}

void Graph::RenameValue(Value* v, const std::string& name) {
  by_name_.erase(v->name_);
  v->name_ = name;
  by_name_[name] = v;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

absl::StatusOr<std::vector<Node*>> Graph::TopoOrder() const {
  absl::flat_hash_map<const Node*, int> pending;
  absl::flat_hash_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node* n = nodes_[i].get();
    position[n] = i;
    int count = 0;
    for (const Value* in : n->inputs_) {
      if (in != nullptr && in->producer_ != nullptr) ++count;
    }
    pending[n] = count;
  }
  // Min-heap on insertion position: among ready nodes the earliest inserted runs first.
  auto later = [&](const Node* a, const Node* b) { return position[a] > position[b]; };
  std::priority_queue<const Node*, std::vector<const Node*>, decltype(later)> ready(later);
  for (const auto& n : nodes_) {
    if (pending[n.get()] == 0) ready.push(n.get());
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    const Node* n = ready.top();
    ready.pop();
    order.push_back(const_cast<Node*>(n));
    for (const Value* out : n->outputs_) {
      for (const Use& u : out->uses_) {
        if (--pending[u.node] == 0) ready.push(u.node);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_) {
      if (pending[n.get()] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph '", name_, "' has a cycle through ", n->Describe()));
      }
    }
  }
  return order;
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

bool Graph::IsGraphOutput(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

bool Graph::IsRoot(const Value* v) const {
  if (IsGraphOutput(v)) return true;
  for (const StateUpdate& u : updates_) {
    if (u.value == v) return true;
  }
  return false;
}

std::string Graph::UniqueName(const std::string& prefix) {
  if (!prefix.empty() && !by_name_.contains(prefix)) return prefix;
  while (true) {
    std::string name = absl::StrCat(prefix, "_", next_unique_++);
    if (!by_name_.contains(name)) return name;
  }
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>(name_);
  g->opset_imports_ = opset_imports_;
  absl::flat_hash_map<const Value*, Value*> map;
  auto copy_value = [&](const Value* v) {
    Value* c = g->NewValue(v->name_, v->kind_);
    c->id_ = v->id_;
    c->type_ = v->type_;
    c->initializer_ = v->initializer_;
    map[v] = c;
    return c;
  };
  for (const Value* v : inputs_) g->inputs_.push_back(copy_value(v));
  for (const Value* v : initializers_) g->initializers_.push_back(copy_value(v));
  for (const Value* v : captures_) g->captures_.push_back(copy_value(v));
  for (const auto& n : nodes_) {
    auto node = std::make_unique<Node>();
    Node* c = node.get();
    c->id_ = n->id_;
    c->op_type_ = n->op_type_;
    c->domain_ = n->domain_;
    c->attrs_ = n->attrs_;
    for (auto& [name, a] : c->attrs_) {
      if (a.kind() == Attribute::Kind::kGraph) a = Attribute(std::shared_ptr<Graph>(a.g()->Clone()));
    }
    c->origin_ = n->origin_;
    c->graph_ = g.get();
    for (const Value* out : n->outputs_) {
      Value* co = copy_value(out);
      co->producer_ = c;
      co->producer_index_ = out->producer_index_;
      c->outputs_.push_back(co);
    }
    g->nodes_.push_back(std::move(node));
  }
  // Inputs after all outputs exist (insertion order need not be topological).
  for (size_t k = 0; k < nodes_.size(); ++k) {
    Node* c = g->nodes_[k].get();
    for (const Value* in : nodes_[k]->inputs_) {
      Value* ci = in ? map.at(in) : nullptr;
      c->inputs_.push_back(ci);
      if (ci) ci->uses_.push_back({c, static_cast<int>(c->inputs_.size()) - 1});
    }
  }
  for (const Value* v : outputs_) g->outputs_.push_back(map.at(v));
  for (const StateUpdate& u : updates_) g->updates_.push_back({map.at(u.target), map.at(u.value)});
  g->next_value_id_ = next_value_id_;
  g->next_node_id_ = next_node_id_;
  g->next_unique_ = next_unique_;
  return g;
}

std::string Graph::ToString() const { return PrintGraph(*this); }

}  // namespace ottr::ir
