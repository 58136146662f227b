#include "policies/leaf_ordered_policy.h"

#include <algorithm>

namespace kvlearn {

void LeafOrderedPolicy::Track(BlockIndex b, const OrderKey& key) {
  heap_.SetKey(b, key);
  // Children are inserted after their parent, and the block is new, so it is a
  // leaf; its parent stops being one.
  heap_.Push(b);
  const BlockIndex parent = catalog_[b].parent;
  if (parent != kNoBlock) heap_.Remove(parent);
}

void LeafOrderedPolicy::OnEvict(BlockIndex b) {
  heap_.Remove(b);
  const BlockIndex parent = catalog_[b].parent;
  if (parent != kNoBlock && pool_.IsLeaf(parent)) heap_.Push(parent);
}

std::vector<BlockIndex> LeafOrderedPolicy::RankVictims(
    std::span<const BlockIndex> candidates) const {
  std::vector<BlockIndex> order(candidates.begin(), candidates.end());
  std::stable_sort(order.begin(), order.end(), [this](BlockIndex a, BlockIndex b) {
    return EvictsBefore(heap_.KeyOf(a), heap_.KeyOf(b));
  });
  return order;
}

BlockIndex LeafOrderedPolicy::SelectVictim() {
  if (heap_.empty()) return kNoBlock;
  const BlockIndex top = heap_.Top();
  if (!pool_.IsPinned(top)) return top;
  // Only the current request's deepest block can be a pinned leaf, and the
  // runner-up of a heap is one of the top's children; scan the first two
  // levels to stay correct even if several leaves are pinned.
  BlockIndex best = kNoBlock;
  const size_t limit = std::min<size_t>(heap_.size(), 1 + 4 + 16);
  for (size_t i = 1; i < limit; ++i) {
    const BlockIndex b = heap_.At(i);
    if (pool_.IsPinned(b)) continue;
    if (best == kNoBlock || EvictsBefore(heap_.KeyOf(b), heap_.KeyOf(best))) best = b;
  }
  return best;
}

}  // namespace kvlearn
