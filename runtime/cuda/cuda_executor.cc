#include "runtime/cuda/cuda_executor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include <nvtx3/nvToolsExt.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/fused_gemm.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/memory_planner.h"
#include "passes/standard_passes.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"

namespace ottr::cuda {
namespace {

constexpr int64_t kAlign = 256;
// The largest workspace a side stream gets a copy of (AssignStreams); launches needing more stay
// on the main stream and use their planned workspace.
constexpr int64_t kMaxSideWorkspace = int64_t{64} << 20;
// The memory the critical-path schedule may cost over the lowest peak, and the schedule positions
// a freed buffer waits before reuse, with several streams (PlanOptions).
// The reuse delay is 6 positions (was 3): a launch writing bytes freed shortly before waits for
// their last reader (the stream log of the small MLP at batch 8192 showed fc1's weight gradient
// waiting so for its data gradient, whose transposed weight had held its output's bytes). H200,
// same call, OTTR_REUSE_DELAY=3 / 6: MLP b8192 214.9, 214.1 / 205.3, 204.8 µs (peak +1.6 MB);
// b128 49.6, 49.5 / 48.8, 48.7; CNN b128 and MLP 4096x4 within noise, CNN b1024 1295.3 / 1296.5.
constexpr double kCriticalPathSlack = 0.25;
constexpr int kReuseDelay = 6;
// Integer inputs up to this many elements may become compile-time constants when a shape
// depends on their values.
constexpr int64_t kMaxShapeConstantElements = 64;

// The planner's in-place pairs that the CUDA kernels honour: elementwise ops read and write the
// same index from the same thread (vector loads included), and the optimizer kernels read each
// element before writing it. Variadic Sum/Mean/Max/Min and BatchNormalization's running
// statistics are left out (their kernels make no such promise).
std::vector<passes::InPlaceRule> CudaInPlaceRules(const ir::Node& n) {
  if (n.domain().empty() && (n.op_type() == "Sum" || n.op_type() == "Mean" || n.op_type() == "Max" ||
                             n.op_type() == "Min" || n.op_type() == "BatchNormalization")) {
    return {};
  }
  return passes::DefaultInPlaceRules(n);
}
int64_t AlignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int64_t Bytes(const ir::TensorType& t) {
  return ir::NumElements(ir::StaticDims(*t.shape)) * static_cast<int64_t>(ir::DTypeSize(t.dtype));
}

bool IsConstantNode(const ir::Node& n) { return n.domain().empty() && n.op_type() == "Constant"; }

// Values whose content is known at compile time: Constant outputs and non-float initializers
// that no state update rewrites.
const ir::Tensor* CompileTimeConstant(const ir::Value* v) {
  if (v == nullptr) return nullptr;
  if (v->is_initializer()) {
    for (const ir::StateUpdate& u : v->graph()->updates()) {
      if (u.target == v) return nullptr;
    }
    return ir::IsFloat(v->type().dtype) ? nullptr : v->initializer();
  }
  if (v->producer() && IsConstantNode(*v->producer())) return &v->producer()->attr("value")->t();
  return nullptr;
}

struct NodeLaunch {
  const ir::Node* node;
  CompiledOp op;
  std::vector<void*> inputs;
  std::vector<void*> outputs;
  void* workspace = nullptr;
  void* counters = nullptr;  // CompiledOp::counter_bytes of its own, zeroed once
  void* state = nullptr;     // CompiledOp::state_bytes of its own, written by CompiledOp::init
  bool skip = false;  // a view placed on its input's buffer
  // Multi-stream issue (CudaExecutorOptions::streams): the stream, the launches (indices) whose
  // events it waits for first, and whether a later launch on another stream waits for it.
  int stream = 0;
  std::vector<int> waits;
  bool record = false;
  uint64_t ready = 0;  // LaunchArgs::ready_inputs
};

// Byte ranges [lo, hi) of the arena a launch reads and writes.
struct Footprint {
  std::vector<std::pair<uintptr_t, uintptr_t>> reads, writes;
};

bool Overlap(const std::vector<std::pair<uintptr_t, uintptr_t>>& a, const std::vector<std::pair<uintptr_t, uintptr_t>>& b) {
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (x.first < y.second && y.first < x.second) return true;
    }
  }
  return false;
}

// Footprints of the launches; `with_workspace`: the workspace is a write.
std::vector<Footprint> Footprints(const std::vector<NodeLaunch>& launches, bool with_workspace) {
  std::vector<Footprint> fp(launches.size());
  auto range = [](const void* p, const ir::Value* v) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
    return std::make_pair(lo, lo + static_cast<uintptr_t>(Bytes(v->type())));
  };
  for (size_t i = 0; i < launches.size(); ++i) {
    const NodeLaunch& l = launches[i];
    if (l.skip) continue;
    for (int k = 0; k < l.node->num_inputs(); ++k) {
      if (l.node->input(k) != nullptr && l.inputs[k] != nullptr) fp[i].reads.push_back(range(l.inputs[k], l.node->input(k)));
    }
    for (int k = 0; k < l.node->num_outputs(); ++k) {
      if (l.node->output(k) != nullptr && l.outputs[k] != nullptr) fp[i].writes.push_back(range(l.outputs[k], l.node->output(k)));
    }
    if (with_workspace && l.workspace != nullptr && l.op.workspace_bytes > 0) {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(l.workspace);
      fp[i].writes.emplace_back(lo, lo + static_cast<uintptr_t>(l.op.workspace_bytes));
    }
  }
  return fp;
}

