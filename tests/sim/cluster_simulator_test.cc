// Hand-computed cluster scenarios (TTFT to the millisecond) and invariants.
#include "sim/cluster_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "datasets/workload_generator.h"
#include "policies/policy_factory.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

// Round numbers: 1e6 KV bytes per token (a 4-token block is 4e6 B), prefill
// 1 ms per token (linear: L_cross out of reach), RDMA 2 GB/s = 2e6 B/ms (a
// block loads in 2 ms), PCIe 4 GB/s (1 ms per block).
CostModel RoundCosts() {
  ModelProfile m{"toy", 1, 1, 250000, 2, 1.0};
  HardwareProfile h{"toy", 1.0, 0.0, 1u << 30, 1.0, 2.0, 4.0, 1.0, 1.0, 1};
  return CostModel(m, h, RecomputeForm::kKvlearnPaper);  // alpha_bw only: linear
}

Trace HandTrace() {
  Trace t;
  t.source = "hand";
  t.block_size = 4;
  return t;
}

ClusterOptions Options(uint32_t nodes, std::string router = "round-robin") {
  ClusterOptions o;
  o.prefill_nodes = nodes;
  o.hbm_bytes_per_node = 1'000'000'000;  // 250 blocks
  o.dram_bytes_per_node = 0;
  o.pool_bytes = 0;
  o.router = router;
  o.keep_ttft_samples = true;
  return o;
}

ClusterResult Simulate(const Trace& t, const ClusterOptions& o) {
  static const CostModel cost = RoundCosts();
  auto replay = BuildReplayTrace(t, cost);
  EXPECT_TRUE(replay.ok()) << replay.status();
  auto r = ReplayCluster(*replay, cost, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ClusterResult{};
}

TEST(ClusterSimulatorTest, OneNodeOneRequest) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  const ClusterResult r = Simulate(t, Options(1));
  ASSERT_EQ(r.ttft_samples_ms.size(), 1u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 8);  // 8 tokens at 1 ms
  EXPECT_DOUBLE_EQ(r.queue_ms.mean, 0);
  EXPECT_DOUBLE_EQ(r.load_ms.mean, 0);
  EXPECT_DOUBLE_EQ(r.prefill_ms.mean, 8);
  EXPECT_EQ(r.replay.recomputed_tokens, 8u);
  EXPECT_EQ(r.link_bytes, 0u);  // no DRAM, no pool: nothing moves
}

// r1 (8 tokens) at 0 runs 0-8; r2 (4 tokens) at 2 waits until 8 and ends at
// 12; r3 at 20 shares r1's two blocks, which the node's HBM now holds, and
// prefills only its last 4 tokens.
TEST(ClusterSimulatorTest, TwoRequestsQueueThenAnHbmHit) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(2, 4, 1, std::vector<uint64_t>{3});
  t.Add(20, 12, 1, std::vector<uint64_t>{1, 2, 4});
  const ClusterResult r = Simulate(t, Options(1));
  ASSERT_EQ(r.ttft_samples_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 8);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 10);  // 6 queued + 4 prefill
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[2], 4);
  EXPECT_DOUBLE_EQ(r.queue_ms.p99, 6);
  EXPECT_EQ(r.hbm_hit_blocks, 2u);
  EXPECT_EQ(r.replay.block_hits, 2u);
  EXPECT_NEAR(r.hbm_hit_ratio(), 2.0 / 6, 1e-12);
}

