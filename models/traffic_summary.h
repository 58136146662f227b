// A summary of the traffic a model sees: request rate, prompt length in
// blocks, block reuse, block size. `kvlearn train` records its training
// split's in the model file, `kvlearn compare` computes the evaluated
// requests' and the sidecar its live requests', so that each can say how far
// the traffic has drifted from what the model learned (models/traffic_drift.h).
//
// TrafficSummarizer takes requests one at a time in bounded memory: request
// counts and times are exact; the reuse ratio is exact while at most
// kMaxTrackedBlocks distinct blocks have been seen and is estimated past that
// on a spatial sample of the blocks (a block is tracked when a hash of its id
// falls below a threshold that halves whenever the tracked set fills), so a
// trace and the sidecar's live traffic are summarised by the same code.
//
// Thread-safety: TrafficSummary is a plain value; a TrafficSummarizer is not
// safe to share without a lock.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/container/flat_hash_set.h"

namespace kvlearn {

struct TrafficSummary {
  uint64_t requests = 0;
  // (requests - 1) / (last arrival - first arrival); 0 with fewer than two
  // requests or when they all arrive at once.
  double request_rate_per_s = 0;
  double mean_prompt_blocks = 0;  // block ids per request
  // Share of block accesses to a block already accessed before (since the
  // summariser started, warm-up requests included).
  double block_reuse_ratio = 0;
  uint32_t block_size_tokens = 0;
};

// The summary's four quantities in a fixed order (request_rate, prompt_blocks,
// block_reuse, block_size), named as in /metrics' quantity label.
struct TrafficQuantity {
  std::string_view name;
  std::string_view unit;  // empty for a ratio
  double value = 0;
};
std::array<TrafficQuantity, 4> TrafficQuantities(const TrafficSummary& summary);

class TrafficSummarizer {
 public:
  // Distinct blocks tracked at most (about 1 MiB of ids).
  static constexpr size_t kMaxTrackedBlocks = size_t{1} << 16;

  explicit TrafficSummarizer(uint32_t block_size_tokens,
                             size_t max_tracked_blocks = kMaxTrackedBlocks);

  // One request arriving at `arrival_seconds` with prompt `block_ids`. A
  // request with `counted` false only warms the record of blocks seen (the
  // warm-up share of a replay): it is not in the summary.
  void Add(double arrival_seconds, std::span<const uint64_t> block_ids, bool counted = true);

  TrafficSummary Summary() const;
  // Share of blocks tracked: 1 while the reuse ratio is exact.
  double sampled_share() const;

 private:
  uint32_t block_size_tokens_;
  size_t max_tracked_;
  uint64_t threshold_ = UINT64_MAX;  // a block is tracked when Mix(id) <= threshold_
  absl::flat_hash_set<uint64_t> tracked_;
  uint64_t requests_ = 0;
  uint64_t blocks_ = 0;
  uint64_t tracked_accesses_ = 0;
  uint64_t tracked_reuses_ = 0;
  double first_arrival_s_ = 0;
  double last_arrival_s_ = 0;
};

}  // namespace kvlearn
