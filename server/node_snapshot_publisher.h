// Publishes the node snapshots a replica's ingest captures
// (server/nats_ingest.h) to the JetStream snapshot store
// (server/node_snapshot_store.h) on a thread of its own: the apply thread
// only copies a node's pools (under each pool's lock, as the local log's
// snapshot does) and hands the copy over; encoding and publishing happen
// here. At most kMaxPending captures wait at once, so memory is bounded: the
// apply thread asks HasRoom() before it copies and tries again later when
// there is none.
//
// Thread-safety: every method from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "server/node_snapshot_store.h"
#include "server/pools_snapshot.h"

namespace kvlearn {

class NodeSnapshotPublisher {
 public:
  static constexpr size_t kMaxPending = 2;

  // `id_prefix` starts every snapshot id (the replica's name).
  // REQUIRES: `store` outlives this object.
  NodeSnapshotPublisher(NodeSnapshotStore* store, std::string id_prefix);
  ~NodeSnapshotPublisher();  // Stop()
  // Ends the thread; captures not yet published are dropped (the next owner
  // uses an older snapshot, or the whole subject). Idempotent.
  void Stop();

  bool HasRoom() const;
  // Queues node's pools covering the events stream through `through`.
  void Submit(std::string node, uint64_t through, PoolsSnapshot pools);

  uint64_t published() const { return published_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // The events stream sequence the last published snapshot of `node` covers
  // through; 0 when none was.
  uint64_t published_through(const std::string& node) const;

 private:
  struct Pending {
    std::string node;
    uint64_t through = 0;
    PoolsSnapshot pools;
  };
  void Run();

  NodeSnapshotStore* store_;
  std::string id_prefix_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;                         // guarded by mu_
  absl::flat_hash_map<std::string, uint64_t> through_;  // guarded by mu_
  bool stop_ = false;                                   // guarded by mu_
  std::atomic<bool> cancel_{false};
  uint64_t counter_ = 0;  // publisher thread only
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> bytes_{0};
  std::thread thread_;
};

}  // namespace kvlearn
