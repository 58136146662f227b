// How learned policies compute features, set from the cost model's link, and
// the tests' hook to see every feature vector computed. Kept in core so the
// policy environment can carry it without depending on the extractor.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/block_catalog.h"

namespace kvlearn {

// Receives (block, request index, feature vector); for tests and tracing.
using FeatureSink = std::function<void(BlockIndex, uint32_t, std::span<const float>)>;

struct FeatureConfig {
  // Pool link bandwidth, bytes per ms: the load cost T of a block is
  // bytes / this. 25 GB/s RDMA = 25e6.
  double link_bytes_per_ms = 25e6;
};

}  // namespace kvlearn
