#include "runtime/cuda/kernel_trace.h"

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ottr::cuda {
namespace {

// The CUPTI entry points, resolved from the library at Start().
struct Cupti {
  void* lib = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
};

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};
constexpr size_t kBufferBytes = size_t{8} << 20;

std::mutex g_mu;
Cupti g_cupti;
std::vector<TraceRecord>* g_records = nullptr;  // non-null while a trace is active
bool g_active = false;

// "void foo<...>(args)" -> "foo<...>", demangled where it can be.
std::string ShortName(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  // Drop a leading return type ("void "), anonymous namespaces (their "(" is not the parameter
  // list's) and the parameter list.
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

// The fields every activity record kind here has under the same names.
template <typename Activity>
TraceRecord Common(const Activity& x, TraceRecord::Kind kind, std::string name) {
  TraceRecord r;
  r.kind = kind;
  r.name = std::move(name);
  r.stream = x.streamId;
  r.correlation = x.correlationId;
  r.graph = x.graphId;
  r.start_ns = x.start;
  r.end_ns = x.end;
  return r;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* a = nullptr;
  while (g_records != nullptr && g_cupti.next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
    TraceRecord r;
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        r = Common(*k, TraceRecord::Kind::kKernel, k->name != nullptr ? ShortName(k->name) : "?");
        r.grid = int64_t{k->gridX} * k->gridY * k->gridZ;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        r = Common(*m, TraceRecord::Kind::kMemset, absl::StrCat("memset ", m->bytes, " B"));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        r = Common(*m, TraceRecord::Kind::kMemcpy, absl::StrCat("memcpy ", m->bytes, " B"));
        break;
      }
      default: continue;
    }
    g_records->push_back(std::move(r));
  }
  std::free(buffer);
}

absl::Status CuptiError(CUptiResult r, const char* what) {
  return r == CUPTI_SUCCESS ? absl::OkStatus() : absl::InternalError(absl::StrCat(what, " failed (CUPTI error ", r, ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelTrace>> KernelTrace::Start() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active) return absl::FailedPreconditionError("a kernel trace is already active");
  if (g_cupti.lib == nullptr) {
    void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return absl::NotFoundError(absl::StrCat("a kernel trace needs CUPTI (libcupti.so.13 from the CUDA toolkit) on the "
                                              "library path: ", dlerror()));
    }
    Cupti c;
    c.lib = lib;
    c.register_callbacks = reinterpret_cast<decltype(c.register_callbacks)>(dlsym(lib, "cuptiActivityRegisterCallbacks"));
    c.enable = reinterpret_cast<decltype(c.enable)>(dlsym(lib, "cuptiActivityEnable"));
    c.disable = reinterpret_cast<decltype(c.disable)>(dlsym(lib, "cuptiActivityDisable"));
    c.flush_all = reinterpret_cast<decltype(c.flush_all)>(dlsym(lib, "cuptiActivityFlushAll"));
    c.next_record = reinterpret_cast<decltype(c.next_record)>(dlsym(lib, "cuptiActivityGetNextRecord"));
    if (!c.register_callbacks || !c.enable || !c.disable || !c.flush_all || !c.next_record) {
      dlclose(lib);
      return absl::NotFoundError("libcupti lacks the activity API entry points");
    }
    g_cupti = c;
    if (absl::Status s = CuptiError(g_cupti.register_callbacks(BufferRequested, BufferCompleted),
                                    "cuptiActivityRegisterCallbacks");
        !s.ok()) {
      return s;
    }
  }
  g_records = new std::vector<TraceRecord>();
  for (CUpti_ActivityKind k : kKinds) {
    if (absl::Status s = CuptiError(g_cupti.enable(k), "cuptiActivityEnable"); !s.ok()) {
      for (CUpti_ActivityKind d : kKinds) g_cupti.disable(d);
      delete g_records;
      g_records = nullptr;
      return s;
    }
  }
  g_active = true;
  return std::unique_ptr<KernelTrace>(new KernelTrace());
}

KernelTrace::~KernelTrace() {
  if (!stopped_) (void)Stop();
}

absl::StatusOr<std::vector<TraceRecord>> KernelTrace::Stop() {
  stopped_ = true;
  // Flush first (the completion callback takes the lock), then detach the records.
  const CUptiResult flushed = g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  for (CUpti_ActivityKind k : kKinds) g_cupti.disable(k);
  std::unique_ptr<std::vector<TraceRecord>> records(g_records);
  g_records = nullptr;
  g_active = false;
  if (absl::Status s = CuptiError(flushed, "cuptiActivityFlushAll"); !s.ok()) return s;
  std::sort(records->begin(), records->end(),
            [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
  return std::move(*records);
}

std::vector<StepTimeline> StepTimelines(const std::vector<TraceRecord>& records) {
  std::map<uint32_t, StepTimeline> by_launch;  // correlation ids rise with launch order
  for (const TraceRecord& r : records) {
    if (r.graph != 0) by_launch[r.correlation].records.push_back(r);
  }
  std::vector<StepTimeline> steps;
  for (auto& [corr, step] : by_launch) {
    std::vector<TraceRecord>& rs = step.records;
    std::sort(rs.begin(), rs.end(), [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
    const uint64_t t0 = rs.front().start_ns;
    uint64_t last_end = t0, busy = 0, cover_end = t0;
    for (TraceRecord& r : rs) {
      // Union of intervals: records are sorted by start.
      if (r.end_ns > cover_end) {
        busy += r.end_ns - std::max(r.start_ns, cover_end);
        cover_end = r.end_ns;
      }
      last_end = std::max(last_end, r.end_ns);
    }
    step.span_us = static_cast<double>(last_end - t0) / 1000.0;
    step.busy_us = static_cast<double>(busy) / 1000.0;
    steps.push_back(std::move(step));
  }
  return steps;
}

std::string FormatTimeline(const StepTimeline& step, int name_width) {
  std::string out = absl::StrFormat("%10s %9s %8s %7s %7s  %s\n", "start_us", "dur_us", "gap_us", "stream", "grid", "name");
  if (step.records.empty()) return out;
  const uint64_t t0 = step.records.front().start_ns;
  uint64_t cover_end = t0;
  for (const TraceRecord& r : step.records) {
    const double gap = r.start_ns > cover_end ? static_cast<double>(r.start_ns - cover_end) / 1000.0 : 0.0;
    cover_end = std::max(cover_end, r.end_ns);
    std::string name = r.name;
    if (static_cast<int>(name.size()) > name_width) name = name.substr(0, name_width);
    absl::StrAppendFormat(&out, "%10.2f %9.2f %8.2f %7d %7d  %s\n", static_cast<double>(r.start_ns - t0) / 1000.0,
                          static_cast<double>(r.end_ns - r.start_ns) / 1000.0, gap, r.stream, r.grid, name);
  }
  return out;
}

}  // namespace ottr::cuda
