// A (node, tier) pool's state as a plain value (ShardImage), taken from a
// shard and put back into one. Two users:
//  - compaction (bounded memory): a shard whose remembered-but-not-resident
//    ("ghost") blocks pass --ghost-blocks is rebuilt from an image that keeps
//    every resident block and only the most recently seen ghosts;
//  - snapshots (server/shard_snapshot.h): the image is written to the event
//    log and loaded at start-up instead of replaying all history.
//
// What a rebuild keeps exactly: the remembered blocks and their metadata, the
// resident set, the proposals awaiting their block_removed (with their
// scores), the chains of the requests in flight (held again), the counters,
// and the policy's own state (RetentionPolicy::SaveState: its orders,
// counts, ghost lists, clocks, what it learned online), renumbered. The pool
// gets the resident set back without policy calls and a fresh policy loads
// that state, so it decides as the old one would have; after a compaction,
// what the policy knew of a forgotten block is gone (a forgotten ghost is
// dropped from s3fifo's and arc's ghost lists), everything else stays.
//
// The approximate way, for a policy that cannot save its state and for a
// snapshot of format 2 (written before policies could) or 3 (policy states
// this build cannot read; its residents are in catalog order): `residents`
// holds the old eviction order, and a fresh policy gets every resident block
// inserted root first, then one hit per block in that order, first victim
// first. Exact for lru only; the others lose what they counted.
//
// Thread-safety: the caller holds the shard's mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "core/cost_model.h"
#include "policies/policy_env.h"
#include "server/node_shard.h"

namespace kvlearn {

struct ShardImage {
  uint64_t capacity_bytes = 0;
  std::vector<BlockMeta> blocks;    // catalog order: a parent comes before its children
  std::vector<uint64_t> last_seen;  // per block
  // Resident blocks: in catalog order when policy_state is set, else in the
  // old eviction order, first victim first (see the file comment).
  std::vector<BlockIndex> residents;
  std::optional<std::string> policy_state;  // RetentionPolicy::SaveState's bytes
  std::vector<BlockIndex> proposals;        // proposed, not yet reported removed, in order
  std::vector<double> proposal_scores;      // parallel to proposals
  // Requests in flight, by id (sorted), and the last one without an id.
  std::vector<std::pair<std::string, std::vector<BlockIndex>>> requests_in_flight;
  std::vector<BlockIndex> unnamed_request;
  // When each of requests_in_flight arrived (event clock), in its order.
  std::vector<int64_t> request_arrival_us;
  uint32_t next_request = 0;
  uint32_t current_request = 0;
  uint64_t requests = 0;
  uint64_t events_applied = 0;
  uint64_t touch_clock = 0;
  uint64_t removals = 0;
  int64_t last_timestamp_us = 0;
};

// Every block the node holds or uses now (resident, proposed, in an in-flight
// request's chain), plus at most `keep_ghosts` others: the most recently
// seen, each with its ancestors (a remembered block's parent is remembered),
// skipping one whose chain no longer fits. SIZE_MAX keeps every block.
// Without `policy_state`, the image takes the approximate way (residents in
// the policy's eviction order): for a pool that changes policy.
// REQUIRES: s.mu held.
ShardImage CaptureShard(const NodePools::Shard& s, size_t keep_ghosts, bool policy_state = true);

// Replaces the catalog, pool and policy of `s` by `image`, the policy
// started afresh from `env` and loaded with the image's policy state (see
// the file comment). Each block's recompute is priced by `cost` for blocks
// of `block_size` tokens, not taken from the image: a snapshot taken under
// another profile, or by a build that priced it otherwise, holds its own.
// Fails as the policy's factory does. A policy state the policy refuses (a
// bug, or damage the snapshot's checks missed) does not fail the restore,
// which would stop the sidecar from starting or leave a compacted pool half
// rebuilt: the pool keeps its residents and the policy starts afresh over
// them the approximate way (catalog order for recency), and `refused`, when
// given, gets the policy's error (else OK).
// REQUIRES: s.mu held.
absl::Status RestoreShard(NodePools::Shard& s, const ShardImage& image, const CostModel& cost,
                          uint32_t block_size, PolicyEnv env, absl::Status* refused = nullptr);

}  // namespace kvlearn
