// The blocks a pool can hold, with the static facts every policy may use:
// parent in the prefix tree, depth, tokens, bytes and marginal recompute
// cost. Blocks are addressed by a dense BlockIndex assigned in order of first
// appearance, so per-block state lives in plain vectors instead of hash maps.
//
// Not thread-safe for writers; concurrent readers are fine once built.
#pragma once

#include <cstdint>
#include <vector>

#include "core/block_id_index.h"
#include "core/check.h"

namespace kvlearn {

struct BlockMeta {
  uint64_t hash_id = 0;
  BlockIndex parent = kNoBlock;  // kNoBlock for the first block of a chain
  uint32_t depth = 0;            // position in its chain; 0 = first block
  uint32_t tokens = 0;
  uint64_t bytes = 0;       // KV bytes of its tokens
  double recompute_ms = 0;  // marginal prefill time of this block given its prefix
};

class BlockCatalog {
 public:
  size_t size() const { return blocks_.size(); }
  const BlockMeta& operator[](BlockIndex b) const { return blocks_[b]; }

  // Index of `hash_id`, or kNoBlock if it was never added.
  BlockIndex Find(uint64_t hash_id) const { return index_.Find(hash_id, IdOf{this}); }

  // REQUIRES: meta.hash_id not present yet.
  BlockIndex Add(const BlockMeta& meta) {
    KVLEARN_DCHECK(Find(meta.hash_id) == kNoBlock);
    const auto b = static_cast<BlockIndex>(blocks_.size());
    blocks_.push_back(meta);
    index_.Append(IdOf{this});
    return b;
  }

  // A block's size as its holder reports it (the sidecar learns it from the
  // engine). REQUIRES: b is in no pool (a pool counts the bytes it holds).
  void Resize(BlockIndex b, uint32_t tokens, uint64_t bytes, double recompute_ms) {
    blocks_[b].tokens = tokens;
    blocks_[b].bytes = bytes;
    blocks_[b].recompute_ms = recompute_ms;
  }

  void Reserve(size_t n) {
    blocks_.reserve(n);
    index_.Reserve(n, IdOf{this});
  }

 private:
  // The index keeps block numbers only and reads ids from here.
  struct IdOf {
    const BlockCatalog* catalog;
    uint64_t operator()(BlockIndex b) const { return catalog->blocks_[b].hash_id; }
  };

  std::vector<BlockMeta> blocks_;
  BlockIdIndex index_;
};

}  // namespace kvlearn
