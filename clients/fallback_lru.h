// The retention client's local answer to RankEviction when the sidecar is slow
// or down: least recently used first, leaves only.
//
// It mirrors what the engine has told the client: blocks stored (with their
// parent), hits and removals. A block with a stored child is never chosen (the
// prefix constraint: evicting it would orphan the child), and neither is a
// block of the engine's current request (stored or hit since the last
// BeginRequest), as the simulator and the sidecar pin them. "Used" means
// stored or hit; hits arrive deepest first, so a prefix is at least as recent
// as its deepest hit block.
//
// Memory is bounded by `capacity_blocks`: past it, the least recently used
// evictable block is forgotten (counted in forgotten()); a forgotten block can
// no longer be offered as a victim, which costs the engine nothing but an
// answer that frees less than it asked.
//
// Thread-safety: none; RetentionClient guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kvlearn {

struct FallbackVictim {
  uint64_t block_id = 0;
  int64_t bytes = 0;
};

// A block the fallback tracks, for resending the engine's state to the sidecar.
struct FallbackBlock {
  uint64_t block_id = 0;
  std::optional<uint64_t> parent_id;
  int64_t tokens = 0;
  int64_t bytes = 0;
};

class FallbackLru {
 public:
  explicit FallbackLru(size_t capacity_blocks);

  // A new request of the engine: the previous one's blocks may be evicted again.
  void BeginRequest();
  // The engine holds `block_id` (child of `parent_id`); it becomes the most
  // recently used and is pinned until the next BeginRequest. Storing a block
  // already known only touches it.
  void Stored(uint64_t block_id, std::optional<uint64_t> parent_id, int64_t bytes,
              int64_t tokens = 0);
  // The current request used `block_id`: touched and pinned. Unknown ids are ignored.
  void Hit(uint64_t block_id);
  // The engine dropped `block_id`. Unknown ids (already chosen by Evict) are ignored.
  void Removed(uint64_t block_id);

  // Chooses victims, least recently used first, until `bytes_to_free` are
  // freed or nothing else is evictable, and forgets them at once (the engine's
  // later Removed for them is then a no-op). A non-empty `candidates` limits
  // the choice to those ids. O(blocks tracked + victims).
  std::vector<FallbackVictim> Evict(int64_t bytes_to_free, const std::vector<uint64_t>& candidates);

  // Every block tracked, each after its parent (when the parent is tracked).
  std::vector<FallbackBlock> Blocks() const;

  size_t size() const { return entries_.size(); }
  uint64_t forgotten() const { return forgotten_; }

 private:
  struct Entry {
    std::optional<uint64_t> parent;
    int64_t bytes = 0;
    int64_t tokens = 0;
    uint32_t stored_children = 0;
    bool pinned = false;
    uint64_t last_use = 0;                // position in recency_ (strictly increasing)
    std::list<uint64_t>::iterator place;  // in recency_
  };

  void Touch(uint64_t block_id, Entry& entry);
  void Pin(uint64_t block_id, Entry& entry);
  void Erase(uint64_t block_id);
  void ForgetOneIfOverCapacity();

  const size_t capacity_blocks_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> recency_;  // oldest first
  std::vector<uint64_t> pinned_;
  uint64_t clock_ = 0;
  uint64_t forgotten_ = 0;
};

}  // namespace kvlearn
