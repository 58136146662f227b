#include "sim/plan_answers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/plan_report.h"

namespace kvlearn {
namespace {

constexpr double kW = 2;  // transfer weight: cost = prefill + 2 x transfer

// A row costing `prefill` + kW x `transfer`, over a 12 s evaluated window.
ReplayResult Row(const std::string& policy, double prefill, double transfer) {
  ReplayResult r;
  r.policy = policy;
  r.prefill_gpu_seconds = prefill;
  r.transfer_seconds = transfer;
  r.first_arrival_ms = 1000;
  r.last_arrival_ms = 13000;
  return r;
}

// Hand-made sweep, pools 0.1, 0.5, 1 (costs with w = 2):
//   no-cache 100 everywhere; lru 90, 60, 50; gdsf 70, 54, 50.
// Full-pool saving: 100 - 50 = 50.
PoolSweep HandSweep() {
  PoolSweep s;
  s.policies = {"lru", "gdsf", "no-cache"};
  s.points = {
      {0.1, 10, {Row("lru", 80, 5), Row("gdsf", 70, 0), Row("no-cache", 100, 0)}},
      {0.5, 50, {Row("lru", 50, 5), Row("gdsf", 44, 5), Row("no-cache", 100, 0)}},
      {1.0, 100, {Row("lru", 40, 5), Row("gdsf", 50, 0), Row("no-cache", 100, 0)}},
  };
  return s;
}

TEST(PlanAnswersTest, FullPoolSavingIsLruAtTheLargestPoolAgainstNoPool) {
  auto a = AnswerPlan(HandSweep(), kW, 0.5, 0.9, std::nullopt);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->no_pool_cost_seconds, 100);
  EXPECT_DOUBLE_EQ(a->full_pool_cost_seconds, 50);
  EXPECT_DOUBLE_EQ(a->full_pool_saving_seconds(), 50);
  EXPECT_DOUBLE_EQ(a->window_seconds, 12);
  EXPECT_EQ(a->pool_point, 1u);
}

TEST(PlanAnswersTest, SmallestPoolReachingTheTargetShare) {
  // 90% of 50 = 45 saved: lru saves 10, 40, 50 -> pool 1.0; gdsf 30, 46 -> 0.5.
  auto a = AnswerPlan(HandSweep(), kW, 0.5, 0.9, std::nullopt);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->target_pools.size(), 2u);  // no-cache has none
  EXPECT_EQ(a->target_pools[0].policy, "lru");
  EXPECT_EQ(a->target_pools[0].point, 2u);
  EXPECT_EQ(a->target_pools[1].policy, "gdsf");
  EXPECT_EQ(a->target_pools[1].point, 1u);
  // 50% of 50 = 25: gdsf's 30 at the smallest pool already; lru's 40 at 0.5.
  auto half = AnswerPlan(HandSweep(), kW, 0.5, 0.5, std::nullopt);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->target_pools[0].point, 1u);
  EXPECT_EQ(half->target_pools[1].point, 0u);
}

TEST(PlanAnswersTest, APolicyThatNeverReachesItHasNoPool) {
  PoolSweep s = HandSweep();
  s.points[2].results[1] = Row("gdsf", 60, 0);  // saves 46 at 0.5, 40 at 1.0: 46 < 0.95 * 50
  auto a = AnswerPlan(s, kW, 0.5, 0.95, std::nullopt);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->target_pools[0].point, 2u);
  EXPECT_FALSE(a->target_pools[1].point.has_value());
}

TEST(PlanAnswersTest, SavingAgainstLruPerHourOfTraffic) {
  // At 0.5: lru 60, gdsf 54: 6 GPU-seconds saved over a 12 s window = 0.5
  // GPU-hours per hour; at 3 per GPU-hour, 1.5 per hour.
  auto a = AnswerPlan(HandSweep(), kW, 0.5, 0.9, 3.0);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->savings.size(), 1u);  // neither lru nor no-cache
  EXPECT_EQ(a->savings[0].policy, "gdsf");
  EXPECT_DOUBLE_EQ(a->savings[0].cost_seconds_saved, 6);
  EXPECT_DOUBLE_EQ(*a->savings[0].gpu_hours_per_hour, 0.5);
  EXPECT_DOUBLE_EQ(*a->savings[0].money_per_hour, 1.5);
  // At 0.1 gdsf saves 20 over 12 s; no price, no money.
  auto small = AnswerPlan(HandSweep(), kW, 0.1, 0.9, std::nullopt);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_DOUBLE_EQ(*small->savings[0].gpu_hours_per_hour, 20.0 / 12);
  EXPECT_FALSE(small->savings[0].money_per_hour.has_value());
}