// A launch's duration in µs for the stream assignment's finish-time estimates, from a roofline
// of the H200 class (3 TB/s of the bytes its tensors hold, 300 TFLOP/s of a GEMM's or
// convolution's multiply-adds) plus 2 µs of launch latency. Only relative sizes matter: a weight
// gradient GEMM counts for more than a Pad.
double EstimateMicros(const ir::Node& n) {
  int64_t bytes = 0;
  const ir::Value* largest = nullptr;
  const ir::Value* weight = nullptr;  // the smallest tensor of rank >= 3 (a convolution's filter)
  std::vector<const ir::Value*> values(n.inputs().begin(), n.inputs().end());
  values.insert(values.end(), n.outputs().begin(), n.outputs().end());
  for (const ir::Value* v : values) {
    if (v == nullptr || !v->type().is_static()) continue;
    const int64_t b = Bytes(v->type());
    bytes += b;
    if (largest == nullptr || b > Bytes(largest->type())) largest = v;
    if (v->type().rank() >= 3 && (weight == nullptr || b < Bytes(weight->type()))) weight = v;
  }
  double macs = 0;
  const std::string& op = n.op_type();
  const ir::Value* a = n.input(0);
  const ir::Value* out = n.output(0);
  if ((op == "Gemm" || op == "MatMul" || op == ir::kFusedGemmOp) && a != nullptr && out != nullptr &&
      a->type().is_static() && out->type().is_static() && out->type().rank() >= 1) {
    const std::vector<int64_t> od = ir::StaticDims(*out->type().shape);
    const int64_t m = ir::NumElements(od) / std::max<int64_t>(od.back(), 1);
    const double k = static_cast<double>(ir::NumElements(ir::StaticDims(*a->type().shape))) / std::max<int64_t>(m, 1);
    macs = static_cast<double>(ir::NumElements(od)) * k;
  } else if (op == ir::kGroupedGemmOp) {
    // Each product i: Yi [m, n] from Ai holding m·k elements.
    for (int i = 0; i < n.num_outputs() && 2 * i < n.num_inputs(); ++i) {
      const ir::Value* ai = n.input(2 * i);
      const ir::Value* yi = n.output(i);
      if (ai == nullptr || yi == nullptr || !ai->type().is_static() || !yi->type().is_static() || yi->type().rank() != 2) {
        continue;
      }
      const std::vector<int64_t> od = ir::StaticDims(*yi->type().shape);
      const double k = static_cast<double>(ir::NumElements(ir::StaticDims(*ai->type().shape))) /
                       static_cast<double>(std::max<int64_t>(od[0], 1));
      macs += static_cast<double>(ir::NumElements(od)) * k;
    }
  } else if (op.find("Conv") != std::string::npos && weight != nullptr && largest != nullptr) {
    const std::vector<int64_t> wd = ir::StaticDims(*weight->type().shape);
    macs = static_cast<double>(ir::NumElements(ir::StaticDims(*largest->type().shape))) *
           static_cast<double>(ir::NumElements(wd) / std::max<int64_t>(wd[0], 1));
  }
  return std::max(static_cast<double>(bytes) / 3e6, 2 * macs / 3e8) + 2.0;
}

// Spreads `launches` over `num_streams` streams, in two passes.
//  1. Streams, from the dependencies through data and arena reuse (workspaces left out): a
//     launch follows the latest launch it depends on when that launch is the last on its stream
//     (no wait), else takes the stream idle longest. A launch whose workspace exceeds
//     `stream_workspace` stays on the main stream (0) with its planned workspace.
//  2. Each stream s gets its own workspace, `stream_base` + s * `stream_workspace`, used by its
//     launches in their order (the planner placed no workspace for them); then the waits, from
//     every dependency (planned workspaces included): each launch waits for the latest dependency
//     on every other stream it has not yet synchronised with.
// Returns the number of streams used.
int AssignStreams(std::vector<NodeLaunch>& launches, int num_streams, char* stream_base, int64_t stream_workspace) {
  for (NodeLaunch& l : launches) {
    l.stream = 0;
    l.waits.clear();
    l.record = false;
  }
  if (num_streams <= 1) return 1;
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(launches.size()); ++i) {
    if (!launches[i].skip) order.push_back(i);
  }
  auto depends = [](const Footprint& a, const Footprint& b) {
    return Overlap(a.writes, b.reads) || Overlap(a.writes, b.writes) || Overlap(a.reads, b.writes);
  };
  // The latest dependency of order[oi] on each stream (earlier ones follow from stream order).
  auto latest_deps = [&](const std::vector<Footprint>& fp, size_t oi) {
    std::vector<int> dep(num_streams, -1);
    const int i = order[oi];
    for (size_t oj = oi; oj-- > 0;) {
      const int j = order[oj];
      const int sj = launches[j].stream;
      if (dep[sj] < 0 && depends(fp[i], fp[j])) dep[sj] = j;
    }
    return dep;
  };
  // 1. Streams.
  {
    const std::vector<Footprint> fp = Footprints(launches, /*with_workspace=*/false);
    std::vector<int> tail(num_streams, -1);
    // finish[i]: when launch i is expected to end (µs, EstimateMicros): after its dependencies and
    // the launches before it on its stream. A stream whose tail finishes sooner frees up sooner.
    std::vector<double> finish(launches.size(), 0.0);
    static const bool by_order = [] {
      const char* e = std::getenv("OTTR_STREAM_PICK");
      return e != nullptr && std::string(e) == "order";
    }();
    auto tail_finish = [&](int s) { return tail[s] < 0 ? 0.0 : finish[tail[s]]; };
    for (size_t oi = 0; oi < order.size(); ++oi) {
      const int i = order[oi];
      const std::vector<int> dep = latest_deps(fp, oi);
      int chosen = -1;
      for (int s = 0; s < num_streams; ++s) {
        if (dep[s] >= 0 && dep[s] == tail[s] && (chosen < 0 || tail[s] > tail[chosen])) chosen = s;
      }
      if (chosen < 0) {
        // No stream ends with a dependency: the one whose tail is expected to finish first (then
        // the earliest in the order). The position in the order alone put the small MLP's second
        // weight gradient behind the next layer's ReLU backward instead of beside it.
        chosen = 0;
        for (int s = 1; s < num_streams; ++s) {
          const bool earlier = by_order ? tail[s] < tail[chosen]
                                        : tail_finish(s) < tail_finish(chosen) ||
                                              (tail_finish(s) == tail_finish(chosen) && tail[s] < tail[chosen]);
          if (earlier) chosen = s;
        }
      }
      if (launches[i].op.workspace_bytes > stream_workspace) chosen = 0;
      launches[i].stream = chosen;
      finish[i] = tail_finish(chosen);
      for (int s = 0; s < num_streams; ++s) {
        if (dep[s] >= 0) finish[i] = std::max(finish[i], finish[dep[s]]);
      }
      finish[i] += EstimateMicros(*launches[i].node);
      tail[chosen] = i;
      if (std::getenv("OTTR_LOG_STREAMS") != nullptr) {
        std::fprintf(stderr, "launch %d %s '%s' depends on [%s], stream %d, finish %.1f\n", i,
                     launches[i].node->op_type().c_str(), launches[i].node->origin().c_str(),
                     absl::StrJoin(dep, ",").c_str(), chosen, finish[i]);
      }
    }
  }
  // 2. Side workspaces, then the waits.
  int used = 1;
  for (int i : order) {
    NodeLaunch& l = launches[i];
    used = std::max(used, l.stream + 1);
    if (l.op.workspace_bytes > 0 && l.op.workspace_bytes <= stream_workspace) {
      l.workspace = stream_base + l.stream * stream_workspace;
    }
  }
  const std::vector<Footprint> fp = Footprints(launches, /*with_workspace=*/true);
  // known[s][t]: the launches of stream t up to this index are complete before s's next launch.
  std::vector<std::vector<int>> known(num_streams, std::vector<int>(num_streams, -1));
  std::vector<std::vector<int>> known_at(launches.size());
  for (size_t oi = 0; oi < order.size(); ++oi) {
    const int i = order[oi];
    NodeLaunch& l = launches[i];
    const std::vector<int> dep = latest_deps(fp, oi);
    std::vector<int>& k = known[l.stream];
    for (int s = 0; s < num_streams; ++s) {
      if (s == l.stream || dep[s] < 0 || dep[s] <= k[s]) continue;
      l.waits.push_back(dep[s]);
      launches[dep[s]].record = true;
      const std::vector<int>& then = known_at[dep[s]];
      for (int t = 0; t < num_streams; ++t) k[t] = std::max(k[t], then[t]);
      k[s] = std::max(k[s], dep[s]);
    }
    k[l.stream] = i;
    known_at[i] = k;
  }
  return used;
}

