// ARC's two leaf heaps (arc_policy.h): T1's and T2's resident leaves, least
// recent on top. The same 4-ary indexed heaps as LeafHeap, sized for what ARC
// needs: the key is the block's recency stamp, which this class keeps for
// every block (interior ones too: ARC reads them), and one position per
// block serves both heaps, since a block is a leaf of one list at most. A
// block costs 12 bytes here where two LeafHeaps and a stamp took 64; an ARC
// policy and the learned policy's ARC expert and shadow each keep one.
//
// Stamps compare alone: ARC gives every insert and hit a fresh one, so no
// two resident blocks share a stamp and LeafHeap's depth tie-break never
// applies. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/block_catalog.h"
#include "core/check.h"
#include "policies/leaf_heap.h"

namespace kvlearn {

class RecencyLeafHeaps {
  // The sift steps' order and slot bookkeeping (defined first: the members
  // below deduce their types from them).
  // A lambda, not a function: a function pointer would not be inlined.
  static constexpr auto StampBefore = [](uint64_t a, uint64_t b) { return a < b; };
  auto Place() {
    return [this](BlockIndex b, uint32_t i) { pos_[b] = i; };
  }

 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  // One list's heap, read-only: for LeastUnpinned and for saving its slots.
  class List {
   public:
    bool empty() const { return heap_.empty(); }
    BlockIndex Top() const { return heap_.front(); }
    BlockIndex At(size_t i) const { return heap_[i]; }
    bool Before(BlockIndex a, BlockIndex b) const { return stamps_[a] < stamps_[b]; }
    template <class Fn>
    void ForEachChild(uint32_t i, Fn fn) const {
      ForEachChildSlot(heap_.size(), i, fn);
    }
    // The entries in slot order (ties cannot occur, but the layout is what a
    // snapshot restores).
    const std::vector<BlockIndex>& entries() const { return heap_; }

   private:
    friend class RecencyLeafHeaps;
    List(const std::vector<BlockIndex>& heap, const std::vector<uint64_t>& stamps)
        : heap_(heap), stamps_(stamps) {}
    const std::vector<BlockIndex>& heap_;
    const std::vector<uint64_t>& stamps_;
  };

  List list(int l) const { return List(heaps_[l], stamps_); }

  // Stamps and positions for blocks below n (the owner's per-block size).
  void Resize(size_t n) {
    if (n <= stamps_.size()) return;
    stamps_.resize(n, 0);
    pos_.resize(n, kAbsent);
  }

  uint64_t Stamp(BlockIndex b) const { return stamps_[b]; }
  bool Contains(int l, BlockIndex b) const {
    const uint32_t i = pos_[b];
    return i != kAbsent && i < heaps_[l].size() && heaps_[l][i] == b;
  }

  // Gives b `stamp` and repositions it in the heap holding it, if any.
  void SetStamp(BlockIndex b, uint64_t stamp) {
    const bool later = stamp > stamps_[b];
    stamps_[b] = stamp;
    for (int l : {0, 1}) {
      if (!Contains(l, b)) continue;
      slot_stamps_[l][pos_[b]] = stamp;
      if (later) {
        SiftDownInHeap(heaps_[l], slot_stamps_[l], pos_[b], StampBefore, Place());
      } else {
        SiftUpInHeap(heaps_[l], slot_stamps_[l], pos_[b], StampBefore, Place());
      }
    }
  }

  // Adds b to list l's heap with its current stamp. REQUIRES: b in neither.
  void Push(int l, BlockIndex b) {
    KVLEARN_DCHECK(pos_[b] == kAbsent);
    heaps_[l].push_back(b);
    slot_stamps_[l].push_back(stamps_[b]);
    SiftUpInHeap(heaps_[l], slot_stamps_[l], static_cast<uint32_t>(heaps_[l].size() - 1),
                 StampBefore, Place());
  }

  // b takes old's slot in list l's heap and sifts from there: one sift where
  // Remove and Push take two (stamps never tie, so the layout cannot change
  // a victim). REQUIRES: Contains(l, old), b in neither heap.
  void Replace(int l, BlockIndex old, BlockIndex b) {
    KVLEARN_DCHECK(Contains(l, old) && pos_[b] == kAbsent);
    const uint32_t i = pos_[old];
    pos_[old] = kAbsent;
    const bool later = stamps_[b] > slot_stamps_[l][i];
    heaps_[l][i] = b;
    slot_stamps_[l][i] = stamps_[b];
    pos_[b] = i;
    if (later) {
      SiftDownInHeap(heaps_[l], slot_stamps_[l], i, StampBefore, Place());
    } else {
      SiftUpInHeap(heaps_[l], slot_stamps_[l], i, StampBefore, Place());
    }
  }

  // Takes b out of list l's heap; nothing if it is not there.
  void Remove(int l, BlockIndex b) {
    if (!Contains(l, b)) return;
    const uint32_t i = pos_[b];
    pos_[b] = kAbsent;
    RemoveSlotFromHeap(heaps_[l], slot_stamps_[l], i, StampBefore, Place());
  }

  // Replaces list l's entries by `entries` in slot order, stamps already
  // set. False (and that heap left empty) if an entry is already in a heap
  // or the order breaks the heap property.
  bool Assign(int l, const std::vector<BlockIndex>& entries) {
    Clear(l);
    for (BlockIndex b : entries) {
      if (pos_[b] != kAbsent) return Clear(l);
      pos_[b] = static_cast<uint32_t>(heaps_[l].size());
      heaps_[l].push_back(b);
      slot_stamps_[l].push_back(stamps_[b]);
    }
    return IsHeapOrdered(heaps_[l],
                         [this](BlockIndex a, BlockIndex b) { return stamps_[a] < stamps_[b]; }) ||
           Clear(l);
  }

 private:
  bool Clear(int l) {
    for (BlockIndex b : heaps_[l]) pos_[b] = kAbsent;
    heaps_[l].clear();
    slot_stamps_[l].clear();
    return false;
  }

  std::vector<BlockIndex> heaps_[2];
  std::vector<uint64_t> slot_stamps_[2];  // parallel to heaps_: each slot's block's stamp
  std::vector<uint64_t> stamps_;          // recency: the owner's clock at b's last insert or hit
  std::vector<uint32_t> pos_;             // b's slot in the heap holding it, kAbsent if none
};

}  // namespace kvlearn
