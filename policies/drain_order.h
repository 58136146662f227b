// The order in which a policy would evict `candidates`, found by letting a
// scratch copy of it drain a scratch copy of its pool: SelectVictim, evict,
// OnEvict, until every candidate has left. For policies whose order depends
// on state their own scans change (s3fifo's promotions), so that no
// per-block key can tell it. Candidates the drain never reaches
// (pinned) follow in their given order; repeats count once.
//
// O(resident blocks) per call.
#pragma once

#include <span>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/pool_state.h"
#include "policies/retention_policy.h"

namespace kvlearn {

// REQUIRES: `scratch` is a copy of the policy that reads `pool`, itself a
// copy of the policy's pool; both are consumed.
inline std::vector<BlockIndex> DrainOrder(RetentionPolicy& scratch, PoolState& pool,
                                          std::span<const BlockIndex> candidates) {
  const absl::flat_hash_set<BlockIndex> wanted(candidates.begin(), candidates.end());
  std::vector<BlockIndex> order;
  absl::flat_hash_set<BlockIndex> taken;
  while (taken.size() < wanted.size()) {
    const BlockIndex victim = scratch.SelectVictim();
    if (victim == kNoBlock) break;
    pool.Evict(victim);
    scratch.OnEvict(victim);
    if (wanted.contains(victim) && taken.insert(victim).second) order.push_back(victim);
  }
  for (const BlockIndex b : candidates) {
    if (taken.insert(b).second) order.push_back(b);
  }
  return order;
}

}  // namespace kvlearn
