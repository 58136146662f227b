// The sidecar's durable event log: every accepted event, in arrival order,
// in a RocksDB database under --data-dir. Every event has a sequence number;
// each Append (one EventBatch's accepted events) is one RocksDB entry whose
// key is the 8-byte big-endian sequence number of its first event (so
// RocksDB's byte order is arrival order) and whose value is the events framed
// as protobuf field 1 records (tag 0x0a, varint length, bytes): the wire form
// of a kvlearn.v1.EventBatch. One entry per batch instead of per event keeps
// the memtable and its flushes cheap; ForEach still yields single events.
//
// Decisions: the Admit and RankEviction calls that changed a pool are
// journaled too (AppendDecision), so that a restart can redo them in place
// (server/log_replay.h). They live in a second column family, "decisions",
// which ForEach and the readers of the trace (export-log) never see: key =
// 8-byte big-endian decision number, value = varint of the event sequence
// number current when it was journaled, then the record (opaque here; built
// by NodePools).
//
// Snapshots: a third column family, "snapshots", holds pool snapshots
// (server/pools_snapshot.h): key = 8-byte big-endian event sequence number the
// snapshot was taken at (every event below it is in the snapshot, none at or
// above), value = varint of the first decision number not in it, then the
// snapshot bytes (opaque here). Writing one deletes the older ones.
//
// Engine sequences: a fourth column family, "engine_sequences", holds per
// engine node (key = its node id) the last engine sequence number whose
// events are in the log (value = 8 bytes big-endian). AppendFramed writes
// them in the same RocksDB write (one WAL record) as those events, so after a
// restart each engine's stream resumes right after what was logged
// (server/engine_ingest.h). `serve --nats` keeps its stream's last consumed
// sequence there too, under a key with a space, which no node id has
// (server/nats_ingest.h). Readers of events, decisions and snapshots never
// iterate it, and trimming leaves it alone.
//
// Durability: Append writes its entry through RocksDB's write-ahead log before
// it returns, so an appended event survives the process being killed
// (kill -9) once Append has returned. With `sync = true` the WAL is also
// fsynced, which extends that to power loss. AppendDecision, without `sync`,
// stores the decision in a memory-mapped staging file beside RocksDB's
// (server/decision_staging.h), which survives kill -9 as the unsynced WAL
// does at the price of a memcpy; the next Append carries the staged decisions
// into RocksDB in its own write, and so does any reader of decisions, a trim,
// closing the log, and opening it again after a crash (before anything reads
// them). There are two staging files: when the one taking decisions is full
// (a node that sends no events), the log's drain thread writes it into
// RocksDB while the other takes the calls, so no call waits for RocksDB
// unless decisions outrun it; an event append that comes while it writes
// waits for it, so RocksDB never holds a decision without every earlier one.
// A read-only open sees the decisions in RocksDB: every one journaled
// before the writer's latest event append.
//
// Retention: when the retained entries exceed `max_bytes`, the oldest
// entries are deleted (DeleteRange) down to 90% of the bound, with the
// decisions journaled before the first event kept, except the latest model
// swap among them (a record starting with 'M'), which stays so a restart
// serves the model the trimmed history ended with; disk space comes back as
// RocksDB compacts. retained_bytes counts events and decisions.
//
// Memory: fixed whatever the traffic: a 16 MiB memtable per appended family
// (two while one flushes; 1 MiB for engine sequences), snapshots flushed out
// of theirs as written, one 8 MiB block cache that scans of old entries do not fill
// (docs/performance.md, "Memory"); the two decision staging files' 64 KiB
// mappings. Threads: one, the drain thread, in a writable log without `sync`.
//
// Thread-safety: Append and the accessors may be called concurrently;
// appends are serialized so sequence numbers are written in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Status;
class WriteBatch;
struct WriteOptions;
}  // namespace rocksdb

namespace kvlearn {

class DecisionStaging;

struct EventLogOptions {
  uint64_t max_bytes = 0;  // 0 = keep everything
  bool sync = false;       // fsync the WAL on every append
  // Tests only: the drain thread calls it before writing a full staging file
  // (outside the log's lock), so a test can hold it there.
  std::function<void()> before_drain_write;
};

class EventLog {
 public:
  // Opens (creating if needed) the log in `dir` for appending. `dir` and any
  // parent it creates are 0700, and the process umask is tightened to 077 so
  // RocksDB's files are 0600 (it has no option for their mode).
  static absl::StatusOr<std::unique_ptr<EventLog>> Open(const std::string& dir,
                                                        const EventLogOptions& options);
  // Opens an existing log read-only (works while a server has it open).
  static absl::StatusOr<std::unique_ptr<EventLog>> OpenReadOnly(const std::string& dir);
  ~EventLog();

