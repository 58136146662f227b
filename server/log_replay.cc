#include "server/log_replay.h"

#include <chrono>
#include <deque>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/model_swap_record.h"
#include "server/pools_snapshot.h"

namespace kvlearn {
namespace {

// A journaled decision whose pool has not yet replayed the `shard_events`
// events it had applied when the decision was made.
struct Pending {
  uint64_t shard_events = 0;
  std::string record;
  // Set instead of `record` for a pool's part of a journaled model swap.
  std::shared_ptr<const LearnedModel> model;
  std::string node;
  v1::Tier tier = v1::TIER_POOL;
};

}  // namespace

absl::StatusOr<ReplayStats> ReplayEventLog(const EventLog& log, NodePools& pools,
                                           const ReplayProgressFn& progress,
                                           double progress_interval_seconds,
                                           const ModelLoadFn& load_model) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_report = start;
  ReplayStats stats;

  // Decisions are read in journal order, alongside the events. A decision
  // journaled when the log's next sequence number was p followed every event
  // below p on its pool, so it becomes due once those are replayed; it runs
  // then if its pool has replayed as many events as it had applied when the
  // decision was made, else it waits in its pool's queue for the events that
  // were applied but not yet logged at the time (a batch being appended).
  // Memory stays small: only those waiting decisions are held.
  //
  // A trimmed log starts mid-history: the counts no longer line up with the
  // retained events, so its decisions are left out.
  //
  // With a snapshot that the retained log continues, the pools start from it
  // and only the events and decisions after it are replayed.
  uint64_t first_event = log.first_sequence(), first_decision = 0;
  std::optional<PoolsSnapshot> snapshot;
  if (auto latest = log.LatestSnapshot(); latest.ok()) {
    if (latest->sequence >= log.first_sequence()) {
      auto decoded = DecodePoolsSnapshot(latest->bytes);
      if (!decoded.ok()) {
        return absl::DataLossError(absl::StrCat("event log: the snapshot at sequence ",
                                                latest->sequence, ": ",
                                                decoded.status().message()));
      }
      // An older format holds no policy state this build can load: its pools
      // would restart from their eviction order only.
      const absl::string_view why = MissingPolicyStates(*decoded);
      const std::string old_format =
          why.empty() ? ""
                      : absl::StrCat("the snapshot at sequence ", latest->sequence,
                                     " is of format ", int{decoded->format}, " (", why, ")");
      if (!why.empty() && log.first_sequence() == 0) {
        // Its policies would restart approximately; the whole log is exact.
        stats.snapshot_note = absl::StrCat(old_format, ": not used, the whole log is replayed");
      } else {
        if (!why.empty()) {
          stats.snapshot_note = absl::StrCat(
              old_format,
              " and the log before it was trimmed: loaded the approximate way, policies other "
              "than lru restart from their eviction order only");
        }
        snapshot = *std::move(decoded);
        first_event = latest->sequence;
        first_decision = latest->decision;
        stats.snapshot_sequence = latest->sequence;
        stats.from_snapshot = true;
      }
    }
  } else if (latest.status().code() != absl::StatusCode::kNotFound) {
    return latest.status();
  }
  std::unique_ptr<EventLog::DecisionCursor> cursor = log.ReadDecisionsFrom(first_decision);
  const bool trimmed = !snapshot && log.first_sequence() > 0;
  uint64_t number = 0, due_at = 0;
  std::string record;
  bool have = false;
  std::string last_swap;  // of a trimmed log: the model it ended with
  uint64_t last_swap_number = 0;
  if (trimmed) {
    while (cursor->Next(&number, &due_at, &record)) {
      if (!record.empty() && record[0] == kModelSwapRecord) {
        last_swap = record;
        last_swap_number = number;
      } else {
        ++stats.decisions_skipped;
      }
    }
  } else {
    have = cursor->Next(&number, &due_at, &record);
  }
  if (!cursor->status().ok()) return cursor->status();

