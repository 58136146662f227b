// What a policy is built from (PolicyEnv), and the one place that fills it in
// from a cost model: the simulators, the learner and the sidecar all call
// MakePolicyEnv, so a policy sees the same link bandwidth and model whichever
// of them runs it. PolicyDriver sets the catalog and pool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_catalog.h"
#include "core/cost_model.h"
#include "core/feature_config.h"
#include "core/pool_state.h"
#include "policies/learned/ablation.h"

namespace kvlearn {

class LearnedModel;  // models/learned_model.h

// Everything a policy may be built from. `next_use` is the future and is
// given only to the offline oracle: next_use[access_pos] is the index of the
// next request that uses the same block, or kNeverUsedAgain.
inline constexpr uint32_t kNeverUsedAgain = UINT32_MAX;
struct PolicyEnv {
  const BlockCatalog* catalog = nullptr;
  const PoolState* pool = nullptr;
  const std::vector<uint32_t>* next_use = nullptr;
  // The trained model, for policies that need one (nullptr otherwise).
  std::shared_ptr<const LearnedModel> model;
  // How learned policies compute features (must match the cost model's link).
  FeatureConfig features;
  // Fixed cost of one pool transfer on top of bytes / link, ms
  // (CostModel::TransferLatencyMs): the learned policy prices its experts'
  // loads and admissions as the replay charges them.
  double transfer_latency_ms = 0;
  // Tests only: receives every feature vector a learned policy computes.
  FeatureSink feature_sink;
  // False for a tier that already holds what it is offered (a prefill node's
  // HBM keeps what it just computed, and its DRAM a write-through copy):
  // admitting moves no priced bytes, so admission filters have nothing to save.
  bool admission_moves_bytes = true;
  // Research only: parts of learned and learned-model turned off
  // (learned/ablation.h); CreatePolicy adds KVLEARN_LEARNED_ABLATE's.
  LearnedAblation learned_ablation;
};

// The environment every caller builds: the pool link of `cost` for features,
// `model` for policies that score with one, `next_use` for offline oracles.
// The catalog and pool are left for PolicyDriver::StartPolicy to set.
inline PolicyEnv MakePolicyEnv(const CostModel& cost,
                               std::shared_ptr<const LearnedModel> model = nullptr,
                               const std::vector<uint32_t>* next_use = nullptr) {
  PolicyEnv env;
  env.model = std::move(model);
  env.next_use = next_use;
  env.features.link_bytes_per_ms = cost.LinkBytesPerMs();
  env.transfer_latency_ms = cost.TransferLatencyMs();
  return env;
}

}  // namespace kvlearn