// LaunchArgs::ready_inputs of every launch: the inputs whose bytes no earlier launch of the step
// writes (parameters and feeds before the optimizer's update, the step's constants). A later
// launch that writes them depends on this one, so it waits for it whatever stream it is on.
void MarkReadyInputs(std::vector<NodeLaunch>& launches) {
  const std::vector<Footprint> fp = Footprints(launches, /*with_workspace=*/true);
  for (size_t i = 0; i < launches.size(); ++i) {
    NodeLaunch& l = launches[i];
    l.ready = 0;
    if (l.skip) continue;
    const int n = std::min(l.node->num_inputs(), 64);
    for (int k = 0; k < n; ++k) {
      if (l.node->input(k) == nullptr || l.inputs[k] == nullptr) continue;
      const uintptr_t lo = reinterpret_cast<uintptr_t>(l.inputs[k]);
      const std::vector<std::pair<uintptr_t, uintptr_t>> range = {{lo, lo + static_cast<uintptr_t>(Bytes(l.node->input(k)->type()))}};
      bool written = false;
      for (size_t j = 0; j < i && !written; ++j) written = Overlap(fp[j].writes, range);
      if (!written) l.ready |= uint64_t{1} << k;
    }
  }
}

struct Copy {
  void* dst;
  const void* src;
  int64_t bytes;
};

}  // namespace

bool CudaDeviceAvailable() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

struct CudaExecutor::Impl {
  const ir::Graph* source = nullptr;
  CudaExecutorOptions options;
  std::unique_ptr<CudaLibraries> libs;
  Stream stream;

  // Compiled state (for one set of input shapes).
  bool compiled = false;
  std::string shape_key;
  std::unique_ptr<ir::Graph> bound;  // a static-shape copy when the source was not static
  const ir::Graph* g = nullptr;
  void* arena = nullptr;
  int64_t arena_bytes = 0;
  absl::flat_hash_map<const ir::Value*, void*> ptr;
  std::vector<NodeLaunch> launches;
  std::vector<Copy> update_copies;
  passes::MemoryPlan plan;
  std::set<std::string> value_keyed;  // inputs whose values are compile-time constants
  std::string submit_key;             // the input types Submit() staged for
  absl::flat_hash_map<std::string, ir::Tensor> preset;  // SetState before the first compile
  GraphExec graph_exec;
  int64_t graph_nodes = 0;
  int64_t graph_programmatic_edges = 0;
  // Multi-stream issue: side streams 1.., an event per recording launch, the fork (main -> side)
  // and join (side -> main) events.
  int streams_used = 1;
  int side_priority = 0;
  bool programmatic = false;  // CudaExecutorOptions::programmatic_launch on a device that has it
  std::vector<Stream> side_streams;
  std::vector<Event> launch_events;
  Event fork_event;
  std::vector<Event> join_events;
  std::vector<ir::Tensor> state_cache;  // host copies returned by State()
  // Submit(): two staging slots, each a pinned host block and a device block holding every
  // input back to back; the copy stream fills slot k % 2 while the main stream runs step k - 1.
  struct Slot {
    void* host = nullptr;
    void* device = nullptr;
    Event h2d_done;   // the copy stream filled `device`
    Event d2d_done;   // the main stream has copied `device` into the arena
    bool used = false;
  };
  Slot slots[2];
  int64_t staging_bytes = 0;
  std::vector<std::pair<const ir::Value*, int64_t>> staging_layout;  // input, offset in a slot
  Stream copy_stream;
  int64_t submitted = 0;
  // Scalar outputs of pending steps, copied into a pinned ring.
  std::vector<const ir::Value*> scalar_outputs;
  double* scalar_ring = nullptr;   // kMaxPendingSteps x scalar_outputs (as raw output bytes)
  int64_t pending = 0;
  Event last_step;
  absl::flat_hash_map<std::string, ir::Tensor> state_host;

  ~Impl() {
    if (stream.get() != nullptr) cudaStreamSynchronize(stream.get());
    graph_exec.Reset();
    if (arena != nullptr) cudaFree(arena);
    FreeStaging();
    if (scalar_ring != nullptr) cudaFreeHost(scalar_ring);
  }
  void FreeStaging() {
    for (Slot& s : slots) {
      if (s.host != nullptr) cudaFreeHost(s.host);
      if (s.device != nullptr) cudaFree(s.device);
      s.host = s.device = nullptr;
      s.used = false;
    }
    staging_bytes = 0;
  }
  absl::Status PrepareStaging();

  absl::Status Compile(const runtime::TensorMap& feeds);
  absl::Status Enqueue();
  absl::Status LaunchStep();
  absl::Status CopyFeeds(const runtime::TensorMap& feeds);
};

