// kvlearn.v1.Retention implemented over NodePools (decisions), EventLog
// (durability) and SidecarMetrics. absl::Status errors from below become
// grpc::Status with the same code at this edge (the numeric codes agree).
//
// Every method is a raw callback method (gRPC's callback API over
// ByteBuffers):
//  - callback, so no call holds a thread while it waits: an idle ReportEvents
//    stream costs its buffers, not a thread (before, the sync API's thread
//    pool grew one thread per open stream). Admit and RankEviction decide
//    inline on the thread that read the request (a few µs), which also saves
//    the sync pool's thread hand-off (docs/performance.md, "Sidecar speed").
//  - raw, so the service parses the bytes itself: garbage is INVALID_ARGUMENT
//    naming the message type and counted in kvlearn_malformed_messages_total
//    (gRPC's own deserialization gives UNIMPLEMENTED with no message, and ends
//    a client stream as if it were complete). See server/raw_message.h.
//
// ReportEvents (server/report_events_reactor.h) checks and applies each
// event; a refused event is counted in the summary with its code and a message
// naming the field, and the stream goes on. A batch that does not parse ends
// the stream with INVALID_ARGUMENT, one over --max-events-per-batch with
// RESOURCE_EXHAUSTED. At most --max-streams streams are open at once; one more
// is refused with RESOURCE_EXHAUSTED naming the flag. Accepted events of a batch
// are appended to the log (one RocksDB entry) before the next batch is read,
// so every event counted in a returned summary is durable.
//
// With an AccessControl (set_access_control), every call is authenticated
// and authorized first (server/access_control.h): a unary call before its
// request is parsed and again with it, a stream when it opens and then each
// batch (a refused batch ends the stream with its status, nothing of it
// applied).
//
// With a ReplicaOwnership (set_replica_ownership), Admit and RankEviction
// about a node another replica owns are FAILED_PRECONDITION with the owner's
// address in trailing metadata "kvlearn-owner" (and its name in
// "kvlearn-owner-name"); a node this replica is still rebuilding, or any
// node while it joins, is UNAVAILABLE. Each decision of Decide is routed the
// same way, its result carrying the code and a message naming the owner.
//
// ReloadModel loads a model file, or the experiment file, inline (an admin
// call, rare; it blocks one gRPC callback thread for the load).
//
// Thread-safety: gRPC calls the methods concurrently; all state below is
// thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "kvlearn/v1/retention.grpc.pb.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/serving_counters.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {

class AccessControl;
class CallsInFlight;
class PeerStreamSlots;
class ReplicaOwnership;

grpc::Status ToGrpcStatus(const absl::Status& status);

struct RetentionServiceLimits {
  uint32_t max_events_per_batch = 4096;
  double stream_idle_timeout_seconds = 0;  // 0: idle streams are never ended
};

using RetentionServiceBase = v1::Retention::WithRawCallbackMethod_ReportEvents<
    v1::Retention::WithRawCallbackMethod_Admit<v1::Retention::WithRawCallbackMethod_RankEviction<
        v1::Retention::WithRawCallbackMethod_Decide<v1::Retention::WithRawCallbackMethod_GetStatus<
            v1::Retention::WithRawCallbackMethod_ReloadModel<v1::Retention::Service>>>>>>;

class RetentionService final : public RetentionServiceBase {
 public:
  // `reload` does what ReloadModel asks (a model, or the experiment) and
  // fills its answer.
  using ReloadFn = std::function<absl::Status(const v1::ReloadModelRequest& request,
                                              v1::ReloadModelResponse* response)>;

  RetentionService(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                   ServingCounters* counters, RetentionServiceLimits limits, ReloadFn reload);

  grpc::ServerReadReactor<grpc::ByteBuffer>* ReportEvents(grpc::CallbackServerContext* context,
                                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Admit(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RankEviction(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // Many Admit / RankEviction decisions in one call: each decided (and
  // journaled) exactly as the single call would be, in order; one failing
  // does not stop the others. More than --max-candidates decisions is
  // RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* Decide(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReloadModel(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  void set_model_version(const std::string& version);
  std::string model_version() const;
  // The /metrics port GetStatus reports (0: none); set once /metrics listens,
  // which is after the gRPC server starts.
  void set_metrics_port(int port) { metrics_port_.store(port, std::memory_order_relaxed); }
  // REQUIRES: before the server starts; `access` outlives the service.
  void set_access_control(AccessControl* access) { access_ = access; }
  // Bounds ReportEvents streams per peer (server/peer_stream_slots.h), a
  // peer being a principal when `by_principal` (callers authenticate), else
  // an IP address; nullptr: no bound.
  void set_peer_stream_slots(PeerStreamSlots* slots, bool by_principal) {
    peer_slots_ = slots;
    peers_by_principal_ = by_principal;
  }
  // Every call enters `calls` while it uses the objects above
  // (server/calls_in_flight.h); REQUIRES: before the server starts.
  void set_calls_in_flight(CallsInFlight* calls) { calls_ = calls; }
  // Routes calls among a replica group (see above); REQUIRES: before the
  // server starts; `ownership` outlives the service.
  void set_replica_ownership(const ReplicaOwnership* ownership) { ownership_ = ownership; }

 private:
  // Parses the request as Req, runs `fn(request, &response)`, serializes the
  // response, counts the call and finishes it on the default reactor.
  template <typename Req, typename Resp, typename Fn>
  grpc::ServerUnaryReactor* Unary(Rpc rpc, grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                  Fn&& fn);

  // OK when `node` is served here; else the status to answer (and, with a
  // `context`, the owner's address added to its trailing metadata).
  grpc::Status CheckOwner(grpc::CallbackServerContext* context, const std::string& node);
  grpc::Status DoAdmit(const v1::AdmitRequest& request, v1::AdmitResponse* response);
  grpc::Status DoRankEviction(const v1::RankRequest& request, v1::RankResponse* response);
  grpc::Status DoDecide(const v1::DecideRequest& request, v1::DecideResponse* response);
  grpc::Status DoGetStatus(v1::GetStatusResponse* response);
  grpc::Status DoReloadModel(const v1::ReloadModelRequest& request,
                             v1::ReloadModelResponse* response);

  NodePools* pools_;
  EventLog* log_;
  SidecarMetrics* metrics_;
  ServingCounters* counters_;
  RetentionServiceLimits limits_;
  ReloadFn reload_;
  AccessControl* access_ = nullptr;  // nullptr: every call passes
  PeerStreamSlots* peer_slots_ = nullptr;
  bool peers_by_principal_ = false;
  CallsInFlight* calls_ = nullptr;
  const ReplicaOwnership* ownership_ = nullptr;  // nullptr: every node is served here
  const double start_seconds_;
  std::atomic<int> metrics_port_{0};
  mutable absl::Mutex mu_;
  std::string model_version_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
