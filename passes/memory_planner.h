// The memory planner: before the first step runs, every buffer of a (training-step) graph gets an
// offset in one arena, so an executor allocates once and a captured CUDA Graph sees fixed
// addresses.
//
// What gets a buffer (positions are indices into the schedule, a topological order of the nodes;
// a buffer is live over [first, last], both inclusive):
//   - initializers (parameters, optimizer state, `ottr.step`) and, by default, the outputs of
//     Constant nodes (an executor uploads them once): persistent, live the whole step;
//   - graph inputs: fed before the first node, live [0, last read];
//   - node outputs that something reads: live from their node to their last reader; graph outputs
//     and state-update values to the end of the step;
//   - per-node workspaces (PlanOptions::workspace_bytes): live at their node only.
// Outputs nothing reads get no buffer (an executor passes null or allocates them elsewhere).
//
// Sharing (one buffer, several values; Buffer::values lists them in the order they are written):
//   - views: output 0 of Reshape, Flatten, Squeeze, Unsqueeze and Identity is input 0's bytes
//     reinterpreted, so it joins input 0's buffer (no copy; the buffer lives until the view's
//     last reader).
//   - in-place reuse: an output takes over an input's buffer when the op may write that output
//     over that input (DefaultInPlaceRules below), both have the same size, the input's buffer
//     is read by no one after this node (views included), this node reads it through exactly one
//     input slot, and it is not persistent, a graph output or a state-update value.
//   - state updates in place: the update value of initializer T goes into T's own buffer when
//     its producer may write it over T (AdamUpdate: param, m, v; SGDUpdate: param, momentum
//     buffer; Add for ottr.step; BatchNormalization's running statistics) and that producer is
//     the last reader of T's old value. Otherwise the value gets its own buffer and the executor
//     copies it into T after the step (MemoryPlan::update_copies, with the reason in notes).
//
// Scheduling: besides the graph's own order (Graph::TopoOrder), a greedy list scheduler picks at
// each step the ready node that allocates the least net memory (bytes of new buffers minus bytes
// of buffers it frees), which e.g. runs each parameter's optimizer update as soon as its gradient
// exists; the schedule with the lower planned peak wins. Nothing is recomputed.
//
// Placement: each buffer is placed at the lowest-waste offset that does not overlap any placed
// buffer live at the same time (best fit), trying several orders (decreasing size, decreasing
// lifetime, increasing first use, decreasing size x lifetime) and keeping the lowest peak.
//
// Numbers reported (all in bytes, sizes rounded up to the alignment):
//   peak        = the arena size, max over buffers of offset + size;
//   lower bound = max over schedule positions of the bytes live there (no placement can do
//                 better for that schedule and that sharing);
//   naive       = every value in its own buffer with no reuse (views excepted: they never copy),
//                 plus every workspace: what an executor without a planner allocates.
#ifndef OTTR_PASSES_MEMORY_PLANNER_H_
#define OTTR_PASSES_MEMORY_PLANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace ottr::passes {

// Output `output` of a node may be written over input `input`'s buffer: the kernel reads every
// element of that input it needs before (or as) it writes the output element at the same index,
// and it does not rely on the output being zero-filled.
struct InPlaceRule {
  int output;
  int input;
  bool operator==(const InPlaceRule&) const = default;
};

struct PlanOptions {
  int64_t alignment = 256;  // every offset and size is a multiple (cudaMalloc aligns to 256)
  // Scratch bytes node needs while it runs (cuBLASLt / cuDNN workspaces); null = none.
  std::function<int64_t(const ir::Node&)> workspace_bytes;
  bool in_place = true;          // in-place reuse of dying activations
  bool in_place_updates = true;  // state updates written into their initializer's buffer
  bool reorder = true;           // try the memory-aware schedule besides the graph's order
  // With reorder: also try the critical-path order (GreedySchedule's critical_path: the longest
  // remaining chain first, for executors that overlap independent nodes on several streams), and
  // take it when its peak is at most (1 + critical_path_slack) times the lowest peak found. < 0:
  // never. The CUDA executor with several streams sets it.
  double critical_path_slack = -1;
  // In the critical-path schedule, a buffer's bytes go to another value only this many schedule
  // positions after its last reader (0: at once; the memory-lowest schedules always reuse at
  // once). An executor that runs independent nodes on several streams sets it: bytes freed by a
  // node on one stream and reused by the next node on another make that node wait for the first
  // (a dependency the schedule did not have).
  int reuse_delay = 0;
  bool constants_persistent = true;  // Constant outputs live the whole step (uploaded once)
  // Which (output, input) pairs of a node may share a buffer; null = DefaultInPlaceRules. An
  // executor whose kernels cannot write some op in place passes a narrower list.
  std::function<std::vector<InPlaceRule>(const ir::Node&)> in_place_rules;
};

