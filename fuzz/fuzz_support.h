// What the sidecar fuzzers share: the NodePools options they run (the
// cost model, the tests' small model for learned), the policies they pick
// from, and the checks every input must pass.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/cost_model.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/node_pools.h"
#include "tests/support/test_model.h"

namespace kvlearn::fuzz {

// Seeds name a policy by its index here: new policies are appended.
inline constexpr const char* kOnlinePolicies[] = {"lru",          "learned",      "lfu",   "fifo",
                                                  "gdsf",         "s3fifo",       "sieve", "arc",
                                                  "kvlearn-cars", "learned-model"};

// Aborts, which the fuzzer reports as a crash with its input.
inline void Check(bool ok) {
  if (!ok) std::abort();
}

inline NodePoolsOptions Options(const char* policy) {
  static const auto* cost = new std::shared_ptr<const CostModel>(
      std::make_shared<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100")));
  static const auto* model = new std::shared_ptr<const LearnedModel>(MakeTestModel());
  NodePoolsOptions options;
  options.policy = policy;
  options.model = *model;
  options.cost = *cost;
  options.max_candidates = 64;
  return options;
}

// The counters behind /metrics agree with what the pools report.
inline void CheckCounters(const NodePools& pools) {
  v1::GetStatusResponse status;
  pools.FillStatus(status);
  uint64_t tracked = 0, resident = 0, bytes = 0;
  for (const auto& p : status.pools()) {
    tracked += p.blocks_tracked();
    resident += p.resident_blocks();
    bytes += p.resident_bytes();
  }
  const PoolCounters& c = pools.counters();
  Check(c.shards.load() == static_cast<uint64_t>(status.pools_size()));
  Check(c.blocks_tracked.load() == tracked);
  Check(c.resident_blocks.load() == resident);
  Check(c.resident_bytes.load() == bytes);
}

// A RankEviction answer frees the bytes its victims hold.
inline void CheckVictimsAddUp(const v1::RankResponse& response) {
  int64_t freed = 0;
  for (const auto& v : response.victims()) freed += v.bytes();
  Check(freed == response.bytes_freed());
}

}  // namespace kvlearn::fuzz
