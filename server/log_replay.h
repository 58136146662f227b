// Rebuilds every pool's state at start-up from the sidecar's event log
// (server/event_log.h): the logged events go through NodePools::Apply in
// sequence order, as if they had just arrived, and each journaled decision
// (Admit, RankEviction) is redone through NodePools::RedoDecision right after
// the event its pool had applied last when the decision was made. Nothing is
// logged or journaled again, nor counted as ingested.
//
// Why the result equals the state before a stop or kill -9: a pool changes
// only through its events and its decision calls, every policy is
// deterministic, and the log holds the accepted events of each pool in the
// order they were applied (as long as one stream at a time writes a pool, as
// a node does) and the decisions with their place among them. So every
// policy's state, s3fifo's queues and kvlearn-cars' counters and exploration
// draws included, comes back as it was. What was not acknowledged (a batch
// being appended, a decision not yet journaled, when the process died) is
// not replayed: the node saw those calls fail.
//
// Model swaps (ReloadModel, SIGHUP) are journaled too: each is redone when
// every pool has replayed the events it had applied at the swap, after
// loading the journaled path again. If that file is gone, does not load, or
// holds another model than the journaled version (its bytes changed), the
// swap is skipped: the pools keep the model they had before it (the
// start-up --model, or an earlier swap) and ReplayStats::model_note says so
// in one line; decisions from then on may differ from before the restart.
// Serving resumes rather than refusing to start: a missing model should
// not take the cache's sidecar down, and ReloadModel can fix it.
//
// Snapshots (server/pools_snapshot.h): when the log holds one that the
// retained events continue (it was taken at or after the first retained
// sequence number), the pools are loaded from it and only the events and
// decisions after it are replayed, so recovery time is bounded by the
// snapshot interval. A loaded pool is rebuilt with a fresh policy that loads
// the state the old one saved (server/shard_image.h), so the result equals
// replaying the whole log. A snapshot of format 2 (written before policies
// saved their state) or 3 and 4 (policy states of older layouts, dropped) would
// restart policies other than lru approximately:
// it is not used, and the whole log is replayed, unless the log before it
// was trimmed, when it is loaded the approximate way; either way
// ReplayStats::snapshot_note says so in one line.
//
// A log trimmed by --log-max-bytes starts mid-history: events that need what
// was trimmed are refused (counted in ReplayStats::rejected), journaled
// decisions are not redone (their places no longer line up), and the state is
// rebuilt from the retained events only, under the last journaled model.
//
// Memory: events and decisions are streamed from RocksDB; only decisions
// waiting for events that were applied but not yet logged when they were made
// are held.
//
// Thread-safety: call before the server accepts calls (it runs alone).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/event_log.h"
#include "server/model_loader.h"
#include "server/node_pools.h"

namespace kvlearn {

struct ReplayStats {
  uint64_t events = 0;             // replayed (applied or refused)
  uint64_t rejected = 0;           // refused by the pools
  uint64_t decisions = 0;          // journaled decisions redone
  uint64_t decisions_failed = 0;   // of those, failed again (as they did live)
  uint64_t decisions_skipped = 0;  // not redone: the log was trimmed
  double seconds = 0;
  std::string first_rejection;       // "sequence N: message", empty if none
  uint64_t model_swaps = 0;          // journaled model swaps redone
  uint64_t model_swaps_skipped = 0;  // their file is gone or holds another model
  std::string model_version;         // of the last swap redone; empty if none
  std::string model_path;
  std::string model_note;          // why the last skipped swap was skipped; empty if none
  bool from_snapshot = false;      // the pools started from a snapshot
  uint64_t snapshot_sequence = 0;  // ... taken at this event sequence number
  // Why an old-format snapshot was skipped or loaded, and which pools'
  // policies refused their saved states; or empty.
  std::string snapshot_note;
};

// Loads a model file (server/model_loader.h's LoadModelForServing in the
// server; tests may count calls).
using ModelLoadFn =
    std::function<absl::StatusOr<std::shared_ptr<const LearnedModel>>(const std::string& path)>;

// Called every `progress_interval_seconds` of replay: events done so far, the
// total to replay, seconds elapsed.
using ReplayProgressFn = std::function<void(uint64_t done, uint64_t total, double seconds)>;

// Applies every retained event of `log` to `pools`. Fails (DATA_LOSS, naming
// the sequence number) on an entry or event that does not parse, and on a
// RocksDB read error; a refused event is counted, not an error.
absl::StatusOr<ReplayStats> ReplayEventLog(const EventLog& log, NodePools& pools,
                                           const ReplayProgressFn& progress = nullptr,
                                           double progress_interval_seconds = 1.0,
                                           const ModelLoadFn& load_model = LoadModelForServing);

}  // namespace kvlearn
