// Tests of the memory planner (passes/memory_planner.h) and of the CPU executor running from its
// arena: sharing rules on small graphs, the verifier on corrupted plans, property tests on random
// graphs (every plan verifies; planned runs equal unplanned ones bit for bit; a corrupted plan is
// rejected), the training step of every model in models/ (targets and identical results), and
// the gradient-check graphs of every op family.
#include "passes/memory_planner.h"

#include <cstdio>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "importer/onnx_importer.h"
#include "ir/op_registry.h"
#include "ir/status.h"
#include "passes/lower_gradient.h"
#include "passes/standard_passes.h"
#include "passes/training.h"
#include "runtime/cpu/cpu_executor.h"
#include "tests/passes/gradient_check.h"
#include "tests/test_util.h"

namespace ottr {
namespace {

using ir::DType;
using ir::Tensor;
using ir::Value;
using passes::Alias;
using passes::MemoryPlan;
using passes::PlanOptions;

// --- helpers ---------------------------------------------------------------------------------

// A small graph built node by node with shapes inferred as it goes.
class Builder {
 public:
  Builder() : g_(std::make_unique<ir::Graph>("test")) {
    g_->set_opset_import("", ir::kMaxOnnxOpset);
    g_->set_opset_import(std::string(ir::kOttrDomain), 1);
  }
  Value* Input(const std::string& name, std::vector<int64_t> dims) {
    return *g_->AddInput(name, ir::TensorType(DType::kFloat32, ir::ShapeFromDims(dims)));
  }
  Value* Init(const std::string& name, Tensor t) { return *g_->AddInitializer(name, std::move(t)); }
  Value* Op(const std::string& op, std::vector<Value*> inputs, const std::string& name,
            std::map<std::string, ir::Attribute> attrs = {}, const std::string& domain = "") {
    auto n = g_->AddNode({op, domain, std::move(inputs), {name}, std::move(attrs), name});
    EXPECT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(ir::InferNodeShapes(ir::OpRegistry::Global(), **n).ok());
    return (*n)->output(0);
  }
  ir::Graph& g() { return *g_; }
  std::unique_ptr<ir::Graph> Release() { return std::move(g_); }

