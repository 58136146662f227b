#include "server/report_events_reactor.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "server/raw_message.h"
#include "server/retried_batches.h"

namespace kvlearn {
namespace {

constexpr int kMaxListedRejections = 100;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

ReportEventsReactor::ReportEventsReactor(const IngestEnv& env, grpc::ByteBuffer* response)
    : env_(env),
      response_(response),
      idle_timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(env.stream_idle_timeout_seconds))) {
  if (env_.calls != nullptr) env_.calls->Enter();
  if (idle_timeout_ > Clock::duration::zero()) {
    absl::MutexLock lock(&alarm_mu_);
    ArmIdleAlarm(idle_timeout_);
  }
  ReadNext();
}

// Each entry point below starts with TsanTakeOver(this), and the calls that
// hand the reactor to gRPC (StartRead, Finish, an alarm's Set) are preceded,
// and followed where they lock the reactor, by TsanHandOff(this). gRPC runs
// no OnDone while a reaction runs and the alarm holds a reference, so the
// reactor is alive after each of these calls.

void ReportEventsReactor::ReadNext() {
  read_started_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
  state_.store(State::kStartingRead, std::memory_order_release);
  TsanHandOff(this);
  StartRead(&buffer_);
  TsanHandOff(this);  // StartRead locked the reactor's stream mutex
  // Fails when the read already completed (its OnReadDone moved the state on).
  State expected = State::kStartingRead;
  state_.compare_exchange_strong(expected, State::kReading, std::memory_order_acq_rel);
}

void ReportEventsReactor::OnReadDone(bool ok) {
  TsanTakeOver(this);
  State state = state_.load(std::memory_order_acquire);
  do {
    // The idle alarm ended the call: a batch that arrived meanwhile is
    // dropped (never acknowledged), and the failed read needs nothing.
    if (state == State::kFinished) return;
  } while (!state_.compare_exchange_weak(state, State::kProcessing, std::memory_order_acq_rel));
  if (!ok) {
    // No more batches: the client half-closed (the normal end), or the call
    // is gone (client cancel, deadline, server shutdown). A cancelled call
    // still needs Finish; its status is not delivered.
    if (cancelled_.load(std::memory_order_acquire)) {
      End(grpc::Status(
          grpc::StatusCode::CANCELLED,
          absl::StrCat("stream cancelled after ", batch_index_, " complete batches (",
                       summary_.accepted(), " events logged); a partial batch is dropped")));
      return;
    }
    End(ToGrpc(SerializeRawMessage(summary_, response_)));
    return;
  }
  grpc::Status status = Ingest();
  if (!status.ok()) {
    End(std::move(status));
    return;
  }
  ReadNext();
}

grpc::Status ReportEventsReactor::Ingest() {
  const std::string where = absl::StrCat("batch ", batch_index_);
  // What was logged before this batch, for the messages that end the stream.
  const std::string earlier =
      absl::StrCat("earlier batches (", batch_index_, " batches, ", summary_.accepted(),
                   " events) were logged; nothing after this batch was read");
  if (auto st = ParseRawMessage(buffer_, &batch_, where); !st.ok()) {
    env_.counters->CountMalformed(Rpc::kReportEvents);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(st.message(), "; ", earlier));
  }
  buffer_.Clear();
  if (static_cast<uint32_t>(batch_.events_size()) > env_.max_events_per_batch) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("events: ", where, " has ", batch_.events_size(),
                                     " events, over the limit of ", env_.max_events_per_batch,
                                     " (--max-events-per-batch); ", earlier));
  }
  if (env_.authorize) {
    if (auto st = env_.authorize(batch_); !st.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(st.code()),
                          absl::StrCat(where, ": ", st.message(), "; ", earlier));
    }
  }
  // A resent batch (server/retried_batches.h) is acknowledged, not applied.
  auto fresh = env_.pools->ClaimBatch(batch_);
  if (!fresh.ok()) return ToGrpc(fresh.status());
  if (!*fresh) {
    summary_.set_duplicate_batches(summary_.duplicate_batches() + 1);
    summary_.set_batches(++batch_index_);
    return grpc::Status::OK;
  }
  size_t accepted = 0;
  for (int i = 0; i < batch_.events_size(); ++i) {
    const v1::Event& e = batch_.events(i);
    const absl::Status s = env_.pools->Apply(e);
    if (s.ok()) {
      if (values_.size() <= accepted) values_.emplace_back();
      e.SerializeToString(&values_[accepted++]);  // reuses the string's buffer
      env_.metrics->CountIngested(static_cast<int>(e.kind_case()) - v1::Event::kRequestArrival);
      if (e.has_request_arrival()) {
        const auto& ids = e.request_arrival().block_ids();
        env_.metrics->ObserveArrival(e.timestamp_us(),
                                     {ids.data(), static_cast<size_t>(ids.size())});
      }
      continue;
    }
    summary_.set_rejected(summary_.rejected() + 1);
    const std::string code = absl::StatusCodeToString(s.code());
    (*summary_.mutable_rejected_by_code())[code]++;
    env_.metrics->CountRejected(static_cast<int>(s.code()));
    if (summary_.rejections_size() < kMaxListedRejections) {
      auto* r = summary_.add_rejections();
      r->set_batch(batch_index_);
      r->set_event(static_cast<uint32_t>(i));
      r->set_code(code);
      r->set_message(absl::StrCat("events[", i, "].", s.message()));
    }
  }
  size_t logged = accepted;
  if (RetriedBatches::Marker(batch_, &marker_)) {
    if (values_.size() <= logged) values_.emplace_back();
    marker_.SerializeToString(&values_[logged++]);  // its id survives a restart
    env_.pools->CountLoggedWithoutApply();
  }
  if (logged > 0) {
    auto first = env_.log->Append(std::span<const std::string>(values_.data(), logged));
    if (!first.ok()) return ToGrpc(first.status());
    if (accepted > 0) {
      if (!any_logged_) summary_.set_first_sequence(*first);
      summary_.set_last_sequence(*first + accepted - 1);
      any_logged_ = true;
      summary_.set_accepted(summary_.accepted() + accepted);
    }
  }
  summary_.set_batches(++batch_index_);
  return grpc::Status::OK;
}

