#include "server/log_replay.h"

#include <chrono>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {
namespace {

// A journaled decision waiting for its shard to reach `shard_events`.
struct Pending {
  uint64_t shard_events = 0;
  std::string record;
};

}  // namespace

absl::StatusOr<ReplayStats> ReplayEventLog(const EventLog& log, NodePools& pools,
                                           const ReplayProgressFn& progress,
                                           double progress_interval_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_report = start;
  ReplayStats stats;

  // Decisions per shard, in journal order (so each shard's counts ascend).
  // A trimmed log starts mid-history: the counts no longer line up with the
  // retained events, so its decisions are left out.
  absl::flat_hash_map<std::string, std::deque<Pending>> pending;
  uint64_t waiting = 0;
  const bool trimmed = log.first_sequence() > 0;
  absl::Status status = log.ForEachDecision([&](uint64_t number, uint64_t,
                                                std::string_view record) -> absl::Status {
    if (trimmed) {
      ++stats.decisions_skipped;
      return absl::OkStatus();
    }
    std::string shard;
    uint64_t shard_events = 0;
    if (auto st = NodePools::DecisionShard(record, &shard, &shard_events); !st.ok()) {
      return absl::DataLossError(absl::StrCat("event log: decision ", number, ": ", st.message()));
    }
    pending[shard].push_back({shard_events, std::string(record)});
    ++waiting;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;

  // Runs `shard`'s decisions journaled when it had applied <= `events`.
  auto redo = [&](std::deque<Pending>& queue, uint64_t events) {
    while (!queue.empty() && queue.front().shard_events <= events) {
      if (!pools.RedoDecision(queue.front().record).ok()) ++stats.decisions_failed;
      ++stats.decisions;
      --waiting;
      queue.pop_front();
    }
  };
  // Decisions made before their pool had any event.
  for (auto& [shard, queue] : pending) redo(queue, 0);

  const uint64_t total = log.next_sequence() - log.first_sequence();
  v1::Event event;
  status = log.ForEach([&](uint64_t sequence, std::string_view value) -> absl::Status {
    if (!event.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("event log: the event at sequence ", sequence,
                                              " is not a kvlearn.v1.Event"));
    }
    ++stats.events;
    uint64_t shard_events = 0;
    if (absl::Status s = pools.Apply(event, &shard_events); !s.ok()) {
      if (stats.rejected++ == 0) {
        stats.first_rejection = absl::StrCat("sequence ", sequence, ": ", s.message());
      }
    } else if (waiting > 0) {
      auto it = pending.find(NodePools::ShardKey(event.node_id(), event.tier()));
      if (it != pending.end()) redo(it->second, shard_events);
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
  // Decisions after the last logged event of their pool (or after events
  // that were applied but not yet logged when the process died).
  for (auto& [shard, queue] : pending) redo(queue, UINT64_MAX);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace kvlearn