// The warm-up's backlog. Evaluating from the second request of the trace
// above: when r1 arrives at 2, r0 runs on node 0 until 8, so 1 request and 6
// ms of work are outstanding; over two nodes that is 3 ms per node. Evaluating
// every request, nothing is carried.
TEST(ClusterSimulatorTest, BacklogAtTheEvaluatedWindowsStart) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(2, 4, 1, std::vector<uint64_t>{3});
  t.Add(20, 12, 1, std::vector<uint64_t>{1, 2, 4});
  ClusterOptions o = Options(1);
  o.eval_from = 0.34;  // floor(0.34 * 3) = 1: r1 is the first evaluated
  ClusterResult r = Simulate(t, o);
  ASSERT_EQ(r.ttft_samples_ms.size(), 2u);
  EXPECT_EQ(r.backlog_at_eval_requests, 1u);
  EXPECT_DOUBLE_EQ(r.backlog_at_eval_ms, 6);

  o.prefill_nodes = 2;
  r = Simulate(t, o);
  EXPECT_EQ(r.backlog_at_eval_requests, 1u);
  EXPECT_DOUBLE_EQ(r.backlog_at_eval_ms, 3);

  r = Simulate(t, Options(1));
  EXPECT_EQ(r.backlog_at_eval_requests, 0u);
  EXPECT_DOUBLE_EQ(r.backlog_at_eval_ms, 0);
}

// With two nodes round-robin, r2 does not wait.
TEST(ClusterSimulatorTest, SecondNodeTakesTheSecondRequest) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(2, 4, 1, std::vector<uint64_t>{3});
  const ClusterResult r = Simulate(t, Options(2));
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 4);
}

// What a tier's policy is told: `lru` deciding, each kind of call's request
// and time written down once, as "r<request>@<ms>" for the request's start,
// "a..." for its first ask to admit, "i..." for its first insert.
class ClockLog final : public RetentionPolicy {
 public:
  ClockLog(std::unique_ptr<RetentionPolicy> inner, std::vector<std::string>* log)
      : inner_(std::move(inner)), log_(log) {}
  std::string_view name() const override { return inner_->name(); }
  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& a) override {
    Note("", a);
    inner_->OnRequest(chain, a);
  }
  void OnHit(BlockIndex b, const AccessInfo& a) override { inner_->OnHit(b, a); }
  bool ShouldAdmit(BlockIndex b, const AccessInfo& a) override {
    Note("a", a);
    return inner_->ShouldAdmit(b, a);
  }
  void OnInsert(BlockIndex b, const AccessInfo& a) override {
    Note("i", a);
    inner_->OnInsert(b, a);
  }
  BlockIndex SelectVictim() override { return inner_->SelectVictim(); }
  void OnEvict(BlockIndex b) override { inner_->OnEvict(b); }
  double EvictionPriority(BlockIndex b) const override { return inner_->EvictionPriority(b); }

 private:
  void Note(const char* kind, const AccessInfo& a) {
    const std::string entry = absl::StrCat(kind, "r", a.request, "@", a.time_ms);
    if (std::find(log_->begin(), log_->end(), entry) == log_->end()) log_->push_back(entry);
  }
  std::unique_ptr<RetentionPolicy> inner_;
  std::vector<std::string>* log_;
};

