// The one driver of the policy protocol (policies/retention_policy.h): a pool
// (PoolState) plus the RetentionPolicy that runs it. Every caller that makes a
// policy decide goes through this class: the pool replay, each tier of the
// cluster simulator and each (node, tier) pool of the sidecar. That is what
// makes the sidecar decide exactly as the simulator: they share this code, not
// a copy of it.
//
// Two ways to drive it:
//  - per request (simulators): Lookup, Touch, then Admit, back to back or
//    split in time (the cluster simulator touches when a request starts and
//    admits when its prefill ends);
//  - per event (sidecar): AnnounceRequest, Hold / Release, Hit, ShouldAdmit,
//    Insert, NextVictim, EvictLeaf, RankVictims, as the serving node reports
//    and asks. These pin nothing by themselves: the sidecar holds each
//    in-flight request's chain (PoolState::Hold) until the request ends.
//
// The driver keeps the pool's invariants: a block is inserted only under a
// resident parent, only leaves are evicted, a policy's victim must be an
// evictable leaf (else Internal error naming the policy). Inline because it
// sits on the replay's hottest path. Not thread-safe: one driver per pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/pool_state.h"
#include "policies/policy_env.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"

namespace kvlearn {

// Builds a policy from its environment; CreatePolicy by name is the usual one,
// the learner wraps a policy with a feature recorder.
using PolicyMaker =
    std::function<absl::StatusOr<std::unique_ptr<RetentionPolicy>>(const PolicyEnv&)>;

class PolicyDriver {
 public:
  PolicyDriver(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : pool_(catalog, capacity_bytes) {}
  PolicyDriver(const PolicyDriver&) = delete;
  PolicyDriver& operator=(const PolicyDriver&) = delete;

  // Builds the policy over this driver's pool (env's catalog and pool are set
  // here). Fails as CreatePolicy does.
  absl::Status StartPolicy(std::string_view name, PolicyEnv env) {
    name_ = std::string(name);
    return StartPolicy([this](const PolicyEnv& e) { return CreatePolicy(name_, e); },
                       std::move(env));
  }
  absl::Status StartPolicy(PolicyMaker make, PolicyEnv env) {
    make_ = std::move(make);
    env_ = std::move(env);
    env_.catalog = &pool_.catalog();
    env_.pool = &pool_;
    policy_.reset();
    auto policy = make_(env_);
    if (!policy.ok()) return policy.status();
    policy_ = std::move(*policy);
    return absl::OkStatus();
  }
  // Empties the pool, gives it a new capacity and starts the policy afresh.
  // Pins and holds go too. REQUIRES: StartPolicy succeeded before.
  absl::Status Restart(uint64_t capacity_bytes) {
    KVLEARN_DCHECK(make_ != nullptr);
    policy_.reset();
    const size_t n = pool_.catalog().size();
    pool_ = PoolState(&pool_.catalog(), capacity_bytes);
    pool_.Grow(n);
    return StartPolicy(make_, env_);
  }

  // The same with a new environment (a new model, say).
  absl::Status Restart(uint64_t capacity_bytes, PolicyEnv env) {
    env_ = std::move(env);
    return Restart(capacity_bytes);
  }

  const PoolState& pool() const { return pool_; }
  RetentionPolicy& policy() { return *policy_; }
  const RetentionPolicy& policy() const { return *policy_; }
  // Extends the pool's per-block state after blocks were added to the catalog.
  void Grow() { pool_.Grow(pool_.catalog().size()); }

  // ---- per request ------------------------------------------------------

  // Leading blocks of `chain` resident here (residents are prefix-closed, so
  // this is everything before the first miss).
  uint32_t Lookup(std::span<const BlockIndex> chain) const { return pool_.ResidentPrefix(chain); }

  // Starts a request: unpins the previous one's blocks, announces `chain`,
  // pins its first `hits` blocks and reports those from `first_used` on as
  // used, deepest first. A tier behind a faster one passes the blocks the
  // faster one served as `first_used`: it held them but did not serve them.
  // `access.access_pos` must be the chain's offset in the trace.
  void Touch(std::span<const BlockIndex> chain, uint32_t hits, AccessInfo access,
             uint32_t first_used = 0) {
    const uint32_t first = access.access_pos;
    access.served_above = first_used;
    BeginRequest(chain, access);
    for (uint32_t i = hits; i-- > 0;) {
      access.access_pos = first + i;
      pool_.Pin(chain[i]);
      if (i >= first_used) Hit(chain[i], access);
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
        BlockIndex victim;
        if (!TryNextVictim(victim)) return NotEvictable(victim);
        if (victim == kNoBlock) break;
        EvictLeaf(victim);
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

  // A request needing `chain` (root first) starts: the previous request's
  // pins end.
  void BeginRequest(std::span<const BlockIndex> chain, const AccessInfo& access) {
    pool_.BeginRequest();
    AnnounceRequest(chain, access);
  }
  // Ends the previous request's pins without announcing a request: for a
  // pool that is written long after the request that read it started (the
  // cluster simulator's shared pool admits when a prefill ends).
  void UnpinAll() { pool_.BeginRequest(); }

  // ---- per event --------------------------------------------------------

  // A request needing `chain` (root first) starts; pins are the caller's
  // (Hold).
  void AnnounceRequest(std::span<const BlockIndex> chain, const AccessInfo& access) {
    policy_->OnRequest(chain, access);
  }
  // Pins every block of `chain` until Release(chain) (counted: one per call).
  void Hold(std::span<const BlockIndex> chain) {
    for (const BlockIndex b : chain) pool_.Hold(b);
  }
  // REQUIRES: Hold(chain) before, not yet released.
  void Release(std::span<const BlockIndex> chain) {
    for (const BlockIndex b : chain) pool_.Release(b);
  }
  // REQUIRES: pool().IsResident(b).
  void Hit(BlockIndex b, const AccessInfo& access) {
    KVLEARN_DCHECK(pool_.IsResident(b));
    policy_->OnHit(b, access);
  }
  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) {
    return policy_->ShouldAdmit(b, access);
  }
  // REQUIRES: !IsResident(b), its parent resident (or none).
  void Insert(BlockIndex b, const AccessInfo& access) {
    pool_.Insert(b);
    policy_->OnInsert(b, access);
  }
  // The policy's next victim, kNoBlock when nothing is evictable, or Internal
  // when the policy names a block that is not an evictable leaf. Does not
  // evict: the caller does, with EvictLeaf.
  absl::StatusOr<BlockIndex> NextVictim() {
    BlockIndex victim;
    if (!TryNextVictim(victim)) return NotEvictable(victim);
    return victim;
  }
  // REQUIRES: pool().IsLeaf(b).
  void EvictLeaf(BlockIndex b) {
    pool_.Evict(b);
    policy_->OnEvict(b);
  }
  // The policy's eviction order over resident `candidates` (first = first out).
  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const {
    return policy_->RankVictims(candidates);
  }
  // Its first victims, until their bytes reach `bytes_wanted`, then the rest
  // in any order (RetentionPolicy::FirstVictims).
  std::vector<BlockIndex> FirstVictims(std::span<const BlockIndex> candidates,
                                       uint64_t bytes_wanted) const {
    return policy_->FirstVictims(candidates, bytes_wanted);
  }
  double EvictionPriority(BlockIndex b) const { return policy_->EvictionPriority(b); }

  // ---- snapshots and compactions (server/shard_image.h) -----------------

  // The policy's state (RetentionPolicy::SaveState), block numbers through
  // `renumber`; Unimplemented for a policy that cannot save it.
  absl::StatusOr<std::string> SavePolicyState(std::span<const BlockIndex> renumber) const {
    PolicyStateWriter out;
    if (auto st = policy_->SaveState(renumber, out); !st.ok()) return st;
    return out.Take();
  }
  // Puts `residents` in the pool without telling the policy, parents first
  // (REQUIRES: each one's parent resident by then), for LoadPolicyState.
  void RestoreResidents(std::span<const BlockIndex> residents) {
    for (const BlockIndex b : residents) pool_.Insert(b);
  }
  // Loads what SavePolicyState returned into the policy, which must be
  // fresh (Restart) over the restored residents. DATA_LOSS on damaged bytes.
  absl::Status LoadPolicyState(std::string_view bytes) {
    PolicyStateReader in(bytes, pool_.catalog().size());
    if (auto st = policy_->LoadState(in); !st.ok()) return st;
    return in.Finish();
  }

 private:
  // The policy's next victim into `victim` (kNoBlock when nothing is
  // evictable); false when it named a block that is not an evictable leaf.
  // A bool, not a StatusOr, because Admit calls it once per eviction.
  bool TryNextVictim(BlockIndex& victim) {
    victim = policy_->SelectVictim();
    return victim == kNoBlock || pool_.IsEvictable(victim);
  }
  ABSL_ATTRIBUTE_NOINLINE absl::Status NotEvictable(BlockIndex victim) const {
    return absl::InternalError(absl::StrCat("policy '", std::string(policy_->name()),
                                            "' chose block ", pool_.catalog()[victim].hash_id,
                                            " which is not an evictable leaf"));
  }

  PoolState pool_;
  std::string name_;
  PolicyMaker make_;
  PolicyEnv env_;
  std::unique_ptr<RetentionPolicy> policy_;
};

}  // namespace kvlearn