CudaExecutor::CudaExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutor::~CudaExecutor() = default;

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const ir::Graph& graph,
                                                                   CudaExecutorOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->source = &graph;
  impl->options = options;
  OTTR_ASSIGN_OR_RETURN(impl->libs, CudaLibraries::Create(options.tf32, options.algo_cache_file));
  bool programmatic = options.programmatic_launch;
  if (const char* env = std::getenv("OTTR_PDL")) programmatic = std::atoi(env) != 0;
  if (programmatic) {
    int major = 0;
    OTTR_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, impl->libs->device()));
    programmatic = major >= 9;
  }
  impl->programmatic = programmatic;
  impl->libs->set_programmatic(programmatic);
  // The main stream (the step's critical path: forward, loss, the data-gradient chain) at the
  // highest priority; side streams (CudaExecutorOptions::streams) at the lowest, so that a side
  // branch's kernels fill the SMs the main stream leaves idle instead of delaying it.
  int least = 0, greatest = 0;
  OTTR_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  impl->side_priority = least;
  cudaStream_t s;
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  impl->stream = Stream(s);
  // Fail early, naming every op without a CUDA kernel.
  std::vector<std::string> missing;
  for (const ir::Node* n : graph.nodes()) {
    if (!IsConstantNode(*n) && CudaOpRegistry::Global().Find(n->domain(), n->op_type()) == nullptr) {
      missing.push_back(absl::StrCat(n->QualifiedOpType(), " (node '", n->origin(), "')"));
    }
  }
  if (!missing.empty()) {
    std::sort(missing.begin(), missing.end());
    return absl::UnimplementedError(absl::StrCat("no CUDA kernel for: ", absl::StrJoin(missing, ", ")));
  }
  return std::unique_ptr<CudaExecutor>(new CudaExecutor(std::move(impl)));
}

