// What routers and replication policies may read about the cluster at the
// moment a request arrives: per prefill node its load and which prefix of a
// chain it holds or will hold. Implemented by the cluster simulator; a fake in
// tests. Read-only; valid only during the call it is passed to.
#pragma once

#include <cstdint>
#include <span>

#include "models/block_catalog.h"

namespace kvlearn {

class ClusterView {
 public:
  virtual ~ClusterView() = default;

  virtual uint32_t nodes() const = 0;
  // Requests routed to `node` and not yet prefilled (queued or running).
  virtual uint32_t Load(uint32_t node) const = 0;
  // Leading blocks of `chain` that `node` will have in HBM when a request
  // routed there now runs: resident in its HBM, or being computed or copied
  // there by an earlier request or replication. This mirrors the node's
  // cache exactly, as SGLang's router aims to with its per-worker radix tree.
  virtual uint32_t MatchedBlocks(uint32_t node, std::span<const BlockIndex> chain) const = 0;
  // Bytes of KV cache the node holds in HBM (SGLang's "tree size").
  virtual uint64_t CachedBytes(uint32_t node) const = 0;
  virtual const BlockCatalog& catalog() const = 0;
};

// A request as the router sees it.
struct RouteRequest {
  uint32_t index = 0;  // in the trace
  int64_t time_ms = 0;
  uint32_t input_tokens = 0;
  std::span<const BlockIndex> chain;
};

}  // namespace kvlearn
