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
// seen so far (the pools rebuilt at start-up included). Events of a KV cache
// group other than 0 (hybrid models) are skipped and counted: kvlearn models
// one cache per tier.
//
// Engine events say what is stored and removed, not what is hit: for a policy
// to see reuse the engine (or its router) still reports request arrivals and
// hits over gRPC.
//
// Pipeline: OnBatch only queues the batch; an apply thread takes every batch
// queued so far, maps and applies their events in order, and writes the
// accepted ones to the event log as one RocksDB write (one WAL record) per
// group: the batches taken together, cut at max_group_events. The subscriber
// thread meanwhile decodes the next messages. OnBatch waits while max_queued_batches
// are queued (ZMQ then buffers, up to the subscriber's receive high-water
// mark). Durability (docs/guarantees.md): an engine event is durable once its
// group's write has returned; a crash loses the queued batches and the group
// being applied, which the sidecar has no way to ask the engine for again
// beyond its replay buffer. Engine events carry no acknowledgement.
//
// Resume: each group's write also records, per engine, the sequence of its
// last batch in the group (EventLog::AppendFramed, the same RocksDB write),
// and `kvlearn serve` starts each engine's stream after it
// (EngineEndpoint::start_sequence), so a restart logs no batch twice. A group
// whose every event was refused or skipped writes nothing, its sequences
// included: after a restart those batches come again, and refused again they
// still log nothing.
//
// Thread-safety: OnBatch from one thread at a time (the subscriber's);
// Flush, Stop, Render and the counters from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// Fills one `new_event()` per kvlearn event of `batch` from `node`, in order;
// returns how many engine events it skipped (other KV cache groups).
// `tiers_seen` is where AllBlocksCleared and a restart clear; tiers stored to
// are added. `new_event` returns a cleared event to fill.
uint32_t ToKvlearnEvents(const std::string& node, const EngineEventBatch& batch,
                         const EngineMapping& mapping, absl::flat_hash_set<int>& tiers_seen,
                         const std::function<v1::Event*()>& new_event);

// The same, appended to `out`.
uint32_t ToKvlearnEvents(const std::string& node, const EngineEventBatch& batch,
                         const EngineMapping& mapping, absl::flat_hash_set<int>& tiers_seen,
                         std::vector<v1::Event>& out);

struct EngineIngestOptions {
  // false: OnBatch applies and logs on the caller's thread, one log write
  // per batch (the path before the pipeline; kept for comparison).
  bool apply_thread = true;
  size_t max_queued_batches = 4096;  // OnBatch waits beyond this
  // A group is written once it holds this many accepted kvlearn events (or
  // the queue is empty): bounds one RocksDB write to a few MB.
  uint64_t max_group_events = 65536;
};

class EngineIngest {
 public:
  // REQUIRES: every pointer outlives this object.
  EngineIngest(NodePools* pools, EventLog* log, SidecarMetrics* metrics, EngineMapping mapping,
               EngineIngestOptions options = {});
  ~EngineIngest();  // Stop()
  EngineIngest(const EngineIngest&) = delete;
  EngineIngest& operator=(const EngineIngest&) = delete;

  // The subscriber's callback: queues the batch (takes it) to be mapped,
  // applied and logged. After Stop, applies it on the caller's thread.
  void OnBatch(const std::string& node, uint64_t sequence, EngineEventBatch&& batch);
  void OnBatch(const std::string& node, uint64_t sequence, const EngineEventBatch& batch) {
    OnBatch(node, sequence, EngineEventBatch(batch));
  }
  // The same, and leaves in `*batch` a batch already applied, whose storage
  // the caller decodes its next payload into (DecodeKvEventBatch's reusing
  // form): the subscriber's callback, so that a steady stream allocates
  // nothing per event.
  void OnBatch(const std::string& node, uint64_t sequence, EngineEventBatch* batch);

  // Returns once every batch queued before the call is applied and logged.
  void Flush();
  // Flush, then ends the apply thread. Idempotent. Call it before the pools
  // or the log go.
  void Stop();

  // Prometheus text: what was applied and refused per engine, plus the
  // subscriber's own counters (`stats`).
  std::string Render(const std::vector<EngineEndpointStats>& stats) const;

  uint64_t applied() const { return applied_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  uint64_t log_writes() const { return log_writes_.load(std::memory_order_relaxed); }
  // The last refusal's message, for logs and tests.
  std::string last_rejection() const;

 private:
  struct Queued {
    std::string node;
    uint64_t sequence = 0;
    EngineEventBatch batch;
  };
  class Group;  // one log write's worth of work, in engine_ingest.cc

  void Run();
  // Maps and applies `q` into `group`. Apply thread (or caller after Stop).
  void Apply(const Queued& q, Group& group);
  void Write(Group& group);

  NodePools* pools_;
  EventLog* log_;
  SidecarMetrics* metrics_;
  EngineMapping mapping_;
  EngineIngestOptions options_;
  // Apply thread only (or the caller when there is none).
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> tiers_seen_;
  std::unique_ptr<Group> group_;
  std::vector<const v1::Event*> made_;  // the events of the batch being applied

  // A std::mutex and condition variables, not absl::Mutex::Await: Debian's
  // Abseil is not built with ThreadSanitizer, which then cannot see Await
  // release and retake the mutex (the CI tsan stage); these it intercepts.
  // Every member below up to thread_ is guarded by queue_mu_.
  std::mutex queue_mu_;
  std::condition_variable work_cv_;      // apply thread: queue_ non-empty or stopping_
  std::condition_variable progress_cv_;  // OnBatch, Flush: room, done_total_, worker_done_
  std::deque<Queued> queue_;
  std::vector<EngineEventBatch> spare_;  // applied, for reuse
  uint64_t queued_total_ = 0;            // batches ever queued
  uint64_t done_total_ = 0;              // ... applied and logged
  bool stopping_ = false;
  bool worker_done_ = false;  // no apply thread (any more)
  std::thread thread_;

  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> log_failures_{0};
  std::atomic<uint64_t> log_writes_{0};
  mutable absl::Mutex mu_;
  std::string last_rejection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
