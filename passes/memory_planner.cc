// Liveness and buffer sharing of the memory planner, the top-level PlanMemory and the report.
// The scheduler is in memory_schedule.cc, placement in memory_placement.cc, the verifier in
// memory_plan_verifier.cc.
#include "passes/memory_planner.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/optimizer_update.h"
#include "ir/status.h"
#include "passes/memory_planner_internal.h"

namespace ottr::passes {
namespace {

// Input `in` has output `out`'s dtype and element count (so the kernel's element i of the input
// is element i of the output: the broadcast is the identity for it).
bool SameLayout(const ir::Node& n, int out, int in) {
  const ir::Value* o = n.output(out);
  const ir::Value* x = n.input(in);
  if (o == nullptr || x == nullptr) return false;
  const ir::TensorType& to = o->type();
  const ir::TensorType& tx = x->type();
  if (to.dtype != tx.dtype || !to.is_static() || !tx.is_static()) return false;
  return ir::NumElements(ir::StaticDims(*to.shape)) == ir::NumElements(ir::StaticDims(*tx.shape));
}

}  // namespace

bool IsViewOp(const ir::Node& n) {
  if (!n.domain().empty()) return false;
  const std::string& op = n.op_type();
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Identity";
}

// The in-place list. Each entry was checked against its CPU kernel (runtime/cpu): the kernel
// reads input element i before writing output element i with nothing in between that reads
// another element of that input, and never relies on AllocateOutput's zero fill.
//   unary elementwise and activations (out 0 <- in 0): UnaryLoop / ActivationKernel;
//   Clip (out 0 <- in 0; min and max are read before the loop);
//   Add, Sub, Mul, Div (out 0 <- in 0 or in 1 when that input is not broadcast): BroadcastBinary
//     allows the output to alias a full operand;
//   Sum, Mean, Max, Min (out 0 <- in 0 only: the kernel first writes input 0 into the output,
//     which would clobber any other input it aliased);
//   Where (out 0 <- in 1 or in 2 when not broadcast): BroadcastTernary;
//   ottr::*Grad of the activations (out 0 <- dY or Z): BinaryLoop; ottr::ReluGradBiasGrad the
//     same, its column sums then read dX (on CUDA each thread reads an element before writing it);
//   ottr::LinearReluGrad (dX <- Y): the CPU kernel sums dW over Y before it writes dX, the CUDA
//     thread that writes an element of dX has read it from Y first;
//   ottr::LinearSceReluGrad (dX <- Y): the CPU kernel reads Y into its sums before it writes dX,
//     the CUDA block that writes a row of dX copied that row of Y to shared memory first;
//   ottr::AdamUpdate (param', m', v' <- param, m, v) and ottr::SGDUpdate (param', buf' <- param,
//     buf): one loop reading element i of every input before writing element i of the outputs;
//   BatchNormalization in training mode (running mean/var <- input mean/var): the kernel copies
//     its inputs to double vectors first.
// Not listed, with the reason: ottr::SoftmaxCrossEntropyGrad (ignored rows rely on the zero
// fill), PRelu/PReluGrad (the slope broadcast), Softmax-like row ops, Pow/Mod (integer paths not
// audited), Cast (element sizes differ).
std::vector<InPlaceRule> DefaultInPlaceRules(const ir::Node& n) {
  static const absl::flat_hash_set<std::string>* kUnary = new absl::flat_hash_set<std::string>{
      "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Softplus", "Softsign", "Elu", "Selu",
      "Celu", "HardSigmoid", "HardSwish", "ThresholdedRelu", "Mish", "Neg", "Abs", "Sign",
      "Erf", "Sqrt", "Exp", "Log", "Reciprocal", "Ceil", "Floor", "Round", "Sin", "Cos", "Clip"};
  static const absl::flat_hash_set<std::string>* kActivationGrads =
      new absl::flat_hash_set<std::string>{
          "ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "EluGrad",
          "SeluGrad", "CeluGrad", "SoftplusGrad", "HardSigmoidGrad", "HardSwishGrad",
          "MishGrad", "SoftsignGrad", "ThresholdedReluGrad", "ReluGradBiasGrad"};
  std::vector<InPlaceRule> rules;
  auto add_if_full = [&](int out, int in) {
    if (SameLayout(n, out, in)) rules.push_back({out, in});
  };
  const std::string& op = n.op_type();
  if (n.domain().empty()) {
    if (kUnary->contains(op)) {
      add_if_full(0, 0);
    } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      add_if_full(0, 0);
      add_if_full(0, 1);
    } else if (op == "Sum" || op == "Mean" || op == "Max" || op == "Min") {
      add_if_full(0, 0);
    } else if (op == "Where") {
      add_if_full(0, 1);
      add_if_full(0, 2);
    } else if (op == "BatchNormalization" && n.GetInt("training_mode", 0) != 0) {
      add_if_full(1, 3);
      add_if_full(2, 4);
    }
  } else if (n.domain() == ir::kOttrDomain) {
    if (kActivationGrads->contains(op)) {
      add_if_full(0, 0);
      add_if_full(0, 1);
    } else if (op == "LinearReluGrad") {
      add_if_full(0, 2);
    } else if (op == "LinearSceReluGrad") {
      add_if_full(1, 0);
    } else if (op == "AdamUpdate") {
      add_if_full(0, 0);
      add_if_full(1, 4);
      add_if_full(2, 5);
    } else if (op == "SGDUpdate") {
      add_if_full(0, 0);
      add_if_full(1, 4);
    } else if (op == "AdamUpdateN" || op == "SGDUpdateN") {
      const ir::UpdateNLayout l = ir::UpdateNLayoutOf(n);
      for (int i = 0; l.valid && i < l.n; ++i) {
        for (int s = 0; s <= l.states; ++s) add_if_full(s * l.n + i, 2 + (s == 0 ? 0 : s + 1) * l.n + i);
      }
    } else if (op == "GemmAdamUpdate" || op == "MlpStep") {
      // GemmAdamUpdate (lr, step, A, B, p.., m.., v..) -> (p'.., m'.., v'..), MlpStep (lr, step, x,
      // labels, p.., m.., v..) -> (loss, p'.., m'.., v'..): each state over its input.
      const int count = (n.num_inputs() - 4) / 3;
      const int first = op == "MlpStep" ? 1 : 0;
      for (int i = 0; i < count; ++i) {
        for (int s = 0; s < 3; ++s) add_if_full(first + s * count + i, 4 + s * count + i);
      }
    } else if (op == "LossScaleUpdate") {
      add_if_full(0, 0);
      add_if_full(1, 1);
    }
  }
  return rules;
}

