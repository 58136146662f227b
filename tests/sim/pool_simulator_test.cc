#include "sim/pool_simulator.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "policies/learned_policy.h"
#include "sim/comparison_report.h"
#include "sim/json_text.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

// A cost model with round numbers: 1000 KV bytes per token, recompute linear
// at 0.01 ms/token (L_cross out of reach), 1 GB/s link = 1e6 bytes per ms.
CostModel RoundCosts(uint32_t prefill_nodes) {
  ModelProfile m{"toy", 1, 1, 250, 2, 1.0};
  HardwareProfile h{"toy", 0.01, 0.0, 1u << 30, 1.0, 1.0, 1.0, 1.0, 1.0, prefill_nodes};
  return CostModel(m, h, RecomputeForm::kKvlearnPaper);  // alpha_bw only: linear
}

Trace SmallTrace() {
  Trace t;
  t.source = "hand";
  t.block_size = 4;
  return t;
}

ReplayResult Replay(const Trace& t, const CostModel& cost, PoolReplayOptions options,
                    std::string_view policy = "lru") {
  auto replay = BuildReplayTrace(t, cost);
  EXPECT_TRUE(replay.ok()) << replay.status();
  auto r = ReplayPool(*replay, cost, policy, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(PoolSimulatorTest, ColdRequestRecomputesEverything) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  const CostModel cost = RoundCosts(1);
  PoolReplayOptions o;
  o.pool_bytes = 1'000'000;
  const ReplayResult r = Replay(t, cost, o);
  EXPECT_EQ(r.block_hits, 0u);
  EXPECT_EQ(r.recomputed_tokens, 8u);
  EXPECT_EQ(r.admitted_bytes, 8000u);
  EXPECT_EQ(r.loaded_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.ttft_ms.mean, 0.08);  // 8 tokens * 0.01 ms
  EXPECT_DOUBLE_EQ(r.prefill_gpu_seconds, 0.08 / 1000);
}

// What the catalog says recomputing a block costs (which policies weigh
// against its transfer) is what the accounting charges for missing it: GPU
// time. Llama-3.3-70B prefills on 4 GPUs, so that is 4 times the wall time;
// a cold request misses every block, and the blocks' marginal costs add up
// to its prefill.
TEST(PoolSimulatorTest, ABlocksRecomputeCostIsWhatItsMissIsCharged) {
  Trace t = SmallTrace();
  t.block_size = 512;
  t.Add(0, 1024, 1, std::vector<uint64_t>{1, 2});
  const CostModel cost(*FindModelProfile("llama3.3-70b"), *FindHardwareProfile("h100"));
  ASSERT_EQ(cost.GpusPerInstance(), 4u);
  auto replay = BuildReplayTrace(t, cost);
  ASSERT_TRUE(replay.ok()) << replay.status();
  double catalog_ms = 0;
  for (BlockIndex b = 0; b < replay->catalog.size(); ++b) {
    const BlockMeta& m = replay->catalog[b];
    EXPECT_DOUBLE_EQ(m.recompute_gpu_ms, 4 * cost.RecomputeMs(512 * m.depth, 512 * (m.depth + 1)));
    catalog_ms += m.recompute_gpu_ms;
  }
  auto r = ReplayPool(*replay, cost, "lru", PoolReplayOptions{});  // no pool: every block missed
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->recomputed_tokens, 1024u);
  EXPECT_NEAR(r->prefill_gpu_seconds * 1000, catalog_ms, 1e-6 * catalog_ms);
}

TEST(PoolSimulatorTest, HitLoadsPrefixAndRecomputesTail) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(10, 10, 1, std::vector<uint64_t>{1, 2, 3});  // last block holds 2 tokens
  const CostModel cost = RoundCosts(1);
  PoolReplayOptions o;
  o.pool_bytes = 1'000'000;
  o.eval_from = 0.5;  // report only the second request
  const ReplayResult r = Replay(t, cost, o);
  EXPECT_EQ(r.requests, 1u);
  EXPECT_EQ(r.block_accesses, 3u);
  EXPECT_EQ(r.block_hits, 2u);
  EXPECT_EQ(r.hit_tokens, 8u);
  EXPECT_EQ(r.recomputed_tokens, 2u);
  EXPECT_EQ(r.loaded_bytes, 8000u);
  EXPECT_EQ(r.admitted_bytes, 2000u);
  EXPECT_EQ(r.transfer_bytes(), 10000u);
  // load 8000 B at 1e6 B/ms + recompute 2 tokens at 0.01 ms.
  EXPECT_NEAR(r.ttft_ms.mean, 0.008 + 0.02, 1e-9);  // 10 + 0.028 - 10 rounds
  EXPECT_DOUBLE_EQ(r.token_hit_ratio(), 0.8);
  // Transfers: the load (8000 B) and the admission (2000 B) at 1e6 B/ms, no
  // latency in the paper's form: 0.01 ms. Busy: load + prefill = 0.028 ms.
  EXPECT_NEAR(r.transfer_seconds, 0.010 / 1000, 1e-15);
  EXPECT_NEAR(r.busy_seconds, 0.028 / 1000, 1e-15);
  EXPECT_NEAR(r.cost_seconds(1), (0.02 + 0.01) / 1000, 1e-15);
}