absl::Status CudaExecutor::Impl::Compile(const runtime::TensorMap& feeds) {
  // Compiling again (new shapes) must not reset what training changed: carry the current values
  // of the state (every state-update target) over to the new arena.
  absl::flat_hash_map<std::string, ir::Tensor> carried;
  if (compiled && g != nullptr) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    for (const ir::StateUpdate& u : g->updates()) {
      auto it = ptr.find(u.target);
      if (it == ptr.end()) continue;
      ir::Tensor t(u.target->type().dtype, ir::StaticDims(*u.target->type().shape));
      OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.raw_data(), it->second, t.nbytes(), cudaMemcpyDeviceToHost));
      carried.emplace(u.target->name(), std::move(t));
    }
  }
  for (auto& [name, t] : preset) carried.insert_or_assign(name, std::move(t));
  preset.clear();
  compiled = false;
  // Bind the feed shapes when the graph is not static yet.
  bool is_static = true;
  for (const ir::Value* v : source->inputs()) is_static &= v->type().is_static();
  auto outputs_static = [](const ir::Graph& graph) {
    for (const ir::Node* n : graph.nodes()) {
      for (const ir::Value* v : n->outputs()) {
        if (!v->type().is_static()) return false;
      }
    }
    return true;
  };
  if (is_static && outputs_static(*source)) {
    g = source;
  } else {
    bound = source->Clone();
    for (ir::Value* v : bound->inputs()) {
      auto it = feeds.find(v->name());
      if (it == feeds.end()) return absl::InvalidArgumentError(absl::StrCat("missing input '", v->name(), "'"));
      OTTR_RETURN_IF_ERROR(runtime::CheckFeed(*v, it->second));
      v->set_type(it->second.type());
    }
    OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *bound));
    if (!outputs_static(*bound)) {
      // Shape arithmetic inside the graph (Shape -> Slice -> Concat -> Reshape): fold it.
      OTTR_RETURN_IF_ERROR(passes::CreateConstantFoldingPass()->Run(*bound).status());
      OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *bound));
    }
    if (!outputs_static(*bound)) {
      // Shapes that depend on fed values (a Reshape's shape, Unsqueeze's axes, Pad's pads...):
      // small integer inputs become compile-time constants, and their values join the compile
      // key, so other values compile again (as XLA treats shape operands).
      std::vector<ir::Value*> inputs = bound->inputs();
      for (ir::Value* v : inputs) {
        const ir::Tensor& t = feeds.at(v->name());
        if (ir::IsFloat(t.dtype()) || t.num_elements() > kMaxShapeConstantElements || v->uses().empty()) continue;
        const std::string name = v->name();
        bound->RenameValue(v, bound->UniqueName(name + ".fed"));
        OTTR_ASSIGN_OR_RETURN(ir::Value * c, bound->AddInitializer(name, t));
        bound->ReplaceAllUsesWith(v, c);
        value_keyed.insert(name);
      }
      OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *bound));
      OTTR_RETURN_IF_ERROR(passes::CreateConstantFoldingPass()->Run(*bound).status());
      OTTR_RETURN_IF_ERROR(ir::InferGraphShapes(ir::OpRegistry::Global(), *bound));
    }
    g = bound.get();
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g->TopoOrder());
  const CudaOpRegistry& registry = CudaOpRegistry::Global();

  // 1. Compile every node (types and constants are all it needs).
  launches.clear();
  for (ir::Node* n : order) {
    NodeLaunch l;
    l.node = n;
    if (!IsConstantNode(*n)) {
      std::vector<ir::TensorType> in_types, out_types;
      std::vector<const ir::Tensor*> constants;
      for (const ir::Value* v : n->inputs()) {
        in_types.push_back(v ? v->type() : ir::TensorType());
        constants.push_back(CompileTimeConstant(v));
      }
      for (const ir::Value* v : n->outputs()) {
        if (!v->type().is_static()) {
          return absl::FailedPreconditionError(absl::StrCat(n->Describe(), ": output '", v->name(),
                                                            "' has no static shape: ",
                                                            v->type().ToString()));
        }
        out_types.push_back(v->type());
      }
      OpCompileContext ctx(*n, std::move(in_types), std::move(out_types), std::move(constants), *libs);
      const OpCompiler* fn = registry.Find(n->domain(), n->op_type());
      if (fn == nullptr) return absl::UnimplementedError(absl::StrCat(n->Describe(), ": no CUDA kernel"));
      auto op = (*fn)(ctx);
      if (!op.ok()) return op.status();
      l.op = std::move(*op);
    }
    launches.push_back(std::move(l));
  }

  // 2. Memory: the planner places every buffer (parameters and optimizer state included) in one
  // arena, reusing the bytes of dead values, writing state updates in place and choosing the
  // schedule; the launches follow its schedule.
  // With several streams every stream has a workspace of its own (AssignStreams), used by its
  // launches in order, so the planner places only the workspaces too large for that: a planned
  // workspace lives at its node's place in the planner's schedule, and bytes the planner gives a
  // later node's output would make that node wait for the GEMM that used them as workspace (on
  // the H200 the small MLP's data gradient dX1 waited for the weight gradient dW1 so).
  int want_streams = options.streams;
  if (const char* env = std::getenv("OTTR_STREAMS")) want_streams = std::max(1, std::atoi(env));
  want_streams = std::min(want_streams, 8);
  absl::flat_hash_map<const ir::Node*, int64_t> workspace_of;
  int64_t stream_workspace = 0;
  for (const NodeLaunch& l : launches) {
    if (want_streams > 1 && l.op.workspace_bytes <= kMaxSideWorkspace) {
      stream_workspace = std::max(stream_workspace, l.op.workspace_bytes);
    } else if (l.op.workspace_bytes > 0) {
      workspace_of[l.node] = l.op.workspace_bytes;
    }
  }
  stream_workspace = AlignUp(stream_workspace);
  passes::PlanOptions plan_options;
  plan_options.alignment = kAlign;
  plan_options.workspace_bytes = [&](const ir::Node& n) -> int64_t {
    auto it = workspace_of.find(&n);
    return it == workspace_of.end() ? 0 : it->second;
  };
  plan_options.in_place_rules = CudaInPlaceRules;
  // Several streams overlap what is off the longest chain of launches (a weight gradient beside
  // the next data gradient) only if the schedule runs the chain first: the memory-lowest order
  // puts a layer's weight gradient before its data gradient where that frees an activation
  // sooner, and the data gradient then waits for it (the reuse of the freed bytes). The
  // critical-path order is taken when its peak is within kCriticalPathSlack of the lowest.
  if (want_streams > 1) {
    plan_options.critical_path_slack = kCriticalPathSlack;
    plan_options.reuse_delay = kReuseDelay;
  }
  if (const char* env = std::getenv("OTTR_REUSE_DELAY")) plan_options.reuse_delay = std::max(0, std::atoi(env));
  if (const char* env = std::getenv("OTTR_CRITICAL_PATH_SLACK")) plan_options.critical_path_slack = std::atof(env);
  plan_options.in_place = options.plan_in_place;
  OTTR_ASSIGN_OR_RETURN(plan, passes::PlanMemory(*g, plan_options));
  {
    absl::flat_hash_map<const ir::Node*, size_t> position;
    for (size_t k = 0; k < plan.schedule.size(); ++k) position[plan.schedule[k]] = k;
    std::stable_sort(launches.begin(), launches.end(), [&](const NodeLaunch& x, const NodeLaunch& y) {
      return position.at(x.node) < position.at(y.node);
    });
  }
  // The streams' workspaces (CudaExecutorOptions::streams > 1) follow the planned bytes: room for
  // the largest workspace up to kMaxSideWorkspace each.
  const int64_t stream_base = AlignUp(plan.peak_bytes);
  // Then the launches' counters (CompiledOp::counter_bytes): bytes of their own, zeroed here once;
  // every launch leaves its counters zero again.
  const int64_t counter_base = stream_base + (want_streams > 1 ? want_streams : 0) * stream_workspace;
  int64_t counter_bytes = 0;
  for (const NodeLaunch& l : launches) counter_bytes += (l.op.counter_bytes + 15) / 16 * 16;
  // Then their state (CompiledOp::state_bytes), written by each op's init before the capture.
  const int64_t state_base = counter_base + counter_bytes;
  int64_t state_bytes = 0;
  for (const NodeLaunch& l : launches) state_bytes += (l.op.state_bytes + 15) / 16 * 16;
  arena_bytes = std::max<int64_t>(state_base + state_bytes, kAlign);
  if (arena != nullptr) cudaFree(arena);
  arena = nullptr;
  OTTR_CUDA_RETURN_IF_ERROR(cudaMalloc(&arena, arena_bytes));
  // Poison the arena so a kernel that reads what nobody wrote shows up as NaN.
  OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(arena, 0xff, arena_bytes, stream.get()));
  if (counter_bytes > 0) {
    char* next = static_cast<char*>(arena) + counter_base;
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(next, 0, counter_bytes, stream.get()));
    for (NodeLaunch& l : launches) {
      if (l.op.counter_bytes <= 0) continue;
      l.counters = next;
      next += (l.op.counter_bytes + 15) / 16 * 16;
    }
  }
  if (state_bytes > 0) {
    char* next = static_cast<char*>(arena) + state_base;
    for (NodeLaunch& l : launches) {
      if (l.op.state_bytes <= 0) continue;
      l.state = next;
      next += (l.op.state_bytes + 15) / 16 * 16;
    }
  }
  ptr.clear();
  for (const auto& [v, index] : plan.buffer_of) ptr[v] = static_cast<char*>(arena) + plan.buffers[index].offset;
  auto pointer = [&](const ir::Value* v) -> void* {
    auto it = ptr.find(v);
    return it == ptr.end() ? nullptr : it->second;
  };

  // 3. Upload initializers and constants.
  for (const ir::Value* v : g->initializers()) {
    auto c = carried.find(v->name());
    const ir::Tensor& t = c != carried.end() && c->second.type() == v->type() ? c->second : *v->initializer();
    if (pointer(v) == nullptr) continue;  // nothing reads it
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pointer(v), t.raw_data(), t.nbytes(), cudaMemcpyHostToDevice, stream.get()));
  }
  for (NodeLaunch& l : launches) {
    if (IsConstantNode(*l.node)) {
      const ir::Tensor& t = l.node->attr("value")->t();
      if (void* p = pointer(l.node->output(0))) {
        OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p, t.raw_data(), t.nbytes(), cudaMemcpyHostToDevice, stream.get()));
      }
      l.skip = true;
      continue;
    }
    for (const ir::Value* v : l.node->inputs()) {
      if (v != nullptr && pointer(v) == nullptr) {
        return absl::InternalError(absl::StrCat(l.node->Describe(), ": input '", v->name(), "' has no buffer"));
      }
      l.inputs.push_back(v ? pointer(v) : nullptr);
    }
    for (const ir::Value* v : l.node->outputs()) l.outputs.push_back(pointer(v));
    l.skip = !l.op.launch;
    if (!l.op.views.empty()) {
      bool all_aliased = true;
      for (const auto& [out, in] : l.op.views) all_aliased &= l.outputs[out] == l.inputs[in] || l.outputs[out] == nullptr;
      l.skip |= all_aliased;
    }
  }
  for (NodeLaunch& l : launches) {
    auto it = plan.workspace_offset.find(l.node);
    if (it != plan.workspace_offset.end()) l.workspace = static_cast<char*>(arena) + it->second;
  }
  // Streams: which launches overlap (CudaExecutorOptions::streams).
  streams_used = AssignStreams(launches, want_streams, static_cast<char*>(arena) + stream_base, stream_workspace);
  // Ready inputs matter only to programmatic launches.
  if (programmatic) MarkReadyInputs(launches);
  while (static_cast<int>(side_streams.size()) < streams_used - 1) {
    cudaStream_t side;
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, side_priority));
    side_streams.emplace_back(side);
    cudaEvent_t join;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    join_events.emplace_back(join);
  }
  if (streams_used > 1 && fork_event.get() == nullptr) {
    cudaEvent_t fork;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    fork_event = Event(fork);
  }
  if (std::getenv("OTTR_LOG_STREAMS") != nullptr) {
    for (size_t i = 0; i < launches.size(); ++i) {
      const NodeLaunch& l = launches[i];
      if (l.skip) continue;
      std::fprintf(stderr, "launch %zu %s '%s': stream %d waits [%s]\n", i, l.node->op_type().c_str(),
                   l.node->origin().c_str(), l.stream, absl::StrJoin(l.waits, ",").c_str());
    }
  }
  launch_events.clear();
  launch_events.resize(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    if (!launches[i].record) continue;
    cudaEvent_t e;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    launch_events[i] = Event(e);
  }
  // State updates the planner could not write in place are copied at the end of the step.
  update_copies.clear();
  for (const passes::UpdateCopy& u : plan.update_copies) {
    update_copies.push_back({pointer(u.target), pointer(u.value), Bytes(u.target->type())});
  }
  // The ops' state, from the addresses now fixed (CompiledOp::init), on the main stream.
  for (NodeLaunch& l : launches) {
    if (l.skip || !l.op.init) continue;
    absl::Status s = l.op.init(LaunchArgs{l.inputs, l.outputs, l.workspace, stream.get(), l.counters, l.state});
    if (!s.ok()) return AnnotateStatus(s, l.node->Describe());
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  OTTR_RETURN_IF_ERROR(libs->Save());

  // 4. Capture the step.
  graph_exec.Reset();
  graph_nodes = 0;
  graph_programmatic_edges = 0;
  if (options.use_cuda_graph) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    absl::Status s = Enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
    if (!s.ok() || end != cudaSuccess) {
      // A failed launch invalidates the capture; clear the error it leaves behind so that the
      // next launch check (cudaGetLastError) in this process does not report it again.
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      OTTR_RETURN_IF_ERROR(s);
      OTTR_CUDA_RETURN_IF_ERROR(end);
    }
    CudaGraph owner(graph);
    size_t n = 0;
    OTTR_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &n));
    graph_nodes = static_cast<int64_t>(n);
    // The edges capture made programmatic (a kernel that may start while the one before ends).
    if (programmatic) {
      size_t edges = 0;
      OTTR_CUDA_RETURN_IF_ERROR(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
      std::vector<cudaGraphNode_t> from(edges), to(edges);
      std::vector<cudaGraphEdgeData> data(edges);
      OTTR_CUDA_RETURN_IF_ERROR(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges));
      for (size_t e = 0; e < edges; ++e) graph_programmatic_edges += data[e].type == cudaGraphDependencyTypeProgrammatic;
    }
    // OTTR_GRAPH_DOT=FILE writes the captured step (every node, kernel names and parameters) as
    // Graphviz: which kernels a library call adds to the launch count.
    if (const char* dot = std::getenv("OTTR_GRAPH_DOT")) {
      OTTR_CUDA_RETURN_IF_ERROR(cudaGraphDebugDotPrint(graph, dot, cudaGraphDebugDotFlagsKernelNodeParams));
    }
    cudaGraphExec_t exec;
    // Kernel nodes keep their stream's priority (cudaGraphInstantiateFlagUseNodePriority).
    OTTR_CUDA_RETURN_IF_ERROR(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
    graph_exec = GraphExec(exec);
  }
  compiled = true;
  return absl::OkStatus();
}

