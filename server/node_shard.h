// One (node, tier) pool of the sidecar (server/node_pools.h): the blocks it
// remembers, the driver of its policy and the counters a restart must bring
// back, under its own mutex. Its own header because the shard compaction and
// the snapshots (server/shard_image.h) read and rebuild it as a whole.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/block_catalog.h"
#include "policies/policy_driver.h"
#include "server/experiment_costs.h"
#include "server/node_pools.h"
#include "server/resize_ghosts.h"
#include "server/shadow_pool.h"

namespace kvlearn {

struct NodePools::Shard {
  Shard(std::string node_id, v1::Tier tier_value, uint64_t capacity)
      : node(std::move(node_id)), tier(tier_value), driver(&catalog, capacity) {}

  const std::string node;
  const v1::Tier tier;
  absl::Mutex mu;
  BlockCatalog catalog ABSL_GUARDED_BY(mu);
  PolicyDriver driver ABSL_GUARDED_BY(mu);
  // RankEviction victims not yet confirmed by block_removed nor withdrawn:
  // gone from the policy and its pool, still held by the node (the view).
  // By the order proposed (Proposal::order), so that a confirmation drops
  // one in O(log proposals); proposal_score has each one's score.
  std::map<uint64_t, BlockIndex> proposals ABSL_GUARDED_BY(mu);
  struct Proposal {
    double score = 0;
    uint64_t order = 0;  // increasing in the order proposed, as `proposals`
  };
  // The same blocks by index, so a RankEviction with candidates finds the
  // ones proposed in O(candidates), not O(proposals).
  absl::flat_hash_map<BlockIndex, Proposal> proposal_score ABSL_GUARDED_BY(mu);
  uint64_t proposals_made ABSL_GUARDED_BY(mu) = 0;
  // Per block, how many of its children are proposals (children the view
  // still holds though the pool does not).
  absl::flat_hash_map<BlockIndex, uint32_t> proposed_children ABSL_GUARDED_BY(mu);
  uint64_t proposed_bytes ABSL_GUARDED_BY(mu) = 0;
  // Chains of the requests in flight, held in the pool: by request id, and
  // the last request without one (held until the next arrival).
  absl::flat_hash_map<std::string, std::vector<BlockIndex>> requests_in_flight ABSL_GUARDED_BY(mu);
  std::vector<BlockIndex> unnamed_request ABSL_GUARDED_BY(mu);
  // When each request of requests_in_flight arrived (its event's
  // timestamp), and the same requests oldest first, for the timeout.
  absl::flat_hash_map<std::string, int64_t> request_arrival_us ABSL_GUARDED_BY(mu);
  std::set<std::pair<int64_t, std::string>> requests_by_arrival ABSL_GUARDED_BY(mu);
  uint64_t removals ABSL_GUARDED_BY(mu) = 0;  // blocks the node reported gone
  // The catalog's children lists (first child, next sibling), built on the
  // first removal of a block that still has children in the view and
  // extended as the catalog grows; `linked` blocks are in them. Empty for a
  // node that removes leaves first, so most pools pay nothing for them. A
  // rebuild (RestoreShard) renumbers the catalog and empties them.
  std::vector<BlockIndex> first_child ABSL_GUARDED_BY(mu);
  std::vector<BlockIndex> next_sibling ABSL_GUARDED_BY(mu);
  size_t linked ABSL_GUARDED_BY(mu) = 0;

  // Records b as proposed with `score` (the policy has let it go already).
  void AddProposal(BlockIndex b, double score) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    proposals.emplace(proposals_made, b);
    proposal_score.emplace(b, Proposal{score, proposals_made++});
    proposed_bytes += catalog[b].bytes;
    if (const BlockIndex parent = catalog[b].parent; parent != kNoBlock) {
      ++proposed_children[parent];
    }
  }
  // Holds every in-flight request's chain in the pool again, after the pool
  // was restarted or rebuilt (a new PoolState has no holds).
  void HoldInFlight() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (const auto& [id, chain] : requests_in_flight) driver.Hold(chain);
    driver.Hold(unnamed_request);
  }
  uint32_t next_request ABSL_GUARDED_BY(mu) = 0;
  uint32_t current_request ABSL_GUARDED_BY(mu) = 0;
  uint64_t requests ABSL_GUARDED_BY(mu) = 0;
  // Events accepted so far: the position of a journaled decision among them.
  uint64_t events_applied ABSL_GUARDED_BY(mu) = 0;
  // When each catalog block was last seen (a logical clock over touches, so
  // that a log replay reproduces it): the compaction keeps the most recent
  // non-resident blocks.
  std::vector<uint64_t> last_seen ABSL_GUARDED_BY(mu);
  uint64_t touch_clock ABSL_GUARDED_BY(mu) = 0;
  // Latest event timestamp, for the policy calls that rebuild a pool.
  int64_t last_timestamp_us ABSL_GUARDED_BY(mu) = 0;
  uint64_t compactions ABSL_GUARDED_BY(mu) = 0;
  // Blocks in the chains of requests_in_flight and unnamed_request (with
  // repeats): a compaction cannot forget them, so they do not count against
  // --ghost-blocks.
  uint64_t held_blocks ABSL_GUARDED_BY(mu) = 0;
  // The model this pool's policy scores with (a swap reaches pools one by
  // one), for the policy a rebuild starts.
  std::shared_ptr<const LearnedModel> model ABSL_GUARDED_BY(mu);

  // The experiment (server/experiment.h): this node's live arm, the policy
  // it runs, where its requests are charged, and the request being served
  // (charged when the next arrival or its request_finished comes, once its
  // admissions are known).
  std::string arm ABSL_GUARDED_BY(mu);
  std::string policy ABSL_GUARDED_BY(mu);
  CostCounters* arm_costs ABSL_GUARDED_BY(mu) = nullptr;
  bool tally_open ABSL_GUARDED_BY(mu) = false;
  std::string tally_request ABSL_GUARDED_BY(mu);  // its request_id; empty: none
  RequestTally tally ABSL_GUARDED_BY(mu);
  // The shadow policies this pool's arrivals also drive.
  std::vector<std::unique_ptr<ShadowPool>> shadows ABSL_GUARDED_BY(mu);
  // Its ghost pools at other sizes (serve --resize-estimates); none otherwise.
  ResizeGhosts resize_ghosts ABSL_GUARDED_BY(mu);
};

}  // namespace kvlearn
