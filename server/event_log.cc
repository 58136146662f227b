#include "server/event_log.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/varint.h"
#include "server/decision_staging.h"

namespace kvlearn {
namespace {

constexpr size_t kKeySize = 8;
// Memory RocksDB may hold, fixed whatever the traffic (docs/performance.md,
// "Memory"): per family of appended records a 16 MiB memtable (up to two
// while one flushes), and one 8 MiB block cache for every family (reads are
// rare: start-up replay, trimming, snapshots).
constexpr size_t kWriteBufferBytes = 16 << 20;
constexpr size_t kBlockCacheBytes = 8 << 20;
// A few bytes per write, the same keys over and over.
constexpr size_t kEngineSequencesWriteBufferBytes = 1 << 20;
constexpr const char* kDecisions = "decisions";
constexpr const char* kSnapshots = "snapshots";
constexpr const char* kEngineSequences = "engine_sequences";
// First byte of a model-swap record (server/model_swap_record.h).
constexpr char kModelSwapRecordByte = 'M';

// Creates `dir` and any missing parent (RocksDB creates the last directory
// only; `serve --data-dir runs/a/log` should not fail because `runs/a` is
// new), each 0700, and makes `dir` itself 0700 if it already existed: the
// log holds every node's traffic, and the journaled decisions.
absl::Status CreateOwnerOnlyDirectory(const std::string& dir) {
  std::filesystem::path path;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    path /= part;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create the event log directory ",
                                                        path.string(), ": ", std::strerror(errno)));
    }
  }
  std::error_code ec;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data-dir ", dir, ": cannot make it owner-only (chmod 0700): ", ec.message(),
                     "; run as its owner, or give a directory you own"));
  }
  return absl::OkStatus();
}

uint64_t DecodeKey(std::string_view key) {
  uint64_t v = 0;
  for (size_t i = 0; i < kKeySize && i < key.size(); ++i) {
    v = (v << 8) | static_cast<unsigned char>(key[i]);
  }
  return v;
}

// For scans over old entries (trimming, replay), read once: left in the
// block cache they would grow the server's memory up to the cache's size
// once trimming starts, long after start-up.
rocksdb::ReadOptions ScanOnce() {
  rocksdb::ReadOptions r;
  r.fill_cache = false;
  return r;
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("event log: ", what, ": ", s.ToString());
  if (s.IsIOError()) return absl::UnavailableError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

// Warnings and errors of RocksDB, one stderr line each.
class StderrRocksLogger : public rocksdb::Logger {
 public:
  StderrRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    std::fprintf(stderr, "event log: rocksdb: %s\n", line);
  }
};

// Frames `v` as a protobuf field-1 length-delimited record.
void AppendRecord(std::string& out, const std::string& v) {
  out.push_back('\x0a');
  PutVarint(out, v.size());
  out.append(v);
}

// Splits an entry's value into its records; false if it is malformed.
template <typename Fn>
bool ForEachRecord(std::string_view value, Fn&& fn) {
  size_t i = 0;
  while (i < value.size()) {
    if (value[i++] != '\x0a') return false;
    uint64_t n = 0;
    for (int shift = 0;; shift += 7) {
      if (i >= value.size() || shift > 63) return false;
      const auto b = static_cast<unsigned char>(value[i++]);
      n |= uint64_t{b & 0x7fu} << shift;
      if (b < 0x80) break;
    }
    if (n > value.size() - i) return false;
    if (!fn(value.substr(i, n))) return true;
    i += n;
  }
  return true;
}

uint64_t CountRecords(std::string_view value) {
  uint64_t n = 0;
  ForEachRecord(value, [&n](std::string_view) {
    ++n;
    return true;
  });
  return n;
}

}  // namespace

std::string EventLogKey(uint64_t sequence) {
  std::string key(kKeySize, '\0');
  for (size_t i = 0; i < kKeySize; ++i) {
    key[kKeySize - 1 - i] = static_cast<char>((sequence >> (8 * i)) & 0xff);
  }
  return key;
}

EventLog::EventLog(std::unique_ptr<rocksdb::DB> db,
                   std::vector<rocksdb::ColumnFamilyHandle*> handles,
                   const EventLogOptions& options)
    : db_(std::move(db)), handles_(std::move(handles)), options_(options) {}

