// The memory planner's scheduler: a greedy list schedule that lowers the peak of live bytes.
//
// At each step every ready node is scored by the net bytes it would add:
//   net = bytes of the buffers its outputs create - bytes of the buffers it frees,
// where an output creates nothing when it is a view, a persistent constant or (predicted) written
// in place over an input buffer that dies at this node, and a buffer is freed when this node is
// its last remaining reader (views of a value count as the value: they share its buffer). The
// lowest net wins; ties go to the earlier node of the given order, so a graph whose order is
// already best is left alone.
//
// Extra ordering edges make in-place state updates possible: when the producer P of the update
// value of initializer T may write it over T, every other node reading T (or a view of T) is
// scheduled before P (unless one of them depends on P, in which case the update needs a copy
// anyway). With these edges an optimizer update runs as soon as its gradient exists and the
// gradient's buffer is freed at once.
#include <algorithm>
#include <limits>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "passes/memory_planner_internal.h"

namespace ottr::passes::memplan {
namespace {

// Union-find over values: views share their input's group.
class Groups {
 public:
  const ir::Value* Find(const ir::Value* v) {
    auto it = parent_.find(v);
    if (it == parent_.end() || it->second == v) return v;
    const ir::Value* r = Find(it->second);
    parent_[v] = r;
    return r;
  }
  void Union(const ir::Value* view, const ir::Value* source) { parent_[Find(view)] = Find(source); }

