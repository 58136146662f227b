// `kvlearn serve`: the gRPC retention sidecar (server/sidecar_server.h).
// Runs until SIGINT or SIGTERM; SIGHUP reloads the --experiment file, or
// without one the --model file (the
// --auth-tokens file is re-read when it changes, without a signal). At start it
// replays its event log (progress on stderr about once a second).
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/cost_flags.h"
#include "cli/flag_checks.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "server/replica_ownership.h"
#include "server/sidecar_server.h"

namespace kvlearn {
namespace {

struct ServeFlags {
  SidecarOptions server;
  std::string nodes;
  CostFlags cost;
};

int RunServe(ServeFlags& f) {
#ifdef __GLIBC__
  // A fixed threshold: blocks of 128 KiB and more (memtable arenas, the
  // pools' vectors and indexes a compaction rebuilds) are mmapped and go back
  // to the system when freed. glibc's default raises the threshold to the
  // largest block freed so far, and the heap then kept 100-200 MiB of free
  // holes that grew the server's RSS over a stream of new ids
  // (docs/performance.md, "Memory").
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
#endif
  SidecarOptions& o = f.server;
  auto cost = f.cost.Resolve();
  if (!cost.ok()) {
    std::cerr << "kvlearn serve: " << cost.status().message() << "\n";
    return 1;
  }
  o.cost = std::make_shared<CostModel>(*cost);
  for (auto node : absl::StrSplit(f.nodes, ',', absl::SkipEmpty())) {
    o.known_nodes.insert(std::string(node));
  }
  if (o.strict_nodes && o.known_nodes.empty()) {
    std::cerr << "kvlearn serve: --strict-nodes needs --nodes (the node ids to accept)\n";
    return 1;
  }
  // Block the signals before gRPC starts its threads, so only sigwait below
  // sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  o.replay_progress = [](uint64_t done, uint64_t total, double seconds) {
    std::cerr << "kvlearn serve: replaying the event log: " << done << " of " << total
              << " events (" << static_cast<int>(total ? 100.0 * done / total : 100) << "%), "
              << static_cast<int>(seconds) << " s" << std::endl;
  };
  auto server = SidecarServer::Start(o);
  if (!server.ok()) {
    std::cerr << "kvlearn serve: " << server.status().message() << "\n";
    return 1;
  }
  SidecarServer& s = **server;
  if (!s.startup_notes().empty()) std::cerr << "kvlearn serve: " << s.startup_notes();
  if (s.replayed_from_snapshot()) {
    std::cerr << "kvlearn serve: loaded the pools' snapshot at sequence "
              << s.replay_snapshot_sequence() << std::endl;
  }
  if (s.replayed_events() > 0) {
    std::cerr << "kvlearn serve: rebuilt the pools from " << s.replayed_events()
              << " logged events and " << s.replayed_decisions() << " journaled decisions in "
              << s.replay_seconds() << " s" << std::endl;
  }
  std::string host = o.listen.substr(0, o.listen.rfind(':'));
  std::cerr << "kvlearn serve: listening on " << host << ":" << s.port() << " ("
            << (o.tls_cert.empty()        ? "plaintext"
                : o.tls_client_ca.empty() ? "TLS"
                                          : "mutual TLS")
            << "), "
            << (o.experiment_path.empty() ? "policy " + s.policy()
                                          : "experiment " + o.experiment_path)
            << ", event log " << o.data_dir;
  if (s.metrics_port() > 0) {
    std::cerr << ", metrics http://" << o.metrics_listen.substr(0, o.metrics_listen.rfind(':'))
              << ":" << s.metrics_port() << "/metrics";
  }
  std::cerr << std::endl;
  if (const ReplicaOwnership* own = s.replica_ownership(); own != nullptr) {
    const ReplicaGroup& g = *own->group();
    std::cerr << "kvlearn serve: replica " << g.name() << " of group " << o.replica_group
              << " (advertised as " << g.address() << "), " << g.Members().size() << " live members"
              << std::endl;
  }
  // Machine-readable line for scripts and tests (ports may be chosen by the OS).
  std::cout << "port " << s.port() << " metrics_port " << s.metrics_port() << std::endl;

  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP && !s.experiment_path().empty()) {
      auto arms = s.ReloadExperiment();
      if (arms.ok()) {
        std::cerr << "kvlearn serve: SIGHUP: running experiment " << s.experiment_path()
                  << ", arms " << *arms << "\n";
      } else {
        std::cerr << "kvlearn serve: SIGHUP: kept the current experiment: "
                  << arms.status().message() << "\n";
      }
      continue;
    }
    if (sig == SIGHUP) {
      if (s.model_path().empty()) {
        std::cerr << "kvlearn serve: SIGHUP: no --model to reload\n";
        continue;
      }
      auto version = s.ReloadModel(s.model_path());
      if (version.ok()) {
        std::cerr << "kvlearn serve: SIGHUP: loaded model " << *version << "\n";
        if (const std::string unfit = s.unfit_model_note(); !unfit.empty()) {
          std::cerr << "kvlearn serve: SIGHUP: " << unfit << "\n";
        }
      } else {
        std::cerr << "kvlearn serve: SIGHUP: kept the current model: " << version.status().message()
                  << "\n";
      }
      continue;
    }
    std::cerr << "kvlearn serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
              << ": shutting down (calls in flight get " << o.shutdown_grace_seconds
              << " s, then are cancelled)" << std::endl;
    break;
  }
  // Backstop: Shutdown is bounded by the grace period, but a process that
  // stays up holds the RocksDB lock and the next start fails. If it has not
  // returned well after the grace period, exit anyway: every acknowledged
  // event is already in RocksDB's write-ahead log, as after kill -9.
  const auto backstop =
      std::chrono::milliseconds(static_cast<int64_t>((o.shutdown_grace_seconds + 30) * 1000));
  std::thread([backstop] {
    std::this_thread::sleep_for(backstop);
    std::cerr << "kvlearn serve: shutdown did not finish in time; exiting" << std::endl;
    _exit(1);
  }).detach();
  s.Shutdown();
  std::cerr << "kvlearn serve: stopped" << std::endl;
  return 0;
}

}  // namespace