absl::Status CudaExecutor::Impl::Enqueue() {
  const int sides = streams_used - 1;
  if (sides > 0) {
    // Fork: the side streams start after what the main stream holds (the feeds, the last step).
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_event.get(), stream.get()));
    for (int s = 0; s < sides; ++s) OTTR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side_streams[s].get(), fork_event.get(), 0));
  }
  // Programmatic launches (CudaExecutorOptions::programmatic_launch): a launch that follows an
  // earlier launch of the step on its stream, with no event to wait for in between.
  std::vector<bool> stream_busy(static_cast<size_t>(sides) + 1, false);
  for (size_t i = 0; i < launches.size(); ++i) {
    const NodeLaunch& l = launches[i];
    if (l.skip) continue;
    cudaStream_t st = l.stream == 0 ? stream.get() : side_streams[l.stream - 1].get();
    for (int w : l.waits) OTTR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(st, launch_events[w].get(), 0));
    LaunchArgs args{l.inputs, l.outputs, l.workspace, st, l.counters, l.state};
    args.ready_inputs = l.ready;
    args.programmatic = programmatic && stream_busy[l.stream] && l.waits.empty() && FollowsOneKernel(st);
    stream_busy[l.stream] = true;
    const std::string label = absl::StrCat(l.node->op_type(), " ", l.node->origin());
    nvtxRangePushA(label.c_str());
    absl::Status s = l.op.launch(args);
    nvtxRangePop();
    if (!s.ok()) return AnnotateStatus(s, l.node->Describe());
    if (l.record) OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(launch_events[i].get(), st));
  }
  // Join: the main stream continues after every side stream's work.
  for (int s = 0; s < sides; ++s) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(join_events[s].get(), side_streams[s].get()));
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream.get(), join_events[s].get(), 0));
  }
  if (options.auto_commit) {
    for (const Copy& c : update_copies) {
      OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream.get()));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::Impl::LaunchStep() {
  if (graph_exec.get() != nullptr) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec.get(), stream.get()));
    return absl::OkStatus();
  }
  return Enqueue();
}

