#include "cli/prefill_sizing.h"

#include "absl/strings/str_format.h"
#include "sim/replay_result.h"

namespace kvlearn {

absl::StatusOr<CostModel> SizePrefillNodes(const ReplayTrace& replay, const CostModel& cost,
                                           const PoolReplayOptions& options, bool auto_nodes,
                                           std::ostream& log) {
  if (!auto_nodes) return cost;
  ReplayResult lru;
  auto nodes = SizePoolReplay(replay, cost, options, kTargetUtilization, &lru);
  if (!nodes.ok()) return nodes.status();
  HardwareProfile hw = cost.hardware();
  hw.prefill_nodes = *nodes;
  log << absl::StrFormat("prefill nodes auto: %d (LRU busy %.0f s over a %.0f s window)\n",
                         hw.prefill_nodes, lru.busy_seconds, lru.window_seconds());
  return CostModel(cost.model(), hw, cost.form());
}

}  // namespace kvlearn
