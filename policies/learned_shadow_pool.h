// What the learned policy's pool would have saved had it evicted by recency.
//
// A shadow of the pool: the same capacity, block numbers only, fed the same
// requests and the same admissions (a block of a request's chain enters the
// shadow when the real pool holds it once that request is done), evicting
// its least recently used evictable leaf, as `lru` does. Both pools see the
// same requests, and a hit saves the block's R - T in either. The learned
// policy lets its model evict only while the real pool's hits have saved at
// least what the shadow's would have (docs/learned_policy.md): the guard of
// learned_deviation_guard.h charges each expert per returning block, and
// that accounting let through model evictions that lost to recency on
// every chat trace at the tightest pool; this compares what each way of
// evicting actually saved, with the admissions held equal.
//
// Bytes are counted as each block was copied in: the sidecar may resize a
// block the real pool no longer holds (BlockCatalog::Resize) while the
// shadow still does, and the catalog's current size would then unbalance
// the count.
//
// The list is LRU's (policies/recency_list.h): most recent first, a hit moves
// to the front (hits are replayed deepest first, so a chain ends up root
// first), a new block goes right behind its parent, so every block sits
// behind its ancestors and the tail is a leaf unless pinned.
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"
#include "policies/recency_list.h"

namespace kvlearn {

class LearnedShadowPool {
 public:
  LearnedShadowPool(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : catalog_(catalog), pool_(catalog, capacity_bytes), capacity_(capacity_bytes) {}

  const PoolState& pool() const { return pool_; }
  uint64_t used_bytes() const { return used_; }  // as the resident blocks were copied in

  // A request needing `chain` (root first) starts. First the previous
  // request's admissions are copied: its blocks past what the shadow held,
  // root first, while `held(b)` (the real pool holds b now) and room can be
  // made. Then the leading blocks of `chain` the shadow holds are used and
  // pinned until the next request. Returns how many there are (its hits).
  template <class Held>
  size_t OnRequest(std::span<const BlockIndex> chain, const Held& held) {
    Grow();
    for (size_t i = pool_.ResidentPrefix(pending_); i < pending_.size(); ++i) {
      const BlockIndex b = pending_[i];
      const BlockIndex parent = (*catalog_)[b].parent;
      if (!held(b) || !MakeRoom((*catalog_)[b].bytes)) break;
      if (parent != kNoBlock && !pool_.IsResident(parent)) break;  // pinned: cannot happen
      Insert(b, (*catalog_)[b].bytes);
      pool_.Pin(b);
      list_.InsertBehindParent(parent, b);
    }
    pool_.BeginRequest();
    const size_t hits = pool_.ResidentPrefix(chain);
    for (size_t i = hits; i-- > 0;) {
      pool_.Pin(chain[i]);
      list_.MoveToFront(chain[i]);
    }
    pending_.assign(chain.begin(), chain.end());
    return hits;
  }

  // The resident blocks in list order, each with the bytes it was copied
  // with, and the request whose admissions are still to copy (its hits, the only pinned blocks, are
  // the chain's resident prefix, so Load pins them again), numbered through `renumber`. A block a
  // compaction forgets leaves the shadow with everything below it (the real pool keeps what it
  // holds, so only blocks the shadow alone holds can be forgotten); the pending chain ends before
  // its first forgotten block.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    const size_t n = pool_.catalog().size();
    std::vector<uint8_t> keep(n, 0);
    uint64_t kept = 0;
    for (BlockIndex b = 0; b < n; ++b) {  // parents come before children
      const BlockIndex parent = (*catalog_)[b].parent;
      keep[b] = pool_.IsResident(b) && Renumbered(renumber, b) != kNoBlock &&
                (parent == kNoBlock || keep[parent]);
      kept += keep[b];
    }
    out.Varint(kept);
    for (BlockIndex b = list_.Front(); b != kNoBlock; b = list_.Next(b)) {
      if (!keep[b]) continue;
      out.Varint(Renumbered(renumber, b));
      out.Varint(bytes_[b]);
    }
    size_t pending = 0;
    while (pending < pending_.size() && Renumbered(renumber, pending_[pending]) != kNoBlock) {
      ++pending;
    }
    out.Varint(pending);
    for (size_t i = 0; i < pending; ++i) out.Varint(Renumbered(renumber, pending_[i]));
  }

