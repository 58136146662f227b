// One ReportEvents client stream on gRPC's callback API: no thread is held
// while the stream is idle, which is what lets --max-streams idle streams
// cost memory only (each stream holds one batch buffer, at most
// --max-message-bytes).
//
// Per batch: parse (bytes that are not an EventBatch end the stream with
// INVALID_ARGUMENT naming the batch index), refuse a batch over
// --max-events-per-batch (RESOURCE_EXHAUSTED), acknowledge a resent batch
// without applying it (server/retried_batches.h), apply each event to the pools
// (a refused event is listed in the summary and the stream goes on), append
// the accepted events to the log as one entry, then ask for the next batch.
// The next read starts only after the append returned, so every event counted
// in the summary is durable, and one stream has one batch in flight.
//
// The reactor counts the call and releases its stream slot
// (ServingCounters) when it finishes the call, and deletes itself in OnDone.
//
// Thread-safety: gRPC runs at most one of this reactor's OnReadDone at a time
// (the next read is started at the end of the previous one); OnCancel may run
// concurrently and only sets an atomic flag.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>
#include <vector>

#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"
#include "server/node_pools.h"
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
};

class ReportEventsReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // REQUIRES: the caller took a stream slot (ServingCounters::TryOpenStream).
  ReportEventsReactor(const IngestEnv& env, grpc::ByteBuffer* response);

  void OnReadDone(bool ok) override;
  void OnCancel() override { cancelled_.store(true, std::memory_order_release); }
  void OnDone() override;

 private:
  // Applies and logs the batch in buffer_; a non-OK status ends the stream.
  grpc::Status Ingest();
  void End(grpc::Status status);

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
};

// A stream refused at open (over --max-streams): finishes at once with
// `status` and deletes itself when gRPC is done with it.
class RefusedStreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStreamReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace kvlearn