void ReportEventsReactor::End(grpc::Status status) {
  // Counted and the slot given back as the answer leaves, not in OnDone
  // (which gRPC runs a little after the client has its answer): a client
  // that reads /metrics after its call sees it counted, and one that closes
  // a stream and opens the next at the limit is not refused. Nothing after
  // Leave touches the server's objects: SidecarServer::Shutdown waits for
  // every call to leave before it destroys them.
  state_.store(State::kFinished, std::memory_order_release);
  env_.metrics->CountRpc(Rpc::kReportEvents, static_cast<int>(status.error_code()));
  env_.counters->CloseStream();
  if (env_.peer_slots != nullptr) env_.peer_slots->Close(env_.peer);
  CallsInFlight* const calls = env_.calls;
  TsanHandOff(this);
  Finish(std::move(status));
  TsanHandOff(this);  // as after StartRead
  if (calls != nullptr) calls->Leave();
}

void ReportEventsReactor::ArmIdleAlarm(Clock::duration delay) {
  refs_.fetch_add(1, std::memory_order_relaxed);
  // A fresh alarm each time: replacing the one whose callback is running
  // leaves that callback intact (grpc::Alarm keeps it alive until it returns).
  alarm_ = std::make_unique<grpc::Alarm>();
  TsanHandOff(this);
  alarm_->Set(std::chrono::system_clock::now() + delay, [this](bool fired) { OnIdleAlarm(fired); });
}

void ReportEventsReactor::OnIdleAlarm(bool fired) {
  TsanTakeOver(this);
  if (fired) {
    const Clock::duration waited =
        Clock::now() -
        Clock::time_point(Clock::duration(read_started_.load(std::memory_order_acquire)));
    State reading = State::kReading;
    if (waited >= idle_timeout_ &&
        state_.compare_exchange_strong(reading, State::kFinished, std::memory_order_acq_rel)) {
      env_.counters->CountIdleClosed();
      // End stores kFinished again; the pending read fails and its
      // OnReadDone sees kFinished.
      End(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("ReportEvents: no batch for ", env_.stream_idle_timeout_seconds,
                       " s (--stream-idle-timeout-seconds); the server ended the stream to "
                       "free its slot after ",
                       batch_index_, " complete batches (", summary_.accepted(),
                       " events logged); open a new stream to report more")));
    } else if (state_.load(std::memory_order_acquire) != State::kFinished) {
      absl::MutexLock lock(&alarm_mu_);
      if (!done_) {
        // Not idle long enough, or a batch is being applied: check again
        // when the current read would reach the timeout (at least 10 ms on).
        const Clock::duration left = idle_timeout_ - waited;
        ArmIdleAlarm(std::max<Clock::duration>(left, std::chrono::milliseconds(10)));
      }
    }
  }
  Unref();
}

void ReportEventsReactor::OnDone() {
  TsanTakeOver(this);
  std::unique_ptr<grpc::Alarm> alarm;
  {
    absl::MutexLock lock(&alarm_mu_);
    done_ = true;
    alarm = std::move(alarm_);
  }
  // Cancelling runs a pending alarm's callback with fired = false (on gRPC's
  // executor), which drops its reference; outside alarm_mu_, which that
  // callback may take.
  if (alarm) alarm->Cancel();
  Unref();
}

void ReportEventsReactor::Unref() {
  TsanHandOff(this);  // whichever drops the last reference deletes
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    TsanTakeOver(this);
    delete this;
  }
}

}  // namespace kvlearn
