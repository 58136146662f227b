// An indexed min-heap over the leaves of a pool: the ordering structure of
// every policy that evicts "the leaf with the smallest key" (LFU, FIFO, GDSF,
// Belady, learned). Holding only leaves keeps the prefix constraint for free:
// the heap top is always a block that may leave without orphaning another.
//
// 4-ary layout with a position index, so a key change is O(log n) with no
// stale entries. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "core/block_catalog.h"
#include "core/check.h"

namespace kvlearn {

// Keys compare by primary, then secondary (both ascending), then deeper first,
// so among equal keys a descendant goes before its ancestor.
struct OrderKey {
  double primary = 0;
  double secondary = 0;
  uint32_t depth = 0;
};

inline bool EvictsBefore(const OrderKey& a, const OrderKey& b) {
  if (a.primary != b.primary) return a.primary < b.primary;
  if (a.secondary != b.secondary) return a.secondary < b.secondary;
  return a.depth > b.depth;
}

// LeafHeap and RecencyLeafHeaps (recency_leaf_heaps.h) are 4-ary: the
// children of slot i are slots 4i+1 .. 4i+4.
inline constexpr uint32_t kLeafHeapArity = 4;

// Calls fn(c) for each child slot c of slot i in a heap of `size` entries.
template <class Fn>
void ForEachChildSlot(size_t size, uint32_t i, Fn fn) {
  const size_t first = size_t{kLeafHeapArity} * i + 1;
  const size_t end = std::min(first + kLeafHeapArity, size);
  for (size_t c = first; c < end; ++c) fn(static_cast<uint32_t>(c));
}

// The sift steps of both heaps. `heap` holds blocks by slot and `keys`,
// beside it, each slot's block's key: a sift compares a slot's children in
// adjacent memory instead of fetching each child's key from a per-block array
// (a cache miss each, most of a leaf-heap policy's replay time).
// before(x, y) says key x leaves before key y; place(b, i) records that b
// now sits in slot i.
template <class Key, class Before, class Place>
void SiftUpInHeap(std::vector<BlockIndex>& heap, std::vector<Key>& keys, uint32_t i,
                  const Before& before, const Place& place) {
  const BlockIndex b = heap[i];
  const Key key = keys[i];
  while (i > 0) {
    const uint32_t parent = (i - 1) / kLeafHeapArity;
    if (!before(key, keys[parent])) break;
    heap[i] = heap[parent];
    keys[i] = keys[parent];
    place(heap[i], i);
    i = parent;
  }
  heap[i] = b;
  keys[i] = key;
  place(b, i);
}

template <class Key, class Before, class Place>
void SiftDownInHeap(std::vector<BlockIndex>& heap, std::vector<Key>& keys, uint32_t i,
                    const Before& before, const Place& place) {
  const auto n = static_cast<uint32_t>(heap.size());
  const BlockIndex b = heap[i];
  const Key key = keys[i];
  while (true) {
    const uint32_t first = i * kLeafHeapArity + 1;
    if (first >= n) break;
    uint32_t best = first;
    const uint32_t end = std::min(first + kLeafHeapArity, n);
    for (uint32_t c = first + 1; c < end; ++c) {
      if (before(keys[c], keys[best])) best = c;
    }
    if (!before(keys[best], key)) break;
    heap[i] = heap[best];
    keys[i] = keys[best];
    place(heap[i], i);
    i = best;
  }
  heap[i] = b;
  keys[i] = key;
  place(b, i);
}

// Takes the entry of slot i out of `heap` and `keys` (clearing its position
// is the caller's): the last entry fills the slot and sifts to its place.
template <class Key, class Before, class Place>
void RemoveSlotFromHeap(std::vector<BlockIndex>& heap, std::vector<Key>& keys, uint32_t i,
                        const Before& before, const Place& place) {
  const BlockIndex last = heap.back();
  heap.pop_back();
  keys[i] = keys.back();
  keys.pop_back();
  if (i == heap.size()) return;  // it was the last
  heap[i] = last;
  SiftDownInHeap(heap, keys, i, before, place);
  // Had it moved down, its new parent would leave before it: up only if not.
  if (heap[i] == last) SiftUpInHeap(heap, keys, i, before, place);
}

// No slot's entry leaves before its parent's.
template <class Before>
bool IsHeapOrdered(const std::vector<BlockIndex>& heap, const Before& before) {
  for (size_t i = 1; i < heap.size(); ++i) {
    if (before(heap[i], heap[(i - 1) / kLeafHeapArity])) return false;
  }
  return true;
}

class LeafHeap {
  // The sift steps' order and slot bookkeeping (defined first: the members
  // below deduce their types from them).
  // A lambda, not a function: a function pointer would not be inlined.
  static constexpr auto KeyBefore = [](const OrderKey& a, const OrderKey& b) {
    return EvictsBefore(a, b);
  };
  auto Place() {
    return [this](BlockIndex b, uint32_t i) { pos_[b] = i; };
  }

 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  // Children of heap slot i are slots kArity*i+1 .. kArity*i+kArity.
  static constexpr uint32_t kArity = kLeafHeapArity;

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  bool Contains(BlockIndex b) const { return b < pos_.size() && pos_[b] != kAbsent; }
  BlockIndex Top() const { return heap_.front(); }
  // The entry at heap slot i (0 = top); for scanning past pinned blocks.
  BlockIndex At(size_t i) const { return heap_[i]; }
  const OrderKey& KeyOf(BlockIndex b) const { return keys_[b]; }
  // a leaves before b (by key; LeastUnpinned's order).
  bool Before(BlockIndex a, BlockIndex b) const { return EvictsBefore(keys_[a], keys_[b]); }
  // Calls fn(c) for each child slot c of slot i, for walks of the heap.
  template <class Fn>
  void ForEachChild(uint32_t i, Fn fn) const {
    ForEachChildSlot(heap_.size(), i, fn);
  }

