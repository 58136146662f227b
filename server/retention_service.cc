#include "server/retention_service.h"

#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

constexpr int kMaxListedRejections = 100;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

RetentionService::RetentionService(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                                   RetentionServiceLimits limits, ReloadFn reload)
    : pools_(pools),
      log_(log),
      metrics_(metrics),
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

grpc::Status RetentionService::Finish(Rpc rpc, grpc::Status status) {
  metrics_->CountRpc(rpc, static_cast<int>(status.error_code()));
  return status;
}

grpc::Status RetentionService::ReportEvents(grpc::ServerContext* context,
                                            grpc::ServerReader<v1::EventBatch>* reader,
                                            v1::ReportSummary* summary) {
  v1::EventBatch batch;
  std::vector<std::string> values;
  uint32_t batch_index = 0;
  bool any_logged = false;
  while (reader->Read(&batch)) {
    if (static_cast<uint32_t>(batch.events_size()) > limits_.max_events_per_batch) {
      return Finish(
          Rpc::kReportEvents,
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("events: batch ", batch_index, " has ", batch.events_size(),
                                    " events, over the limit of ", limits_.max_events_per_batch,
                                    " (--max-events-per-batch); earlier batches (",
                                    summary->accepted(), " events) were logged")));
    }
    size_t accepted = 0;
    for (int i = 0; i < batch.events_size(); ++i) {
      const v1::Event& e = batch.events(i);
      const absl::Status s = pools_->Apply(e);
      if (s.ok()) {
        if (values.size() <= accepted) values.emplace_back();
        e.SerializeToString(&values[accepted++]);  // reuses the string's buffer
        const int kind = static_cast<int>(e.kind_case()) - v1::Event::kRequestArrival;
        metrics_->CountIngested(kind);
        continue;
      }
      summary->set_rejected(summary->rejected() + 1);
      const std::string code = absl::StatusCodeToString(s.code());
      (*summary->mutable_rejected_by_code())[code]++;
      metrics_->CountRejected(static_cast<int>(s.code()));
      if (summary->rejections_size() < kMaxListedRejections) {
        auto* r = summary->add_rejections();
        r->set_batch(batch_index);
        r->set_event(static_cast<uint32_t>(i));
        r->set_code(code);
        r->set_message(absl::StrCat("events[", i, "].", s.message()));
      }
    }
    if (accepted > 0) {
      auto first = log_->Append(std::span<const std::string>(values.data(), accepted));
      if (!first.ok()) return Finish(Rpc::kReportEvents, ToGrpcStatus(first.status()));
      if (!any_logged) summary->set_first_sequence(*first);
      summary->set_last_sequence(*first + accepted - 1);
      any_logged = true;
      summary->set_accepted(summary->accepted() + accepted);
    }
    summary->set_batches(++batch_index);
  }
  if (context->IsCancelled()) {
    return Finish(Rpc::kReportEvents,
                  grpc::Status(grpc::StatusCode::CANCELLED,
                               absl::StrCat("stream cancelled by the client after ", batch_index,
                                            " complete batches (", summary->accepted(),
                                            " events logged); a partial batch is dropped")));
  }
  return Finish(Rpc::kReportEvents, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RetentionService::Admit(grpc::CallbackServerContext* context,
                                                  const v1::AdmitRequest* request,
                                                  v1::AdmitResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoAdmit(*request, response));
  return reactor;
}

grpc::ServerUnaryReactor* RetentionService::RankEviction(grpc::CallbackServerContext* context,
                                                         const v1::RankRequest* request,
                                                         v1::RankResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoRankEviction(*request, response));
  return reactor;
}

grpc::Status RetentionService::DoAdmit(const v1::AdmitRequest& request,
                                       v1::AdmitResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto r = pools_->Admit(request);
  metrics_->ObserveDecision(
      Rpc::kAdmit, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.ok()) return Finish(Rpc::kAdmit, ToGrpcStatus(r.status()));
  for (const auto& d : r->decisions()) metrics_->CountAdmit(d.keep());
  *response = std::move(*r);
  return Finish(Rpc::kAdmit, grpc::Status::OK);
}

grpc::Status RetentionService::DoRankEviction(const v1::RankRequest& request,
                                              v1::RankResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto r = pools_->RankEviction(request);
  metrics_->ObserveDecision(
      Rpc::kRankEviction,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.ok()) return Finish(Rpc::kRankEviction, ToGrpcStatus(r.status()));
  metrics_->CountEvictionAdvice(r->victims_size());
  *response = std::move(*r);
  return Finish(Rpc::kRankEviction, grpc::Status::OK);
}

grpc::Status RetentionService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                         v1::GetStatusResponse* response) {
  response->set_policy(pools_->policy_name());
  response->set_model_version(model_version());
  response->set_events_logged(metrics_->ingested_total());
  response->set_log_next_sequence(log_->next_sequence());
  response->set_log_bytes(log_->retained_bytes());
  response->set_uptime_seconds(NowSeconds() - start_seconds_);
  pools_->FillStatus(*response);
  return Finish(Rpc::kGetStatus, grpc::Status::OK);
}

grpc::Status RetentionService::ReloadModel(grpc::ServerContext*,
                                           const v1::ReloadModelRequest* request,
                                           v1::ReloadModelResponse* response) {
  auto version = reload_(request->path());
  if (!version.ok()) return Finish(Rpc::kReloadModel, ToGrpcStatus(version.status()));
  response->set_model_version(*version);
  return Finish(Rpc::kReloadModel, grpc::Status::OK);
}

}  // namespace kvlearn
