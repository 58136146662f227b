// EnginePublisher: the sending side of an engine's KV event stream, the way
// vLLM's ZmqEventPublisher and SGLang's do it, for tests and for
// kvlearn-engine-publisher.
//
// Every payload published gets the next sequence number (from 0) and goes
// out on a PUB socket as three frames: topic, sequence (8 bytes big-endian),
// payload. The last `replay_buffer_batches` (sequence, payload) pairs are
// kept; a ROUTER replay socket answers a request (the client's identity, an
// empty frame, a start sequence as 8 bytes big-endian) with [identity, "",
// sequence, payload] for every kept batch from that sequence on, then
// [identity, "", 0xFF x 8 (-1), ""] as the end marker. `drop_sequence` is
// numbered and kept for replay but never sent on PUB, so a subscriber must
// notice the gap and replay it.
//
// The PUB socket is an XPUB (wire-compatible with PUB) so that
// WaitForSubscribers can tell when a subscription has reached it: a test
// publishes only then, and no batch is lost to ZMQ's slow-joiner window.
//
// One background thread owns the sockets; Publish only queues. Thread-safety:
// every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace kvlearn {

struct EnginePublisherOptions {
  // Bound, never connected. "tcp://127.0.0.1:*" picks a free port; endpoint()
  // then names it.
  std::string endpoint = "tcp://127.0.0.1:*";
  std::string replay_endpoint;  // bound too; empty: no replay socket
  std::string topic;            // first frame of every message
  size_t replay_buffer_batches = 10000;
  std::optional<uint64_t> drop_sequence;
  int send_hwm = 100000;  // messages queued per subscriber before ZMQ drops
};

struct EnginePublisherStats {
  uint64_t published = 0;         // sequences numbered
  uint64_t sent = 0;              // handed to the PUB socket
  uint64_t dropped = 0;           // numbered but not sent (drop_sequence)
  uint64_t replay_requests = 0;   // well-formed requests answered
  uint64_t replayed_batches = 0;  // batches sent in answers
  uint64_t bad_replay_requests = 0;
  int64_t subscriptions = 0;  // subscribe minus unsubscribe messages seen
};

class EnginePublisher {
 public:
  // Binds the sockets and starts the thread. Errors: INVALID_ARGUMENT for an
  // endpoint ZMQ refuses, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<EnginePublisher>> Start(EnginePublisherOptions options);

  ~EnginePublisher();  // Stop()
  EnginePublisher(const EnginePublisher&) = delete;
  EnginePublisher& operator=(const EnginePublisher&) = delete;

  // The bound addresses, with the port ZMQ chose.
  const std::string& endpoint() const;
  const std::string& replay_endpoint() const;  // empty without replay

  // Numbers `payload` and queues it for sending; returns its sequence.
  uint64_t Publish(std::string payload);

  // Waits until every queued batch is handed to ZMQ (or kept, if dropped).
  void Flush();

  // Waits until `n` subscriptions have reached the PUB socket; false on timeout.
  bool WaitForSubscribers(int64_t n, std::chrono::milliseconds timeout);

  // Stops the thread and closes the sockets (unsent messages are discarded).
  // Bounded: the thread wakes at least every 100 ms. Idempotent.
  void Stop();

  EnginePublisherStats stats() const;

  struct State;  // defined in engine_publisher.cc

 private:
  explicit EnginePublisher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvlearn
