// ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement
// Cache", FAST '03) under the prefix constraint.
//
// The algorithm as published, for a cache of c pages: resident pages are in
// T1 (seen once recently) or T2 (seen at least twice); the directory also
// remembers recently evicted pages in the ghost lists B1 (evicted from T1)
// and B2 (evicted from T2), with |T1| + |B1| <= c and
// |T1| + |T2| + |B1| + |B2| <= 2c. A hit moves the page to T2's MRU end. A
// miss on a page in B1 raises the target size p of T1 by
// max(1, |B2| / |B1|) (at most c), a miss in B2 lowers it by
// max(1, |B1| / |B2|) (at least 0); either way the page is fetched into T2.
// Any other miss fetches into T1. Room is made by REPLACE: evict T1's LRU
// page into B1 if |T1| > p (or |T1| = p and the missed page is in B2),
// else T2's LRU page into B2.
//
// Units: bytes. c is the pool's capacity in bytes, |T1|, |T2|, |B1|, |B2|
// and p are byte counts, and one ghost hit moves p by the returning block's
// bytes times the published ratio (the paper's "one page" is one block).
// Every block of a chain holds the same bytes except a chain's partial last
// block, so in blocks the rule would be almost the same; bytes keep the
// ghost lists and the target on the scale the pool fills and evicts by (the
// driver makes room until the new block's bytes fit), and a partial block
// weighs what it occupies. (libCacheSim's byte-sized ARC moves p by the
// ratio alone, i.e. by about one byte per ghost hit; we scale by the block.)
// The directory bounds are kept by dropping ghosts from the LRU end of B1,
// then B2, after every change; that is the paper's case IV bookkeeping
// (delete B1's or B2's LRU entry, or drop T1's victim when B1 is empty)
// done after the fact, with the same resulting lists.
// c has to be the real capacity: a sidecar pool whose node never declares one
// (pool_configured) is unbounded, and then the directory is never trimmed
// (ghosts are remembered for ever) and p is bounded by nothing in practice.
//
// The miss event: ARC adapts p when the missed page is requested, before
// REPLACE makes room for it. Here that moment is ShouldAdmit(b), which the
// driver calls for each missing block before evicting for it: a block found
// in B1 or B2 adapts p there and leaves its ghost list, marked as returning;
// OnInsert puts a returning block in T2, any other in T1. A second
// ShouldAdmit for a block already marked does not adapt p again; a block
// inserted straight from a ghost list (a sidecar client need not ask first)
// counts its miss in OnInsert.
//
// Prefix constraint: each list evicts its least recently used LEAF. T1 and
// T2 each keep an indexed min-heap of their current leaves keyed by recency
// (a fresh stamp on every insert and hit; recency_leaf_heaps.h keeps both
// heaps and the stamps), so REPLACE takes the heap top of
// the list it picks; a block joins its list's heap when its last resident
// child leaves. If the list REPLACE picks has no evictable leaf (all its
// blocks are interior or pinned), the victim comes from the other list. A
// chain inserted in one request gets increasing stamps root first, so once
// its leaf leaves, its parent is among the least recent blocks and follows
// soon, as under LRU.
//
// Ranking: RankVictims is the order SelectVictim/OnEvict would take the
// candidates in if they (and the parents their eviction turns into leaves)
// were the pool's only evictable blocks: REPLACE's test on |T1| (which
// only T1's evictions shrink; p does not move while nothing is asked for),
// then the least recent leaf of the list it picks, else of the other. With
// every evictable leaf (or every resident block) as candidates that is the
// simulator's drain order (tests/policies/sieve_arc_test.cc). O(k log k) for
// k candidates and the parents they free, without copying the pool (until
// session 13 it replayed the drain on a copy: O(pool) per call); candidates
// that never leave (pinned, or under a block that stays) come last in their
// given order. EvictionPriority is REPLACE's rule without the prefix
// constraint: the list REPLACE picks first, each by recency.
//
// Not thread-safe: one policy object per pool. Also an expert of the
// learned policy (learned_policy.cc), hence this header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"
#include "policies/leaf_heap.h"
#include "policies/policy_env.h"
#include "policies/recency_leaf_heaps.h"
#include "policies/retention_policy.h"

namespace kvlearn {

class ArcPolicy final : public RetentionPolicy {
 public:
  explicit ArcPolicy(const PolicyEnv& env)
      : ArcPolicy(*env.catalog, env.pool, env.pool->capacity_bytes()) {}
  // Over `pool`, sized as a pool of `capacity_bytes` (a shadow pool that
  // counts its own bytes: learned/arc_shadow_pool.h).
  ArcPolicy(const BlockCatalog& catalog, const PoolState* pool, uint64_t capacity_bytes)
      : catalog_(catalog), pool_(pool), capacity_(capacity_bytes) {
    // Sized for the catalog at once (a replay's is complete), so a replay's
    // timed loop does not fault in these pages; the sidecar's grows later.
    if (catalog_.size() > 0) Grow(static_cast<BlockIndex>(catalog_.size() - 1));
  }
  // The same state over another pool (a scratch copy of it, for saving a
  // shadow without the blocks a compaction forgets).
  ArcPolicy(const ArcPolicy& other, const PoolState& pool) : ArcPolicy(other) { pool_ = &pool; }

