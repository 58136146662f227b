// Counters of the sidecar's defenses at the gRPC edge and of its start-up
// recovery, rendered in the Prometheus text format and appended to /metrics
// after SidecarMetrics' series (docs/sidecar.md, "Metrics and status"):
//
//   kvlearn_report_streams_open             gauge    ReportEvents streams open now
//   kvlearn_report_streams_refused_total    counter  streams refused by --max-streams
//   kvlearn_report_streams_idle_closed_total counter streams the server ended after
//                                                    --stream-idle-timeout-seconds
//                                                    without a message (UNAVAILABLE)
//   kvlearn_malformed_messages_total{rpc}   counter  messages that are not the method's
//                                                    protobuf type (INVALID_ARGUMENT)
//   kvlearn_replayed_events_total           counter  logged events replayed at start
//   kvlearn_replay_rejected_events_total    counter  of those, refused by the pools
//   kvlearn_replayed_decisions_total        counter  journaled decisions redone at start
//   kvlearn_replay_seconds                  gauge    wall time of the start-up replay
//
// The open-stream count is also the limit's state: TryOpenStream admits a
// stream only while fewer than the limit are open.
//
// Thread-safety: every method may be called concurrently (relaxed atomics;
// the stream count uses compare-and-swap so the limit is never exceeded).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "server/sidecar_metrics.h"

namespace kvlearn {

class ServingCounters {
 public:
  explicit ServingCounters(uint32_t max_streams) : max_streams_(max_streams) {}

  // True (and counted open) when fewer than the limit are open; else counts
  // a refusal and returns false.
  bool TryOpenStream();
  void CloseStream() { open_streams_.fetch_sub(1, std::memory_order_acq_rel); }
  uint32_t open_streams() const { return open_streams_.load(std::memory_order_acquire); }
  uint32_t max_streams() const { return max_streams_; }
  void CountIdleClosed() { idle_closed_streams_.fetch_add(1, std::memory_order_relaxed); }

  void CountMalformed(Rpc rpc) {
    malformed_[static_cast<int>(rpc)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t malformed(Rpc rpc) const {
    return malformed_[static_cast<int>(rpc)].load(std::memory_order_relaxed);
  }
  void SetReplay(uint64_t events, uint64_t rejected, uint64_t decisions, double seconds);

  std::string Render() const;

 private:
  const uint32_t max_streams_;
  std::atomic<uint32_t> open_streams_{0};
  std::atomic<uint64_t> refused_streams_{0};
  std::atomic<uint64_t> idle_closed_streams_{0};
  std::array<std::atomic<uint64_t>, static_cast<int>(Rpc::kCount)> malformed_{};
  std::atomic<uint64_t> replayed_{0}, replay_rejected_{0}, replayed_decisions_{0};
  std::atomic<double> replay_seconds_{0};
};

}  // namespace kvlearn
