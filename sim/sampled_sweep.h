// A pool sweep replayed on a sampled trace (sim/trace_sample.h), mapped back
// to the full trace: the pools it replays at, and its rows scaled to read as
// the full trace's.
#pragma once

#include <span>
#include <vector>

#include "sim/pool_sweep.h"
#include "sim/trace_sample.h"

namespace kvlearn {

// Each fraction's pool of the full trace's distinct-block bytes, replayed at
// the sampled pool standing for it.
std::vector<SweepPool> SampledPools(const SampleScale& scale, std::span<const double> fractions);

// Every point's pool_bytes becomes the full pool's, and every total of its
// rows and of its bound (costs, requests, accesses, hits, tokens, bytes,
// evictions) is divided by scale.cost_rate; ratios (hit ratios) are left as
// the sample measured them. Busy time, prefill instances and TTFT stay the
// sampled traffic's: they describe the sample on the instances sized for it.
// REQUIRES: the sweep ran at SampledPools(scale, its fractions); bounds, if
// wanted, are added before.
void ScaleSweepToFull(const SampleScale& scale, PoolSweep& sweep);

}  // namespace kvlearn
