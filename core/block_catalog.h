// The blocks a pool can hold, with the static facts every policy may use:
// parent in the prefix tree, depth, tokens, bytes, marginal recompute cost,
// and the type and turn of the request that brought it. Blocks are
// addressed by a dense BlockIndex assigned in order of first appearance, so
// per-block state lives in plain vectors instead of hash maps.
//
// Not thread-safe for writers; concurrent readers are fine once built.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_id_index.h"
#include "core/check.h"
#include "core/request_type.h"

namespace kvlearn {

struct BlockMeta {
  uint64_t hash_id = 0;
  BlockIndex parent = kNoBlock;  // kNoBlock for the first block of a chain
  uint32_t depth = 0;            // position in its chain; 0 = first block
  uint32_t tokens = 0;
  // The type and conversation turn of the request that first named the
  // block (kUnknown and 0 when its trace or client does not say, as
  // Mooncake's format does not): reuse differs by both (Wang et al., ATC '25).
  RequestType origin_type = RequestType::kUnknown;
  uint16_t origin_turn = 0;
  uint64_t bytes = 0;  // KV bytes of its tokens
  // What recomputing this block given its prefix costs, in cost_seconds' units:
  // marginal prefill time x the instance's GPUs (CostModel::RecomputeGpuMs).
  double recompute_gpu_ms = 0;
};

class BlockCatalog {
 public:
  size_t size() const { return blocks_.size(); }
  const BlockMeta& operator[](BlockIndex b) const { return blocks_[b]; }

  // Index of `hash_id`, or kNoBlock if it was never added.
  BlockIndex Find(uint64_t hash_id) const { return index_.Find(hash_id, IdOf{this}); }

  // out[i] = Find(ids[i]) for every i. Many lookups between network calls
  // (a RankEviction's candidates) find the index and the catalog cache-cold;
  // fetching every bucket, then every likely entry, before confirming any
  // overlaps those misses instead of taking two in turn per id.
  void FindAll(std::span<const uint64_t> ids, std::span<BlockIndex> out) const {
    KVLEARN_DCHECK(out.size() == ids.size());
    for (const uint64_t id : ids) index_.Prefetch(id);
    for (const uint64_t id : ids) {
      if (const BlockIndex b = index_.Guess(id); b != kNoBlock) __builtin_prefetch(&blocks_[b]);
    }
    for (size_t i = 0; i < ids.size(); ++i) out[i] = Find(ids[i]);
  }

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
  void Resize(BlockIndex b, uint32_t tokens, uint64_t bytes, double recompute_gpu_ms) {
    blocks_[b].tokens = tokens;
    blocks_[b].bytes = bytes;
    blocks_[b].recompute_gpu_ms = recompute_gpu_ms;
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

// The size a per-block array must reach to index block `needed - 1`, now
// `current` long: the catalog's size at once (a replay's catalog is whole
// before the first request, and growing block by block would zero and copy
// twice the memory), otherwise doubling, so growth stays amortised O(1).
inline size_t GrownPerBlockSize(size_t needed, size_t current, const BlockCatalog& catalog) {
  return std::max({needed, 2 * current, catalog.size()});
}

}  // namespace kvlearn
