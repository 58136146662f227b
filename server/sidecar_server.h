// `kvlearn serve` as a library: the gRPC server (kvlearn.v1.Retention, the
// standard grpc.health.v1.Health service, server reflection when asked), the RocksDB
// event log, the Prometheus /metrics endpoint and model hot reload, wired
// together from SidecarOptions. Tests start it in-process on port 0.
//
// At start the event log (events and journaled decisions) is replayed through
// the pools, so every pool's state is what it was before the stop or kill -9
// (server/log_replay.h); the port opens after that. Each engine of
// engine_events is then followed from the sequence after the last one logged
// (server/engine_ingest.h); a damaged record of it is a startup_notes() line,
// and that engine is followed from 0. With nats_url, block events are also
// consumed from a JetStream stream (server/nats_ingest.h); without it
// nothing of NATS is touched. With replica_group too, the sidecar is one
// replica of a group sharing the nodes (server/replica_ownership.h): it
// joins once its port is open, applies the stream's events of the nodes it
// follows, and redirects calls about another replica's node.
//
// A listen address that is not loopback (server/loopback_address.h) needs
// callers to authenticate: auth_tokens_file and/or tls_client_ca
// (server/access_control.h); and TLS (tls_cert/tls_key) unless
// allow_insecure_remote. With tls_client_ca the server requires and verifies
// client certificates (mutual TLS). With model_dir, ReloadModel loads files
// only from inside it (server/model_directory.h); without, only for callers
// on this machine.
//
// Thread-safety: ReloadModel, Shutdown and the accessors may be called from
// any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cost_model.h"
#include "server/calls_in_flight.h"
#include "server/loopback_address.h"
#include "server/model_directory.h"

namespace grpc {
class Server;
}