// The shared pool is told when each use and admission happens, not when the
// request arrived. Round-robin over two nodes: r0 (40 tokens) at 0 runs on
// node 0 until 40; r1 (4) at 1 on node 1 until 5; r2 (4) at 2 waits on node
// 0 until 40 and runs until 44; r3 (4) at 3 waits on node 1 until 5 and runs
// until 9. So the pool sees r0 start at 0, r1 at 1; r1's block asked for and
// inserted at 5, when r3 starts; r3's at 9; r0's at 40, when r2 starts; r2's
// at 44. Told the arrival times, its clock would have run from r3's 3 back to
// r0's 0 and r2's 2.
TEST(ClusterSimulatorTest, ThePoolIsToldWhenEachUseAndAdmissionHappens) {
  Trace t = HandTrace();
  t.Add(0, 40, 1, std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  t.Add(1, 4, 1, std::vector<uint64_t>{11});
  t.Add(2, 4, 1, std::vector<uint64_t>{12});
  t.Add(3, 4, 1, std::vector<uint64_t>{13});
  ClusterOptions o = Options(2);
  o.pool_bytes = 1'000'000'000;
  std::vector<std::string> pool_log, hbm_log;
  o.make_policy = [&](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
    auto lru = CreatePolicy("lru", env);
    if (!lru.ok()) return lru.status();
    auto* log = env.admission_moves_bytes ? &pool_log : &hbm_log;
    return std::make_unique<ClockLog>(std::move(*lru), log);
  };
  const ClusterResult r = Simulate(t, o);
  ASSERT_EQ(r.ttft_samples_ms.size(), 4u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[2], 42);  // r2: queued 2 -> 40, prefill 40 -> 44
  EXPECT_EQ(absl::StrJoin(pool_log, " "),
            "r0@0 r1@1 ar1@5 ir1@5 r3@5 ar3@9 ir3@9 ar0@40 ir0@40 r2@40 ar2@44 ir2@44");
}

// No HBM cache, a pool. r1 (0-8) admits its 2 blocks (8e6 B) to the pool at
// 8, a background transfer on the node's RDMA link. r2 arrives at 8 and finds
// them in the pool: loading (8e6 B / 2e6 B/ms = 4 ms) beats recomputing (8 ms),
// but the load shares the link with the admission: 1e6 B/ms each, both end at
// 16. Then 4 tokens of prefill: TTFT 12 = 0 queue + 8 load + 4 prefill.
TEST(ClusterSimulatorTest, LoadSharesTheLinkWithAnAdmission) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(8, 12, 1, std::vector<uint64_t>{1, 2, 3});
  ClusterOptions o = Options(1);
  o.hbm_bytes_per_node = 0;
  o.pool_bytes = 1'000'000'000;
  const ClusterResult r = Simulate(t, o);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 8);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 12);
  EXPECT_DOUBLE_EQ(r.load_ms.p99, 8);
  EXPECT_EQ(r.pool_hit_blocks, 2u);
  EXPECT_EQ(r.replay.loaded_bytes, 8'000'000u);
  EXPECT_EQ(r.replay.admitted_bytes, 12'000'000u);  // r1's 2 blocks, then r2's third
  EXPECT_EQ(r.link_bytes, 20'000'000u);
}

// HBM holds one block, DRAM everything. r1 leaves block 1 in HBM and writes
// both through to DRAM. r2 at 20: block 1 from HBM, block 2 from DRAM over
// PCIe (4e6 B at 4e6 B/ms = 1 ms, cheaper than 4 ms of prefill), then 4
// tokens: TTFT 5.
TEST(ClusterSimulatorTest, DramTierLoadsOverPcie) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(20, 12, 1, std::vector<uint64_t>{1, 2, 3});
  ClusterOptions o = Options(1);
  o.hbm_bytes_per_node = 4'000'000;
  o.dram_bytes_per_node = 1'000'000'000;
  const ClusterResult r = Simulate(t, o);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 5);
  EXPECT_EQ(r.hbm_hit_blocks, 1u);
  EXPECT_EQ(r.dram_hit_blocks, 1u);
  EXPECT_EQ(r.dram_write_bytes, 12'000'000u);  // 2 blocks, then r2's third
}

// The flops cost model: 2 * 1e9 params * 8 tokens / (1 TFLOP/s * 0.5) = 32
// ms, no attention term (0 query heads). A second request hitting the first
// block (4 tokens) from HBM prefills tokens [4, 8): 16 ms, and with 1 query
// head of dim 250000 over 1 layer the attention term adds
// 2 * 250000 * (8^2 - 4^2) = 24e6 FLOPs = 0.048 ms.
TEST(ClusterSimulatorTest, FlopsPrefill) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(100, 8, 1, std::vector<uint64_t>{1, 3});
  ModelProfile m{"toy", 1, 1, 250000, 2, 1.0};
  HardwareProfile h{"toy", 1.0, 0.0, 1u << 30, 1.0, 2.0, 4.0, 1.0, 1.0, 1, 1.0, 0.5, 1.0, 1.0};
  const CostModel dense(m, h);
  auto replay = BuildReplayTrace(t, dense);
  ASSERT_TRUE(replay.ok());
  ClusterOptions o = Options(1);
  auto r = ReplayCluster(*replay, dense, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->ttft_samples_ms[0], 32);
  EXPECT_DOUBLE_EQ(r->ttft_samples_ms[1], 16);

  m.query_heads = 1;
  const CostModel attention(m, h);
  auto replay2 = BuildReplayTrace(t, attention);
  ASSERT_TRUE(replay2.ok());
  auto r2 = ReplayCluster(*replay2, attention, o);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_NEAR(r2->ttft_samples_ms[1], 16 + 0.048, 1e-9);
}

