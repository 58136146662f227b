#include "server/retention_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/access_control.h"
#include "server/calls_in_flight.h"
#include "server/peer_stream_slots.h"
#include "server/raw_message.h"
#include "server/replica_ownership.h"
#include "server/report_events_reactor.h"

namespace kvlearn {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

RetentionService::RetentionService(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                                   ServingCounters* counters, RetentionServiceLimits limits,
                                   ReloadFn reload)
    : pools_(pools),
      log_(log),
      metrics_(metrics),
      counters_(counters),
      limits_(limits),
      reload_(std::move(reload)),
      start_seconds_(NowSeconds()) {}

void RetentionService::set_model_version(const std::string& version) {
  absl::MutexLock lock(&mu_);
  model_version_ = version;
}

std::string RetentionService::model_version() const {
  absl::MutexLock lock(&mu_);
  return model_version_;
}

template <typename Req, typename Resp, typename Fn>
grpc::ServerUnaryReactor* RetentionService::Unary(Rpc rpc, grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response, Fn&& fn) {
  CallsInFlight::Scope in_flight(calls_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Req parsed;
  grpc::Status status;
  // The caller is checked before its bytes are read, and again with the
  // nodes its request names.
  if (access_ != nullptr) status = ToGrpcStatus(access_->CheckCaller(*context, rpc));
  if (!status.ok()) {
    // Refused: the request is not read.
  } else if (auto st = ParseRawMessage(*request, &parsed, "request"); !st.ok()) {
    counters_->CountMalformed(rpc);
    status = ToGrpcStatus(st);
  } else {
    if (access_ != nullptr) status = ToGrpcStatus(access_->CheckRequest(*context, rpc, parsed));
    Resp out;
    if (status.ok()) status = fn(parsed, &out);
    if (status.ok()) status = ToGrpcStatus(SerializeRawMessage(out, response));
  }
  metrics_->CountRpc(rpc, static_cast<int>(status.error_code()));
  reactor->Finish(std::move(status));
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* RetentionService::ReportEvents(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  // A stream accepted below enters again for its own life (IngestEnv::calls).
  CallsInFlight::Scope in_flight(calls_);
  if (access_ != nullptr) {
    if (auto st = access_->CheckCaller(*context, Rpc::kReportEvents); !st.ok()) {
      metrics_->CountRpc(Rpc::kReportEvents, static_cast<int>(st.code()));
      return new RefusedStreamReactor(ToGrpcStatus(st));
    }
  }
  // Per peer first: a stream refused for its peer takes no global slot.
  std::string peer;
  if (peer_slots_ != nullptr) {
    peer = StreamPeer(*context, peers_by_principal_);
    if (!peer_slots_->TryOpen(peer)) {
      // Names the peer only by kind: the key may be a bearer token.
      grpc::Status refused(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("ReportEvents: this ", peers_by_principal_ ? "principal" : "address",
                       " has ", peer_slots_->max_per_peer(),
                       " streams open, the limit (--max-streams-per-peer); finish one or raise "
                       "--max-streams-per-peer"));
      metrics_->CountRpc(Rpc::kReportEvents, static_cast<int>(refused.error_code()));
      return new RefusedStreamReactor(std::move(refused));
    }
  }
  if (!counters_->TryOpenStream()) {
    if (peer_slots_ != nullptr) peer_slots_->Close(peer);
    grpc::Status refused(grpc::StatusCode::RESOURCE_EXHAUSTED,
                         absl::StrCat("ReportEvents: ", counters_->max_streams(),
                                      " streams are open, the limit (--max-streams); finish one "
                                      "or raise --max-streams"));
    metrics_->CountRpc(Rpc::kReportEvents, static_cast<int>(refused.error_code()));
    return new RefusedStreamReactor(std::move(refused));
  }
  IngestEnv env;
  env.pools = pools_;
  env.log = log_;
  env.metrics = metrics_;
  env.counters = counters_;
  env.max_events_per_batch = limits_.max_events_per_batch;
  env.stream_idle_timeout_seconds = limits_.stream_idle_timeout_seconds;
  env.peer_slots = peer_slots_;
  env.peer = std::move(peer);
  env.calls = calls_;
  if (access_ != nullptr) {
    env.authorize = [access = access_, context](const v1::EventBatch& batch) {
      return access->CheckRequest(*context, Rpc::kReportEvents, batch);
    };
  }
  return new ReportEventsReactor(env, response);
}

grpc::ServerUnaryReactor* RetentionService::Admit(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Unary<v1::AdmitRequest, v1::AdmitResponse>(
      Rpc::kAdmit, context, request, response,
      [this, context](const v1::AdmitRequest& r, v1::AdmitResponse* out) {
        if (grpc::Status st = CheckOwner(context, r.node_id()); !st.ok()) return st;
        return DoAdmit(r, out);
      });
}

grpc::ServerUnaryReactor* RetentionService::RankEviction(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return Unary<v1::RankRequest, v1::RankResponse>(
      Rpc::kRankEviction, context, request, response,
      [this, context](const v1::RankRequest& r, v1::RankResponse* out) {
        if (grpc::Status st = CheckOwner(context, r.node_id()); !st.ok()) return st;
        return DoRankEviction(r, out);
      });
}

grpc::ServerUnaryReactor* RetentionService::Decide(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<v1::DecideRequest, v1::DecideResponse>(
      Rpc::kDecide, context, request, response,
      [this](const v1::DecideRequest& r, v1::DecideResponse* out) { return DoDecide(r, out); });
}

grpc::ServerUnaryReactor* RetentionService::GetStatus(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Unary<v1::GetStatusRequest, v1::GetStatusResponse>(
      Rpc::kGetStatus, context, request, response,
      [this](const v1::GetStatusRequest&, v1::GetStatusResponse* out) { return DoGetStatus(out); });
}

grpc::ServerUnaryReactor* RetentionService::ReloadModel(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return Unary<v1::ReloadModelRequest, v1::ReloadModelResponse>(
      Rpc::kReloadModel, context, request, response,
      [this](const v1::ReloadModelRequest& r, v1::ReloadModelResponse* out) {
        return DoReloadModel(r, out);
      });
}

grpc::Status RetentionService::CheckOwner(grpc::CallbackServerContext* context,
                                          const std::string& node) {
  if (ownership_ == nullptr) return grpc::Status::OK;
  const ReplicaOwnership::Route route = ownership_->RouteOf(node);
  if (route.kind == ReplicaOwnership::Route::kServe) return grpc::Status::OK;
  if (context != nullptr && route.kind == ReplicaOwnership::Route::kRedirect) {
    context->AddTrailingMetadata(ReplicaOwnership::kOwnerMetadataKey, route.owner.address);
    context->AddTrailingMetadata(ReplicaOwnership::kOwnerNameMetadataKey, route.owner.name);
  }
  return ToGrpcStatus(ownership_->CallStatus(route, node));
}

grpc::Status RetentionService::DoAdmit(const v1::AdmitRequest& request,
                                       v1::AdmitResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto r = pools_->Admit(request);
  metrics_->ObserveDecision(
      Rpc::kAdmit, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.ok()) return ToGrpcStatus(r.status());
  for (const auto& d : r->decisions()) metrics_->CountAdmit(d.keep());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status RetentionService::DoRankEviction(const v1::RankRequest& request,
                                              v1::RankResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto r = pools_->RankEviction(request);
  metrics_->ObserveDecision(
      Rpc::kRankEviction,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.ok()) return ToGrpcStatus(r.status());
  metrics_->CountEvictionAdvice(r->victims_size());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status RetentionService::DoDecide(const v1::DecideRequest& request,
                                        v1::DecideResponse* response) {
  const uint32_t limit = pools_->options().max_candidates;
  if (static_cast<uint32_t>(request.decisions_size()) > limit) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("decisions: ", request.decisions_size(), " over the limit of ",
                                     limit, " (--max-candidates)"));
  }
  for (int i = 0; i < request.decisions_size(); ++i) {
    const v1::Decision& d = request.decisions(i);
    v1::DecisionResult* result = response->add_results();
    grpc::Status status;
    switch (d.kind_case()) {
      case v1::Decision::kAdmit:
        status = CheckOwner(nullptr, d.admit().node_id());
        if (status.ok()) status = DoAdmit(d.admit(), result->mutable_admit());
        break;
      case v1::Decision::kRank:
        status = CheckOwner(nullptr, d.rank().node_id());
        if (status.ok()) status = DoRankEviction(d.rank(), result->mutable_rank());
        break;
      default:
        status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "kind: no decision set");
    }
    if (!status.ok()) {
      result->clear_kind();
      result->set_code(status.error_code());
      result->set_message(absl::StrCat("decisions[", i, "].", status.error_message()));
    }
  }
  return grpc::Status::OK;
}

grpc::Status RetentionService::DoGetStatus(v1::GetStatusResponse* response) {
  // Under an experiment each pool names its own (PoolStatus.policy).
  response->set_policy(pools_->runs_experiment() ? "experiment" : pools_->policy_name());
  response->set_model_version(model_version());
  response->set_events_logged(metrics_->ingested_total());
  response->set_log_next_sequence(log_->next_sequence());
  response->set_log_bytes(log_->retained_bytes());
  response->set_uptime_seconds(NowSeconds() - start_seconds_);
  response->set_metrics_port(metrics_port_.load(std::memory_order_relaxed));
  pools_->FillStatus(*response);
  return grpc::Status::OK;
}

grpc::Status RetentionService::DoReloadModel(const v1::ReloadModelRequest& request,
                                             v1::ReloadModelResponse* response) {
  return ToGrpcStatus(reload_(request, response));
}

}  // namespace kvlearn