EventLog::~EventLog() {
  if (drain_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    drain_work_.notify_all();
    drain_thread_.join();
  }
  // Staged decisions would be recovered by the next open anyway; moving them
  // now leaves a closed log whole for read-only opens.
  (void)FlushStaged();
  // Column family handles go before the database they belong to.
  for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
}

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::Open(const std::string& dir,
                                                         const EventLogOptions& options) {
  return OpenImpl(dir, options, /*read_only=*/false);
}

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::OpenReadOnly(const std::string& dir) {
  return OpenImpl(dir, {}, /*read_only=*/true);
}

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::OpenImpl(const std::string& dir,
                                                             const EventLogOptions& options,
                                                             bool read_only) {
  if (!read_only) {
    if (auto s = CreateOwnerOnlyDirectory(dir); !s.ok()) return s;
    // RocksDB creates its files 0666 less the umask and has no option for
    // it (Env::SetAllowNonOwnerAccess is not honoured by its file system in
    // 7.8): the process umask is tightened to deny group and others, which
    // the server's other files want as well.
    ::umask(::umask(077) | 077);
  }
  rocksdb::Options o;
  // RocksDB's diagnostics go to stderr, not to a LOG file in `dir`: on a
  // full disk that file's failed write made the next message abort the
  // process (Debian's librocksdb keeps its assertions).
  o.info_log = std::make_shared<StderrRocksLogger>();
  o.create_if_missing = !read_only;
  o.create_missing_column_families = !read_only;
  rocksdb::ColumnFamilyOptions cf;
  // Without a shared cache each family would create its own.
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::ColumnFamilyOptions snapshot_cf;
  snapshot_cf.table_factory = cf.table_factory;
  // RocksDB recovers from a full disk once the largest memtable fits on it
  // (its default, 64 MiB, here would ask for 4 times as much room as the
  // events' 16 MiB); a snapshot larger than this still fits, as one entry.
  snapshot_cf.write_buffer_size = kWriteBufferBytes;
  rocksdb::ColumnFamilyOptions engine_sequences_cf = snapshot_cf;
  engine_sequences_cf.write_buffer_size = kEngineSequencesWriteBufferBytes;
  if (!read_only) {
    cf.compression = rocksdb::kNoCompression;
    cf.write_buffer_size = kWriteBufferBytes;
    // Keys only ever grow (sequence numbers), so an append-only vector
    // memtable beats the default skiplist; Append serializes writers anyway.
    cf.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
    o.allow_concurrent_memtable_write = false;
  }
  static_cast<rocksdb::ColumnFamilyOptions&>(o) = cf;
  // A log written before decisions were journaled has no such family: a
  // writer creates it, a reader does without.
  std::vector<std::string> existing;
  const bool listed = rocksdb::DB::ListColumnFamilies(o, dir, &existing).ok();
  const auto has = [&](const char* name) {
    return listed && std::find(existing.begin(), existing.end(), name) != existing.end();
  };
  const bool has_decisions = has(kDecisions);
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {{rocksdb::kDefaultColumnFamilyName, cf}};
  if (has_decisions || !read_only) families.emplace_back(kDecisions, cf);
  // Snapshots are big values written rarely: the default memtable suits them
  // (WriteSnapshot flushes it).
  const bool has_snapshots = has_decisions && has(kSnapshots);
  if (has_snapshots || !read_only) families.emplace_back(kSnapshots, snapshot_cf);
  if ((has_snapshots && has(kEngineSequences)) || !read_only) {
    families.emplace_back(kEngineSequences, engine_sequences_cf);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened =
      read_only ? rocksdb::DB::OpenForReadOnly(o, dir, families, &handles, &raw)
                : rocksdb::DB::Open(o, dir, families, &handles, &raw);
  if (auto s = FromRocks(opened, absl::StrCat("open ", dir)); !s.ok()) return s;
  std::unique_ptr<EventLog> log(
      new EventLog(std::unique_ptr<rocksdb::DB>(raw), std::move(handles), options));
  if (auto s = log->LoadBounds(); !s.ok()) return s;
  if (!read_only) {
    if (auto s = log->RecoverStaged(dir); !s.ok()) return s;
    // With `sync` nothing is staged, so nothing is drained.
    if (!options.sync) log->drain_thread_ = std::thread([raw = log.get()] { raw->DrainLoop(); });
  }
  return log;
}

absl::Status EventLog::RecoverStaged(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = dir + "/" + DecisionStaging::kFileName;
  auto first = DecisionStaging::Open(path);
  if (!first.ok()) return first.status();
  auto second = DecisionStaging::Open(dir + "/" + DecisionStaging::kSecondFileName);
  if (!second.ok()) return second.status();
  // RocksDB's decisions have no gap (every write of one carries or waits
  // for the earlier ones still staged), so records below next_decision_
  // reached it before the crash, whichever file holds them.
  rocksdb::WriteBatch batch;
  uint64_t next = next_decision_, bytes = 0;
  for (const DecisionStaging* staging : {first->get(), second->get()}) {
    for (const DecisionStaging::Record& r : staging->Records()) {
      if (r.number < next_decision_) continue;
      const std::string key = EventLogKey(r.number);
      batch.Put(handles_[1], key, rocksdb::Slice(r.value.data(), r.value.size()));
      next = std::max(next, r.number + 1);
      bytes += key.size() + r.value.size();
    }
  }
  if (batch.Count() > 0) {
    rocksdb::WriteOptions w;
    w.sync = options_.sync;
    if (auto s = FromRocks(db_->Write(w, &batch), "recover staged decisions"); !s.ok()) return s;
    next_decision_ = next;
    retained_bytes_ += bytes;
  }
  (*first)->Clear();
  (*second)->Clear();
  // An earlier build's larger file, empty now, starts again at this build's
  // size: a call that finds both stagings busy pays for writing all of it.
  if ((*first)->capacity_bytes() > DecisionStaging::kDefaultCapacity) {
    first->reset();
    first = DecisionStaging::OpenEmptied(path);
    if (!first.ok()) return first.status();
  }
  staging_ = std::move(*first);
  spare_ = std::move(*second);
  return absl::OkStatus();
}

void EventLog::AddStaged(const DecisionStaging& staging, rocksdb::WriteBatch& batch) const {
  for (const DecisionStaging::Record& r : staging.Records()) {
    batch.Put(handles_[1], EventLogKey(r.number), rocksdb::Slice(r.value.data(), r.value.size()));
  }
}

absl::Status EventLog::WriteStaged(const DecisionStaging& staging) const {
  rocksdb::WriteBatch batch;
  AddStaged(staging, batch);
  if (batch.Count() == 0) return absl::OkStatus();
  rocksdb::WriteOptions w;
  w.sync = options_.sync;
  return FromRocks(Write(w, &batch), "append staged decisions");
}

void EventLog::DrainLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    drain_work_.wait(lock,
                     [this] { return stopping_ || (draining_ != nullptr && !drain_failed_); });
    if (stopping_) return;  // the destructor writes what is left
    drain_writing_ = true;
    const DecisionStaging& full = *draining_;  // no one else touches it until drain_writing_ clears
    lock.unlock();
    if (options_.before_drain_write) options_.before_drain_write();
    const absl::Status written = WriteStaged(full);
    lock.lock();
    drain_writing_ = false;
    if (written.ok()) {
      RetireDrainedLocked();
    } else {
      drain_failed_ = true;  // kept: SettleDrainLocked retries and reports the error
    }
    drain_done_.notify_all();
  }
}

