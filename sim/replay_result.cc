#include "sim/replay_result.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvlearn {
namespace {

// Nearest rank: the smallest sample with at least p% of samples <= it.
double Percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

LatencySummary Summarize(std::vector<double>& samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
  s.p50 = Percentile(samples, 50);
  s.p95 = Percentile(samples, 95);
  s.p99 = Percentile(samples, 99);
  return s;
}

void AddRequest(ReplayResult& m, const TraceRequest& r, const RequestOutcome& o,
                const RequestCharge& c) {
  const auto arrival = static_cast<double>(r.timestamp_ms);
  // The cluster counts requests as they finish, not as they arrive.
  m.first_arrival_ms = m.requests == 0 ? arrival : std::min(m.first_arrival_ms, arrival);
  m.last_arrival_ms = m.requests == 0 ? arrival : std::max(m.last_arrival_ms, arrival);
  ++m.requests;
  m.block_accesses += r.num_blocks;
  m.block_hits += o.hit_blocks;
  m.prompt_tokens += r.input_length;
  m.hit_tokens += o.hit_tokens;
  m.loaded_bytes += o.loaded_bytes;
  m.admitted_bytes += o.admitted_bytes;
  m.evicted_blocks += o.evicted_blocks;
  m.recomputed_tokens += r.input_length - o.hit_tokens;
  m.prefill_gpu_seconds += c.prefill_gpus * c.prefill_ms / 1000.0;
  m.transfer_seconds += c.transfer_ms / 1000.0;
  m.busy_seconds += c.busy_ms / 1000.0;
}

uint32_t InstancesForUtilization(const ReplayResult& r, double target) {
  const double window = r.window_seconds();
  if (!(window > 0) || !(target > 0)) return 1;
  const double needed = std::ceil(r.busy_seconds / (target * window));
  return static_cast<uint32_t>(std::max(1.0, needed));
}

std::optional<double> GapClosed(const ReplayResult& policy, const ReplayResult& lru,
                                const ReplayResult& oracle) {
  const auto misses = [](const ReplayResult& r) {
    return static_cast<double>(r.block_accesses - r.block_hits);
  };
  const double gap = misses(lru) - misses(oracle);
  if (gap <= 0) return std::nullopt;
  return (misses(lru) - misses(policy)) / gap;
}

}  // namespace kvlearn

namespace kvlearn {

std::optional<double> CostGapClosed(const ReplayResult& policy, const ReplayResult& lru,
                                    const ReplayResult& oracle, double transfer_weight) {
  const double gap = lru.cost_seconds(transfer_weight) - oracle.cost_seconds(transfer_weight);
  if (!(gap > 0)) return std::nullopt;
  return (lru.cost_seconds(transfer_weight) - policy.cost_seconds(transfer_weight)) / gap;
}

}  // namespace kvlearn
