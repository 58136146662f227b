// RecencyLeafHeaps (policies/recency_leaf_heaps.h), ARC's two heaps over one
// position index, against two LeafHeaps keyed by the same stamps: random
// pushes, removals and restamps (equal stamps too) keep the same slot layout (snapshots save it,
// so it must not change with the structure) and the same least unpinned
// entry; Assign refuses what LeafHeap's refuses.
#include "policies/recency_leaf_heaps.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "policies/leaf_heap.h"

namespace kvlearn {
namespace {

OrderKey KeyOfStamp(uint64_t stamp) { return {static_cast<double>(stamp), 0, 0}; }

TEST(RecencyLeafHeapsTest, MatchesTwoLeafHeapsUnderRandomChanges) {
  constexpr BlockIndex kBlocks = 300;
  RecencyLeafHeaps heaps;
  heaps.Resize(kBlocks);
  LeafHeap reference[2];
  std::vector<int> in(kBlocks, -1);  // the list holding each block, -1 for none
  std::mt19937 rng(7);
  uint64_t clock = 1000;
  for (int step = 0; step < 20000; ++step) {
    const BlockIndex b = rng() % kBlocks;
    const int list = static_cast<int>(rng() % 2);
    switch (rng() % 3) {
      case 0: {  // ARC only raises stamps; loading a snapshot sets any
        const uint64_t stamp = rng() % 4 == 0 ? rng() % 1000 : ++clock;
        heaps.SetStamp(b, stamp);
        for (LeafHeap& r : reference) r.SetKey(b, KeyOfStamp(stamp));
        break;
      }
      case 1:
        if (in[b] != -1) break;
        reference[list].SetKey(b, KeyOfStamp(heaps.Stamp(b)));
        reference[list].Push(b);
        heaps.Push(list, b);
        in[b] = list;
        break;
      default:
        heaps.Remove(list, b);  // a no-op unless b is in `list`
        reference[list].Remove(b);
        if (in[b] == list) in[b] = -1;
    }
    ASSERT_EQ(heaps.Contains(list, b), in[b] == list) << "step " << step;
    ASSERT_EQ(heaps.Contains(1 - list, b), in[b] == 1 - list) << "step " << step;
  }
  const auto pinned = [](BlockIndex b) { return b % 5 == 0; };
  for (int l : {0, 1}) {
    SCOPED_TRACE(l);
    EXPECT_FALSE(reference[l].empty());
    EXPECT_EQ(heaps.list(l).entries(), reference[l].entries());
    EXPECT_EQ(LeastUnpinned(heaps.list(l), pinned), LeastUnpinned(reference[l], pinned));
  }
}

TEST(RecencyLeafHeapsTest, AssignRefusesARepeatedEntryAndABrokenOrder) {
  RecencyLeafHeaps heaps;
  heaps.Resize(4);
  for (BlockIndex b = 0; b < 4; ++b) heaps.SetStamp(b, 10 + b);
  // Slot 0 must hold the least stamp: block 1 (11) over block 0 (10) breaks it.
  EXPECT_FALSE(heaps.Assign(0, {1, 0}));
  EXPECT_TRUE(heaps.list(0).empty());
  EXPECT_FALSE(heaps.Assign(0, {0, 1, 0}));
  EXPECT_TRUE(heaps.list(0).empty());
  ASSERT_TRUE(heaps.Assign(0, {0, 1}));
  // A block of one heap cannot enter the other.
  EXPECT_FALSE(heaps.Assign(1, {2, 1}));
  EXPECT_TRUE(heaps.list(1).empty());
  EXPECT_EQ(heaps.list(0).entries(), (std::vector<BlockIndex>{0, 1}));
  EXPECT_TRUE(heaps.Contains(0, 1));
  EXPECT_FALSE(heaps.Contains(1, 1));
}

}  // namespace
}  // namespace kvlearn