namespace memplan {

std::vector<const ir::Value*> NodeReads(const ir::Node& n, const ir::Graph& g) {
  std::vector<const ir::Value*> out;
  for (const ir::Value* v : n.inputs()) {
    if (v != nullptr) out.push_back(v);
  }
  for (const auto& [name, a] : n.attrs()) {
    if (a.kind() != ir::Attribute::Kind::kGraph) continue;
    for (const ir::Value* c : a.g()->captures()) {
      if (const ir::Value* outer = g.FindValue(c->name())) out.push_back(outer);
    }
  }
  return out;
}

std::vector<InPlaceRule> RulesFor(const ir::Node& n, const PlanOptions& options) {
  if (!options.in_place && !options.in_place_updates) return {};
  return options.in_place_rules ? options.in_place_rules(n) : DefaultInPlaceRules(n);
}

absl::StatusOr<Problem> BuildProblem(const ir::Graph& g, const PlanOptions& options) {
  if (options.alignment <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("alignment must be positive, got ",
                                                   options.alignment));
  }
  Problem p;
  p.graph = &g;
  p.nodes = g.nodes();
  for (int i = 0; i < static_cast<int>(p.nodes.size()); ++i) p.index[p.nodes[i]] = i;
  for (const ir::Value* v : g.outputs()) p.roots.insert(v);
  for (const ir::StateUpdate& u : g.updates()) {
    p.roots.insert(u.value);
    p.update_target.emplace(u.value, u.target);
  }
  p.reads.resize(p.nodes.size());
  p.preds.resize(p.nodes.size());
  p.succs.resize(p.nodes.size());
  for (int i = 0; i < static_cast<int>(p.nodes.size()); ++i) {
    p.reads[i] = NodeReads(*p.nodes[i], g);
    absl::flat_hash_set<int> seen;
    for (const ir::Value* v : p.reads[i]) {
      if (v->producer() != nullptr) {
        p.used.insert(v);
        auto it = p.index.find(v->producer());
        if (it != p.index.end() && it->second != i && seen.insert(it->second).second) {
          p.preds[i].push_back(it->second);
          p.succs[it->second].push_back(i);
        }
      }
    }
  }
  for (const ir::Value* v : p.roots) p.used.insert(v);
  p.workspace.assign(p.nodes.size(), 0);
  if (options.workspace_bytes) {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      p.workspace[i] = std::max<int64_t>(options.workspace_bytes(*p.nodes[i]), 0);
    }
  }
  // Sizes: inputs, initializers and used node outputs.
  auto size_of = [&](const ir::Value* v) -> absl::Status {
    const ir::TensorType& t = v->type();
    if (!t.is_static() || ir::DTypeSize(t.dtype) == 0) {
      std::string where = v->producer() ? absl::StrCat(" (output of ", v->producer()->Describe(), ")")
                                         : std::string();
      return absl::FailedPreconditionError(absl::StrCat(
          "memory planning needs static types: '", v->name(), "'", where, " is ", t.ToString(),
          " (bind the batch and other dims first)"));
    }
    p.bytes[v] = ir::NumElements(ir::StaticDims(*t.shape)) *
                 static_cast<int64_t>(ir::DTypeSize(t.dtype));
    return absl::OkStatus();
  };
  for (const ir::Value* v : g.inputs()) OTTR_RETURN_IF_ERROR(size_of(v));
  for (const ir::Value* v : g.initializers()) OTTR_RETURN_IF_ERROR(size_of(v));
  for (const ir::Node* n : p.nodes) {
    for (const ir::Value* v : n->outputs()) {
      if (v != nullptr && p.used.contains(v)) OTTR_RETURN_IF_ERROR(size_of(v));
    }
  }
  return p;
}