namespace kvlearn {

class AccessControl;
class EngineIngest;
class LearnedModel;
class EngineSubscriber;
class EventLog;
class MetricsHttpServer;
class NatsIngest;
class ReplicaOwnership;
class NodePools;
class PeerStreamSlots;
class RetentionService;
class ServingCounters;
class SidecarMetrics;

struct SidecarOptions {
  std::string listen = "127.0.0.1:50051";  // port 0 picks a free one (see port())
  std::string data_dir;                    // RocksDB event log; required
  std::string policy;                      // empty: "learned" with a model, else "lru"
  std::string model_path;
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no /metrics
  // /metrics connections open at once (one more closes the oldest still
  // sending its request), and how long one may take from accept to the end
  // of its answer (server/metrics_http_server.h).
  int metrics_max_connections = 64;
  double metrics_request_timeout_seconds = 5;
  // Bytes of blocks whose events give none, and every block's recompute
  // cost (GDSF reads it): use compare's cost flags. nullptr: llama3-8b on a100.
  std::shared_ptr<const CostModel> cost;
  uint32_t block_size = 512;
  // Limits (docs/sidecar.md, "Limits").
  uint32_t max_message_bytes = 4 << 20;
  uint32_t max_events_per_batch = 4096;
  uint32_t max_candidates = 1024;
  // ReportEvents streams open at once; one more gets RESOURCE_EXHAUSTED.
  uint32_t max_streams = 1024;
  // Of those, open at once by one peer (server/peer_stream_slots.h: the
  // principal with authentication, else the IP address); 0 = no bound.
  uint32_t max_streams_per_peer = 256;
  // A ReportEvents stream that sends no batch for this long is ended with
  // UNAVAILABLE, freeing its slot; 0 = never.
  double stream_idle_timeout_seconds = 300;
  // Shutdown waits this long for calls in flight, then cancels them.
  double shutdown_grace_seconds = 5;
  // Threads for the sync services (reflection); their calls beyond it get
  // RESOURCE_EXHAUSTED. The kvlearn.v1.Retention methods use no such thread.
  int max_sync_threads = 64;
  // Capacity of pools whose node sends no pool_configured event (0 = unbounded).
  uint64_t default_pool_bytes = 0;
  // Per pool, remembered blocks that are not resident (NodePoolsOptions).
  uint64_t ghost_blocks = uint64_t{1} << 18;
  // Bounds of NodePoolsOptions: requests in flight and the blocks they pin
  // per pool, the event-clock timeout of a request that never finishes
  // (0 = none), and distinct nodes.
  uint32_t max_requests_in_flight = 65536;
  uint64_t max_pinned_blocks = uint64_t{1} << 20;
  double request_timeout_seconds = 600;
  uint32_t max_nodes = 4096;
  bool strict_nodes = false;
  absl::flat_hash_set<std::string> known_nodes;
  // Retained event-log bytes (EventLogOptions::max_bytes); 0 = unbounded.
  // 4 GiB: a day of a busy sidecar (`kvlearn serve --help` and
  // docs/sidecar.md give the arithmetic).
  uint64_t log_max_bytes = uint64_t{4} << 30;
  // A snapshot of every pool is written to the log once this many events
  // were accepted since the last (checked every 100 ms); 0 = never. Restart
  // replays only what follows the latest (server/log_replay.h).
  uint64_t snapshot_every_events = 1'000'000;
  bool log_sync = false;
  std::string tls_cert, tls_key, tls_client_ca;  // PEM file paths
  bool allow_insecure_remote = false;
  std::string auth_tokens_file;  // principals and roles; empty: none
  double auth_reload_check_seconds = 1.0;
  std::string model_dir;  // empty: ReloadModel only from loopback peers
  // A/B experiment file (server/experiment_file.h); empty: one arm, --policy.
  std::string experiment_path;
  // Blocks all shadow pools together may remember (server/shadow_pool.h).
  uint64_t shadow_max_blocks = uint64_t{1} << 24;
  // Ghost pools at 0.5x and 2x each pool (server/resize_estimates.h), and
  // the blocks they may remember together.
  bool resize_estimates = false;
  uint64_t resize_max_blocks = uint64_t{1} << 24;
  // Called every replay_progress_interval_seconds (checked every 4096
  // events) while the event log is replayed at start (events done, events to
  // replay, seconds so far); nullptr: silent.
  std::function<void(uint64_t done, uint64_t total, double seconds)> replay_progress;
  double replay_progress_interval_seconds = 1.0;
  // Engines' own KV cache event streams (vLLM / SGLang ZMQ PUB), as
  // "[node=]tcp://host:port,...", and their replay (ROUTER) sockets in the
  // same order; empty: none (engine/engine_subscriber.h, server/engine_ingest.h).
  std::string engine_events;
  std::string engine_replay;
  std::string engine_topic;  // ZMQ subscription prefix; empty: every topic
  // NATS JetStream block events (server/nats_ingest.h): empty nats_url means
  // none, and nothing of NATS is touched.
  std::string nats_url;
  std::string nats_stream = "KVLEARN_EVENTS";
  std::string nats_subject_prefix = "kvlearn.events";
  std::string nats_durable = "kvlearn-serve";
  // A group of replicas sharing the nodes (docs/scale_out.md); empty: none.
  // REQUIRES nats_url. Its membership bucket is "kvlearn-replicas-GROUP".
  std::string replica_group;
  // What other replicas and clients dial to reach this one: HOST:PORT, or
  // HOST (or HOST:0) for the port `listen` bound. Required with a group.
  std::string replica_advertise;
  // This replica's name in the group ([A-Za-z0-9_-], at most 64); empty: the
  // advertised address with every other character made '-'. Its durable
  // consumer is nats_durable + "-" + the name.
  std::string replica_name;
  double replica_ttl_seconds = 3;
  double replica_heartbeat_seconds = 1;
  // Snapshots of each owned node kept in JetStream (server/nats_ingest.h):
  // every this many of its events, or seconds with at least one; 0: off.
  uint64_t replica_snapshot_events = 500'000;
  double replica_snapshot_seconds = 300;
  // Serve grpc.reflection.v1alpha.ServerReflection (the API's schema, to
  // anyone who reaches the port, without credentials). Off unless asked.
  bool reflection = false;
};

class SidecarServer {
 public:
  // Opens the log, builds the policy (falling back to lru, with a warning in
  // startup_notes(), when the model cannot be loaded) and starts listening.
  static absl::StatusOr<std::unique_ptr<SidecarServer>> Start(const SidecarOptions& options);
  ~SidecarServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  const std::string& policy() const;
  // --model as loaded (inside --model-dir, canonical, when that is given).
  const std::string& model_path() const { return options_.model_path; }
  // What start-up decided that an operator should read (model fallback, an
  // unfit model...).
  const std::string& startup_notes() const { return notes_; }
  // One line when the model serving is marked unfit (UnfitModelLine), else
  // empty; set at start and by every successful ReloadModel.
  std::string unfit_model_note() const;

  // Refusals and reloads of the --auth-tokens file (nullptr before Start).
  const AccessControl* access_control() const { return access_.get(); }

