// PoolState's bookkeeping on a hand-made chain, and its REQUIRES: contracts
// checked (this file turns the checks on whatever the build type).
#define KVLEARN_DCHECK_ALWAYS_ON 1
#include "core/pool_state.h"

#include <gtest/gtest.h>

namespace kvlearn {
namespace {

// A -> B -> C, and A -> D: 100 bytes each, in a 250-byte pool.
class PoolStateTest : public ::testing::Test {
 protected:
  PoolStateTest() {
    a_ = catalog_.Add({.hash_id = 1, .bytes = 100});
    b_ = catalog_.Add({.hash_id = 2, .parent = a_, .depth = 1, .bytes = 100});
    c_ = catalog_.Add({.hash_id = 3, .parent = b_, .depth = 2, .bytes = 100});
    d_ = catalog_.Add({.hash_id = 4, .parent = a_, .depth = 1, .bytes = 100});
  }
  BlockCatalog catalog_;
  BlockIndex a_, b_, c_, d_;
};

TEST_F(PoolStateTest, LeavesAndBytesFollowInsertsAndEvictions) {
  PoolState pool(&catalog_, 250);
  pool.Insert(a_);
  pool.Insert(b_);
  EXPECT_FALSE(pool.IsLeaf(a_));
  EXPECT_TRUE(pool.IsLeaf(b_));
  EXPECT_EQ(pool.free_bytes(), 50u);
  pool.Evict(b_);
  EXPECT_TRUE(pool.IsLeaf(a_));
  EXPECT_EQ(pool.ResidentChildren(a_), 0u);
  EXPECT_EQ(pool.evictions(), 1u);
  EXPECT_EQ(pool.used_bytes(), 100u);
}

TEST_F(PoolStateTest, PinsLastOneRequest) {
  PoolState pool(&catalog_, 250);
  pool.Insert(a_);
  pool.BeginRequest();
  pool.Pin(a_);
  EXPECT_FALSE(pool.IsEvictable(a_));
  pool.BeginRequest();
  EXPECT_TRUE(pool.IsEvictable(a_));
}

TEST_F(PoolStateTest, PinsAndHoldsReachBlocksAddedAfterTheFirstOne) {
  // Pins and holds are sized on use, not by Grow: a block the catalog gained
  // after the first Pin / Hold is unpinned until pinned or held, then is.
  PoolState pool(&catalog_, 1000);
  pool.Insert(a_);
  pool.Insert(d_);
  pool.Pin(a_);
  pool.Hold(a_);
  const BlockIndex e = catalog_.Add({.hash_id = 5, .parent = d_, .depth = 2, .bytes = 100});
  pool.Grow(catalog_.size());
  pool.Insert(e);
  EXPECT_FALSE(pool.IsPinned(e));
  EXPECT_TRUE(pool.IsEvictable(e));
  pool.Pin(e);
  EXPECT_TRUE(pool.IsPinned(e));
  pool.BeginRequest();
  EXPECT_FALSE(pool.IsPinned(e));
  EXPECT_TRUE(pool.IsPinned(a_));  // still held
  pool.Hold(e);
  pool.Hold(e);
  pool.Release(e);
  EXPECT_TRUE(pool.IsPinned(e));
  pool.Release(e);
  pool.Release(a_);
  EXPECT_FALSE(pool.IsPinned(e));
  EXPECT_FALSE(pool.IsPinned(a_));
}

TEST_F(PoolStateTest, BrokenContractsAbortWithTheCondition) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PoolState pool(&catalog_, 1000);
  EXPECT_DEATH(pool.Insert(b_), "REQUIRES broken: .*IsResident");  // parent A is not stored
  pool.Insert(a_);
  pool.Insert(b_);
  EXPECT_DEATH(pool.Evict(a_), "REQUIRES broken: IsLeaf");  // B still under A
  EXPECT_DEATH(pool.Insert(a_), "REQUIRES broken");         // already resident
  EXPECT_DEATH(catalog_.Add({.hash_id = 1}), "REQUIRES broken: Find");
  EXPECT_DEATH(pool.Pin(static_cast<BlockIndex>(catalog_.size())), "REQUIRES broken");
  EXPECT_DEATH(pool.Hold(static_cast<BlockIndex>(catalog_.size())), "REQUIRES broken");
  EXPECT_DEATH(pool.Release(c_), "REQUIRES broken");  // never held
}

}  // namespace
}  // namespace kvlearn