namespace {

std::string Where(const ir::Node& n, int pos) {
  return absl::StrCat(n.Describe(), " at position ", pos);
}

}  // namespace

Assignment AssignBuffers(const Problem& p, const std::vector<int>& order,
                         const PlanOptions& options) {
  const ir::Graph& g = *p.graph;
  const int n = static_cast<int>(order.size());
  const int end = std::max(n - 1, 0);
  // Last position reading each value; roots are read after the last node (n).
  absl::flat_hash_map<const ir::Value*, int> last_read;
  std::vector<int> pos_of(p.nodes.size());
  for (int k = 0; k < n; ++k) {
    pos_of[order[k]] = k;
    for (const ir::Value* v : p.reads[order[k]]) last_read[v] = std::max(last_read[v], k);
  }
  for (const ir::Value* v : p.roots) last_read[v] = n;

  Assignment a;
  // The last read of each buffer's current content (over all its values so far).
  std::vector<int> content_last;
  std::vector<bool> constant;  // buffer holds a persistent Constant output
  auto new_buffer = [&](const ir::Value* v, int first, bool persistent) {
    Buffer b;
    b.bytes = p.bytes.at(v);
    b.first = first;
    b.persistent = persistent;
    b.values.push_back(v);
    a.buffer_of[v] = static_cast<int>(a.buffers.size());
    a.buffers.push_back(std::move(b));
    auto it = last_read.find(v);
    content_last.push_back(it == last_read.end() ? first : it->second);
    constant.push_back(false);
  };
  for (const ir::Value* v : g.initializers()) new_buffer(v, 0, true);
  for (const ir::Value* v : g.inputs()) {
    if (!a.buffer_of.contains(v)) new_buffer(v, 0, false);
  }
  // Why an update value could not go into its target's buffer.
  absl::flat_hash_map<const ir::Value*, std::string> update_reason;
  for (int k = 0; k < n; ++k) {
    const ir::Node& node = *p.nodes[order[k]];
    const std::vector<const ir::Value*>& reads = p.reads[order[k]];
    // Reads of each buffer by this node.
    absl::flat_hash_map<int, int> reads_here;
    for (const ir::Value* v : reads) ++reads_here[a.buffer_of.at(v)];
    absl::flat_hash_set<int> taken;  // buffers an output of this node already took
    const std::vector<InPlaceRule> rules = RulesFor(node, options);
    const bool is_constant = node.domain().empty() && node.op_type() == "Constant";
    for (int o = 0; o < node.num_outputs(); ++o) {
      const ir::Value* out = node.output(o);
      if (out == nullptr || !p.used.contains(out)) continue;
      auto target_it = p.update_target.find(out);
      const ir::Value* target = target_it == p.update_target.end() ? nullptr : target_it->second;
      // View: join input 0's buffer.
      if (o == 0 && IsViewOp(node) && node.input(0) != nullptr &&
          p.bytes.at(node.input(0)) == p.bytes.at(out)) {
        const int b = a.buffer_of.at(node.input(0));
        a.buffers[b].values.push_back(out);
        a.buffer_of[out] = b;
        a.alias_of[out] = {Alias::Kind::kView, node.input(0)};
        content_last[b] = std::max(content_last[b], last_read.at(out));
        if (target != nullptr) update_reason[out] = absl::StrCat("it is a view of '", node.input(0)->name(), "'");
        continue;
      }
      // `out` takes over buffer b, whose content ends here, as an alias of `source`.
      bool placed = false;
      auto take = [&](int b, Alias::Kind kind, const ir::Value* source) {
        a.buffers[b].values.push_back(out);
        a.buffer_of[out] = b;
        a.alias_of[out] = {kind, source};
        content_last[b] = last_read.at(out);
        taken.insert(b);
        placed = true;
      };
      // In place: take over a dying input's buffer.
      // Why the output could not go over its update target (when it has one).
      std::string why_not = absl::StrCat(node.Describe(), " may not write output ", o, " over '",
                                         target ? target->name() : "", "'");
      for (const InPlaceRule& r : rules) {
        if (r.output != o) continue;
        const ir::Value* x = node.input(r.input);
        if (x == nullptr) continue;
        const int b = a.buffer_of.at(x);
        const bool update_in_place = target != nullptr && x == target && options.in_place_updates;
        if (!options.in_place && !update_in_place) {
          if (x == target) why_not = "in-place updates are off";
          continue;
        }
        if (a.buffers[b].persistent && !(update_in_place && a.buffers[b].values[0] == target)) {
          if (target != nullptr && x == target) why_not = "in-place updates are off";
          continue;  // state and constants are never overwritten except by their own update
        }
        if (constant[b] || taken.contains(b) || p.bytes.at(x) != p.bytes.at(out)) continue;
        if (reads_here[b] != 1) {
          if (x == target) why_not = absl::StrCat(node.Describe(), " reads '", x->name(), "' twice");
          continue;
        }
        if (content_last[b] != k) {
          if (x == target) {
            why_not = content_last[b] >= n
                          ? absl::StrCat("'", x->name(), "' (or a view of it) is also a graph output")
                          : absl::StrCat(Where(node, k), " is not the last reader of '", x->name(),
                                         "' (read again at position ", content_last[b], ")");
          }
          continue;
        }
        take(b, Alias::Kind::kInPlace, x);
        break;
      }
      // An update value the node does not compute from its target: straight into the target's
      // buffer when no node reads the target from here on.
      if (!placed && target != nullptr && options.in_place_updates && a.buffer_of.contains(target)) {
        const int b = a.buffer_of.at(target);
        if (a.buffers[b].persistent && a.buffers[b].values[0] == target && !taken.contains(b) &&
            p.bytes.at(target) == p.bytes.at(out) && content_last[b] < k && reads_here[b] == 0) {
          take(b, Alias::Kind::kUpdate, target);
        } else if (content_last[b] >= k) {
          why_not = absl::StrCat("'", target->name(), "' is read at position ", content_last[b], ", after ", Where(node, k));
        }
      }
      if (target != nullptr) update_reason[out] = why_not;
      if (placed) continue;
      const bool persistent = is_constant && options.constants_persistent;
      new_buffer(out, persistent ? 0 : k, persistent);
      constant.back() = persistent;
      taken.insert(static_cast<int>(a.buffers.size()) - 1);
    }
    {
      const int64_t ws = p.workspace[order[k]];
      if (ws > 0) {
        Buffer b;
        b.bytes = ws;
        b.first = b.last = k;
        b.workspace_of = &node;
        a.buffers.push_back(std::move(b));
        content_last.push_back(k);
        constant.push_back(false);
      }
    }
  }
  // Intervals: persistent buffers span the step; others end at their last read (roots: the end).
  for (size_t b = 0; b < a.buffers.size(); ++b) {
    Buffer& buf = a.buffers[b];
    if (buf.persistent) {
      buf.first = 0;
      buf.last = end;
      continue;
    }
    if (buf.workspace_of != nullptr) continue;
    int last = buf.first;
    for (const ir::Value* v : buf.values) {
      auto it = last_read.find(v);
      if (it != last_read.end()) last = std::max(last, std::min(it->second, end));
    }
    buf.last = std::min(last + options.reuse_delay, end);
  }
  for (const ir::StateUpdate& u : g.updates()) {
    if (u.value == u.target) continue;
    auto bv = a.buffer_of.find(u.value);
    auto bt = a.buffer_of.find(u.target);
    if (bv != a.buffer_of.end() && bt != a.buffer_of.end() && bv->second == bt->second) continue;
    a.update_copies.push_back({u.target, u.value});
    auto why = update_reason.find(u.value);
    a.notes.push_back(absl::StrCat(
        "update of '", u.target->name(), "' needs a copy from '", u.value->name(), "': ",
        why != update_reason.end() ? why->second
        : u.value->producer() == nullptr ? std::string("the value is not computed by a node")
                                         : std::string("the value is not written over it")));
  }
  return a;
}

