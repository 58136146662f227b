// What the learned policy's pool would have saved had it evicted by recency.
//
// A shadow of the pool: the same capacity, block numbers only, fed the same
// requests and the same admissions (a block of a request's chain enters the
// shadow when the real pool holds it once that request is done), evicting
// its least recently used evictable leaf, as `lru` does. Both pools see the
// same requests, and a hit saves the block's R - T in either. The learned
// policy lets its model evict only while the real pool's hits have saved at
// least what the shadow's would have (docs/learned_policy.md): the guard of
// learned/deviation_guard.h charges each expert per returning block, and
// that accounting let through model evictions that lost to recency on
// every chat trace at the tightest pool; this compares what each way of
// evicting actually saved, with the admissions held equal.
//
// Residents, their bytes as copied in, and the latest request's chain:
// shadow_residents.h.
//
// The list is LRU's (policies/recency_list.h): most recent first, a hit moves
// to the front (hits are replayed deepest first, so a chain ends up root
// first), a new block goes right behind its parent, so every block sits
// behind its ancestors and the tail is a leaf unless pinned.
//
// Deterministic; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"
#include "policies/recency_list.h"
#include "policies/shadow_residents.h"

namespace kvlearn {

class LearnedShadowPool {
 public:
  LearnedShadowPool(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : shadow_(catalog, capacity_bytes) {}

  const PoolState& pool() const { return shadow_.pool(); }
  uint64_t used_bytes() const { return shadow_.used_bytes(); }  // as copied in

  // A request needing `chain` (root first) starts. First the latest
  // request's blocks the shadow missed and the real pool holds now are
  // copied in, root first, while room can be made: the real pool served
  // them, and a pool evicting by recency would have missed them and
  // admitted them (the real pool's own admissions came in by OnAdmit). Then
  // the leading blocks of `chain` the shadow holds are used and pinned until
  // the next request. Returns how many there are (its hits).
  template <class Held>
  size_t OnRequest(std::span<const BlockIndex> chain, const Held& held) {
    Grow();
    PoolState& pool = shadow_.pool();
    const std::span<const BlockIndex> latest = shadow_.latest();
    for (size_t i = pool.ResidentPrefix(latest); i < latest.size(); ++i) {
      if (!held(latest[i]) || !Copy(latest[i])) break;
    }
    pool.BeginRequest();
    const size_t hits = pool.ResidentPrefix(chain);
    for (size_t i = hits; i-- > 0;) {
      pool.Pin(chain[i]);
      list_.MoveToFront(chain[i]);
    }
    shadow_.SetLatest(chain);
    return hits;
  }

  // The real pool admitted b: it is copied in now, not at the next request.
  // In a cluster a request's blocks are admitted as its prefill ends, after
  // later requests began, and a copy at the next request found them not yet
  // held.
  void OnAdmit(BlockIndex b) {
    Grow();
    (void)Copy(b);
  }

  // The resident blocks in list order, each with the bytes it was copied
  // with, and the latest request's chain, numbered through `renumber`
  // (ShadowResidents::Save: what a compaction forgets).
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    std::vector<BlockIndex> order;
    for (BlockIndex b = list_.Front(); b != kNoBlock; b = list_.Next(b)) order.push_back(b);
    (void)shadow_.Save(renumber, order, out);
  }

  // REQUIRES: a shadow that saw nothing yet, over the catalog Save's blocks
  // were renumbered into.
  void Load(PolicyStateReader& in) {
    Grow();
    const std::vector<BlockIndex> order = shadow_.Load(in, "shadow");
    if (!in.ok()) return;
    for (const BlockIndex b : order) list_.PushBack(b);
    shadow_.PinLatestChain();
  }

 private:
  void Grow() {
    shadow_.Grow();
    const size_t n = shadow_.catalog().size();
    if (n > 0) list_.Grow(static_cast<BlockIndex>(n - 1), shadow_.catalog());
  }

  // Copies b in, right behind its parent and pinned until the next request,
  // if the shadow holds the parent (or b is a root) and room can be made;
  // false if not. True if b is already in.
  bool Copy(BlockIndex b) {
    PoolState& pool = shadow_.pool();
    const BlockIndex parent = shadow_.catalog()[b].parent;
    if (pool.IsResident(b)) return true;
    if (parent != kNoBlock && !pool.IsResident(parent)) return false;
    if (parent != kNoBlock) pool.Pin(parent);  // making room must not evict it
    if (!MakeRoom(shadow_.catalog()[b].bytes)) return false;
    shadow_.Insert(b, shadow_.catalog()[b].bytes);
    pool.Pin(b);
    list_.InsertBehindParent(parent, b);
    return true;
  }

  // Evicts least recent evictable leaves until `bytes` fit; false when the
  // rest is pinned.
  bool MakeRoom(uint64_t bytes) {
    if (bytes > shadow_.capacity_bytes()) return false;
    while (shadow_.free_bytes() < bytes) {
      BlockIndex b = list_.Back();
      while (b != kNoBlock && !shadow_.pool().IsEvictable(b)) b = list_.Prev(b);
      if (b == kNoBlock) return false;
      shadow_.Evict(b);
      list_.Remove(b);
    }
    return true;
  }

  ShadowResidents shadow_;
  RecencyList list_;  // most recent first
};

}  // namespace kvlearn
