// What one policy's replay measured, over the evaluated requests only (those
// after the warm-up share given by --eval-from).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datasets/trace.h"

namespace kvlearn {

// Nearest-rank percentiles of a latency sample, in ms.
struct LatencySummary {
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

// Sorts `samples` in place. An empty sample gives all zeros.
LatencySummary Summarize(std::vector<double>& samples);

struct ReplayResult {
  std::string policy;
  uint64_t requests = 0;
  uint64_t block_accesses = 0;
  uint64_t block_hits = 0;
  uint64_t prompt_tokens = 0;
  uint64_t hit_tokens = 0;
  uint64_t loaded_bytes = 0;    // pool -> prefill node, for hits
  uint64_t admitted_bytes = 0;  // prefill node -> pool, for new blocks kept
  uint64_t evicted_blocks = 0;
  uint64_t recomputed_tokens = 0;
  double prefill_gpu_seconds = 0;
  LatencySummary ttft_ms;
  // Whole replay, warm-up included: accesses per wall-clock second.
  uint64_t replayed_accesses = 0;
  double replay_seconds = 0;
  std::optional<double> gap_closed;  // set by the comparison, see GapClosed

  double block_hit_ratio() const {
    return block_accesses ? static_cast<double>(block_hits) / block_accesses : 0;
  }
  double token_hit_ratio() const {
    return prompt_tokens ? static_cast<double>(hit_tokens) / prompt_tokens : 0;
  }
  uint64_t transfer_bytes() const { return loaded_bytes + admitted_bytes; }
  double accesses_per_second() const {
    return replay_seconds > 0 ? replayed_accesses / replay_seconds : 0;
  }
};

// What one request got from the pool (or, in the cluster, from its tiers).
struct RequestOutcome {
  uint32_t hit_blocks = 0;  // leading blocks not recomputed
  uint64_t hit_tokens = 0;
  uint64_t loaded_bytes = 0;    // brought to the prefill node for the hit prefix
  uint64_t admitted_bytes = 0;  // copied prefill node -> pool for new blocks kept
  uint64_t evicted_blocks = 0;  // pool evictions this request caused
};

// Adds one evaluated request to the counters of `result`: the one place the
// pool replay, the load generator (both through ReplayAccounting) and the
// cluster simulator count a request, so their results agree by construction.
// `prefill_ms` is the prefill time of the missed tokens. TTFT samples are the
// caller's (each replay knows its own queues).
void AddRequest(ReplayResult& result, const TraceRequest& request, const RequestOutcome& outcome,
                double prefill_ms);

// Share of the block-miss gap between LRU and the offline oracle that
// `policy` closes: (misses_lru - misses_policy) / (misses_lru - misses_oracle).
// nullopt when LRU already matches the oracle.
std::optional<double> GapClosed(const ReplayResult& policy, const ReplayResult& lru,
                                const ReplayResult& oracle);

}  // namespace kvlearn