// Ten requests of 400 distinct tokens (4 ms each at 0.01 ms/token), one per
// ms from 0 to 9: LRU is busy 40 ms over a 9 ms window. The fewest instances
// at or under 80% is ceil(40 / 7.2) = 6 (40 / 54 = 74%); 5 would be 40 / 45 =
// 89%. One instance is saturated (444%), and its TTFT grows with the trace:
// the last request waits for the nine before it (40 - 9 = 31 ms).
Trace EvenTrace() {
  Trace t = SmallTrace();
  uint64_t next_id = 1;
  for (int64_t at = 0; at < 10; ++at) {
    std::vector<uint64_t> ids;
    for (int b = 0; b < 100; ++b) ids.push_back(next_id++);
    t.Add(at, 400, 1, ids);
  }
  return t;
}

TEST(PoolSimulatorTest, AutoSizingOnAHandMadeTrace) {
  const Trace t = EvenTrace();
  PoolReplayOptions o;
  o.pool_bytes = 0;
  const CostModel cost = RoundCosts(1);
  auto replay = BuildReplayTrace(t, cost);
  ASSERT_TRUE(replay.ok());
  ReplayResult lru;
  auto nodes = SizePoolReplay(*replay, cost, o, kTargetUtilization, &lru);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(*nodes, 6u);
  EXPECT_NEAR(lru.busy_seconds, 0.040, 1e-12);
  EXPECT_NEAR(lru.window_seconds(), 0.009, 1e-12);
  EXPECT_NEAR(Replay(t, RoundCosts(6), o).utilization(), 40.0 / 54, 1e-9);
  EXPECT_GT(Replay(t, RoundCosts(5), o).utilization(), kTargetUtilization);

  const ReplayResult one = Replay(t, RoundCosts(1), o);
  EXPECT_NEAR(one.utilization(), 40.0 / 9, 1e-9);
  EXPECT_TRUE(AnySaturated({one}));
  EXPECT_NEAR(one.ttft_ms.p99, 40 - 9, 1e-9);
  EXPECT_FALSE(AnySaturated({Replay(t, RoundCosts(6), o)}));
}

TEST(PoolSimulatorTest, SecondRequestWaitsForTheNodeOnOneNode) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});  // 0.08 ms of prefill
  t.Add(0, 4, 1, std::vector<uint64_t>{3});     // 0.04 ms, queued behind it
  PoolReplayOptions o;
  o.pool_bytes = 0;
  const ReplayResult one = Replay(t, RoundCosts(1), o);
  EXPECT_DOUBLE_EQ(one.ttft_ms.p50, 0.08);
  EXPECT_DOUBLE_EQ(one.ttft_ms.p99, 0.08 + 0.04);
  EXPECT_DOUBLE_EQ(one.ttft_ms.mean, (0.08 + 0.12) / 2);
  // Round-robin over two nodes: no queueing.
  const ReplayResult two = Replay(t, RoundCosts(2), o);
  EXPECT_DOUBLE_EQ(two.ttft_ms.p99, 0.08);
  EXPECT_DOUBLE_EQ(two.ttft_ms.p50, 0.04);
}

TEST(PoolSimulatorTest, NodeFreesUpBeforeLaterArrival) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(5, 4, 1, std::vector<uint64_t>{3});  // arrives after the node is idle again
  PoolReplayOptions o;
  const ReplayResult r = Replay(t, RoundCosts(1), o);
  EXPECT_DOUBLE_EQ(r.ttft_ms.p99, 0.08);
}

TEST(PoolSimulatorTest, ZeroPoolNeverHits) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(1, 8, 1, std::vector<uint64_t>{1, 2});
  PoolReplayOptions o;
  const ReplayResult r = Replay(t, RoundCosts(1), o);
  EXPECT_EQ(r.block_hits, 0u);
  EXPECT_EQ(r.admitted_bytes, 0u);
}

