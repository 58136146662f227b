// A doubly linked list of blocks, most recent first, kept in two vectors of
// slot numbers (block b in slot b + 1, slot 0 the head sentinel): moving a
// block to the front or right behind another is O(1). The order of `lru`
// (lru_policy.cc) and of the learned policy's shadow pool
// (learned/shadow_pool.h).
//
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/block_catalog.h"

namespace kvlearn {

class RecencyList {
 public:
  // Makes room for block b, and for all of `catalog` at once (see
  // GrownPerBlockSize).
  void Grow(BlockIndex b, const BlockCatalog& catalog) {
    if (Slot(b) < next_.size()) return;
    const size_t n = 1 + GrownPerBlockSize(b + 1, next_.size(), catalog);  // slot 0: the head
    next_.resize(n, kHead);
    prev_.resize(n, kHead);
  }

  // REQUIRES (these three): Grow(b) done, b not linked.
  void PushBack(BlockIndex b) { LinkAfter(prev_[kHead], Slot(b)); }
  void PushFront(BlockIndex b) { LinkAfter(kHead, Slot(b)); }
  // Links b right behind its parent in the prefix tree (linked), or at the
  // front for a root (parent kNoBlock): a new block is as recent as the
  // request that brought it, and below the blocks it extends.
  void InsertBehindParent(BlockIndex parent, BlockIndex b) {
    LinkAfter(parent == kNoBlock ? kHead : Slot(parent), Slot(b));
  }
  // REQUIRES: b linked.
  void MoveToFront(BlockIndex b) {
    Remove(b);
    PushFront(b);
  }

  // REQUIRES: b linked.
  void Remove(BlockIndex b) {
    const uint32_t s = Slot(b);
    next_[prev_[s]] = next_[s];
    prev_[next_[s]] = prev_[s];
  }

  // Most recent first: Front(), then Next(b); kNoBlock past the end.
  BlockIndex Front() const { return Block(next_[kHead]); }
  BlockIndex Next(BlockIndex b) const { return Block(next_[Slot(b)]); }
  // Least recent first: Back(), then Prev(b).
  BlockIndex Back() const { return Block(prev_[kHead]); }
  BlockIndex Prev(BlockIndex b) const { return Block(prev_[Slot(b)]); }

 private:
  static constexpr uint32_t kHead = 0;
  static uint32_t Slot(BlockIndex b) { return b + 1; }
  static BlockIndex Block(uint32_t slot) { return slot == kHead ? kNoBlock : slot - 1; }

  void LinkAfter(uint32_t at, uint32_t s) {
    const uint32_t after = next_[at];
    prev_[s] = at;
    next_[s] = after;
    next_[at] = s;
    prev_[after] = s;
  }

  std::vector<uint32_t> next_{kHead};
  std::vector<uint32_t> prev_{kHead};
};

}  // namespace kvlearn
