// Internals of the memory planner shared by its files (memory_planner.cc: liveness and sharing,
// memory_schedule.cc: the scheduler, memory_placement.cc: offsets, memory_plan_verifier.cc).
// Not part of the API.
#ifndef OTTR_PASSES_MEMORY_PLANNER_INTERNAL_H_
#define OTTR_PASSES_MEMORY_PLANNER_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/memory_planner.h"

namespace ottr::passes::memplan {

// Schedule-independent facts about the graph.
struct Problem {
  const ir::Graph* graph = nullptr;
  std::vector<ir::Node*> nodes;  // Graph::nodes() (insertion order)
  absl::flat_hash_map<const ir::Node*, int> index;  // node -> index in `nodes`
  // Values each node reads: its inputs, then the outer values its subgraphs capture.
  std::vector<std::vector<const ir::Value*>> reads;
  // Data dependencies between node indices (producer -> reader), deduplicated.
  std::vector<std::vector<int>> preds, succs;
  absl::flat_hash_set<const ir::Value*> roots;  // graph outputs and update values
  absl::flat_hash_map<const ir::Value*, const ir::Value*> update_target;  // value -> target
  absl::flat_hash_set<const ir::Value*> used;  // node outputs some node reads, or roots
  absl::flat_hash_map<const ir::Value*, int64_t> bytes;  // every value that may get a buffer
  std::vector<int64_t> workspace;  // PlanOptions::workspace_bytes per node (asked once)
};

// Values `n` reads: inputs (non-null) and the values of `g` its subgraphs capture by name.
std::vector<const ir::Value*> NodeReads(const ir::Node& n, const ir::Graph& g);

absl::StatusOr<Problem> BuildProblem(const ir::Graph& g, const PlanOptions& options);

// The rules in effect for a node.
std::vector<InPlaceRule> RulesFor(const ir::Node& n, const PlanOptions& options);

// Buffers and sharing for one schedule (node indices into Problem::nodes), offsets not yet set.
struct Assignment {
  std::vector<Buffer> buffers;
  absl::flat_hash_map<const ir::Value*, int> buffer_of;
  absl::flat_hash_map<const ir::Value*, Alias> alias_of;
  std::vector<UpdateCopy> update_copies;
  std::vector<std::string> notes;
};
Assignment AssignBuffers(const Problem& p, const std::vector<int>& order, const PlanOptions& options);

// Offsets for `buffers` (sizes rounded up to `alignment`); returns the peak and the winning
// order's name.
struct Placement {
  std::vector<int64_t> offsets;
  int64_t peak = 0;
  std::string order;
};
Placement PlaceBuffers(const std::vector<Buffer>& buffers, int64_t alignment);

// Max over positions of the aligned bytes live there.
int64_t LowerBound(const std::vector<Buffer>& buffers, int64_t alignment);
// Every value with its own aligned buffer (views excepted) plus every workspace.
int64_t NaiveBytes(const Problem& p, const std::vector<Buffer>& buffers, int64_t alignment);

// A memory-aware schedule (node indices), built forwards from the first node or backwards from
// the last; `given` breaks ties. With `critical_path` memory is ignored: the order is a list
// schedule on two unit-time slots, the ready nodes with the longest chain of nodes after them
// first (`given` breaks ties), what an executor with two streams wants: the longest chain runs
// without waiting for work off it, which overlaps it from the start.
std::vector<int> GreedySchedule(const Problem& p, const std::vector<int>& given,
                                const PlanOptions& options, bool reverse, bool lazy,
                                bool critical_path = false);

inline int64_t AlignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace ottr::passes::memplan

#endif  // OTTR_PASSES_MEMORY_PLANNER_INTERNAL_H_