  // REQUIRES: a shadow that saw nothing yet, over the catalog Save's blocks
  // were renumbered into.
  void Load(PolicyStateReader& in) {
    Grow();
    const uint64_t n = in.Count("shadow residents", 2);
    std::vector<std::pair<BlockIndex, uint64_t>> order;  // (block, bytes) in list order
    order.reserve(n);
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      const BlockIndex b = in.Block("shadow resident");
      order.emplace_back(b, in.Varint("shadow resident bytes"));
    }
    std::vector<std::pair<BlockIndex, uint64_t>> by_number(order);
    std::sort(by_number.begin(), by_number.end());
    for (size_t i = 0; i < by_number.size() && in.ok(); ++i) {
      const auto [b, bytes] = by_number[i];
      const BlockIndex parent = (*catalog_)[b].parent;
      if (i > 0 && by_number[i - 1].first == b) {
        in.Fail("shadow residents: a block twice");
      } else if (parent != kNoBlock && !pool_.IsResident(parent)) {
        in.Fail("shadow residents: a block without its parent");
      } else if (bytes > capacity_ - used_) {
        in.Fail("shadow residents: over the capacity");
      } else {
        Insert(b, bytes);
      }
    }
    if (!in.ok()) return;
    for (const auto& [b, bytes] : order) list_.PushBack(b);
    const uint64_t pending = in.Count("shadow pending chain");
    for (uint64_t i = 0; i < pending && in.ok(); ++i) {
      const BlockIndex b = in.Block("shadow pending block");
      const BlockIndex parent = pending_.empty() ? kNoBlock : pending_.back();
      if (in.ok() && (*catalog_)[b].parent != parent) {
        in.Fail("shadow pending chain: not a chain from a root");
      }
      pending_.push_back(b);
    }
    if (!in.ok()) return;
    // That request's hits are pinned until the next one, as they were.
    const uint32_t hits = pool_.ResidentPrefix(pending_);
    for (uint32_t i = 0; i < hits; ++i) pool_.Pin(pending_[i]);
  }

 private:
  void Grow() {
    const size_t n = catalog_->size();
    pool_.Grow(n);
    if (n > 0) list_.Grow(static_cast<BlockIndex>(n - 1));
    if (bytes_.size() < n) bytes_.resize(std::max(n, 2 * bytes_.size()), 0);
  }

  // The pool's own byte count is the catalog's (PoolState), which a resize
  // would skew; the shadow keeps its own in used_.
  void Insert(BlockIndex b, uint64_t bytes) {
    pool_.Insert(b);
    bytes_[b] = bytes;
    used_ += bytes;
  }

  // Evicts least recent evictable leaves until `bytes` fit; false when the
  // rest is pinned.
  bool MakeRoom(uint64_t bytes) {
    if (bytes > capacity_) return false;
    while (capacity_ - used_ < bytes) {
      BlockIndex b = list_.Back();
      while (b != kNoBlock && !pool_.IsEvictable(b)) b = list_.Prev(b);
      if (b == kNoBlock) return false;
      pool_.Evict(b);
      list_.Remove(b);
      used_ -= bytes_[b];
    }
    return true;
  }

  const BlockCatalog* catalog_;
  PoolState pool_;  // residency, children and pins; its byte count is not used
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<uint64_t> bytes_;      // per block: its bytes when copied in (if resident)
  RecencyList list_;                 // most recent first
  std::vector<BlockIndex> pending_;  // the latest request's chain
};

}  // namespace kvlearn