// Loading is skipped when recomputing is cheaper: at 0.5 GB/s a block takes
// 8 ms to load but 4 ms to recompute.
TEST(ClusterSimulatorTest, RecomputesWhenLoadingCostsMore) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(20, 12, 1, std::vector<uint64_t>{1, 2, 3});
  ModelProfile m{"toy", 1, 1, 250000, 2, 1.0};
  HardwareProfile h{"toy", 1.0, 0.0, 1u << 30, 1.0, 0.5, 4.0, 1.0, 1.0, 1};
  const CostModel slow(m, h, RecomputeForm::kKvlearnPaper);
  auto replay = BuildReplayTrace(t, slow);
  ASSERT_TRUE(replay.ok());
  ClusterOptions o = Options(1);
  o.hbm_bytes_per_node = 0;
  o.pool_bytes = 1'000'000'000;
  o.keep_ttft_samples = true;
  auto r = ReplayCluster(*replay, slow, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->ttft_samples_ms[1], 12);
  EXPECT_EQ(r->replay.loaded_bytes, 0u);
}

// Burst replication on two nodes, Y = 2 blocks, X = 2, M = 2.
// r1 {1,2,3} at 0 goes to node 0 (nothing cached anywhere; ties -> node 0),
// 12 ms. r2 and r3 share the 2-block prefix and arrive at 100: r2 completes
// the burst, so the prefix (8e6 B) is copied from node 0 to node 1 over node
// 0's NIC, 100-104. r2 goes to node 0 (both warm, equal load), prefills its
// 12 new tokens: TTFT 12. r3 goes to node 1 (less loaded), waits for the copy
// until 104, prefills 12 tokens: TTFT 16. Under cache-aware r3 queues behind
// r2 on node 0: TTFT 24.
TEST(ClusterSimulatorTest, BurstReplicationCopiesAheadOfTheQueue) {
  Trace t = HandTrace();
  t.Add(0, 12, 1, std::vector<uint64_t>{1, 2, 3});
  t.Add(100, 20, 1, std::vector<uint64_t>{1, 2, 4, 5, 6});
  t.Add(100, 20, 1, std::vector<uint64_t>{1, 2, 7, 8, 9});
  ClusterOptions o = Options(2, "burst-replicate");
  o.replication.rule = {2, 1000, 2};
  o.replication.targets = 2;
  const ClusterResult r = Simulate(t, o);
  EXPECT_EQ(r.burst_triggers, 1u);
  EXPECT_EQ(r.replications, 1u);
  EXPECT_EQ(r.replication_bytes, 8'000'000u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 12);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 12);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[2], 16);
  EXPECT_EQ(r.hbm_hit_blocks, 4u);

  const ClusterResult base = Simulate(t, Options(2, "cache-aware"));
  EXPECT_DOUBLE_EQ(base.ttft_samples_ms[2], 24);
  EXPECT_EQ(base.replication_bytes, 0u);
}

// Two copies leave node 0 at once and share its NIC: 8e6 B each at 1e6 B/ms
// instead of 2e6, so both arrive at 108 instead of 104. r2 stays on node 0
// (12 ms), r3 and r4 go to nodes 1 and 2, wait for their copies until 108 and
// prefill 12 tokens: TTFT 20 each.
TEST(ClusterSimulatorTest, CopiesFromOneNodeShareItsLink) {
  Trace t = HandTrace();
  t.Add(0, 12, 1, std::vector<uint64_t>{1, 2, 3});
  t.Add(100, 20, 1, std::vector<uint64_t>{1, 2, 4, 5, 6});
  t.Add(100, 20, 1, std::vector<uint64_t>{1, 2, 7, 8, 9});
  t.Add(100, 20, 1, std::vector<uint64_t>{1, 2, 10, 11, 12});
  ClusterOptions o = Options(3, "burst-replicate");
  o.replication.rule = {2, 1000, 2};
  o.replication.targets = 3;
  const ClusterResult r = Simulate(t, o);
  EXPECT_EQ(r.replications, 2u);
  EXPECT_EQ(r.replication_bytes, 16'000'000u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 12);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[2], 20);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[3], 20);
  EXPECT_DOUBLE_EQ(r.load_ms.p99, 8);
}