int64_t LowerBound(const std::vector<Buffer>& buffers, int64_t alignment) {
  int positions = 1;
  for (const Buffer& b : buffers) positions = std::max(positions, b.last + 1);
  std::vector<int64_t> delta(positions + 1, 0);
  for (const Buffer& b : buffers) {
    const int64_t s = AlignUp(b.bytes, alignment);
    delta[b.first] += s;
    delta[b.last + 1] -= s;
  }
  int64_t live = 0, best = 0;
  for (int k = 0; k < positions; ++k) {
    live += delta[k];
    best = std::max(best, live);
  }
  return best;
}

int64_t NaiveBytes(const Problem& p, const std::vector<Buffer>& buffers, int64_t alignment) {
  int64_t total = 0;
  absl::flat_hash_set<const ir::Value*> counted;
  auto add = [&](const ir::Value* v) {
    if (counted.insert(v).second) total += AlignUp(p.bytes.at(v), alignment);
  };
  for (const ir::Value* v : p.graph->initializers()) add(v);
  for (const ir::Value* v : p.graph->inputs()) add(v);
  for (const ir::Node* n : p.nodes) {
    for (int o = 0; o < n->num_outputs(); ++o) {
      const ir::Value* v = n->output(o);
      if (v == nullptr || !p.used.contains(v)) continue;
      if (o == 0 && IsViewOp(*n)) continue;  // no executor copies a view
      add(v);
    }
  }
  for (const Buffer& b : buffers) {
    if (b.workspace_of != nullptr) total += AlignUp(b.bytes, alignment);
  }
  return total;
}

