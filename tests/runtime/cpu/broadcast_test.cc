#include "runtime/cpu/broadcast.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ottr::runtime::cpu {
namespace {

using Dims = std::vector<int64_t>;

// Element index of an operand with dims `d` read at output multi-index `idx` (NumPy rules),
// computed directly from the definition.
int64_t NaiveOffset(const Dims& out, const Dims& d, const Dims& idx) {
  const size_t lead = out.size() - d.size();
  int64_t off = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    off = off * d[i] + (d[i] == 1 ? 0 : idx[lead + i]);
  }
  return off;
}

// For every output element, the operand offsets the plan visits, in output order.
std::vector<std::vector<int64_t>> PlanOffsets(const BroadcastPlan& plan) {
  std::vector<std::vector<int64_t>> got(plan.num_elements());
  int64_t next = 0;
  plan.ForEachRun([&](int64_t o, const int64_t* offs, int64_t n) {
    EXPECT_EQ(o, next) << "runs must cover the output in order";
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < plan.num_operands(); ++k) {
        got[o + i].push_back(offs[k] + i * plan.inner_stride(k));
      }
    }
    next = o + n;
  });
  EXPECT_EQ(next, plan.num_elements());
  return got;
}

void ExpectMatchesNaive(const std::vector<Dims>& operands) {
  absl::StatusOr<BroadcastPlan> plan = BroadcastPlan::Make(operands);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Dims& out = plan->out_dims();
  std::vector<std::vector<int64_t>> got = PlanOffsets(*plan);
  Dims idx(out.size(), 0);
  for (int64_t e = 0; e < plan->num_elements(); ++e) {
    for (size_t k = 0; k < operands.size(); ++k) {
      ASSERT_EQ(got[e][k], NaiveOffset(out, operands[k], idx)) << "element " << e << " operand " << k;
    }
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

TEST(BroadcastPlanTest, SameShapeIsOneContiguousRun) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{2, 3, 4}, {2, 3, 4}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->out_dims(), (Dims{2, 3, 4}));
  EXPECT_EQ(p->num_runs(), 1);
  EXPECT_EQ(p->run_length(), 24);
  EXPECT_EQ(p->inner_stride(0), 1);
  EXPECT_EQ(p->inner_stride(1), 1);
  EXPECT_TRUE(p->is_full(0));
  EXPECT_TRUE(p->is_full(1));
}

TEST(BroadcastPlanTest, ScalarOperandHasStrideZero) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{5, 7}, {}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->out_dims(), (Dims{5, 7}));
  EXPECT_EQ(p->num_runs(), 1);
  EXPECT_EQ(p->inner_stride(0), 1);
  EXPECT_EQ(p->inner_stride(1), 0);
  EXPECT_FALSE(p->is_full(1));
  // A [1,1] operand is a scalar too.
  p = BroadcastPlan::Make({{1, 1}, {5, 7}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_runs(), 1);
  EXPECT_EQ(p->inner_stride(0), 0);
}

TEST(BroadcastPlanTest, ChannelBiasRunsOverSpatialDims) {
  // [N,C,H,W] + [C,1,1]: one run of H*W per (n, c), the bias read with stride 0.
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{2, 3, 4, 5}, {3, 1, 1}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->run_length(), 20);
  EXPECT_EQ(p->num_runs(), 6);
  EXPECT_EQ(p->inner_stride(0), 1);
  EXPECT_EQ(p->inner_stride(1), 0);
  ExpectMatchesNaive({{2, 3, 4, 5}, {3, 1, 1}});
}

TEST(BroadcastPlanTest, RowPlusColumn) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{4, 1}, {1, 6}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->out_dims(), (Dims{4, 6}));
  EXPECT_EQ(p->run_length(), 6);
  EXPECT_EQ(p->inner_stride(0), 0);
  EXPECT_EQ(p->inner_stride(1), 1);
  ExpectMatchesNaive({{4, 1}, {1, 6}});
}

TEST(BroadcastPlanTest, IncompatibleShapesNameBoth) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{2, 3}, {4}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("[2,3]"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("[4]"), std::string::npos) << p.status();
  EXPECT_FALSE(BroadcastPlan::Make({}).ok());
  EXPECT_FALSE(BroadcastPlan::Make({{-1}}).ok());
}