// Cache-aware falls back to the least-loaded node once the load is imbalanced
// (max - min > 64 and max > 1.5 min). 70 requests arrive at 0 sharing block 1
// (half of each prompt: a match of 0.5 > 0.3). r0 goes to node 0 (ties) and
// computes 8 tokens; r1..r64 follow it there and prefill 4 tokens each, so r64
// ends at 8 + 64 * 4 = 264. When r65 arrives node 0 holds 65 requests, node 1
// none: 65 > 64, so r65 goes to node 1 (cold: 8 ms). For r66 the loads are 65
// and 1, balanced again; both nodes match block 1 (node 1 through r65), and
// the less loaded one wins: r66 queues behind r65 on node 1 and hits: 8 + 4.
TEST(ClusterSimulatorTest, CacheAwareBalancesPastTheThresholds) {
  Trace t = HandTrace();
  for (uint64_t i = 0; i < 70; ++i) t.Add(0, 8, 1, std::vector<uint64_t>{1, 100 + i});
  const ClusterResult r = Simulate(t, Options(2, "cache-aware"));
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 8);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[64], 264);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[65], 8);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[66], 12);
  // Herding: r1..r64 follow block 1 to node 0 while node 1 is idle, r_k
  // with k outstanding there (excess 1 + ... + 64 = 2080); r65 balances and
  // r66..r69 tie on the match, so they go to the less loaded node 1.
  EXPECT_EQ(r.routed_to_busier, 64u);
  EXPECT_EQ(r.routed_excess_requests, 2080u);

  const ClusterResult least = Simulate(t, Options(2, "least-load"));
  EXPECT_EQ(least.routed_to_busier, 0u);
  EXPECT_EQ(least.routed_excess_requests, 0u);
}

// The cache-aware fallback counts the prompts on their way to a node as part
// of its cache, as sgl-router's tree does once it routes them. r0 {1, 2} at
// 0 -> node 0 (ties), 8 ms. r1 {3} at 10 -> node 1 (node 0 caches 8e6 B,
// node 1 nothing), 4 ms. r2 {4, 5, 6} at 100 matches nothing -> node 1
// (4e6 B against 8e6 B), 12 ms. r3 {7} at 100 matches nothing either: node 1
// now caches 4e6 B and has 12e6 B on their way, so r3 goes to idle node 0,
// TTFT 4. Counting only what HBM holds, node 1 would still look emptier and
// r3 would queue behind r2 there: TTFT 12 + 4.
TEST(ClusterSimulatorTest, CacheAwareFallbackCountsPromptsOnTheirWay) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  t.Add(10, 4, 1, std::vector<uint64_t>{3});
  t.Add(100, 12, 1, std::vector<uint64_t>{4, 5, 6});
  t.Add(100, 4, 1, std::vector<uint64_t>{7});
  const ClusterResult r = Simulate(t, Options(2, "cache-aware"));
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[2], 12);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[3], 4);
  EXPECT_EQ(r.routed_to_busier, 0u);
}