  // The entries in slot order: with their keys, the exact layout (ties
  // between equal keys depend on it), for saving a policy's state.
  const std::vector<BlockIndex>& entries() const { return heap_; }

  // Replaces the entries by `entries` in slot order, keys already set with
  // SetKey. False (and the heap left empty) if an entry repeats or the
  // order breaks the heap property.
  bool Assign(const std::vector<BlockIndex>& entries) {
    Clear();
    for (BlockIndex b : entries) {
      Grow(b);
      if (pos_[b] != kAbsent) return Clear();
      pos_[b] = static_cast<uint32_t>(heap_.size());
      heap_.push_back(b);
      slot_keys_.push_back(keys_[b]);
    }
    return IsHeapOrdered(heap_, [this](BlockIndex a, BlockIndex b) { return Before(a, b); }) ||
           Clear();
  }

  // Makes room for blocks below n at once (LeafOrderedPolicy passes its
  // catalog's size: see GrownPerBlockSize).
  void Reserve(size_t n) {
    if (n > pos_.size()) Resize(std::max(n, pos_.size() * 2));
  }

  // Records b's key; repositions b if it is in the heap.
  void SetKey(BlockIndex b, const OrderKey& key) {
    Grow(b);
    const bool later = EvictsBefore(keys_[b], key);
    keys_[b] = key;
    if (!Contains(b)) return;
    slot_keys_[pos_[b]] = key;
    if (later) {
      SiftDown(pos_[b]);
    } else {
      SiftUp(pos_[b]);
    }
  }

  // Adds b with its current key. REQUIRES: !Contains(b).
  void Push(BlockIndex b) {
    KVLEARN_DCHECK(!Contains(b));
    Grow(b);
    pos_[b] = static_cast<uint32_t>(heap_.size());
    heap_.push_back(b);
    slot_keys_.push_back(keys_[b]);
    SiftUp(pos_[b]);
  }

  // `b` takes `old`'s slot and sifts from there: one sift where Remove(old)
  // and Push(b) take two. The layout may differ from theirs, so only for
  // keys that never tie (LeafOrderedPolicy::keys_never_tie_).
  // REQUIRES: Contains(old), !Contains(b).
  void Replace(BlockIndex old, BlockIndex b) {
    KVLEARN_DCHECK(Contains(old) && !Contains(b));
    Grow(b);
    const uint32_t i = pos_[old];
    pos_[old] = kAbsent;
    const bool later = EvictsBefore(slot_keys_[i], keys_[b]);
    heap_[i] = b;
    slot_keys_[i] = keys_[b];
    pos_[b] = i;
    if (later) {
      SiftDown(i);
    } else {
      SiftUp(i);
    }
  }

  void Remove(BlockIndex b) {
    if (!Contains(b)) return;
    const uint32_t i = pos_[b];
    pos_[b] = kAbsent;
    RemoveSlotFromHeap(heap_, slot_keys_, i, KeyBefore, Place());
  }

 private:
  void Grow(BlockIndex b) {
    if (b >= pos_.size()) [[unlikely]]
      GrowTo(b);
  }
  ABSL_ATTRIBUTE_NOINLINE void GrowTo(BlockIndex b) {
    Resize(std::max<size_t>(b + 1, pos_.size() * 2));
  }
  void Resize(size_t n) {
    pos_.resize(n, kAbsent);
    keys_.resize(n);
  }

  bool Clear() {
    for (BlockIndex b : heap_) pos_[b] = kAbsent;
    heap_.clear();
    slot_keys_.clear();
    return false;
  }

  void SiftUp(uint32_t i) { SiftUpInHeap(heap_, slot_keys_, i, KeyBefore, Place()); }
  void SiftDown(uint32_t i) { SiftDownInHeap(heap_, slot_keys_, i, KeyBefore, Place()); }

  std::vector<BlockIndex> heap_;
  std::vector<OrderKey> slot_keys_;  // parallel to heap_: each slot's block's key
  std::vector<uint32_t> pos_;
  std::vector<OrderKey> keys_;
};

// The least entry of `heap` that is not `pinned` (kNoBlock if every one is):
// the top, or, when the top is pinned, a best-first walk from it (no slot
// holds a key below its parent's), stepping over pinned entries. Ties go to
// the lower slot. The simulators pin at most one leaf (the current request's
// deepest block), so the walk then stops among the top's children; the
// sidecar's in-flight requests may hold many. Heap: a LeafHeap or one list
// of RecencyLeafHeaps (empty, Top, At, ForEachChild, Before).
template <class Heap, class Pinned>
BlockIndex LeastUnpinned(const Heap& heap, const Pinned& pinned) {
  if (heap.empty()) return kNoBlock;
  if (!pinned(heap.Top())) return heap.Top();
  // Slot i leaves the frontier after slot j: a larger key, or a tie and a later slot.
  const auto after = [&heap](uint32_t i, uint32_t j) {
    const BlockIndex a = heap.At(i);
    const BlockIndex b = heap.At(j);
    if (heap.Before(b, a)) return true;
    if (heap.Before(a, b)) return false;
    return i > j;
  };
  std::vector<uint32_t> frontier{0};
  while (!frontier.empty()) {
    std::pop_heap(frontier.begin(), frontier.end(), after);
    const uint32_t i = frontier.back();
    frontier.pop_back();
    if (!pinned(heap.At(i))) return heap.At(i);
    heap.ForEachChild(i, [&](uint32_t c) {
      frontier.push_back(c);
      std::push_heap(frontier.begin(), frontier.end(), after);
    });
  }
  return kNoBlock;
}

}  // namespace kvlearn
