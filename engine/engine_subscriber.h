// EngineSubscriber: follows the KV event streams of one or more serving
// engines (vLLM / SGLang ZMQ publishers; docs/engine_events.md) and hands
// every decoded batch, in sequence order per engine, to a callback.
//
// Each endpoint is one engine, named by a node id (the sidecar's node_id).
// For each, a SUB socket connects to the engine's PUB address and, when
// configured, a DEALER socket to its ROUTER replay address. Messages are
// [topic, sequence (8 bytes big-endian), msgpack payload]. The subscriber
// remembers the next sequence it expects per endpoint:
//   - an older (or already held) sequence is a duplicate: dropped, counted;
//   - a newer one is a gap: counted; with a replay socket the missing range
//     is asked for (8-byte big-endian start sequence) and live batches are
//     held back (at most max_held_batches) until the answer's end marker
//     (sequence -1); batches the engine no longer has are counted lost and
//     skipped. A replay that ended before the hole (the hole opened after the
//     engine answered) is asked again from the hole. Without a replay socket,
//     or when the answer does not come within replay_timeout, the missing
//     sequences are counted lost at once.
// A payload that does not decode is counted malformed and skipped; its
// sequence still counts as received. Unknown event tags are counted.
//
// A connection that ends is replaced by a fresh socket at once, counted and
// logged (once per engine): libzmq ends a connection that brings a message
// over the size cap and never reconnects it by itself. On the SUB side, what
// was published meanwhile is a gap at the next live batch, replayed as any
// other; when a replay answer's connection ends (it carried such a
// message), the sequence it had reached is counted lost and the rest of the
// hole asked for again. `sequences_lost` saturates at 2^64 - 1.
//
// With a start sequence (the endpoint's, else options.start_sequence), the
// stream is expected to begin there (vLLM numbers from 0), and an endpoint
// with a replay socket asks for it at start, so batches published before the
// SUB socket joined are not missed. Unset, the stream starts at the first
// batch received. A start above 0 says that every sequence below it was
// published before Start (`kvlearn serve` resumes after the last one it
// logged).
//
// Restarts: vLLM and SGLang number from 0 per process, and PUB neither
// reorders nor repeats live messages (duplicates only come from replay
// answers), so live numbering that falls back means the engine restarted:
//   - a live sequence 0 after a later live one;
//   - a first live sequence below the start sequence: the engine restarted
//     while no subscriber listened, and numbers below what was dealt with.
// The endpoint then starts over from 0 (a gap up to that batch is asked of
// the replay socket like any other), and the first batch delivered after that
// has engine_restarted set. Missed: a restart whose 0 is lost to the
// slow-joiner window (its next batches look like duplicates until they pass
// the old numbering), and one that numbered past the start while no
// subscriber listened (its batches are taken for the old numbering's next).
//
// The callback runs on the subscriber's one background thread, for all
// endpoints; it must not throw and should not block for long (ZMQ queues up
// to rcv_hwm messages per engine meanwhile). Counters are atomics, read at
// any time through Stats(). Stop() returns within about poll_interval plus
// the time the callback takes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_event.h"
#include "engine/kv_event_decoder.h"

namespace kvlearn {

struct EngineEndpoint {
  std::string node_id;          // names the engine in callbacks and stats
  std::string endpoint;         // the engine's PUB address, e.g. tcp://10.0.0.5:5557
  std::string replay_endpoint;  // its ROUTER address; empty: no replay
  // Where this engine's stream begins (see above); unset:
  // EngineSubscriberOptions::start_sequence.
  std::optional<uint64_t> start_sequence;
};

// Parses `kvlearn serve --engine-events` / `--engine-replay` values.
//   events: comma-separated "[node=]tcp://host:port"; without "node=" the node
//           id is the endpoint string itself.
//   replay: comma-separated "[node=]tcp://host:port"; a named entry goes to
//           that node, an unnamed one to the events endpoint at the same
//           position; empty entries are allowed ("tcp://a:5558,,tcp://c:5558").
// Node ids must be 1..128 characters of [A-Za-z0-9._:/-] and distinct.
absl::StatusOr<std::vector<EngineEndpoint>> ParseEngineEndpoints(std::string_view events,
                                                                 std::string_view replay);

struct EngineSubscriberOptions {
  std::vector<EngineEndpoint> endpoints;   // REQUIRES: at least one
  std::string topic;                       // subscription prefix; "" = every message
  std::optional<uint64_t> start_sequence;  // of every endpoint that names none
  std::chrono::milliseconds poll_interval{100};
  std::chrono::milliseconds replay_timeout{5000};
  size_t max_held_batches = 100000;  // per endpoint, while a replay is outstanding
  int rcv_hwm = 100000;              // per SUB socket
  KvEventDecodeOptions decode;       // decode.max_payload_bytes also caps ZMQ messages
};

// A snapshot of one endpoint's counters.
struct EngineEndpointStats {
  std::string node_id;
  // Counters move before a batch's callback runs, so they already count a
  // batch the callback has seen.
  uint64_t batches = 0;  // decoded and delivered
  uint64_t stored_events = 0;
  uint64_t removed_events = 0;
  uint64_t cleared_events = 0;
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t malformed = 0;     // payloads (or frames) that did not decode: skipped
  uint64_t unknown_tags = 0;  // events skipped for an unknown tag
  // Live batches whose sequence was already dealt with (a replay answer
  // delivered it first, or a restart hid behind the old numbering): dropped.
  // A replay answer's batches that live ones delivered first are expected
  // overlap, dropped without counting.
  uint64_t duplicates = 0;
  uint64_t gaps = 0;  // times a sequence jumped ahead
  uint64_t replay_requests = 0;
  uint64_t replay_timeouts = 0;
  uint64_t batches_replayed = 0;  // delivered from a replay answer
  uint64_t events_replayed = 0;
  uint64_t sequences_lost = 0;  // missing and not recoverable
  uint64_t restarts = 0;        // live numbering fell back: the engine restarted
  // Connections to the engine's PUB (replay) address that ended: the engine
  // went away, or sent a message over decode.max_payload_bytes, after which
  // libzmq would never reconnect. Each is replaced by a fresh socket at once.
  uint64_t connection_drops = 0;
  uint64_t replay_connection_drops = 0;
  int64_t next_sequence = -1;  // next expected; -1 before the first batch
  std::string last_error;      // the last malformed payload's decode error
};

class EngineSubscriber {
 public:
  // The batch is the callback's: it may move from it, or leave in it another
  // batch, whose storage the next payload is decoded into.
  using Callback =
      std::function<void(const std::string& node, uint64_t seq, EngineEventBatch& batch)>;

  // Connects every endpoint and starts the thread. INVALID_ARGUMENT for bad
  // options or an address ZMQ refuses (connecting does not wait for the
  // engine: an engine that is not up yet is joined when it comes up).
  static absl::StatusOr<std::unique_ptr<EngineSubscriber>> Start(EngineSubscriberOptions options,
                                                                 Callback callback);

  ~EngineSubscriber();  // Stop()
  EngineSubscriber(const EngineSubscriber&) = delete;
  EngineSubscriber& operator=(const EngineSubscriber&) = delete;

  // Stops the thread and closes the sockets. Idempotent; not from the callback.
  void Stop();

  // One entry per endpoint, in the order of options.endpoints.
  std::vector<EngineEndpointStats> Stats() const;

  struct State;  // defined in engine_subscriber.cc

 private:
  explicit EngineSubscriber(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvlearn
