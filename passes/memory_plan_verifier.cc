// VerifyPlan: an independent check of a memory plan against its graph.
//
// Besides the structural checks (schedule, alignment, intervals, pairwise overlap of buffers live
// at the same time, legal sharing), it simulates one step over the arena's bytes: each write
// (a graph input fed, an initializer or constant present at the start, a node output, a node's
// workspace) tags the byte range it covers with the content it holds, and each read checks that
// its whole range still carries the content it expects. A view carries its source's content; an
// in-place output is new content. This catches any clobbering regardless of how the intervals
// were computed.
#include <map>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "passes/memory_planner.h"
#include "passes/memory_planner_internal.h"

namespace ottr::passes {
namespace {

absl::Status Fail(const std::string& msg) {
  return absl::FailedPreconditionError(absl::StrCat("memory plan: ", msg));
}

// Byte ranges of the arena tagged with their content and the position that wrote it.
class ArenaContents {
 public:
  struct Seg {
    int64_t end;
    const void* tag;
    int pos;
  };

  void Write(int64_t lo, int64_t hi, const void* tag, int pos) {
    if (lo >= hi) return;
    Split(lo);
    Split(hi);
    segs_.erase(segs_.lower_bound(lo), segs_.lower_bound(hi));
    segs_[lo] = {hi, tag, pos};
  }

  // The first part of [lo, hi) not tagged `tag`: its segment (tag null for never written).
  std::optional<Seg> Mismatch(int64_t lo, int64_t hi, const void* tag) const {
    int64_t cursor = lo;
    auto it = segs_.upper_bound(lo);
    if (it != segs_.begin()) --it;
    for (; cursor < hi; ++it) {
      if (it == segs_.end() || it->first > cursor) return Seg{hi, nullptr, -1};
      if (it->second.end <= cursor) continue;
      if (it->second.tag != tag) return it->second;
      cursor = it->second.end;
    }
    return std::nullopt;
  }