Command AddServeCommand(CLI::App& root) {
  auto f = std::make_shared<ServeFlags>();
  SidecarOptions& o = f->server;
  CLI::App* cmd = root.add_subcommand(
      "serve",
      "Run the gRPC retention sidecar: serving nodes stream block events and ask Admit / "
      "RankEviction (docs/sidecar.md). SIGHUP reloads --experiment, else --model; SIGINT/SIGTERM "
      "stop.");
  cmd->add_option("--listen", o.listen, "gRPC address HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--data-dir", o.data_dir, "directory of the RocksDB event log")->required();
  auto* policy = cmd->add_option("--policy", o.policy,
                                 absl::StrCat("retention policy (", JoinedPolicyNames(", "),
                                              "); default learned with --model, else lru"));
  auto* model =
      cmd->add_option("--model", o.model_path,
                      "model file for the learned policies ('learned' runs without one, on lru and "
                      "gdsf; 'learned-model' needs one)");
  cmd->add_option("--experiment", o.experiment_path,
                  "A/B experiment JSON file: live arms (name, policy, model, share of nodes) "
                  "and shadow policies, with per-arm and per-shadow cost on /metrics; "
                  "reloaded by SIGHUP (docs/experiments.md)")
      ->excludes(policy)
      ->excludes(model);
  cmd->add_option("--shadow-max-blocks", o.shadow_max_blocks,
                  "blocks all shadow pools together may remember (~90 B each under lru, as a "
                  "live pool's); at it a shadow pool forgets its ghosts, then skips arrivals "
                  "and counts them (kvlearn_shadow_requests_skipped_total)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd->add_flag(
      "--resize-estimates", o.resize_estimates,
      "per node, run its live policy on two ghost pools at 0.5x and 2x its configured "
      "pool bytes (block ids only), fed its arrivals, and export their cost beside the "
      "live pool's as kvlearn_resize_*{node,scale} (docs/experiments.md); off by "
      "default: the ghosts' work runs under each pool's lock, in the way of its decisions");
  cmd->add_option("--resize-max-blocks", o.resize_max_blocks,
                  "blocks all resize ghost pools together may remember (~90 B each under lru); at "
                  "it a ghost forgets its ghosts, then skips arrivals and counts them "
                  "(kvlearn_resize_requests_skipped_total)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd->add_option("--metrics-listen", o.metrics_listen,
                  "Prometheus /metrics address HOST:PORT (empty: off); a port another "
                  "process listens on is refused at start")
      ->capture_default_str();
  cmd->add_option("--metrics-max-connections", o.metrics_max_connections,
                  "/metrics connections open at once; one more closes the oldest one still "
                  "sending its request (kvlearn_metrics_connections_cut_total)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--metrics-request-timeout-seconds", o.metrics_request_timeout_seconds,
                  "a /metrics connection is closed this long after it was accepted, answered "
                  "or not, so slow clients cannot hold the endpoint")
      ->capture_default_str()
      ->check(FiniteRange(0.01, 3600));
  f->cost.Register(cmd);  // as in compare: bytes of blocks events give none for, recompute
  cmd->add_option("--block-size", o.block_size, "tokens per block")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--max-message-bytes", o.max_message_bytes, "largest gRPC message accepted")
      ->capture_default_str()
      ->check(CLI::Range(1024u, 1u << 30));
  cmd->add_option("--max-events-per-batch", o.max_events_per_batch,
                  "events per EventBatch; a larger batch ends the stream (RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--max-candidates", o.max_candidates,
                  "candidates per Admit / RankEviction call (RESOURCE_EXHAUSTED above)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--max-streams", o.max_streams,
                  "ReportEvents streams open at once; one more is refused (RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--max-streams-per-peer", o.max_streams_per_peer,
                  "of those, open at once by one peer: the principal (token or client "
                  "certificate) with authentication, else the client's IP address (every "
                  "client on one machine is one peer); one more is refused "
                  "(RESOURCE_EXHAUSTED), so one client cannot hold every slot (0: no bound)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  cmd->add_option("--stream-idle-timeout-seconds", o.stream_idle_timeout_seconds,
                  "a ReportEvents stream that sends no batch for this long is ended "
                  "(UNAVAILABLE), freeing its slot for other reporters (0: never)")
      ->capture_default_str()
      ->check(FiniteRange(0, 86400));
  cmd->add_option("--shutdown-grace-seconds", o.shutdown_grace_seconds,
                  "on SIGINT/SIGTERM, how long calls in flight may run before they are cancelled")
      ->capture_default_str()
      ->check(FiniteRange(0, 3600));
  cmd->add_option("--pool-bytes", o.default_pool_bytes,
                  "capacity assumed for pools whose node sends no pool_configured event "
                  "(0: unbounded; only s3fifo and arc read it)")
      ->capture_default_str();
  cmd->add_option("--ghost-blocks", o.ghost_blocks,
                  "per pool, how many non-resident blocks are remembered at most; past it the "
                  "pool keeps only the most recently seen half (memory per pool: resident + "
                  "this many blocks, ~90 B each under lru; docs/sidecar.md, Bounded memory)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 32));
  cmd->add_option("--max-requests-in-flight", o.max_requests_in_flight,
                  "per pool, requests with an id between request_arrival and request_finished; "
                  "one more arrival is refused (RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--max-pinned-blocks", o.max_pinned_blocks,
                  "per pool, blocks the requests in flight pin (a block two requests share "
                  "counts twice); an arrival that would pin more is refused (RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  cmd->add_option("--request-timeout-seconds", o.request_timeout_seconds,
                  "a request still in flight this long after its arrival, by the timestamps of "
                  "its pool's events (not the wall clock, so a restart releases it at the same "
                  "event), is released as if finished (0: never)")
      ->capture_default_str()
      ->check(FiniteRange(0, 1e9));
  cmd->add_option("--max-nodes", o.max_nodes,
                  "distinct node ids the sidecar keeps pools for; a call or event for one more "
                  "is refused (RESOURCE_EXHAUSTED), at a restart too")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--snapshot-every-events", o.snapshot_every_events,
                  "write a snapshot of every pool to the log after this many accepted events, "
                  "with each policy's state, so a restart replays only what follows it and "
                  "decides as if it never stopped (0: never; replay then grows with the log; "
                  "docs/sidecar.md)")
      ->capture_default_str();
  cmd->add_flag("--strict-nodes", o.strict_nodes,
                "refuse nodes not listed in --nodes (NOT_FOUND) instead of creating them");
  cmd->add_option("--nodes", f->nodes, "comma-separated node ids accepted with --strict-nodes");
  cmd->add_option("--log-max-bytes", o.log_max_bytes,
                  "bound on retained event-log bytes (keys and values of events and journaled "
                  "decisions); past it the oldest are deleted down to 90%, and a restart still "
                  "starts from the latest snapshot, which lies inside what is kept while the "
                  "bound holds many --snapshot-every-events intervals (0: unbounded). The "
                  "default, 4 GiB, holds a day of a busy sidecar: 500 events a second x 86,400 "
                  "s x about 80 B per event with its share of the decision journal = 3.5 GB "
                  "(docs/sidecar.md, Event log)")
      ->capture_default_str();
  cmd->add_flag("--log-fsync", o.log_sync,
                "fsync the log on every batch and every journaled decision (survives power "
                "loss, not only process death; without it decisions are staged in a "
                "memory-mapped file and reach RocksDB with the next batch)");
  cmd->add_option("--tls-cert", o.tls_cert, "server certificate chain (PEM)");
  cmd->add_option("--tls-key", o.tls_key, "server private key (PEM)");
  cmd->add_option("--tls-client-ca", o.tls_client_ca,
                  "CA (PEM) that client certificates must chain to: mutual TLS");
  cmd->add_flag("--reflection", o.reflection,
                "serve gRPC server reflection (grpcurl's 'list' and 'describe'): the API's "
                "schema, to anyone who reaches --listen, without credentials; off by default");
  cmd->add_flag("--allow-insecure-remote", o.allow_insecure_remote,
                "allow plaintext on a non-loopback --listen address (callers must still "
                "authenticate, and their tokens then cross the network in the clear)");
  cmd->add_option("--auth-tokens", o.auth_tokens_file,
                  "principals and roles, one a line: 'TOKEN reporter NODE[,NODE...]' (or '*'), "
                  "'TOKEN operator', 'cert:CN ROLE [NODES]' for a client certificate; clients "
                  "send 'authorization: Bearer TOKEN'; re-read when the file changes (checked "
                  "once a second). Required, or --tls-client-ca, on a non-loopback --listen "
                  "(docs/sidecar.md, Authentication)");
  cmd->add_option("--model-dir", o.model_dir,
                  "ReloadModel (and --model) load files only from inside this directory; "
                  "without it ReloadModel is refused to callers not on this machine");
  cmd->add_option("--engine-events", o.engine_events,
                  "follow engines' own KV cache events (vLLM --kv-events-config, SGLang): "
                  "comma-separated [NODE=]tcp://HOST:PORT of their ZMQ PUB sockets; each "
                  "engine's stores and removals are applied to NODE's pools and logged "
                  "(docs/engine_events.md)");
  cmd->add_option("--engine-replay", o.engine_replay,
                  "the engines' replay (ZMQ ROUTER) sockets, in --engine-events order: at "
                  "start what came after the last batch logged, and a gap in an engine's "
                  "sequence numbers, are asked for there");
  cmd->add_option("--engine-topic", o.engine_topic,
                  "ZMQ topic prefix to subscribe to (default: every topic)");
  cmd->add_option("--nats", o.nats_url,
                  "also consume block events from NATS JetStream at nats://HOST:PORT: one "
                  "kvlearn.v1.EventBatch per message on subject PREFIX.NODE, through a durable "
                  "pull consumer, each message acknowledged once logged (docs/scale_out.md). "
                  "Without it nothing of NATS is used");
  cmd->add_option("--nats-stream", o.nats_stream,
                  "the JetStream stream; created (file storage, subjects PREFIX.>) if missing")
      ->capture_default_str();
  cmd->add_option("--nats-subject-prefix", o.nats_subject_prefix,
                  "subjects are PREFIX.NODE; a message's events must all be NODE's")
      ->capture_default_str();
  cmd->add_option("--nats-durable", o.nats_durable,
                  "the durable consumer's name (one per sidecar reading the stream)")
      ->capture_default_str();
  cmd->add_option("--replica-group", o.replica_group,
                  "serve as one replica of group NAME (needs --nats): membership in the "
                  "JetStream key-value bucket kvlearn-replicas-NAME, each serving node owned by "
                  "one live replica (rendezvous hashing); a call about another replica's node "
                  "is FAILED_PRECONDITION with the owner's address in trailing metadata "
                  "kvlearn-owner (docs/scale_out.md)");
  cmd->add_option("--advertise", o.replica_advertise,
                  "with --replica-group: HOST:PORT other replicas and clients dial to reach "
                  "this one; HOST alone (or HOST:0) takes the port --listen bound");
  cmd->add_option("--replica-name", o.replica_name,
                  "with --replica-group: this replica's name, 1..64 of [A-Za-z0-9_-] "
                  "(default: the advertised address with other characters made '-'); its "
                  "durable consumer is --nats-durable-NAME");
  cmd->add_option("--replica-ttl", o.replica_ttl_seconds,
                  "with --replica-group: seconds after its last heartbeat a replica that "
                  "stopped (killed, cut off) leaves the group and its nodes move; the "
                  "bucket's TTL, set by the replica that creates it")
      ->capture_default_str();
  cmd->add_option("--replica-heartbeat", o.replica_heartbeat_seconds,
                  "with --replica-group: seconds between heartbeats, each also a refresh of "
                  "the members (below --replica-ttl)")
      ->capture_default_str();
  cmd->add_option("--replica-snapshot-events", o.replica_snapshot_events,
                  "with --replica-group: publish a snapshot of an owned node's pools to "
                  "JetStream (stream <--nats-stream>_SNAPSHOTS) once this many of its events "
                  "were applied since its last one, so that a replica taking the node over "
                  "reads only the events after it (docs/scale_out.md); 0: never on a count")
      ->capture_default_str();
  cmd->add_option("--replica-snapshot-seconds", o.replica_snapshot_seconds,
                  "with --replica-group: also publish one this many seconds after a node's "
                  "last, if it had an event since; 0: never on the clock (both 0: this "
                  "replica publishes none)")
      ->check(FiniteRange(0, 86400))
      ->capture_default_str();
  return {cmd, [f] { return RunServe(*f); }};
}

}  // namespace kvlearn
