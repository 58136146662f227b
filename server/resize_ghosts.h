// The ghost pools of one (node, tier) pool for serve --resize-estimates
// (server/resize_estimates.h): one ShadowPool per kResizeScales entry,
// running the pool's live policy and model at that scale of its configured
// bytes. They decide nothing and hold block ids and metadata only.
//
// They follow the live policy: when the pool's policy or model changes (an
// experiment reload, a model swap), the ghosts start again, empty, under the
// new one, as a new shadow would.
//
// Thread-safety: the caller holds the live shard's mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "core/cost_model.h"
#include "kvlearn/v1/retention.pb.h"
#include "policies/policy_env.h"
#include "server/experiment_costs.h"
#include "server/resize_estimates.h"
#include "server/shadow_pool.h"

namespace kvlearn {

class ResizeGhosts {
 public:
  // Makes the ghosts run `policy` with `model` (keeping them if they do) on
  // a pool of `capacity_bytes`, charging `estimates`' counters of `node`;
  // `env` is called only when a ghost starts. Fails as the policy's factory
  // does (every ghost is then dropped, to start again at the next call).
  absl::Status Follow(const std::string& node, v1::Tier tier, const std::string& policy,
                      const std::shared_ptr<const LearnedModel>& model, uint64_t capacity_bytes,
                      absl::FunctionRef<PolicyEnv()> env, ResizeEstimates& estimates);
  // ShadowPool::Serve on every ghost.
  void Serve(const BlockCatalog& live, std::span<const BlockIndex> chain, uint64_t input_tokens,
             int64_t timestamp_us, const CostModel& cost, uint32_t block_size,
             uint64_t ghost_blocks);
  // Empties every ghost at its scale of `capacity_bytes` (the live pool's).
  void Restart(uint64_t capacity_bytes);
  // Charges one request of the live pool to its node's scale-1 counters
  // (nothing before the first Follow).
  void ChargeLive(const CostModel& cost, const RequestTally& tally);

 private:
  std::array<std::unique_ptr<ShadowPool>, kResizeScales.size()> pools_;
  CostCounters* live_ = nullptr;
};

}  // namespace kvlearn