namespace {

struct Candidate {
  std::string name;
  std::vector<int> order;
  Assignment assignment;
  Placement placement;
  int64_t lower_bound = 0;
};

Candidate Evaluate(const Problem& p, std::vector<int> order, const PlanOptions& options) {
  Candidate c;
  c.order = std::move(order);
  c.assignment = AssignBuffers(p, c.order, options);
  c.placement = PlaceBuffers(c.assignment.buffers, options.alignment);
  c.lower_bound = LowerBound(c.assignment.buffers, options.alignment);
  return c;
}

}  // namespace
}  // namespace memplan

absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& graph, const PlanOptions& options) {
  using namespace memplan;  // NOLINT: this file's internals
  OTTR_ASSIGN_OR_RETURN(Problem p, BuildProblem(graph, options));
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> topo, graph.TopoOrder());
  std::vector<int> given;
  for (ir::Node* n : topo) given.push_back(p.index.at(n));
  // The memory-lowest candidates reuse bytes at once; only the critical-path one (for several
  // streams) delays reuse (PlanOptions::reuse_delay).
  PlanOptions at_once = options;
  at_once.reuse_delay = 0;
  Candidate best = Evaluate(p, given, at_once);
  best.name = "given";
  const PlanStats given_stats{best.placement.peak, best.lower_bound,
                              NaiveBytes(p, best.assignment.buffers, options.alignment)};
  std::vector<std::string> tried = {
      absl::StrFormat("given: peak %d, lower bound %d", best.placement.peak, best.lower_bound)};
  if (options.reorder) {
    for (const auto& [name, reverse, lazy] :
         {std::tuple<const char*, bool, bool>{"greedy forward", false, false},
          {"greedy forward, lazy", false, true},
          {"greedy backward", true, false}}) {
      Candidate c = Evaluate(p, GreedySchedule(p, given, at_once, reverse, lazy), at_once);
      c.name = name;
      tried.push_back(absl::StrFormat("%s: peak %d, lower bound %d", c.name, c.placement.peak,
                                      c.lower_bound));
      if (c.placement.peak < best.placement.peak) best = std::move(c);
    }
    if (options.critical_path_slack >= 0) {
      Candidate c = Evaluate(p, GreedySchedule(p, given, options, false, false, /*critical_path=*/true), options);
      c.name = "critical path";
      tried.push_back(absl::StrFormat("%s: peak %d, lower bound %d", c.name, c.placement.peak, c.lower_bound));
      if (static_cast<double>(c.placement.peak) <=
          static_cast<double>(best.placement.peak) * (1.0 + options.critical_path_slack)) {
        best = std::move(c);
      }
    }
  }
  MemoryPlan plan;
  plan.schedule_name = best.name;
  plan.schedules_tried = std::move(tried);
  plan.alignment = options.alignment;
  for (int i : best.order) plan.schedule.push_back(p.nodes[i]);
  plan.given_schedule = std::move(topo);
  plan.buffers = std::move(best.assignment.buffers);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    plan.buffers[b].offset = best.placement.offsets[b];
    if (plan.buffers[b].workspace_of != nullptr) {
      plan.workspace_offset[plan.buffers[b].workspace_of] = plan.buffers[b].offset;
    }
  }
  plan.buffer_of = std::move(best.assignment.buffer_of);
  plan.alias_of = std::move(best.assignment.alias_of);
  plan.update_copies = std::move(best.assignment.update_copies);
  plan.notes = std::move(best.assignment.notes);
  plan.peak_bytes = best.placement.peak;
  plan.lower_bound_bytes = best.lower_bound;
  plan.naive_bytes = NaiveBytes(p, plan.buffers, options.alignment);
  plan.given = given_stats;
  plan.placement_order = best.placement.order;
  plan.custom_in_place_rules = static_cast<bool>(options.in_place_rules);
  return plan;
}

