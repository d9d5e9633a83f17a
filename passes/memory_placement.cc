// Offsets for the memory planner's buffers: best fit in several orders, keeping the lowest peak.
//
// Best fit places one buffer at a time: among the buffers already placed that are live at some
// common position, the gaps between them (sorted by offset) that the new buffer fits into are
// candidates, and the smallest such gap wins (lowest offset on ties); with no fitting gap the
// buffer goes above the highest of them. A buffer live at no common position with any placed
// one goes to offset 0. Persistent buffers come first in every order: they are live everywhere,
// so they simply stack at the bottom.
#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "passes/memory_planner_internal.h"

namespace ottr::passes::memplan {
namespace {

struct Item {
  int64_t size;  // aligned
  int first, last;
  bool persistent;
};

// Places items in `order`; returns the peak (offsets written to `offsets`).
int64_t BestFit(const std::vector<Item>& items, const std::vector<int>& order,
                std::vector<int64_t>& offsets) {
  offsets.assign(items.size(), 0);
  std::vector<int> placed;
  placed.reserve(items.size());
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of conflicting placed items
  int64_t peak = 0;
  for (int i : order) {
    const Item& it = items[i];
    if (it.size == 0) continue;  // empty tensors: offset 0, they overlap nothing
    busy.clear();
    for (int j : placed) {
      const Item& o = items[j];
      if (o.first <= it.last && it.first <= o.last) busy.emplace_back(offsets[j], offsets[j] + o.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t best_offset = -1, best_gap = 0, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor) {
        const int64_t gap = lo - cursor;
        if (gap >= it.size && (best_offset < 0 || gap < best_gap)) {
          best_offset = cursor;
          best_gap = gap;
        }
      }
      cursor = std::max(cursor, hi);
    }
    if (best_offset < 0) best_offset = cursor;
    offsets[i] = best_offset;
    peak = std::max(peak, best_offset + it.size);
    placed.push_back(i);
  }
  return peak;
}

// Moves buffers down while the peak drops: each buffer ending at the peak goes to the lowest
// offset where it overlaps no buffer live at a common position, if that is lower. Returns the new
// peak.
int64_t Compact(const std::vector<Item>& items, int64_t peak, std::vector<int64_t>& offsets) {
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (int round = 0; round < 64; ++round) {
    bool moved = false;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      if (it.size == 0 || offsets[i] + it.size != peak) continue;
      busy.clear();
      for (size_t j = 0; j < items.size(); ++j) {
        const Item& o = items[j];
        if (j != i && o.size > 0 && o.first <= it.last && it.first <= o.last) {
          busy.emplace_back(offsets[j], offsets[j] + o.size);
        }
      }
      std::sort(busy.begin(), busy.end());
      int64_t cursor = 0;
      for (const auto& [lo, hi] : busy) {
        if (lo - cursor >= it.size) break;
        cursor = std::max(cursor, hi);
      }
      if (cursor < offsets[i]) {
        offsets[i] = cursor;
        moved = true;
      }
    }
    int64_t new_peak = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].size > 0) new_peak = std::max(new_peak, offsets[i] + items[i].size);
    }
    peak = new_peak;
    if (!moved) break;
  }
  return peak;
}

}  // namespace

