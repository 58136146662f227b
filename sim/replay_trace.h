// A trace made ready for replay: every hash id mapped to a dense BlockIndex in
// a BlockCatalog (with its parent, depth, tokens, bytes and recompute cost
// under a cost model), and for every access the next request that uses the
// same block (the future, used only by the offline oracle and by labels).
//
// Built once per trace and cost model, then shared read-only by the replays of
// all policies.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/block_catalog.h"
#include "core/cost_model.h"
#include "datasets/trace.h"

namespace kvlearn {

struct ReplayTrace {
  const Trace* trace = nullptr;
  BlockCatalog catalog;
  std::vector<BlockIndex> blocks;  // parallel to trace->hash_ids
  std::vector<uint32_t> next_use;  // parallel to trace->hash_ids; kNeverUsedAgain if none
  uint64_t distinct_block_bytes = 0;
  uint64_t block_accesses() const { return blocks.size(); }
};

// Fails if a block id appears behind two different parents (the ids then do
// not describe prefixes), naming both lines.
// REQUIRES: `trace` outlives the result.
absl::StatusOr<ReplayTrace> BuildReplayTrace(const Trace& trace, const CostModel& cost);

}  // namespace kvlearn