struct Buffer {
  int64_t offset = 0;
  int64_t bytes = 0;  // the largest value's size, not rounded (Aligned() rounds)
  int first = 0;      // schedule positions, inclusive
  int last = 0;
  bool persistent = false;  // initializers and (by default) constants: the whole step, every step
  // Values sharing the buffer, in the order they are written: values[0] creates it; views and
  // in-place outputs follow. Empty for a workspace.
  std::vector<const ir::Value*> values;
  const ir::Node* workspace_of = nullptr;  // set for a node's workspace
};

// How a value that does not own its buffer came to share it.
struct Alias {
  // kView: a view of input 0; kInPlace: written over a dying input (an in-place rule); kUpdate: a
  // state update's value written straight into its target's buffer, the target read by no node at
  // or after the producer (e.g. the optimizer's 16-bit parameter copies, which only the next
  // step's forward reads).
  enum class Kind { kView, kInPlace, kUpdate };
  Kind kind;
  const ir::Value* source;  // the producer's input whose buffer the value took (kUpdate: the target)
};

// A state update whose value is not in its target's buffer: after the step (or at commit), the
// executor copies `value` into `target`.
struct UpdateCopy {
  const ir::Value* target;
  const ir::Value* value;
};

// Peak, lower bound and naive bytes of one schedule (see the file comment).
struct PlanStats {
  int64_t peak_bytes = 0;
  int64_t lower_bound_bytes = 0;
  int64_t naive_bytes = 0;
};

struct MemoryPlan {
  int64_t alignment = 256;
  std::vector<ir::Node*> schedule;        // the order to run the nodes in (the chosen one)
  std::vector<ir::Node*> given_schedule;  // Graph::TopoOrder()
  std::vector<Buffer> buffers;
  absl::flat_hash_map<const ir::Value*, int> buffer_of;   // every value that has a buffer
  absl::flat_hash_map<const ir::Value*, Alias> alias_of;  // values that share their source's
  absl::flat_hash_map<const ir::Node*, int64_t> workspace_offset;
  std::vector<UpdateCopy> update_copies;
  // For the chosen schedule, and the same for the given one (placed with the same options).
  int64_t peak_bytes = 0;
  int64_t lower_bound_bytes = 0;
  int64_t naive_bytes = 0;
  PlanStats given;
  std::string schedule_name;    // which schedule won ("given", "greedy forward", ...)
  std::vector<std::string> schedules_tried;  // each candidate schedule with its numbers
  std::string placement_order;  // which placement order won ("size", "lifetime", ...)
  bool custom_in_place_rules = false;  // PlanOptions::in_place_rules was set
  std::vector<std::string> notes;  // e.g. why a state update needs a copy

  // Bytes rounded up to the alignment.
  int64_t Aligned(int64_t bytes) const { return (bytes + alignment - 1) / alignment * alignment; }
  // Offset of a value's bytes in the arena; -1 when it has no buffer.
  int64_t OffsetOf(const ir::Value* v) const {
    auto it = buffer_of.find(v);
    return it == buffer_of.end() ? -1 : buffers[it->second].offset;
  }
};

// Plans the top-level graph (subgraphs of Loop/If run unplanned; the values they capture stay
// live until their node). Every value that gets a buffer needs a static type:
// FailedPrecondition names the first that has none.
absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& graph, const PlanOptions& options = {});

// Checks a plan against its graph: the schedule is a topological order of all nodes; offsets
// are aligned and inside the arena; each buffer's interval covers its values' lives; no two
// buffers live at the same time overlap; shared buffers are views or allowed in-place pairs; and,
// simulating the step byte range by byte range, every read (node inputs, captured values, graph
// outputs and update values at the end, unchanged state for the next step) sees the last write
// meant for it. FailedPrecondition naming the buffer, value and node on the first violation.
absl::Status VerifyPlan(const ir::Graph& graph, const MemoryPlan& plan);

// The report: the chosen schedule (with each node's position in the given order), the buffer
// table (buffer, bytes, first/last use, offset, values), copies and notes, the given order's
// numbers and last the line "memory plan: peak P bytes, lower bound L bytes, naive N bytes".
std::string FormatPlan(const MemoryPlan& plan);

// The built-in in-place list (the CPU kernels of these ops are safe in place; see the .cc for
// the list and the reasons). Views are not listed here: see IsViewOp.
std::vector<InPlaceRule> DefaultInPlaceRules(const ir::Node& node);
// Reshape, Flatten, Squeeze, Unsqueeze, Identity (ai.onnx): output 0 = input 0's bytes.
bool IsViewOp(const ir::Node& node);

}  // namespace ottr::passes

#endif  // OTTR_PASSES_MEMORY_PLANNER_H_
