// A device-side timeline of what the GPU ran: every kernel, memset and memcpy with its start and
// end (GPU timestamps, ns), stream and name, recorded through CUPTI's activity API. CUPTI is
// loaded at run time (dlopen of libcupti.so.13, the CUDA toolkit's), so ottr neither links it nor
// needs it unless a trace is asked for.
//
// Start() before the work is created and launched (the executor's graph is captured with the
// activity already enabled), Stop() after the device is idle. Records of one CUDA Graph launch
// share the launch's correlation id, which is how StepTimelines() cuts the records into steps.
//
// This is what `ottr bench --trace FILE` prints: per step, the span from the first start to the
// last end, the busy time (the union of the intervals) and the idle time between kernels, which
// tells a launch-latency-bound step (many short kernels with gaps) from a compute-bound one.
#ifndef OTTR_RUNTIME_CUDA_KERNEL_TRACE_H_
#define OTTR_RUNTIME_CUDA_KERNEL_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ottr::cuda {

struct TraceRecord {
  enum class Kind { kKernel, kMemset, kMemcpy };
  Kind kind = Kind::kKernel;
  std::string name;  // kernel name (mangled as CUPTI gives it), "memset" or "memcpy"
  uint32_t stream = 0;
  uint32_t correlation = 0;  // the launching API call; a whole graph launch shares one
  uint32_t graph = 0;        // CUDA graph id, 0 outside graphs
  uint64_t start_ns = 0, end_ns = 0;
  int64_t grid = 0;  // blocks (kernels)
};

// One step's records, sorted by start, with times relative to the step's first start.
struct StepTimeline {
  std::vector<TraceRecord> records;
  double span_us = 0;  // first start to last end
  double busy_us = 0;  // union of the records' intervals
  double idle_us() const { return span_us - busy_us; }
};

class KernelTrace {
 public:
  // Loads CUPTI and enables kernel, memset and memcpy activity for the process. Only one trace
  // may be active at a time.
  static absl::StatusOr<std::unique_ptr<KernelTrace>> Start();
  ~KernelTrace();
  // Flushes and disables the activity; returns every record since Start(), sorted by start.
  absl::StatusOr<std::vector<TraceRecord>> Stop();

 private:
  KernelTrace() = default;
  bool stopped_ = false;
};

// Splits graph-launched records into steps (one per correlation id), in launch order; records
// launched outside a graph are left out.
std::vector<StepTimeline> StepTimelines(const std::vector<TraceRecord>& records);

// A human-readable timeline: one line per record (start, duration, gap after the previous end on
// any stream, stream, grid, name shortened to `name_width` characters).
std::string FormatTimeline(const StepTimeline& step, int name_width = 90);

}  // namespace ottr::cuda

#endif  // OTTR_RUNTIME_CUDA_KERNEL_TRACE_H_
