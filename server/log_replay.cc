#include "server/log_replay.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

absl::StatusOr<ReplayStats> ReplayEventLog(const EventLog& log, NodePools& pools,
                                           const ReplayProgressFn& progress,
                                           double progress_interval_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_report = start;
  const uint64_t total = log.next_sequence() - log.first_sequence();
  ReplayStats stats;
  v1::Event event;
  absl::Status status = log.ForEach([&](uint64_t sequence, std::string_view value) -> absl::Status {
    if (!event.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("event log: the event at sequence ", sequence,
                                              " is not a kvlearn.v1.Event"));
    }
    ++stats.events;
    if (absl::Status s = pools.Apply(event); !s.ok()) {
      if (stats.rejected++ == 0) {
        stats.first_rejection = absl::StrCat("sequence ", sequence, ": ", s.message());
      }
    }
    // Reading the clock per event would cost more than some events do.
    if (progress && (stats.events & 0xfff) == 0) {
      const auto now = Clock::now();
      if (std::chrono::duration<double>(now - last_report).count() >= progress_interval_seconds) {
        last_report = now;
        progress(stats.events, total, std::chrono::duration<double>(now - start).count());
      }
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace kvlearn
