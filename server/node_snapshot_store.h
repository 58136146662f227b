// Each serving node's pool snapshot, kept in JetStream for a replica group
// (docs/scale_out.md, "Snapshots in JetStream"): the node's owner publishes
// one now and then, and a replica taking the node over restores the latest
// complete one and reads only the node's events after it.
//
// libnats has no object store, so the store is a plain stream,
// `<events stream>_SNAPSHOTS`, subjects `kvlearn.snapshots.<events stream>.<node>`.
// A snapshot (EncodePoolsSnapshot's bytes of the node's pools) is published
// as chunks of at most kChunkBytes, one message each, in order, each with
// headers naming
//   Kvlearn-Snapshot-Id        the snapshot (publisher, sequence, counter)
//   Kvlearn-Snapshot-Chunk     I/N, 1-based
//   Kvlearn-Snapshot-Through   the events stream sequence it covers through
//   Kvlearn-Snapshot-Checksum  FNV-1a 64 of the whole snapshot, 16 hex digits
// and a Nats-Msg-Id, so a publish retried after a lost acknowledgement is
// stored once. Once its last chunk is acknowledged, the subject is purged
// below the first chunk of the publisher's previous snapshot of the node:
// the subject keeps the two latest, so a damaged latest one falls back to
// the one before.
//
// A reader takes every chunk of the subject, groups them by id and keeps a
// snapshot only when all its N chunks are there (a publisher that died
// midway leaves a torn one) and the bytes match the checksum.
//
// Thread-safety: Publish from one thread at a time; Load from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace kvlearn {

class JetStreamConnection;

class NodeSnapshotStore {
 public:
  static constexpr char kIdHeader[] = "Kvlearn-Snapshot-Id";
  static constexpr char kChunkHeader[] = "Kvlearn-Snapshot-Chunk";
  static constexpr char kThroughHeader[] = "Kvlearn-Snapshot-Through";
  static constexpr char kChecksumHeader[] = "Kvlearn-Snapshot-Checksum";
  // Well under NATS's default max payload (1 MiB); a server configured
  // smaller gets chunks of half its max payload.
  static constexpr size_t kChunkBytes = 256 * 1024;

  // REQUIRES: `connection` outlives this object.
  NodeSnapshotStore(JetStreamConnection* connection, const std::string& events_stream);

  static std::string StreamName(const std::string& events_stream);
  std::string SubjectOf(const std::string& node) const;
  // The hex checksum a snapshot's chunks carry.
  static std::string Checksum(std::string_view bytes);

  // Creates the snapshot stream if missing.
  absl::Status Ensure();

  // Publishes `bytes` as node's snapshot covering the events stream through
  // `through` under `id`, then purges what is older than the previous one
  // this store published for the node (or everything older, for the first).
  // Retries a lost connection until `cancel` (CANCELLED).
  absl::Status Publish(const std::string& node, uint64_t through, const std::string& id,
                       std::string_view bytes, const std::atomic<bool>* cancel);

  struct Found {
    std::string id;
    uint64_t through = 0;
    std::string bytes;
  };
  struct Loaded {
    // Complete and intact, newest (highest through) first, none beyond
    // max_through.
    std::vector<Found> snapshots;
    // Why each torn or damaged snapshot of the subject was left out.
    std::vector<std::string> skipped;
    // Intact snapshots beyond max_through (the reader is behind the stream).
    uint64_t ahead = 0;
    uint64_t chunks_read = 0;
  };
  // Reads node's snapshots. False when `stopping` interrupted it.
  bool Load(const std::string& node, uint64_t max_through, const std::function<bool()>& stopping,
            std::atomic<uint64_t>* fetch_errors, Loaded* out) const;

 private:
  JetStreamConnection* connection_;
  std::string stream_;
  std::string subject_start_;
  // Per node, the stream sequence of the first chunk of the last snapshot
  // published here (the purge keeps it).
  absl::flat_hash_map<std::string, uint64_t> last_first_;
};

}  // namespace kvlearn
