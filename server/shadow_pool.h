// One shadow policy of the experiment (server/experiment.h) on one (node,
// tier) pool of the sidecar: its own catalog, pool and policy, at the pool's
// configured capacity, fed the node's request arrivals. For each arrival it
// does what the pool replay (`kvlearn compare`) does with a trace request:
// the resident prefix hits, the rest is offered for admission root first,
// evicting the policy's victims as needed, and the request is charged
// (server/experiment_costs.h). It decides nothing for the node, and nothing
// the node does (stores, removals, hits) changes it: requests do not depend
// on the pool, so the shadow sees what it would have held.
//
// Memory: its blocks live in a NodePools::Shard of its own, compacted as the
// live pools are (server/shard_image.h): past `ghost_blocks` remembered
// blocks that are not resident, only the ghost_blocks / 2 most recent stay.
// So a shadow pool holds at most (its resident blocks + ghost_blocks)
// blocks; its residents are bounded by the pool's configured bytes. On top,
// every shadow pool of the sidecar draws its new blocks from one shared
// budget (--shadow-max-blocks): an arrival whose new blocks the budget
// cannot take makes that shadow pool drop all its ghosts and try again; if
// it still does not fit, the shadow skips it (counted, not served).
//
// Capacity scale: a shadow may run at `capacity_scale` times the pool's
// configured bytes (the resize estimates of server/resize_estimates.h run
// the live policy at 0.5x and 2x); an unbounded pool stays unbounded. It
// holds block ids and metadata only, never KV data, at any scale.
//
// Thread-safety: the caller holds the live shard's mutex; the shadow's own
// shard mutex is taken inside (uncontended).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "core/cost_model.h"
#include "kvlearn/v1/retention.pb.h"
#include "policies/policy_env.h"
#include "server/experiment.h"
#include "server/experiment_costs.h"
#include "server/node_pools.h"
#include "server/shadow_budget.h"

namespace kvlearn {

class ShadowPool {
 public:
  // Fails as the policy's factory does. `capacity_bytes` is the live
  // pool's; the shadow's is that times `capacity_scale` (ScaledCapacity).
  static absl::StatusOr<std::unique_ptr<ShadowPool>> Start(
      const ExperimentPolicy& spec, const std::string& node, v1::Tier tier, uint64_t capacity_bytes,
      PolicyEnv env, CostCounters* costs, ShadowBudget* budget, double capacity_scale = 1.0);
  // `capacity_bytes` x `scale`, rounded down as an integer pool size given
  // to `compare --pool-bytes` would be; a capacity at or past the
  // sidecar's unbounded one (UINT64_MAX / 2) is returned as it is.
  static uint64_t ScaledCapacity(uint64_t capacity_bytes, double scale);
  ~ShadowPool();

  const std::string& name() const { return name_; }
  const std::string& policy() const { return policy_; }
  const std::shared_ptr<const LearnedModel>& model() const { return model_; }
  // Where its requests are charged (the node's arm may change at a reload).
  void set_costs(CostCounters* costs) { costs_ = costs; }

  // Serves one arrival: `chain` indexes `live`, the live pool's catalog
  // (ids, parents, tokens and bytes as the live pool took them).
  void Serve(const BlockCatalog& live, std::span<const BlockIndex> chain, uint64_t input_tokens,
             int64_t timestamp_us, const CostModel& cost, uint32_t block_size,
             uint64_t ghost_blocks);
  // Empties the pool at `capacity_bytes` x its scale (the node cleared or
  // resized its own; `capacity_bytes` is the live pool's).
  void Restart(uint64_t capacity_bytes);

 private:
  ShadowPool() = default;
  // Rebuilds its pool keeping `keep_ghosts` ghosts (server/shard_image.h)
  // and gives the blocks dropped back to the budget. REQUIRES: s.mu held.
  void Compact(NodePools::Shard& s, size_t keep_ghosts, const CostModel& cost, uint32_t block_size);

  std::string name_;
  std::string policy_;
  double capacity_scale_ = 1.0;
  std::shared_ptr<const LearnedModel> model_;
  PolicyEnv env_;
  CostCounters* costs_ = nullptr;
  ShadowBudget* budget_ = nullptr;
  std::unique_ptr<NodePools::Shard> pool_;
  uint32_t requests_ = 0;   // AccessInfo::request, as the replay numbers them
  uint32_t positions_ = 0;  // AccessInfo::access_pos of the next chain's first block
};

}  // namespace kvlearn
