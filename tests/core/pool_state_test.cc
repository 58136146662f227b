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

TEST_F(PoolStateTest, BrokenContractsAbortWithTheCondition) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PoolState pool(&catalog_, 1000);
  EXPECT_DEATH(pool.Insert(b_), "REQUIRES broken: .*IsResident");  // parent A is not stored
  pool.Insert(a_);
  pool.Insert(b_);
  EXPECT_DEATH(pool.Evict(a_), "REQUIRES broken: IsLeaf");  // B still under A
  EXPECT_DEATH(pool.Insert(a_), "REQUIRES broken");         // already resident
  EXPECT_DEATH(catalog_.Add({.hash_id = 1}), "REQUIRES broken: Find");
}

}  // namespace
}  // namespace kvlearn
