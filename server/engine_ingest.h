// Ingests an engine's own KV cache events (vLLM / SGLang, decoded by
// engine/engine_subscriber.h) into the sidecar: each engine batch becomes
// kvlearn events (ToKvlearnEvents), which are applied to the pools, logged and
// counted exactly as a ReportEvents batch would be, so a restart replays them
// and `kvlearn export-log` sees them.
//
// Mapping (docs/engine_events.md): the endpoint's node id; GPU (or no medium)
// -> TIER_HBM, CPU -> TIER_DRAM, disk/storage -> TIER_SSD, other -> TIER_POOL;
// a BlockStored chain becomes one block_stored per hash, root first, its
// parent the previous hash (the first one's, parent_block_hash); tokens are
// the engine's tokens per block (the sidecar's --block-size when it sent 0)
// and bytes come from the cost model; BlockRemoved is one block_removed per
// hash; AllBlocksCleared, or a restarted engine, clears every tier of the node
// seen so far. Events of a KV cache group other than 0 (hybrid models) are
// skipped and counted: kvlearn models one cache per tier.
//
// Engine events say what is stored and removed, not what is hit: for a policy
// to see reuse the engine (or its router) still reports request arrivals and
// hits over gRPC.
//
// Thread-safety: OnBatch is called from the subscriber's one thread; Render
// and counters() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/cost_model.h"
#include "engine/engine_subscriber.h"
#include "engine/kv_event.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

class EventLog;
class NodePools;
class SidecarMetrics;

struct EngineMapping {
  uint32_t block_size = 512;        // tokens of a block whose engine sent none
  const CostModel* cost = nullptr;  // KV bytes per token; REQUIRES: set
};

// The tier an engine's medium maps to.
v1::Tier TierOfMedium(KvMedium medium);

// Appends the kvlearn events of `batch` from `node` to `out`; returns how
// many engine events it skipped (other KV cache groups). `tiers_seen` is
// where AllBlocksCleared and a restart clear; tiers stored to are added.
uint32_t ToKvlearnEvents(const std::string& node, const EngineEventBatch& batch,
                         const EngineMapping& mapping, absl::flat_hash_set<int>& tiers_seen,
                         std::vector<v1::Event>& out);

class EngineIngest {
 public:
  // REQUIRES: every pointer outlives this object.
  EngineIngest(NodePools* pools, EventLog* log, SidecarMetrics* metrics, EngineMapping mapping);

  // The subscriber's callback: maps, applies, logs.
  void OnBatch(const std::string& node, uint64_t sequence, const EngineEventBatch& batch);

  // Prometheus text: what was applied and refused per engine, plus the
  // subscriber's own counters (`stats`).
  std::string Render(const std::vector<EngineEndpointStats>& stats) const;

  uint64_t applied() const { return applied_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  // The last refusal's message, for logs and tests.
  std::string last_rejection() const;

 private:
  NodePools* pools_;
  EventLog* log_;
  SidecarMetrics* metrics_;
  EngineMapping mapping_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> tiers_seen_;  // subscriber thread only
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> log_failures_{0};
  mutable absl::Mutex mu_;
  std::string last_rejection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