absl::Status CudaExecutor::Impl::CopyFeeds(const runtime::TensorMap& feeds) {
  std::string key;
  for (const ir::Value* v : source->inputs()) {
    auto it = feeds.find(v->name());
    if (it == feeds.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", v->name(), "' (", v->type().ToString(), ")"));
    }
    OTTR_RETURN_IF_ERROR(runtime::CheckFeed(*v, it->second));
    absl::StrAppend(&key, v->name(), ":", it->second.type().ToString(), ";");
  }
  auto add_values = [&](std::string k) {
    for (const std::string& name : value_keyed) {
      const ir::Tensor& t = feeds.at(name);
      for (int64_t i = 0; i < t.num_elements(); ++i) absl::StrAppend(&k, i ? "," : name + "=", t.GetAsInt64(i));
      k += ";";
    }
    return k;
  };
  for (const auto& [name, t] : feeds) {
    const ir::Value* v = source->FindValue(name);
    if (v == nullptr || (v->kind() != ir::Value::Kind::kInput && !v->is_initializer())) {
      return absl::InvalidArgumentError(absl::StrCat("the model has no input named '", name, "'"));
    }
  }
  if (!compiled || add_values(key) != shape_key) {
    value_keyed.clear();
    OTTR_RETURN_IF_ERROR(Compile(feeds));
    shape_key = add_values(key);
  }
  for (const auto& [name, t] : feeds) {
    const ir::Value* v = g->FindValue(name);
    auto p = ptr.find(v);
    if (p == ptr.end()) continue;  // an input nothing reads
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->second, t.raw_data(), t.nbytes(), cudaMemcpyHostToDevice, stream.get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ir::Tensor>> CudaExecutor::Run(const runtime::TensorMap& feeds) {
  Impl& m = *impl_;
  OTTR_RETURN_IF_ERROR(m.CopyFeeds(feeds));
  OTTR_RETURN_IF_ERROR(m.LaunchStep());
  std::vector<ir::Tensor> out;
  for (const ir::Value* v : m.g->outputs()) {
    ir::Tensor t(v->type().dtype, ir::StaticDims(*v->type().shape));
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.raw_data(), m.ptr.at(v), t.nbytes(), cudaMemcpyDeviceToHost, m.stream.get()));
    out.push_back(std::move(t));
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream.get()));
  return out;
}

absl::Status CudaExecutor::Prepare(const runtime::TensorMap& feeds) {
  OTTR_RETURN_IF_ERROR(impl_->CopyFeeds(feeds));
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream.get()));
  return absl::OkStatus();
}

absl::Status CudaExecutor::Step() {
  if (!impl_->compiled) return absl::FailedPreconditionError("Step() before Prepare()");
  return impl_->LaunchStep();
}

absl::StatusOr<double> CudaExecutor::TimeSteps(int steps) {
  if (!impl_->compiled) return absl::FailedPreconditionError("TimeSteps() before Prepare()");
  cudaEvent_t a, b;
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&a));
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b));
  Event ea(a), eb(b);
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(a, impl_->stream.get()));
  for (int i = 0; i < steps; ++i) OTTR_RETURN_IF_ERROR(impl_->LaunchStep());
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(b, impl_->stream.get()));
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b));
  float ms = 0;
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms);
}

absl::Status CudaExecutor::WaitIdle() {
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream.get()));
  return absl::OkStatus();
}

