// One expert of the learned policy (learned_policy.cc): a complete simulated
// pool of the real pool's capacity, run by a policy of its own (lru, gdsf,
// the model-driven learned-model) through the one driver of the protocol,
// and what each request cost it.
//
// Requests do not depend on the pool, so an expert fed every request as it
// arrives sees exactly what it would have seen serving alone; Serve plays a
// whole request at once (hits, admissions, evictions), as the pool replay
// does (sim/pool_simulator.cc ServeRequest), and prices it as the replay
// charges cost_seconds (sim/replay_accounting.h): the missed blocks'
// recompute GPU-ms, one transfer for the hit prefix's load and one for the
// bytes admitted, each bytes / link + the per-transfer latency. A tier that
// holds what it computed (PolicyEnv::admission_moves_bytes false) pays no
// admission; blocks a faster tier served (AccessInfo::served_above) save and
// cost nothing here.
//
// Not thread-safe: one per expert of one policy.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {

class LearnedExpert {
 public:
  // An empty pool of `capacity_bytes` over `catalog` run by policy `name`,
  // built from `env` (its catalog and pool are this expert's). Check
  // status(): a policy the factory refuses leaves the expert unusable.
  LearnedExpert(std::string name, const BlockCatalog* catalog, uint64_t capacity_bytes,
                PolicyEnv env)
      : name_(std::move(name)),
        link_bytes_per_ms_(env.features.link_bytes_per_ms),
        latency_ms_(env.transfer_latency_ms),
        admission_moves_bytes_(env.admission_moves_bytes),
        driver_(catalog, capacity_bytes) {
    status_ = driver_.StartPolicy(name_, std::move(env));
  }
  LearnedExpert(const LearnedExpert&) = delete;
  LearnedExpert& operator=(const LearnedExpert&) = delete;

  const std::string& name() const { return name_; }
  // Not OK once its policy failed (the factory refused it, or it named a
  // victim that is not an evictable leaf): it then decides nothing more.
  const absl::Status& status() const { return status_; }
  const PoolState& pool() const { return driver_.pool(); }
  RetentionPolicy& policy() { return driver_.policy(); }
  const RetentionPolicy& policy() const { return driver_.policy(); }
  PolicyDriver& driver() { return driver_; }
  const PolicyDriver& driver() const { return driver_; }

  // One transfer of `bytes` over the pool link, ms (CostModel::TransferMs).
  double TransferMs(uint64_t bytes) const {
    if (bytes == 0) return 0;
    return static_cast<double>(bytes) / link_bytes_per_ms_ + latency_ms_;
  }

  // Serves the request needing `chain` (root first) in this expert's pool and
  // returns what it cost, ms. Calls on_evict(b) after each block it evicts
  // and on_insert(b) for each block it admits.
  template <class OnEvict, class OnInsert>
  double Serve(std::span<const BlockIndex> chain, const AccessInfo& access, OnEvict&& on_evict,
               OnInsert&& on_insert) {
    if (!status_.ok()) return 0;
    driver_.Grow();
    const BlockCatalog& catalog = driver_.pool().catalog();
    const auto n = static_cast<uint32_t>(chain.size());
    const uint32_t above = std::min<uint32_t>(access.served_above, n);
    const uint32_t hits = driver_.Lookup(chain);
    AccessInfo at = access;
    driver_.Touch(chain, hits, at, above);
    uint64_t admitted = 0, evicted = 0;
    status_ = driver_.Admit(chain, hits, n, at, admitted, evicted, on_evict);
    const double served = MissesAndLoadMs(catalog, chain, above, hits);
    for (uint32_t i = hits; i < n && driver_.pool().IsResident(chain[i]); ++i) on_insert(chain[i]);
    return served + (admission_moves_bytes_ ? TransferMs(admitted) : 0.0);
  }

  // A request's price without its admissions, ms, when its first `hits`
  // blocks are resident and the node already holds the first `above`: the
  // recompute of the blocks missed and one transfer of those hit.
  double MissesAndLoadMs(const BlockCatalog& catalog, std::span<const BlockIndex> chain,
                         uint32_t above, uint32_t hits) const {
    const auto n = static_cast<uint32_t>(chain.size());
    uint64_t loaded = 0;
    for (uint32_t i = above; i < hits; ++i) loaded += catalog[chain[i]].bytes;
    double recompute = 0;
    for (uint32_t i = std::max(hits, above); i < n; ++i)
      recompute += catalog[chain[i]].recompute_gpu_ms;
    return recompute + TransferMs(loaded);
  }

 private:
  std::string name_;
  double link_bytes_per_ms_;
  double latency_ms_;
  bool admission_moves_bytes_;
  PolicyDriver driver_;
  absl::Status status_;
};

}  // namespace kvlearn
