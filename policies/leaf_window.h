// The k least unpinned entries of a LeafHeap: the "window" a policy ranks
// its next victim in (learned). Two ways to find it:
//
// Walk() visits the heap best-first from the top (no slot holds a key below
// its parent's), stepping over pinned entries, and gives the window in the
// order the walk meets it; among equal keys that order is the walk's own.
//
// Find() gives the same entries for less work, when it can: a depth-first
// walk collects every unpinned entry whose key is not past a bound kept from
// an earlier Walk (the key of its 2k-th entry), and a selection keeps the k
// least. Keys only grow between evictions (a hit re-keys to now, an insert
// is newest), so one bound serves many calls, until fewer than k + 1 entries
// are under it. Find() returns kWalkOrder when it walked (the bound ran out,
// the heap is small, or entries k and k + 1 have equal keys, so which of them
// is in the window is the walk's choice), kAnyOrder when `out` holds the
// window's entries in no particular order. A caller whose answer depends on
// the order among equal keys walks again in that case. Holds() says whether
// one entry is in the window.
//
// Not thread-safe: the bound and the scratch space are per instance.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "policies/leaf_heap.h"

namespace kvlearn {

class LeafWindow {
 public:
  enum Order { kWalkOrder, kAnyOrder };

  explicit LeafWindow(size_t k) : k_(k) {}

  // The first `n` unpinned entries of the best-first walk into `out`.
  template <class Pinned>
  void Walk(const LeafHeap& h, const Pinned& pinned, size_t n, std::vector<BlockIndex>& out) {
    out.clear();
    if (h.empty()) return;
    const auto after = [&h](uint32_t i, uint32_t j) {
      return EvictsBefore(h.KeyOf(h.At(j)), h.KeyOf(h.At(i)));
    };
    frontier_.assign(1, 0);
    while (!frontier_.empty() && out.size() < n) {
      std::pop_heap(frontier_.begin(), frontier_.end(), after);
      const uint32_t i = frontier_.back();
      frontier_.pop_back();
      if (!pinned(h.At(i))) out.push_back(h.At(i));
      h.ForEachChild(i, [&](uint32_t c) {
        frontier_.push_back(c);
        std::push_heap(frontier_.begin(), frontier_.end(), after);
      });
    }
  }

  // The window into `out` (see the file comment).
  template <class Pinned>
  Order Find(const LeafHeap& h, const Pinned& pinned, std::vector<BlockIndex>& out) {
    if (has_bound_ && CollectUnderBound(h, pinned) && SelectLeast(out)) return kAnyOrder;
    Walk(h, pinned, 2 * k_, out);
    has_bound_ = out.size() == 2 * k_;
    if (has_bound_) bound_ = h.KeyOf(out.back());
    out.resize(std::min(out.size(), k_));
    return kWalkOrder;
  }

  // Whether b is in the window: an unpinned entry with fewer than k
  // unpinned entries before it. A walk that skips every slot not before b
  // (and so everything below it): cheaper than Find() for one entry, no
  // queue, and it stops at b's key.
  template <class Pinned>
  bool Holds(const LeafHeap& h, const Pinned& pinned, BlockIndex b) const {
    if (!h.Contains(b) || pinned(b)) return false;
    const OrderKey& key = h.KeyOf(b);
    size_t before = 0;
    holds_stack_.assign(1, 0);
    while (!holds_stack_.empty()) {
      const uint32_t i = holds_stack_.back();
      holds_stack_.pop_back();
      const BlockIndex x = h.At(i);
      if (!EvictsBefore(h.KeyOf(x), key)) continue;
      if (!pinned(x) && ++before >= k_) return false;
      h.ForEachChild(i, [&](uint32_t c) { holds_stack_.push_back(c); });
    }
    return true;
  }

  // Forgets the bound (the keys were replaced wholesale, say).
  void Reset() { has_bound_ = false; }

 private:
  // Caps on one depth-first walk: a bound left far ahead of the window (the
  // heap emptied below it) would otherwise collect most of the heap.
  size_t MaxCollected() const { return 8 * k_; }
  size_t MaxVisited() const { return 64 * k_; }

  // The unpinned entries with keys not past bound_ into collected_ (with
  // their keys, so the selection reads no other memory); false when they are
  // too few to hold the window and its next entry, or too many. The scratch
  // arrays are sized for the caps, so the walk never grows a vector.
  template <class Pinned>
  bool CollectUnderBound(const LeafHeap& h, const Pinned& pinned) {
    num_collected_ = 0;
    // A slot past the bound is never visited, nor anything below it.
    const auto under = [&h, this](size_t i) { return !EvictsBefore(bound_, h.KeyOf(h.At(i))); };
    if (h.empty() || !under(0)) return false;
    if (collected_.empty()) {
      collected_.resize(MaxCollected() + 1);
      stack_.resize(LeafHeap::kArity * MaxVisited() + 1);
    }
    size_t visited = 0, top = 0;
    stack_[top++] = 0;
    while (top > 0) {
      const uint32_t i = stack_[--top];
      if (++visited > MaxVisited()) return false;
      const BlockIndex x = h.At(i);
      if (!pinned(x)) {
        // Field by field: a braced temporary went through the stack, and
        // its 16-byte reload straddled two stores (no store forwarding).
        Collected& entry = collected_[num_collected_++];
        entry.key = h.KeyOf(x);
        entry.block = x;
        if (num_collected_ > MaxCollected()) return false;
      }
      h.ForEachChild(i, [&](uint32_t c) {
        if (under(c)) stack_[top++] = c;
      });
    }
    return num_collected_ > k_;
  }

  // The k least collected into `out`; false when the k-th and the next have
  // equal keys (the walk decides which is in).
  bool SelectLeast(std::vector<BlockIndex>& out) {
    const auto before = [](const Collected& a, const Collected& b) {
      return EvictsBefore(a.key, b.key);
    };
    const auto begin = collected_.begin();
    const auto kth = begin + static_cast<ptrdiff_t>(k_);
    std::nth_element(begin, kth, begin + static_cast<ptrdiff_t>(num_collected_), before);
    if (!before(*std::max_element(begin, kth, before), *kth)) return false;
    out.resize(k_);
    for (size_t i = 0; i < k_; ++i) out[i] = collected_[i].block;
    return true;
  }

  struct Collected {
    OrderKey key;
    BlockIndex block;
  };

  const size_t k_;
  bool has_bound_ = false;
  OrderKey bound_;
  std::vector<uint32_t> frontier_;    // Walk(): slots met, not yet visited
  std::vector<uint32_t> stack_;       // CollectUnderBound(): slots to visit
  std::vector<Collected> collected_;  // entries under the bound: the first num_collected_
  size_t num_collected_ = 0;
  mutable std::vector<uint32_t> holds_stack_;  // Holds(): slots to visit
};

}  // namespace kvlearn