std::string FormatPlan(const MemoryPlan& plan) {
  std::string s;
  absl::flat_hash_map<const ir::Node*, int> given_pos;
  for (size_t k = 0; k < plan.given_schedule.size(); ++k) given_pos[plan.given_schedule[k]] = k;
  absl::StrAppend(&s, "schedule (position, given position, node):\n");
  for (size_t k = 0; k < plan.schedule.size(); ++k) {
    const ir::Node* n = plan.schedule[k];
    auto it = given_pos.find(n);
    absl::StrAppendFormat(&s, "  %4d %4d  %s\n", static_cast<int>(k),
                          it == given_pos.end() ? -1 : it->second, n->Describe());
  }
  absl::StrAppendFormat(&s, "%6s %12s %5s %5s %12s  %s\n", "buffer", "bytes", "first", "last",
                        "offset", "values");
  std::vector<int> by_offset(plan.buffers.size());
  for (size_t b = 0; b < by_offset.size(); ++b) by_offset[b] = static_cast<int>(b);
  std::stable_sort(by_offset.begin(), by_offset.end(), [&](int x, int y) {
    const Buffer& a = plan.buffers[x];
    const Buffer& b = plan.buffers[y];
    return std::tie(a.first, a.offset) < std::tie(b.first, b.offset);
  });
  for (int b : by_offset) {
    const Buffer& buf = plan.buffers[b];
    std::vector<std::string> names;
    if (buf.workspace_of != nullptr) names.push_back(absl::StrCat("workspace of ", buf.workspace_of->Describe()));
    for (const ir::Value* v : buf.values) {
      auto it = plan.alias_of.find(v);
      if (it == plan.alias_of.end()) {
        names.push_back(v->name());
      } else {
        names.push_back(absl::StrCat(v->name(), it->second.kind == Alias::Kind::kView     ? " (view)"
                                                : it->second.kind == Alias::Kind::kUpdate ? " (into its state)"
                                                                                          : " (in place)"));
      }
    }
    absl::StrAppendFormat(&s, "%6d %12d %5d %5d %12d  %s%s\n", b, buf.bytes, buf.first, buf.last,
                          buf.offset, buf.persistent ? "[persistent] " : "",
                          absl::StrJoin(names, ", "));
  }
  for (const UpdateCopy& c : plan.update_copies) {
    absl::StrAppend(&s, "copy after the step: '", c.value->name(), "' -> '", c.target->name(), "'\n");
  }
  for (const std::string& note : plan.notes) absl::StrAppend(&s, "note: ", note, "\n");
  absl::StrAppend(&s, "placement order: ", plan.placement_order, "\n");
  absl::StrAppendFormat(&s, "given order:  peak %d bytes, lower bound %d bytes\n",
                        plan.given.peak_bytes, plan.given.lower_bound_bytes);
  for (const std::string& t : plan.schedules_tried) absl::StrAppend(&s, "schedule tried: ", t, "\n");
  absl::StrAppendFormat(&s, "chosen order: peak %d bytes, lower bound %d bytes (%s)\n",
                        plan.peak_bytes, plan.lower_bound_bytes, plan.schedule_name);
  absl::StrAppendFormat(&s, "memory plan: peak %d bytes, lower bound %d bytes, naive %d bytes\n",
                        plan.peak_bytes, plan.lower_bound_bytes, plan.naive_bytes);
  return s;
}

}  // namespace ottr::passes
