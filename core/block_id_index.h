// The block catalog's hash index: block hash id -> BlockIndex, for a catalog
// whose blocks are numbered 0..n-1. It stores indexes only (4 bytes a slot),
// never the 64-bit ids: a candidate slot is confirmed by reading the id from
// the catalog itself (`id_of(b)`), the entry a caller reads next anyway. That
// takes the index from about 34 B a block (absl::flat_hash_map<uint64_t,
// uint32_t>: 16-byte slots, a control byte, load slack) to 6-12 B.
//
// Layout: buckets of one cache line, 12 slots each with a one-byte tag (8
// bits of the id's hash) filled in order, so a lookup reads one line, checks
// the tags and confirms the few matches against the catalog. A bucket that is
// full spills into the next (linear probing over buckets); nothing is ever
// erased (a compaction builds a new catalog), so a bucket with a free slot
// ends every search. Grows by doubling at 7/8 of the slots.
//
// Not thread-safe for writers; concurrent readers are fine.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/hash/hash.h"
#include "core/check.h"

namespace kvlearn {

using BlockIndex = uint32_t;
inline constexpr BlockIndex kNoBlock = UINT32_MAX;

class BlockIdIndex {
 public:
  static constexpr uint32_t kSlots = 12;  // per bucket

  size_t size() const { return size_; }
  size_t bucket_count() const { return buckets_.size(); }
  // Heap bytes the index holds.
  size_t memory_bytes() const { return buckets_.capacity() * sizeof(Bucket); }

  // The block whose id is `id`, or kNoBlock. `id_of(b)` is block b's id.
  template <class IdOf>
  BlockIndex Find(uint64_t id, const IdOf& id_of) const {
    if (buckets_.empty()) return kNoBlock;
    const size_t h = Hash(id);
    const uint8_t tag = Tag(h);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Bucket& k = buckets_[i];
      for (uint32_t m = Matches(k, tag); m != 0; m &= m - 1) {
        const BlockIndex b = k.slots[std::countr_zero(m)];
        if (id_of(b) == id) return b;
      }
      if (k.used < kSlots) return kNoBlock;
    }
  }

  // For a caller about to Find many ids (FindAll in block_catalog.h): loads
  // the line Find reads first for `id` without waiting for it.
  void Prefetch(uint64_t id) const {
    if (!buckets_.empty()) __builtin_prefetch(&buckets_[Hash(id) & mask_]);
  }
  // The block in `id`'s home bucket whose tag matches, unconfirmed: the
  // catalog entry Find will most likely read next (kNoBlock if none).
  BlockIndex Guess(uint64_t id) const {
    if (buckets_.empty()) return kNoBlock;
    const size_t h = Hash(id);
    const Bucket& k = buckets_[h & mask_];
    const uint32_t m = Matches(k, Tag(h));
    return m == 0 ? kNoBlock : k.slots[std::countr_zero(m)];
  }

  // Indexes block size() (whose id is id_of(size())).
  // REQUIRES: that id is not indexed yet; size() < kNoBlock.
  template <class IdOf>
  void Append(const IdOf& id_of) {
    KVLEARN_DCHECK(size_ < kNoBlock);
    if (!Fits(size_ + 1, buckets_.size()))
      Rehash(buckets_.empty() ? 1 : 2 * buckets_.size(), id_of);
    Place(static_cast<BlockIndex>(size_), id_of);
    ++size_;
  }

  // Makes room for `n` blocks in all, so that appending up to n rehashes
  // nothing (a compaction's rebuild reserves its exact size).
  template <class IdOf>
  void Reserve(size_t n, const IdOf& id_of) {
    size_t buckets = buckets_.empty() ? 1 : buckets_.size();
    while (!Fits(n, buckets)) buckets *= 2;
    if (buckets != buckets_.size()) Rehash(buckets, id_of);
  }

 private:
  // One cache line: tags first so that one 16-byte load covers them.
  struct alignas(64) Bucket {
    uint8_t tags[kSlots] = {};
    uint32_t used = 0;  // slots [0, used) are filled
    BlockIndex slots[kSlots] = {};
  };
  static_assert(sizeof(Bucket) == 64);

  // Up to 7/8 of the slots filled.
  static bool Fits(size_t n, size_t buckets) { return n * 8 <= buckets * kSlots * 7; }

  static size_t Hash(uint64_t id) { return absl::Hash<uint64_t>{}(id); }
  // The bucket comes from the low bits, the tag from the top ones.
  static uint8_t Tag(size_t h) { return static_cast<uint8_t>(h >> (8 * sizeof(size_t) - 8)); }

  // Bit j set when slot j is filled and its tag is `tag`.
  static uint32_t Matches(const Bucket& k, uint8_t tag) {
    const uint32_t filled = (uint32_t{1} << k.used) - 1;
#if defined(__SSE2__)
    const __m128i line = _mm_load_si128(reinterpret_cast<const __m128i*>(&k));
    const __m128i eq = _mm_cmpeq_epi8(line, _mm_set1_epi8(static_cast<char>(tag)));
    return static_cast<uint32_t>(_mm_movemask_epi8(eq)) & filled;
#else
    uint32_t m = 0;
    for (uint32_t j = 0; j < kSlots; ++j) m |= uint32_t{k.tags[j] == tag} << j;
    return m & filled;
#endif
  }

  template <class IdOf>
  void Place(BlockIndex b, const IdOf& id_of) {
    const size_t h = Hash(id_of(b));
    size_t i = h & mask_;
    while (buckets_[i].used == kSlots) i = (i + 1) & mask_;
    Bucket& k = buckets_[i];
    k.tags[k.used] = Tag(h);
    k.slots[k.used] = b;
    ++k.used;
  }

  // Rebuilds over `buckets` buckets (a power of two), blocks in order.
  template <class IdOf>
  void Rehash(size_t buckets, const IdOf& id_of) {
    std::vector<Bucket> fresh(buckets);
    buckets_.swap(fresh);
    mask_ = buckets - 1;
    for (size_t b = 0; b < size_; ++b) Place(static_cast<BlockIndex>(b), id_of);
  }

  std::vector<Bucket> buckets_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kvlearn
