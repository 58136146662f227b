// What one policy's replay measured, over the evaluated requests only (those
// after the warm-up share given by --eval-from), and the one function every
// replay counts a request with (AddRequest). Plain values: a ReplayResult is
// written by one replay and read after it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datasets/trace.h"
#include "policies/policy_factory.h"

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

// What `learned` (a follower of experts, policies/learned_policy.h) did in a
// replay: its leader switches over the whole replay, warm-up included, and
// the expert that led the most evaluated requests (led: the leader once the
// request was served), with the share of the evaluated requests it led.
struct FollowerSummary {
  uint64_t switches = 0;
  std::string main_leader;
  double main_leader_share = 0;
};

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
  // Prefill time of the missed tokens times the GPUs of a prefill instance.
  double prefill_gpu_seconds = 0;
  // Pool loads and admissions at the link's nominal bandwidth, each transfer
  // with its latency (CostModel::TransferMs); the cluster adds DRAM loads
  // over PCIe.
  double transfer_seconds = 0;
  // Time prefill instances were held by the evaluated requests (loads +
  // prefill), summed over requests.
  double busy_seconds = 0;
  // Arrivals of the first and last evaluated requests: the evaluated window.
  double first_arrival_ms = 0;
  double last_arrival_ms = 0;
  uint32_t prefill_nodes = 0;  // set by the replay
  LatencySummary ttft_ms;
  // Whole replay, warm-up included: accesses per wall-clock second of the
  // request loop (the summary after it not counted).
  uint64_t replayed_accesses = 0;
  double replay_seconds = 0;
  std::optional<double> gap_closed;         // set by the comparison, see GapClosed
  std::optional<double> cost_gap_closed;    // set by the comparison, see CostGapClosed
  std::optional<FollowerSummary> follower;  // set for `learned` by the pool replay

  double block_hit_ratio() const {
    return block_accesses ? static_cast<double>(block_hits) / block_accesses : 0;
  }
  double token_hit_ratio() const {
    return prompt_tokens ? static_cast<double>(hit_tokens) / prompt_tokens : 0;
  }
  uint64_t transfer_bytes() const { return loaded_bytes + admitted_bytes; }
  // The one price of the replay's decisions: prefill GPU-seconds plus
  // `transfer_weight` * transfer seconds (docs/results.md).
  double cost_seconds(double transfer_weight) const {
    return prefill_gpu_seconds + transfer_weight * transfer_seconds;
  }
  double window_seconds() const { return (last_arrival_ms - first_arrival_ms) / 1000.0; }
  // Mean over prefill instances of busy time / evaluated window: the load
  // the evaluated requests bring. Above 1 the queues grow without bound. 0
  // when the window is empty (one evaluated arrival time).
  double utilization() const {
    const double window = window_seconds();
    return window > 0 && prefill_nodes > 0 ? busy_seconds / (prefill_nodes * window) : 0;
  }
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

// What serving one request cost, in the replay's own timing model.
struct RequestCharge {
  double prefill_ms = 0;      // prefill of the missed tokens on one instance
  uint32_t prefill_gpus = 1;  // GPUs that prefill holds (CostModel::GpusPerInstance)
  double transfer_ms = 0;     // loads + admission, see ReplayResult::transfer_seconds
  double busy_ms = 0;         // time the instance was held: loads + prefill
};

// Adds one evaluated request to the counters of `result`: the one place the
// pool replay, the load generator (both through ReplayAccounting) and the
// cluster simulator count a request, so their results agree by construction.
// TTFT samples are the caller's (each replay knows its own queues). Any
// order: the window is the span of the arrivals added.
void AddRequest(ReplayResult& result, const TraceRequest& request, const RequestOutcome& outcome,
                const RequestCharge& charge);

// --prefill-nodes auto sizes the cluster so that LRU keeps the instances
// busy at most this share of the evaluated window.
inline constexpr double kTargetUtilization = 0.8;
// A row at or above this utilization is flagged saturated: its queues grow
// with the trace's length, and so does its TTFT.
inline constexpr double kSaturatedUtilization = 0.95;

// Whether `r` makes its run saturated. The recompute bound (`no-cache`,
// IsRecomputeBound) is left out: a cluster sized for LRU at 80% busy is meant
// to be too small for it. Its row still shows its utilization.
inline bool CountsForSaturation(const ReplayResult& r) {
  return !IsRecomputeBound(r.policy) && r.utilization() >= kSaturatedUtilization;
}

// Smallest number of prefill instances at which `result`'s busy time fills
// at most `target` of each instance's evaluated window:
// ceil(busy / (target * window)), at least 1 (1 when the window is empty).
uint32_t InstancesForUtilization(const ReplayResult& result, double target);

// Share of the block-miss gap between LRU and the offline oracle that
// `policy` closes: (misses_lru - misses_policy) / (misses_lru - misses_oracle).
// nullopt when LRU already matches the oracle.
std::optional<double> GapClosed(const ReplayResult& policy, const ReplayResult& lru,
                                const ReplayResult& oracle);
// The same share on cost_seconds(transfer_weight):
// (cost_lru - cost_policy) / (cost_lru - cost_oracle); nullopt when the
// oracle costs no less than LRU.
std::optional<double> CostGapClosed(const ReplayResult& policy, const ReplayResult& lru,
                                    const ReplayResult& oracle, double transfer_weight);

}  // namespace kvlearn
