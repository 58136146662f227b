#include "clients/retention_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <random>
#include <utility>

namespace kvlearn {
namespace {

constexpr const char* kReportEvents = "ReportEvents";
constexpr const char* kAdmit = "Admit";
constexpr const char* kRankEviction = "RankEviction";

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// Codes that say the sidecar answered and is healthy: the request was wrong
// for its state, not the sidecar slow or gone. They do not count toward the
// breaker.
bool SidecarAlive(grpc::StatusCode code) {
  return code == grpc::StatusCode::OK || code == grpc::StatusCode::INVALID_ARGUMENT ||
         code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::ALREADY_EXISTS || code == grpc::StatusCode::OUT_OF_RANGE ||
         code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED;
}

// "<node_id>#<tier>": '#' is not a node id character, so pools do not share
// a source; past the sidecar's 128 bytes the node id, its default.
std::string SourceOf(const RetentionClientOptions& o) {
  std::string source = o.node_id + "#" + v1::Tier_Name(o.tier);
  return source.size() <= 128 ? source : o.node_id;
}

// 1..2^63, so never 0 (no id) nor wrapping. Random, because the sidecar
// remembers a source's ids across its restarts and a restarted client with
// the same source must not resend a predecessor's id with new events.
uint64_t FirstBatchId() {
  std::random_device random;
  return ((uint64_t{random()} << 32 | random()) >> 1) + 1;
}

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FillCandidate(const ClientBlock& block, v1::BlockCandidate* c) {
  c->set_block_id(block.block_id);
  if (block.parent_id) c->set_parent_id(*block.parent_id);
  c->set_tokens(block.tokens);
  c->set_bytes(block.bytes);
}

}  // namespace

RetentionClient::RetentionClient(RetentionClientOptions options)
    : options_(std::move(options)),
      source_(SourceOf(options_)),
      fallback_(options_.fallback_capacity_blocks),
      next_batch_id_(FirstBatchId()) {
  std::string token = options_.token;
  if (token.empty()) {
    if (const char* env = std::getenv("KVLEARN_TOKEN"); env != nullptr) token = env;
  }
  if (!token.empty()) authorization_ = "Bearer " + token;
  credentials_ = options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials();
  target_ = options_.target;
  stub_ = v1::Retention::NewStub(grpc::CreateChannel(target_, credentials_));
}

grpc::Status RetentionClient::AskFollowingRedirect(
    std::chrono::system_clock::time_point deadline,
    const std::function<grpc::Status(v1::Retention::Stub&, grpc::ClientContext&)>& rpc) {
  grpc::Status status;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second after a redirect
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(deadline);
    status = rpc(*Stub(), ctx);
    if (!FollowRedirect(ctx, status)) break;
  }
  return status;
}

std::shared_ptr<v1::Retention::Stub> RetentionClient::Stub() const {
  absl::MutexLock lock(&target_mu_);
  return stub_;
}

bool RetentionClient::FollowRedirect(const grpc::ClientContext& ctx, const grpc::Status& status) {
  if (!status.ok() && !SidecarAlive(status.error_code())) {
    // The owner it was sent to may have died: the next call asks the first
    // target again, which names the new owner.
    absl::MutexLock lock(&target_mu_);
    if (target_ != options_.target) {
      target_ = options_.target;
      stub_ = v1::Retention::NewStub(grpc::CreateChannel(target_, credentials_));
    }
    return false;
  }
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return false;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto owner = trailers.find("kvlearn-owner");
  if (owner == trailers.end() || owner->second.empty()) return false;
  const std::string address(owner->second.data(), owner->second.size());
  absl::MutexLock lock(&target_mu_);
  if (address == target_) return false;  // names itself: no loop
  target_ = address;
  stub_ = v1::Retention::NewStub(grpc::CreateChannel(target_, credentials_));
  ++redirects_;
  return true;
}

RetentionClient::~RetentionClient() = default;

void RetentionClient::Authorize(grpc::ClientContext& ctx) const {
  if (!authorization_.empty()) ctx.AddMetadata("authorization", authorization_);
}