 private:
  std::unique_ptr<ir::Graph> g_;
};

MemoryPlan Plan(const ir::Graph& g, const PlanOptions& o = {}) {
  absl::StatusOr<MemoryPlan> plan = passes::PlanMemory(g, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return MemoryPlan();
  absl::Status v = passes::VerifyPlan(g, *plan);
  EXPECT_TRUE(v.ok()) << v << "\n" << passes::FormatPlan(*plan);
  return *std::move(plan);
}

bool SameBuffer(const MemoryPlan& p, const Value* a, const Value* b) {
  return p.buffer_of.contains(a) && p.buffer_of.contains(b) && p.buffer_of.at(a) == p.buffer_of.at(b);
}

// Runs `g` twice with and without `plan` from the same feeds: outputs and every initializer's
// state after each run must be bitwise equal.
void ExpectPlannedRunsMatch(const ir::Graph& g, const MemoryPlan& plan,
                            const std::vector<runtime::TensorMap>& steps,
                            bool auto_commit = true) {
  runtime::cpu::CpuExecutorOptions plain_options, planned_options;
  plain_options.auto_commit = planned_options.auto_commit = auto_commit;
  planned_options.memory_plan = std::make_shared<MemoryPlan>(plan);
  auto plain = runtime::cpu::CpuExecutor::Create(g, plain_options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto planned = runtime::cpu::CpuExecutor::Create(g, planned_options);
  ASSERT_TRUE(planned.ok()) << planned.status();
  for (size_t s = 0; s < steps.size(); ++s) {
    auto a = (*plain)->Run(steps[s]);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = (*planned)->Run(steps[s]);
    ASSERT_TRUE(b.ok()) << b.status() << "\n" << passes::FormatPlan(plan);
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_TRUE((*a)[i].BitwiseEquals((*b)[i]))
          << "step " << s << " output " << g.outputs()[i]->name() << ": " << (*a)[i].DebugString()
          << " vs " << (*b)[i].DebugString();
    }
    if (!auto_commit) {
      (*plain)->CommitUpdates();
      (*planned)->CommitUpdates();
    }
    for (const Value* v : g.initializers()) {
      const Tensor* x = (*plain)->State(v->name());
      const Tensor* y = (*planned)->State(v->name());
      ASSERT_NE(x, nullptr);
      ASSERT_NE(y, nullptr);
      EXPECT_TRUE(x->BitwiseEquals(*y)) << "step " << s << " state " << v->name();
    }
  }
}

// --- sharing rules ---------------------------------------------------------------------------

TEST(MemoryPlannerTest, ViewsShareTheirInputsBuffer) {
  Builder b;
  Value* x = b.Input("x", {8, 16});
  Value* shape = b.Init("shape", Tensor::FromVector<int64_t>({2}, {16, 8}));
  Value* e = b.Op("Exp", {x}, "e");
  Value* r = b.Op("Reshape", {e, shape}, "r");
  Value* f = b.Op("Flatten", {r}, "f", {{"axis", ir::Attribute(int64_t{1})}});
  Value* y = b.Op("Neg", {f}, "y");
  b.g().AddOutput(y);
  b.g().AddOutput(e);  // e stays live to the end, so Neg cannot write over it
  MemoryPlan p = Plan(b.g());
  EXPECT_TRUE(SameBuffer(p, e, r));
  EXPECT_TRUE(SameBuffer(p, e, f));
  EXPECT_EQ(p.alias_of.at(r).kind, Alias::Kind::kView);
  EXPECT_EQ(p.alias_of.at(f).source, r);
  EXPECT_FALSE(SameBuffer(p, y, e));
  // The buffer of e, r and f lives to the end (e is an output).
  EXPECT_EQ(p.buffers[p.buffer_of.at(r)].last, static_cast<int>(p.schedule.size()) - 1);
}

TEST(MemoryPlannerTest, ElementwiseWritesOverADyingInput) {
  Builder b;
  Value* x = b.Input("x", {8, 16});
  Value* w = b.Init("w", testing::RandomFloat({8, 16}, 1));
  Value* h = b.Op("Mul", {x, w}, "h");
  Value* a = b.Op("Relu", {h}, "a");
  Value* s = b.Op("Sigmoid", {a}, "s");
  b.g().AddOutput(s);
  MemoryPlan p = Plan(b.g());
  EXPECT_TRUE(SameBuffer(p, h, a));
  EXPECT_TRUE(SameBuffer(p, a, s));
  EXPECT_EQ(p.alias_of.at(a).kind, Alias::Kind::kInPlace);
  // x is a graph input that dies at Mul: Mul may write over it (it is fed again each step).
  EXPECT_TRUE(SameBuffer(p, x, h));
  // Never over an initializer that has no update.
  EXPECT_FALSE(SameBuffer(p, w, h));
  // With in-place reuse off, every output has its own buffer.
  PlanOptions off;
  off.in_place = false;
  MemoryPlan q = Plan(b.g(), off);
  EXPECT_FALSE(SameBuffer(q, h, a));
  EXPECT_FALSE(SameBuffer(q, x, h));
  EXPECT_GT(q.peak_bytes, p.peak_bytes);
  ExpectPlannedRunsMatch(b.g(), p, {{{"x", testing::RandomFloat({8, 16}, 2)}}});
}

TEST(MemoryPlannerTest, NoInPlaceWhenTheInputIsReadLaterOrIsAnOutput) {
  Builder b;
  Value* x = b.Input("x", {64});
  Value* h = b.Op("Exp", {x}, "h");
  Value* a = b.Op("Relu", {h}, "a");
  Value* later = b.Op("Neg", {h}, "later");  // reads h after Relu in any order that runs Relu first
  Value* both = b.Op("Add", {a, later}, "both");
  b.g().AddOutput(both);
  PlanOptions keep_order;
  keep_order.reorder = false;
  MemoryPlan p = Plan(b.g(), keep_order);
  EXPECT_FALSE(SameBuffer(p, h, a));   // Neg still reads h
  EXPECT_TRUE(SameBuffer(p, h, later));  // Neg is h's last reader
  // A graph output is read at the end: nothing writes over it.
  Builder c;
  Value* x2 = c.Input("x", {64});
  Value* h2 = c.Op("Exp", {x2}, "h");
  Value* a2 = c.Op("Relu", {h2}, "a");
  c.g().AddOutput(h2);
  c.g().AddOutput(a2);
  MemoryPlan q = Plan(c.g());
  EXPECT_FALSE(SameBuffer(q, h2, a2));
  // An op reading the dying buffer twice (x + x) does not take it over.
  Builder d;
  Value* x3 = d.Input("x", {64});
  Value* h3 = d.Op("Exp", {x3}, "h");
  Value* s3 = d.Op("Sum", {h3, h3}, "s");
  d.g().AddOutput(s3);
  MemoryPlan r = Plan(d.g());
  EXPECT_FALSE(SameBuffer(r, h3, s3));
  // Broadcast operands are not written over: Add(x[8,16], bias[16]) may only take over x.
  Builder e;
  Value* x4 = e.Input("x", {8, 16});
  Value* bias = e.Input("bias", {16});
  Value* y4 = e.Op("Add", {x4, bias}, "y");
  e.g().AddOutput(e.Op("Neg", {y4}, "z"));
  MemoryPlan t = Plan(e.g());
  EXPECT_TRUE(SameBuffer(t, x4, y4));
  EXPECT_FALSE(SameBuffer(t, bias, y4));
}

TEST(MemoryPlannerTest, OptimizerUpdatesWriteTheirStateInPlace) {
  Builder b;
  Value* x = b.Input("x", {4, 8});
  Value* lr = b.Input("lr", {});
  Value* w = b.Init("w", testing::RandomFloat({4, 8}, 3));
  Value* m = b.Init("w.m", Tensor(DType::kFloat32, {4, 8}));
  Value* v = b.Init("w.v", Tensor(DType::kFloat32, {4, 8}));
  Value* step = b.Init("step", Tensor::Scalar<int64_t>(0));
  Value* one = b.Init("one", Tensor::Scalar<int64_t>(1));
  Value* step1 = b.Op("Add", {step, one}, "step1");
  Value* y = b.Op("Mul", {x, w}, "y");
  Value* grad = b.Op("Tanh", {y}, "grad");
  auto adam = b.g().AddNode({"AdamUpdate", std::string(ir::kOttrDomain), {w, grad, lr, step1, m, v},
                             {"w.new", "w.m.new", "w.v.new"}, {}, "adam"});
  ASSERT_TRUE(adam.ok());
  ASSERT_TRUE(ir::InferNodeShapes(ir::OpRegistry::Global(), **adam).ok());
  Value* loss = b.Op("ReduceSum", {y}, "loss", {{"keepdims", ir::Attribute(int64_t{0})}});
  b.g().AddOutput(loss);
  ASSERT_TRUE(b.g().AddUpdate(w, (*adam)->output(0)).ok());
  ASSERT_TRUE(b.g().AddUpdate(m, (*adam)->output(1)).ok());
  ASSERT_TRUE(b.g().AddUpdate(v, (*adam)->output(2)).ok());
  ASSERT_TRUE(b.g().AddUpdate(step, step1).ok());
  MemoryPlan p = Plan(b.g());
  EXPECT_TRUE(p.update_copies.empty()) << passes::FormatPlan(p);
  EXPECT_TRUE(SameBuffer(p, w, (*adam)->output(0)));
  EXPECT_TRUE(SameBuffer(p, m, (*adam)->output(1)));
  EXPECT_TRUE(SameBuffer(p, v, (*adam)->output(2)));
  EXPECT_TRUE(SameBuffer(p, step, step1));
  EXPECT_TRUE(p.buffers[p.buffer_of.at(w)].persistent);
  std::vector<runtime::TensorMap> steps;
  for (int s = 0; s < 3; ++s) {
    steps.push_back({{"x", testing::RandomFloat({4, 8}, 10 + s)}, {"lr", Tensor::Scalar<float>(0.01f)}});
  }
  ExpectPlannedRunsMatch(b.g(), p, steps);
  // Without in-place updates each update is a copy, and the executor can defer its commit.
  PlanOptions copies;
  copies.in_place_updates = false;
  MemoryPlan q = Plan(b.g(), copies);
  EXPECT_EQ(q.update_copies.size(), 4u);
  EXPECT_EQ(q.notes.size(), 4u);
  ExpectPlannedRunsMatch(b.g(), q, steps, /*auto_commit=*/false);
  // A deferred commit cannot work when the step already overwrote the state.
  runtime::cpu::CpuExecutorOptions o;
  o.auto_commit = false;
  o.memory_plan = std::make_shared<MemoryPlan>(p);
  auto e = runtime::cpu::CpuExecutor::Create(b.g(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::StrContains(e.status().message(), "in_place_updates")) << e.status();
}

TEST(MemoryPlannerTest, UpdateNeedsACopyWhenTheOldValueIsReadAfterIt) {
  Builder b;
  Value* x = b.Input("x", {16});
  Value* w = b.Init("w", testing::RandomFloat({16}, 4));
  Value* w_new = b.Op("Add", {w, x}, "w.new");
  Value* y = b.Op("Mul", {w, w_new}, "y");  // reads the old w after w.new exists
  b.g().AddOutput(y);
  ASSERT_TRUE(b.g().AddUpdate(w, w_new).ok());
  MemoryPlan p = Plan(b.g());
  ASSERT_EQ(p.update_copies.size(), 1u);
  EXPECT_EQ(p.update_copies[0].target, w);
  EXPECT_FALSE(SameBuffer(p, w, w_new));
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_TRUE(absl::StrContains(p.notes[0], "not the last reader of 'w'")) << p.notes[0];
  ExpectPlannedRunsMatch(b.g(), p, {{{"x", testing::RandomFloat({16}, 5)}},
                                    {{"x", testing::RandomFloat({16}, 6)}}});
  // A view of the state read later blocks the in-place update just the same.
  Builder c;
  Value* x2 = c.Input("x", {16});
  Value* w2 = c.Init("w", testing::RandomFloat({16}, 4));
  Value* shape = c.Init("shape", Tensor::FromVector<int64_t>({2}, {4, 4}));
  Value* view = c.Op("Reshape", {w2, shape}, "w.view");
  Value* w2_new = c.Op("Add", {w2, x2}, "w.new");
  Value* flat = c.Op("Reshape", {w2_new, c.Init("shape16", Tensor::FromVector<int64_t>({2}, {4, 4}))}, "flat");
  c.g().AddOutput(c.Op("Mul", {view, flat}, "y"));
  ASSERT_TRUE(c.g().AddUpdate(w2, w2_new).ok());
  MemoryPlan q = Plan(c.g());
  EXPECT_EQ(q.update_copies.size(), 1u);
  ExpectPlannedRunsMatch(c.g(), q, {{{"x", testing::RandomFloat({16}, 7)}},
                                    {{"x", testing::RandomFloat({16}, 8)}}});
}

TEST(MemoryPlannerTest, WorkspacesAlignmentAndReport) {
  Builder b;
  Value* x = b.Input("x", {3, 5});
  Value* w = b.Init("w", testing::RandomFloat({5, 7}, 9));
  Value* y = b.Op("MatMul", {x, w}, "y");
  Value* z = b.Op("Relu", {y}, "z");
  b.g().AddOutput(z);
  PlanOptions o;
  o.workspace_bytes = [](const ir::Node& n) -> int64_t { return n.op_type() == "MatMul" ? 1000 : 0; };
  MemoryPlan p = Plan(b.g(), o);
  ASSERT_EQ(p.workspace_offset.size(), 1u);
  const ir::Node* mm = y->producer();
  ASSERT_TRUE(p.workspace_offset.contains(mm));
  for (const passes::Buffer& buf : p.buffers) {
    EXPECT_EQ(buf.offset % 256, 0) << buf.offset;
    if (buf.workspace_of != nullptr) {
      EXPECT_EQ(buf.bytes, 1000);
      EXPECT_EQ(buf.first, buf.last);
    }
  }
  // The naive sum counts the workspace, x, w, y and z (each rounded up to 256 bytes).
  EXPECT_EQ(p.naive_bytes, 1024 + 256 + 256 + 256 + 256);
  const std::string report = passes::FormatPlan(p);
  EXPECT_TRUE(absl::StrContains(report, absl::StrCat("memory plan: peak ", p.peak_bytes, " bytes, lower bound ",
                                                     p.lower_bound_bytes, " bytes, naive ", p.naive_bytes,
                                                     " bytes\n")))
      << report;
  EXPECT_TRUE(absl::StrContains(report, "workspace of node 'y' (MatMul)")) << report;
  ExpectPlannedRunsMatch(b.g(), p, {{{"x", testing::RandomFloat({3, 5}, 10)}}});
  // Another alignment.
  PlanOptions a64;
  a64.alignment = 64;
  MemoryPlan q = Plan(b.g(), a64);
  for (const passes::Buffer& buf : q.buffers) EXPECT_EQ(buf.offset % 64, 0);
  EXPECT_LE(q.peak_bytes, p.peak_bytes);
}

TEST(MemoryPlannerTest, SchedulerRunsEachConsumerEarly) {
  // Four big values made first and consumed by nodes inserted at the end (like gradients and
  // their optimizer updates): the given order keeps all four alive, the scheduler one at a time.
  Builder b;
  Value* x = b.Input("x", {1024});
  std::vector<Value*> big;
  for (int i = 0; i < 4; ++i) big.push_back(b.Op("Exp", {b.Op("Neg", {x}, absl::StrCat("n", i))}, absl::StrCat("e", i)));
  for (int i = 0; i < 4; ++i) {
    b.g().AddOutput(b.Op("ReduceSum", {big[i]}, absl::StrCat("s", i), {{"keepdims", ir::Attribute(int64_t{0})}}));
  }
  MemoryPlan p = Plan(b.g());
  EXPECT_LT(p.peak_bytes, p.given.peak_bytes) << passes::FormatPlan(p);
  EXPECT_NE(p.schedule, p.given_schedule);
  EXPECT_LE(p.peak_bytes, 3 * 4096 + 4 * 256);  // x, two big values at a time, the sums
  PlanOptions keep;
  keep.reorder = false;
  MemoryPlan q = Plan(b.g(), keep);
  EXPECT_EQ(q.schedule, q.given_schedule);
  EXPECT_EQ(q.peak_bytes, p.given.peak_bytes);
  ExpectPlannedRunsMatch(b.g(), p, {{{"x", testing::RandomFloat({1024}, 11)}}});
}

// A weight-gradient-like side branch (Mul reads the activation a for the last time, a small sum
// out) and a data-gradient-like chain (Sin, Cos, Sqrt) both reading g: the memory-lowest order
// runs the side branch first, since it frees a; the critical-path order (for several streams)
// runs the longer chain first. With slack it is taken, and with reuse_delay the bytes of a stay
// its own for that many positions after its last reader.
TEST(MemoryPlannerTest, CriticalPathOrderRunsTheLongerChainFirst) {
  Builder b;
  Value* x = b.Input("x", {1024});
  Value* a = b.Op("Exp", {x}, "a");
  Value* g = b.Op("Neg", {x}, "g");
  Value* m = b.Op("Mul", {g, a}, "m");
  b.g().AddOutput(b.Op("ReduceSum", {m}, "s", {{"keepdims", ir::Attribute(int64_t{0})}}));
  Value* c = b.Op("Sqrt", {b.Op("Cos", {b.Op("Sin", {g}, "c1")}, "c2")}, "c3");
  b.g().AddOutput(b.Op("ReduceSum", {c}, "t", {{"keepdims", ir::Attribute(int64_t{0})}}));
  auto position = [](const MemoryPlan& p, const std::string& name) {
    for (size_t k = 0; k < p.schedule.size(); ++k) {
      if (p.schedule[k]->output(0)->name() == name) return static_cast<int>(k);
    }
    return -1;
  };
  MemoryPlan memory = Plan(b.g());
  EXPECT_NE(memory.schedule_name, "critical path");
  EXPECT_LT(position(memory, "m"), position(memory, "c1")) << passes::FormatPlan(memory);
  PlanOptions latency;
  latency.critical_path_slack = 1.0;
  MemoryPlan chain = Plan(b.g(), latency);
  EXPECT_EQ(chain.schedule_name, "critical path") << passes::FormatPlan(chain);
  EXPECT_LT(position(chain, "c1"), position(chain, "m")) << passes::FormatPlan(chain);
  ExpectPlannedRunsMatch(b.g(), chain, {{{"x", testing::RandomFloat({1024}, 12)}}});
  latency.reuse_delay = 2;
  MemoryPlan delayed = Plan(b.g(), latency);
  ASSERT_EQ(delayed.schedule_name, "critical path");
  const passes::Buffer& ab = delayed.buffers[delayed.buffer_of.at(a)];
  const int last_read = position(delayed, "m");
  EXPECT_EQ(ab.last, std::min<int>(last_read + 2, static_cast<int>(delayed.schedule.size()) - 1))
      << passes::FormatPlan(delayed);
  EXPECT_GE(delayed.peak_bytes, chain.peak_bytes);
  ExpectPlannedRunsMatch(b.g(), delayed, {{{"x", testing::RandomFloat({1024}, 13)}}});
  latency.critical_path_slack = -1;
  EXPECT_NE(Plan(b.g(), latency).schedule_name, "critical path");
}

TEST(MemoryPlannerTest, NeedsStaticTypes) {
  ir::Graph g("dynamic");
  g.set_opset_import("", ir::kMaxOnnxOpset);
  Value* x = *g.AddInput("x", ir::TensorType(DType::kFloat32, ir::Shape{ir::Dim::Symbol("N")}));
  auto n = g.AddNode({"Relu", "", {x}, {"y"}, {}, "relu"});
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(ir::InferNodeShapes(ir::OpRegistry::Global(), **n).ok());
  g.AddOutput((*n)->output(0));
  absl::StatusOr<MemoryPlan> p = passes::PlanMemory(g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "'x'")) << p.status();
}

// --- the verifier ------------------------------------------------------------------------------

// x -> h = Exp(x) -> a = Relu(h) -> outputs a, later = Neg(h) (given order: Relu before Neg).
std::unique_ptr<ir::Graph> ReadAfterGraph() {
  Builder b;
  Value* x = b.Input("x", {64});
  Value* h = b.Op("Exp", {x}, "h");
  Value* a = b.Op("Relu", {h}, "a");
  Value* later = b.Op("Neg", {h}, "later");
  b.g().AddOutput(a);
  b.g().AddOutput(later);
  return b.Release();
}

PlanOptions KeepOrder() {
  PlanOptions o;
  o.reorder = false;
  return o;
}

TEST(MemoryPlanVerifierTest, RejectsOverlappingLiveBuffers) {
  auto g = ReadAfterGraph();
  MemoryPlan p = Plan(*g, KeepOrder());
  const int ha = p.buffer_of.at(g->FindValue("h"));
  const int aa = p.buffer_of.at(g->FindValue("a"));
  ASSERT_NE(ha, aa);
  p.buffers[aa].offset = p.buffers[ha].offset;
  absl::Status s = passes::VerifyPlan(*g, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "overlap")) << s;
}

TEST(MemoryPlanVerifierTest, RejectsAnInPlaceWriteOverAValueStillRead) {
  auto g = ReadAfterGraph();
  PlanOptions keep;
  keep.reorder = false;
  MemoryPlan p = Plan(*g, keep);
  const Value* h = g->FindValue("h");
  const Value* a = g->FindValue("a");
  // Force a = Relu(h) into h's buffer although Neg reads h afterwards.
  const int hb = p.buffer_of.at(h);
  const int ab = p.buffer_of.at(a);
  p.buffers[ab].values.clear();
  p.buffers[hb].values.push_back(a);
  p.buffers[hb].last = std::max(p.buffers[hb].last, p.buffers[ab].last);
  p.buffer_of[a] = hb;
  p.alias_of[a] = {Alias::Kind::kInPlace, h};
  absl::Status s = passes::VerifyPlan(*g, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "reads 'h'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "finds 'a'")) << s;
}

TEST(MemoryPlanVerifierTest, RejectsShortIntervalsBadSchedulesAndIllegalSharing) {
  auto g = ReadAfterGraph();
  const MemoryPlan good = Plan(*g, KeepOrder());
  {
    MemoryPlan p = good;
    p.buffers[p.buffer_of.at(g->FindValue("h"))].last = 0;
    absl::Status s = passes::VerifyPlan(*g, p);
    EXPECT_TRUE(absl::StrContains(s.message(), "lives over")) << s;
  }
  {
    MemoryPlan p = good;
    std::reverse(p.schedule.begin(), p.schedule.end());
    absl::Status s = passes::VerifyPlan(*g, p);
    EXPECT_TRUE(absl::StrContains(s.message(), "before")) << s;
  }
  {
    MemoryPlan p = good;
    p.buffers[0].offset += 8;  // misaligned
    EXPECT_FALSE(passes::VerifyPlan(*g, p).ok());
  }
  {
    // Neg is no view op: claim that later = Neg(h) is a view of h.
    MemoryPlan p = good;
    const Value* later = g->FindValue("later");
    ASSERT_TRUE(p.alias_of.contains(later));  // in place over h in the good plan
    p.alias_of[later].kind = Alias::Kind::kView;
    absl::Status s = passes::VerifyPlan(*g, p);
    EXPECT_TRUE(absl::StrContains(s.message(), "may not share")) << s;
  }
}

// --- property tests on random graphs -------------------------------------------------------

struct RandomCase {
  std::unique_ptr<ir::Graph> graph;
  std::vector<runtime::TensorMap> steps;
};

// A random DAG of elementwise ops (some in place), views, reductions, variadic sums, ReluGrad,
// graph inputs, parameters with state updates (some read again after their update), and outputs
// that may be inputs, parameters or views.
RandomCase MakeRandomGraph(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  Builder b;
  const std::vector<std::vector<int64_t>> shapes = {{8, 16}, {16}, {2, 4, 16}};
  std::vector<std::pair<Value*, int>> pool;  // value, shape index (-1: scalar)
  RandomCase rc;
  runtime::TensorMap feeds;
  const int inputs = 1 + pick(3);
  for (int i = 0; i < inputs; ++i) {
    const int s = pick(3);
    pool.push_back({b.Input(absl::StrCat("in", i), shapes[s]), s});
  }
  std::vector<std::pair<Value*, int>> params;
  const int num_params = pick(4);
  for (int i = 0; i < num_params; ++i) {
    const int s = pick(2);
    Value* p = b.Init(absl::StrCat("p", i), testing::RandomFloat(shapes[s], seed * 100 + i));
    pool.push_back({p, s});
    params.push_back({p, s});
  }
  Value* to_a = b.Init("to_a", Tensor::FromVector<int64_t>({2}, {8, 16}));
  Value* to_c = b.Init("to_c", Tensor::FromVector<int64_t>({3}, {2, 4, 16}));
  auto same_shape = [&](int s) {
    std::vector<Value*> c;
    for (const auto& [v, t] : pool) {
      if (t == s) c.push_back(v);
    }
    return c;
  };
  const char* unary[] = {"Relu", "Neg", "Sigmoid", "Tanh", "Abs"};
  const char* binary[] = {"Add", "Sub", "Mul"};
  const int nodes = 4 + pick(20);
  for (int k = 0; k < nodes; ++k) {
    const auto [x, s] = pool[pick(static_cast<int>(pool.size()))];
    const std::string name = absl::StrCat("v", k);
    if (s < 0) {  // scalars only feed unary ops
      pool.push_back({b.Op("Neg", {x}, name), -1});
      continue;
    }
    const int kind = pick(8);
    std::vector<Value*> peers = same_shape(s);
    Value* y = peers[pick(static_cast<int>(peers.size()))];
    switch (kind) {
      case 0:
      case 1:
        pool.push_back({b.Op(unary[pick(5)], {x}, name), s});
        break;
      case 2:
      case 3: {
        // Same-shape operands, a scalar, or a [16] bias against a larger shape.
        Value* other = y;
        if (pick(4) == 0) {
          std::vector<Value*> scalars;
          for (const auto& [v, t] : pool) {
            if (t < 0) scalars.push_back(v);
          }
          if (!scalars.empty()) other = scalars[pick(static_cast<int>(scalars.size()))];
        } else if (s != 1 && pick(3) == 0 && !same_shape(1).empty()) {
          other = same_shape(1)[0];
        }
        pool.push_back({b.Op(binary[pick(3)], pick(2) ? std::vector<Value*>{x, other}
                                                      : std::vector<Value*>{other, x}, name), s});
        break;
      }
      case 4:
        if (s == 0) {
          pool.push_back({b.Op("Reshape", {x, to_c}, name), 2});
        } else if (s == 2) {
          pool.push_back({b.Op("Reshape", {x, to_a}, name), 0});
        } else {
          pool.push_back({b.Op("Identity", {x}, name), s});
        }
        break;
      case 5:
        pool.push_back({b.Op("ReduceSum", {x}, name, {{"keepdims", ir::Attribute(int64_t{0})}}), -1});
        break;
      case 6:
        pool.push_back({b.Op("Sum", {x, y, peers[pick(static_cast<int>(peers.size()))]}, name), s});
        break;
      default:
        pool.push_back({b.Op("ReluGrad", {x, y}, name, {}, std::string(ir::kOttrDomain)), s});
        break;
    }
  }
  // State updates: p <- p + (a value of its shape) or p <- Sigmoid(p); sometimes the old value
  // is read again afterwards, which forces a copy.
  for (const auto& [p, s] : params) {
    if (pick(5) == 0) continue;
    std::vector<Value*> peers = same_shape(s);
    Value* v = peers[pick(static_cast<int>(peers.size()))];
    Value* updated = pick(3) == 0 ? b.Op("Sigmoid", {p}, p->name() + ".new")
                                  : b.Op("Add", {p, v}, p->name() + ".new");
    EXPECT_TRUE(b.g().AddUpdate(p, updated).ok());
    if (pick(3) == 0) b.g().AddOutput(b.Op("Mul", {p, updated}, p->name() + ".after"));
  }
  const int outputs = 1 + pick(3);
  for (int i = 0; i < outputs; ++i) b.g().AddOutput(pool[pick(static_cast<int>(pool.size()))].first);
  b.g().AddOutput(pool.back().first);
  for (int step = 0; step < 2; ++step) {
    runtime::TensorMap f;
    for (const Value* v : b.g().inputs()) {
      f[v->name()] = testing::RandomFloat(ir::StaticDims(*v->type().shape), seed * 7 + step * 1000 + v->id());
    }
    rc.steps.push_back(std::move(f));
  }
  rc.graph = b.Release();
  return rc;
}

TEST(MemoryPlannerPropertyTest, RandomGraphsVerifyAndRunIdentically) {
  int reordered = 0, in_place = 0, copies = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    RandomCase rc = MakeRandomGraph(seed);
    std::mt19937_64 rng(seed);
    PlanOptions o;
    o.in_place = rng() % 4 != 0;
    o.in_place_updates = rng() % 4 != 0;
    o.reorder = rng() % 4 != 0;
    o.alignment = rng() % 2 ? 256 : 64;
    if (rng() % 2) {
      o.workspace_bytes = [](const ir::Node& n) -> int64_t { return n.id() % 3 == 0 ? 100 * (n.id() + 1) : 0; };
    }
    absl::StatusOr<MemoryPlan> p = passes::PlanMemory(*rc.graph, o);
    ASSERT_TRUE(p.ok()) << p.status();
    absl::Status v = passes::VerifyPlan(*rc.graph, *p);
    ASSERT_TRUE(v.ok()) << v << "\n" << rc.graph->ToString() << passes::FormatPlan(*p);
    EXPECT_GE(p->peak_bytes, p->lower_bound_bytes);
    EXPECT_LE(p->peak_bytes, p->naive_bytes);
    EXPECT_LE(p->peak_bytes, p->given.peak_bytes);
    reordered += p->schedule != p->given_schedule;
    copies += static_cast<int>(p->update_copies.size());
    for (const auto& [val, alias] : p->alias_of) in_place += alias.kind == Alias::Kind::kInPlace;
    ExpectPlannedRunsMatch(*rc.graph, *p, rc.steps);
    if (HasFatalFailure()) return;
    // Moving one buffer onto another that is live at the same time is always caught.
    for (size_t i = 0; i < p->buffers.size(); ++i) {
      for (size_t j = 0; j < p->buffers.size(); ++j) {
        const passes::Buffer& a = p->buffers[i];
        const passes::Buffer& c = p->buffers[j];
        if (i == j || a.bytes == 0 || c.bytes == 0 || a.first > c.last || c.first > a.last) continue;
        MemoryPlan bad = *p;
        bad.buffers[j].offset = a.offset;
        if (c.workspace_of != nullptr) bad.workspace_offset[c.workspace_of] = a.offset;
        bad.peak_bytes = std::max(bad.peak_bytes, a.offset + bad.Aligned(c.bytes));
        EXPECT_FALSE(passes::VerifyPlan(*rc.graph, bad).ok()) << "buffer " << j << " onto " << i;
        i = j = p->buffers.size();  // one corruption per graph
      }
    }
  }
  // The generator exercises every feature.
  EXPECT_GT(reordered, 10);
  EXPECT_GT(in_place, 50);
  EXPECT_GT(copies, 5);
}

// --- the models ----------------------------------------------------------------------------------

struct ModelCase {
  std::string dir;
  bool mse = false;
  bool training_info = false;  // the model's own TrainingInfoProto step
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.dir; }

absl::StatusOr<std::unique_ptr<ir::Graph>> TrainingStep(const ModelCase& c, int64_t batch) {
  const std::string path = testing::SourcePath("models/" + c.dir + "/model.onnx");
  if (c.training_info) {
    OTTR_ASSIGN_OR_RETURN(onnx::ModelProto proto, importer::LoadModelProto(path));
    OTTR_ASSIGN_OR_RETURN(importer::TrainingInfoImport ti, importer::ImportTrainingInfo(proto));
    // The model's TrainingInfoProto fixes its labels at batch 8.
    OTTR_RETURN_IF_ERROR(passes::CreateInferShapesPass(8, {})->Run(*ti.step).status());
    OTTR_RETURN_IF_ERROR(passes::LowerForExecution(*ti.step));
    return std::move(ti.step);
  }
  OTTR_ASSIGN_OR_RETURN(auto forward, importer::ImportModelFile(path));
  passes::TrainingSpec spec;
  spec.batch = batch;
  if (c.mse) spec.loss.kind = passes::LossSpec::Kind::kMse;
  return passes::BuildTrainingGraph(*forward, spec);
}

runtime::TensorMap RandomFeeds(const ir::Graph& g, uint64_t seed) {
  runtime::TensorMap feeds;
  for (const Value* v : g.inputs()) {
    const std::vector<int64_t> dims = ir::StaticDims(*v->type().shape);
    if (v->name() == passes::kLrInput) {
      feeds[v->name()] = Tensor::Scalar<float>(1e-3f);
    } else if (v->type().dtype == DType::kInt64) {
      feeds[v->name()] = testing::RandomInt64(dims, seed + v->id(), 0, 1);
    } else if (v->type().dtype == DType::kFloat32) {
      feeds[v->name()] = testing::RandomFloat(dims, seed + v->id());
    } else {
      ADD_FAILURE() << "no random feed for " << v->name() << " " << v->type().ToString();
    }
  }
  return feeds;
}

class MemoryPlannerModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(MemoryPlannerModelTest, MeetsTargetsAndRunsIdentically) {
  const ModelCase& c = GetParam();
  const int64_t batch = 128;
  auto step = TrainingStep(c, batch);
  ASSERT_TRUE(step.ok()) << step.status();
  MemoryPlan p = Plan(**step);
  if (HasFailure()) return;
  std::printf("%s: memory plan: peak %lld bytes, lower bound %lld bytes, naive %lld bytes "
              "(given order: peak %lld, lower bound %lld)\n",
              c.dir.c_str(), static_cast<long long>(p.peak_bytes),
              static_cast<long long>(p.lower_bound_bytes), static_cast<long long>(p.naive_bytes),
              static_cast<long long>(p.given.peak_bytes), static_cast<long long>(p.given.lower_bound_bytes));
  EXPECT_LE(p.peak_bytes, 1.05 * p.lower_bound_bytes) << passes::FormatPlan(p);
  if (c.dir == "mlp" || c.dir == "cnn") {
    EXPECT_LE(p.peak_bytes, 0.5 * p.naive_bytes);
  }
  EXPECT_LE(p.peak_bytes, p.given.peak_bytes);
  if (!c.training_info) {
    // Adam's param, m and v and ottr.step are all updated in place.
    EXPECT_TRUE(p.update_copies.empty()) << passes::FormatPlan(p);
  }
  ExpectPlannedRunsMatch(**step, p, {RandomFeeds(**step, 1), RandomFeeds(**step, 2)});
}

INSTANTIATE_TEST_SUITE_P(Models, MemoryPlannerModelTest,
                         ::testing::Values(ModelCase{"mlp"}, ModelCase{"cnn"},
                                           ModelCase{"torch_cnn_bn"},
                                           ModelCase{"transformer", /*mse=*/true},
                                           ModelCase{"onnx_training", false, /*training_info=*/true}),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.dir; });

TEST(MemoryPlannerModelTest, DeferredCommitWithCopyPlanMatches) {
  // The trainer's mode: auto_commit = false with a plan whose updates are copies.
  auto step = TrainingStep({"mlp"}, 32);
  ASSERT_TRUE(step.ok()) << step.status();
  PlanOptions o;
  o.in_place_updates = false;
  MemoryPlan p = Plan(**step, o);
  EXPECT_FALSE(p.update_copies.empty());
  ExpectPlannedRunsMatch(**step, p, {RandomFeeds(**step, 3), RandomFeeds(**step, 4)},
                         /*auto_commit=*/false);
}

TEST(MemoryPlannerCliTest, PassesPrintsThePlan) {
  // `ottr passes MODEL --batch 128 --print-memory-plan` prints the table and ends with the
  // summary line of the same plan PlanMemory makes in process (the CPU step: `ottr passes` shows
  // the CUDA pipeline, fusions and grouped optimizer included, unless --device cpu).
  const std::string cmd = absl::StrCat(OTTR_BINARY_DIR, "/tools/ottr passes ",
                                       testing::SourcePath("models/mlp/model.onnx"),
                                       " --batch 128 --device cpu --print-memory-plan 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, got);
  ASSERT_EQ(pclose(pipe), 0) << out;
  auto step = TrainingStep({"mlp"}, 128);
  ASSERT_TRUE(step.ok()) << step.status();
  MemoryPlan p = Plan(**step);
  EXPECT_TRUE(absl::StrContains(out, "buffer        bytes first  last       offset  values")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[persistent] fc1.weight, fc1.weight.new (in place)")) << out;
  EXPECT_TRUE(absl::EndsWith(out, absl::StrCat("memory plan: peak ", p.peak_bytes, " bytes, lower bound ",
                                               p.lower_bound_bytes, " bytes, naive ", p.naive_bytes,
                                               " bytes\n")))
      << out;
}

// --- the gradient-check graphs ---------------------------------------------------------------

TEST(MemoryPlannerGradientGraphTest, EveryCaseRunsIdentically) {
  std::vector<testing::GradCase> cases;
  for (auto family : {testing::ElementwiseGradCases, testing::ActivationGradCases,
                      testing::ReductionGradCases, testing::TensorGradCases,
                      testing::LinalgGradCases, testing::ConvPoolGradCases,
                      testing::NormalizationGradCases, testing::LossGradCases}) {
    for (testing::GradCase& c : family()) cases.push_back(std::move(c));
  }
  int planned = 0;
  for (const testing::GradCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto gg = testing::BuildGradientGraph(c);
    if (!gg.ok()) continue;  // cases whose graph does not build are the gradient tests' concern
    absl::StatusOr<MemoryPlan> p = passes::PlanMemory(*gg->graph);
    if (!p.ok()) {
      // Only shapes that stay dynamic may stop the planner.
      EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
      continue;
    }
    absl::Status v = passes::VerifyPlan(*gg->graph, *p);
    ASSERT_TRUE(v.ok()) << v << "\n" << passes::FormatPlan(*p);
    runtime::TensorMap feeds(gg->feeds.begin(), gg->feeds.end());
    ExpectPlannedRunsMatch(*gg->graph, *p, {feeds});
    if (HasFatalFailure()) return;
    ++planned;
  }
  EXPECT_GT(planned, static_cast<int>(cases.size()) * 8 / 10) << planned << " of " << cases.size();
}

}  // namespace
}  // namespace ottr