const ir::Tensor* CudaExecutor::State(const std::string& name) {
  Impl& m = *impl_;
  const ir::Graph* g = m.compiled ? m.g : m.source;
  const ir::Value* v = g->FindValue(name);
  if (v == nullptr || !v->is_initializer()) return nullptr;
  if (!m.compiled) {
    auto p = m.preset.find(name);
    return p != m.preset.end() ? &p->second : v->initializer();
  }
  if (cudaStreamSynchronize(m.stream.get()) != cudaSuccess) return nullptr;
  ir::Tensor t(v->type().dtype, ir::StaticDims(*v->type().shape));
  if (cudaMemcpy(t.raw_data(), m.ptr.at(v), t.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess) return nullptr;
  m.state_host[name] = std::move(t);
  return &m.state_host[name];
}

absl::Status CudaExecutor::SetState(const std::string& name, const ir::Tensor& t) {
  Impl& m = *impl_;
  if (!m.compiled) {
    // Before the first run (resuming, initialization bindings): uploaded by the compile.
    const ir::Value* v = m.source->FindValue(name);
    if (v == nullptr || !v->is_initializer() || v->type() != t.type()) {
      return absl::InvalidArgumentError(absl::StrCat("no initializer '", name, "' of type ", t.type().ToString()));
    }
    m.preset.insert_or_assign(name, t);
    return absl::OkStatus();
  }
  const ir::Value* v = m.g->FindValue(name);
  if (v == nullptr || !v->is_initializer() || v->type() != t.type()) {
    return absl::InvalidArgumentError(absl::StrCat("no initializer '", name, "' of type ", t.type().ToString()));
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream.get()));
  OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(m.ptr.at(v), t.raw_data(), t.nbytes(), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CudaExecutor::Impl::PrepareStaging() {
  FreeStaging();
  staging_layout.clear();
  for (const ir::Value* v : source->inputs()) {
    const ir::Value* bound_v = g->FindValue(v->name());
    if (bound_v == nullptr || !ptr.contains(bound_v)) continue;  // nothing reads it
    staging_layout.emplace_back(bound_v, staging_bytes);
    staging_bytes += AlignUp(std::max<int64_t>(Bytes(bound_v->type()), 1));
  }
  for (Slot& s : slots) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&s.host, std::max<int64_t>(staging_bytes, kAlign), cudaHostAllocDefault));
    OTTR_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.device, std::max<int64_t>(staging_bytes, kAlign)));
    cudaEvent_t a, b;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
    s.h2d_done = Event(a);
    s.d2d_done = Event(b);
  }
  if (copy_stream.get() == nullptr) {
    cudaStream_t cs;
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    copy_stream = Stream(cs);
  }
  scalar_outputs.clear();
  for (const ir::Value* v : g->outputs()) {
    if (ir::IsFloat(v->type().dtype) && ir::NumElements(ir::StaticDims(*v->type().shape)) == 1) {
      scalar_outputs.push_back(v);
    }
  }
  if (scalar_ring == nullptr) {
    // Up to 4 scalars of up to 8 bytes per step.
    OTTR_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&scalar_ring),
                                            sizeof(double) * 4 * CudaExecutor::kMaxPendingSteps, cudaHostAllocDefault));
  }
  if (scalar_outputs.size() > 4) scalar_outputs.resize(4);
  if (last_step.get() == nullptr) {
    cudaEvent_t e;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    last_step = Event(e);
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::Submit(const runtime::TensorMap& feeds) {
  Impl& m = *impl_;
  if (m.pending >= kMaxPendingSteps) {
    return absl::FailedPreconditionError(absl::StrCat(kMaxPendingSteps, " steps submitted without DrainScalars()"));
  }
  // Shapes (and values of shape operands) decide the compiled step, as in Run().
  std::string key;
  for (const ir::Value* v : m.source->inputs()) {
    auto it = feeds.find(v->name());
    if (it == feeds.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", v->name(), "' (", v->type().ToString(), ")"));
    }
    absl::StrAppend(&key, v->name(), ":", it->second.type().ToString(), ";");
  }
  if (!m.compiled || m.staging_bytes == 0 || !m.value_keyed.empty() || key != m.submit_key) {
    // A new shape: wait for what is in flight, compile (CopyFeeds does), then stage afresh.
    OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream.get()));
    OTTR_RETURN_IF_ERROR(m.CopyFeeds(feeds));
    if (!m.value_keyed.empty()) {
      return absl::UnimplementedError("Submit: this step's shapes depend on fed values; use Run()");
    }
    OTTR_RETURN_IF_ERROR(m.PrepareStaging());
    m.submit_key = key;
  }
  for (const auto& [v, off] : m.staging_layout) {
    const ir::Tensor& t = feeds.at(v->name());
    OTTR_RETURN_IF_ERROR(runtime::CheckFeed(*v, t));
  }
  Impl::Slot& slot = m.slots[m.submitted % 2];
  if (slot.used) {
    // The host block was last copied two steps ago; normally long done.
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.h2d_done.get()));
  }
  for (const auto& [v, off] : m.staging_layout) {
    const ir::Tensor& t = feeds.at(v->name());
    std::memcpy(static_cast<char*>(slot.host) + off, t.raw_data(), t.nbytes());
  }
  // Copy stream: wait until the main stream has read this device block (two steps ago).
  if (slot.used) OTTR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m.copy_stream.get(), slot.d2d_done.get(), 0));
  OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.device, slot.host, m.staging_bytes, cudaMemcpyHostToDevice,
                                            m.copy_stream.get()));
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.h2d_done.get(), m.copy_stream.get()));
  // Main stream: wait for the copy, move the inputs into the arena, replay the step.
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m.stream.get(), slot.h2d_done.get(), 0));
  for (const auto& [v, off] : m.staging_layout) {
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.ptr.at(v), static_cast<char*>(slot.device) + off,
                                              Bytes(v->type()), cudaMemcpyDeviceToDevice, m.stream.get()));
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.d2d_done.get(), m.stream.get()));
  slot.used = true;
  OTTR_RETURN_IF_ERROR(m.LaunchStep());
  for (size_t i = 0; i < m.scalar_outputs.size(); ++i) {
    const ir::Value* v = m.scalar_outputs[i];
    double* dst = m.scalar_ring + (m.pending * 4 + static_cast<int64_t>(i));
    OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, m.ptr.at(v), ir::DTypeSize(v->type().dtype),
                                              cudaMemcpyDeviceToHost, m.stream.get()));
  }
  ++m.pending;
  ++m.submitted;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<double>>> CudaExecutor::DrainScalars() {
  Impl& m = *impl_;
  std::vector<std::vector<double>> out;
  if (m.pending == 0) return out;
  OTTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream.get()));
  for (int64_t k = 0; k < m.pending; ++k) {
    std::vector<double> step;
    for (size_t i = 0; i < m.scalar_outputs.size(); ++i) {
      const void* p = m.scalar_ring + (k * 4 + static_cast<int64_t>(i));
      ir::Tensor t(m.scalar_outputs[i]->type().dtype, {});
      std::memcpy(t.raw_data(), p, t.nbytes());
      step.push_back(t.GetAsDouble(0));
    }
    out.push_back(std::move(step));
  }
  m.pending = 0;
  return out;
}

CudaStepStats CudaExecutor::stats() const {
  CudaStepStats s;
  s.arena_bytes = impl_->arena_bytes;
  s.nodes = static_cast<int64_t>(impl_->launches.size());
  s.programmatic_edges = impl_->graph_programmatic_edges;
  if (impl_->graph_nodes > 0) {
    s.launches_per_step = impl_->graph_nodes;
  } else {
    for (const NodeLaunch& l : impl_->launches) s.launches_per_step += !l.skip;
    s.launches_per_step += static_cast<int64_t>(impl_->update_copies.size());
  }
  return s;
}

absl::StatusOr<std::vector<std::pair<const ir::Node*, double>>> CudaExecutor::TimeNodes(int repeats) {
  Impl& m = *impl_;
  if (!m.compiled) return absl::FailedPreconditionError("TimeNodes() before Prepare()");
  std::vector<std::pair<const ir::Node*, double>> out;
  cudaEvent_t a, b;
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&a));
  OTTR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b));
  Event ea(a), eb(b);
  for (const NodeLaunch& l : m.launches) {
    if (l.skip) continue;
    LaunchArgs args{l.inputs, l.outputs, l.workspace, m.stream.get(), l.counters, l.state};
    for (int i = 0; i < 3; ++i) OTTR_RETURN_IF_ERROR(l.op.launch(args));
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(a, m.stream.get()));
    for (int i = 0; i < repeats; ++i) OTTR_RETURN_IF_ERROR(l.op.launch(args));
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventRecord(b, m.stream.get()));
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b));
    float ms = 0;
    OTTR_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, a, b));
    out.emplace_back(l.node, 1000.0 * ms / repeats);
  }
  return out;
}

}  // namespace ottr::cuda
