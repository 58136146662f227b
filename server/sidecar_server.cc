#include "server/sidecar_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/engine_subscriber.h"
#include "models/learned_model.h"
#include "models/model_block_size.h"
#include "models/model_judgement.h"
#include "server/access_control.h"
#include "server/bound_metrics.h"
#include "server/engine_ingest.h"
#include "server/event_log.h"
#include "server/experiment_file.h"
#include "server/log_replay.h"
#include "server/metrics_http_server.h"
#include "server/model_loader.h"
#include "server/nats_ingest.h"
#include "server/node_pools.h"
#include "server/peer_stream_slots.h"
#include "server/pools_snapshot.h"
#include "server/replica_ownership.h"
#include "server/request_validation.h"
#include "server/retention_service.h"
#include "server/serving_counters.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {
namespace {

// Joins the replica group of `o` as the replica reachable at the bound port.
absl::StatusOr<std::unique_ptr<ReplicaGroup>> JoinReplicaGroup(const SidecarOptions& o,
                                                               int bound_port) {
  if (o.replica_group.size() > 48 || ReplicaNameOf(o.replica_group) != o.replica_group) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replica-group '", o.replica_group, "': 1..48 characters of [A-Za-z0-9_-]"));
  }
  auto address = AdvertisedAddress(o.replica_advertise, bound_port);
  if (!address.ok()) return address.status();
  ReplicaGroupOptions g;
  g.connection.url = o.nats_url;
  g.connection.name = "kvlearn serve (replica group)";
  g.bucket = absl::StrCat("kvlearn-replicas-", o.replica_group);
  g.name = o.replica_name.empty() ? ReplicaNameOf(*address) : o.replica_name;
  g.address = *address;
  g.ttl_seconds = o.replica_ttl_seconds;
  g.heartbeat_seconds = o.replica_heartbeat_seconds;
  return ReplicaGroup::Join(std::move(g));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Server reflection for one builder, on or off. Linking gRPC's reflection
// library registers its plugin for every server the process builds (a
// static initializer calls InitProtoReflectionServerBuilderPlugin), so off
// means removing that plugin from the builder, not merely not adding it.
class ReflectionOption : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool on) : on_(on) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    std::erase_if(*plugins, [&](const auto& plugin) { return plugin->name() == name; });
    if (on_) plugins->push_back(std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
  }

 private:
  const bool on_;
};

}  // namespace

const std::string& SidecarServer::policy() const { return pools_->policy_name(); }

