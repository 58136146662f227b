// RoutedPrefixes: what sgl-router's default cache-aware policy knows about a
// worker's cache. It never asks the worker; it remembers the prompts it sent
// there (its "approximate tree", kept as text) and, every eviction interval,
// trims each worker's memory to max_tree_size characters, least recently
// routed first (sgl-router src/main.rs: --eviction-interval 120 s,
// --max-tree-size 2^26 characters). Here the memory is kept in blocks and
// counted in tokens.
//
// A block is remembered from the moment a request naming it is routed to the
// node, whatever the node's HBM later keeps: a prefix long evicted there still
// draws its requests, and the retention policy does not steer the router.
//
// Prefix-closed: routing a chain refreshes every block of it, deepest first,
// so a block is always trimmed before its parent.
#pragma once

#include <cstdint>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"

namespace kvlearn {

class RoutedPrefixes {
 public:
  explicit RoutedPrefixes(const BlockCatalog* catalog) : catalog_(catalog) {}

  // Leading blocks of `chain` routed here and not trimmed since.
  uint32_t Match(std::span<const BlockIndex> chain) const;
  // Remembers `chain` as the most recently routed prompt.
  void Route(std::span<const BlockIndex> chain);
  // Forgets the least recently routed blocks until at most `max_tokens`
  // remain. Costs what it forgets, not what it keeps.
  void Trim(uint64_t max_tokens);
  uint64_t tokens() const { return tokens_; }
  size_t blocks() const { return links_.size(); }

 private:
  // A list from least to most recently routed, linked through the map by
  // block (the map may move its values, never its keys).
  struct Links {
    BlockIndex older = kNoBlock;
    BlockIndex newer = kNoBlock;
  };
  void Unlink(const Links& l);
  void Append(BlockIndex b);

  const BlockCatalog* catalog_;
  absl::flat_hash_map<BlockIndex, Links> links_;
  BlockIndex oldest_ = kNoBlock;
  BlockIndex newest_ = kNoBlock;
  uint64_t tokens_ = 0;
};

}  // namespace kvlearn
