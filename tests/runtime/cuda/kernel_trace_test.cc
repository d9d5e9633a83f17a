// runtime/cuda/kernel_trace.h: cutting CUPTI's records into steps and the step's summary (span,
// busy time as the union of overlapping intervals, idle time), and the printed timeline. These
// need no device: the records are made here. (`ottr bench --trace` runs the CUPTI side on the
// GPU machine; bench/gpu_trace.sh.)
#include "runtime/cuda/kernel_trace.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ottr {
namespace {

using cuda::TraceRecord;

TraceRecord Kernel(const char* name, uint32_t corr, uint32_t graph, uint64_t start, uint64_t end, uint32_t stream = 7) {
  TraceRecord r;
  r.name = name;
  r.correlation = corr;
  r.graph = graph;
  r.start_ns = start;
  r.end_ns = end;
  r.stream = stream;
  r.grid = 4;
  return r;
}

TEST(KernelTraceTest, StepTimelinesCutGraphLaunchesIntoSteps) {
  // Two replays of graph 3 (correlations 10 and 11), out of order, and a kernel launched outside
  // any graph, which is left out.
  const std::vector<TraceRecord> records = {
      Kernel("b", 11, 3, 5'000, 6'000), Kernel("outside", 9, 0, 0, 100),
      Kernel("a", 10, 3, 1'000, 2'000), Kernel("c", 10, 3, 1'500, 2'500, 8),  // overlaps a on another stream
      Kernel("d", 10, 3, 3'000, 3'500),                                       // after a 500 ns gap
      Kernel("a", 11, 3, 4'000, 4'800)};
  const std::vector<cuda::StepTimeline> steps = cuda::StepTimelines(records);
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_EQ(steps[0].records.size(), 3u);
  EXPECT_EQ(steps[0].records[0].name, "a");
  EXPECT_EQ(steps[0].records[1].name, "c");
  EXPECT_EQ(steps[0].records[2].name, "d");
  EXPECT_DOUBLE_EQ(steps[0].span_us, 2.5);   // 1000 .. 3500 ns
  EXPECT_DOUBLE_EQ(steps[0].busy_us, 2.0);   // [1000, 2500) and [3000, 3500)
  EXPECT_DOUBLE_EQ(steps[0].idle_us(), 0.5);
  ASSERT_EQ(steps[1].records.size(), 2u);
  EXPECT_DOUBLE_EQ(steps[1].span_us, 2.0);   // 4000 .. 6000 ns
  EXPECT_DOUBLE_EQ(steps[1].busy_us, 1.8);   // 800 + 1000 ns
}

TEST(KernelTraceTest, FormatTimelineShowsStartsDurationsAndGaps) {
  const std::vector<cuda::StepTimeline> steps =
      cuda::StepTimelines({Kernel("first_kernel", 1, 2, 10'000, 12'000), Kernel("second_kernel", 1, 2, 13'500, 14'000)});
  ASSERT_EQ(steps.size(), 1u);
  const std::string text = cuda::FormatTimeline(steps[0], 8);
  EXPECT_TRUE(absl::StrContains(text, "      0.00      2.00     0.00       7       4  first_ke\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "      3.50      0.50     1.50       7       4  second_k\n")) << text;
}

}  // namespace
}  // namespace ottr
