// DecisionStaging: a memory-mapped file in the log's directory where journaled
// decisions (EventLog::AppendDecision) wait until a RocksDB write carries them
// into the "decisions" column family.
//
// Why: journaling a decision through RocksDB on the RankEviction / Admit path
// costs a WAL write() and a memtable insert per call, tens of µs when the
// caches are cold between two network calls (docs/performance.md, "Sidecar
// speed"). A store into a shared file mapping is in the kernel's page cache
// once the copy ends, so it survives the process being killed (kill -9)
// exactly as a WAL record written without fsync does, for the price of a
// memcpy. The next event append takes the staged records into its own
// RocksDB write batch (EventLog::PutLocked); a full staging is written by
// EventLog's drain thread while a second file takes the calls; a restart
// moves whatever either file still holds into RocksDB before anything reads
// the journal.
//
// File layout: a 16-byte header (magic "KVLDSTG1", 8 reserved bytes), then
// records, each aligned to 8 bytes:
//   u32 size       bytes of the value; 0 ends the records
//   u32 magic      kRecordMagic
//   u64 check      a hash of (number, value)
//   u64 number     the decision number
//   value          as stored in RocksDB: varint event sequence, then the record
// The size is written last, and every append writes a 0 size after its
// record, so a reader never walks into a torn record or into older records
// left behind by Clear(); the check and the rule that numbers go up by one
// catch the rest (a damaged or foreign file ends the records where it
// starts to differ).
//
// Thread-safety: none. EventLog calls it under its mutex, except its drain
// thread, which reads the records of a full file no other thread touches
// meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvlearn {

class DecisionStaging {
 public:
  // 64 KiB: about 170 RankEviction decisions of 64 candidates, more than
  // arrive between two event appends of a serving node that reports events.
  // A node that reports none fills it; EventLog's drain thread then writes
  // it into RocksDB (0.2-0.8 ms at this size, bench/decision_journal_bench.cc)
  // while the second file fills. Small, so that a call that finds both full
  // (decisions outrunning RocksDB) waits well under a client's 5 ms deadline.
  static constexpr size_t kDefaultCapacity = 1 << 16;
  // Its name in the event log's directory, beside RocksDB's files, one RocksDB
  // does not claim.
  static constexpr const char* kFileName = "kvlearn_decisions.staging";
  // The second file's (a directory from a build with one file lacks it: it
  // is created empty).
  static constexpr const char* kSecondFileName = "kvlearn_decisions.staging.2";

  struct Record {
    uint64_t number = 0;
    std::string_view value;  // points into the mapping; valid until the next Append or Clear
  };

  // Opens (creating) the staging file at `path`, mapped at `capacity` bytes
  // or at the file's size if larger (an older build's). The records already
  // in it stay until Clear(): read them with Records() and put them into
  // RocksDB first. INVALID_ARGUMENT for a file that is not a staging file,
  // UNAVAILABLE when the file cannot be opened, allocated on disk (full) or
  // mapped.
  static absl::StatusOr<std::unique_ptr<DecisionStaging>> Open(const std::string& path,
                                                               size_t capacity = kDefaultCapacity);
  // Opens `path` as a new, empty staging file of `capacity` bytes, whatever
  // it held: every record in it is dropped. Only for a file whose records are
  // in RocksDB already (an earlier build's larger staging, once recovered).
  static absl::StatusOr<std::unique_ptr<DecisionStaging>> OpenEmptied(
      const std::string& path, size_t capacity = kDefaultCapacity);
  ~DecisionStaging();
  DecisionStaging(const DecisionStaging&) = delete;
  DecisionStaging& operator=(const DecisionStaging&) = delete;

  // Stages decision `number`, journaled at `event_sequence`, as its RocksDB
  // value (the varint event sequence, then `record`). False, with nothing
  // written, when it does not fit in the space left: the caller empties the
  // staging into RocksDB and tries again, or writes the decision directly.
  bool Append(uint64_t number, uint64_t event_sequence, std::string_view record);
  // The staged records, in the order appended.
  std::vector<Record> Records() const;
  // Forgets every staged record (they are in RocksDB now).
  void Clear();
  bool empty() const { return end_ == kHeaderBytes; }
  size_t capacity_bytes() const { return size_; }  // the mapping, header included

 private:
  static constexpr size_t kHeaderBytes = 16;
  DecisionStaging(int fd, char* base, size_t size) : fd_(fd), base_(base), size_(size) {}

  int fd_;
  char* base_;  // the mapping, size_ bytes
  size_t size_;
  size_t end_ = kHeaderBytes;  // where the next record goes
};

}  // namespace kvlearn