  absl::flat_hash_map<std::string, std::deque<Pending>> waiting;
  auto redo = [&](const Pending& p) {
    if (p.model != nullptr) {
      // Cannot fail: the first pool's swap succeeded with this model.
      pools.SwapPoolModel(p.node, p.tier, p.model).IgnoreError();
      return;
    }
    if (!pools.RedoDecision(p.record).ok()) ++stats.decisions_failed;
    ++stats.decisions;
  };
  // Runs a pool's waiting decisions that its `events` now allow.
  auto drain = [&](std::deque<Pending>& queue, uint64_t events) {
    while (!queue.empty() && queue.front().shard_events <= events) {
      redo(queue.front());
      queue.pop_front();
    }
  };
  // Runs `p` now if its pool has caught up and has nothing waiting, else
  // queues it behind what waits.
  auto run_or_wait = [&](const std::string& node, v1::Tier tier, Pending p) {
    auto it = waiting.find(NodePools::ShardKey(node, tier));
    if ((it == waiting.end() || it->second.empty()) &&
        pools.EventsApplied(node, tier) >= p.shard_events) {
      redo(p);
    } else {
      waiting[NodePools::ShardKey(node, tier)].push_back(std::move(p));
    }
  };
  // A journaled model swap: load the file again and, if it is still the
  // model that was swapped in, swap each pool at its recorded place.
  auto swap_model = [&](uint64_t number, const std::string& r, bool before_events) -> absl::Status {
    auto swap = DecodeModelSwap(r);
    if (!swap.ok()) {
      return absl::DataLossError(
          absl::StrCat("event log: decision ", number, ": ", swap.status().message()));
    }
    auto model = load_model(swap->path);
    std::string refused;
    if (!model.ok()) {
      refused = std::string(model.status().message());
    } else if ((*model)->version() != swap->version) {
      refused = absl::StrCat("it is now ", (*model)->version());
    }
    if (!refused.empty()) {
      ++stats.model_swaps_skipped;
      stats.model_note =
          absl::StrCat("the model swapped in at decision ", number, " (", swap->path, ", version ",
                       swap->version, ") cannot be loaded again: ", refused,
                       "; the pools keep the model they had before it");
      return absl::OkStatus();
    }
    ++stats.model_swaps;
    pools.NoteModelSwap(r);
    stats.model_version = swap->version;
    stats.model_path = swap->path;
    pools.SetModelForNewPools(*model);
    if (before_events) return absl::OkStatus();  // no pool exists yet
    for (const auto& p : swap->pools) {
      Pending pending;
      pending.shard_events = p.events_applied;
      pending.model = *model;
      pending.node = p.node;
      pending.tier = p.tier;
      run_or_wait(p.node, p.tier, std::move(pending));
    }
    return absl::OkStatus();
  };
  // Makes every decision due at or before event `sequence` run or wait.
  auto release = [&](uint64_t sequence) -> absl::Status {
    while (have && due_at <= sequence) {
      if (!record.empty() && record[0] == kModelSwapRecord) {
        if (auto st = swap_model(number, record, false); !st.ok()) return st;
        have = cursor->Next(&number, &due_at, &record);
        continue;
      }
      std::string node;
      v1::Tier tier = v1::TIER_UNSPECIFIED;
      uint64_t shard_events = 0;
      if (auto st = NodePools::DecisionShard(record, &node, &tier, &shard_events); !st.ok()) {
        return absl::DataLossError(
            absl::StrCat("event log: decision ", number, ": ", st.message()));
      }
      Pending pending;
      pending.shard_events = shard_events;
      pending.record = std::move(record);
      run_or_wait(node, tier, std::move(pending));
      have = cursor->Next(&number, &due_at, &record);
    }
    return cursor->status();
  };

  if (snapshot) {
    if (!snapshot->model_swap.empty()) {
      if (auto st = swap_model(first_decision, snapshot->model_swap, true); !st.ok()) return st;
    }
    std::string refused;
    if (auto st = pools.RestoreAll(*snapshot, &refused); !st.ok()) {
      return absl::DataLossError(absl::StrCat("event log: the snapshot at sequence ", first_event,
                                              " does not load: ", st.message()));
    }
    if (!refused.empty()) {
      absl::StrAppend(&stats.snapshot_note, stats.snapshot_note.empty() ? "" : "; ",
                      "the snapshot at sequence ", first_event, ": ", refused);
    }
  }
  // A trimmed log's pools start with the model its history ended with.
  if (!last_swap.empty()) {
    if (auto st = swap_model(last_swap_number, last_swap, true); !st.ok()) return st;
  }

  const uint64_t total = log.next_sequence() - first_event;
  v1::Event event;
  absl::Status status =
      log.ForEachFrom(first_event, [&](uint64_t sequence, std::string_view value) -> absl::Status {
        if (auto st = release(sequence); !st.ok()) return st;
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
        } else if (!waiting.empty()) {
          auto it = waiting.find(NodePools::ShardKey(event.node_id(), event.tier()));
          if (it != waiting.end()) {
            drain(it->second, shard_events);
            if (it->second.empty()) waiting.erase(it);
          }
        }
        // Reading the clock per event would cost more than some events do.
        if (progress && (stats.events & 0xfff) == 0) {
          const auto now = Clock::now();
          if (std::chrono::duration<double>(now - last_report).count() >=
              progress_interval_seconds) {
            last_report = now;
            progress(stats.events, total, std::chrono::duration<double>(now - start).count());
          }
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  if (auto st = release(UINT64_MAX); !st.ok()) return st;
  // Decisions that followed events applied but never logged (the process
  // died while their batch was being appended): they run last.
  for (auto& [shard, queue] : waiting) drain(queue, UINT64_MAX);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace kvlearn
