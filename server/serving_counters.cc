#include "server/serving_counters.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvlearn {

bool ServingCounters::TryOpenStream() {
  uint32_t open = open_streams_.load(std::memory_order_acquire);
  while (open < max_streams_) {
    if (open_streams_.compare_exchange_weak(open, open + 1, std::memory_order_acq_rel)) {
      return true;
    }
  }
  refused_streams_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void ServingCounters::SetReplay(uint64_t events, uint64_t rejected, uint64_t decisions,
                                double seconds) {
  replayed_.store(events, std::memory_order_relaxed);
  replayed_decisions_.store(decisions, std::memory_order_relaxed);
  replay_rejected_.store(rejected, std::memory_order_relaxed);
  replay_seconds_.store(seconds, std::memory_order_relaxed);
}

std::string ServingCounters::Render() const {
  std::string out;
  absl::StrAppend(&out,
                  "# HELP kvlearn_report_streams_open ReportEvents streams open now.\n"
                  "# TYPE kvlearn_report_streams_open gauge\n"
                  "kvlearn_report_streams_open ",
                  open_streams(), "\n",
                  "# HELP kvlearn_report_streams_refused_total ReportEvents streams refused "
                  "with RESOURCE_EXHAUSTED because --max-streams were open.\n"
                  "# TYPE kvlearn_report_streams_refused_total counter\n"
                  "kvlearn_report_streams_refused_total ",
                  refused_streams_.load(std::memory_order_relaxed), "\n",
                  "# HELP kvlearn_report_streams_idle_closed_total ReportEvents streams ended "
                  "with UNAVAILABLE after --stream-idle-timeout-seconds without a message.\n"
                  "# TYPE kvlearn_report_streams_idle_closed_total counter\n"
                  "kvlearn_report_streams_idle_closed_total ",
                  idle_closed_streams_.load(std::memory_order_relaxed), "\n");
  absl::StrAppend(&out,
                  "# HELP kvlearn_malformed_messages_total Request messages that are not the "
                  "method's protobuf type (answered INVALID_ARGUMENT), by method.\n"
                  "# TYPE kvlearn_malformed_messages_total counter\n");
  for (int r = 0; r < static_cast<int>(Rpc::kCount); ++r) {
    absl::StrAppend(&out, "kvlearn_malformed_messages_total{rpc=\"", RpcName(static_cast<Rpc>(r)),
                    "\"} ", malformed_[r].load(std::memory_order_relaxed), "\n");
  }
  absl::StrAppend(
      &out,
      "# HELP kvlearn_replayed_events_total Logged events replayed into the pools at start.\n"
      "# TYPE kvlearn_replayed_events_total counter\n"
      "kvlearn_replayed_events_total ",
      replayed_.load(std::memory_order_relaxed), "\n",
      "# HELP kvlearn_replay_rejected_events_total Replayed events the pools refused.\n"
      "# TYPE kvlearn_replay_rejected_events_total counter\n"
      "kvlearn_replay_rejected_events_total ",
      replay_rejected_.load(std::memory_order_relaxed), "\n",
      "# HELP kvlearn_replayed_decisions_total Journaled Admit / RankEviction calls redone "
      "at start.\n"
      "# TYPE kvlearn_replayed_decisions_total counter\n"
      "kvlearn_replayed_decisions_total ",
      replayed_decisions_.load(std::memory_order_relaxed), "\n",
      "# HELP kvlearn_replay_seconds Wall time of the start-up replay of the event log.\n"
      "# TYPE kvlearn_replay_seconds gauge\n"
      "kvlearn_replay_seconds ",
      absl::StrFormat("%.3f", replay_seconds_.load(std::memory_order_relaxed)), "\n");
  return out;
}

}  // namespace kvlearn
