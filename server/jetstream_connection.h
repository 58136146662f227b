// A connection to a NATS server and its JetStream context (the NATS C
// client, libnats), for `kvlearn serve --nats` (server/nats_ingest.h) and
// `kvlearn bridge`. It reconnects by itself, forever, every
// reconnect_wait_seconds: a NATS restart or a network cut makes calls fail
// with UNAVAILABLE meanwhile, and they work again once it is back, without
// a new object.
//
// The event stream: JetStream stream `stream` holds subjects
// `<subject_prefix>.<node>`, one per serving node; each message is one
// kvlearn.v1.EventBatch (docs/scale_out.md).
//
// Thread-safety: the NATS C client's connection and context may be used from
// several threads; the accessors are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// The C client's types, so that this header does not pull in nats.h.
typedef struct __natsConnection natsConnection;
typedef struct __jsCtx jsCtx;

namespace kvlearn {

struct JetStreamOptions {
  std::string url;   // nats://HOST:PORT
  std::string name;  // the connection's name, shown by the server's monitoring
  double connect_timeout_seconds = 5;
  double reconnect_wait_seconds = 0.25;
  // How long a JetStream API call or a publish waits for its answer.
  double request_timeout_seconds = 5;
};

// The status of a failed NATS call: UNAVAILABLE for a connection that is
// down or a timeout, NOT_FOUND for a missing stream, consumer or message,
// else INTERNAL; the message names `what`, the client's text and the
// JetStream error code when there is one.
absl::Status NatsStatus(int status, int js_error, std::string_view what);

class JetStreamConnection {
 public:
  // Connects once (UNAVAILABLE naming the URL if no server answers within the
  // timeout); from then on reconnects by itself.
  static absl::StatusOr<std::unique_ptr<JetStreamConnection>> Connect(
      const JetStreamOptions& options);
  ~JetStreamConnection();
  JetStreamConnection(const JetStreamConnection&) = delete;
  JetStreamConnection& operator=(const JetStreamConnection&) = delete;

  natsConnection* connection() const { return nc_; }
  jsCtx* js() const { return js_; }
  const JetStreamOptions& options() const { return options_; }

  // Creates stream `stream` on file storage, taking `<subject_prefix>.>`,
  // unless one by that name exists (then used as it is).
  absl::Status EnsureStream(const std::string& stream, const std::string& subject_prefix);

  // Publishes `payload` on `subject` and waits for the stream's
  // acknowledgement; returns the message's stream sequence. A timeout or a
  // lost connection is retried, `attempts` times in all (0: until it
  // succeeds), every reconnect_wait_seconds; with `msg_id` (the Nats-Msg-Id
  // header) the stream keeps one copy of a message retried within its
  // duplicate window (2 minutes by default).
  // `headers` go with the message; `cancel`, when set, ends the retries
  // (CANCELLED).
  absl::StatusOr<uint64_t> Publish(
      const std::string& subject, std::string_view payload, const std::string& msg_id = "",
      int attempts = 0, const std::vector<std::pair<std::string, std::string>>& headers = {},
      const std::atomic<bool>* cancel = nullptr);
  // Publish calls retried (counted once per retry).
  uint64_t publish_retries() const { return publish_retries_.load(std::memory_order_relaxed); }

  bool connected() const;
  // Times the connection came back after a loss.
  uint64_t reconnects() const;

 private:
  explicit JetStreamConnection(JetStreamOptions options) : options_(std::move(options)) {}

  JetStreamOptions options_;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  std::atomic<uint64_t> publish_retries_{0};
};

}  // namespace kvlearn
