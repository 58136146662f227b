// A policy state that its policy refuses at a restore (a bug in a policy's
// save/load pair, or damage the snapshot's checks missed) used to stop the
// sidecar from starting (DATA_LOSS out of the start-up replay), and a
// compaction went on with a half rebuilt pool. Now the pool keeps its
// residents and the policy starts afresh over them; the restore says so in a
// note and counts it (server/shard_image.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/node_pools.h"
#include "server/pools_snapshot.h"
#include "tests/server/pool_events.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

NodePoolsOptions Options(const std::string& policy) {
  NodePoolsOptions o;
  o.policy = policy;
  o.cost = std::make_shared<CostModel>(DefaultCost());
  if (policy == "learned") o.model = MakeTestModel();
  return o;
}

// Two chains, {1 2 3} and {4 5}, then 1 2 again with a new child 6; the
// last arrival (100, never stored) holds only itself, so every stored block
// is evictable.
void Fill(NodePools& pools) {
  const std::vector<v1::Event> events = {
      Arrival({1, 2, 3}), Stored(1, std::nullopt), Stored(2, 1), Stored(3, 2),
      Arrival({4, 5}),    Stored(4, std::nullopt), Stored(5, 4), Arrival({1, 2, 6}),
      Stored(6, 2),       Arrival({100})};
  for (const v1::Event& e : events) ASSERT_TRUE(pools.Apply(e).ok());
}

// The victims of a RankEviction that frees everything, in order.
std::vector<uint64_t> EvictEverything(NodePools& pools) {
  v1::RankRequest r;
  r.set_node_id("n");
  r.set_bytes_to_free(int64_t{1} << 50);
  auto answer = pools.RankEviction(r);
  EXPECT_TRUE(answer.ok()) << answer.status();
  std::vector<uint64_t> ids;
  if (answer.ok()) {
    for (const auto& v : answer->victims()) ids.push_back(v.block_id());
  }
  return ids;
}

uint64_t Resident(const NodePools& pools) {
  v1::GetStatusResponse status;
  pools.FillStatus(status);
  return status.pools_size() == 1 ? status.pools(0).resident_blocks() : 0;
}

PoolsSnapshot Capture(NodePools& pools) {
  PoolsSnapshot snapshot;
  EXPECT_TRUE(pools.CaptureAll([] { return true; }, &snapshot));
  return snapshot;
}

class RefusedPolicyStateTest : public testing::TestWithParam<std::string> {};

TEST_P(RefusedPolicyStateTest, AnIntactStateLoadsExactlyAndIsNotCounted) {
  NodePools original(Options(GetParam()));
  Fill(original);
  const PoolsSnapshot snapshot = Capture(original);
  ASSERT_EQ(snapshot.pools.size(), 1u);
  ASSERT_TRUE(snapshot.pools[0].image.policy_state.has_value());

  NodePools restored(Options(GetParam()));
  std::string note;
  ASSERT_TRUE(restored.RestoreAll(snapshot, &note).ok());
  EXPECT_EQ(note, "");
  EXPECT_EQ(restored.counters().policy_states_refused.load(), 0u);
  EXPECT_EQ(EvictEverything(restored), EvictEverything(original));
}

TEST_P(RefusedPolicyStateTest, ARefusedStateKeepsTheResidentsAndRestartsThePolicy) {
  NodePools original(Options(GetParam()));
  Fill(original);
  PoolsSnapshot snapshot = Capture(original);
  ASSERT_EQ(snapshot.pools.size(), 1u);
  ASSERT_TRUE(snapshot.pools[0].image.policy_state.has_value());
  snapshot.pools[0].image.policy_state->push_back('\x01');  // bytes left over: refused

  NodePools restored(Options(GetParam()));
  std::string note;
  ASSERT_TRUE(restored.RestoreAll(snapshot, &note).ok());
  EXPECT_NE(note.find("node 'n' tier TIER_POOL: its policy refused its saved state"),
            std::string::npos)
      << note;
  EXPECT_EQ(restored.counters().policy_states_refused.load(), 1u);
  EXPECT_EQ(Resident(restored), 6u);
  EXPECT_EQ(restored.counters().resident_blocks.load(), 6u);
  // Every stored block is still there, each named once, children first.
  const std::vector<uint64_t> victims = EvictEverything(restored);
  std::vector<uint64_t> sorted = victims;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  const auto at = [&victims](uint64_t id) {
    return std::find(victims.begin(), victims.end(), id) - victims.begin();
  };
  EXPECT_LT(at(3), at(2));
  EXPECT_LT(at(6), at(2));
  EXPECT_LT(at(2), at(1));
  EXPECT_LT(at(5), at(4));
}

INSTANTIATE_TEST_SUITE_P(Policies, RefusedPolicyStateTest,
                         testing::Values("lru", "arc", "s3fifo", "kvlearn-cars", "learned"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace kvlearn
