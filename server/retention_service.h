// kvlearn.v1.Retention implemented over NodePools (decisions), EventLog
// (durability) and SidecarMetrics. absl::Status errors from below become
// grpc::Status with the same code at this edge (the numeric codes agree).
//
// ReportEvents checks and applies each event; a refused event is counted in
// the summary with its code and a message naming the field, and the stream
// goes on. A batch over --max-events-per-batch ends the stream with
// RESOURCE_EXHAUSTED. Accepted events of a batch are appended to the log (one
// RocksDB entry) before the next batch is read, so every event counted in a
// returned summary is durable.
//
// Admit and RankEviction use gRPC's callback API: the decision (a few µs)
// runs inline on the thread that read the request, which saves the thread
// hand-off of the sync thread pool (measured: docs/performance.md, "Sidecar speed"). The other
// methods are sync: ReportEvents blocks on the log append.
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
#include "server/sidecar_metrics.h"

namespace kvlearn {

grpc::Status ToGrpcStatus(const absl::Status& status);

struct RetentionServiceLimits {
  uint32_t max_events_per_batch = 4096;
};

using RetentionServiceBase = v1::Retention::WithCallbackMethod_Admit<
    v1::Retention::WithCallbackMethod_RankEviction<v1::Retention::Service>>;

class RetentionService final : public RetentionServiceBase {
 public:
  // `reload` loads, validates and swaps a model and returns its version.
  using ReloadFn = std::function<absl::StatusOr<std::string>(const std::string& path)>;

  RetentionService(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                   RetentionServiceLimits limits, ReloadFn reload);

  grpc::Status ReportEvents(grpc::ServerContext* context,
                            grpc::ServerReader<v1::EventBatch>* reader,
                            v1::ReportSummary* summary) override;
  grpc::ServerUnaryReactor* Admit(grpc::CallbackServerContext* context,
                                  const v1::AdmitRequest* request,
                                  v1::AdmitResponse* response) override;
  grpc::ServerUnaryReactor* RankEviction(grpc::CallbackServerContext* context,
                                         const v1::RankRequest* request,
                                         v1::RankResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  grpc::Status ReloadModel(grpc::ServerContext* context, const v1::ReloadModelRequest* request,
                           v1::ReloadModelResponse* response) override;

  void set_model_version(const std::string& version);
  std::string model_version() const;

 private:
  grpc::Status DoAdmit(const v1::AdmitRequest& request, v1::AdmitResponse* response);
  grpc::Status DoRankEviction(const v1::RankRequest& request, v1::RankResponse* response);
  grpc::Status Finish(Rpc rpc, grpc::Status status);

  NodePools* pools_;
  EventLog* log_;
  SidecarMetrics* metrics_;
  RetentionServiceLimits limits_;
  ReloadFn reload_;
  const double start_seconds_;
  mutable absl::Mutex mu_;
  std::string model_version_;
};

}  // namespace kvlearn