 private:
  absl::flat_hash_map<const ir::Value*, const ir::Value*> parent_;
};

}  // namespace

std::vector<int> GreedySchedule(const Problem& p, const std::vector<int>& given,
                                const PlanOptions& options, bool reverse, bool lazy, bool critical_path) {
  const int n = static_cast<int>(p.nodes.size());
  const ir::Graph& g = *p.graph;
  std::vector<int> given_pos(n);
  for (int k = 0; k < static_cast<int>(given.size()); ++k) given_pos[given[k]] = k;

  // Static groups and their properties.
  Groups groups;
  for (const ir::Node* node : p.nodes) {
    const ir::Value* out = node->output(0);
    if (IsViewOp(*node) && out != nullptr && node->input(0) != nullptr && p.used.contains(out) &&
        p.bytes.at(out) == p.bytes.at(node->input(0))) {
      groups.Union(out, node->input(0));
    }
  }
  absl::flat_hash_map<const ir::Value*, int> remaining;  // read slots left, per group
  absl::flat_hash_set<const ir::Value*> pinned;  // persistent or root groups: never freed
  for (const ir::Value* v : g.initializers()) pinned.insert(groups.Find(v));
  for (const ir::Value* v : p.roots) pinned.insert(groups.Find(v));
  absl::flat_hash_set<const ir::Value*> constant_outputs;
  for (const ir::Node* node : p.nodes) {
    if (options.constants_persistent && node->domain().empty() && node->op_type() == "Constant") {
      for (const ir::Value* v : node->outputs()) {
        if (v != nullptr) {
          constant_outputs.insert(v);
          pinned.insert(groups.Find(v));
        }
      }
    }
  }
  absl::flat_hash_map<const ir::Value*, std::vector<int>> readers;  // group -> reading nodes
  for (int i = 0; i < n; ++i) {
    for (const ir::Value* v : p.reads[i]) {
      const ir::Value* gr = groups.Find(v);
      ++remaining[gr];
      std::vector<int>& r = readers[gr];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  }
  auto size = [&](const ir::Value* v) { return AlignUp(p.bytes.at(v), options.alignment); };

  // Dependencies, plus the in-place update edges.
  std::vector<absl::flat_hash_set<int>> preds(n), succs(n);
  for (int i = 0; i < n; ++i) {
    for (int j : p.preds[i]) {
      preds[i].insert(j);
      succs[j].insert(i);
    }
  }
  absl::flat_hash_set<const ir::Value*> update_in_place;  // targets whose update can be in place
  if (options.in_place_updates) {
    for (const ir::StateUpdate& u : g.updates()) {
      const ir::Node* producer = u.value->producer();
      if (producer == nullptr || !p.index.contains(producer)) continue;
      const int pi = p.index.at(producer);
      bool rule = false;
      for (const InPlaceRule& r : RulesFor(*producer, options)) {
        rule |= producer->output(r.output) == u.value && producer->input(r.input) == u.target;
      }
      const ir::Value* gt = groups.Find(u.target);
      bool root = false;
      for (const ir::Value* v : p.roots) root |= v != u.value && groups.Find(v) == gt;
      if (!rule || root) continue;
      // Nodes reachable from the producer cannot go before it.
      std::vector<bool> after(n, false);
      std::vector<int> stack = {pi};
      while (!stack.empty()) {
        const int x = stack.back();
        stack.pop_back();
        for (int y : succs[x]) {
          if (!after[y]) {
            after[y] = true;
            stack.push_back(y);
          }
        }
      }
      bool possible = true;
      for (int r : readers[gt]) possible &= r == pi || !after[r];
      if (!possible) continue;
      update_in_place.insert(u.target);
      for (int r : readers[gt]) {
        if (r != pi && preds[pi].insert(r).second) succs[r].insert(pi);
      }
    }
  }

  std::vector<std::vector<InPlaceRule>> rules(n);
  for (int i = 0; i < n; ++i) rules[i] = RulesFor(*p.nodes[i], options);
  // Whether output o of node i is a view, or a constant's (whole-step) output.
  auto is_view = [&](const ir::Node& node, int o) {
    return o == 0 && IsViewOp(node) && node.input(0) != nullptr &&
           p.bytes.at(node.input(0)) == p.bytes.at(node.output(0));
  };
  auto counts = [&](const ir::Node& node, int o) {
    const ir::Value* out = node.output(o);
    return out != nullptr && p.used.contains(out) && !constant_outputs.contains(out) &&
           !is_view(node, o);
  };

  std::vector<int> order;
  order.reserve(n);
  if (critical_path) {
    // The longest chain of nodes from each node to the end (itself included), in nodes.
    std::vector<int> height(n, 0), outdegree(n), stack;
    for (int i = 0; i < n; ++i) {
      outdegree[i] = static_cast<int>(succs[i].size());
      if (outdegree[i] == 0) stack.push_back(i);
    }
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      int h = 0;
      for (int s : succs[i]) h = std::max(h, height[s]);
      height[i] = h + 1;
      for (int q : preds[i]) {
        if (--outdegree[q] == 0) stack.push_back(q);
      }
    }
    // List scheduling on two unit-time slots (the executor's two streams): at each tick the ready
    // nodes with the longest chains after them start, the first slot for the longest; a node is
    // ready the tick after its last predecessor started. Work off the chain (a transpose of a
    // forward activation, a weight gradient) fills the second slot as early as it can.
    constexpr int kSlots = 2;
    std::vector<int> indegree(n), ready, next;
    for (int i = 0; i < n; ++i) {
      indegree[i] = static_cast<int>(preds[i].size());
      if (indegree[i] == 0) ready.push_back(i);
    }
    while (!ready.empty()) {
      std::sort(ready.begin(), ready.end(), [&](int a, int b) {
        return height[a] != height[b] ? height[a] > height[b] : given_pos[a] < given_pos[b];
      });
      const int take = std::min<int>(kSlots, static_cast<int>(ready.size()));
      next.assign(ready.begin() + take, ready.end());
      for (int k = 0; k < take; ++k) {
        const int i = ready[k];
        order.push_back(i);
        for (int s : succs[i]) {
          if (--indegree[s] == 0) next.push_back(s);
        }
      }
      ready.swap(next);
    }
  } else if (!reverse) {
    std::vector<int> indegree(n);
    std::vector<int> ready;
    for (int i = 0; i < n; ++i) {
      indegree[i] = static_cast<int>(preds[i].size());
      if (indegree[i] == 0) ready.push_back(i);
    }
    // Net bytes node i would add now.
    auto net = [&](int i) {
      const ir::Node& node = *p.nodes[i];
      absl::flat_hash_map<const ir::Value*, int> reads_here;
      for (const ir::Value* v : p.reads[i]) ++reads_here[groups.Find(v)];
      absl::flat_hash_set<const ir::Value*> dying, taken;
      for (const auto& [gr, c] : reads_here) {
        if (!pinned.contains(gr) && remaining.at(gr) == c) dying.insert(gr);
      }
      int64_t alloc = 0;
      for (int o = 0; o < node.num_outputs(); ++o) {
        if (!counts(node, o)) continue;
        const ir::Value* out = node.output(o);
        bool in_place = false;
        for (const InPlaceRule& r : rules[i]) {
          const ir::Value* x = r.output == o ? node.input(r.input) : nullptr;
          if (x == nullptr || p.bytes.at(x) != p.bytes.at(out)) continue;
          const ir::Value* gx = groups.Find(x);
          if (taken.contains(gx) || reads_here.at(gx) != 1) continue;
          auto t = p.update_target.find(out);
          const bool update = t != p.update_target.end() && t->second == x &&
                              update_in_place.contains(x) && remaining.at(gx) == 1;
          if ((options.in_place && dying.contains(gx)) || update) {
            taken.insert(gx);
            in_place = true;
            break;
          }
        }
        if (!in_place) alloc += size(out);
      }
      int64_t freed = 0;
      for (const ir::Value* gr : dying) {
        if (!taken.contains(gr)) freed += size(gr);
      }
      return alloc - freed;
    };
    // With `lazy`, a node that adds bytes waits while another one that adds bytes makes a
    // consumer ready (keeps values from being computed long before they are needed).
    auto enables = [&](int i) {
      for (int s : succs[i]) {
        if (indegree[s] == 1) return true;
      }
      return false;
    };
    while (!ready.empty()) {
      size_t best = 0;
      std::tuple<int, int64_t, int> best_key{2, 0, 0};
      for (size_t r = 0; r < ready.size(); ++r) {
        const int i = ready[r];
        const int64_t c = net(i);
        const int tier = c <= 0 ? 0 : (lazy && !enables(i) ? 2 : 1);
        const std::tuple<int, int64_t, int> key{tier, c, given_pos[i]};
        if (r == 0 || key < best_key) {
          best = r;
          best_key = key;
        }
      }
      const int i = ready[best];
      ready.erase(ready.begin() + best);
      order.push_back(i);
      for (const ir::Value* v : p.reads[i]) --remaining[groups.Find(v)];
      for (int s : succs[i]) {
        if (--indegree[s] == 0) ready.push_back(s);
      }
    }
  } else {
    // Backwards from the end: a node's outputs stop being live (their buffers start at it) and
    // its inputs not read by any later node start being live. Roots are live at the end.
    std::vector<int> outdegree(n);
    std::vector<int> ready;
    for (int i = 0; i < n; ++i) {
      outdegree[i] = static_cast<int>(succs[i].size());
      if (outdegree[i] == 0) ready.push_back(i);
    }
    absl::flat_hash_set<const ir::Value*> live;  // groups some already-placed node reads
    auto net = [&](int i) {
      const ir::Node& node = *p.nodes[i];
      absl::flat_hash_set<const ir::Value*> born, freed_groups, reused;
      for (const ir::Value* v : p.reads[i]) {
        const ir::Value* gr = groups.Find(v);
        if (!pinned.contains(gr) && !live.contains(gr)) born.insert(gr);
      }
      int64_t freed = 0;
      for (int o = 0; o < node.num_outputs(); ++o) {
        if (!counts(node, o)) continue;
        const ir::Value* out = node.output(o);
        const ir::Value* go = groups.Find(out);
        bool in_place = false;
        for (const InPlaceRule& r : rules[i]) {
          const ir::Value* x = r.output == o ? node.input(r.input) : nullptr;
          if (x == nullptr || p.bytes.at(x) != p.bytes.at(out)) continue;
          const ir::Value* gx = groups.Find(x);
          if (options.in_place && born.contains(gx) && !reused.contains(gx)) {
            reused.insert(gx);  // x dies here: the output takes its buffer
            in_place = true;
            break;
          }
        }
        if (!in_place && live.contains(go) && !pinned.contains(go)) {
          freed += size(out);
        }
      }
      int64_t alloc = 0;
      for (const ir::Value* gr : born) {
        if (!reused.contains(gr)) alloc += size(gr);
      }
      return alloc - freed;
    };
    while (!ready.empty()) {
      size_t best = 0;
      int64_t best_net = std::numeric_limits<int64_t>::max();
      for (size_t r = 0; r < ready.size(); ++r) {
        const int64_t c = net(ready[r]);
        if (c < best_net || (c == best_net && given_pos[ready[r]] > given_pos[ready[best]])) {
          best = r;
          best_net = c;
        }
      }
      const int i = ready[best];
      ready.erase(ready.begin() + best);
      order.push_back(i);
      for (const ir::Value* v : p.reads[i]) live.insert(groups.Find(v));
      for (int s : preds[i]) {
        if (--outdegree[s] == 0) ready.push_back(s);
      }
    }
    std::reverse(order.begin(), order.end());
  }
  // A cycle would leave nodes out (TopoOrder already rejected cyclic graphs): keep the given order.
  if (static_cast<int>(order.size()) != n) return given;
  return order;
}

}  // namespace ottr::passes::memplan
