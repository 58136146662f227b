// One cache tier (a global KV pool, a node's HBM prefix cache or its host
// DRAM): a PoolState plus the RetentionPolicy that runs it, driven through the
// policy protocol of models/retention_policy.h. Both simulators serve requests
// through it: the pool replay calls Lookup, Touch and Admit back to back for
// each request; the cluster simulator splits them in time (touch when the
// request starts, admit when its prefill ends).
//
// Inline because it sits on the replay's hottest path. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/pool_state.h"
#include "models/retention_policy.h"

namespace kvlearn {

class TierCache {
 public:
  // REQUIRES: `policy` was created with PolicyEnv::pool == &pool().
  TierCache(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : pool_(catalog, capacity_bytes) {}
  void SetPolicy(std::unique_ptr<RetentionPolicy> policy) { policy_ = std::move(policy); }

  PoolState& pool() { return pool_; }
  const PoolState& pool() const { return pool_; }
  RetentionPolicy& policy() { return *policy_; }

  // Leading blocks of `chain` resident here (residents are prefix-closed, so
  // this is everything before the first miss).
  uint32_t Lookup(std::span<const BlockIndex> chain) const {
    uint32_t k = 0;
    while (k < chain.size() && pool_.IsResident(chain[k])) ++k;
    return k;
  }

  // Starts a request: unpins the previous one's blocks, announces `chain` and
  // reports its first `hits` blocks as used, deepest first, pinning them.
  // `access.access_pos` must be the chain's offset in the trace.
  void Touch(std::span<const BlockIndex> chain, uint32_t hits, AccessInfo access) {
    const uint32_t first = access.access_pos;
    pool_.BeginRequest();
    policy_->OnRequest(chain, access);
    for (uint32_t i = hits; i-- > 0;) {
      pool_.Pin(chain[i]);
      access.access_pos = first + i;
      policy_->OnHit(chain[i], access);
    }
  }

  // Offers blocks [begin, end) of `chain` root first: a resident block is
  // pinned and skipped; a missing one is admitted if the policy agrees and
  // room can be made by evicting unpinned leaves. The first refusal ends the
  // walk (its descendants would be orphans). Adds the bytes inserted to
  // `inserted_bytes`, evictions to `evicted`; calls on_evict(b) after each.
  // Fails if the policy names a victim that is not an evictable leaf.
  // `access.access_pos` must be the chain's offset in the trace.
  template <typename OnEvict>
  absl::Status Admit(std::span<const BlockIndex> chain, uint32_t begin, uint32_t end,
                     AccessInfo access, uint64_t& inserted_bytes, uint64_t& evicted,
                     OnEvict&& on_evict) {
    const uint32_t first = access.access_pos;
    const BlockCatalog& catalog = pool_.catalog();
    for (uint32_t i = begin; i < end; ++i) {
      const BlockIndex b = chain[i];
      if (pool_.IsResident(b)) {
        pool_.Pin(b);
        continue;
      }
      access.access_pos = first + i;
      const uint64_t bytes = catalog[b].bytes;
      if (bytes > pool_.capacity_bytes() || !policy_->ShouldAdmit(b, access)) break;
      while (pool_.free_bytes() < bytes) {
        const BlockIndex victim = policy_->SelectVictim();
        if (victim == kNoBlock) break;
        if (!pool_.IsEvictable(victim)) {
          return absl::InternalError(absl::StrCat("policy '", std::string(policy_->name()),
                                                  "' chose block ", catalog[victim].hash_id,
                                                  " which is not an evictable leaf"));
        }
        pool_.Evict(victim);
        policy_->OnEvict(victim);
        ++evicted;
        on_evict(victim);
      }
      if (pool_.free_bytes() < bytes) break;  // everything left is pinned
      pool_.Insert(b);
      pool_.Pin(b);
      policy_->OnInsert(b, access);
      inserted_bytes += bytes;
    }
    return absl::OkStatus();
  }

 private:
  PoolState pool_;
  std::unique_ptr<RetentionPolicy> policy_;
};

}  // namespace kvlearn