absl::Status EventLog::SettleDrainLocked(std::unique_lock<std::mutex>& lock) const {
  drain_done_.wait(lock, [this] { return !drain_writing_; });
  if (draining_ == nullptr) return absl::OkStatus();
  if (auto s = WriteStaged(*draining_); !s.ok()) return s;
  RetireDrainedLocked();
  return absl::OkStatus();
}

void EventLog::RetireDrainedLocked() const {
  draining_->Clear();
  spare_ = std::move(draining_);
  drain_failed_ = false;
}

absl::Status EventLog::FlushStaged() const {
  std::unique_lock<std::mutex> lock(mu_);
  return FlushStagedLocked(lock);
}

absl::Status EventLog::FlushStagedLocked(std::unique_lock<std::mutex>& lock) const {
  if (auto s = SettleDrainLocked(lock); !s.ok()) return s;
  if (staging_ == nullptr || staging_->empty()) return absl::OkStatus();
  if (auto s = WriteStaged(*staging_); !s.ok()) return s;
  staging_->Clear();
  return absl::OkStatus();
}

absl::Status EventLog::LoadBounds() {
  std::lock_guard<std::mutex> lock(mu_);
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handles_[0]));
    it->SeekToFirst();
    if (it->Valid()) first_sequence_ = DecodeKey(it->key().ToStringView());
    for (; it->Valid(); it->Next()) retained_bytes_ += it->key().size() + it->value().size();
    if (auto s = FromRocks(it->status(), "scan"); !s.ok()) return s;
    it->SeekToLast();
    if (it->Valid()) {
      next_sequence_ =
          DecodeKey(it->key().ToStringView()) + CountRecords(it->value().ToStringView());
    }
    if (auto s = FromRocks(it->status(), "scan"); !s.ok()) return s;
  }
  if (handles_.size() < 2) return absl::OkStatus();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handles_[1]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    retained_bytes_ += it->key().size() + it->value().size();
    next_decision_ = DecodeKey(it->key().ToStringView()) + 1;
  }
  return FromRocks(it->status(), "scan decisions");
}

