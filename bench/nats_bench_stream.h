// What the NATS benches share (nats_ingest_bench, replica_takeover_bench): a
// nats-server with the event stream for one round, and the event mix they
// publish.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "kvlearn/v1/retention.pb.h"
#include "server/jetstream_connection.h"
#include "tests/server/nats_server_process.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {

inline constexpr int kBenchBatch = 256;  // events per message

// A nats-server (JetStream, file storage) on a free port in a temporary
// directory, and a connection with stream KVLEARN_EVENTS made.
struct BenchStream {
  TempDir store;
  std::unique_ptr<NatsServerProcess> nats;
  std::unique_ptr<JetStreamConnection> publisher;

  // False, saying why on stderr, when there is no nats-server or it fails.
  bool Start() {
    nats = std::make_unique<NatsServerProcess>(store.path());
    if (!nats->Found()) {
      std::fprintf(stderr, "%s\n", NatsServerProcess::kSkipMessage);
      return false;
    }
    if (!nats->Start()) {
      std::fprintf(stderr, "nats-server did not start\n");
      return false;
    }
    auto c = JetStreamConnection::Connect({.url = nats->url(), .name = "bench"});
    if (!c.ok() || !(*c)->EnsureStream("KVLEARN_EVENTS", "kvlearn.events").ok()) {
      std::fprintf(stderr, "cannot reach nats-server\n");
      return false;
    }
    publisher = *std::move(c);
    return true;
  }
};

// One message of `node`: per request a 4-block arrival, a store and a
// removal of its root (chains over 16,384 distinct roots), the rest
// transfer-finished events, kBenchBatch in all (ingest_bench's mix).
inline v1::EventBatch BenchBatch(const std::string& node, uint64_t& next_chain) {
  v1::EventBatch batch;
  const auto add = [&](int64_t t) {
    v1::Event* e = batch.add_events();
    e->set_node_id(node);
    e->set_timestamp_us(t);
    return e;
  };
  while (batch.events_size() + 3 <= kBenchBatch) {
    const uint64_t c = next_chain++;
    const uint64_t base = (c % 16384) * 4;
    v1::Event* a = add(static_cast<int64_t>(c));
    for (uint64_t i = 0; i < 4; ++i) a->mutable_request_arrival()->add_block_ids(base + i);
    auto* st = add(static_cast<int64_t>(c))->mutable_block_stored();
    st->set_block_id(base);
    st->set_tokens(512);
    st->set_bytes(512 * 131072);
    add(static_cast<int64_t>(c))->mutable_block_removed()->set_block_id(base);
  }
  while (batch.events_size() < kBenchBatch) {
    v1::Event* t = batch.add_events();
    t->set_node_id(node);
    auto* tf = t->mutable_transfer_finished();
    tf->set_src("p1");
    tf->set_dst("pool");
    tf->set_bytes(65536);
    tf->set_microseconds(3);
  }
  return batch;
}

}  // namespace kvlearn