size_t RetentionClient::BufferedEvents() const {
  size_t events = pending_.events_size();
  for (const v1::EventBatch& b : held_) events += b.events_size();
  return events;
}

void RetentionClient::Number(v1::EventBatch& batch) {
  batch.set_batch_id(next_batch_id_++);
  batch.set_source(source_);
}

v1::Event* RetentionClient::NewEvent() {
  if (resync_pending_ || BufferedEvents() >= options_.max_buffered_events) {
    ++stats_.events_dropped_total;
    resync_pending_ = true;
    return nullptr;
  }
  v1::Event* e = pending_.add_events();
  e->set_node_id(options_.node_id);
  e->set_tier(options_.tier);
  e->set_timestamp_us(options_.now_us ? options_.now_us() : UnixMicros());
  return e;
}

void RetentionClient::ReportPoolConfigured(int64_t capacity_bytes) {
  absl::MutexLock lock(&mu_);
  pool_capacity_bytes_ = capacity_bytes;
  if (v1::Event* e = NewEvent()) e->mutable_pool_configured()->set_capacity_bytes(capacity_bytes);
}

void RetentionClient::ReportArrival(const ClientArrival& arrival) {
  absl::MutexLock lock(&mu_);
  fallback_.BeginRequest();
  if (v1::Event* e = NewEvent()) {
    auto* a = e->mutable_request_arrival();
    a->mutable_block_ids()->Add(arrival.block_ids.begin(), arrival.block_ids.end());
    a->set_input_length(arrival.input_length);
    a->set_output_length(arrival.output_length);
    a->mutable_block_tokens()->Add(arrival.block_tokens.begin(), arrival.block_tokens.end());
    a->mutable_block_bytes()->Add(arrival.block_bytes.begin(), arrival.block_bytes.end());
    a->set_request_id(arrival.request_id);
    a->set_served_above(arrival.served_above);
  }
}

void RetentionClient::ReportFinished(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (v1::Event* e = NewEvent()) e->mutable_request_finished()->set_request_id(request_id);
}

void RetentionClient::ReportHits(const std::vector<uint64_t>& block_ids_deepest_first) {
  absl::MutexLock lock(&mu_);
  for (uint64_t id : block_ids_deepest_first) {
    fallback_.Hit(id);
    if (v1::Event* e = NewEvent()) e->mutable_block_hit()->set_block_id(id);
  }
}

void RetentionClient::ReportStored(const ClientBlock& block) {
  absl::MutexLock lock(&mu_);
  fallback_.Stored(block.block_id, block.parent_id, block.bytes, block.tokens);
  if (v1::Event* e = NewEvent()) {
    auto* stored = e->mutable_block_stored();
    stored->set_block_id(block.block_id);
    if (block.parent_id) stored->set_parent_id(*block.parent_id);
    stored->set_tokens(block.tokens);
    stored->set_bytes(block.bytes);
  }
}

void RetentionClient::ReportRemoved(uint64_t block_id) {
  absl::MutexLock lock(&mu_);
  fallback_.Removed(block_id);
  if (v1::Event* e = NewEvent()) e->mutable_block_removed()->set_block_id(block_id);
}

RetentionClient::Attempt RetentionClient::BeginAttempt(const char* rpc) {
  absl::MutexLock lock(&mu_);
  if (consecutive_failures_ >= options_.breaker_failures &&
      std::chrono::steady_clock::now() < breaker_open_until_) {
    ++stats_.breaker_skips_total;
    return Attempt::kSkip;
  }
  ++stats_.rpc_attempts_total[rpc];
  return Attempt::kSend;
}

void RetentionClient::RecordOutcome(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!status.ok()) ++stats_.sidecar_errors_total[CodeName(status.error_code())];
  if (SidecarAlive(status.error_code())) {
    consecutive_failures_ = 0;
    return;
  }
  // Past the threshold every failure (a failed probe included) restarts the backoff.
  if (++consecutive_failures_ >= options_.breaker_failures) {
    breaker_open_until_ = std::chrono::steady_clock::now() + options_.breaker_backoff;
    ++stats_.breaker_opens_total;
  }
}