absl::StatusOr<std::unique_ptr<SidecarServer>> SidecarServer::Start(const SidecarOptions& o) {
  std::unique_ptr<SidecarServer> s(new SidecarServer());
  s->options_ = o;
  if (o.data_dir.empty()) return absl::InvalidArgumentError("--data-dir is required");
  if (o.replica_group.empty() && (!o.replica_advertise.empty() || !o.replica_name.empty())) {
    return absl::InvalidArgumentError("--advertise and --replica-name need --replica-group");
  }
  if (!o.replica_group.empty() && o.nats_url.empty()) {
    return absl::InvalidArgumentError("--replica-group needs --nats (the group lives there)");
  }
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  if (tls && (o.tls_cert.empty() || o.tls_key.empty())) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!o.tls_client_ca.empty() && !tls) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  {
    std::string host;
    int port = 0;
    if (auto st = SplitHostPort(o.listen, host, port, "--listen"); !st.ok()) return st;
  }
  if (!IsLoopbackAddress(o.listen)) {
    const std::string where =
        absl::StrCat("--listen ", o.listen,
                     " is not a loopback address (its host must resolve only to 127.0.0.0/8 "
                     "or ::1)");
    if (o.auth_tokens_file.empty() && o.tls_client_ca.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where,
                       " and no caller would need credentials: give --auth-tokens FILE (and/or "
                       "--tls-client-ca PEM for mutual TLS), or listen on 127.0.0.1"));
    }
    if (!tls && !o.allow_insecure_remote) {
      return absl::FailedPreconditionError(absl::StrCat(
          where,
          ": give --tls-cert/--tls-key so tokens do not cross the network in plaintext, "
          "or --allow-insecure-remote to serve plaintext anyway"));
    }
  }
  if (!o.model_dir.empty()) {
    auto dir = ModelDirectory::Open(o.model_dir);
    if (!dir.ok()) return dir.status();
    s->model_dir_ = *std::move(dir);
  }
  AccessControlOptions access;
  access.tokens_file = o.auth_tokens_file;
  access.client_certificates = !o.tls_client_ca.empty();
  access.model_dir = s->model_dir_.has_value();
  access.reload_check_seconds = o.auth_reload_check_seconds;
  auto access_control = AccessControl::Start(std::move(access));
  if (!access_control.ok()) return access_control.status();
  s->access_ = *std::move(access_control);

  NodePoolsOptions pools;
  pools.cost = o.cost;
  if (pools.cost == nullptr) {
    auto model = FindModelProfile("llama3-8b");
    if (!model.ok()) return model.status();
    auto hw = FindHardwareProfile("a100");
    if (!hw.ok()) return hw.status();
    pools.cost = std::make_shared<CostModel>(*model, *hw);
  }
  pools.block_size = o.block_size;
  pools.strict_nodes = o.strict_nodes;
  pools.known_nodes = o.known_nodes;
  pools.max_candidates = o.max_candidates;
  pools.default_pool_bytes = o.default_pool_bytes;
  pools.ghost_blocks = o.ghost_blocks;
  pools.max_requests_in_flight = o.max_requests_in_flight;
  pools.max_pinned_blocks = o.max_pinned_blocks;
  pools.request_timeout_us = static_cast<int64_t>(o.request_timeout_seconds * 1e6);
  pools.max_nodes = o.max_nodes;
  pools.shadow_max_blocks = o.shadow_max_blocks;
  pools.resize_estimates = o.resize_estimates;
  pools.resize_max_blocks = o.resize_max_blocks;
  pools.policy = o.policy.empty() ? (o.model_path.empty() ? "lru" : "learned") : o.policy;
  std::string model_version;
  std::string model_path = o.model_path;
  if (!model_path.empty() && s->model_dir_) {
    auto inside = s->model_dir_->Resolve(model_path);
    if (!inside.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--model: ", inside.status().message()));
    }
    model_path = *inside;
    s->options_.model_path = model_path;
  }
  if (!model_path.empty()) {
    auto loaded = LoadModelForServing(model_path);
    if (loaded.ok()) {
      // A model of other blocks would judge other traffic: refused at start
      // (not served without it), as compare refuses it before a replay.
      if (auto st = CheckModelBlockSize((*loaded)->metadata(), o.block_size, o.model_path,
                                        "this sidecar counts");
          !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("--model: ", st.message()));
      }
      pools.model = *loaded;
      model_version = (*loaded)->version();
    } else {
      absl::StrAppend(&s->notes_, "cannot load model ", o.model_path, ": ",
                      loaded.status().message(), "\n");
    }
  }
  absl::Status checked = NodePools::CheckOptions(pools);
  if (!checked.ok() && pools.policy == "learned" && pools.model != nullptr) {
    // learned runs without a model, on its lru and gdsf experts.
    absl::StrAppend(&s->notes_, "policy 'learned' cannot use model ", o.model_path, " (",
                    checked.message(), "); serving learned without a model\n");
    pools.model = nullptr;
    model_version.clear();
    checked = NodePools::CheckOptions(pools);
  }
  if (auto st = checked; !st.ok()) {
    if (o.policy.empty() || pools.policy == "learned") {
      absl::StrAppend(&s->notes_, "policy '", pools.policy, "' unavailable (", st.message(),
                      "); serving lru\n");
      pools.policy = "lru";
      pools.model = nullptr;
      model_version.clear();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--policy: ", st.message()));
    }
  }
  const std::shared_ptr<const LearnedModel> start_model = pools.model;
  s->pools_ = std::make_unique<NodePools>(std::move(pools));
  if (!o.experiment_path.empty()) {
    // Before the replay, so every pool is rebuilt under its arm's policy.
    auto x = LoadExperimentFile(o.experiment_path, s->model_dir_ ? &*s->model_dir_ : nullptr,
                                o.data_dir, o.block_size);
    if (!x.ok()) return x.status();
    if (auto st = s->pools_->SetExperiment(*x); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(o.experiment_path, ": ", st.message()));
    }
  }

  EventLogOptions log_options;
  log_options.max_bytes = o.log_max_bytes;
  log_options.sync = o.log_sync;
  auto log = EventLog::Open(o.data_dir, log_options);
  if (!log.ok()) return log.status();
  s->log_ = std::move(*log);
  s->metrics_ = std::make_unique<SidecarMetrics>(o.block_size);
  s->metrics_->SetModelInfo(s->pools_->policy_name(), model_version);
  if (start_model != nullptr) {
    s->metrics_->SetModelMetadata(&start_model->metadata());
    s->SetUnfitNote(*start_model, o.model_path);
    if (!s->unfit_model_note().empty()) absl::StrAppend(&s->notes_, s->unfit_model_note(), "\n");
  }
  s->counters_ = std::make_unique<ServingCounters>(o.max_streams);

  // Rebuild every pool from the log before the port opens, so no call sees
  // a half-rebuilt pool.
  auto replay =
      ReplayEventLog(*s->log_, *s->pools_, o.replay_progress, o.replay_progress_interval_seconds);
  if (!replay.ok()) {
    return absl::Status(replay.status().code(),
                        absl::StrCat("--data-dir ", o.data_dir,
                                     ": cannot rebuild the pools: ", replay.status().message(),
                                     " (move the directory aside to start empty)"));
  }
  // From now on every decision that changes a pool is journaled.
  EventLog* journal = s->log_.get();
  s->pools_->SetDecisionJournal(
      [journal](std::string_view record) { return journal->AppendDecision(record); });
  s->metrics_->SetModelInfo(s->pools_->runs_experiment() ? "experiment" : s->pools_->policy_name(),
                            model_version);
  s->replayed_from_snapshot_ = replay->from_snapshot;
  s->replay_snapshot_sequence_ = replay->snapshot_sequence;
  s->accepted_base_ = s->pools_->events_accepted();
  s->sequence_base_ = s->log_->next_sequence();
  s->replayed_events_ = replay->events;
  s->replayed_decisions_ = replay->decisions;
  s->replay_seconds_ = replay->seconds;
  s->counters_->SetReplay(replay->events, replay->rejected, replay->decisions, replay->seconds);
  if (!replay->model_version.empty()) model_version = replay->model_version;
  if (!replay->model_note.empty()) {
    absl::StrAppend(&s->notes_, "event log replay: ", replay->model_note, "\n");
  }
  if (!replay->snapshot_note.empty()) {
    absl::StrAppend(&s->notes_, "event log replay: ", replay->snapshot_note, "\n");
  }
  if (replay->decisions_skipped > 0) {
    absl::StrAppend(&s->notes_, "event log replay: the log was trimmed by --log-max-bytes, so ",
                    replay->decisions_skipped,
                    " journaled decisions were not redone; the pools are rebuilt from the "
                    "retained events only\n");
  }
  if (replay->rejected > 0) {
    absl::StrAppend(&s->notes_, "event log replay: ", replay->rejected, " of ", replay->events,
                    " events refused (first: ", replay->first_rejection, ")",
                    s->log_->first_sequence() > 0
                        ? "; the log was trimmed by --log-max-bytes, so the pools are rebuilt "
                          "from the retained events only"
                        : "",
                    "\n");
  }

  RetentionServiceLimits limits;
  limits.max_events_per_batch = o.max_events_per_batch;
  limits.stream_idle_timeout_seconds = o.stream_idle_timeout_seconds;
  SidecarServer* self = s.get();
  s->service_ = std::make_unique<RetentionService>(
      s->pools_.get(), s->log_.get(), s->metrics_.get(), s->counters_.get(), limits,
      [self](const v1::ReloadModelRequest& r, v1::ReloadModelResponse* out) -> absl::Status {
        if (r.experiment()) {
          if (!r.path().empty()) {
            return absl::InvalidArgumentError("path: give a model path or experiment, not both");
          }
          auto arms = self->ReloadExperiment();
          if (!arms.ok()) return arms.status();
          out->set_experiment_arms(*arms);
          return absl::OkStatus();
        }
        std::string path = r.path();
        if (self->model_dir_) {
          auto inside = self->model_dir_->Resolve(path);
          if (!inside.ok()) return inside.status();
          path = *inside;
        }
        auto version = self->ReloadModel(path);
        if (!version.ok()) return version.status();
        out->set_model_version(*version);
        return absl::OkStatus();
      });
  if (!o.replica_group.empty()) {
    // Every call is UNAVAILABLE until the group is joined below.
    s->ownership_ = std::make_unique<ReplicaOwnership>();
    s->service_->set_replica_ownership(s->ownership_.get());
  }
  s->service_->set_model_version(model_version);
  s->service_->set_access_control(s->access_.get());
  s->service_->set_calls_in_flight(&s->calls_);
  s->peer_streams_ = std::make_unique<PeerStreamSlots>(o.max_streams_per_peer);
  s->service_->set_peer_stream_slots(s->peer_streams_.get(),
                                     !o.auth_tokens_file.empty() || !o.tls_client_ca.empty());

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (tls) {
    auto cert = ReadFile(o.tls_cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(o.tls_key, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!o.tls_client_ca.empty()) {
      auto ca = ReadFile(o.tls_client_ca, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<ReflectionOption>(o.reflection));
  // gRPC sets SO_REUSEPORT by default: a second server on the same port would
  // start and silently take half the connections. Without it the bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(o.listen, creds, &s->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  // Bounds the sync services' threads (reflection); every Retention method is
  // a callback method and holds no thread while it waits.
  grpc::ResourceQuota quota("kvlearn-serve");
  quota.SetMaxThreads(o.max_sync_threads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on ", o.listen));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->server_->GetHealthCheckService()->SetServingStatus("kvlearn.v1.Retention", true);

  if (o.snapshot_every_events > 0) {
    s->snapshot_thread_ = std::thread([self] {
      uint64_t last = self->pools_->events_accepted();
      std::unique_lock<std::mutex> lock(self->snapshot_mu_);
      while (!self->stop_snapshots_) {
        self->snapshot_wake_.wait_for(lock, std::chrono::milliseconds(100),
                                      [self] { return self->stop_snapshots_; });
        if (self->stop_snapshots_) break;
        const uint64_t now = self->pools_->events_accepted();
        if (now - last < self->options_.snapshot_every_events) continue;
        lock.unlock();
        // A failure (events in flight for 200 ms, a RocksDB error) is tried
        // again at the next tick; the log is intact either way.
        if (self->SnapshotNow().ok()) last = now;
        lock.lock();
      }
    });
  }

  if (!o.engine_events.empty()) {
    auto endpoints = ParseEngineEndpoints(o.engine_events, o.engine_replay);
    if (!endpoints.ok()) return endpoints.status();
    for (EngineEndpoint& e : *endpoints) {
      if (auto st = ValidateNodeId(e.node_id, absl::StrCat("--engine-events: node of ", e.endpoint,
                                                           " (name it: node=", e.endpoint, ")"));
          !st.ok()) {
        return st;
      }
      // Resume after the last batch logged; an engine with none is asked for
      // everything its replay socket still holds.
      auto logged = s->log_->LoggedEngineSequence(e.node_id);
      if (logged.ok()) {
        e.start_sequence = *logged + 1;
      } else if (!absl::IsNotFound(logged.status())) {
        absl::StrAppend(&s->notes_, logged.status().message(), "; engine ", e.node_id,
                        " is followed from sequence 0, so batches already logged may be logged "
                        "again\n");
      }
    }
    EngineMapping mapping;
    mapping.block_size = o.block_size;
    mapping.cost = s->pools_->options().cost.get();
    s->engine_ingest_ =
        std::make_unique<EngineIngest>(s->pools_.get(), s->log_.get(), s->metrics_.get(), mapping);
    EngineSubscriberOptions so;
    so.endpoints = *std::move(endpoints);
    so.topic = o.engine_topic;
    so.start_sequence = 0;  // of the engines with nothing logged
    EngineIngest* ingest = s->engine_ingest_.get();
    auto subscriber = EngineSubscriber::Start(
        std::move(so), [ingest](const std::string& node, uint64_t seq, EngineEventBatch& batch) {
          ingest->OnBatch(node, seq, &batch);
        });
    if (!subscriber.ok()) return subscriber.status();
    s->engine_subscriber_ = *std::move(subscriber);
  }

  if (!o.nats_url.empty()) {
    NatsIngestOptions nats;
    nats.connection.url = o.nats_url;
    nats.connection.name = "kvlearn serve";
    nats.stream = o.nats_stream;
    nats.subject_prefix = o.nats_subject_prefix;
    nats.durable = o.nats_durable;
    nats.max_events_per_batch = o.max_events_per_batch;
    if (s->ownership_ != nullptr) {
      auto group = JoinReplicaGroup(o, s->port_);
      if (!group.ok()) {
        s->Shutdown();
        return group.status();
      }
      nats.durable = absl::StrCat(o.nats_durable, "-", (*group)->name());
      nats.ownership = s->ownership_.get();
      nats.snapshot_every_events = o.replica_snapshot_events;
      nats.snapshot_every_seconds = o.replica_snapshot_seconds;
      // A node restored from JetStream enters the local log through this.
      nats.snapshot_local = [self] { return self->SnapshotNow(); };
      s->ownership_->Attach(*std::move(group));
    }
    auto ingest = NatsIngest::Start(std::move(nats), s->pools_.get(), s->log_.get(),
                                    s->metrics_.get(), &s->notes_);
    if (!ingest.ok()) {
      s->Shutdown();
      return ingest.status();
    }
    s->nats_ingest_ = *std::move(ingest);
  }

  if (!o.metrics_listen.empty()) {
    std::string host;
    int port = 0;
    if (auto st = SplitHostPort(o.metrics_listen, host, port, "--metrics-listen"); !st.ok()) {
      s->Shutdown();
      return st;
    }
    MetricsHttpOptions http;
    http.host = host;
    http.port = port;
    http.max_connections = o.metrics_max_connections;
    http.request_timeout_seconds = o.metrics_request_timeout_seconds;
    auto started = MetricsHttpServer::Start(http, [self](const MetricsHttpServer& server) {
      MetricsGauges g;
      const PoolCounters& c = self->pools_->counters();
      g.pools = c.shards.load(std::memory_order_relaxed);
      g.blocks_tracked = c.blocks_tracked.load(std::memory_order_relaxed);
      g.resident_blocks = c.resident_blocks.load(std::memory_order_relaxed);
      g.resident_bytes = c.resident_bytes.load(std::memory_order_relaxed);
      g.policy_states_refused = c.policy_states_refused.load(std::memory_order_relaxed);
      g.log_bytes = self->log_->retained_bytes();
      g.log_trimmed_bytes = self->log_->trimmed_bytes();
      g.log_decision_waits = self->log_->decision_waits();
      g.log_next_sequence = self->log_->next_sequence();
      std::string engines;
      if (self->engine_ingest_) {
        engines = self->engine_ingest_->Render(self->engine_subscriber_->Stats());
      }
      return self->metrics_->Render(g) + self->counters_->Render() + self->peer_streams_->Render() +
             self->access_->Render() +
             RenderBoundMetrics(self->pools_->counters(), *self->log_, server) + engines +
             self->pools_->costs().Render() + self->pools_->resize_estimates().Render() +
             (self->nats_ingest_ ? self->nats_ingest_->Render() : "");
    });
    if (!started.ok()) {
      s->Shutdown();
      return started.status();
    }
    s->metrics_http_ = *std::move(started);
    s->metrics_port_ = s->metrics_http_->port();
    s->service_->set_metrics_port(s->metrics_port_);
  }
  return s;
}

absl::StatusOr<std::string> SidecarServer::ReloadExperiment() {
  if (options_.experiment_path.empty()) {
    return absl::FailedPreconditionError("this sidecar runs no --experiment file to reload");
  }
  auto x = LoadExperimentFile(options_.experiment_path, model_dir_ ? &*model_dir_ : nullptr,
                              options_.data_dir, options_.block_size);
  absl::Status st = x.ok() ? pools_->SetExperiment(*x) : x.status();
  metrics_->CountReload(st.ok());
  if (!st.ok()) return st;
  return DescribeArms(**x);
}

std::string SidecarServer::experiment_arms() const { return DescribeArms(*pools_->experiment()); }

absl::StatusOr<std::string> SidecarServer::ReloadModel(const std::string& path) {
  if (pools_->runs_experiment()) {
    metrics_->CountReload(false);
    return absl::FailedPreconditionError(
        "this sidecar runs --experiment: its arms name their models; edit the file and reload "
        "it (SIGHUP, or ReloadModel with experiment set)");
  }
  auto model = LoadModelForServing(path);
  if (model.ok()) {
    if (auto st = CheckModelBlockSize((*model)->metadata(), options_.block_size, path,
                                      "this sidecar counts");
        !st.ok()) {
      model = st;
    }
  }
  if (!model.ok()) {
    metrics_->CountReload(false);
    return model.status();
  }
  if (auto st = pools_->SwapModel(*model, path); !st.ok()) {
    metrics_->CountReload(false);
    return absl::FailedPreconditionError(
        absl::StrCat("policy '", pools_->policy_name(), "' cannot take a model: ", st.message()));
  }
  const std::string version = (*model)->version();
  service_->set_model_version(version);
  metrics_->SetModelInfo(pools_->policy_name(), version);
  metrics_->SetModelMetadata(&(*model)->metadata());
  SetUnfitNote(**model, path);
  metrics_->CountReload(true);
  return version;
}

void SidecarServer::SetUnfitNote(const LearnedModel& model, const std::string& path) {
  absl::MutexLock lock(&unfit_mu_);
  unfit_note_ = UnfitModelLine(model.metadata(), path);
}

std::string SidecarServer::unfit_model_note() const {
  absl::MutexLock lock(&unfit_mu_);
  return unfit_note_;
}

absl::Status SidecarServer::SnapshotNow() {
  PoolsSnapshot snapshot;
  uint64_t sequence = 0, decision = 0;
  // Consistent when every event the pools accepted is in the log: events
  // are applied before their batch is appended, so a batch in flight shows
  // as more accepted than logged. The pools are held meanwhile, so nothing
  // is applied or decided; appends in flight finish. Events whose append
  // failed (a full disk) were applied but never logged: counted on the
  // log's side, so snapshots resume once the log takes writes again (the
  // snapshot then keeps their effect, as the running pools do).
  const auto ready = [&] {
    sequence = log_->next_sequence();
    decision = log_->next_decision();
    return pools_->events_accepted() - accepted_base_ ==
           sequence + log_->refused_events() - sequence_base_;
  };
  bool captured = false;
  for (int attempt = 0; attempt < 200 && !captured; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    captured = pools_->CaptureAll(ready, &snapshot);
  }
  if (!captured) {
    return absl::UnavailableError("snapshot: events kept arriving between apply and log");
  }
  if (auto st = log_->WriteSnapshot(sequence, decision, EncodePoolsSnapshot(snapshot)); !st.ok()) {
    return st;
  }
  snapshots_written_.fetch_add(1);
  return absl::OkStatus();
}

uint32_t SidecarServer::open_streams() const { return counters_->open_streams(); }

uint64_t SidecarServer::engine_events_applied() const {
  return engine_ingest_ ? engine_ingest_->applied() : 0;
}
uint64_t SidecarServer::engine_events_rejected() const {
  return engine_ingest_ ? engine_ingest_->rejected() : 0;
}

void SidecarServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (snapshot_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(snapshot_mu_);
      stop_snapshots_ = true;
    }
    snapshot_wake_.notify_all();
    snapshot_thread_.join();
  }
  // The engine subscriber writes to the log: it stops first (bounded, it
  // polls every 100 ms).
  if (engine_subscriber_) engine_subscriber_->Stop();
  if (engine_ingest_) engine_ingest_->Stop();  // applies and logs what it queued
  if (nats_ingest_) nats_ingest_->Stop();      // the same, and acknowledges it
  if (ownership_) ownership_->Leave();         // the others take its nodes at once
  if (metrics_http_) metrics_http_->Stop();
  if (server_) {
    // Without a deadline gRPC waits for every call to end on its own, and an
    // idle ReportEvents stream never does: the shutdown hung with the
    // RocksDB lock held. After the deadline gRPC cancels what is left; each
    // stream's pending read then fails and it finishes (a stream's batch in
    // progress completes its log append first).
    const auto deadline =
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(options_.shutdown_grace_seconds * 1000));
    server_->Shutdown(deadline);
    // gRPC's Shutdown returns once every call is done, but orders that
    // inside libgrpc; this wait makes every handler's and stream's last use
    // of the log, pools and metrics happen before they are closed and
    // destroyed, in a way ThreadSanitizer sees too (server/calls_in_flight.h).
    // Bounded, in case of a gRPC surprise.
    calls_.WaitUntilNone(std::chrono::seconds(10));
  }
  log_.reset();
}

void SidecarServer::Wait() {
  if (server_) server_->Wait();
}

SidecarServer::~SidecarServer() {
  Shutdown();
  server_.reset();
  log_.reset();
}

}  // namespace kvlearn
