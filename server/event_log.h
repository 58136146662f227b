// The sidecar's durable event log: every accepted event, in arrival order,
// in a RocksDB database under --data-dir. Every event has a sequence number;
// each Append (one EventBatch's accepted events) is one RocksDB entry whose
// key is the 8-byte big-endian sequence number of its first event (so
// RocksDB's byte order is arrival order) and whose value is the events framed
// as protobuf field 1 records (tag 0x0a, varint length, bytes): the wire form
// of a kvlearn.v1.EventBatch. One entry per batch instead of per event keeps
// the memtable and its flushes cheap; ForEach still yields single events.
//
// Durability: Append writes its entry through RocksDB's write-ahead log before
// it returns, so an appended event survives the process being killed
// (kill -9) once Append has returned. With `sync = true` the WAL is also
// fsynced, which extends that to power loss.
//
// Retention: when the retained entries exceed `max_bytes`, the oldest
// entries are deleted (DeleteRange) down to 90% of the bound; disk space
// comes back as RocksDB compacts.
//
// Thread-safety: Append and the accessors may be called concurrently;
// appends are serialized so sequence numbers are written in order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class DB;
}

namespace kvlearn {

struct EventLogOptions {
  uint64_t max_bytes = 0;  // 0 = keep everything
  bool sync = false;       // fsync the WAL on every append
};

class EventLog {
 public:
  // Opens (creating if needed) the log in `dir` for appending.
  static absl::StatusOr<std::unique_ptr<EventLog>> Open(const std::string& dir,
                                                        const EventLogOptions& options);
  // Opens an existing log read-only (works while a server has it open).
  static absl::StatusOr<std::unique_ptr<EventLog>> OpenReadOnly(const std::string& dir);
  ~EventLog();

  // Appends `values` (serialized events) atomically; returns the sequence
  // number of the first one. Durable when it returns OK (see above).
  absl::StatusOr<uint64_t> Append(std::span<const std::string> values);

  // Calls `fn` on every retained entry in sequence order; stops at the first
  // error `fn` returns.
  absl::Status ForEach(
      const std::function<absl::Status(uint64_t sequence, std::string_view value)>& fn) const;

  uint64_t next_sequence() const;
  uint64_t first_sequence() const;  // oldest retained
  uint64_t retained_bytes() const;  // keys + values of retained entries
  uint64_t trimmed_bytes() const;   // deleted by the retention bound since open

 private:
  EventLog(std::unique_ptr<rocksdb::DB> db, const EventLogOptions& options);
  absl::Status LoadBounds();
  absl::Status TrimLocked();

  std::unique_ptr<rocksdb::DB> db_;
  EventLogOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_sequence_ = 0;
  uint64_t first_sequence_ = 0;
  uint64_t retained_bytes_ = 0;
  uint64_t trimmed_bytes_ = 0;
};

// Big-endian key of a sequence number.
std::string EventLogKey(uint64_t sequence);

}  // namespace kvlearn