 private:
  void Split(int64_t x) {
    auto it = segs_.upper_bound(x);
    if (it == segs_.begin()) return;
    --it;
    if (it->first < x && x < it->second.end) {
      Seg right = it->second;
      it->second.end = x;
      segs_[x] = right;
    }
  }
  std::map<int64_t, Seg> segs_;
};

}  // namespace

absl::Status VerifyPlan(const ir::Graph& graph, const MemoryPlan& plan) {
  const int n = static_cast<int>(plan.schedule.size());
  const int end = std::max(n - 1, 0);
  if (plan.alignment <= 0) return Fail(absl::StrCat("alignment ", plan.alignment));
  // 1. The schedule runs every node once, after the producers of what it reads.
  if (n != graph.num_nodes()) {
    return Fail(absl::StrCat("the schedule has ", n, " nodes, the graph ", graph.num_nodes()));
  }
  absl::flat_hash_map<const ir::Node*, int> pos;
  for (const ir::Node* node : graph.nodes()) pos[node] = -1;
  for (int k = 0; k < n; ++k) {
    auto it = pos.find(plan.schedule[k]);
    if (it == pos.end() || it->second >= 0) {
      return Fail(absl::StrCat("position ", k, ": ", plan.schedule[k]->Describe(),
                               it == pos.end() ? " is not in the graph" : " is scheduled twice"));
    }
    it->second = k;
  }
  std::vector<std::vector<const ir::Value*>> reads(n);
  absl::flat_hash_map<const ir::Value*, int> last_read;
  for (int k = 0; k < n; ++k) {
    reads[k] = memplan::NodeReads(*plan.schedule[k], graph);
    for (const ir::Value* v : reads[k]) {
      if (v->producer() != nullptr && pos.contains(v->producer()) && pos.at(v->producer()) >= k) {
        return Fail(absl::StrCat(plan.schedule[k]->Describe(), " at position ", k, " reads '",
                                 v->name(), "' before ", v->producer()->Describe(), " computes it"));
      }
      last_read[v] = std::max(last_read[v], k);
    }
  }
  absl::flat_hash_set<const ir::Value*> roots;
  for (const ir::Value* v : graph.outputs()) roots.insert(v);
  for (const ir::StateUpdate& u : graph.updates()) roots.insert(u.value);
  auto bytes_of = [](const ir::Value* v) -> int64_t {
    const ir::TensorType& t = v->type();
    if (!t.is_static()) return -1;
    return ir::NumElements(ir::StaticDims(*t.shape)) * static_cast<int64_t>(ir::DTypeSize(t.dtype));
  };

  // 2. Buffers: aligned, inside the arena, holding their values.
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const Buffer& buf = plan.buffers[b];
    const std::string name = absl::StrCat("buffer ", b);
    if (buf.offset < 0 || buf.offset % plan.alignment != 0 || buf.bytes < 0 ||
        buf.offset + plan.Aligned(buf.bytes) > plan.peak_bytes) {
      return Fail(absl::StrCat(name, " at offset ", buf.offset, " (", buf.bytes,
                               " bytes) is misaligned or outside the arena of ", plan.peak_bytes,
                               " bytes"));
    }
    if (buf.first < 0 || buf.first > buf.last || buf.last > end) {
      return Fail(absl::StrCat(name, " has interval [", buf.first, ", ", buf.last, "] outside [0, ",
                               end, "]"));
    }
    if (buf.persistent && (buf.first != 0 || buf.last != end)) {
      return Fail(absl::StrCat(name, " is persistent but not live over the whole step"));
    }
    if (buf.workspace_of != nullptr) {
      auto it = plan.workspace_offset.find(buf.workspace_of);
      if (it == plan.workspace_offset.end() || it->second != buf.offset || !pos.contains(buf.workspace_of) ||
          buf.first > pos.at(buf.workspace_of) || buf.last < pos.at(buf.workspace_of)) {
        return Fail(absl::StrCat(name, ", the workspace of ", buf.workspace_of->Describe(),
                                 ", is not live at its node or disagrees with workspace_offset"));
      }
    }
    for (size_t i = 0; i < buf.values.size(); ++i) {
      const ir::Value* v = buf.values[i];
      auto it = plan.buffer_of.find(v);
      if (it == plan.buffer_of.end() || it->second != static_cast<int>(b)) {
        return Fail(absl::StrCat(name, " lists '", v->name(), "', whose buffer_of disagrees"));
      }
      const int64_t vb = bytes_of(v);
      if (vb < 0 || vb > buf.bytes) {
        return Fail(absl::StrCat("'", v->name(), "' (", v->type().ToString(), ") does not fit ", name,
                                 " of ", buf.bytes, " bytes"));
      }
      if ((i > 0) != plan.alias_of.contains(v)) {
        return Fail(absl::StrCat("'", v->name(), "' in ", name,
                                 i > 0 ? " shares it without an alias record"
                                       : " creates it but has an alias record"));
      }
      // The interval covers the value's life.
      const int born = v->producer() == nullptr ? 0 : pos.at(v->producer());
      int dies = roots.contains(v) ? end : born;
      if (auto r = last_read.find(v); r != last_read.end()) dies = std::max(dies, r->second);
      if (born < buf.first || dies > buf.last) {
        return Fail(absl::StrCat("'", v->name(), "' lives over [", born, ", ", dies, "] but ", name,
                                 " only over [", buf.first, ", ", buf.last, "]"));
      }
    }
  }
  // Every value the step holds has a buffer.
  auto needs_buffer = [&](const ir::Value* v) -> absl::Status {
    if (!plan.buffer_of.contains(v)) return Fail(absl::StrCat("'", v->name(), "' has no buffer"));
    return absl::OkStatus();
  };
  for (const ir::Value* v : graph.inputs()) OTTR_RETURN_IF_ERROR(needs_buffer(v));
  for (const ir::Value* v : graph.initializers()) OTTR_RETURN_IF_ERROR(needs_buffer(v));
  for (const ir::Value* v : roots) OTTR_RETURN_IF_ERROR(needs_buffer(v));
  for (const auto& [v, k] : last_read) OTTR_RETURN_IF_ERROR(needs_buffer(v));
  for (const ir::Value* v : graph.initializers()) {
    if (!plan.buffers[plan.buffer_of.at(v)].persistent) {
      return Fail(absl::StrCat("initializer '", v->name(), "' is not in a persistent buffer"));
    }
  }