  // Loads `path`, validates it and swaps it into every pool's policy; on
  // failure the current model keeps serving. Returns the new version. The
  // swap is journaled (path and version) before it takes effect, so a
  // restart swaps at the same place (server/log_replay.h says what happens
  // when the file is gone or changed by then).
  absl::StatusOr<std::string> ReloadModel(const std::string& path);
  // Reads the experiment file again and runs it (NodePools::SetExperiment
  // says what each pool keeps); on failure the current experiment keeps
  // running. Returns DescribeArms of the new one. FAILED_PRECONDITION
  // without --experiment. Not journaled: a restart replays the log under the
  // file as it is then.
  absl::StatusOr<std::string> ReloadExperiment();
  const std::string& experiment_path() const { return options_.experiment_path; }
  // DescribeArms of the experiment running now (server/experiment_file.h).
  std::string experiment_arms() const;

  // What the start-up replay of the event log did.
  uint64_t replayed_events() const { return replayed_events_; }
  uint64_t replayed_decisions() const { return replayed_decisions_; }
  double replay_seconds() const { return replay_seconds_; }
  // Whether the start-up replay began from a snapshot, and its sequence.
  bool replayed_from_snapshot() const { return replayed_from_snapshot_; }
  uint64_t replay_snapshot_sequence() const { return replay_snapshot_sequence_; }
  // Captures every pool and writes the snapshot to the log, if every event
  // applied is logged at that instant (else retries for up to ~200 ms, then
  // UNAVAILABLE). Called by the snapshot thread; tests call it directly.
  absl::Status SnapshotNow();
  uint64_t snapshots_written() const { return snapshots_written_.load(); }
  // ReportEvents streams open now.
  uint32_t open_streams() const;
  // kvlearn events from engine streams applied and logged, and refused.
  uint64_t engine_events_applied() const;
  uint64_t engine_events_rejected() const;
  // The NATS ingest when --nats was given, else nullptr.
  const NatsIngest* nats_ingest() const { return nats_ingest_.get(); }
  // The replica group's view when replica_group was given, else nullptr.
  const ReplicaOwnership* replica_ownership() const { return ownership_.get(); }

  // Stops accepting calls, lets the ones in flight finish for
  // shutdown_grace_seconds, then cancels the rest (idle streams included),
  // waits for every call to end and closes the log. Bounded: it returns
  // shortly after the grace period whatever the clients do.
  void Shutdown();
  // Blocks until Shutdown (from another thread).
  void Wait();

 private:
  SidecarServer() = default;
  void SetUnfitNote(const LearnedModel& model, const std::string& path);

  SidecarOptions options_;
  // Declared before what the calls use, so it is destroyed after them.
  CallsInFlight calls_;
  std::string notes_;
  mutable absl::Mutex unfit_mu_;
  std::string unfit_note_ ABSL_GUARDED_BY(unfit_mu_);
  std::unique_ptr<EventLog> log_;
  std::unique_ptr<SidecarMetrics> metrics_;
  std::unique_ptr<ServingCounters> counters_;
  std::unique_ptr<NodePools> pools_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<PeerStreamSlots> peer_streams_;
  std::optional<ModelDirectory> model_dir_;
  // Before the service: the calls use it.
  std::unique_ptr<ReplicaOwnership> ownership_;
  std::unique_ptr<RetentionService> service_;
  std::unique_ptr<EngineIngest> engine_ingest_;
  std::unique_ptr<EngineSubscriber> engine_subscriber_;
  std::unique_ptr<NatsIngest> nats_ingest_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  int port_ = 0;
  int metrics_port_ = 0;
  uint64_t replayed_events_ = 0;
  uint64_t replayed_decisions_ = 0;
  double replay_seconds_ = 0;
  bool shut_down_ = false;
  bool replayed_from_snapshot_ = false;
  uint64_t replay_snapshot_sequence_ = 0;
  // Events accepted by the pools and the log's next sequence when serving
  // began: every accepted event is logged when their growths are equal.
  uint64_t accepted_base_ = 0;
  uint64_t sequence_base_ = 0;
  std::atomic<uint64_t> snapshots_written_{0};
  std::thread snapshot_thread_;
  // Wakes the snapshot thread to stop. A std::mutex, not absl::Mutex: a timed
  // wait inside Debian's uninstrumented Abseil unlocks where ThreadSanitizer
  // cannot see it (the CI tsan stage); std::condition_variable it intercepts.
  std::mutex snapshot_mu_;
  std::condition_variable snapshot_wake_;
  bool stop_snapshots_ = false;  // guarded by snapshot_mu_
};

}  // namespace kvlearn