void RetentionClient::CountFallback(const char* rpc) {
  absl::MutexLock lock(&mu_);
  ++stats_.fallbacks_total[rpc];
}

bool RetentionClient::Flush() {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.calls_total[kReportEvents];
  }
  return FlushUntil(std::chrono::system_clock::now() + options_.flush_deadline,
                    /*may_repair=*/true);
}

std::vector<v1::EventBatch> RetentionClient::ResyncBatches() {
  std::vector<v1::EventBatch> batches(1);
  const size_t per_batch = std::max<size_t>(options_.max_buffered_events, 1);
  const int64_t now = options_.now_us ? options_.now_us() : UnixMicros();
  auto add = [&]() {
    if (static_cast<size_t>(batches.back().events_size()) >= per_batch) batches.emplace_back();
    v1::Event* e = batches.back().add_events();
    e->set_node_id(options_.node_id);
    e->set_tier(options_.tier);
    e->set_timestamp_us(now);
    return e;
  };
  add()->mutable_all_blocks_cleared();
  if (pool_capacity_bytes_)
    add()->mutable_pool_configured()->set_capacity_bytes(*pool_capacity_bytes_);
  for (const FallbackBlock& b : fallback_.Blocks()) {
    auto* stored = add()->mutable_block_stored();
    stored->set_block_id(b.block_id);
    if (b.parent_id) stored->set_parent_id(*b.parent_id);
    stored->set_tokens(b.tokens);
    stored->set_bytes(b.bytes);
  }
  for (v1::EventBatch& b : batches) Number(b);
  return batches;
}

