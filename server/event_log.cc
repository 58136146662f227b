#include "server/event_log.h"

#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

constexpr size_t kKeySize = 8;

uint64_t DecodeKey(std::string_view key) {
  uint64_t v = 0;
  for (size_t i = 0; i < kKeySize && i < key.size(); ++i) {
    v = (v << 8) | static_cast<unsigned char>(key[i]);
  }
  return v;
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

// Frames `v` as a protobuf field-1 length-delimited record.
void AppendRecord(std::string& out, const std::string& v) {
  out.push_back('\x0a');
  uint64_t n = v.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
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

EventLog::EventLog(std::unique_ptr<rocksdb::DB> db, const EventLogOptions& options)
    : db_(std::move(db)), options_(options) {}

EventLog::~EventLog() = default;

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::Open(const std::string& dir,
                                                         const EventLogOptions& options) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = rocksdb::kNoCompression;
  o.write_buffer_size = 64 << 20;
  // Keys only ever grow (sequence numbers), so an append-only vector memtable
  // beats the default skiplist; Append serializes writers anyway.
  o.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  o.allow_concurrent_memtable_write = false;
  rocksdb::DB* raw = nullptr;
  if (auto s = FromRocks(rocksdb::DB::Open(o, dir, &raw), absl::StrCat("open ", dir)); !s.ok()) {
    return s;
  }
  std::unique_ptr<EventLog> log(new EventLog(std::unique_ptr<rocksdb::DB>(raw), options));
  if (auto s = log->LoadBounds(); !s.ok()) return s;
  return log;
}

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::OpenReadOnly(const std::string& dir) {
  rocksdb::Options o;
  rocksdb::DB* raw = nullptr;
  if (auto s = FromRocks(rocksdb::DB::OpenForReadOnly(o, dir, &raw), absl::StrCat("open ", dir));
      !s.ok()) {
    return s;
  }
  std::unique_ptr<EventLog> log(new EventLog(std::unique_ptr<rocksdb::DB>(raw), {}));
  if (auto s = log->LoadBounds(); !s.ok()) return s;
  return log;
}

absl::Status EventLog::LoadBounds() {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  if (!it->Valid()) return FromRocks(it->status(), "scan");
  first_sequence_ = DecodeKey(it->key().ToStringView());
  for (; it->Valid(); it->Next()) retained_bytes_ += it->key().size() + it->value().size();
  if (auto s = FromRocks(it->status(), "scan"); !s.ok()) return s;
  it->SeekToLast();
  if (it->Valid()) {
    next_sequence_ = DecodeKey(it->key().ToStringView()) + CountRecords(it->value().ToStringView());
  }
  return FromRocks(it->status(), "scan");
}

absl::StatusOr<uint64_t> EventLog::Append(std::span<const std::string> values) {
  absl::MutexLock lock(&mu_);
  const uint64_t first = next_sequence_;
  if (values.empty()) return first;
  const std::string key = EventLogKey(first);
  std::string value;
  size_t total = 0;
  for (const std::string& v : values) total += v.size() + 6;
  value.reserve(total);
  for (const std::string& v : values) AppendRecord(value, v);
  const uint64_t bytes = key.size() + value.size();
  rocksdb::WriteOptions w;
  w.sync = options_.sync;
  if (auto s = FromRocks(db_->Put(w, key, value), "append"); !s.ok()) return s;
  next_sequence_ = first + values.size();
  retained_bytes_ += bytes;
  if (options_.max_bytes > 0 && retained_bytes_ > options_.max_bytes) {
    if (auto s = TrimLocked(); !s.ok()) return s;
  }
  return first;
}

absl::Status EventLog::TrimLocked() {
  const uint64_t target = options_.max_bytes / 10 * 9;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
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
  if (auto s = FromRocks(db_->DeleteRange(rocksdb::WriteOptions(), db_->DefaultColumnFamily(),
                                          EventLogKey(first_sequence_), EventLogKey(end)),
                         "trim");
      !s.ok()) {
    return s;
  }
  first_sequence_ = end;
  retained_bytes_ -= removed;
  trimmed_bytes_ += removed;
  return absl::OkStatus();
}

absl::Status EventLog::ForEach(
    const std::function<absl::Status(uint64_t, std::string_view)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
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

uint64_t EventLog::next_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_;
}
uint64_t EventLog::first_sequence() const {
  absl::MutexLock lock(&mu_);
  return first_sequence_;
}
uint64_t EventLog::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return retained_bytes_;
}
uint64_t EventLog::trimmed_bytes() const {
  absl::MutexLock lock(&mu_);
  return trimmed_bytes_;
}

}  // namespace kvlearn
