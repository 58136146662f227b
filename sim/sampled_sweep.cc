#include "sim/sampled_sweep.h"

#include <cmath>

namespace kvlearn {
namespace {

uint64_t Scaled(uint64_t count, double rate) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(count) / rate));
}

void ScaleResult(double rate, ReplayResult& r) {
  for (uint64_t* count :
       {&r.requests, &r.block_accesses, &r.block_hits, &r.prompt_tokens, &r.hit_tokens,
        &r.loaded_bytes, &r.admitted_bytes, &r.evicted_blocks, &r.recomputed_tokens}) {
    *count = Scaled(*count, rate);
  }
  r.prefill_gpu_seconds /= rate;
  r.transfer_seconds /= rate;
}

}  // namespace

std::vector<SweepPool> SampledPools(const SampleScale& scale, std::span<const double> fractions) {
  std::vector<SweepPool> pools;
  for (const double f : fractions) {
    pools.push_back({f, scale.SampledPoolBytes(PoolBytesAt(f, scale.full_distinct_bytes))});
  }
  return pools;
}

void ScaleSweepToFull(const SampleScale& scale, PoolSweep& sweep) {
  const double rate = scale.cost_rate;
  for (SweepPoint& point : sweep.points) {
    point.pool_bytes = PoolBytesAt(point.pool_fraction, scale.full_distinct_bytes);
    for (ReplayResult& r : point.results) ScaleResult(rate, r);
    if (point.cost_bound) {
      point.cost_bound->cost_seconds /= rate;
      point.cost_bound->average_capacity_cost_seconds /= rate;
      point.cost_bound->no_cache_cost_seconds /= rate;
    }
  }
}

}  // namespace kvlearn
