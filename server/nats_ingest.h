// Consumes block events from a NATS JetStream stream into the sidecar
// (`kvlearn serve --nats`), beside the gRPC ReportEvents stream.
//
// Each message of subject `<subject_prefix>.<node>` is one kvlearn.v1.EventBatch
// (the ReportEvents batch, same limits and batch_id), every event of it for
// that node: a message whose events name another node, that does not parse,
// or that holds more than max_events_per_batch events is refused whole
// (counted, acknowledged, never retried). Its events are applied to the pools
// and logged exactly as a ReportEvents batch's, so a restart replays them and
// export-log sees them.
//
// Pipeline (as server/engine_ingest.h): a fetch thread pulls messages from a
// durable pull consumer (`durable`, AckAll, at most max_ack_pending delivered
// and not acknowledged) into a bounded queue (max_queued_messages; the fetch
// thread waits beyond it); an apply thread takes every message queued so far,
// applies them in order and writes the accepted events as one RocksDB write
// per group, with the stream sequence of the group's last message in the
// same write (EventLog "engine sequences", key kLogKeyPrefix + stream). Only
// then is the group acknowledged to JetStream (one AckAll of its last
// message). So:
//   - an acknowledged message is in the log (or was refused);
//   - a crash before the write loses nothing: JetStream still holds the
//     messages and the restarted sidecar takes them again;
//   - a message whose stream sequence is not above the logged one (a
//     redelivery: its acknowledgement was lost, or the sidecar died between
//     the write and the ack) is acknowledged without being applied again.
// A write the log refuses (a full disk) is retried every 100 ms until it
// succeeds or Stop; nothing of the group is acknowledged meanwhile, and the
// fetch thread stops once the queue is full.
//
// Order: messages are applied in stream order. A message delivered with a
// sequence beyond the next one expected (an earlier one lost in flight on a
// reconnect, or still waiting for redelivery after a crash) first makes the
// fetch thread read the missing ones straight from the stream (a direct get
// by sequence); one the stream no longer holds (its limits removed it) is
// counted missing. At start a consumer whose acknowledged floor is beyond the
// log's sequence (the data directory was replaced) is recreated from the
// log's sequence, so the stream's messages after it are consumed again.
//
// In a replica group (ownership set, server/replica_ownership.h) the replica
// has a durable consumer of its own and takes every message, but applies
// only those of the nodes it follows: a message of a node it owns and does
// not follow yet first makes the apply thread rebuild that node from the
// stream (every earlier message of its subject, read through a short-lived
// consumer, applied and logged before the message), and the node is
// followed from then on; a message of another replica's node is
// acknowledged and skipped. When the group's view changes (a member joined,
// left or expired), the known nodes it gives to this replica are rebuilt the
// same way at once, so they serve without waiting for their next message.
// Either way a node's pool gets its subject's messages exactly once, in
// stream order, as a lone sidecar's would.
//
// Snapshots in JetStream (server/node_snapshot_store.h): the apply thread
// of a replica captures each node it owns every snapshot_every_events of
// its events or snapshot_every_seconds, between two messages (so the
// capture covers the stream exactly through the last message taken), and
// hands it to a publisher thread (server/node_snapshot_publisher.h). A
// rebuild first restores the node's latest complete snapshot that covers no
// further than the rebuild reaches, and reads only the subject's messages
// after it; a torn or damaged snapshot is skipped (counted, its reason on
// stderr) for the one before it, and without any the whole subject is read.
// A restored node enters the local log through a snapshot of every pool
// (snapshot_local) written before its later events are: a marker in the
// log's engine sequences (kTailKeyPrefix + stream + " " + node = the
// snapshot's sequence) says its messages from there up to the logged
// sequence are still to apply, until the write that logs them clears it; a
// restart that finds the marker set applies them before anything else, the
// node answering UNAVAILABLE (rebuilding) meanwhile.
//
// Thread-safety: Stop, Render and the accessors from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/jetstream_connection.h"

typedef struct __natsSubscription natsSubscription;
typedef struct __natsMsg natsMsg;