  std::string_view name() const override { return "arc"; }

  void OnHit(BlockIndex b, const AccessInfo&) override {
    if (where_[b] == kT1) {
      const bool leaf = leaves_.Contains(kT1, b);
      leaves_.Remove(kT1, b);
      Subtract(kT1, catalog_[b].bytes);
      where_[b] = kT2;
      bytes_[kT2] += catalog_[b].bytes;
      leaves_.SetStamp(b, ++clock_);
      if (leaf) leaves_.Push(kT2, b);
    } else {
      leaves_.SetStamp(b, ++clock_);
    }
  }

  bool ShouldAdmit(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    NoteMiss(b);
    return true;
  }

  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    NoteMiss(b);  // a no-op after ShouldAdmit(b)
    const uint8_t list = where_[b] == kReturningFromB1 || where_[b] == kReturningFromB2 ? kT2 : kT1;
    returning_from_b2_ = false;
    where_[b] = list;
    bytes_[list] += catalog_[b].bytes;
    leaves_.SetStamp(b, ++clock_);
    const BlockIndex parent = catalog_[b].parent;
    if (parent != kNoBlock && where_[parent] == list && leaves_.Contains(list, parent)) {
      leaves_.Replace(list, parent, b);  // b takes its parent's place among the leaves
    } else {
      leaves_.Push(list, b);
      if (parent != kNoBlock) leaves_.Remove(where_[parent], parent);
    }
    TrimGhosts();
  }

  BlockIndex SelectVictim() override {
    const uint8_t first = ReplaceFromT1() ? kT1 : kT2;
    if (const BlockIndex b = LeastRecentEvictable(first); b != kNoBlock) return b;
    return LeastRecentEvictable(first == kT1 ? kT2 : kT1);
  }

  void OnEvict(BlockIndex b) override { OnEvict(b, true); }
  // b left the pool; `remember` puts it in its ghost list, as the paper
  // does for the victims REPLACE chose. A victim someone else chose (the
  // learned policy, while ARC does not lead it) is forgotten instead: a
  // ghost hit moves p, and p should learn from ARC's own choices only.
  void OnEvict(BlockIndex b, bool remember) {
    const uint8_t list = where_[b];
    Subtract(list, catalog_[b].bytes);
    const BlockIndex parent = catalog_[b].parent;
    const bool parent_leaf = parent != kNoBlock && pool_->IsLeaf(parent);
    if (parent_leaf && where_[parent] == list && leaves_.Contains(list, b)) {
      leaves_.Replace(list, b, parent);  // the parent takes its last child's place
    } else {
      leaves_.Remove(list, b);
      if (parent_leaf) leaves_.Push(where_[parent], parent);
    }
    if (remember) {
      PushGhost(list == kT1 ? kB1 : kB2, b);
    } else {
      where_[b] = kNowhere;
    }
    TrimGhosts();
  }

  double EvictionPriority(BlockIndex b) const override {
    const uint8_t first = ReplaceFromT1() ? kT1 : kT2;
    return (where_[b] == first ? 0 : 0x1p52) + static_cast<double>(leaves_.Stamp(b));
  }

  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const override;

  // p, the REPLACE flag, the clock; each resident block's list and stamp;
  // the blocks asked about from a ghost list and not inserted yet; B1 and
  // B2 from their LRU ends; T1's and T2's leaf heaps in slot order. Ghosts
  // a compaction forgets are dropped (and their bytes with them).
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override;
  absl::Status LoadState(PolicyStateReader& in) override;

 private:
  ArcPolicy(const ArcPolicy&) = default;

  // where_ values. T1/T2 index leaves_, B1/B2 index the ghost sentinels.
  static constexpr uint8_t kT1 = 0;
  static constexpr uint8_t kT2 = 1;
  static constexpr uint8_t kB1 = 2;
  static constexpr uint8_t kB2 = 3;
  static constexpr uint8_t kReturningFromB1 = 4;  // asked about while in B1, not inserted yet
  static constexpr uint8_t kReturningFromB2 = 5;
  static constexpr uint8_t kNowhere = 6;