absl::Status EventLog::AppendDecision(std::string_view record) {
  std::unique_lock<std::mutex> lock(mu_);
  if (handles_.size() < 2) return absl::FailedPreconditionError("event log: opened read-only");
  // Staged unless every write is fsynced (staging would skip the fsync). A
  // full staging goes to the drain thread and the other file takes over,
  // once the drain thread has written that one (it has, unless decisions
  // come faster than RocksDB takes them). A record too large for an empty
  // staging goes to RocksDB directly.
  bool staged = false;
  if (staging_ != nullptr && !options_.sync) {
    staged = staging_->Append(next_decision_, next_sequence_, record);
    if (!staged && !staging_->empty()) {
      if (spare_ == nullptr) {
        ++decision_waits_;
        if (auto s = SettleDrainLocked(lock); !s.ok()) return s;
      }
      draining_ = std::move(staging_);
      staging_ = std::move(spare_);
      drain_work_.notify_one();
      staged = staging_->Append(next_decision_, next_sequence_, record);
    }
  }
  std::string value;
  PutVarint(value, next_sequence_);
  const uint64_t bytes = kKeySize + value.size() + record.size();
  if (!staged) {
    // After the full staging's records, if any: no gap in RocksDB's numbers.
    if (auto s = SettleDrainLocked(lock); !s.ok()) return s;
    value.append(record);
    rocksdb::WriteOptions w;
    w.sync = options_.sync;
    rocksdb::WriteBatch batch;
    batch.Put(handles_[1], EventLogKey(next_decision_), value);
    if (auto s = FromRocks(Write(w, &batch), "append decision"); !s.ok()) return s;
  }
  ++next_decision_;
  retained_bytes_ += bytes;
  if (options_.max_bytes > 0 && retained_bytes_ > options_.max_bytes) return TrimLocked(lock);
  return absl::OkStatus();
}

absl::Status EventLog::ForEachDecision(
    const std::function<absl::Status(uint64_t, uint64_t, std::string_view)>& fn) const {
  if (handles_.size() < 2) return absl::OkStatus();
  if (auto s = FlushStaged(); !s.ok()) return s;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handles_[1]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const uint64_t number = DecodeKey(it->key().ToStringView());
    std::string_view value = it->value().ToStringView();
    uint64_t event_sequence = 0;
    if (!GetVarint(value, event_sequence)) {
      return absl::DataLossError(absl::StrCat("event log: decision ", number, " is malformed"));
    }
    if (auto s = fn(number, event_sequence, value); !s.ok()) return s;
  }
  return FromRocks(it->status(), "scan decisions");
}

namespace {

class RocksDecisionCursor final : public EventLog::DecisionCursor {
 public:
  RocksDecisionCursor(rocksdb::Iterator* it, const std::string& from) : it_(it) {
    if (it_) it_->Seek(from);
  }
  explicit RocksDecisionCursor(absl::Status failed) : status_(std::move(failed)) {}
  bool Next(uint64_t* number, uint64_t* event_sequence, std::string* record) override {
    if (!it_ || !status_.ok()) return false;
    if (!it_->Valid()) {
      status_ = FromRocks(it_->status(), "scan decisions");
      return false;
    }
    *number = DecodeKey(it_->key().ToStringView());
    std::string_view value = it_->value().ToStringView();
    if (!GetVarint(value, *event_sequence)) {
      status_ = absl::DataLossError(absl::StrCat("event log: decision ", *number, " is malformed"));
      return false;
    }
    record->assign(value.data(), value.size());
    it_->Next();
    return true;
  }
  absl::Status status() const override { return status_; }

