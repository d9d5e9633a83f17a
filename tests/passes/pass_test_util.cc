#include "tests/passes/pass_test_util.h"

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/tensor_compare.h"
#include "tests/test_util.h"

namespace ottr::testing {

std::unique_ptr<ir::Graph> ParseInferred(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  absl::Status s = ir::InferGraphShapes(ir::OpRegistry::Global(), **g);
  EXPECT_TRUE(s.ok()) << s;
  return std::move(*g);
}

std::string IrBody(const ir::Graph& g) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(g.ToString(), '\n')) {
    if (absl::StartsWith(line, "  %") || absl::StartsWith(line, "  output")) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

runtime::TensorMap RandomFeeds(const ir::Graph& g, uint64_t seed) {
  runtime::TensorMap feeds;
  for (const ir::Value* v : g.inputs()) {
    const std::vector<int64_t> dims = ir::StaticDims(*v->type().shape);
    ir::Tensor t = RandomFloat(dims, seed++, -1.0f, 1.0f);
    if (v->type().dtype == ir::DType::kFloat64) {
      ir::Tensor c(v->type().dtype, dims);
      for (int64_t i = 0; i < t.num_elements(); ++i) c.data<double>()[i] = t.GetAsDouble(i);
      t = std::move(c);
    }
    feeds[v->name()] = std::move(t);
  }
  return feeds;
}

std::vector<ir::Tensor> RunOnCpu(const ir::Graph& g, const runtime::TensorMap& feeds) {
  auto e = runtime::cpu::CpuExecutor::Create(g);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  auto out = (*e)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::move(*out) : std::vector<ir::Tensor>{};
}

PassRun RunPassOnText(std::unique_ptr<passes::Pass> pass, const std::string& text) {
  PassRun r;
  r.before = ParseInferred(text);
  r.after = ParseInferred(text);
  if (!r.before || !r.after) return r;
  std::ostringstream remarks;
  pass->set_remarks(&remarks);
  auto changed = pass->Run(*r.after);
  EXPECT_TRUE(changed.ok()) << changed.status();
  r.changed = changed.ok() && *changed;
  absl::Status v = ir::VerifyGraph(*r.after);
  EXPECT_TRUE(v.ok()) << v << "\n" << r.after->ToString();
  r.remarks = remarks.str();
  return r;
}

void ExpectSameOutputs(const PassRun& r, uint64_t seed, double rtol) {
  ExpectSameOutputsOn(r, RandomFeeds(*r.before, seed), rtol);
}

void ExpectSameOutputsOn(const PassRun& r, const runtime::TensorMap& feeds, double rtol) {
  const std::vector<ir::Tensor> want = RunOnCpu(*r.before, feeds);
  const std::vector<ir::Tensor> got = RunOnCpu(*r.after, feeds);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_FALSE(want.empty());
  for (size_t o = 0; o < want.size(); ++o) {
    EXPECT_EQ(got[o].dims(), want[o].dims()) << "output " << o;
    if (rtol == 0.0) {
      EXPECT_TRUE(got[o].BitwiseEquals(want[o])) << "output " << o << "\n got  " << got[o].DebugString(8)
                                                 << "\n want " << want[o].DebugString(8);
    } else {
      absl::Status s = runtime::AllClose(got[o], want[o], rtol, rtol);
      EXPECT_TRUE(s.ok()) << "output " << o << ": " << s;
    }
  }
}

ModelStep RunStepOnCpu(const ir::Graph& forward, const std::vector<int64_t>& x_dims, const passes::TrainingSpec& spec,
                       float lr, passes::PassManagerOptions options) {
  ModelStep m;
  auto step = passes::BuildTrainingGraph(forward, spec, std::move(options));
  EXPECT_TRUE(step.ok()) << step.status();
  if (!step.ok()) return m;
  runtime::TensorMap feeds;
  feeds[forward.inputs()[0]->name()] = RandomFloat(x_dims, 3, -1.0f, 1.0f);
  feeds[passes::kLabelsInput] = RandomInt64({x_dims[0]}, 4, 0, 9);
  feeds[passes::kLrInput] = ir::Tensor::Scalar<float>(lr);
  m.outputs = RunOnCpu(**step, feeds);
  if (!m.outputs.empty()) m.step = std::move(*step);
  return m;
}

void ExpectSameStepOutputs(const ModelStep& a, const ModelStep& b) {
  ASSERT_TRUE(a.step && b.step);
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  ASSERT_GT(a.outputs.size(), 1u);
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_TRUE(a.outputs[i].BitwiseEquals(b.outputs[i])) << a.step->outputs()[i]->name();
  }
}

}  // namespace ottr::testing