TEST(PlanAnswersTest, AnEmptyWindowGivesNoRate) {
  PoolSweep s = HandSweep();
  for (SweepPoint& p : s.points) {
    for (ReplayResult& r : p.results) r.last_arrival_ms = r.first_arrival_ms;
  }
  auto a = AnswerPlan(s, kW, 0.5, 0.9, 3.0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->savings[0].cost_seconds_saved, 6);
  EXPECT_FALSE(a->savings[0].gpu_hours_per_hour.has_value());
  EXPECT_FALSE(a->savings[0].money_per_hour.has_value());
}

TEST(PlanAnswersTest, NoTargetPoolsWhenTheFullPoolSavesNothing) {
  PoolSweep s = HandSweep();
  s.points[2].results[0] = Row("lru", 90, 5);  // costs what no pool does
  auto a = AnswerPlan(s, kW, 0.5, 0.9, std::nullopt);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->full_pool_saving_seconds(), 0);
  EXPECT_TRUE(a->target_pools.empty());
}

TEST(PlanAnswersTest, RefusesASweepWithoutItsReferenceRowsOrPool) {
  PoolSweep s = HandSweep();
  EXPECT_FALSE(AnswerPlan(s, kW, 0.3, 0.9, std::nullopt).ok());  // no pool at 0.3
  s.policies[2] = "fifo";
  EXPECT_FALSE(AnswerPlan(s, kW, 0.5, 0.9, std::nullopt).ok());  // no no-cache
}

// The hand sweep with belady at 40 s at every pool, the user's pool at 0.5
// and, when given, the same lower bound at every pool.
Plan HandPlan(std::optional<double> bound = std::nullopt) {
  Plan plan;
  plan.header.trace = "hand";
  plan.header.transfer_weight = kW;
  plan.pool_fraction = 0.5;
  plan.sweep = HandSweep();
  plan.sweep.policies.insert(plan.sweep.policies.begin() + 2, "belady");
  for (SweepPoint& p : plan.sweep.points) {
    p.results.insert(p.results.begin() + 2, Row("belady", 40, 0));
    if (bound) p.cost_bound = CostLowerBound{.cost_seconds = *bound};
  }
  auto a = AnswerPlan(plan.sweep, kW, 0.5, 0.9, std::nullopt);
  EXPECT_TRUE(a.ok()) << a.status();
  if (a.ok()) plan.answers = *a;
  return plan;
}

TEST(PlanReportTest, TableMarksTheUsersPoolAndTheOraclesAndGivesTheAnswers) {
  const Plan plan = HandPlan();
  const std::string table = FormatPlanTable(plan);
  EXPECT_NE(table.find("belady*"), std::string::npos) << table;
  EXPECT_NE(table.find(">       50 "), std::string::npos) << table;  // the user's pool row
  EXPECT_NE(table.find("full-pool saving is 50.0 s"), std::string::npos) << table;
  EXPECT_NE(table.find("0.500 GPU-h/h"), std::string::npos) << table;
  // Each point's comparison fills gap closed from its own lru and belady
  // rows: gdsf at 0.5 closes (60 - 54) / (60 - 40) of the cost gap.
  const Comparison at = ComparisonAt(plan, 1);
  EXPECT_DOUBLE_EQ(*at.results[1].cost_gap_closed, 0.3);
  EXPECT_EQ(table.find(" bound\n"), std::string::npos) << table;  // no column: none computed
  // CSV: one header, then a row per (pool, policy), each led by its pool and
  // the bound there (empty: none computed).
  const std::string csv = FormatPlanCsv(plan);
  EXPECT_EQ(csv.rfind("pool_fraction,pool_bytes,cost_lower_bound_seconds,policy,", 0), 0u) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3 * 4);
  EXPECT_NE(csv.find("\n0.5,50,,gdsf,"), std::string::npos) << csv;
}

// With a lower bound of 30 s at every pool: a column, and at the user's pool
// (lru 60, gdsf 54, belady 40) gdsf closes 6 / 30 of the lru -> bound gap and
// 6 / 20 of the lru -> belady one.
TEST(PlanReportTest, TheBoundIsAColumnAndEachPolicyClosesAShareOfItsGap) {
  const Plan plan = HandPlan(30);
  const std::string table = FormatPlanTable(plan);
  EXPECT_NE(table.find("     bound\n"), std::string::npos) << table;
  EXPECT_NE(table.find("      30.0\n"), std::string::npos) << table;
  EXPECT_NE(table.find("no policy can cost less than 30.0 s"), std::string::npos) << table;
  EXPECT_NE(table.find("gdsf                20.0%  (30.0%)"), std::string::npos) << table;
  EXPECT_NE(table.find("belady*             66.7%  (100.0%)"), std::string::npos) << table;
  const std::string json = FormatPlanJson(plan);
  EXPECT_NE(json.find("\"cost_lower_bound_seconds\": 30,"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"policy\": \"gdsf\", \"share\": 0.2"), std::string::npos) << json;
  EXPECT_NE(FormatPlanCsv(plan).find("\n0.5,50,30,gdsf,"), std::string::npos);
}

}  // namespace
}  // namespace kvlearn