 private:
  std::unique_ptr<rocksdb::Iterator> it_;  // null: a log without decisions
  absl::Status status_;
};

}  // namespace

std::unique_ptr<EventLog::DecisionCursor> EventLog::ReadDecisions() const {
  return ReadDecisionsFrom(0);
}

std::unique_ptr<EventLog::DecisionCursor> EventLog::ReadDecisionsFrom(uint64_t from) const {
  if (auto s = FlushStaged(); !s.ok()) return std::make_unique<RocksDecisionCursor>(s);
  return std::make_unique<RocksDecisionCursor>(
      handles_.size() < 2 ? nullptr : db_->NewIterator(rocksdb::ReadOptions(), handles_[1]),
      EventLogKey(from));
}

absl::Status EventLog::WriteSnapshot(uint64_t sequence, uint64_t decision, std::string_view bytes) {
  if (snapshots() == nullptr) return absl::FailedPreconditionError("event log: opened read-only");
  std::string value;
  value.reserve(bytes.size() + 10);
  PutVarint(value, decision);
  value.append(bytes);
  rocksdb::WriteOptions w;
  w.sync = options_.sync;
  const std::string key = EventLogKey(sequence);
  rocksdb::WriteBatch batch;
  batch.Put(snapshots(), key, value);
  if (auto s = FromRocks(Write(w, &batch), "write snapshot"); !s.ok()) return s;
  if (auto s =
          FromRocks(db_->DeleteRange(w, snapshots(), EventLogKey(0), key), "drop old snapshots");
      !s.ok()) {
    return s;
  }
  // Out of the memtable now: left there, every snapshot since the last flush
  // would stay in memory (up to 64 MiB of them) though only the latest counts.
  rocksdb::FlushOptions flush;
  flush.wait = false;
  return FromRocks(db_->Flush(flush, snapshots()), "flush the snapshot");
}

absl::StatusOr<EventLog::Snapshot> EventLog::LatestSnapshot() const {
  if (snapshots() == nullptr) return absl::NotFoundError("event log: no snapshot");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots()));
  it->SeekToLast();
  if (auto s = FromRocks(it->status(), "read snapshot"); !s.ok()) return s;
  if (!it->Valid()) return absl::NotFoundError("event log: no snapshot");
  Snapshot snapshot;
  snapshot.sequence = DecodeKey(it->key().ToStringView());
  std::string_view value = it->value().ToStringView();
  if (!GetVarint(value, snapshot.decision)) {
    return absl::DataLossError(
        absl::StrCat("event log: the snapshot at sequence ", snapshot.sequence, " is malformed"));
  }
  snapshot.bytes.assign(value.data(), value.size());
  return snapshot;
}

absl::StatusOr<uint64_t> EventLog::Append(std::span<const std::string> values) {
  std::unique_lock<std::mutex> lock(mu_);
  if (values.empty()) return next_sequence_;
  std::string value;
  size_t total = 0;
  for (const std::string& v : values) total += v.size() + 6;
  value.reserve(total);
  for (const std::string& v : values) AppendRecord(value, v);
  return PutLocked(lock, value, values.size());
}

