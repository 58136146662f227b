// Issue 13, "bounded state": a pool's catalog used to grow with every block id
// it ever saw (88 B/id under lru), and all_blocks_cleared freed nothing. Now a
// pool remembers at most --ghost-blocks blocks that are neither resident nor
// awaiting removal; past that it is compacted (server/shard_image.h) down to
// the half most recently seen. These tests check the bound, what is kept, that
// a clear frees, and that lru's decisions do not change by a compaction.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "policies/policy_factory.h"
#include "server/node_pools.h"
#include "tests/server/pool_events.h"
#include "tests/server/restart_compare.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr uint64_t kGhosts = 64;

NodePoolsOptions Options(uint64_t ghosts = kGhosts) {
  NodePoolsOptions o;
  o.cost = std::make_shared<CostModel>(DefaultCost());
  o.ghost_blocks = ghosts;
  return o;
}

v1::PoolStatus Pool(const NodePools& pools) {
  v1::GetStatusResponse status;
  pools.FillStatus(status);
  EXPECT_EQ(status.pools_size(), 1);
  return status.pools_size() > 0 ? status.pools(0) : v1::PoolStatus();
}

// Whether the pool still remembers `id`: a RankEviction naming an unknown
// candidate is NOT_FOUND, a known non-resident one is ignored.
bool Remembers(NodePools& pools, uint64_t id) {
  v1::RankRequest r;
  r.set_node_id("n");
  r.set_bytes_to_free(1);
  r.add_candidate_ids(id);
  return pools.RankEviction(r).ok();
}

TEST(ShardCompactionTest, GhostsStayWithinTheBoundAndTheRecentOnesAreKept) {
  NodePools pools(Options());
  for (uint64_t id = 1; id <= 10'000; ++id) {
    ASSERT_TRUE(pools.Apply(Arrival({id})).ok());
    // + 1: the latest request (no request_id) holds its block until the next
    // arrival, and a held block is never forgotten.
    ASSERT_LE(Pool(pools).blocks_tracked(), kGhosts + 1) << id;
  }
  EXPECT_GE(Pool(pools).blocks_tracked(), kGhosts / 2);
  EXPECT_EQ(pools.counters().blocks_tracked.load(), Pool(pools).blocks_tracked());
  // The last kGhosts / 2 ids seen are always remembered, the first long gone.
  for (uint64_t id = 10'000 - kGhosts / 2 + 1; id <= 10'000; ++id) {
    EXPECT_TRUE(Remembers(pools, id)) << id;
  }
  EXPECT_FALSE(Remembers(pools, 1));
  EXPECT_EQ(Pool(pools).requests(), 10'000u);  // counters survive compactions
}

TEST(ShardCompactionTest, ARecentlySeenOldIdOutlivesNewerOnes) {
  NodePools pools(Options());
  ASSERT_TRUE(pools.Apply(Arrival({7})).ok());
  // Id 7 is seen again every 20 new ids: always among the most recent.
  for (uint64_t id = 100; id < 2'000; ++id) {
    ASSERT_TRUE(pools.Apply(Arrival({id})).ok());
    if (id % 20 == 0) {
      ASSERT_TRUE(pools.Apply(Arrival({7})).ok());
    }
  }
  EXPECT_TRUE(Remembers(pools, 7));
  EXPECT_FALSE(Remembers(pools, 100));
}

TEST(ShardCompactionTest, ResidentBlocksAndTheirChainsAreNeverForgotten) {
  NodePools pools(Options());
  // A resident chain 1 -> 2 -> 3, then a flood of ghosts.
  ASSERT_TRUE(pools.Apply(Arrival({1, 2, 3})).ok());
  ASSERT_TRUE(pools.Apply(Stored(1, std::nullopt)).ok());
  ASSERT_TRUE(pools.Apply(Stored(2, 1)).ok());
  ASSERT_TRUE(pools.Apply(Stored(3, 2)).ok());
  for (uint64_t id = 1'000; id < 3'000; ++id) ASSERT_TRUE(pools.Apply(Arrival({id})).ok());
  const auto pool = Pool(pools);
  EXPECT_EQ(pool.resident_blocks(), 3u);
  EXPECT_LE(pool.blocks_tracked(), 3 + kGhosts);
  // Still a chain: a hit on 3, and removing 2 takes its child 3 along (a
  // block without its prefix is unreachable) but leaves 1.
  v1::Event hit;
  hit.set_node_id("n");
  hit.mutable_block_hit()->set_block_id(3);
  EXPECT_TRUE(pools.Apply(hit).ok());
  v1::Event remove_parent;
  remove_parent.set_node_id("n");
  remove_parent.mutable_block_removed()->set_block_id(2);
  EXPECT_TRUE(pools.Apply(remove_parent).ok());
  EXPECT_EQ(Pool(pools).resident_blocks(), 1u);
  EXPECT_EQ(pools.counters().removed_descendants.load(), 1u);
}

TEST(ShardCompactionTest, AllBlocksClearedFreesTheCatalog) {
  NodePools pools(Options());
  // 20 chains of 10 stored blocks: 200 resident, nothing to forget.
  for (uint64_t c = 0; c < 20; ++c) {
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 10; ++i) ids.push_back(c * 100 + i + 1);
    ASSERT_TRUE(pools.Apply(Arrival(ids)).ok());
    std::optional<uint64_t> parent;
    for (uint64_t id : ids) {
      ASSERT_TRUE(pools.Apply(Stored(id, parent)).ok());
      parent = id;
    }
  }
  ASSERT_EQ(Pool(pools).blocks_tracked(), 200u);
  ASSERT_EQ(Pool(pools).resident_blocks(), 200u);
  v1::Event clear;
  clear.set_node_id("n");
  clear.mutable_all_blocks_cleared();
  ASSERT_TRUE(pools.Apply(clear).ok());
  EXPECT_EQ(Pool(pools).resident_blocks(), 0u);
  EXPECT_EQ(Pool(pools).resident_bytes(), 0u);
  // The most recent half-bound of ghosts, with their ancestors.
  EXPECT_LE(Pool(pools).blocks_tracked(), kGhosts / 2 + 10);
  EXPECT_EQ(pools.counters().blocks_tracked.load(), Pool(pools).blocks_tracked());
  EXPECT_EQ(pools.counters().resident_blocks.load(), 0u);
}

