#include "policies/leaf_ordered_policy.h"

#include <algorithm>

namespace kvlearn {

void LeafOrderedPolicy::Track(BlockIndex b, const OrderKey& key) {
  heap_.Reserve(catalog_.size());
  heap_.SetKey(b, key);
  // Children are inserted after their parent, and the block is new, so it is a
  // leaf; its parent stops being one.
  const BlockIndex parent = catalog_[b].parent;
  if (keys_never_tie_ && parent != kNoBlock && heap_.Contains(parent)) {
    heap_.Replace(parent, b);
    return;
  }
  heap_.Push(b);
  if (parent != kNoBlock) heap_.Remove(parent);
}

void LeafOrderedPolicy::OnEvict(BlockIndex b) {
  const BlockIndex parent = catalog_[b].parent;
  const bool parent_leaf = parent != kNoBlock && pool_.IsLeaf(parent);
  if (keys_never_tie_ && parent_leaf && heap_.Contains(b) && !heap_.Contains(parent)) {
    heap_.Replace(b, parent);
    return;
  }
  heap_.Remove(b);
  if (parent_leaf) heap_.Push(parent);
}

std::vector<BlockIndex> LeafOrderedPolicy::RankVictims(
    std::span<const BlockIndex> candidates) const {
  std::vector<BlockIndex> order(candidates.begin(), candidates.end());
  std::stable_sort(order.begin(), order.end(), [this](BlockIndex a, BlockIndex b) {
    return EvictsBefore(heap_.KeyOf(a), heap_.KeyOf(b));
  });
  return order;
}

void LeafOrderedPolicy::SaveOrder(std::span<const BlockIndex> renumber,
                                  PolicyStateWriter& out) const {
  out.Varint(pool_.resident_blocks());
  for (BlockIndex b = 0; b < renumber.size(); ++b) {
    if (!pool_.IsResident(b)) continue;
    const OrderKey& key = heap_.KeyOf(b);
    out.Varint(Renumbered(renumber, b));
    out.Double(key.primary);
    out.Double(key.secondary);
    out.Varint(key.depth);
  }
  out.Varint(heap_.size());
  for (BlockIndex b : heap_.entries()) out.Varint(Renumbered(renumber, b));
}

void LeafOrderedPolicy::LoadOrder(PolicyStateReader& in) {
  const uint64_t n = ReadResidentCount(in, pool_, "resident keys", 18);
  std::vector<uint8_t> seen(in.blocks(), 0);
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const BlockIndex b = ReadResident(in, pool_, seen, "resident keys");
    OrderKey key;
    key.primary = in.Double("key");
    key.secondary = in.Double("key");
    key.depth = static_cast<uint32_t>(in.Bounded("key depth", UINT32_MAX));
    if (in.ok()) heap_.SetKey(b, key);
  }
  uint64_t leaves = 0;
  for (BlockIndex b = 0; b < in.blocks(); ++b) leaves += pool_.IsLeaf(b) ? 1 : 0;
  const uint64_t m = in.Count("leaf heap");
  if (in.ok() && m != leaves) in.Fail("leaf heap: not every resident leaf");
  std::fill(seen.begin(), seen.end(), 0);
  std::vector<BlockIndex> entries;
  entries.reserve(m);
  for (uint64_t i = 0; i < m && in.ok(); ++i) {
    const BlockIndex b = ReadResident(in, pool_, seen, "leaf heap");
    if (in.ok() && !pool_.IsLeaf(b)) in.Fail("leaf heap: an interior block");
    entries.push_back(b);
  }
  if (in.ok() && !heap_.Assign(entries)) in.Fail("leaf heap: not in heap order");
}

BlockIndex LeafOrderedPolicy::SelectVictim() {
  return LeastUnpinned(heap_, [this](BlockIndex b) { return pool_.IsPinned(b); });
}

}  // namespace kvlearn