// cache-aware-approx remembers what it routed, not what HBM holds. HBM holds
// one 4-token block per node; each prompt takes 4 ms per block to prefill.
// r0 {1} at 0 -> node 0 (nothing anywhere; ties: node 0). r1 {2} at 10 ->
// node 1 (the fallback: node 1 caches and remembers nothing). r2 {3} at 20:
// both nodes cache 4e6 B and remember 4 tokens -> node 0, whose HBM now holds
// {3}. r3 {4} at 30: both cache 4e6 B, so cache-aware sends it to node 0
// (evicting 3); node 0 remembers 8 tokens and node 1 4, so cache-aware-approx
// sends it to node 1. r4 {3, 5} at 40: no node's HBM holds block 3 under
// cache-aware, which falls back to node 0 and recomputes 8 tokens; node 0
// remembers block 3 under cache-aware-approx (match 4 of 8 tokens > 0.3), and
// its HBM still holds it: TTFT 4.
TEST(ClusterSimulatorTest, ApproximateCacheAwareFollowsWhatItRouted) {
  Trace t = HandTrace();
  t.Add(0, 4, 1, std::vector<uint64_t>{1});
  t.Add(10, 4, 1, std::vector<uint64_t>{2});
  t.Add(20, 4, 1, std::vector<uint64_t>{3});
  t.Add(30, 4, 1, std::vector<uint64_t>{4});
  t.Add(40, 8, 1, std::vector<uint64_t>{3, 5});
  ClusterOptions o = Options(2, "cache-aware");
  o.hbm_bytes_per_node = 4'000'000;
  const ClusterResult exact = Simulate(t, o);
  EXPECT_DOUBLE_EQ(exact.ttft_samples_ms[4], 8);
  EXPECT_EQ(exact.hbm_hit_blocks, 0u);

  o.router = "cache-aware-approx";
  const ClusterResult approx = Simulate(t, o);
  EXPECT_DOUBLE_EQ(approx.ttft_samples_ms[4], 4);
  EXPECT_EQ(approx.hbm_hit_blocks, 1u);
  EXPECT_EQ(approx.router, "cache-aware-approx");

  // Trimmed to 4 tokens every 25 ms (at 25, then 50): at r3 the trim has
  // dropped block 1 from node 0's memory, both nodes remember 4 tokens, and
  // r3 goes to node 0 as under cache-aware; r4 follows block 3 there and
  // misses it in HBM: TTFT 8.
  o.cache_aware.max_tree_tokens = 4;
  o.cache_aware.eviction_interval_s = 0.025;
  const ClusterResult trimmed = Simulate(t, o);
  EXPECT_DOUBLE_EQ(trimmed.ttft_samples_ms[4], 8);
  EXPECT_EQ(trimmed.hbm_hit_blocks, 0u);
}

// The pool is told of a use only for the blocks it serves. One node, HBM
// and pool two blocks each, LRU everywhere, no DRAM. r0 {1} and r1 {2} leave
// both in HBM and in the pool (pool recency: 1, then 2). r2 {1} at 20 is
// served by HBM alone: the pool, which served nothing, keeps 1 as its least
// recent block (were it told of every block it holds, 2 would be). r3 {4} at
// 30 evicts 2 from HBM (LRU there: 1 was hit at 20) and 1 from the pool to
// admit 4. r4 {2} at 40 misses HBM and loads block 2 from the pool: 4e6 B at
// 2e6 B/ms = 2 ms instead of 4 ms of prefill.
TEST(ClusterSimulatorTest, ThePoolHearsOnlyOfTheBlocksItServes) {
  Trace t = HandTrace();
  t.Add(0, 4, 1, std::vector<uint64_t>{1});
  t.Add(10, 4, 1, std::vector<uint64_t>{2});
  t.Add(20, 4, 1, std::vector<uint64_t>{1});
  t.Add(30, 4, 1, std::vector<uint64_t>{4});
  t.Add(40, 4, 1, std::vector<uint64_t>{2});
  ClusterOptions o = Options(1);
  o.hbm_bytes_per_node = 8'000'000;
  o.pool_bytes = 8'000'000;
  const ClusterResult r = Simulate(t, o);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[4], 2);
  EXPECT_EQ(r.pool_hit_blocks, 1u);
  EXPECT_EQ(r.hbm_hit_blocks, 1u);  // r2's block 1
}

TEST(ClusterSimulatorTest, RejectsUnknownRouterAndPolicy) {
  Trace t = HandTrace();
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 2});
  const CostModel cost = RoundCosts();
  auto replay = BuildReplayTrace(t, cost);
  ASSERT_TRUE(replay.ok());
  ClusterOptions o = Options(1, "nope");
  EXPECT_FALSE(ReplayCluster(*replay, cost, o).ok());
  o = Options(1);
  o.retention_policy = "nope";
  EXPECT_FALSE(ReplayCluster(*replay, cost, o).ok());
}