// The learned policy keeps per-block feature history: a compaction gives it
// a fresh policy over a renumbered catalog, which must keep answering.
TEST(ShardCompactionTest, LearnedPoolsCompactAndKeepAnswering) {
  NodePoolsOptions o = Options();
  o.policy = "learned";
  o.model = MakeTestModel();
  NodePools pools(o);
  std::optional<uint64_t> parent;
  for (uint64_t c = 0; c < 400; ++c) {
    const uint64_t base = c * 10 + 1;
    ASSERT_TRUE(pools.Apply(Arrival({base, base + 1})).ok());
    ASSERT_TRUE(pools.Apply(Stored(base, std::nullopt)).ok());
    v1::AdmitRequest admit;
    admit.set_node_id("n");
    auto* cand = admit.add_candidates();
    cand->set_block_id(base + 1);
    cand->set_parent_id(base);
    cand->set_tokens(512);
    cand->set_bytes(static_cast<int64_t>(DefaultCost().BytesForTokens(512)));
    ASSERT_TRUE(pools.Admit(admit).ok());
    if (c % 8 == 7) {
      v1::RankRequest rank;
      rank.set_node_id("n");
      rank.set_bytes_to_free(static_cast<int64_t>(4 * DefaultCost().BytesForTokens(512)));
      ASSERT_TRUE(pools.RankEviction(rank).ok());
    }
    // + 1: the latest request holds its second block, not stored.
    ASSERT_LE(Pool(pools).blocks_tracked(), Pool(pools).resident_blocks() + kGhosts + 1) << c;
  }
  // RankEviction proposed victims (no block_removed confirms them here).
  EXPECT_GT(Pool(pools).proposed_blocks(), 0u);
}