namespace kvlearn {

class EventLog;
class NodePools;
class NodeSnapshotPublisher;
class NodeSnapshotStore;
class ReplicaOwnership;
class SidecarMetrics;

struct NatsIngestOptions {
  JetStreamOptions connection;  // url required
  std::string stream = "KVLEARN_EVENTS";
  std::string subject_prefix = "kvlearn.events";
  std::string durable = "kvlearn-serve";
  int fetch_batch = 256;           // messages asked for per pull request
  int64_t max_ack_pending = 8192;  // the consumer's bound; >= fetch_batch + max_queued_messages
  double ack_wait_seconds = 30;    // JetStream redelivers what is not acknowledged by then
  size_t max_queued_messages = 4096;
  uint64_t max_group_events = 65536;  // bounds one RocksDB write
  uint32_t max_events_per_batch = 4096;
  // A replica's share of the nodes (see above); nullptr: every node.
  // REQUIRES: outlives the ingest.
  ReplicaOwnership* ownership = nullptr;
  // Replica group: an owned node's pools are published to the snapshot
  // store once this many of its events were applied since its last
  // snapshot, or this many seconds after it when at least one was; 0 turns
  // that trigger off (both 0: this replica publishes none, and still reads
  // those of others when it takes a node over).
  uint64_t snapshot_every_events = 500'000;
  double snapshot_every_seconds = 300;
  // Writes a snapshot of every pool to the local log (SidecarServer::
  // SnapshotNow). Without it, a takeover reads the node's whole subject.
  std::function<absl::Status()> snapshot_local;
};

class NatsIngest {
 public:
  // The key of the stream's last consumed sequence among the log's engine
  // sequences: a space, which no node id has.
  static constexpr char kLogKeyPrefix[] = "jetstream ";
  // A restored node's marker among them (see above).
  static constexpr char kTailKeyPrefix[] = "jetstream-tail ";

  // Connects, creates the stream if it is missing, binds (or creates) the
  // durable consumer and starts the threads. `notes` gets lines an operator
  // should read. REQUIRES: every pointer outlives this object.
  static absl::StatusOr<std::unique_ptr<NatsIngest>> Start(NatsIngestOptions options,
                                                           NodePools* pools, EventLog* log,
                                                           SidecarMetrics* metrics,
                                                           std::string* notes);
  ~NatsIngest();  // Stop()
  NatsIngest(const NatsIngest&) = delete;
  NatsIngest& operator=(const NatsIngest&) = delete;

  // Ends the fetch thread, applies and logs what was queued (acknowledging
  // it), ends the apply thread. Idempotent. Call it before the pools or the
  // log go.
  void Stop();

  // Prometheus text (docs/scale_out.md lists the series).
  std::string Render() const;

  // The stream sequence of the last message logged (or refused) and
  // acknowledged; 0 before any.
  uint64_t logged_sequence() const { return logged_sequence_.load(std::memory_order_acquire); }
  uint64_t events_applied() const { return events_applied_.load(std::memory_order_relaxed); }
  uint64_t events_rejected() const { return events_rejected_.load(std::memory_order_relaxed); }
  uint64_t messages_consumed() const { return consumed_.load(std::memory_order_relaxed); }
  uint64_t messages_redelivered() const { return redelivered_.load(std::memory_order_relaxed); }
  uint64_t messages_refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t messages_fetched_directly() const { return direct_.load(std::memory_order_relaxed); }
  uint64_t messages_missing() const { return missing_.load(std::memory_order_relaxed); }
  // In a replica group: messages of nodes this replica does not follow, and
  // messages read again to rebuild nodes it took over.
  uint64_t messages_not_followed() const { return not_followed_.load(std::memory_order_relaxed); }
  uint64_t messages_replayed() const { return replayed_.load(std::memory_order_relaxed); }
  uint64_t nodes_rebuilt() const { return nodes_rebuilt_.load(std::memory_order_relaxed); }
  // Snapshots in JetStream: rebuilds that started from one, snapshots left
  // out as torn or damaged, and this replica's published ones (0 without a
  // group).
  uint64_t snapshots_restored() const { return restored_.load(std::memory_order_relaxed); }
  uint64_t snapshots_skipped() const { return skipped_.load(std::memory_order_relaxed); }
  uint64_t snapshots_published() const;
  uint64_t snapshot_bytes_published() const;
  // The events stream sequence this replica's last published snapshot of
  // `node` covers through; 0 if none.
  uint64_t snapshot_published_through(const std::string& node) const;
  // The last refusal's reason, for logs and tests.
  std::string last_refusal() const;

 private:
  struct Queued {
    natsMsg* msg = nullptr;     // owned
    uint64_t sequence = 0;      // in the stream
    bool duplicate = false;     // at or below what was queued before: ack only
    bool from_consumer = true;  // false: a direct get, which has nothing to ack
    bool rebuilding = false;    // read again to rebuild its node: never held or acked
  };
  class Group;  // one log write's worth, in nats_ingest.cc