  // The paper's miss on b: a ghost adapts p and leaves its list, marked as
  // returning (to T2). Sets the flag REPLACE reads until b is inserted.
  void NoteMiss(BlockIndex b) {
    if (where_[b] == kB1 || where_[b] == kB2) {
      const bool from_b2 = where_[b] == kB2;
      const double own = static_cast<double>(bytes_[from_b2 ? kB2 : kB1]);
      const double other = static_cast<double>(bytes_[from_b2 ? kB1 : kB2]);
      const double step = static_cast<double>(catalog_[b].bytes) * std::max(1.0, other / own);
      target_t1_ = from_b2 ? std::max(0.0, target_t1_ - step)
                           : std::min(static_cast<double>(capacity_), target_t1_ + step);
      UnlinkGhost(b);
      where_[b] = from_b2 ? kReturningFromB2 : kReturningFromB1;
    }
    returning_from_b2_ = where_[b] == kReturningFromB2;
  }

  // REPLACE's test: evict from T1 (rather than T2) first?
  bool ReplaceFromT1() const { return ReplaceFromT1(bytes_[kT1]); }
  // The same with T1 holding `t1_bytes` (RankVictims' drain shrinks it).
  bool ReplaceFromT1(uint64_t t1_bytes) const {
    const double t1 = static_cast<double>(t1_bytes);
    return t1_bytes > 0 && (t1 > target_t1_ || (returning_from_b2_ && t1 == target_t1_));
  }

  // The least recent unpinned leaf of T1 or T2.
  BlockIndex LeastRecentEvictable(uint8_t list) const {
    return LeastUnpinned(leaves_.list(list), [this](BlockIndex b) { return pool_->IsPinned(b); });
  }

  // Ghost lists are intrusive doubly-linked lists: slot 0 is B1's sentinel,
  // slot 1 B2's, block b lives in slot b + 2. A sentinel's next is the list's
  // LRU end, its prev the MRU end.
  static constexpr uint32_t kFirstBlockSlot = 2;
  static uint32_t GhostSentinel(uint8_t ghost) { return ghost - kB1; }

  void PushGhost(uint8_t ghost, BlockIndex b) {
    const uint32_t head = GhostSentinel(ghost);
    const uint32_t s = b + kFirstBlockSlot;
    const uint32_t mru = prev_[head];
    next_[mru] = s;
    prev_[s] = mru;
    next_[s] = head;
    prev_[head] = s;
    where_[b] = ghost;
    bytes_[ghost] += catalog_[b].bytes;
  }

  void UnlinkGhost(BlockIndex b) {
    const uint32_t s = b + kFirstBlockSlot;
    next_[prev_[s]] = next_[s];
    prev_[next_[s]] = prev_[s];
    Subtract(where_[b], catalog_[b].bytes);
    where_[b] = kNowhere;
  }

  // A block's bytes may change while ARC holds it (the sidecar resizes a
  // block its pool does not hold, which a ghost or a shadow's block can
  // be): a count never goes below 0.
  void Subtract(uint8_t list, uint64_t bytes) { bytes_[list] -= std::min(bytes_[list], bytes); }

  // |T1| + |B1| <= c, then |T1| + |T2| + |B1| + |B2| <= 2c (T2 <= c, so
  // trimming B2 is enough for the second once the first holds).
  void TrimGhosts() {
    while (bytes_[kT1] + bytes_[kB1] > capacity_ && next_[GhostSentinel(kB1)] >= kFirstBlockSlot) {
      UnlinkGhost(next_[GhostSentinel(kB1)] - kFirstBlockSlot);
    }
    while (bytes_[kT1] + bytes_[kT2] + bytes_[kB1] + bytes_[kB2] > 2 * capacity_ &&
           next_[GhostSentinel(kB2)] >= kFirstBlockSlot) {
      UnlinkGhost(next_[GhostSentinel(kB2)] - kFirstBlockSlot);
    }
  }

  void Grow(BlockIndex b) {
    if (b >= where_.size()) [[unlikely]]
      GrowTo(b);
  }
  ABSL_ATTRIBUTE_NOINLINE void GrowTo(BlockIndex b) {
    const size_t n = GrownPerBlockSize(size_t{b} + 1, where_.size(), catalog_);
    where_.resize(n, kNowhere);
    next_.resize(n + kFirstBlockSlot);
    prev_.resize(n + kFirstBlockSlot);
    leaves_.Resize(n);
  }

  const BlockCatalog& catalog_;
  const PoolState* pool_;    // a pointer so RankVictims can run a copy over a copy
  const uint64_t capacity_;  // c, in bytes

  double target_t1_ = 0;              // p, in bytes
  bool returning_from_b2_ = false;    // the block last asked about returns from B2
  uint64_t bytes_[4] = {0, 0, 0, 0};  // by where_ value T1, T2, B1, B2
  std::vector<uint8_t> where_;
  uint64_t clock_ = 0;       // recency: each insert and hit stamps its block with ++clock_
  RecencyLeafHeaps leaves_;  // every block's stamp; T1's and T2's resident leaves
  std::vector<uint32_t> next_{0, 1};
  std::vector<uint32_t> prev_{0, 1};
};

}  // namespace kvlearn
