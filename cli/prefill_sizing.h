// --prefill-nodes auto, as `compare` and `loadgen` both settle it: the fewest
// prefill instances at which LRU keeps them busy at most kTargetUtilization of
// the evaluated window, on one pool of options.pool_bytes over the whole trace
// (SizePoolReplay). One place, so both commands run, and print, the same count
// for the same trace and pool. Stateless; safe to call from any thread.
#pragma once

#include <ostream>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"

namespace kvlearn {

// `cost` with its prefill instances sized for `replay` when `auto_nodes`
// (one line on `log` saying how many and why), else `cost` unchanged.
absl::StatusOr<CostModel> SizePrefillNodes(const ReplayTrace& replay, const CostModel& cost,
                                           const PoolReplayOptions& options, bool auto_nodes,
                                           std::ostream& log);

}  // namespace kvlearn