TEST(PoolSimulatorTest, PrefixOfEvictedParentIsNotAHit) {
  // Pool of 2 blocks. A = [1,2] fills it; B = [3] evicts LRU's leaf 2, so a
  // later [1,2] hits only block 1 even though nothing else changed.
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(1, 4, 1, std::vector<uint64_t>{3});
  t.Add(2, 8, 1, std::vector<uint64_t>{1, 2});
  PoolReplayOptions o;
  o.pool_bytes = 8000;
  int checks = 0;
  o.after_request = [&](uint32_t, const PoolState& pool) {
    EXPECT_LE(pool.used_bytes(), pool.capacity_bytes());
    ++checks;
  };
  const ReplayResult r = Replay(t, RoundCosts(1), o);
  EXPECT_EQ(checks, 3);
  EXPECT_EQ(r.block_hits, 1u);
  EXPECT_EQ(r.evicted_blocks, 2u);  // block 2 for B, then block 3 to readmit 2
}

TEST(PoolSimulatorTest, RejectsIdsThatAreNotPrefixHashes) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2}, /*line=*/1);
  t.Add(0, 8, 1, std::vector<uint64_t>{3, 2}, /*line=*/2);
  auto replay = BuildReplayTrace(t, RoundCosts(1));
  ASSERT_FALSE(replay.ok());
  EXPECT_NE(replay.status().message().find("hand:2: field 'hash_ids[1]'"), std::string::npos)
      << replay.status();
  EXPECT_NE(replay.status().message().find("line 1"), std::string::npos);
}

TEST(PoolSimulatorTest, NextUseIsTheNextRequestUsingTheBlock) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(1, 4, 1, std::vector<uint64_t>{3});
  t.Add(2, 4, 1, std::vector<uint64_t>{1});
  auto replay = BuildReplayTrace(t, RoundCosts(1));
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->next_use,
            (std::vector<uint32_t>{2, kNeverUsedAgain, kNeverUsedAgain, kNeverUsedAgain}));
}

TEST(PoolSimulatorTest, BadOptionsAreRefused) {
  Trace t = SmallTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  const CostModel cost = RoundCosts(1);
  auto replay = BuildReplayTrace(t, cost);
  PoolReplayOptions o;
  o.eval_from = 1.0;
  EXPECT_FALSE(ReplayPool(*replay, cost, "lru", o).ok());
  o.eval_from = 0;
  EXPECT_EQ(ReplayPool(*replay, cost, "nope", o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// learned's summary, hand-worked: ten requests of one new block each, so lru
// and gdsf both miss every block and pay the same (learned has no lead to
// switch on by itself); one switch to gdsf is forced after request 6. With
// eval_from 0.5 the evaluated requests are 5 to 9: lru led after 5 and 6,
// gdsf after 7, 8 and 9, so gdsf led most, 3 of 5. Other policies have no
// summary, and their report fields are null.
TEST(PoolSimulatorTest, LearnedReportsItsSwitchesAndTheExpertThatLedMost) {
  const auto h = MakeHandTrace({"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
  LearnedPolicy* learned = nullptr;
  PoolReplayOptions o;
  o.pool_bytes = 2 * HandBlockBytes();
  o.eval_from = 0.5;
  o.make_policy = [&](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
    auto policy = std::make_unique<LearnedPolicy>(env);
    learned = policy.get();
    return policy;
  };
  o.after_request = [&](uint32_t ri, const PoolState&) {
    if (ri == 6) {
      EXPECT_TRUE(learned->SwitchTo("gdsf").ok());
    }
  };
  auto r = ReplayPool(h->replay, DefaultCost(), "learned", o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->follower.has_value());
  EXPECT_EQ(r->follower->switches, 1u);
  EXPECT_EQ(r->follower->main_leader, "gdsf");
  EXPECT_DOUBLE_EQ(r->follower->main_leader_share, 0.6);

  PoolReplayOptions plain;
  plain.pool_bytes = o.pool_bytes;
  plain.eval_from = o.eval_from;
  auto lru = ReplayPool(h->replay, DefaultCost(), "lru", plain);
  ASSERT_TRUE(lru.ok()) << lru.status();
  EXPECT_FALSE(lru->follower.has_value());

  Comparison c;
  c.results = {*lru, *r};
  EXPECT_NE(FormatTable(c).find(
                "learned: 1 leader switches in the replay; gdsf led 60% of the evaluated requests"),
            std::string::npos);
  const std::string json = FormatJson(c);
  EXPECT_NE(json.find("\"leader_switches\": null, \"main_leader\": null"), std::string::npos);
  EXPECT_NE(json.find(absl::StrCat("\"leader_switches\": 1, \"main_leader\": \"gdsf\", ",
                                   "\"main_leader_share\": ", JsonNumber(0.6))),
            std::string::npos);
}

}  // namespace
}  // namespace kvlearn