absl::StatusOr<uint64_t> EventLog::AppendFramed(std::string_view records, uint64_t count,
                                                std::span<const EngineSequence> sequences) {
  uint64_t n = 0;
  const bool well_formed = ForEachRecord(records, [&n](std::string_view) {
    ++n;
    return true;
  });
  if (!well_formed || n != count) {
    return absl::InvalidArgumentError(absl::StrCat("event log: append of ", count,
                                                   " framed events holds ", n,
                                                   well_formed ? "" : " and malformed bytes"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (count == 0) return next_sequence_;
  return PutLocked(lock, records, count, sequences);
}

absl::Status EventLog::RecordEngineSequences(std::span<const EngineSequence> sequences) {
  if (sequences.empty()) return absl::OkStatus();
  if (engine_sequences() == nullptr) {
    return absl::FailedPreconditionError("event log: opened read-only");
  }
  rocksdb::WriteBatch batch;
  for (const EngineSequence& e : sequences) {
    batch.Put(engine_sequences(), e.node, EventLogKey(e.sequence));
  }
  rocksdb::WriteOptions w;
  w.sync = options_.sync;
  std::unique_lock<std::mutex> lock(mu_);
  return FromRocks(Write(w, &batch), "record engine sequences");
}

absl::StatusOr<uint64_t> EventLog::LoggedEngineSequence(std::string_view node) const {
  const std::string key(node);
  const auto missing = [&key] {
    return absl::NotFoundError(absl::StrCat("event log: no engine sequence for node '", key, "'"));
  };
  if (engine_sequences() == nullptr) return missing();
  std::string value;
  const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), engine_sequences(), key, &value);
  if (got.IsNotFound()) return missing();
  if (auto s = FromRocks(got, "read an engine sequence"); !s.ok()) return s;
  if (value.size() != kKeySize) {
    return absl::DataLossError(absl::StrCat("event log: the engine sequence of node '", key,
                                            "' is ", value.size(), " bytes, not ", kKeySize));
  }
  return DecodeKey(value);
}

absl::StatusOr<uint64_t> EventLog::PutLocked(std::unique_lock<std::mutex>& lock,
                                             std::string_view value, uint64_t count,
                                             std::span<const EngineSequence> sequences) {
  if (!sequences.empty() && engine_sequences() == nullptr) {
    return absl::FailedPreconditionError("event log: opened read-only");
  }
  const uint64_t first = next_sequence_;
  const std::string key = EventLogKey(first);
  const uint64_t bytes = key.size() + value.size();
  rocksdb::WriteBatch batch;
  batch.Put(handles_[0], key, rocksdb::Slice(value.data(), value.size()));
  for (const EngineSequence& e : sequences) {
    batch.Put(engine_sequences(), e.node, EventLogKey(e.sequence));
  }
  // The staged decisions ride along, one WAL write for all; the full file's
  // too when the drain thread has not written it (waiting for it if it is
  // writing): RocksDB's decisions stay numbered without a gap, so a reader,
  // even a read-only open, sees every decision up to some number.
  drain_done_.wait(lock, [this] { return !drain_writing_; });
  const bool carries_full = draining_ != nullptr;
  if (carries_full) AddStaged(*draining_, batch);
  const bool carries_staged = staging_ != nullptr && !staging_->empty();
  if (carries_staged) AddStaged(*staging_, batch);
  rocksdb::WriteOptions w;
  w.sync = options_.sync;
  if (auto s = FromRocks(Write(w, &batch), "append"); !s.ok()) {
    refused_events_.fetch_add(count, std::memory_order_relaxed);
    return s;
  }
  if (carries_full) RetireDrainedLocked();
  if (carries_staged) staging_->Clear();
  next_sequence_ = first + count;
  retained_bytes_ += bytes;
  if (options_.max_bytes > 0 && retained_bytes_ > options_.max_bytes) {
    if (auto s = TrimLocked(lock); !s.ok()) return s;
  }
  return first;
}

absl::Status EventLog::TrimLocked(std::unique_lock<std::mutex>& lock) {
  // Every decision in RocksDB first: one written after the trim below would
  // come back from before the first event kept.
  if (auto s = FlushStagedLocked(lock); !s.ok()) return s;
  const uint64_t target = options_.max_bytes / 10 * 9;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOnce(), handles_[0]));
  uint64_t removed = 0;
  uint64_t end = first_sequence_;
  // Whole entries, oldest first, until the rest fits; `end` is the first
  // sequence number kept.
  it->Seek(EventLogKey(first_sequence_));
  while (it->Valid() && retained_bytes_ - removed > target) {
    removed += it->key().size() + it->value().size();
    end = DecodeKey(it->key().ToStringView()) + CountRecords(it->value().ToStringView());
    it->Next();
  }
  if (auto s = FromRocks(it->status(), "trim scan"); !s.ok()) return s;
  it.reset();
  if (end == first_sequence_) return absl::OkStatus();
  if (auto s = FromRocks(db_->DeleteRange(rocksdb::WriteOptions(), handles_[0],
                                          EventLogKey(first_sequence_), EventLogKey(end)),
                         "trim");
      !s.ok()) {
    return s;
  }
  // Decisions journaled before the first event kept go with the events.
  if (handles_.size() >= 2) {
    std::unique_ptr<rocksdb::Iterator> d(db_->NewIterator(ScanOnce(), handles_[1]));
    uint64_t first_decision = 0, end_decision = 0;
    bool any = false;
    std::string last_swap_key, last_swap_value;  // the model the trimmed history ended with
    for (d->SeekToFirst(); d->Valid(); d->Next()) {
      std::string_view value = d->value().ToStringView();
      uint64_t event_sequence = 0;
      if (GetVarint(value, event_sequence) && event_sequence >= end) break;
      const uint64_t number = DecodeKey(d->key().ToStringView());
      if (!any) first_decision = number;
      any = true;
      end_decision = number + 1;
      removed += d->key().size() + d->value().size();
      if (!value.empty() && value[0] == kModelSwapRecordByte) {
        last_swap_key = d->key().ToString();
        last_swap_value = d->value().ToString();
      }
    }
    if (auto s = FromRocks(d->status(), "trim scan decisions"); !s.ok()) return s;
    d.reset();
    if (any) {
      if (auto s =
              FromRocks(db_->DeleteRange(rocksdb::WriteOptions(), handles_[1],
                                         EventLogKey(first_decision), EventLogKey(end_decision)),
                        "trim decisions");
          !s.ok()) {
        return s;
      }
      if (!last_swap_key.empty()) {
        if (auto s = FromRocks(
                db_->Put(rocksdb::WriteOptions(), handles_[1], last_swap_key, last_swap_value),
                "trim decisions: keep the last model swap");
            !s.ok()) {
          return s;
        }
        removed -= last_swap_key.size() + last_swap_value.size();
      }
    }
  }
  first_sequence_ = end;
  retained_bytes_ -= removed;
  trimmed_bytes_ += removed;
  return absl::OkStatus();
}

