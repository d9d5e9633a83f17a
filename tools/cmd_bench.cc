// `ottr bench MODEL [training flags] --batch N [--device cuda|cpu] [--csv FILE] [--per-op]`:
// µs per training step (forward + loss + backward + optimizer), median of several windows after
// a warm-up, with random non-zero inputs and random labels. On CUDA the step is timed with CUDA
// events around back-to-back CUDA Graph replays.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "importer/onnx_importer.h"
#include "ir/status.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tools/cli_common.h"
#include "tools/device.h"
#include "tools/training_flags.h"
#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/kernel_trace.h"
#endif

namespace ottr::tools {
namespace {

// Random feeds for every input of the step graph: features N(0,1)-ish uniform, labels in range.
runtime::TensorMap RandomFeeds(const ir::Graph& step, int64_t classes, uint64_t seed) {
  runtime::TensorMap feeds;
  std::mt19937_64 rng(seed);
  for (const ir::Value* v : step.inputs()) {
    ir::Tensor t(v->type().dtype, ir::StaticDims(*v->type().shape));
    if (v->name() == passes::kLrInput) {
      t.data<float>()[0] = 1e-3f;
    } else if (v->type().dtype == ir::DType::kInt64) {
      std::uniform_int_distribution<int64_t> d(0, std::max<int64_t>(classes - 1, 0));
      for (int64_t& x : t.span<int64_t>()) x = d(rng);
    } else if (v->type().dtype == ir::DType::kFloat32) {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (float& x : t.span<float>()) x = d(rng);
    }
    feeds[v->name()] = std::move(t);
  }
  return feeds;
}

#ifdef OTTR_HAVE_CUDA
// --trace FILE: the timeline of the last traced step, after a summary of the last ten; the
// summary of the last step on stdout.
absl::Status WriteTrace(const std::string& path, const std::vector<cuda::TraceRecord>& records) {
  const std::vector<cuda::StepTimeline> steps = cuda::StepTimelines(records);
  if (steps.empty()) return absl::InternalError("--trace: CUPTI recorded no graph launches");
  std::ofstream out(path);
  const size_t first = steps.size() > 10 ? steps.size() - 10 : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    out << absl::StrFormat("step %d: %d records, span %.2f us, busy %.2f us, idle %.2f us\n", i,
                           steps[i].records.size(), steps[i].span_us, steps[i].busy_us, steps[i].idle_us());
  }
  const cuda::StepTimeline& last = steps.back();
  out << "\nlast step:\n" << cuda::FormatTimeline(last);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  std::printf("trace: %zu records per step, span %.2f us, busy %.2f us, idle %.2f us (%s)\n", last.records.size(),
              last.span_us, last.busy_us, last.idle_us(), path.c_str());
  return absl::OkStatus();
}
#endif

}  // namespace

