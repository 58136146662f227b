// The sidecar prices a block's recompute as cost_seconds does, in GPU time
// (CostModel::RecomputeGpuMs), and a restart reprices the blocks it restores
// by the cost model it runs with, whatever the snapshot holds.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "server/node_pools.h"
#include "server/pools_snapshot.h"
#include "tests/server/pool_events.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

NodePoolsOptions Options(const CostModel& cost) {
  NodePoolsOptions o;
  o.policy = "lru";
  o.cost = std::make_shared<CostModel>(cost);
  return o;
}

PoolsSnapshot Capture(NodePools& pools) {
  PoolsSnapshot snapshot;
  EXPECT_TRUE(pools.CaptureAll([] { return true; }, &snapshot));
  return snapshot;
}

// Llama-3.3-70B prefills on 4 GPUs: a stored block is worth 4 times its
// prefill's wall time, by its depth (block 2 attends over block 1).
TEST(RestoredCostsTest, AStoredBlockIsPricedInGpuTime) {
  const CostModel cost(*FindModelProfile("llama3.3-70b"), *FindHardwareProfile("h100"));
  NodePools pools(Options(cost));
  for (const v1::Event& e : {Arrival({1, 2}), Stored(1, std::nullopt), Stored(2, 1)}) {
    ASSERT_TRUE(pools.Apply(e).ok());
  }
  const PoolsSnapshot s = Capture(pools);
  ASSERT_EQ(s.pools.size(), 1u);
  ASSERT_EQ(s.pools[0].image.blocks.size(), 2u);
  EXPECT_DOUBLE_EQ(s.pools[0].image.blocks[0].recompute_gpu_ms, 4 * cost.RecomputeMs(0, 512));
  EXPECT_DOUBLE_EQ(s.pools[0].image.blocks[1].recompute_gpu_ms, 4 * cost.RecomputeMs(512, 1024));
}

// A snapshot whose blocks were priced otherwise (another profile, or a build
// that priced wall time) is repriced at the restore.
TEST(RestoredCostsTest, ARestartRepricesTheRestoredBlocks) {
  NodePools before(Options(DefaultCost()));
  for (const v1::Event& e : {Arrival({1, 2}), Stored(1, std::nullopt), Stored(2, 1)}) {
    ASSERT_TRUE(before.Apply(e).ok());
  }
  PoolsSnapshot s = Capture(before);
  ASSERT_EQ(s.pools.size(), 1u);
  for (BlockMeta& m : s.pools[0].image.blocks) m.recompute_gpu_ms = 1234.5;

  NodePools after(Options(DefaultCost()));
  std::string note;
  ASSERT_TRUE(after.RestoreAll(s, &note).ok()) << note;
  const PoolsSnapshot back = Capture(after);
  ASSERT_EQ(back.pools.size(), 1u);
  ASSERT_EQ(back.pools[0].image.blocks.size(), 2u);
  EXPECT_DOUBLE_EQ(back.pools[0].image.blocks[0].recompute_gpu_ms,
                   DefaultCost().RecomputeGpuMs(0, 512));
  EXPECT_DOUBLE_EQ(back.pools[0].image.blocks[1].recompute_gpu_ms,
                   DefaultCost().RecomputeGpuMs(512, 1024));
  EXPECT_EQ(back.pools[0].image.residents, s.pools[0].image.residents);
}

}  // namespace
}  // namespace kvlearn
