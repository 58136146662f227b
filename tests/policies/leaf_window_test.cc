// LeafWindow (policies/leaf_window.h): Find() names the same leaves as the
// best-first walk, in the walk's order whenever it says so, on a case worked
// out by hand and on random heaps full of equal keys and pinned leaves; Holds()
// agrees with the walk's window up to ties at its edge.
#include "policies/leaf_window.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvlearn {
namespace {

std::vector<BlockIndex> Sorted(std::vector<BlockIndex> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(LeafWindowTest, WalksFirstThenSelectsUnderTheBoundUntilItRunsOut) {
  // Block b has key b + 1 (all distinct), none pinned, k = 3: the first call
  // walks (no bound yet) and keeps the 6th key as the bound.
  LeafHeap heap;
  for (BlockIndex b = 0; b < 10; ++b) {
    heap.SetKey(b, {static_cast<double>(b + 1), 0, 0});
    heap.Push(b);
  }
  const auto unpinned = [](BlockIndex) { return false; };
  LeafWindow window(3);
  std::vector<BlockIndex> out;
  ASSERT_EQ(window.Find(heap, unpinned, out), LeafWindow::kWalkOrder);
  EXPECT_EQ(out, (std::vector<BlockIndex>{0, 1, 2}));
  // Blocks 0..5 are under the bound: 6 > 3, so it selects.
  heap.Remove(0);
  ASSERT_EQ(window.Find(heap, unpinned, out), LeafWindow::kAnyOrder);
  EXPECT_EQ(Sorted(out), (std::vector<BlockIndex>{1, 2, 3}));
  // Two more evictions leave 3, 4, 5 under the bound: not more than k, so it
  // walks again (and the bound moves to block 8's key).
  heap.Remove(1);
  heap.Remove(2);
  ASSERT_EQ(window.Find(heap, unpinned, out), LeafWindow::kWalkOrder);
  EXPECT_EQ(out, (std::vector<BlockIndex>{3, 4, 5}));
  // Block 4 pinned: stepped over either way.
  const auto four_pinned = [](BlockIndex b) { return b == 4; };
  ASSERT_EQ(window.Find(heap, four_pinned, out), LeafWindow::kAnyOrder);
  EXPECT_EQ(Sorted(out), (std::vector<BlockIndex>{3, 5, 6}));
}

TEST(LeafWindowTest, EqualKeysAtTheEdgeOfTheWindowAreLeftToTheWalk) {
  LeafHeap heap;
  // Keys 1, 2, 3, 3, 4, 5, 6, 7 (blocks 2 and 3 tie), k = 3.
  const double keys[] = {1, 2, 3, 3, 4, 5, 6, 7};
  for (BlockIndex b = 0; b < 8; ++b) {
    heap.SetKey(b, {keys[b], 0, 0});
    heap.Push(b);
  }
  const auto unpinned = [](BlockIndex) { return false; };
  LeafWindow window(3);
  std::vector<BlockIndex> out, walked;
  window.Find(heap, unpinned, out);  // sets the bound (key 5)
  // Now the 3rd and 4th least (blocks 2 and 3) have equal keys.
  ASSERT_EQ(window.Find(heap, unpinned, out), LeafWindow::kWalkOrder);
  window.Walk(heap, unpinned, 3, walked);
  EXPECT_EQ(out, walked);
}

// Random heaps under a long run of the changes a pool makes (evictions,
// inserts, re-keys, pins), with keys drawn from few values so ties are common,
// and now and then keys far below the bound (as after a restore). Every
// answer must be the walk's window: the same sequence when Find says it
// walked, the same set otherwise.
TEST(LeafWindowTest, FindNamesTheWalksWindowOnRandomHeaps) {
  for (const uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    constexpr BlockIndex kBlocks = 4000;
    LeafHeap heap;
    std::vector<bool> pinned(kBlocks, false);
    std::vector<BlockIndex> absent;
    double now = 0;
    const auto key_now = [&] {
      return OrderKey{now + static_cast<double>(rng() % 3), 0, static_cast<uint32_t>(rng() % 3)};
    };
    for (BlockIndex b = 0; b < kBlocks; ++b) {
      if (b % 2 == 0) {
        heap.SetKey(b, key_now());
        heap.Push(b);
        now += 0.5;
      } else {
        absent.push_back(b);
      }
    }
    const auto is_pinned = [&pinned](BlockIndex b) { return pinned[b]; };
    for (const size_t k : {size_t{1}, size_t{5}, size_t{21}}) {
      LeafWindow window(k), reference(k);
      std::vector<BlockIndex> out, walked;
      int any_order = 0, calls = 0;
      for (int step = 0; step < 3000; ++step) {
        const uint32_t what = rng() % 100;
        if (what < 40 && !heap.empty()) {  // evict one of the window
          reference.Walk(heap, is_pinned, k, walked);
          if (!walked.empty()) {
            const BlockIndex victim = walked[rng() % walked.size()];
            heap.Remove(victim);
            absent.push_back(victim);
          }
        } else if (what < 70 && !absent.empty()) {  // insert, newest
          const size_t i = rng() % absent.size();
          const BlockIndex b = absent[i];
          absent.erase(absent.begin() + static_cast<ptrdiff_t>(i));
          now += 1;
          heap.SetKey(b, key_now());
          heap.Push(b);
        } else if (what < 85 && !heap.empty()) {  // a hit re-keys to now
          now += 1;
          heap.SetKey(heap.At(rng() % heap.size()), key_now());
        } else if (what < 97 && !heap.empty()) {  // pin or unpin
          const BlockIndex b = heap.At(rng() % std::min<size_t>(heap.size(), 64));
          pinned[b] = !pinned[b];
        } else if (!absent.empty()) {  // an old key comes back (a restore)
          const BlockIndex b = absent.back();
          absent.pop_back();
          heap.SetKey(b, {static_cast<double>(rng() % 100), 0, 0});
          heap.Push(b);
        }
        const LeafWindow::Order order = window.Find(heap, is_pinned, out);
        reference.Walk(heap, is_pinned, k, walked);
        ++calls;
        // Holds(): every leaf of the walk's window, and beyond it only a leaf
        // tied with the window's last (fewer than k strictly before it too).
        for (const BlockIndex b : walked) ASSERT_TRUE(window.Holds(heap, is_pinned, b));
        const BlockIndex other = heap.empty() ? kNoBlock : heap.At(rng() % heap.size());
        if (other != kNoBlock && window.Holds(heap, is_pinned, other) &&
            std::find(walked.begin(), walked.end(), other) == walked.end()) {
          ASSERT_EQ(walked.size(), k);
          const OrderKey &a = heap.KeyOf(other), &last = heap.KeyOf(walked.back());
          ASSERT_FALSE(EvictsBefore(a, last) || EvictsBefore(last, a))
              << "seed " << seed << " k " << k << " step " << step;
        }
        if (order == LeafWindow::kWalkOrder) {
          ASSERT_EQ(out, walked) << "seed " << seed << " k " << k << " step " << step;
        } else {
          ++any_order;
          ASSERT_EQ(Sorted(out), Sorted(walked))
              << "seed " << seed << " k " << k << " step " << step;
        }
      }
      // Most calls are answered under the bound (else Find saves nothing).
      EXPECT_GT(any_order, calls / 2) << "seed " << seed << " k " << k;
    }
  }
}

}  // namespace
}  // namespace kvlearn