// Invariants on a bursty trace with small caches, every router: no tier over
// capacity after any event; every byte started on a link completes; link
// bytes = loads + admissions + replication copies + DRAM write-through.
TEST(ClusterSimulatorTest, InvariantsHoldOnABurstyTrace) {
  FanoutWorkloadOptions g;
  g.requests = 400;
  g.block_size = 64;
  g.context_median_tokens = 2000;
  g.system_prompt_median_tokens = 500;
  const Trace trace = GenerateFanoutTrace(g);
  ModelProfile m{"toy", 1, 1, 250, 2, 8.03};
  HardwareProfile h = *FindHardwareProfile("a100");
  const CostModel cost(m, h);  // 1000 B per token
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  for (const std::string_view router : RouterNames()) {  // every router, learned included
    ClusterOptions o = Options(4, std::string(router));
    o.model = MakeTestModel();
    o.hbm_bytes_per_node = 2'000'000;  // ~30 blocks of 64 tokens: evictions happen
    o.dram_bytes_per_node = 6'000'000;
    o.pool_bytes = 20'000'000;
    o.replication.rule = {2, 1000, 8};
    uint64_t checks = 0;
    bool ok = true;
    o.after_event = [&](const ClusterState& s) {
      ++checks;
      for (uint32_t n = 0; n < s.nodes(); ++n) {
        ok &= s.Hbm(n).used_bytes() <= s.Hbm(n).capacity_bytes();
        ok &= s.Dram(n)->used_bytes() <= s.Dram(n)->capacity_bytes();
      }
    };
    auto r = ReplayCluster(*replay, cost, o);
    ASSERT_TRUE(r.ok()) << router << ": " << r.status();
    EXPECT_TRUE(ok) << router;
    EXPECT_GT(checks, 400u);
    EXPECT_EQ(r->replay.requests, 400u);
    EXPECT_LE(r->routed_to_busier, r->replay.requests) << router;
    EXPECT_GE(r->routed_excess_requests, r->routed_to_busier) << router;
    if (router == "least-load") EXPECT_EQ(r->routed_to_busier, 0u);
    EXPECT_EQ(r->link_bytes, r->replay.loaded_bytes + r->replay.admitted_bytes +
                                 r->replication_bytes + r->dram_write_bytes)
        << router;
    if (router == "burst-replicate" || router == "learned") {
      EXPECT_GT(r->replication_bytes, 0u) << router;
    } else {
      EXPECT_EQ(r->replication_bytes, 0u) << router;
    }
  }
}

// Ten requests of 8 distinct tokens (8 ms each at 1 ms/token), one every 10
// ms from 0 to 90: LRU is busy 80 ms over a 90 ms window. One node: 89%, over
// the 80% target; two: 44%. SizeCluster picks 2, and the row's utilization
// is busy / (nodes * window).
TEST(ClusterSimulatorTest, AutoSizingOnAHandMadeTrace) {
  Trace t = HandTrace();
  for (uint64_t i = 0; i < 10; ++i) {
    t.Add(static_cast<int64_t>(10 * i), 8, 1, std::vector<uint64_t>{100 + 2 * i, 101 + 2 * i});
  }
  static const CostModel cost = RoundCosts();
  auto replay = BuildReplayTrace(t, cost);
  ASSERT_TRUE(replay.ok());
  ClusterSizing sizing;
  auto nodes = SizeCluster(*replay, cost, Options(1), kTargetUtilization, &sizing);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(*nodes, 2u);
  EXPECT_NEAR(sizing.utilization, 80.0 / 180, 1e-12);
  const ClusterResult one = Simulate(t, Options(1));
  EXPECT_NEAR(one.replay.busy_seconds, 0.080, 1e-12);
  EXPECT_NEAR(one.replay.utilization(), 80.0 / 90, 1e-12);
  EXPECT_GT(one.replay.utilization(), kTargetUtilization);
}

}  // namespace
}  // namespace kvlearn