  // Appends `values` (serialized events) atomically; returns the sequence
  // number of the first one. Durable when it returns OK (see above).
  absl::StatusOr<uint64_t> Append(std::span<const std::string> values);
  // The same for `count` events already framed as an entry's value (records
  // of tag 0x0a, varint length, serialized event), so a caller that
  // serializes into one buffer writes it without a copy per event.
  // INVALID_ARGUMENT when `records` is not exactly `count` such records.
  // `sequences`, when given, are written in the same RocksDB write (see
  // "Engine sequences" above); nothing at all is written when `count` is 0.
  struct EngineSequence {
    std::string node;
    uint64_t sequence = 0;  // the last of that engine's batches in this write
  };
  absl::StatusOr<uint64_t> AppendFramed(std::string_view records, uint64_t count,
                                        std::span<const EngineSequence> sequences = {});
  // Writes `sequences` alone (no event), durable as Append is: for a source
  // whose latest messages were all refused, so that a restart does not ask
  // for them again.
  absl::Status RecordEngineSequences(std::span<const EngineSequence> sequences);
  // The last engine sequence AppendFramed logged for `node`. NOT_FOUND when
  // there is none, DATA_LOSS when its record is damaged.
  absl::StatusOr<uint64_t> LoggedEngineSequence(std::string_view node) const;

  // Calls `fn` on every retained entry in sequence order; stops at the first
  // error `fn` returns.
  absl::Status ForEach(
      const std::function<absl::Status(uint64_t sequence, std::string_view value)>& fn) const;

  // Journals one decision record, durable as Append is.
  absl::Status AppendDecision(std::string_view record);
  // Calls `fn` on every retained decision in journal order: its number, the
  // event sequence number current when it was journaled (every event below
  // it was logged before the decision), the record.
  absl::Status ForEachDecision(
      const std::function<absl::Status(uint64_t number, uint64_t event_sequence,
                                       std::string_view record)>& fn) const;

  // The same, one at a time, for a reader that interleaves them with
  // ForEach (server/log_replay.cc). Not thread-safe; the log must outlive it.
  class DecisionCursor {
   public:
    virtual ~DecisionCursor() = default;
    // The next decision; false at the end or on an error (see status()).
    virtual bool Next(uint64_t* number, uint64_t* event_sequence, std::string* record) = 0;
    virtual absl::Status status() const = 0;
  };
  std::unique_ptr<DecisionCursor> ReadDecisions() const;

  // Stores a snapshot taken when the log's next sequence number was
  // `sequence` and its next decision number `decision`, and deletes older
  // snapshots. Durable as Append is.
  absl::Status WriteSnapshot(uint64_t sequence, uint64_t decision, std::string_view bytes);
  struct Snapshot {
    uint64_t sequence = 0;
    uint64_t decision = 0;
    std::string bytes;
  };
  // The latest snapshot; NOT_FOUND when there is none.
  absl::StatusOr<Snapshot> LatestSnapshot() const;

  // ForEach from sequence number `from` on (entries start at batch
  // boundaries; a snapshot's sequence is one).
  absl::Status ForEachFrom(
      uint64_t from,
      const std::function<absl::Status(uint64_t sequence, std::string_view value)>& fn) const;
  // ReadDecisions from decision number `from` on.
  std::unique_ptr<DecisionCursor> ReadDecisionsFrom(uint64_t from) const;

  uint64_t next_sequence() const;
  uint64_t first_sequence() const;  // oldest retained
  uint64_t retained_bytes() const;  // keys + values of retained entries
  uint64_t trimmed_bytes() const;   // deleted by the retention bound since open
  uint64_t next_decision() const;   // number of the next journaled decision
  // AppendDecision calls that found both staging files holding decisions
  // not yet in RocksDB and so waited for (or made) a RocksDB write: decisions
  // coming faster than RocksDB takes them, or a failed drain write retried.
  uint64_t decision_waits() const;
  // RocksDB writes that failed (a full disk, an I/O error), the events of
  // the appends among them (refused: not logged, the caller was told), and
  // the first successful writes after a failure. After a failure each write
  // first asks RocksDB to resume, so the log takes writes again by itself
  // once the cause is gone (a full disk: once a memtable, 16 MiB, fits).
  uint64_t failed_writes() const { return failed_writes_.load(std::memory_order_relaxed); }
  uint64_t refused_events() const { return refused_events_.load(std::memory_order_relaxed); }
  uint64_t recoveries() const { return recoveries_.load(std::memory_order_relaxed); }

