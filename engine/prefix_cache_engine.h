// PrefixCacheEngine: the prefix cache of one serving engine, reduced to what
// its KV events show, so that a trace can be replayed "as an engine would"
// (engine/kv_event_publisher_main.cc, tests/engine/).
//
// It holds up to `capacity_blocks` blocks of a prefix tree keyed by the
// trace's hash ids (block i's id stands for blocks 0..i of its prompt). Serve
// one request: the longest cached prefix of its chain is a hit; every block
// after it is computed and cached, parent = the previous block of the chain;
// room is made by evicting the least recently used leaf that is not part of
// the current request (a block with a cached child is never evicted, so the
// cache stays a tree). If only blocks of the current request are left, the
// rest of the chain is computed but not cached. At the end of the request its
// chain is touched leaf first, so a parent is always more recent than its
// children and the LRU end is a leaf.
//
// Each request's events come back as one batch: a BlockRemoved with the
// evicted hashes in eviction order (leaves first), then a BlockStored with the
// newly cached blocks (its parent_block_hash is the last hit block). Nothing
// changes on a full hit: the batch is then empty.
//
// Thread-safety: none; one engine per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kv_event.h"

namespace kvlearn {

struct PrefixCacheEngineOptions {
  size_t capacity_blocks = 1024;  // REQUIRES: > 0
  uint32_t block_size = 512;      // tokens per full block
  KvMedium medium = KvMedium::kGpu;
};

struct PrefixCacheEngineStats {
  uint64_t requests = 0;
  uint64_t hit_blocks = 0;
  uint64_t stored_blocks = 0;
  uint64_t evicted_blocks = 0;
  uint64_t uncached_blocks = 0;  // computed, but no evictable room was left
  // A chain whose next block is cached under another parent (or repeats an id
  // earlier in the chain): caching stops there. Never happens on a real trace.
  uint64_t conflicts = 0;
};

class PrefixCacheEngine {
 public:
  explicit PrefixCacheEngine(PrefixCacheEngineOptions options);

  // Serves one request whose prompt is `chain` (root first) of `input_length`
  // tokens (0: every block full). `ts` is stamped on the batch.
  EngineEventBatch Serve(std::span<const uint64_t> chain, uint32_t input_length, double ts);

  // Drops everything (an engine's prefix cache reset): one AllBlocksCleared.
  EngineEventBatch Clear(double ts);

  // Cached block ids, ascending.
  std::vector<uint64_t> ResidentBlocks() const;
  size_t resident_blocks() const { return nodes_.size(); }
  const PrefixCacheEngineStats& stats() const { return stats_; }
  const PrefixCacheEngineOptions& options() const { return options_; }

 private:
  struct Node {
    std::optional<uint64_t> parent;
    uint32_t children = 0;
    uint64_t pinned_request = 0;  // == request_ while the current request uses it
    std::list<uint64_t>::iterator lru;
  };

  // Evicts the least recently used unpinned leaf into `removed`; false if none.
  bool EvictOne(std::vector<uint64_t>& removed);

  PrefixCacheEngineOptions options_;
  absl::flat_hash_map<uint64_t, Node> nodes_;
  std::list<uint64_t> lru_;  // front: most recent
  uint64_t request_ = 0;
  PrefixCacheEngineStats stats_;
};

}  // namespace kvlearn
