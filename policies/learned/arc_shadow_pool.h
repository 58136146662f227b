// What the learned policy's pool would have saved had ARC chosen every
// victim: a shadow pool like learned/shadow_pool.h's (the same capacity,
// block numbers only, fed the same requests and the same admissions), which
// evicts by ARC (arc_policy.h) instead of recency. The learned policy hands
// its evictions to its ARC expert while this shadow's hits have saved more
// than the recency shadow's (docs/history/README.md).
//
// It copies as learned/shadow_pool.h does: a block the real pool admits at
// once, and at each request the latest request's blocks the shadow missed
// and the real pool holds; each is offered to ARC (its miss moves p), room
// is made by ARC's victims, and it goes in pinned. Then the leading blocks
// of the new request the shadow holds are hits, deepest first, pinned until
// the next.
//
// Residents, their bytes as copied in, and the latest request's chain:
// shadow_residents.h; ARC is told the pool's capacity.
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"
#include "policies/arc_policy.h"
#include "policies/shadow_residents.h"

namespace kvlearn {

class LearnedArcShadowPool {
 public:
  LearnedArcShadowPool(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : shadow_(catalog, capacity_bytes), arc_(*catalog, &shadow_.pool(), capacity_bytes) {}
  LearnedArcShadowPool(const LearnedArcShadowPool&) = delete;
  LearnedArcShadowPool& operator=(const LearnedArcShadowPool&) = delete;

  const PoolState& pool() const { return shadow_.pool(); }
  uint64_t used_bytes() const { return shadow_.used_bytes(); }  // as copied in

  // A request needing `chain` (root first) starts; `held(b)`: the real pool
  // holds b now. Returns the shadow's hits: how many leading blocks of
  // `chain` it holds, once the latest request's blocks are copied.
  template <class Held>
  size_t OnRequest(std::span<const BlockIndex> chain, const Held& held) {
    shadow_.Grow();
    PoolState& pool = shadow_.pool();
    const std::span<const BlockIndex> latest = shadow_.latest();
    for (size_t i = pool.ResidentPrefix(latest); i < latest.size(); ++i) {
      if (!held(latest[i]) || !Copy(latest[i])) break;
    }
    pool.BeginRequest();
    const size_t hits = pool.ResidentPrefix(chain);
    for (size_t i = hits; i-- > 0;) {
      pool.Pin(chain[i]);
      arc_.OnHit(chain[i], AccessInfo{});  // ARC reads no field of it
    }
    shadow_.SetLatest(chain);
    return hits;
  }

  // The real pool admitted b: copied in now (learned/shadow_pool.h's OnAdmit).
  void OnAdmit(BlockIndex b) {
    shadow_.Grow();
    (void)Copy(b);
  }

  // The resident blocks by number, each with the bytes it was copied with,
  // the latest request's chain (ShadowResidents::Save: what a compaction
  // forgets), then ARC's state, saved from a copy the forgotten blocks have
  // left (not as ghosts).
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    const PoolState& pool = shadow_.pool();
    std::vector<BlockIndex> order;
    for (BlockIndex b = 0; b < pool.catalog().size(); ++b) {
      if (pool.IsResident(b)) order.push_back(b);
    }
    const std::vector<uint8_t> keep = shadow_.Save(renumber, order, out);
    if (std::all_of(order.begin(), order.end(), [&keep](BlockIndex b) { return keep[b]; })) {
      (void)arc_.SaveState(renumber, out);
      return;
    }
    PoolState trimmed = pool;
    ArcPolicy arc(arc_, trimmed);
    trimmed.BeginRequest();  // pins are not state: Load pins the latest chain again
    for (size_t i = order.size(); i-- > 0;) {  // children first
      if (keep[order[i]]) continue;
      trimmed.Evict(order[i]);
      arc.OnEvict(order[i], false);
    }
    (void)arc.SaveState(renumber, out);
  }

  // REQUIRES: a shadow that saw nothing yet, over the catalog Save's blocks
  // were renumbered into.
  void Load(PolicyStateReader& in) {
    (void)shadow_.Load(in, "arc shadow");
    if (!in.ok() || !arc_.LoadState(in).ok()) return;
    shadow_.PinLatestChain();
  }

 private:
  // Copies b in, pinned until the next request, if the shadow holds its
  // parent (or b is a root), b fits the pool, and ARC can make room; false
  // if not. True if b is already in.
  bool Copy(BlockIndex b) {
    PoolState& pool = shadow_.pool();
    const BlockMeta& m = shadow_.catalog()[b];
    if (pool.IsResident(b)) return true;
    if (m.parent != kNoBlock && !pool.IsResident(m.parent)) return false;
    if (m.bytes > shadow_.capacity_bytes()) return false;
    if (m.parent != kNoBlock) pool.Pin(m.parent);  // making room must not evict it
    const AccessInfo access{};                     // ARC reads no field of it
    arc_.ShouldAdmit(b, access);                   // ARC's miss: a returning ghost moves p
    if (!MakeRoom(m.bytes)) return false;
    shadow_.Insert(b, m.bytes);
    pool.Pin(b);
    arc_.OnInsert(b, access);
    return true;
  }

  // Evicts ARC's victims until `bytes` fit; false when the rest is pinned.
  bool MakeRoom(uint64_t bytes) {
    while (shadow_.free_bytes() < bytes) {
      const BlockIndex b = arc_.SelectVictim();
      if (b == kNoBlock || !shadow_.pool().IsEvictable(b)) return false;
      shadow_.Evict(b);
      arc_.OnEvict(b, true);
    }
    return true;
  }

  ShadowResidents shadow_;
  ArcPolicy arc_;  // over shadow_'s pool, sized by its capacity
};

}  // namespace kvlearn
