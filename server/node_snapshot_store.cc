#include "server/node_snapshot_store.h"

#include <nats/nats.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fnv1a.h"
#include "server/jetstream_connection.h"
#include "server/subject_reader.h"

namespace kvlearn {
namespace {

constexpr char kSubjectRoot[] = "kvlearn.snapshots";

bool ParseNumber(std::string_view text, uint64_t* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::optional<std::string> Header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

NodeSnapshotStore::NodeSnapshotStore(JetStreamConnection* connection,
                                     const std::string& events_stream)
    : connection_(connection),
      stream_(StreamName(events_stream)),
      subject_start_(absl::StrCat(kSubjectRoot, ".", events_stream, ".")) {}

std::string NodeSnapshotStore::StreamName(const std::string& events_stream) {
  return events_stream + "_SNAPSHOTS";
}

std::string NodeSnapshotStore::SubjectOf(const std::string& node) const {
  return subject_start_ + node;
}

std::string NodeSnapshotStore::Checksum(std::string_view bytes) {
  Fnv1a h(Fnv1a::kPublishedBasis);
  h.Bytes(bytes);
  return absl::StrFormat("%016x", h.value());
}

absl::Status NodeSnapshotStore::Ensure() {
  return connection_->EnsureStream(stream_, subject_start_.substr(0, subject_start_.size() - 1));
}

absl::Status NodeSnapshotStore::Publish(const std::string& node, uint64_t through,
                                        const std::string& id, std::string_view bytes,
                                        const std::atomic<bool>* cancel) {
  size_t chunk = kChunkBytes;
  if (const int64_t max = natsConnection_GetMaxPayload(connection_->connection()); max > 0) {
    chunk = std::min(chunk, static_cast<size_t>(max / 2));
  }
  const size_t n = std::max<size_t>(1, (bytes.size() + chunk - 1) / chunk);
  const std::string subject = SubjectOf(node);
  const std::string checksum = Checksum(bytes);
  uint64_t first = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string_view part = bytes.substr(i * chunk, chunk);
    const std::vector<std::pair<std::string, std::string>> headers = {
        {kIdHeader, id},
        {kChunkHeader, absl::StrCat(i + 1, "/", n)},
        {kThroughHeader, absl::StrCat(through)},
        {kChecksumHeader, checksum},
    };
    auto sequence =
        connection_->Publish(subject, part, absl::StrCat(id, "/", i + 1), 0, headers, cancel);
    if (!sequence.ok()) return sequence.status();
    if (i == 0) first = *sequence;
  }
  // Whole: what is older than the previous snapshot goes.
  const auto previous = last_first_.find(node);
  const uint64_t keep_from = previous == last_first_.end() ? first : previous->second;
  last_first_[node] = first;
  // nats-server reads a purge's sequence 1 as "no bound" (every message of
  // the subject would go), and nothing lies below 1 anyway.
  if (keep_from <= 1) return absl::OkStatus();
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Purge.Subject = subject.c_str();
  o.Stream.Purge.Sequence = keep_from;
  jsErrCode err = static_cast<jsErrCode>(0);
  if (const natsStatus s = js_PurgeStream(connection_->js(), stream_.c_str(), &o, &err);
      s != NATS_OK) {
    return NatsStatus(s, err, absl::StrCat("purge ", subject));  // the next publish purges it
  }
  return absl::OkStatus();
}

bool NodeSnapshotStore::Load(const std::string& node, uint64_t max_through,
                             const std::function<bool()>& stopping,
                             std::atomic<uint64_t>* fetch_errors, Loaded* out) const {
  struct Pieces {
    uint64_t through = 0;
    uint64_t first_sequence = 0;
    std::string checksum;
    std::vector<std::optional<std::string>> chunks;
    std::string damage;  // headers that disagree
  };
  std::map<std::string, Pieces> by_id;
  SubjectRead read;
  read.stream = stream_;
  read.subject = SubjectOf(node);
  read.batch = 16;  // chunks are large
  read.stopping = stopping;
  read.fetch_errors = fetch_errors;
  const bool whole = ReadSubject(connection_->js(), read, [&](natsMsg* msg, uint64_t sequence) {
    ++out->chunks_read;
    const auto id = Header(msg, kIdHeader);
    const auto chunk = Header(msg, kChunkHeader);
    const auto through = Header(msg, kThroughHeader);
    const auto checksum = Header(msg, kChecksumHeader);
    if (!id || !chunk || !through || !checksum) {
      out->skipped.push_back(absl::StrCat("sequence ", sequence, ": not a snapshot chunk"));
      return;
    }
    Pieces& p = by_id[*id];
    uint64_t index = 0, count = 0, covers = 0;
    const size_t slash = chunk->find('/');
    if (slash == std::string::npos ||
        !ParseNumber(std::string_view(*chunk).substr(0, slash), &index) ||
        !ParseNumber(std::string_view(*chunk).substr(slash + 1), &count) || index < 1 ||
        index > count || count > (uint64_t{1} << 20) || !ParseNumber(*through, &covers)) {
      p.damage = absl::StrCat("chunk header '", *chunk, "', through '", *through, "'");
      return;
    }
    if (p.chunks.empty()) {
      p.chunks.resize(count);
      p.through = covers;
      p.checksum = *checksum;
      p.first_sequence = sequence;
    } else if (p.chunks.size() != count || p.through != covers || p.checksum != *checksum) {
      p.damage = "chunks whose headers disagree";
      return;
    }
    p.chunks[index - 1].emplace(static_cast<const char*>(natsMsg_GetData(msg)),
                                static_cast<size_t>(natsMsg_GetDataLength(msg)));
  });
  if (!whole) return false;
  std::vector<std::pair<uint64_t, Found>> intact;  // with the first chunk's sequence
  for (auto& [id, p] : by_id) {
    const std::string what = absl::StrCat("snapshot ", id, " of ", node);
    if (!p.damage.empty()) {
      out->skipped.push_back(absl::StrCat(what, ": ", p.damage));
      continue;
    }
    const size_t have = std::count_if(p.chunks.begin(), p.chunks.end(),
                                      [](const auto& c) { return c.has_value(); });
    if (have < p.chunks.size()) {
      out->skipped.push_back(
          absl::StrCat(what, ": torn, ", have, " of ", p.chunks.size(), " chunks"));
      continue;
    }
    Found f{id, p.through, {}};
    for (auto& c : p.chunks) f.bytes += *c;
    if (Checksum(f.bytes) != p.checksum) {
      out->skipped.push_back(absl::StrCat(what, ": checksum ", Checksum(f.bytes),
                                          " where its chunks say ", p.checksum));
      continue;
    }
    if (f.through > max_through) {
      ++out->ahead;
      continue;
    }
    intact.emplace_back(p.first_sequence, std::move(f));
  }
  std::sort(intact.begin(), intact.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.through, a.first) > std::tie(b.second.through, b.first);
  });
  for (auto& [first, f] : intact) out->snapshots.push_back(std::move(f));
  return true;
}

}  // namespace kvlearn