 private:
  EventLog(std::unique_ptr<rocksdb::DB> db, std::vector<rocksdb::ColumnFamilyHandle*> handles,
           const EventLogOptions& options);
  static absl::StatusOr<std::unique_ptr<EventLog>> OpenImpl(const std::string& dir,
                                                            const EventLogOptions& options,
                                                            bool read_only);
  absl::Status LoadBounds();
  // Opens the two staging files in `dir` and moves what a crashed run left
  // staged in either into RocksDB.
  absl::Status RecoverStaged(const std::string& dir);
  // Writes `staging`'s records into RocksDB (not emptying it). Takes no
  // lock: the drain thread calls it on a file no one else touches meanwhile.
  absl::Status WriteStaged(const DecisionStaging& staging) const;
  // Writes every staged decision into RocksDB and empties the stagings.
  absl::Status FlushStaged() const;
  // The same with mu_ held by `lock`.
  absl::Status FlushStagedLocked(std::unique_lock<std::mutex>& lock) const;
  // Waits for the drain thread's write, then writes draining_ here if it is
  // still set (not started, or the drain thread's write failed).
  absl::Status SettleDrainLocked(std::unique_lock<std::mutex>& lock) const;
  // draining_'s records are in RocksDB: empties it and makes it the spare.
  void RetireDrainedLocked() const;
  void DrainLoop();
  // Adds `staging`'s decisions to `batch`.
  void AddStaged(const DecisionStaging& staging, rocksdb::WriteBatch& batch) const;
  absl::Status TrimLocked(std::unique_lock<std::mutex>& lock);
  // Every RocksDB write of entries goes through here (see failed_writes()).
  rocksdb::Status Write(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch) const;
  absl::StatusOr<uint64_t> PutLocked(std::unique_lock<std::mutex>& lock, std::string_view value,
                                     uint64_t count,
                                     std::span<const EngineSequence> sequences = {});

  std::unique_ptr<rocksdb::DB> db_;
  // [0] default (events), [1] decisions when present (absent in a read-only
  // open of a log written before decisions were journaled), [2] snapshots
  // when present (likewise), [3] engine sequences when present (likewise).
  rocksdb::ColumnFamilyHandle* snapshots() const {
    return handles_.size() > 2 ? handles_[2] : nullptr;
  }
  rocksdb::ColumnFamilyHandle* engine_sequences() const {
    return handles_.size() > 3 ? handles_[3] : nullptr;
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  EventLogOptions options_;

  // A std::mutex and condition variables, not absl::Mutex::Await: Debian's
  // Abseil is not built with ThreadSanitizer, which then cannot see Await
  // release and retake the mutex (the CI tsan stage). Every member below up
  // to drain_thread_ is guarded by mu_.
  mutable std::mutex mu_;
  uint64_t next_sequence_ = 0;
  uint64_t first_sequence_ = 0;
  uint64_t retained_bytes_ = 0;
  uint64_t trimmed_bytes_ = 0;
  uint64_t next_decision_ = 0;
  uint64_t decision_waits_ = 0;
  // The two staging files, null in a read-only open: staging_ takes the
  // decisions; the other is spare_ (empty) or draining_ (full, its records
  // not yet in RocksDB). Emptied by const readers, hence mutable.
  mutable std::unique_ptr<DecisionStaging> staging_;
  mutable std::unique_ptr<DecisionStaging> spare_;
  mutable std::unique_ptr<DecisionStaging> draining_;
  mutable bool drain_writing_ = false;  // the drain thread writes draining_ outside mu_
  mutable bool drain_failed_ = false;   // ... and failed: the next caller that needs it retries
  bool stopping_ = false;
  mutable std::condition_variable drain_work_;  // drain thread: draining_ set, or stopping_
  mutable std::condition_variable drain_done_;  // callers: drain_writing_ cleared
  std::thread drain_thread_;
  mutable std::atomic<bool> write_failed_{false};
  mutable std::atomic<uint64_t> failed_writes_{0};
  std::atomic<uint64_t> refused_events_{0};
  mutable std::atomic<uint64_t> recoveries_{0};
};

// Big-endian key of a sequence number.
std::string EventLogKey(uint64_t sequence);

}  // namespace kvlearn
