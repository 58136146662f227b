// Spatially hashed sampling of a trace's chains, so that training reads a log
// of any length in bounded memory (after SHARDS, Waldspurger et al., FAST '15,
// which samples a cache's references by a hash of their key).
//
// The unit kept or dropped is a *branch*: the requests whose chain shares its
// block at depth 1 (the block after the root; the root itself for a chain of
// one block). Block ids are prefix hashes, so every use of a block at depth 1
// or deeper falls in requests of one branch: a kept branch keeps every use of
// its blocks, and their labels (next use, reuse within H) are those of the
// whole trace. Only the roots (depth 0, a system prompt many branches share)
// are seen through the kept branches' uses alone.
//
// A branch is kept when the hash of its key block falls in the first
// `kept_buckets` of kChainBuckets buckets; PlanChainSample picks the most
// buckets whose block accesses fit the budget, from a first pass's counts.
// The same ids give the same sample wherever they are read (a log or its
// exported file).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "datasets/trace.h"

namespace kvlearn {

inline constexpr uint32_t kChainBuckets = 1 << 16;

// The bucket of a request's branch, in [0, kChainBuckets). REQUIRES: ids not empty.
uint32_t ChainBucket(std::span<const uint64_t> ids);

// Block accesses per bucket, counted in a first pass.
class ChainBucketCounts {
 public:
  ChainBucketCounts() : accesses_(kChainBuckets, 0) {}
  void Add(std::span<const uint64_t> ids) {
    if (!ids.empty()) accesses_[ChainBucket(ids)] += ids.size();
  }
  const std::vector<uint64_t>& accesses() const { return accesses_; }

 private:
  std::vector<uint64_t> accesses_;
};

struct ChainSample {
  uint32_t kept_buckets = kChainBuckets;  // all: no sampling
  uint64_t kept_accesses = 0;
  uint64_t total_accesses = 0;
  bool all() const { return kept_buckets == kChainBuckets; }
  // The share of buckets kept: the expected share of branches.
  double rate() const { return static_cast<double>(kept_buckets) / kChainBuckets; }
  bool Keeps(std::span<const uint64_t> ids) const {
    return all() || (!ids.empty() && ChainBucket(ids) < kept_buckets);
  }
};

// The most leading buckets whose accesses add up to at most `max_accesses`
// (0: no bound, keep all), and at least one bucket (which may exceed the
// budget when one branch alone does; empty leading buckets come with it).
ChainSample PlanChainSample(const ChainBucketCounts& counts, uint64_t max_accesses);

// The requests of `trace` whose branch `sample` keeps, in order (lines kept).
Trace SampleTrace(const Trace& trace, const ChainSample& sample);

}  // namespace kvlearn
