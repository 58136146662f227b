// How long a replica takes to take over a serving node with a long history
// (docs/scale_out.md, "Snapshots in JetStream"), with and without the
// node's snapshots kept in JetStream.
//
//   build/bench/replica_takeover_bench [--events 1000000] [--snapshot-events 500000] [--repeats 3]
//
// Each takeover: starts a nats-server (JetStream, file storage) on a free port in
// a temporary directory and two in-process replicas of a group (TTL 2 s,
// heartbeat 0.5 s), publishes --events events of one node in EventBatch
// messages of 256 (nats_ingest_bench's mix), waits until both replicas have
// logged them all and, with snapshots, until the node's owner has published
// its latest snapshot, then stops the owner's heartbeats (as a kill does)
// and times the survivor: from the moment its view loses the owner until it
// serves the node (its rebuild), and the messages it read to rebuild. Twice
// per repeat: --snapshot-events 0 (no snapshot: the whole subject is read),
// then snapshots every --snapshot-events of the node's events.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/nats_bench_stream.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/jetstream_connection.h"
#include "server/nats_ingest.h"
#include "server/replica_group.h"
#include "server/replica_ownership.h"
#include "server/sidecar_server.h"
#include "tests/server/nats_server_process.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr char kNode[] = "node-0";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Takeover {
  double rebuild_seconds = 0;   // view lost the owner -> node served
  double failover_seconds = 0;  // heartbeats stopped -> node served
  uint64_t replayed = 0;        // messages read to rebuild
  uint64_t snapshot_through = 0;
  uint64_t snapshot_bytes = 0;  // mean size of the owner's snapshots
  uint64_t messages = 0;
};

bool Run(int events, uint64_t snapshot_events, Takeover* out) {
  BenchStream stream;
  if (!stream.Start()) return false;
  NatsServerProcess& nats = *stream.nats;
  JetStreamConnection* publisher = stream.publisher.get();
  TempDir data[2];
  std::unique_ptr<SidecarServer> replicas[2];
  for (int r = 0; r < 2; ++r) {
    SidecarOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "";
    o.data_dir = data[r].path();
    o.policy = "lru";
    o.nats_url = nats.url();
    o.replica_group = "bench";
    o.replica_advertise = "127.0.0.1";
    o.replica_name = "replica-" + std::to_string(r);
    o.replica_ttl_seconds = 2;
    o.replica_heartbeat_seconds = 0.5;
    o.replica_snapshot_events = snapshot_events;
    o.replica_snapshot_seconds = 0;
    auto started = SidecarServer::Start(o);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", std::string(started.status().message()).c_str());
      return false;
    }
    replicas[r] = *std::move(started);
  }
  if (!WaitUntil([&] {
        return replicas[0]->replica_ownership()->group()->Members().size() == 2 &&
               replicas[1]->replica_ownership()->group()->Members().size() == 2;
      })) {
    std::fprintf(stderr, "the replicas did not see each other\n");
    return false;
  }
  uint64_t chain = 0, last = 0;
  out->messages = (events + kBenchBatch - 1) / kBenchBatch;
  for (uint64_t m = 0; m < out->messages; ++m) {
    auto sequence = publisher->Publish(std::string("kvlearn.events.") + kNode,
                                       BenchBatch(kNode, chain).SerializeAsString());
    if (!sequence.ok()) {
      std::fprintf(stderr, "%s\n", std::string(sequence.status().message()).c_str());
      return false;
    }
    last = *sequence;
  }
  const int owner =
      replicas[0]->replica_ownership()->RouteOf(kNode).kind == ReplicaOwnership::Route::kServe ? 0
                                                                                               : 1;
  const NatsIngest& owner_ingest = *replicas[owner]->nats_ingest();
  const NatsIngest& survivor_ingest = *replicas[1 - owner]->nats_ingest();
  if (!WaitUntil([&] {
        return owner_ingest.logged_sequence() >= last && survivor_ingest.logged_sequence() >= last;
      })) {
    std::fprintf(stderr, "the replicas did not consume the stream\n");
    return false;
  }
  if (snapshot_events > 0) {
    // The last snapshot due: one each time snapshot_events of the node's
    // events were applied since the last.
    uint64_t due_message = 0, since = 0;
    for (uint64_t m = 1; m <= out->messages; ++m) {
      since += kBenchBatch;
      if (since >= snapshot_events) {
        due_message = m;
        since = 0;
      }
    }
    if (!WaitUntil([&] { return owner_ingest.snapshot_published_through(kNode) >= due_message; })) {
      std::fprintf(stderr, "the owner published no snapshot\n");
      return false;
    }
    out->snapshot_through = owner_ingest.snapshot_published_through(kNode);
    out->snapshot_bytes = owner_ingest.snapshot_bytes_published() /
                          std::max<uint64_t>(1, owner_ingest.snapshots_published());
  }
  const uint64_t replayed = survivor_ingest.messages_replayed();
  const auto stopped_at = std::chrono::steady_clock::now();
  replicas[owner]->replica_ownership()->group()->StopHeartbeats();
  const ReplicaOwnership& view = *replicas[1 - owner]->replica_ownership();
  if (!WaitUntil([&] { return view.group()->Members().size() == 1; })) return false;
  const auto lost_at = std::chrono::steady_clock::now();
  if (!WaitUntil([&] { return view.RouteOf(kNode).kind == ReplicaOwnership::Route::kServe; })) {
    return false;
  }
  out->rebuild_seconds = Seconds(lost_at);
  out->failover_seconds = Seconds(stopped_at);
  out->replayed = survivor_ingest.messages_replayed() - replayed;
  return true;
}

}  // namespace
}  // namespace kvlearn

int main(int argc, char** argv) {
  int events = 1'000'000, repeats = 3;
  uint64_t snapshot_events = 500'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--events") {
      events = std::atoi(argv[i + 1]);
    } else if (flag == "--snapshot-events") {
      snapshot_events = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--repeats") {
      repeats = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: replica_takeover_bench [--events N] [--snapshot-events N] "
                   "[--repeats N]\n");
      return 2;
    }
  }
  if (events < kvlearn::kBenchBatch || repeats < 1 || snapshot_events < 1) {
    std::fprintf(stderr, "--events at least 256, --repeats and --snapshot-events at least 1\n");
    return 2;
  }
  std::printf("one node's %d events in messages of %d; takeover by the other of two replicas\n",
              events, kvlearn::kBenchBatch);
  for (int repeat = 1; repeat <= repeats; ++repeat) {
    for (const uint64_t every : {uint64_t{0}, snapshot_events}) {
      kvlearn::Takeover t;
      if (!kvlearn::Run(events, every, &t)) return 1;
      std::printf(
          "repeat %d, %s: rebuilt in %.3f s (%.3f s after the heartbeats stopped), %llu of %llu "
          "messages read",
          repeat,
          every == 0 ? "no snapshot"
                     : ("snapshots every " + std::to_string(every) + " events").c_str(),
          t.rebuild_seconds, t.failover_seconds, static_cast<unsigned long long>(t.replayed),
          static_cast<unsigned long long>(t.messages));
      if (every > 0) {
        std::printf(", snapshot through message %llu (%.1f MB each)",
                    static_cast<unsigned long long>(t.snapshot_through), t.snapshot_bytes / 1e6);
      }
      std::printf("\n");
    }
  }
  return 0;
}
