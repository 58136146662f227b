// The retention client's local eviction rule on hand-worked sequences: least
// recently used leaf first, never a block with a stored child, never a block
// of the current request, only among the candidates when some are given.
#include "clients/fallback_lru.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kvlearn {
namespace {

std::vector<uint64_t> Ids(const std::vector<FallbackVictim>& victims) {
  std::vector<uint64_t> ids;
  for (const auto& v : victims) ids.push_back(v.block_id);
  return ids;
}

TEST(FallbackLruTest, EvictsLeastRecentlyUsedLeavesOnly) {
  FallbackLru lru(100);
  // Request 1 stores chain 1 -> 2 -> 3; request 2 stores 4 (a root).
  lru.BeginRequest();
  lru.Stored(1, std::nullopt, 10);
  lru.Stored(2, 1, 10);
  lru.Stored(3, 2, 10);
  lru.BeginRequest();
  lru.Stored(4, std::nullopt, 10);
  // Request 3 hits 1 (so 1 is now the most recent) and stores 5 under it.
  lru.BeginRequest();
  lru.Hit(1);
  lru.Stored(5, 1, 10);
  lru.BeginRequest();  // nothing pinned now
  // Recency, oldest first: 2 3 4 1 5. Leaves: 3, 4, 5. 2 and 1 have children.
  // 10 bytes: the oldest leaf is 3 (2 is older but has child 3).
  EXPECT_EQ(Ids(lru.Evict(10, {})), (std::vector<uint64_t>{3}));
  // Now 2 is a leaf and the oldest: 20 bytes take 2, then 4.
  EXPECT_EQ(Ids(lru.Evict(20, {})), (std::vector<uint64_t>{2, 4}));
  // Left: 1 -> 5. 5 is the only leaf; evicting it makes 1 (older) a leaf.
  EXPECT_EQ(Ids(lru.Evict(100, {})), (std::vector<uint64_t>{5, 1}));
  EXPECT_EQ(lru.size(), 0u);
  EXPECT_TRUE(lru.Evict(10, {}).empty());
}

TEST(FallbackLruTest, AParentOlderThanItsEvictedChildGoesBeforeYoungerLeaves) {
  FallbackLru lru(100);
  lru.BeginRequest();
  lru.Stored(1, std::nullopt, 10);
  lru.Stored(2, 1, 10);
  lru.BeginRequest();
  lru.Stored(7, std::nullopt, 10);
  lru.BeginRequest();
  // Oldest first: 1 2 7. 1 is not a leaf, so 2 goes first; then 1 (older than 7).
  EXPECT_EQ(Ids(lru.Evict(30, {})), (std::vector<uint64_t>{2, 1, 7}));
}

TEST(FallbackLruTest, TheCurrentRequestsBlocksArePinned) {
  FallbackLru lru(100);
  lru.BeginRequest();
  lru.Stored(1, std::nullopt, 10);
  lru.BeginRequest();
  lru.Stored(2, std::nullopt, 10);
  lru.BeginRequest();
  lru.Hit(1);  // request 3 uses 1: pinned although 2 is younger
  lru.Stored(3, std::nullopt, 10);
  EXPECT_EQ(Ids(lru.Evict(100, {})), (std::vector<uint64_t>{2}));
  lru.BeginRequest();
  EXPECT_EQ(Ids(lru.Evict(100, {})), (std::vector<uint64_t>{1, 3}));
}

TEST(FallbackLruTest, CandidatesLimitTheChoiceAndRemovalsAreApplied) {
  FallbackLru lru(100);
  lru.BeginRequest();
  for (uint64_t id = 1; id <= 4; ++id) lru.Stored(id, std::nullopt, 10 * id);
  lru.BeginRequest();
  lru.Removed(1);
  lru.Removed(99);  // unknown: ignored
  // Oldest first: 2 3 4. Only 4 and 3 may go; 3 is older.
  const auto victims = lru.Evict(35, {4, 3});
  EXPECT_EQ(Ids(victims), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(victims[1].bytes, 40);
  EXPECT_EQ(lru.size(), 1u);
}

TEST(FallbackLruTest, OverCapacityForgetsTheLeastRecentlyUsedLeaf) {
  FallbackLru lru(2);
  lru.BeginRequest();
  lru.Stored(1, std::nullopt, 10);
  lru.BeginRequest();
  lru.Stored(2, std::nullopt, 10);
  lru.BeginRequest();
  lru.Stored(3, std::nullopt, 10);  // 1 is forgotten
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.forgotten(), 1u);
  lru.BeginRequest();
  EXPECT_EQ(Ids(lru.Evict(100, {})), (std::vector<uint64_t>{2, 3}));
}

TEST(FallbackLruTest, BlocksListsParentsBeforeChildren) {
  FallbackLru lru(100);
  lru.BeginRequest();
  lru.Stored(3, 2, 10, 7);  // stored before its parent is known to the fallback
  lru.Stored(1, std::nullopt, 10, 5);
  lru.Stored(2, 1, 20, 6);
  lru.Stored(9, std::nullopt, 30, 8);
  const std::vector<FallbackBlock> blocks = lru.Blocks();
  ASSERT_EQ(blocks.size(), 4u);
  std::vector<uint64_t> order;
  for (const auto& b : blocks) order.push_back(b.block_id);
  auto at = [&](uint64_t id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
  EXPECT_LT(at(1), at(2));
  EXPECT_LT(at(2), at(3));
  const FallbackBlock& two = blocks[at(2)];
  EXPECT_EQ(two.parent_id, std::optional<uint64_t>(1));
  EXPECT_EQ(two.bytes, 20);
  EXPECT_EQ(two.tokens, 6);
}

}  // namespace
}  // namespace kvlearn
