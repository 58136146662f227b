// Which blocks one KV pool holds, under the prefix constraint: a block may be
// resident only while its parent is, so eviction takes leaves (resident blocks
// with no resident child) and never orphans a descendant.
//
// Blocks touched by the request being served are pinned for its duration so
// that making room for its new blocks never evicts the prefix it just used.
// Two kinds of pin: the simulators' one-request-at-a-time pins (Pin, all
// ended by BeginRequest), and the sidecar's counted holds (Hold / Release),
// one per in-flight request that needs the block, so a block stays pinned
// until the last request holding it ends. The simulator and the sidecar both
// own one PoolState per pool; policies read it to tell which blocks they may
// evict. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/check.h"

namespace kvlearn {

class PoolState {
 public:
  PoolState(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : catalog_(catalog), capacity_bytes_(capacity_bytes) {
    Grow(catalog->size());
  }

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  // REQUIRES: used_bytes() <= capacity_bytes(), which the simulators keep;
  // the sidecar, whose view follows what nodes report, never reads it.
  uint64_t free_bytes() const { return capacity_bytes_ - used_bytes_; }
  uint64_t resident_blocks() const { return resident_blocks_; }
  uint64_t evictions() const { return evictions_; }  // since construction
  // Residency and pin changes since construction: a policy may keep a choice
  // it computed until this moves.
  uint64_t changes() const { return changes_; }
  const BlockCatalog& catalog() const { return *catalog_; }

  bool IsResident(BlockIndex b) const { return b < resident_.size() && resident_[b]; }
  uint32_t ResidentChildren(BlockIndex b) const { return counts_[b].children; }
  bool IsLeaf(BlockIndex b) const { return IsResident(b) && counts_[b].children == 0; }
  bool IsPinned(BlockIndex b) const {
    return (b < pin_epoch_.size() && pin_epoch_[b] == epoch_) ||
           (b < counts_.size() && counts_[b].holds != 0);
  }
  bool IsEvictable(BlockIndex b) const { return IsLeaf(b) && !IsPinned(b); }
  // Leading blocks of `chain` (root first) resident here: residents are
  // prefix-closed, so everything before the first miss.
  uint32_t ResidentPrefix(std::span<const BlockIndex> chain) const {
    uint32_t k = 0;
    while (k < chain.size() && IsResident(chain[k])) ++k;
    return k;
  }

  // Starts a new request: unpins everything pinned by the previous one.
  void BeginRequest() {
    ++epoch_;
    ++changes_;
  }
  // REQUIRES: b < catalog().size() (after Grow).
  void Pin(BlockIndex b) {
    KVLEARN_DCHECK(b < resident_.size());
    if (b >= pin_epoch_.size()) pin_epoch_.resize(resident_.size(), 0);
    pin_epoch_[b] = epoch_;
    ++changes_;
  }
  // One more in-flight request needs b (resident or not yet).
  // REQUIRES: b < catalog().size() (after Grow).
  void Hold(BlockIndex b) {
    KVLEARN_DCHECK(b < counts_.size());
    ++counts_[b].holds;
    ++changes_;
  }
  // REQUIRES: a Hold(b) not yet released.
  void Release(BlockIndex b) {
    KVLEARN_DCHECK(b < counts_.size() && counts_[b].holds > 0);
    --counts_[b].holds;
    ++changes_;
  }

  // REQUIRES: !IsResident(b), parent resident (or none). The simulators also
  // keep used_bytes() <= capacity_bytes(); the sidecar follows its nodes.
  void Insert(BlockIndex b) {
    KVLEARN_DCHECK(b < resident_.size() && !resident_[b]);
    KVLEARN_DCHECK((*catalog_)[b].parent == kNoBlock || IsResident((*catalog_)[b].parent));
    resident_[b] = 1;
    used_bytes_ += (*catalog_)[b].bytes;
    ++resident_blocks_;
    ++changes_;
    const BlockIndex parent = (*catalog_)[b].parent;
    if (parent != kNoBlock) ++counts_[parent].children;
  }

  // REQUIRES: IsLeaf(b).
  void Evict(BlockIndex b) {
    KVLEARN_DCHECK(IsLeaf(b));
    resident_[b] = 0;
    used_bytes_ -= (*catalog_)[b].bytes;
    --resident_blocks_;
    ++evictions_;
    ++changes_;
    const BlockIndex parent = (*catalog_)[b].parent;
    if (parent != kNoBlock) --counts_[parent].children;
  }

  // Extends per-block state after blocks were added to the catalog.
  void Grow(size_t n) {
    if (n <= resident_.size()) return;
    resident_.resize(n, 0);
    counts_.resize(n);
  }

 private:
  const BlockCatalog* catalog_;
  uint64_t capacity_bytes_;
  uint64_t used_bytes_ = 0;
  uint64_t resident_blocks_ = 0;
  uint64_t evictions_ = 0;
  uint64_t changes_ = 0;
  uint32_t epoch_ = 1;  // pin_epoch_ starts at 0, so nothing is pinned initially
  std::vector<uint8_t> resident_;
  // A block's resident children and in-flight holds side by side, so that
  // IsEvictable reads one cache line for both (cold, in the sidecar, a
  // line per array was a miss per candidate ranked).
  struct Counts {
    uint32_t children = 0;
    uint32_t holds = 0;
  };
  std::vector<Counts> counts_;
  // Sized on the first Pin after the catalog grew, not by Grow: only the
  // simulators pin (a block past the end is not pinned).
  std::vector<uint32_t> pin_epoch_;
};

}  // namespace kvlearn
