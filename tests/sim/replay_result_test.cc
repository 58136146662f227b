// The counters every replay shares (AddRequest), utilization, sizing and
// the gap shares, on hand-made numbers.
#include "sim/replay_result.h"

#include <gtest/gtest.h>

#include "sim/comparison_report.h"
#include "sim/report_fields.h"

namespace kvlearn {
namespace {

TraceRequest Request(int64_t at_ms, uint32_t tokens, uint32_t blocks) {
  TraceRequest r;
  r.timestamp_ms = at_ms;
  r.input_length = tokens;
  r.num_blocks = blocks;
  return r;
}

// Two requests, at 1000 and 3000 ms: the window is 2 s. Busy 600 + 1400 ms
// = 2 s; on 2 instances utilization = 2 / (2 * 2) = 0.5. Prefill 500 ms on a
// 4-GPU instance = 2 GPU-s, plus 300 ms on 4 GPUs = 1.2 GPU-s.
TEST(ReplayResultTest, AddRequestCountsAndUtilizationByHand) {
  ReplayResult m;
  m.prefill_nodes = 2;
  AddRequest(m, Request(1000, 100, 2), {1, 50, 10, 20, 0}, {500, 4, 100, 600});
  AddRequest(m, Request(3000, 60, 1), {0, 0, 0, 5, 1}, {300, 4, 200, 1400});
  EXPECT_EQ(m.requests, 2u);
  EXPECT_EQ(m.block_accesses, 3u);
  EXPECT_EQ(m.block_hits, 1u);
  EXPECT_EQ(m.recomputed_tokens, 50u + 60u);
  EXPECT_EQ(m.transfer_bytes(), 35u);
  EXPECT_EQ(m.evicted_blocks, 1u);
  EXPECT_DOUBLE_EQ(m.prefill_gpu_seconds, 2.0 + 1.2);
  EXPECT_DOUBLE_EQ(m.transfer_seconds, 0.3);
  EXPECT_DOUBLE_EQ(m.busy_seconds, 2.0);
  EXPECT_DOUBLE_EQ(m.window_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(m.utilization(), 0.5);
  // cost = 3.2 GPU-s + w * 0.3 s.
  EXPECT_DOUBLE_EQ(m.cost_seconds(1), 3.5);
  EXPECT_DOUBLE_EQ(m.cost_seconds(10), 6.2);
}

// The cluster adds requests as they finish: the window is the span of the
// arrivals whatever the order (3000, 1000, 2000 -> 2 s).
TEST(ReplayResultTest, WindowIsTheSpanOfArrivalsInAnyOrder) {
  ReplayResult m;
  for (const int64_t at : {3000, 1000, 2000}) AddRequest(m, Request(at, 10, 1), {}, {});
  EXPECT_DOUBLE_EQ(m.first_arrival_ms, 1000);
  EXPECT_DOUBLE_EQ(m.last_arrival_ms, 3000);
  EXPECT_DOUBLE_EQ(m.window_seconds(), 2.0);
}

// Busy 2 s over a 2 s window: at target 0.8 it needs ceil(2 / 1.6) = 2
// instances (utilization 0.5; one would be 1.0); at target 0.4, ceil(2.5) = 3.
// An empty window (one arrival time) asks for 1.
TEST(ReplayResultTest, InstancesForUtilizationIsTheSmallestCountThatFits) {
  ReplayResult m;
  m.busy_seconds = 2;
  m.first_arrival_ms = 1000;
  m.last_arrival_ms = 3000;
  EXPECT_EQ(InstancesForUtilization(m, 0.8), 2u);
  EXPECT_EQ(InstancesForUtilization(m, 0.4), 3u);
  EXPECT_EQ(InstancesForUtilization(m, 1.0), 1u);
  for (uint32_t n = 1; n <= 8; ++n) {  // the definition, checked against the formula
    m.prefill_nodes = n;
    EXPECT_EQ(m.utilization() <= 0.8, n >= InstancesForUtilization(m, 0.8)) << n;
  }
  m.last_arrival_ms = 1000;
  EXPECT_EQ(InstancesForUtilization(m, 0.8), 1u);
  EXPECT_EQ(m.utilization(), 0.0);
}

// LRU costs 10 s, Belady 6 s: a policy at 7 s closes (10 - 7) / (10 - 6) =
// 75% of the cost gap. Costs here are all prefill, so w does not matter;
// with transfers only on the policy (2 s at w = 1), 9 s closes 25%.
TEST(ReplayResultTest, CostGapClosedByHand) {
  ReplayResult lru, oracle, policy;
  lru.prefill_gpu_seconds = 10;
  oracle.prefill_gpu_seconds = 6;
  policy.prefill_gpu_seconds = 7;
  EXPECT_DOUBLE_EQ(*CostGapClosed(policy, lru, oracle, 1), 0.75);
  policy.transfer_seconds = 2;
  EXPECT_DOUBLE_EQ(*CostGapClosed(policy, lru, oracle, 1), 0.25);
  EXPECT_DOUBLE_EQ(*CostGapClosed(policy, lru, oracle, 0), 0.75);
  EXPECT_FALSE(CostGapClosed(policy, lru, lru, 1).has_value());  // no gap
}

TEST(ReplayResultTest, SaturatedFromUtilization) {
  ReplayResult busy;
  busy.policy = "lru";
  busy.prefill_nodes = 1;
  busy.first_arrival_ms = 0;
  busy.last_arrival_ms = 1000;
  busy.busy_seconds = 0.95;  // exactly the threshold counts
  Comparison c;
  c.results = {busy};
  EXPECT_TRUE(AnySaturated(c.results));
  EXPECT_NE(FormatJson(c).find("\"saturated\": true"), std::string::npos);
  c.results[0].busy_seconds = 0.94;
  EXPECT_FALSE(AnySaturated(c.results));
  EXPECT_NE(FormatJson(c).find("\"saturated\": false"), std::string::npos);
}

// no-cache is the recompute-everything bound: a cluster sized for LRU is meant
// to be too small for it, so its row alone does not flag the run.
TEST(ReplayResultTest, TheNoCacheBoundDoesNotFlagTheRun) {
  ReplayResult bound;
  bound.policy = "no-cache";
  bound.prefill_nodes = 1;
  bound.first_arrival_ms = 0;
  bound.last_arrival_ms = 1000;
  bound.busy_seconds = 1.2;
  ReplayResult lru = bound;
  lru.policy = "lru";
  lru.busy_seconds = 0.5;
  Comparison c;
  c.results = {lru, bound};
  EXPECT_DOUBLE_EQ(c.results[1].utilization(), 1.2);
  EXPECT_FALSE(AnySaturated(c.results));
  EXPECT_EQ(SaturatedRows(c.results), "");
  EXPECT_EQ(FormatTable(c).find("saturated:"), std::string::npos);
  c.results[0].busy_seconds = 0.96;
  EXPECT_TRUE(AnySaturated(c.results));
  EXPECT_EQ(SaturatedRows(c.results), "lru (96%)");
  // The table's note and the stderr line are one text.
  EXPECT_NE(FormatTable(c).find("\n" + SaturatedLine("lru (96%)") + "\n"), std::string::npos);
  EXPECT_EQ(SaturatedLine("lru (96%)"),
            "saturated: lru (96%): busy >= 95% of the window, so TTFT grows with the trace's "
            "length");
}

}  // namespace
}  // namespace kvlearn
