// How many events per second one `kvlearn serve --nats` takes from a
// JetStream stream (docs/scale_out.md, "Throughput"): fetch, parse, apply,
// one RocksDB write per group (WAL, no fsync) and the acknowledgement.
//
//   build/bench/nats_ingest_bench [--messages 4000] [--nodes 8] [--replicas 0]
//
// Starts a nats-server (JetStream, file storage) on a free port in a
// temporary directory, publishes --messages EventBatch messages of 256 events
// each (ingest_bench's mix: per request a 4-block arrival, a store and a
// removal of its root, the rest transfer-finished events) round-robin over
// --nodes subjects, then starts an in-process sidecar on the stream and
// times it from its start until the last message is logged and
// acknowledged. Prints the publish rate (one synchronous publish at a time,
// each waiting for its acknowledgement: the bridge's way) and the consume
// rate in messages and events per second (applied or refused by the pools),
// per round. Three rounds, each on a fresh nats-server, stream and data
// directory; then the best and the median consume rate.
//
// --replicas N (N >= 1) times a replica group of N in-process sidecars
// instead of one lone sidecar: each takes the whole stream through a durable
// consumer of its own and applies only the messages of the nodes it owns.
// The bench holds every member's key in the group's bucket before the
// replicas start, so each sees all N members at its first read and never
// follows another's nodes; the time runs until the last replica has logged
// and acknowledged the last message, and the rate counts the events the N
// replicas applied or refused together.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
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

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Round {
  double publish_per_s = 0;
  double messages_per_s = 0;
  double events_per_s = 0;
  std::vector<uint64_t> applied;  // events applied or refused, per sidecar
};

bool RunRound(int messages, int nodes, int replicas, Round* out) {
  BenchStream stream;
  if (!stream.Start()) return false;
  NatsServerProcess& nats = *stream.nats;
  JetStreamConnection* publisher = stream.publisher.get();
  std::vector<std::string> payloads;
  std::vector<std::string> subjects;
  uint64_t chain = 0;
  for (int m = 0; m < messages; ++m) {
    const std::string node = "node-" + std::to_string(m % nodes);
    subjects.push_back("kvlearn.events." + node);
    payloads.push_back(BenchBatch(node, chain).SerializeAsString());
  }
  const auto published_at = std::chrono::steady_clock::now();
  uint64_t last = 0;
  for (int m = 0; m < messages; ++m) {
    auto sequence = publisher->Publish(subjects[m], payloads[m]);
    if (!sequence.ok()) {
      std::fprintf(stderr, "%s\n", std::string(sequence.status().message()).c_str());
      return false;
    }
    last = *sequence;
  }
  out->publish_per_s = messages / Seconds(published_at);

  // The members' keys, held until the round ends (a group of `replicas`).
  constexpr char kGroup[] = "bench";
  std::vector<std::unique_ptr<ReplicaGroup>> members;
  for (int r = 0; r < replicas; ++r) {
    ReplicaGroupOptions g;
    g.connection.url = nats.url();
    g.bucket = std::string("kvlearn-replicas-") + kGroup;
    g.name = "replica-" + std::to_string(r);
    g.address = "127.0.0.1:1";  // the replica's own heartbeat puts its real address
    auto member = ReplicaGroup::Join(g);
    if (!member.ok()) {
      std::fprintf(stderr, "%s\n", std::string(member.status().message()).c_str());
      return false;
    }
    members.push_back(*std::move(member));
  }

  const int sidecars = std::max(replicas, 1);
  std::vector<TempDir> data(sidecars);
  std::vector<absl::StatusOr<std::unique_ptr<SidecarServer>>> servers(sidecars);
  std::vector<std::thread> starting;
  const auto started_at = std::chrono::steady_clock::now();
  for (int r = 0; r < sidecars; ++r) {
    starting.emplace_back([&, r] {
      SidecarOptions o;
      o.listen = "127.0.0.1:0";
      o.metrics_listen = "";
      o.data_dir = data[r].path();
      o.policy = "lru";
      o.nats_url = nats.url();
      if (replicas > 0) {
        o.replica_group = kGroup;
        o.replica_advertise = "127.0.0.1";
        o.replica_name = "replica-" + std::to_string(r);
      }
      servers[r] = SidecarServer::Start(o);
    });
  }
  for (auto& t : starting) t.join();
  for (const auto& server : servers) {
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
      return false;
    }
  }
  const auto consumed = [&] {
    for (const auto& server : servers) {
      if ((*server)->nats_ingest()->logged_sequence() < last) return false;
    }
    return true;
  };
  if (!WaitUntil(consumed)) {
    std::fprintf(stderr, "the sidecars did not consume the stream\n");
    return false;
  }
  const double seconds = Seconds(started_at);
  uint64_t consumed_messages = 0, events = 0;
  out->applied.clear();
  for (const auto& server : servers) {
    const NatsIngest& ingest = *(*server)->nats_ingest();
    consumed_messages += ingest.messages_consumed();
    const uint64_t mine = ingest.events_applied() + ingest.events_rejected();
    events += mine;
    out->applied.push_back(mine);
  }
  out->messages_per_s = consumed_messages / seconds;
  out->events_per_s = events / seconds;
  return true;
}

}  // namespace
}  // namespace kvlearn

int main(int argc, char** argv) {
  int messages = 4000, nodes = 8, replicas = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--messages") {
      messages = std::atoi(argv[i + 1]);
    } else if (flag == "--nodes") {
      nodes = std::atoi(argv[i + 1]);
    } else if (flag == "--replicas") {
      replicas = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: nats_ingest_bench [--messages N] [--nodes N] [--replicas N]\n"
                   "  --replicas 0: one lone sidecar (default); N >= 1: a replica group of N\n");
      return 2;
    }
  }
  if (messages < 1 || nodes < 1 || replicas < 0) {
    std::fprintf(stderr, "--messages and --nodes must be at least 1, --replicas at least 0\n");
    return 2;
  }
  std::printf(
      "%d messages of %d events over %d nodes, %s\n", messages, kvlearn::kBenchBatch, nodes,
      replicas == 0 ? "one sidecar" : ("a replica group of " + std::to_string(replicas)).c_str());
  std::vector<kvlearn::Round> rounds(3);
  for (size_t i = 0; i < rounds.size(); ++i) {
    kvlearn::Round& r = rounds[i];
    if (!kvlearn::RunRound(messages, nodes, replicas, &r)) return 1;
    std::printf("round %zu: published %.0f messages/s; consumed %.0f messages/s = %.3f M events/s",
                i + 1, r.publish_per_s, r.messages_per_s, r.events_per_s / 1e6);
    if (replicas > 1) {
      std::printf(" (events per replica:");
      for (const uint64_t n : r.applied) std::printf(" %llu", static_cast<unsigned long long>(n));
      std::printf(")");
    }
    std::printf("\n");
  }
  std::sort(rounds.begin(), rounds.end(),
            [](const auto& a, const auto& b) { return a.events_per_s > b.events_per_s; });
  std::printf("consume: best %.3f M events/s, median %.3f M events/s\n",
              rounds[0].events_per_s / 1e6, rounds[1].events_per_s / 1e6);
  return 0;
}
