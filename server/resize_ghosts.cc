#include "server/resize_ghosts.h"

#include "absl/strings/str_cat.h"
#include "server/experiment.h"

namespace kvlearn {

absl::Status ResizeGhosts::Follow(const std::string& node, v1::Tier tier, const std::string& policy,
                                  const std::shared_ptr<const LearnedModel>& model,
                                  uint64_t capacity_bytes, absl::FunctionRef<PolicyEnv()> env,
                                  ResizeEstimates& estimates) {
  if (live_ == nullptr) live_ = estimates.Live(node);
  for (size_t i = 0; i < pools_.size(); ++i) {
    auto& ghost = pools_[i];
    // The model pointer, not its version: a swap hands the live pool a new
    // one, and then the ghosts should score with it too.
    if (ghost != nullptr && ghost->policy() == policy && ghost->model() == model) continue;
    ghost.reset();  // its blocks go back to the budget first
    ExperimentPolicy spec;
    spec.name = absl::StrCat("resize-", kResizeScaleLabels[i]);
    spec.policy = policy;
    spec.loaded_model = model;
    auto started =
        ShadowPool::Start(spec, node, tier, capacity_bytes, env(), estimates.Ghost(node, i),
                          estimates.budget(), kResizeScales[i]);
    if (!started.ok()) {
      for (auto& p : pools_) p.reset();
      return started.status();
    }
    ghost = *std::move(started);
  }
  return absl::OkStatus();
}

void ResizeGhosts::Serve(const BlockCatalog& live, std::span<const BlockIndex> chain,
                         uint64_t input_tokens, int64_t timestamp_us, const CostModel& cost,
                         uint32_t block_size, uint64_t ghost_blocks) {
  for (auto& ghost : pools_) {
    if (ghost != nullptr) {
      ghost->Serve(live, chain, input_tokens, timestamp_us, cost, block_size, ghost_blocks);
    }
  }
}

void ResizeGhosts::Restart(uint64_t capacity_bytes) {
  for (auto& ghost : pools_) {
    if (ghost != nullptr) ghost->Restart(capacity_bytes);
  }
}

void ResizeGhosts::ChargeLive(const CostModel& cost, const RequestTally& tally) {
  if (live_ != nullptr) live_->Charge(cost, tally);
}

}  // namespace kvlearn