absl::Status CmdBench(const std::vector<std::string>& argv) {
  std::set<std::string> values = TrainingValueFlags();
  for (const char* f : {"device", "csv", "steps", "windows", "name", "algo-cache", "per-op-csv", "streams", "trace"}) values.insert(f);
  std::set<std::string> switches = TrainingSwitchFlags();
  for (const char* f : {"no-cuda-graph", "no-tf32", "no-pdl", "per-op"}) switches.insert(f);
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, values, switches));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("bench takes one MODEL");
  const std::string model = args.positional()[0];
  OTTR_ASSIGN_OR_RETURN(passes::TrainingSpec spec, ParseTrainingSpec(args, 128));
  const std::string device = ResolveDevice(args.get("device", "auto"));
  if (args.has("trace") && device != "cuda") {
    return absl::InvalidArgumentError("--trace needs --device cuda: CUPTI records the GPU's kernels");
  }
  UseDevicePipeline(args, device, spec);
  OTTR_ASSIGN_OR_RETURN(int64_t steps, args.get_int("steps", 50));
  OTTR_ASSIGN_OR_RETURN(int64_t windows, args.get_int("windows", 5));
  OTTR_ASSIGN_OR_RETURN(auto forward, importer::ImportModelFile(model));
  OTTR_ASSIGN_OR_RETURN(auto step, passes::BuildTrainingGraph(*forward, spec));
  int64_t classes = 10;
  if (!forward->outputs().empty() && forward->outputs()[0]->type().has_rank()) {
    const ir::Shape& s = *forward->outputs()[0]->type().shape;
    if (!s.empty() && s.back().is_static()) classes = s.back().value();
  }
  const runtime::TensorMap feeds = RandomFeeds(*step, classes, 1);
  // TF32 is a CUDA tensor-core mode: on the CPU a tf32 run is plain float32.
  const std::string precision = device != "cuda" && spec.precision == passes::Precision::kTf32
                                    ? "fp32"
                                    : passes::PrecisionName(spec.precision);
  std::vector<double> us;
  int64_t launches = 0, peak = 0;
  std::vector<std::pair<const ir::Node*, double>> per_op;
  if (device == "cuda") {
#ifdef OTTR_HAVE_CUDA
    cuda::CudaExecutorOptions o;
    o.tf32 = spec.precision == passes::Precision::kTf32;
    o.use_cuda_graph = !args.has("no-cuda-graph");
    if (args.has("no-pdl")) o.programmatic_launch = false;
    o.algo_cache_file = args.get("algo-cache");
    OTTR_ASSIGN_OR_RETURN(o.streams, args.get_int("streams", o.streams));
    if (o.streams < 1) return absl::InvalidArgumentError("--streams must be at least 1");
    // --trace: CUPTI records the device's activity from before the step is captured.
    std::unique_ptr<cuda::KernelTrace> trace;
    if (args.has("trace")) {
      OTTR_ASSIGN_OR_RETURN(trace, cuda::KernelTrace::Start());
    }
    OTTR_ASSIGN_OR_RETURN(auto exec, cuda::CudaExecutor::Create(*step, o));
    OTTR_RETURN_IF_ERROR(exec->Prepare(feeds));
    OTTR_ASSIGN_OR_RETURN(double warm, exec->TimeSteps(10));
    (void)warm;
    for (int64_t w = 0; w < windows; ++w) {
      OTTR_ASSIGN_OR_RETURN(double ms, exec->TimeSteps(static_cast<int>(steps)));
      us.push_back(1000.0 * ms / steps);
    }
    launches = exec->stats().launches_per_step;
    peak = exec->stats().arena_bytes;
    if (o.use_cuda_graph) {
      std::fprintf(stderr, "programmatic edges in the step's graph: %lld\n",
                   static_cast<long long>(exec->stats().programmatic_edges));
    }
    if (trace != nullptr) {
      OTTR_RETURN_IF_ERROR(exec->WaitIdle());
      OTTR_ASSIGN_OR_RETURN(std::vector<cuda::TraceRecord> records, trace->Stop());
      OTTR_RETURN_IF_ERROR(WriteTrace(args.get("trace"), records));
    }
    if (args.has("per-op")) {
      OTTR_ASSIGN_OR_RETURN(per_op, exec->TimeNodes(20));
    }
#else
    return absl::UnimplementedError("--device cuda: this ottr was built without CUDA");
#endif
  } else {
    OTTR_ASSIGN_OR_RETURN(auto exec, runtime::cpu::CpuExecutor::Create(*step));
    for (int i = 0; i < 2; ++i) OTTR_RETURN_IF_ERROR(exec->Run(feeds).status());
    const int64_t cpu_steps = std::max<int64_t>(1, steps / 10);
    for (int64_t w = 0; w < windows; ++w) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < cpu_steps; ++i) OTTR_RETURN_IF_ERROR(exec->Run(feeds).status());
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / cpu_steps);
    }
    launches = step->num_nodes();
  }
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  const std::string name = args.get("name", model);
  const std::string row = absl::StrFormat("%s,%d,%s,%s,%.1f,%d,%d", name, spec.batch, device, precision,
                                          median, launches, peak);
  std::printf("model,batch,device,precision,us_per_step,launches_per_step,peak_bytes\n%s\n", row.c_str());
  if (args.has("csv")) {
    const std::string path = args.get("csv");
    const bool exists = std::ifstream(path).good();
    std::ofstream out(path, std::ios::app);
    if (!exists) out << "model,batch,device,precision,us_per_step,launches_per_step,peak_bytes\n";
    out << row << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  }
  if (!per_op.empty()) {
    std::sort(per_op.begin(), per_op.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    const std::string path = args.get("per-op-csv");
    std::ofstream out;
    if (!path.empty()) {
      out.open(path);
      out << "name,op,shapes,us\n";
    }
    std::printf("per-op (each node launched alone), slowest first:\n");
    for (const auto& [n, t] : per_op) {
      std::string shapes = absl::StrJoin(n->inputs(), " ", [](std::string* s, const ir::Value* v) {
        s->append(v ? v->type().ToString() : "_");
      });
      std::printf("  %10.1f us  %-24s %s  [%s]\n", t, n->QualifiedOpType().c_str(), n->origin().c_str(), shapes.c_str());
      if (out.is_open()) out << "\"" << n->origin() << "\"," << n->QualifiedOpType() << ",\"" << shapes << "\"," << t << "\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace ottr::tools