bool RetentionClient::FlushUntil(std::chrono::system_clock::time_point deadline, bool may_repair) {
  std::vector<v1::EventBatch> batches;
  bool resync = false;
  size_t resent = 0;
  {
    absl::MutexLock lock(&mu_);
    if ((resync_pending_ || !held_.empty()) && !may_repair) return false;
    if (resync_pending_) {
      // The held and buffered events are already reflected in the fallback's blocks.
      batches = ResyncBatches();
      stats_.events_dropped_total += BufferedEvents();
      pending_.Clear();
      held_.clear();
      resync_pending_ = false;
      resync = true;
    } else {
      resent = held_.size();
      if (pending_.events_size() > 0) {
        Number(pending_);
        held_.emplace_back().Swap(&pending_);
      }
      if (held_.empty()) return true;
      batches.swap(held_);
    }
  }
  int events = 0;
  for (const auto& b : batches) events += b.events_size();
  // After a failure other than a refusal the sidecar may have applied the
  // batches: they are held, resent first by the next Flush() with the same
  // ids, newer events buffering behind. Refused or skipped (breaker open),
  // they are dropped and the pool resent.
  const auto failed = [&](bool hold) {
    absl::MutexLock lock(&mu_);
    ++stats_.fallbacks_total[kReportEvents];
    if (hold && !resync) {
      held_.insert(held_.begin(), std::make_move_iterator(batches.begin()),
                   std::make_move_iterator(batches.end()));
      return false;
    }
    // A resync that failed drops nothing the engine reported: it is redone.
    if (!resync) stats_.events_dropped_total += events;
    resync_pending_ = true;
    return false;
  };
  if (BeginAttempt(kReportEvents) == Attempt::kSkip) return failed(/*hold=*/false);
  if (resent > 0) {
    absl::MutexLock lock(&mu_);
    stats_.batches_resent_total += resent;
  }
  grpc::ClientContext ctx;
  Authorize(ctx);
  ctx.set_deadline(deadline);
  v1::ReportSummary summary;
  auto writer = Stub()->ReportEvents(&ctx, &summary);
  for (const auto& b : batches) {
    if (!writer->Write(b)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  RecordOutcome(status);
  if (!status.ok()) return failed(/*hold=*/!SidecarAlive(status.error_code()));
  absl::MutexLock lock(&mu_);
  stats_.events_sent_total += events;
  stats_.events_rejected_total += summary.rejected();
  if (resync) ++stats_.resyncs_total;
  return true;
}

ClientAdmitResult RetentionClient::Admit(const std::vector<ClientBlock>& candidates) {
  const auto deadline = std::chrono::system_clock::now() + options_.call_deadline;
  int64_t now_us;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.calls_total[kAdmit];
    now_us = options_.now_us ? options_.now_us() : UnixMicros();
  }
  ClientAdmitResult result;
  const auto fall_back = [&] {
    CountFallback(kAdmit);
    result.keep.assign(candidates.size(), true);
    result.from_fallback = true;
    return result;
  };
  // Events the decision depends on (this request's arrival, the parent's
  // store) must reach the sidecar first.
  if (!FlushUntil(deadline, /*may_repair=*/false)) return fall_back();
  if (BeginAttempt(kAdmit) == Attempt::kSkip) return fall_back();
  v1::AdmitRequest request;
  request.set_node_id(options_.node_id);
  request.set_tier(options_.tier);
  request.set_timestamp_us(now_us);
  for (const ClientBlock& b : candidates) FillCandidate(b, request.add_candidates());
  v1::AdmitResponse response;
  grpc::Status status =
      AskFollowingRedirect(deadline, [&](v1::Retention::Stub& stub, grpc::ClientContext& ctx) {
        return stub.Admit(&ctx, request, &response);
      });
  if (status.ok() && response.decisions_size() != static_cast<int>(candidates.size())) {
    status =
        grpc::Status(grpc::StatusCode::INTERNAL, "Admit: decisions not parallel to candidates");
  }
  RecordOutcome(status);
  if (!status.ok()) return fall_back();
  for (const auto& d : response.decisions()) result.keep.push_back(d.keep());
  return result;
}

ClientRankResult RetentionClient::RankEviction(int64_t bytes_to_free,
                                               const std::vector<uint64_t>& candidate_ids) {
  const auto deadline = std::chrono::system_clock::now() + options_.call_deadline;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.calls_total[kRankEviction];
  }
  ClientRankResult result;
  const auto fall_back = [&] {
    absl::MutexLock lock(&mu_);
    ++stats_.fallbacks_total[kRankEviction];
    result.victims = fallback_.Evict(bytes_to_free, candidate_ids);
    result.bytes_freed = 0;
    for (const FallbackVictim& v : result.victims) result.bytes_freed += v.bytes;
    result.from_fallback = true;
    return result;
  };
  if (!FlushUntil(deadline, /*may_repair=*/false)) return fall_back();
  if (BeginAttempt(kRankEviction) == Attempt::kSkip) return fall_back();
  v1::RankRequest request;
  request.set_node_id(options_.node_id);
  request.set_tier(options_.tier);
  request.set_bytes_to_free(bytes_to_free);
  for (uint64_t id : candidate_ids) request.add_candidate_ids(id);
  v1::RankResponse response;
  const grpc::Status status =
      AskFollowingRedirect(deadline, [&](v1::Retention::Stub& stub, grpc::ClientContext& ctx) {
        return stub.RankEviction(&ctx, request, &response);
      });
  RecordOutcome(status);
  if (!status.ok()) return fall_back();
  for (const auto& v : response.victims()) result.victims.push_back({v.block_id(), v.bytes()});
  result.bytes_freed = response.bytes_freed();
  return result;
}

RetentionClientStats RetentionClient::Stats() const {
  absl::MutexLock lock(&mu_);
  RetentionClientStats s = stats_;
  s.breaker_open = consecutive_failures_ >= options_.breaker_failures &&
                   std::chrono::steady_clock::now() < breaker_open_until_;
  s.fallback_forgotten_total = fallback_.forgotten();
  s.fallback_blocks = fallback_.size();
  absl::MutexLock target_lock(&target_mu_);
  s.redirects_total = redirects_;
  s.target = target_;
  return s;
}

}  // namespace kvlearn
