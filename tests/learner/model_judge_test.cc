// The judge of `kvlearn train` (learner/model_judge.h): whom it judges
// against, which requests it prices, and that it reads nothing past the
// validation split.
#include "learner/model_judge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "datasets/workload_generator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

Trace Chat(uint64_t seed, uint32_t requests) {
  ChatWorkloadOptions g;
  g.seed = seed;
  g.requests = requests;
  return GenerateChatTrace(g);
}

uint64_t DistinctBytes(const Trace& trace) {
  auto replay = BuildReplayTrace(trace, DefaultCost());
  EXPECT_TRUE(replay.ok());
  return replay.ok() ? replay->distinct_block_bytes : 0;
}

double Cost(const PoolVerdict& v, std::string_view policy) {
  for (const JudgedPolicy& row : v.rows) {
    if (row.policy == policy) return row.cost_s;
  }
  ADD_FAILURE() << "no row " << policy;
  return 0;
}

TEST(ModelJudgeTest, JudgesAgainstTheOnlineHeuristicsOnly) {
  const std::vector<std::string> h = JudgingHeuristics();
  for (const char* name : {"lru", "gdsf", "arc", "s3fifo"}) {
    EXPECT_NE(std::find(h.begin(), h.end(), name), h.end()) << name;
  }
  for (const char* name : {"learned", "belady", "oracle-admission", "no-cache"}) {
    EXPECT_EQ(std::find(h.begin(), h.end(), name), h.end()) << name;
  }
}

TEST(ModelJudgeTest, TheBestHeuristicIsTheCheapestRowOtherThanTheModels) {
  const Trace trace = Chat(11, 1500);
  JudgeOptions o;
  o.first_request = 900;
  o.end_request = 1200;
  o.pool_fractions = {0.05, 0.2};
  o.distinct_block_bytes = DistinctBytes(trace);
  auto verdicts = JudgeModel(trace, DefaultCost(), MakeTestModel(1), o);
  ASSERT_TRUE(verdicts.ok()) << verdicts.status();
  ASSERT_EQ(verdicts->size(), 2u);
  for (size_t p = 0; p < 2; ++p) {
    const PoolVerdict& v = (*verdicts)[p];
    EXPECT_EQ(v.judgement.pool_fraction, o.pool_fractions[p]);
    EXPECT_EQ(v.judgement.pool_bytes,
              static_cast<uint64_t>(o.pool_fractions[p] * o.distinct_block_bytes));
    ASSERT_EQ(v.rows.size(), 2 + JudgingHeuristics().size());
    EXPECT_EQ(v.rows[0].policy, "learned");
    EXPECT_EQ(v.rows[1].policy, "learned, no model");
    EXPECT_EQ(v.judgement.learned_cost_s, v.rows[0].cost_s);
    EXPECT_EQ(v.judgement.no_model_cost_s, v.rows[1].cost_s);
    EXPECT_EQ(v.judgement.lru_cost_s, Cost(v, "lru"));
    // learned's two rows are never the best heuristic, even when cheapest.
    double cheapest = v.rows[2].cost_s;
    for (size_t i = 2; i < v.rows.size(); ++i) cheapest = std::min(cheapest, v.rows[i].cost_s);
    EXPECT_EQ(v.judgement.best_heuristic_cost_s, cheapest);
    EXPECT_EQ(Cost(v, v.judgement.best_heuristic), cheapest);
    EXPECT_GT(cheapest, 0);
  }
  // A larger pool keeps more: lru costs less there.
  EXPECT_LT((*verdicts)[1].judgement.lru_cost_s, (*verdicts)[0].judgement.lru_cost_s);
}

