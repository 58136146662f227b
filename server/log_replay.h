// Rebuilds every pool's state at start-up by replaying the sidecar's event
// log (server/event_log.h) through NodePools::Apply, in sequence order, as if
// the events had just arrived (nothing is logged again or counted as
// ingested).
//
// Why the result equals the state before a stop or kill -9: the pools change
// only through events and the two decision calls, and the log holds every
// accepted event in the order it was applied to its pool (one stream per
// pool, as a node sends them). The decision calls' own changes are redone by
// the events that follow them in the protocol: a block RankEviction evicted
// in the sidecar's view comes back as the node's block_removed (the node
// reports it before its next event for that pool), a kept Admit candidate as
// its block_stored. That holds for every policy whose ShouldAdmit changes no
// state (lru, lfu, fifo, gdsf, s3fifo, learned, no-cache); kvlearn-cars
// counts and draws its exploration coin in ShouldAdmit, so its replayed state
// can differ (docs/sidecar.md, "Restart and recovery").
//
// A log trimmed by --log-max-bytes starts mid-history: events that need what
// was trimmed are refused (counted in ReplayStats::rejected), and the state is
// rebuilt from the retained suffix only.
//
// Thread-safety: call before the server accepts calls (it runs alone).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "server/event_log.h"
#include "server/node_pools.h"

namespace kvlearn {

struct ReplayStats {
  uint64_t events = 0;    // replayed (applied or refused)
  uint64_t rejected = 0;  // refused by the pools
  double seconds = 0;
  std::string first_rejection;  // "sequence N: message", empty if none
};

// Called every `progress_interval_seconds` of replay: events done so far, the
// total to replay, seconds elapsed.
using ReplayProgressFn = std::function<void(uint64_t done, uint64_t total, double seconds)>;

// Applies every retained event of `log` to `pools`. Fails (DATA_LOSS, naming
// the sequence number) on an entry or event that does not parse, and on a
// RocksDB read error; a refused event is counted, not an error.
absl::StatusOr<ReplayStats> ReplayEventLog(const EventLog& log, NodePools& pools,
                                           const ReplayProgressFn& progress = nullptr,
                                           double progress_interval_seconds = 1.0);

}  // namespace kvlearn