TEST(BroadcastPlanTest, EmptyOutputHasNoRuns) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{0, 3}, {3}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->out_dims(), (Dims{0, 3}));
  EXPECT_EQ(p->num_elements(), 0);
  EXPECT_EQ(p->num_runs(), 0);
  int calls = 0;
  p->ForEachRun([&](int64_t, const int64_t*, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  // 0 broadcasts against 1, not against other sizes.
  EXPECT_TRUE(BroadcastPlan::Make({{0}, {1}}).ok());
  EXPECT_FALSE(BroadcastPlan::Make({{0}, {2}}).ok());
}

TEST(BroadcastPlanTest, RankZeroOperandsGiveOneElement) {
  absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({{}, {}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->out_dims().empty());
  EXPECT_EQ(p->num_elements(), 1);
  EXPECT_EQ(p->num_runs(), 1);
  EXPECT_EQ(p->run_length(), 1);
}

TEST(BroadcastPlanTest, RandomShapesMatchNaiveIndexing) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = static_cast<int>(rng() % 5);
    Dims out(rank);
    for (int64_t& d : out) d = 1 + static_cast<int64_t>(rng() % 4);
    const int n_ops = 1 + static_cast<int>(rng() % 3);
    std::vector<Dims> ops;
    for (int k = 0; k < n_ops; ++k) {
      const int r = static_cast<int>(rng() % (rank + 1));  // trailing dims of `out`
      Dims d(out.end() - r, out.end());
      for (int64_t& v : d) {
        if (rng() % 3 == 0) v = 1;
      }
      ops.push_back(d);
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    ExpectMatchesNaive(ops);
  }
}

TEST(BroadcastBinaryTest, MatchesNaiveForEveryStridePattern) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{3, 4}, {3, 4}}, {{3, 4}, {}}, {{}, {3, 4}}, {{3, 1}, {1, 4}}, {{1, 4}, {3, 1}},
      {{1}, {1}}, {{2, 3, 4}, {3, 1}}};
  for (const auto& [da, db] : cases) {
    absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make({da, db});
    ASSERT_TRUE(p.ok()) << p.status();
    int64_t na = 1, nb = 1;
    for (int64_t v : da) na *= v;
    for (int64_t v : db) nb *= v;
    std::vector<double> a(na), b(nb);
    for (int64_t i = 0; i < na; ++i) a[i] = 1.5 + i;
    for (int64_t i = 0; i < nb; ++i) b[i] = -100.0 * (i + 1);
    std::vector<double> out(p->num_elements(), -1.0);
    BroadcastBinary(*p, a.data(), b.data(), out.data(), [](double x, double y) { return x + y; });
    std::vector<std::vector<int64_t>> offs = PlanOffsets(*p);
    for (int64_t e = 0; e < p->num_elements(); ++e) {
      EXPECT_EQ(out[e], a[offs[e][0]] + b[offs[e][1]]) << "element " << e;
    }
  }
}

TEST(BroadcastTernaryTest, MatchesNaiveForMixedStrides) {
  const std::vector<std::vector<Dims>> cases = {
      {{2, 3}, {2, 3}, {2, 3}}, {{2, 3}, {}, {}}, {{2, 1}, {1, 3}, {}}, {{3}, {2, 1}, {2, 3}}};
  for (const auto& dims : cases) {
    absl::StatusOr<BroadcastPlan> p = BroadcastPlan::Make(dims);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<std::vector<int>> vals(3);
    for (int k = 0; k < 3; ++k) {
      int64_t n = 1;
      for (int64_t v : dims[k]) n *= v;
      for (int64_t i = 0; i < n; ++i) vals[k].push_back(static_cast<int>(1000 * k + i + 1));
    }
    std::vector<int> out(p->num_elements(), 0);
    BroadcastTernary(*p, vals[0].data(), vals[1].data(), vals[2].data(), out.data(),
                     [](int x, int y, int z) { return x * 1000000 + y * 1000 + z; });
    std::vector<std::vector<int64_t>> offs = PlanOffsets(*p);
    for (int64_t e = 0; e < p->num_elements(); ++e) {
      EXPECT_EQ(out[e], vals[0][offs[e][0]] * 1000000 + vals[1][offs[e][1]] * 1000 +
                            vals[2][offs[e][2]]);
    }
  }
}

}  // namespace
}  // namespace ottr::runtime::cpu