// `kvlearn model evaluate` prices two models in one table: each model's row is
// what judging that model alone gives, and the heuristics' rows follow.
TEST(ModelJudgeTest, PricingSeveralModelsGivesEachTheCostOfJudgingItAlone) {
  const Trace trace = Chat(13, 1200);
  JudgeOptions o;
  o.first_request = 700;
  o.end_request = 1100;
  o.distinct_block_bytes = DistinctBytes(trace);
  auto table =
      PriceModels(trace, DefaultCost(),
                  {{"v2 (candidate)", MakeTestModel(2)}, {"v1 (serving)", MakeTestModel(1)}}, o);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 1u);
  const std::vector<JudgedPolicy>& rows = (*table)[0];
  ASSERT_EQ(rows.size(), 2 + JudgingHeuristics().size());
  EXPECT_EQ(rows[0].policy, "v2 (candidate)");
  EXPECT_EQ(rows[1].policy, "v1 (serving)");
  for (const uint64_t seed : {2, 1}) {
    auto alone = JudgeModel(trace, DefaultCost(), MakeTestModel(seed), o);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const PoolVerdict& v = (*alone)[0];
    EXPECT_EQ(rows[seed == 2 ? 0 : 1].cost_s, v.judgement.learned_cost_s) << seed;
    for (size_t i = 2; i < v.rows.size(); ++i) {  // after learned's two rows
      EXPECT_EQ(rows[i].policy, v.rows[i].policy);
      EXPECT_EQ(rows[i].cost_s, v.rows[i].cost_s) << v.rows[i].policy;
    }
  }
  EXPECT_FALSE(PriceModels(trace, DefaultCost(), {}, o).ok());
}

TEST(ModelJudgeTest, ReadsNothingFromTheEndOfTheValidationSplitOn) {
  const Trace trace = Chat(12, 1500);
  // The same first 1200 requests, then other traffic (another seed's).
  const Trace other = Chat(13, 1500);
  Trace spliced;
  spliced.block_size = trace.block_size;
  for (uint32_t i = 0; i < 1500; ++i) {
    const Trace& from = i < 1200 ? trace : other;
    const TraceRequest& r = from.requests[i];
    spliced.Add(i < 1200 ? r.timestamp_ms : trace.requests[1199].timestamp_ms + i, r.input_length,
                r.output_length, from.BlocksOf(r));
  }
  JudgeOptions o;
  o.first_request = 900;
  o.end_request = 1200;
  o.distinct_block_bytes = DistinctBytes(trace);  // the pool: the same bytes for both
  auto a = JudgeModel(trace, DefaultCost(), MakeTestModel(1), o);
  auto b = JudgeModel(spliced, DefaultCost(), MakeTestModel(1), o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)[0].rows.size(), (*b)[0].rows.size());
  for (size_t i = 0; i < (*a)[0].rows.size(); ++i) {
    EXPECT_EQ((*a)[0].rows[i].cost_s, (*b)[0].rows[i].cost_s) << (*a)[0].rows[i].policy;
  }
}

// The pool under lru evolves the same whatever is priced, so the cost of
// requests [900, 1200) is that of [0, 1200) less that of [0, 900): the
// judge prices exactly the requests it says, no one more or less.
TEST(ModelJudgeTest, PricesExactlyTheValidationRequests) {
  const Trace trace = Chat(14, 1500);
  const auto judge = [&](uint32_t first, uint32_t end) {
    JudgeOptions o;
    o.first_request = first;
    o.end_request = end;
    o.distinct_block_bytes = DistinctBytes(trace);
    auto v = JudgeModel(trace, DefaultCost(), MakeTestModel(1), o);
    EXPECT_TRUE(v.ok()) << v.status();
    return *v;
  };
  const auto window = judge(900, 1200), to_end = judge(0, 1200), to_first = judge(0, 900);
  for (const char* policy : {"lru", "fifo", "gdsf"}) {
    const double expected = Cost(to_end[0], policy) - Cost(to_first[0], policy);
    EXPECT_NEAR(Cost(window[0], policy), expected, 1e-9 * Cost(to_end[0], policy)) << policy;
  }
  EXPECT_LT(Cost(window[0], "lru"), Cost(to_end[0], "lru"));
}

TEST(ModelJudgeTest, RefusesAnEmptyOrOutOfRangeSplit) {
  const Trace trace = Chat(15, 100);
  JudgeOptions o;
  o.distinct_block_bytes = DistinctBytes(trace);
  o.first_request = 50;
  o.end_request = 50;
  EXPECT_FALSE(JudgeModel(trace, DefaultCost(), MakeTestModel(1), o).ok());
  o.end_request = 101;
  EXPECT_FALSE(JudgeModel(trace, DefaultCost(), MakeTestModel(1), o).ok());
  o.end_request = 100;
  o.pool_fractions.clear();
  EXPECT_FALSE(JudgeModel(trace, DefaultCost(), MakeTestModel(1), o).ok());
}

}  // namespace
}  // namespace kvlearn
