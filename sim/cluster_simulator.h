// Replays a trace through a disaggregated prefill cluster (docs/design.md, "The
// world it models"), event by event:
//
//   arrival --router--> prefill node FIFO queue --start--> loads --> prefill --> done
//
// - Prefill nodes: each has an HBM prefix cache and a host-DRAM tier, each a
//   TierCache run by its own instance of the retention policy (CreatePolicy),
//   and serves one request at a time from a FIFO queue (batch size 1: for the
//   long prompts simulated here prefill is compute-bound, so batching would
//   not raise throughput; admission is unbounded). Decode nodes are counted
//   only: the P->D transfer streams during prefill and is left out of TTFT.
// - The global pool (as in ReplayPool) is shared by all nodes.
// - Links, each shared by its concurrent transfers (Link, processor sharing):
//   per node one RDMA NIC (pool -> node loads, node -> pool admissions, and
//   replication copies sent from this node) and one PCIe link (host DRAM <->
//   HBM). A copy occupies the sender's NIC only.
// - When a request starts it looks its prompt up in HBM, then DRAM (the
//   blocks after the HBM prefix), then the pool; of the loadable prefix it
//   loads the part that is cheaper to load than to recompute (nominal link
//   bandwidth against marginal prefill time) and recomputes the rest.
//   Prefill time is CostModel::RecomputeMs (marginal: the missed tokens
//   attend to the loaded prefix). When the prefill ends the
//   prompt's blocks enter HBM (retention policy decides), are written through
//   to DRAM, and new blocks are offered to the pool; the DRAM and pool writes
//   are background transfers on the node's links.
// - TTFT = queue wait + tier loads (including waiting for a replication copy
//   the request was routed for) + prefill of the missed tokens. Links carry
//   bytes at their bandwidth; the cost model's per-transfer latency is
//   counted in transfer_seconds but not in link timing.
// - Busy time of a request (utilization): from when its node began its loads
//   to the end of its prefill.
// - Replication (ReplicationPolicy): a copy goes from a node holding the
//   prefix in HBM (or, if it is still being computed, from the node computing
//   it, once that prefill ends) to each target's HBM over the sender's NIC.
//   A request that reaches the head of its queue while a copy of its prefix
//   is on its way (or about to be: WorthWaiting) steps aside until the copy
//   lands, and the node serves the requests behind it meanwhile, as a
//   serving scheduler leaves a request whose prefix is still being fetched
//   out of the batch; it then goes back to the head of the queue.
//
// Counters cover requests from `eval_from` on. Not thread-safe; run one
// replay per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/link.h"
#include "sim/replay_result.h"
#include "sim/replay_trace.h"
#include "sim/replication_policy.h"
#include "sim/router.h"

namespace kvlearn {

struct ClusterOptions {
  uint32_t prefill_nodes = 4;
  uint32_t decode_nodes = 1;
  uint64_t hbm_bytes_per_node = 0;       // HBM prefix cache per prefill node
  uint64_t dram_bytes_per_node = 0;      // host-DRAM tier per node; 0 = none
  uint64_t pool_bytes = 0;               // global pool; 0 = none
  std::string retention_policy = "lru";  // in every tier
  std::string router = "cache-aware";    // see RouterNames()
  CacheAwareOptions cache_aware;
  ReplicationOptions replication;
  double eval_from = 0;
  std::shared_ptr<const LearnedModel> model;
  bool keep_ttft_samples = false;  // fill ClusterResult::ttft_samples_ms
  // Tests: called after every event with the simulator's state.
  std::function<void(const class ClusterState&)> after_event;
  // Tests: builds every tier's policy instead of retention_policy (which
  // still names it in the result), to watch what the simulator tells it.
  PolicyMaker make_policy;
};

struct ClusterResult {
  ReplayResult replay;  // the pool-replay metrics; hits = blocks not recomputed
  std::string router;
  LatencySummary queue_ms;    // arrival -> start on the node
  LatencySummary load_ms;     // start -> loads done (tier loads, replication waits)
  LatencySummary prefill_ms;  // prefill of the missed tokens
  uint64_t hbm_hit_blocks = 0;
  uint64_t dram_hit_blocks = 0;
  uint64_t pool_hit_blocks = 0;
  uint64_t replication_bytes = 0;  // bytes copied node -> node for replication
  uint64_t replications = 0;       // copies started (one per target)
  uint64_t burst_triggers = 0;
  // Evaluated requests the router sent to a node with more outstanding
  // requests than the least loaded node had at that moment, and the sum over
  // them of the difference: how much the router herds onto held prefixes.
  uint64_t routed_to_busier = 0;
  uint64_t routed_excess_requests = 0;
  // What the warm-up leaves for the evaluated requests to queue behind: the
  // requests outstanding (queued or running) on all nodes when the first
  // evaluated one arrives, and their estimated remaining work per node (ms,
  // mean over the nodes). 0 when every request is evaluated.
  uint32_t backlog_at_eval_requests = 0;
  double backlog_at_eval_ms = 0;
  uint64_t dram_write_bytes = 0;  // HBM -> host DRAM write-through (background)
  // Bytes over all links: loaded + admitted + replication + DRAM writes
  // (warm-up requests included).
  uint64_t link_bytes = 0;
  std::vector<double> ttft_samples_ms;  // per evaluated request, in trace order
  double hbm_hit_ratio() const {
    return replay.block_accesses ? static_cast<double>(hbm_hit_blocks) / replay.block_accesses : 0;
  }
};

// Read-only state handed to ClusterOptions::after_event.
class ClusterState {
 public:
  virtual ~ClusterState() = default;
  virtual uint32_t nodes() const = 0;
  virtual const PoolState& Hbm(uint32_t node) const = 0;
  virtual const PoolState* Dram(uint32_t node) const = 0;  // nullptr: no DRAM tier
  virtual const std::vector<Link>& Links() const = 0;
  virtual double now_ms() const = 0;
};

// REQUIRES: options.hbm_bytes_per_node etc. set (see ClusterOptionsFromCost).
absl::StatusOr<ClusterResult> ReplayCluster(const ReplayTrace& replay, const CostModel& cost,
                                            const ClusterOptions& options);

// --prefill-nodes auto for the cluster: the fewest prefill instances at
// which LRU in every tier under the round-robin router keeps them busy at
// most `target` of the evaluated window. Busy time depends on the count (each
// node has its own HBM and DRAM caches), so it searches: it starts from the
// count the pool replay's LRU asks for (SizePoolReplay), moves to the count
// the measured busy time asks for until that settles (at most 8 moves), then
// steps to the smallest count that meets the target. `base` gives everything
// but the count, router and policy.
struct ClusterSizing {
  double utilization = 0;  // LRU's at the chosen count
  uint32_t replays = 0;    // cluster replays the search ran
};
absl::StatusOr<uint32_t> SizeCluster(const ReplayTrace& replay, const CostModel& cost,
                                     const ClusterOptions& base, double target,
                                     ClusterSizing* sizing = nullptr);

// Capacities from the cost model: HBM for KV per prefill instance
// (CostModel::KvHbmBytesPerInstance) and the profile's host DRAM per node.
void FillClusterCapacities(const CostModel& cost, ClusterOptions& options);

}  // namespace kvlearn
