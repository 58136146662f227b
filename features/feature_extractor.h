// Turns a block, its history and the pool's state into the feature vector of
// feature_schema.h. The one extractor: the simulator's learned policy, the
// learner's sample recorder and the sidecar all call this, never their own.
//
// Stateless apart from its configuration; safe to share between threads as
// long as the AccessHistory and PoolState it reads are not being written.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/block_catalog.h"
#include "core/feature_config.h"
#include "core/pool_state.h"
#include "features/access_history.h"
#include "features/feature_schema.h"

namespace kvlearn {

class FeatureExtractor {
 public:
  explicit FeatureExtractor(FeatureConfig config) : config_(config) {}

  const FeatureConfig& config() const { return config_; }

  // Writes kNumFeatures values to `out` for block b at `now_ms`.
  void Extract(BlockIndex b, int64_t now_ms, const BlockCatalog& catalog,
               const AccessHistory& history, const PoolState& pool,
               std::span<float, kNumFeatures> out) const;

  // Load cost of b over the pool link, ms.
  double TransferMs(const BlockMeta& meta) const {
    return static_cast<double>(meta.bytes) / config_.link_bytes_per_ms;
  }

 private:
  FeatureConfig config_;
};

}  // namespace kvlearn
