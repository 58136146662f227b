// One ReportEvents client stream on gRPC's callback API: no thread is held
// while the stream is idle, which is what lets --max-streams idle streams
// cost memory only (each stream holds one batch buffer, at most
// --max-message-bytes).
//
// Per batch: parse (bytes that are not an EventBatch end the stream with
// INVALID_ARGUMENT naming the batch index), refuse a batch over
// --max-events-per-batch (RESOURCE_EXHAUSTED) or one the caller may not send
// (IngestEnv::authorize), acknowledge a resent batch
// without applying it (server/retried_batches.h), apply each event to the pools
// (a refused event is listed in the summary and the stream goes on), append
// the accepted events to the log as one entry, then ask for the next batch.
// The next read starts only after the append returned, so every event counted
// in the summary is durable, and one stream has one batch in flight.
//
// Idle streams: with a stream idle timeout S > 0, a stream whose pending read
// has waited S seconds for a batch is ended with UNAVAILABLE naming
// --stream-idle-timeout-seconds and counted (ServingCounters), so that a
// client holding --max-streams silent streams cannot lock other reporters out
// for longer than S. Time spent applying a batch does not count as idle. A
// grpc::Alarm per stream (no thread) checks the idle time; a batch that
// arrives as the stream is being ended is dropped unapplied and unlogged (the
// client never got it acknowledged).
//
// The reactor counts the call and releases its stream slot
// (ServingCounters) when it finishes the call. It is deleted when both gRPC
// (OnDone) and its idle alarm are done with it.
//
// Thread-safety: gRPC runs at most one of this reactor's OnReadDone at a time
// (the next read is started at the end of the previous one); OnCancel may run
// concurrently and only sets an atomic flag. The idle alarm runs on gRPC's
// executor threads: it ends the stream only by winning the compare-and-swap
// of state_ from kReading to kFinished, which OnReadDone also races for, so
// exactly one of them finishes the call; the alarm's re-arming and OnDone's
// cancelling are ordered by alarm_mu_. gRPC's own ordering of these calls is
// marked for ThreadSanitizer (core/tsan_hand_off.h).
#pragma once

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/tsan_hand_off.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/calls_in_flight.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/peer_stream_slots.h"
#include "server/serving_counters.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {

// What a stream needs from the server; all pointers outlive every stream
// (the server shuts down and drains streams before destroying them).
struct IngestEnv {
  NodePools* pools = nullptr;
  EventLog* log = nullptr;
  SidecarMetrics* metrics = nullptr;
  ServingCounters* counters = nullptr;
  uint32_t max_events_per_batch = 4096;
  // A stream that waits this long for a batch is ended; 0 = never.
  double stream_idle_timeout_seconds = 0;
  // Whether the caller may send this batch (server/access_control.h); a
  // refusal ends the stream with it before anything of the batch is applied.
  // Empty: every batch may.
  std::function<absl::Status(const v1::EventBatch&)> authorize;
  // The per-peer slot the stream holds (taken before the reactor is made),
  // given back with the global one; nullptr: none.
  PeerStreamSlots* peer_slots = nullptr;
  std::string peer;
  // Entered while the stream may use the objects above (from its making
  // to its End), so the server's shutdown waits for it; nullptr: none.
  CallsInFlight* calls = nullptr;
};

class ReportEventsReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // REQUIRES: the caller took a stream slot (ServingCounters::TryOpenStream).
  ReportEventsReactor(const IngestEnv& env, grpc::ByteBuffer* response);

  void OnReadDone(bool ok) override;
  void OnCancel() override {
    TsanTakeOver(this);
    cancelled_.store(true, std::memory_order_release);
  }
  void OnDone() override;

 private:
  // kStartingRead: between the decision to read and StartRead's return, when
  // the idle alarm must not finish the call yet.
  enum class State { kProcessing, kStartingRead, kReading, kFinished };
  using Clock = std::chrono::steady_clock;

  ~ReportEventsReactor() override = default;
  void ReadNext();
  // Applies and logs the batch in buffer_; a non-OK status ends the stream.
  grpc::Status Ingest();
  void End(grpc::Status status);
  // Arms a new idle alarm for `delay` (REQUIRES: alarm_mu_ held, !done_).
  void ArmIdleAlarm(Clock::duration delay) ABSL_EXCLUSIVE_LOCKS_REQUIRED(alarm_mu_);
  void OnIdleAlarm(bool fired);
  void Unref();

  const IngestEnv env_;
  grpc::ByteBuffer* const response_;
  grpc::ByteBuffer buffer_;
  v1::EventBatch batch_;
  v1::Event marker_;  // batch_received, logged after a batch with a batch_id
  v1::ReportSummary summary_;
  std::vector<std::string> values_;  // serialized accepted events, reused per batch
  uint32_t batch_index_ = 0;
  bool any_logged_ = false;
  std::atomic<bool> cancelled_{false};

  const Clock::duration idle_timeout_;  // zero: no idle alarm
  std::atomic<State> state_{State::kProcessing};
  std::atomic<Clock::rep> read_started_{0};  // Clock ticks when the pending read started
  // gRPC's OnDone holds one reference, an armed idle alarm another.
  std::atomic<int> refs_{1};
  absl::Mutex alarm_mu_;
  bool done_ ABSL_GUARDED_BY(alarm_mu_) = false;
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(alarm_mu_);
};

// A stream refused at open (over --max-streams): finishes at once with
// `status` and deletes itself when gRPC is done with it.
class RefusedStreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStreamReactor(grpc::Status status) {
    Finish(std::move(status));
    TsanHandOff(this);
  }
  void OnDone() override {
    TsanTakeOver(this);
    delete this;
  }
};

}  // namespace kvlearn
