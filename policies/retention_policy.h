// The interface every retention policy implements, whether it runs inside the
// replay simulator or behind the gRPC sidecar.
//
// For each request the caller (0) announces its whole chain with OnRequest,
// (1) reports the resident prefix with OnHit, deepest block first, (2) walks the missing blocks
// root-to-leaf asking ShouldAdmit, making room with SelectVictim/OnEvict, and calling OnInsert once
// the block is in the pool. The first refused block ends admission for the request: its descendants
// would be orphans.
//
// Policies keep their own ordering state; the PoolState they are given tells
// them which blocks may be evicted now (resident leaves not pinned by the
// current request). Not thread-safe: one policy object per pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"

namespace kvlearn {

class LearnedModel;  // models/learned_model.h

// When and where an access happens. `access_pos` identifies the access in a
// replayed trace (offset into Trace::hash_ids); only the offline oracle uses it.
struct AccessInfo {
  int64_t time_ms = 0;
  uint32_t request = 0;
  uint32_t access_pos = 0;
  // Leading blocks of the request's chain that a faster tier in front of
  // this one served (a cluster node's HBM or DRAM in front of the shared
  // pool): whether this tier held them or not, it saved nothing on them.
  uint32_t served_above = 0;
};

class RetentionPolicy {
 public:
  virtual ~RetentionPolicy() = default;

  virtual std::string_view name() const = 0;

  // A request arrived needing `chain` (root first), resident or not. Called
  // before any other call for that request; policies that learn from access
  // history use it, the classic ones ignore it.
  virtual void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) {}
  // A resident block was used by a request.
  virtual void OnHit(BlockIndex b, const AccessInfo& access) = 0;
  // A block was just computed: should the pool keep a copy?
  virtual bool ShouldAdmit(BlockIndex b, const AccessInfo& access) { return true; }
  virtual void OnInsert(BlockIndex b, const AccessInfo& access) = 0;
  // The block to evict next, or kNoBlock if no resident block is evictable.
  // Returns only blocks with pool.IsEvictable(b).
  virtual BlockIndex SelectVictim() = 0;
  // REQUIRES: b was resident and has just been removed from the pool.
  virtual void OnEvict(BlockIndex b) = 0;

  // Lower = evicted sooner. Used to rank an arbitrary candidate list.
  virtual double EvictionPriority(BlockIndex b) const = 0;

  // How much keeping b is worth, as the latest ShouldAdmit(b) judged it
  // (higher = more worth keeping; the sidecar returns it as Admit's score).
  // Policies without a graded judgement answer 1 (admitted) or 0 (refused).
  virtual double AdmissionScore(BlockIndex b, bool admitted) const { return admitted ? 1.0 : 0.0; }

  // Replaces the model a learned policy scores with; the others refuse.
  virtual absl::Status SwapModel(std::shared_ptr<const LearnedModel> model) {
    return absl::FailedPreconditionError("this policy has no model");
  }

  // Orders `candidates` so that the first should be evicted first. The
  // default sorts by EvictionPriority; policies with finer keys override.
  virtual std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const;
  // RankVictims' order as far as the first victims whose bytes reach
  // `bytes_wanted`; the other candidates follow in any order. For a caller
  // that frees only that much (the sidecar's RankEviction), so a policy whose
  // full ranking is dear can stop early; the default ranks them all.
  virtual std::vector<BlockIndex> FirstVictims(std::span<const BlockIndex> candidates,
                                               uint64_t bytes_wanted) const {
    return RankVictims(candidates);
  }

  // The policy's own state beyond the pool (orders, counts, ghosts, what it
  // learned online), for a snapshot or a compaction (server/shard_image.h).
  // Every block number goes out through `renumber` (old number -> new one,
  // kNoBlock: forgotten by a compaction); what refers only to a forgotten
  // block is dropped. Called between events, nothing pinned.
  virtual absl::Status SaveState(std::span<const BlockIndex> renumber,
                                 PolicyStateWriter& out) const {
    return absl::UnimplementedError(
        absl::StrCat("policy '", std::string(name()), "' cannot save its state"));
  }
  // Reads what SaveState wrote into a policy fresh from its factory, whose
  // pool already holds the saved resident set (renumbered). On damaged bytes
  // returns the reader's DATA_LOSS (the policy is then unusable: rebuild it).
  virtual absl::Status LoadState(PolicyStateReader& in) {
    return absl::UnimplementedError(
        absl::StrCat("policy '", std::string(name()), "' cannot load a state"));
  }
};

}  // namespace kvlearn