  // 3. No two buffers live at a common position overlap.
  std::vector<int> order;
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (plan.buffers[b].bytes > 0) order.push_back(static_cast<int>(b));
  }
  std::sort(order.begin(), order.end(),
            [&](int x, int y) { return plan.buffers[x].offset < plan.buffers[y].offset; });
  for (size_t i = 0; i < order.size(); ++i) {
    const Buffer& a = plan.buffers[order[i]];
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Buffer& b = plan.buffers[order[j]];
      if (b.offset >= a.offset + plan.Aligned(a.bytes)) break;
      if (a.first <= b.last && b.first <= a.last) {
        return Fail(absl::StrCat("buffers ", order[i], " [", a.offset, ", +", a.bytes, ") live [",
                                 a.first, ", ", a.last, "] and ", order[j], " [", b.offset, ", +",
                                 b.bytes, ") live [", b.first, ", ", b.last, "] overlap"));
      }
    }
  }

  // 4. Sharing is a view or an allowed in-place pair.
  for (const auto& [v, alias] : plan.alias_of) {
    const ir::Node* producer = v->producer();
    if (producer == nullptr || !plan.buffer_of.contains(alias.source) ||
        plan.buffer_of.at(alias.source) != plan.buffer_of.at(v)) {
      return Fail(absl::StrCat("'", v->name(), "' shares the buffer of '", alias.source->name(),
                               "' but is not computed from it in that buffer"));
    }
    int out = -1, in = -1;
    for (int i = 0; i < producer->num_outputs(); ++i) {
      if (producer->output(i) == v) out = i;
    }
    for (int i = 0; i < producer->num_inputs(); ++i) {
      if (producer->input(i) == alias.source) in = i;
    }
    bool ok = false;
    if (alias.kind == Alias::Kind::kUpdate) {
      for (const ir::StateUpdate& u : graph.updates()) ok |= u.value == v && u.target == alias.source;
    } else if (alias.kind == Alias::Kind::kView) {
      ok = IsViewOp(*producer) && out == 0 && in == 0;
    } else if (plan.custom_in_place_rules) {
      ok = out >= 0 && in >= 0;
    } else {
      for (const InPlaceRule& r : DefaultInPlaceRules(*producer)) {
        ok |= r.output == out && producer->input(r.input) == alias.source;
      }
    }
    if (!ok) {
      return Fail(absl::StrCat("'", v->name(), "' (output of ", producer->Describe(),
                               ") may not share the buffer of its input '", alias.source->name(), "'"));
    }
  }

  // 5. Simulate the step.
  auto identity = [&](const ir::Value* v) {
    for (auto it = plan.alias_of.find(v);
         it != plan.alias_of.end() && it->second.kind == Alias::Kind::kView;
         it = plan.alias_of.find(v)) {
      v = it->second.source;
    }
    return v;
  };
  auto range = [&](const ir::Value* v) {
    const int64_t lo = plan.buffers[plan.buffer_of.at(v)].offset;
    return std::make_pair(lo, lo + bytes_of(v));
  };
  ArenaContents arena;
  auto describe = [&](const ArenaContents::Seg& s) -> std::string {
    if (s.tag == nullptr) return "bytes nothing wrote";
    std::string what;
    for (const ir::Node* node : graph.nodes()) {
      if (node == s.tag) what = absl::StrCat("the workspace of ", node->Describe());
    }
    if (what.empty()) what = absl::StrCat("'", static_cast<const ir::Value*>(s.tag)->name(), "'");
    return s.pos < 0 ? absl::StrCat(what, " (present at the start)")
                     : absl::StrCat(what, " written at position ", s.pos, " by ",
                                    plan.schedule[s.pos]->Describe());
  };
  auto check = [&](const ir::Value* v, const std::string& reader) -> absl::Status {
    const auto [lo, hi] = range(v);
    if (auto bad = arena.Mismatch(lo, hi, identity(v))) {
      return Fail(absl::StrCat(reader, " reads '", v->name(), "' at [", lo, ", ", hi,
                               ") but finds ", describe(*bad)));
    }
    return absl::OkStatus();
  };
  for (const ir::Value* v : graph.initializers()) {
    const auto [lo, hi] = range(v);
    arena.Write(lo, hi, v, -1);
  }
  for (const ir::Value* v : graph.inputs()) {
    const auto [lo, hi] = range(v);
    arena.Write(lo, hi, v, -1);
  }
  for (const Buffer& buf : plan.buffers) {  // constants uploaded once
    if (buf.persistent && !buf.values.empty() && buf.values[0]->producer() != nullptr) {
      const auto [lo, hi] = range(buf.values[0]);
      arena.Write(lo, hi, buf.values[0], -1);
    }
  }
  auto overlaps = [](std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
    return a.first < b.second && b.first < a.second;
  };
  for (int k = 0; k < n; ++k) {
    const ir::Node& node = *plan.schedule[k];
    const std::string where = absl::StrCat(node.Describe(), " at position ", k);
    std::vector<std::pair<const ir::Value*, std::pair<int64_t, int64_t>>> outs;
    for (const ir::Value* o : node.outputs()) {
      if (o != nullptr && plan.buffer_of.contains(o)) outs.push_back({o, range(o)});
    }
    // The workspace is scratch: it may overlap none of the node's operands.
    if (auto ws = plan.workspace_offset.find(&node); ws != plan.workspace_offset.end()) {
      int64_t bytes = 0;
      for (const Buffer& buf : plan.buffers) {
        if (buf.workspace_of == &node) bytes = buf.bytes;
      }
      const std::pair<int64_t, int64_t> wr{ws->second, ws->second + bytes};
      for (const ir::Value* v : reads[k]) {
        if (overlaps(wr, range(v))) return Fail(absl::StrCat(where, ": its workspace overlaps input '", v->name(), "'"));
      }
      for (const auto& [o, r] : outs) {
        if (overlaps(wr, r)) return Fail(absl::StrCat(where, ": its workspace overlaps output '", o->name(), "'"));
      }
      arena.Write(wr.first, wr.second, &node, k);
    }
    for (const ir::Value* v : reads[k]) OTTR_RETURN_IF_ERROR(check(v, where));
    // Outputs overlap no operand except the one they are declared to share.
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& [o, r] = outs[i];
      auto alias = plan.alias_of.find(o);
      for (const ir::Value* v : reads[k]) {
        if (overlaps(r, range(v)) && !(alias != plan.alias_of.end() && alias->second.source == v)) {
          return Fail(absl::StrCat(where, ": output '", o->name(), "' overlaps input '", v->name(),
                                   "' it is not allowed to share"));
        }
      }
      for (size_t j = i + 1; j < outs.size(); ++j) {
        if (overlaps(r, outs[j].second)) {
          return Fail(absl::StrCat(where, ": outputs '", o->name(), "' and '", outs[j].first->name(),
                                   "' overlap"));
        }
      }
    }
    for (const auto& [o, r] : outs) {
      auto alias = plan.alias_of.find(o);
      if (alias != plan.alias_of.end() && alias->second.kind == Alias::Kind::kView) continue;
      const Buffer& buf = plan.buffers[plan.buffer_of.at(o)];
      if (buf.persistent && buf.values[0] == o) continue;  // a constant: uploaded at the start
      arena.Write(r.first, r.second, o, k);
    }
  }
  // After the step: outputs and update values intact, unchanged state still in place.
  for (const ir::Value* v : graph.outputs()) OTTR_RETURN_IF_ERROR(check(v, "the end of the step"));
  absl::flat_hash_set<const ir::Value*> updated;
  for (const ir::StateUpdate& u : graph.updates()) {
    OTTR_RETURN_IF_ERROR(check(u.value, "the end of the step (state update)"));
    updated.insert(u.target);
  }
  for (const ir::Value* v : graph.initializers()) {
    if (!updated.contains(v)) OTTR_RETURN_IF_ERROR(check(v, "the next step (unchanged state)"));
  }
  for (const Buffer& buf : plan.buffers) {
    if (buf.persistent && !buf.values.empty() && buf.values[0]->producer() != nullptr) {
      OTTR_RETURN_IF_ERROR(check(buf.values[0], "the next step (constant)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ottr::passes