// The same trace through two sidecars, one compacting often (--ghost-blocks
// 64), one never: every decision the nodes saw is the same, and so is a final
// drain, scores included. A compaction carries the policy's state over
// (server/shard_image.h), and these policies keep nothing about blocks out of
// the pool, so forgetting ghosts changes nothing. (arc and s3fifo remember
// ghosts, kvlearn-cars and learned their access history: for them a
// compaction forgets by design.)
class CompactionDecisionsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CompactionDecisionsTest, DecisionsDoNotChangeByACompaction) {
  const Fed fed(SmallChatTrace());
  ASSERT_TRUE(fed.replay.ok());
  TempDir small_dir, large_dir;
  auto options = [](const std::string& dir, uint64_t ghosts) {
    SidecarOptions o = RestartTestOptions(dir, GetParam());
    o.ghost_blocks = ghosts;
    return o;
  };
  auto small = StartServer(options(small_dir.path(), kGhosts));
  auto large = StartServer(options(large_dir.path(), uint64_t{1} << 30));
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  const LoadgenResult a = Feed(fed, small->port());
  const LoadgenResult b = Feed(fed, large->port());
  ASSERT_GT(b.result.evicted_blocks, 0u);
  EXPECT_EQ(a.result.block_hits, b.result.block_hits);
  EXPECT_EQ(a.result.hit_tokens, b.result.hit_tokens);
  EXPECT_EQ(a.result.evicted_blocks, b.result.evicted_blocks);
  EXPECT_EQ(a.result.admitted_bytes, b.result.admitted_bytes);

  auto small_stub = Connect(small->port());
  auto large_stub = Connect(large->port());
  grpc::ClientContext ctx_small, ctx_large;
  v1::GetStatusResponse st_small, st_large;
  ASSERT_TRUE(small_stub->GetStatus(&ctx_small, {}, &st_small).ok());
  ASSERT_TRUE(large_stub->GetStatus(&ctx_large, {}, &st_large).ok());
  ASSERT_EQ(st_small.pools_size(), st_large.pools_size());
  for (int i = 0; i < st_small.pools_size(); ++i) {
    const auto& p = st_small.pools(i);
    const auto& q = st_large.pools(i);
    EXPECT_EQ(p.resident_blocks(), q.resident_blocks());
    EXPECT_EQ(p.resident_bytes(), q.resident_bytes());
    EXPECT_EQ(p.evictions(), q.evictions());
    EXPECT_EQ(p.requests(), q.requests());
    EXPECT_LE(p.blocks_tracked(), p.resident_blocks() + kGhosts);
    EXPECT_GT(q.blocks_tracked(), p.resident_blocks() + kGhosts) << "no compaction: a weak test";
  }
  for (uint32_t n = 0; n < kNodes; ++n) {
    const std::string node = "loadgen-" + std::to_string(n);
    const std::string drain = Rank(*large_stub, node, int64_t{1} << 60);
    EXPECT_NE(drain.find("victims"), std::string::npos);
    EXPECT_EQ(Rank(*small_stub, node, int64_t{1} << 60), drain) << node;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, CompactionDecisionsTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "sieve"), PolicyTestName);

// A compaction is triggered by counts of applied events and decisions, never
// by time, so the start-up replay compacts at the same points and a restart
// rebuilds every pool exactly, for every policy.
class CompactionReplayTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CompactionReplayTest, ARestartCompactsAtTheSamePoints) {
  const Fed fed(SmallChatTrace(150));
  ASSERT_TRUE(fed.replay.ok());
  TempDir never_dir, restarted_dir;
  auto options = [&](const std::string& dir) {
    SidecarOptions o = RestartTestOptions(dir, GetParam());
    o.ghost_blocks = kGhosts;
    if (PolicyUsesModel(GetParam())) {
      o.model_path = dir + "/model.pt";
      EXPECT_TRUE(CopyTestModel(o.model_path));
    }
    return o;
  };
  auto never = StartServer(options(never_dir.path()));
  auto restarted = StartServer(options(restarted_dir.path()));
  ASSERT_NE(never, nullptr);
  ASSERT_NE(restarted, nullptr);
  Feed(fed, never->port());
  Feed(fed, restarted->port());
  restarted.reset();
  restarted = StartServer(options(restarted_dir.path()));
  ASSERT_NE(restarted, nullptr);
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(restarted->port());
  ExpectSameAnswers(*never_stub, *restarted_stub, fed.pool_bytes);
}

INSTANTIATE_TEST_SUITE_P(Policies, CompactionReplayTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc",
                                           "kvlearn-cars", "learned"),
                         PolicyTestName);

}  // namespace
}  // namespace kvlearn
