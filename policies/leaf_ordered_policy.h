// Shared base of the policies that evict the leaf with the smallest OrderKey.
// Subclasses decide keys (on insert and hit) and admission; this class keeps
// the heap restricted to current leaves as blocks come and go.
#pragma once

#include "policies/leaf_heap.h"
#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {

class LeafOrderedPolicy : public RetentionPolicy {
 public:
  explicit LeafOrderedPolicy(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {
    // Sized for the catalog at once (a replay's is complete), so a replay's
    // timed loop does not fault in these pages; the sidecar's grows later.
    heap_.Reserve(catalog_.size());
  }

  BlockIndex SelectVictim() override;
  void OnEvict(BlockIndex b) override;
  double EvictionPriority(BlockIndex b) const override { return heap_.KeyOf(b).primary; }
  // By the full OrderKey, tie-breaks included.
  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const override;

 protected:
  // Call from OnInsert with the new block's key (the block is already resident).
  void Track(BlockIndex b, const OrderKey& key);
  // Call from OnHit when a block's key changes.
  void Rekey(BlockIndex b, const OrderKey& key) { heap_.SetKey(b, key); }
  const OrderKey& KeyOf(BlockIndex b) const { return heap_.KeyOf(b); }
  const LeafHeap& heap() const { return heap_; }
  // The keys of the resident blocks and the heap's exact layout: the state
  // of this class, for the subclasses' SaveState / LoadState to start with.
  void SaveOrder(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const;
  void LoadOrder(PolicyStateReader& in);

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  // Set by a subclass whose keys never tie (a unique insertion number, or
  // a per-request clock with depth): the heap's layout then cannot change
  // a victim, so a leaf replacing its parent (or a parent its last child)
  // takes its slot in one sift instead of a removal and a push.
  bool keys_never_tie_ = false;

 private:
  LeafHeap heap_;
};

}  // namespace kvlearn
