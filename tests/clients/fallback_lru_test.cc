// The retention client's local eviction rule on hand-worked sequences: least
// recently used leaf first, never a block with a stored child, never a block
// of the current request, only among the candidates when some are given.
#include "clients/fallback_lru.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
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

// A plain model of the rule: each victim is the evictable block with the
// oldest use, found by a full scan. FallbackLru's single-pass scan (with its
// parent shortcut) must choose exactly the same victims.
class ReferenceLru {
 public:
  explicit ReferenceLru(size_t capacity) : capacity_(capacity) {}
  void BeginRequest() {
    for (auto& [id, b] : blocks_) b.pinned = false;
  }
  void Stored(uint64_t id, std::optional<uint64_t> parent, int64_t bytes) {
    if (!blocks_.count(id)) {
      blocks_[id] = {parent, bytes, 0, false, 0};
      if (parent && blocks_.count(*parent)) ++blocks_[*parent].children;
    }
    Use(id);
    if (blocks_.size() > capacity_) {
      if (auto oldest = Oldest({})) Erase(*oldest);
    }
  }
  void Hit(uint64_t id) {
    if (blocks_.count(id)) Use(id);
  }
  void Removed(uint64_t id) {
    if (blocks_.count(id)) Erase(id);
  }
  std::vector<uint64_t> Evict(int64_t bytes, const std::vector<uint64_t>& candidates) {
    std::vector<uint64_t> victims;
    int64_t freed = 0;
    while (freed < bytes) {
      auto v = Oldest(candidates);
      if (!v) break;
      victims.push_back(*v);
      freed += blocks_[*v].bytes;
      Erase(*v);
    }
    return victims;
  }
  std::vector<uint64_t> Ids() const {
    std::vector<uint64_t> ids;
    for (const auto& [id, b] : blocks_) ids.push_back(id);
    return ids;
  }
  bool IsLeaf(uint64_t id) const { return blocks_.at(id).children == 0; }

 private:
  struct B {
    std::optional<uint64_t> parent;
    int64_t bytes;
    int children;
    bool pinned;
    uint64_t use;
  };
  void Use(uint64_t id) {
    blocks_[id].use = ++clock_;
    blocks_[id].pinned = true;
  }
  void Erase(uint64_t id) {
    auto parent = blocks_[id].parent;
    blocks_.erase(id);
    if (parent && blocks_.count(*parent)) --blocks_[*parent].children;
  }
  std::optional<uint64_t> Oldest(const std::vector<uint64_t>& candidates) const {
    std::optional<uint64_t> best;
    for (const auto& [id, b] : blocks_) {
      if (b.children || b.pinned) continue;
      if (!candidates.empty() &&
          std::find(candidates.begin(), candidates.end(), id) == candidates.end()) {
        continue;
      }
      if (!best || b.use < blocks_.at(*best).use) best = id;
    }
    return best;
  }
  size_t capacity_;
  std::map<uint64_t, B> blocks_;
  uint64_t clock_ = 0;
};

TEST(FallbackLruTest, ChoosesTheSameVictimsAsAFullScanOnRandomSequences) {
  std::mt19937_64 rng(20261130);
  for (int round = 0; round < 20; ++round) {
    FallbackLru lru(60);
    ReferenceLru reference(60);
    uint64_t next_id = 1;
    int evictions = 0;
    for (int step = 0; step < 2000; ++step) {
      const std::vector<uint64_t> known = reference.Ids();
      const auto pick = [&] { return known[rng() % known.size()]; };
      switch (rng() % 8) {
        case 0:
          lru.BeginRequest();
          reference.BeginRequest();
          break;
        case 1:
        case 2:
        case 3: {  // a new block, under a known one or a root
          std::optional<uint64_t> parent;
          if (!known.empty() && rng() % 4 != 0) parent = pick();
          const int64_t bytes = 1 + static_cast<int64_t>(rng() % 5);
          lru.Stored(next_id, parent, bytes);
          reference.Stored(next_id, parent, bytes);
          ++next_id;
          break;
        }
        case 4:
          if (!known.empty()) {
            const uint64_t id = pick();
            lru.Hit(id);
            reference.Hit(id);
          }
          break;
        case 5:
          if (!known.empty()) {
            const uint64_t id = pick();
            if (reference.IsLeaf(id)) {
              lru.Removed(id);
              reference.Removed(id);
            }
          }
          break;
        default: {
          std::vector<uint64_t> candidates;
          if (!known.empty() && rng() % 3 == 0) {
            for (int i = 0; i < 5; ++i) candidates.push_back(pick());
          }
          const int64_t bytes = 1 + static_cast<int64_t>(rng() % 12);
          const auto expected = reference.Evict(bytes, candidates);
          ASSERT_EQ(Ids(lru.Evict(bytes, candidates)), expected)
              << "round " << round << " step " << step;
          evictions += static_cast<int>(expected.size());
          break;
        }
      }
      ASSERT_EQ(lru.size(), reference.Ids().size()) << "round " << round << " step " << step;
    }
    EXPECT_GT(evictions, 100);  // the comparison saw real choices
  }
}

}  // namespace
}  // namespace kvlearn
