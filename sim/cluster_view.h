// What routers and replication policies may read about the cluster at the
// moment a request arrives: per prefill node its load (in requests and in
// estimated milliseconds of work), which prefix of a chain it holds or will
// hold and when, and the cost model's service and copy times. Implemented by
// the cluster simulator. Read-only; valid only during the call it is passed
// to.
#pragma once

#include <cstdint>
#include <span>

#include "core/block_catalog.h"
#include "core/pool_state.h"

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
  // cache exactly, as a router fed by the engines' KV cache events can;
  // sgl-router's default remembers what it routed instead (RoutedPrefixes).
  virtual uint32_t MatchedBlocks(uint32_t node, std::span<const BlockIndex> chain) const = 0;
  // Bytes of KV cache the node holds in HBM plus those of the blocks on
  // their way there (the ones MatchedBlocks counts and HBM lacks): the
  // cache-aware fallback's "tree size". sgl-router's tree grows when it
  // routes a prompt, not when the prompt is computed; a size that waited
  // for the prefill would send every new prompt to the same node until its
  // queue drained.
  virtual uint64_t CachedBytes(uint32_t node) const = 0;
  virtual const BlockCatalog& catalog() const = 0;

  // Estimated ms until `node` could start a request routed to it now: the
  // rest of the request it is serving plus the service time (ServiceMs)
  // estimated for each queued request when it was routed. Work in time, not
  // a request count: one cold 30k-token prompt outweighs dozens of warm
  // short ones.
  virtual double BacklogMs(uint32_t node) const = 0;
  // Estimated ms until `node` holds all of `prefix` in HBM: 0 if it does
  // now; the estimated end of the earliest request on the node that
  // computes it; its backlog if a copy brings it; +infinity if nothing will.
  virtual double ReadyMs(uint32_t node, std::span<const BlockIndex> prefix) const = 0;
  // Estimated loads + prefill of a prompt of `input_tokens` tokens served on
  // `node` if its first `hbm_blocks` blocks are in the node's HBM by then:
  // of the blocks after those, what the node's DRAM or the pool holds is
  // loaded where that beats recomputing (nominal bandwidth), as the node
  // will decide when the request starts.
  virtual double ServiceMs(uint32_t node, std::span<const BlockIndex> chain, uint64_t input_tokens,
                           uint32_t hbm_blocks) const = 0;
  // Time to copy `bytes` node to node over an idle RDMA NIC.
  virtual double CopyMs(uint64_t bytes) const = 0;
  // The global pool's state (for pool-dependent features), or nullptr when
  // the replay has no pool.
  virtual const PoolState* GlobalPool() const = 0;
};

// A request as the router sees it.
struct RouteRequest {
  uint32_t index = 0;  // in the trace
  int64_t time_ms = 0;
  uint32_t input_tokens = 0;
  std::span<const BlockIndex> chain;
};

}  // namespace kvlearn