Placement PlaceBuffers(const std::vector<Buffer>& buffers, int64_t alignment) {
  std::vector<Item> items;
  items.reserve(buffers.size());
  for (const Buffer& b : buffers) {
    items.push_back({AlignUp(b.bytes, alignment), b.first, b.last, b.persistent});
  }
  auto length = [&](int i) { return static_cast<int64_t>(items[i].last - items[i].first + 1); };
  // Orders as (name, "a goes before b"). Persistent buffers first; ties by index (deterministic).
  using Less = std::function<bool(int, int)>;
  std::vector<std::pair<std::string, Less>> orders = {
      {"size", [&](int a, int b) {
         return std::make_tuple(!items[a].persistent, -items[a].size, -length(a), items[a].first, a) <
                std::make_tuple(!items[b].persistent, -items[b].size, -length(b), items[b].first, b);
       }},
      {"lifetime", [&](int a, int b) {
         return std::make_tuple(!items[a].persistent, -length(a), -items[a].size, a) <
                std::make_tuple(!items[b].persistent, -length(b), -items[b].size, b);
       }},
      {"first use", [&](int a, int b) {
         return std::make_tuple(!items[a].persistent, items[a].first, -items[a].size, a) <
                std::make_tuple(!items[b].persistent, items[b].first, -items[b].size, b);
       }},
      {"size x lifetime", [&](int a, int b) {
         return std::make_tuple(!items[a].persistent, -items[a].size * length(a), a) <
                std::make_tuple(!items[b].persistent, -items[b].size * length(b), b);
       }},
  };
  int steps = 1;
  for (const Item& it : items) steps = std::max(steps, it.last + 1);
  // Long-lived buffers (a fraction f of the step or more) first, by size; then the rest by size.
  auto long_first = [&](double f) {
    return [&, f](int a, int b) {
      const bool la = length(a) >= f * steps, lb = length(b) >= f * steps;
      return std::make_tuple(!items[a].persistent, !la, -items[a].size, -length(a), a) <
             std::make_tuple(!items[b].persistent, !lb, -items[b].size, -length(b), b);
    };
  };
  orders.push_back({"long-lived (all of the step) first, then size", long_first(1.0)});
  orders.push_back({"long-lived (half of the step) first, then size", long_first(0.5)});
  orders.push_back({"long-lived (a quarter of the step) first, then size", long_first(0.25)});
  Placement best;
  std::vector<int> order(items.size()), best_order;
  std::vector<int64_t> offsets;
  for (const auto& [name, less] : orders) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), less);
    const int64_t peak = Compact(items, BestFit(items, order, offsets), offsets);
    if (best.order.empty() || peak < best.peak) {
      best.peak = peak;
      best.offsets = offsets;
      best.order = name;
      best_order = order;
    }
  }
  if (best.order.empty()) best.order = "size";
  const std::string best_name = best.order;
  // Local search while the peak is above the lower bound: move one to three random buffers
  // earlier in the best order found so far and keep the result when the peak does not rise
  // (equal peaks are accepted so the search can drift across plateaus). Deterministic (fixed
  // seed) and bounded to about 3e8 interval tests, so that large graphs stay fast.
  const int64_t lower = LowerBound(buffers, alignment);
  const int64_t nn = std::max<int64_t>(static_cast<int64_t>(items.size()), 2);
  const int trials = static_cast<int>(std::min<int64_t>(4000, 300000000 / (nn * nn)));
  int persistent = 0;
  for (const Item& it : items) persistent += it.persistent;
  const int movable = static_cast<int>(items.size()) - persistent;
  if (movable >= 2) {
    std::mt19937_64 rng(12345);
    std::vector<int> current = best_order, trial;
    int64_t current_peak = best.peak;
    for (int t = 0; t < trials && best.peak > lower; ++t) {
      trial = current;
      const int moves = 1 + static_cast<int>(rng() % 3);
      // Persistent buffers stay first (every order puts them there).
      std::stable_partition(trial.begin(), trial.end(), [&](int i) { return items[i].persistent; });
      for (int m = 0; m < moves; ++m) {
        const int from = persistent + 1 + static_cast<int>(rng() % (movable - 1));
        const int to = persistent + static_cast<int>(rng() % (from - persistent));
        const int x = trial[from];
        trial.erase(trial.begin() + from);
        trial.insert(trial.begin() + to, x);
      }
      const int64_t peak = Compact(items, BestFit(items, trial, offsets), offsets);
      if (peak <= current_peak) {
        current = trial;
        current_peak = peak;
      }
      if (peak < best.peak) {
        best.peak = peak;
        best.offsets = offsets;
        best.order = absl::StrCat(best_name, ", improved by local search (trial ", t + 1, ")");
      }
    }
  }
  return best;
}

}  // namespace ottr::passes::memplan