absl::Status EventLog::ForEach(
    const std::function<absl::Status(uint64_t, std::string_view)>& fn) const {
  return ForEachFrom(0, fn);
}

absl::Status EventLog::ForEachFrom(
    uint64_t from, const std::function<absl::Status(uint64_t, std::string_view)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOnce(), handles_[0]));
  for (it->Seek(EventLogKey(from)); it->Valid(); it->Next()) {
    uint64_t seq = DecodeKey(it->key().ToStringView());
    absl::Status status;
    const bool well_formed = ForEachRecord(it->value().ToStringView(), [&](std::string_view v) {
      status = fn(seq++, v);
      return status.ok();
    });
    if (!status.ok()) return status;
    if (!well_formed) {
      return absl::DataLossError(absl::StrCat(
          "event log: entry at sequence ", DecodeKey(it->key().ToStringView()), " is malformed"));
    }
  }
  return FromRocks(it->status(), "scan");
}

rocksdb::Status EventLog::Write(const rocksdb::WriteOptions& options,
                                rocksdb::WriteBatch* batch) const {
  // After a failed write RocksDB refuses every write until it recovers: by
  // itself for a full disk once there is room for a memtable again (its
  // SstFileManager checks every few seconds), or when asked (Resume) for
  // other errors. Asking is harmless while it recovers by itself (Busy).
  if (write_failed_.load(std::memory_order_acquire)) (void)db_->Resume();
  const rocksdb::Status s = db_->Write(options, batch);
  if (!s.ok()) {
    write_failed_.store(true, std::memory_order_release);
    failed_writes_.fetch_add(1, std::memory_order_relaxed);
  } else if (write_failed_.exchange(false, std::memory_order_acq_rel)) {
    recoveries_.fetch_add(1, std::memory_order_relaxed);
  }
  return s;
}

uint64_t EventLog::next_sequence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_sequence_;
}
uint64_t EventLog::first_sequence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_sequence_;
}
uint64_t EventLog::retained_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retained_bytes_;
}
uint64_t EventLog::next_decision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_decision_;
}
uint64_t EventLog::decision_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decision_waits_;
}
uint64_t EventLog::trimmed_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trimmed_bytes_;
}

}  // namespace kvlearn