  NatsIngest(NatsIngestOptions options, NodePools* pools, EventLog* log, SidecarMetrics* metrics);
  absl::Status Bind(uint64_t logged, std::string* notes);
  void FetchLoop();
  // Queues `q`, waiting for room; false when stopping (then `q.msg` is freed).
  bool Enqueue(Queued q);
  // Reads stream sequences [from, to) straight from the stream and queues
  // them; false when stopping.
  bool FillGap(uint64_t from, uint64_t to);
  void ApplyLoop();
  // Applies `q` to the pools and `group`; false when stopping interrupted
  // the rebuild it needed (then `group` is dropped, nothing acknowledged).
  bool Apply(const Queued& q, Group& group);
  // Writes the group (retrying), then acknowledges it. False when stopping
  // interrupted a failing write (nothing acknowledged).
  bool Write(Group& group);
  void Refuse(uint64_t sequence, const std::string& why);
  // Replica group: lists the stream's node subjects as known nodes, and the
  // nodes the log restored as followed.
  absl::Status LearnNodes();
  // Rebuilds `node` up to stream sequence `through` into `group`, from its
  // latest usable snapshot and the subject's messages after it, then
  // follows it. False when stopping.
  bool Rebuild(const std::string& node, uint64_t through, Group& group);
  // Rebuilds the known nodes the group's view newly gives to this replica;
  // false as Apply.
  bool RebuildGainedNodes(Group& group);
  // Restores `node`'s pools from its latest usable snapshot covering no
  // further than `through`; `*from` gets the first stream sequence still to
  // apply (1 when none was restored). False when stopping.
  bool RestoreFromSnapshot(const std::string& node, uint64_t through, uint64_t* from);
  // Logs `group`, marks each restored node's tail (node, from) and writes a
  // local snapshot, retrying until it succeeds; false when stopping.
  bool SaveRestored(const std::vector<std::pair<std::string, uint64_t>>& restored, Group& group);
  // Applies `node`'s messages [from, through] into `group` (clearing its
  // tail marker) and follows it; false when stopping.
  bool ReplayTail(const std::string& node, uint64_t from, uint64_t through, Group& group);
  // Captures the owned nodes whose snapshot is due (`node` only, or every
  // one on the clock) and hands them to the publisher.
  void MaybeSnapshot(const std::string* node);
  std::string TailKey(const std::string& node) const;
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  NatsIngestOptions options_;
  NodePools* pools_;
  EventLog* log_;
  SidecarMetrics* metrics_;
  std::string log_key_;
  std::string subject_start_;  // subject_prefix + "."
  std::unique_ptr<JetStreamConnection> connection_;
  natsSubscription* subscription_ = nullptr;
  std::unique_ptr<Group> group_;
  std::unique_ptr<NodeSnapshotStore> snapshot_store_;          // replica group only
  std::unique_ptr<NodeSnapshotPublisher> snapshot_publisher_;  // when it publishes
  // Apply thread: per owned node, events applied since its last capture and
  // when that was.
  struct SnapshotDue {
    uint64_t events = 0;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  };
  absl::flat_hash_map<std::string, SnapshotDue> snapshot_due_;
  // Apply thread: restored nodes whose tail a restart must apply first
  // (node, first stream sequence), found by Start.
  std::vector<std::pair<std::string, uint64_t>> tails_at_start_;

  uint64_t next_sequence_ = 1;  // fetch thread: the next stream sequence expected
  // Apply thread: the highest stream sequence taken (applied, refused or
  // skipped), and the group view last rebuilt for.
  uint64_t taken_through_ = 0;
  uint64_t view_generation_ = 0;

  // A std::mutex and condition variables, as in EngineIngest (ThreadSanitizer
  // sees through them). Guarded by queue_mu_: queue_, apply_done_.
  std::mutex queue_mu_;
  std::condition_variable work_cv_;  // apply thread: queue_ non-empty or fetch ended
  std::condition_variable room_cv_;  // fetch thread: room in queue_, or stopping
  std::deque<Queued> queue_;
  bool fetch_done_ = false;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::thread fetch_thread_;
  std::thread apply_thread_;

  std::atomic<uint64_t> logged_sequence_{0};
  std::atomic<uint64_t> consumed_{0};
  std::atomic<uint64_t> redelivered_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> direct_{0};
  std::atomic<uint64_t> missing_{0};
  std::atomic<uint64_t> foreign_{0};
  std::atomic<uint64_t> events_applied_{0};
  std::atomic<uint64_t> events_rejected_{0};
  std::atomic<uint64_t> fetch_errors_{0};
  std::atomic<uint64_t> log_retries_{0};
  std::atomic<uint64_t> ack_failures_{0};
  std::atomic<uint64_t> log_writes_{0};
  std::atomic<uint64_t> not_followed_{0};
  std::atomic<uint64_t> replayed_{0};
  std::atomic<uint64_t> nodes_rebuilt_{0};
  std::atomic<uint64_t> restored_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> chunks_read_{0};
  std::atomic<uint64_t> local_snapshot_retries_{0};
  mutable absl::Mutex mu_;
  std::string last_refusal_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
