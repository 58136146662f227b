// Republishes engines' own KV cache events (vLLM / SGLang ZMQ, followed by
// engine/engine_subscriber.h) into a NATS JetStream stream, as the kvlearn
// events `kvlearn serve --nats` consumes (`kvlearn bridge`): for engines
// that speak only ZMQ.
//
// Each engine batch becomes the kvlearn events engine_ingest makes of it
// (ToKvlearnEvents: same tiers, block sizes and bytes), published as one
// kvlearn.v1.EventBatch on `<subject_prefix>.<node>` (split at
// max_events_per_batch events), synchronously: the next batch waits for the
// stream's acknowledgement, and a timeout or a lost connection is retried
// until it is acknowledged or Stop. Each message carries
//   - Nats-Msg-Id `kvlearn-bridge/<start ns>/<node>/<engine sequence>/<part>`,
//     so a publish retried after a lost acknowledgement is stored once;
//   - header Kvlearn-Engine-Sequence: the engine batch's sequence number. At
//     start the bridge reads the last message of each node's subject and
//     follows that engine from the sequence after it (its replay socket
//     gives what was published meanwhile), so a restarted bridge neither
//     skips nor repeats batches the engine still holds.
// An engine restart or AllBlocksCleared clears the tiers the bridge saw that
// engine store to since the bridge started (a restarted bridge has seen
// none yet).
//
// Thread-safety: Stop and the accessors from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "engine/engine_subscriber.h"
#include "server/engine_ingest.h"
#include "server/jetstream_connection.h"

namespace kvlearn {

struct EngineBridgeOptions {
  JetStreamOptions connection;  // url required
  std::string stream = "KVLEARN_EVENTS";
  std::string subject_prefix = "kvlearn.events";
  EngineMapping mapping;  // REQUIRES: cost set, outliving the bridge
  EngineSubscriberOptions subscriber;
  uint32_t max_events_per_batch = 4096;
};

class EngineBridge {
 public:
  static constexpr char kSequenceHeader[] = "Kvlearn-Engine-Sequence";

  // Connects to NATS (creating the stream if missing), reads where each
  // engine's subject ends, and starts following the engines.
  static absl::StatusOr<std::unique_ptr<EngineBridge>> Start(EngineBridgeOptions options);
  ~EngineBridge();  // Stop()
  EngineBridge(const EngineBridge&) = delete;
  EngineBridge& operator=(const EngineBridge&) = delete;

  void Stop();

  uint64_t messages_published() const { return published_.load(std::memory_order_relaxed); }
  uint64_t events_published() const { return events_.load(std::memory_order_relaxed); }
  // Publishes abandoned: Stop came while NATS was unreachable.
  uint64_t publish_failures() const { return failures_.load(std::memory_order_relaxed); }
  uint64_t publish_retries() const { return connection_->publish_retries(); }
  std::vector<EngineEndpointStats> engine_stats() const { return subscriber_->Stats(); }

 private:
  explicit EngineBridge(EngineBridgeOptions options) : options_(std::move(options)) {}
  void OnBatch(const std::string& node, uint64_t sequence, const EngineEventBatch& batch);

  EngineBridgeOptions options_;
  std::unique_ptr<JetStreamConnection> connection_;
  std::unique_ptr<EngineSubscriber> subscriber_;
  std::string id_start_;  // "kvlearn-bridge/<start ns>/"
  // The subscriber's thread only.
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> tiers_seen_;
  std::vector<v1::Event> events_buffer_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace kvlearn
