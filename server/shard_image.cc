#include "server/shard_image.h"

#include <algorithm>
#include <span>
#include <utility>

namespace kvlearn {

ShardImage CaptureShard(const NodePools::Shard& s, size_t keep_ghosts, bool policy_state) {
  const BlockCatalog& catalog = s.catalog;
  const PoolState& pool = s.driver.pool();
  const auto n = static_cast<BlockIndex>(catalog.size());
  std::vector<uint8_t> keep(n, 0);
  std::vector<BlockIndex> residents, ghosts;
  residents.reserve(pool.resident_blocks());
  // What the node holds or uses is always kept: resident blocks (prefix-
  // closed), proposals (each under a resident block or another proposal) and
  // in-flight chains (prefix-closed by construction).
  for (const auto& [order, b] : s.proposals) keep[b] = 1;
  for (const auto& [id, chain] : s.requests_in_flight) {
    for (BlockIndex b : chain) keep[b] = 1;
  }
  for (BlockIndex b : s.unnamed_request) keep[b] = 1;
  for (BlockIndex b = 0; b < n; ++b) {
    if (pool.IsResident(b)) {
      keep[b] = 1;
      residents.push_back(b);
    } else if (!keep[b]) {
      ghosts.push_back(b);
    }
  }
  if (ghosts.size() <= keep_ghosts) {
    for (BlockIndex g : ghosts) keep[g] = 1;
  } else {
    // Most recent first (last_seen values are distinct: one clock tick per
    // touch), each with the ancestors it needs, while they fit: the ghosts
    // kept never exceed keep_ghosts, so the next compaction is as far away.
    std::sort(ghosts.begin(), ghosts.end(),
              [&s](BlockIndex a, BlockIndex b) { return s.last_seen[a] > s.last_seen[b]; });
    size_t kept = 0;
    std::vector<BlockIndex> chain;
    for (BlockIndex g : ghosts) {
      if (kept == keep_ghosts) break;
      chain.clear();
      for (BlockIndex b = g; b != kNoBlock && !keep[b]; b = catalog[b].parent) chain.push_back(b);
      if (kept + chain.size() > keep_ghosts) continue;
      for (BlockIndex b : chain) keep[b] = 1;
      kept += chain.size();
    }
  }

  ShardImage image;
  std::vector<BlockIndex> renumber(n, kNoBlock);
  for (BlockIndex b = 0; b < n; ++b) {
    if (!keep[b]) continue;
    renumber[b] = static_cast<BlockIndex>(image.blocks.size());
    BlockMeta meta = catalog[b];
    if (meta.parent != kNoBlock) meta.parent = renumber[meta.parent];
    image.blocks.push_back(meta);
    image.last_seen.push_back(s.last_seen[b]);
  }
  const auto renumbered = [&renumber](const std::vector<BlockIndex>& list) {
    std::vector<BlockIndex> out;
    out.reserve(list.size());
    for (BlockIndex b : list) out.push_back(renumber[b]);
    return out;
  };
  auto state = policy_state ? s.driver.SavePolicyState(renumber)
                            : absl::StatusOr<std::string>(absl::UnimplementedError(""));
  if (state.ok()) {
    image.policy_state = *std::move(state);
    image.residents = renumbered(residents);
  } else {
    image.residents = renumbered(s.driver.RankVictims(residents));
  }
  std::vector<BlockIndex> proposals;
  for (const auto& [order, b] : s.proposals) {
    proposals.push_back(b);
    image.proposal_scores.push_back(s.proposal_score.at(b).score);
  }
  image.proposals = renumbered(proposals);
  for (const auto& [id, chain] : s.requests_in_flight) {
    image.requests_in_flight.emplace_back(id, renumbered(chain));
  }
  std::sort(image.requests_in_flight.begin(), image.requests_in_flight.end());
  for (const auto& [id, chain] : image.requests_in_flight) {
    image.request_arrival_us.push_back(s.request_arrival_us.at(id));
  }
  image.unnamed_request = renumbered(s.unnamed_request);
  image.capacity_bytes = pool.capacity_bytes();
  image.next_request = s.next_request;
  image.current_request = s.current_request;
  image.requests = s.requests;
  image.events_applied = s.events_applied;
  image.touch_clock = s.touch_clock;
  image.removals = s.removals;
  image.last_timestamp_us = s.last_timestamp_us;
  return image;
}

namespace {

// The approximate way (file comment of shard_image.h): every resident root
// first, then one hit each in the order of `order`, first victim first.
void InsertApproximately(NodePools::Shard& s, const ShardImage& image,
                         std::span<const BlockIndex> parents_first,
                         std::span<const BlockIndex> order) {
  AccessInfo access;
  access.time_ms = image.last_timestamp_us / 1000;
  access.request = image.current_request;
  for (BlockIndex b : parents_first) s.driver.Insert(b, access);
  for (BlockIndex b : order) s.driver.Hit(b, access);
  s.driver.UnpinAll();
}

}  // namespace

absl::Status RestoreShard(NodePools::Shard& s, const ShardImage& image, const CostModel& cost,
                          uint32_t block_size, PolicyEnv env, absl::Status* refused) {
  if (refused != nullptr) *refused = absl::OkStatus();
  BlockCatalog catalog;
  catalog.Reserve(image.blocks.size());
  for (BlockMeta meta : image.blocks) {
    meta.recompute_gpu_ms = cost.BlockRecomputeGpuMs(meta.depth, meta.tokens, block_size);
    catalog.Add(meta);
  }
  s.catalog = std::move(catalog);  // the driver's pool points at s.catalog
  if (auto st = s.driver.Restart(image.capacity_bytes, env); !st.ok()) return st;
  s.last_seen = image.last_seen;
  s.first_child.clear();  // of the old numbering
  s.next_sibling.clear();
  s.linked = 0;
  s.touch_clock = image.touch_clock;
  s.next_request = image.next_request;
  s.current_request = image.current_request;
  s.requests = image.requests;
  s.events_applied = image.events_applied;
  s.removals = image.removals;
  s.last_timestamp_us = image.last_timestamp_us;

  // Root first: catalog order puts parents first.
  std::vector<BlockIndex> residents(image.residents);
  std::sort(residents.begin(), residents.end());
  if (image.policy_state) {
    s.driver.RestoreResidents(residents);
    if (auto st = s.driver.LoadPolicyState(*image.policy_state); !st.ok()) {
      // A fresh policy over the same residents (its residents are in catalog
      // order, so recency follows the catalog).
      if (refused != nullptr) *refused = st;
      if (auto restart = s.driver.Restart(image.capacity_bytes, std::move(env)); !restart.ok()) {
        return restart;
      }
      InsertApproximately(s, image, residents, residents);
    }
  } else {
    // One hit per block in the old eviction order, the last hit being the
    // last victim.
    InsertApproximately(s, image, residents, image.residents);
  }

  // Proposals stay out of the policy's pool, in the view.
  s.proposals.clear();
  s.proposal_score.clear();
  s.proposed_children.clear();
  s.proposed_bytes = 0;
  for (size_t i = 0; i < image.proposals.size(); ++i) {
    s.AddProposal(image.proposals[i], image.proposal_scores[i]);
  }
  // In-flight requests hold their chains again.
  s.requests_in_flight.clear();
  s.request_arrival_us.clear();
  s.requests_by_arrival.clear();
  s.held_blocks = image.unnamed_request.size();
  for (size_t r = 0; r < image.requests_in_flight.size(); ++r) {
    const auto& [id, chain] = image.requests_in_flight[r];
    s.requests_in_flight.emplace(id, chain);
    s.held_blocks += chain.size();
    // A snapshot of format 10 has no arrival times: its requests count from
    // the pool's latest event.
    const int64_t arrival =
        r < image.request_arrival_us.size() ? image.request_arrival_us[r] : image.last_timestamp_us;
    s.request_arrival_us.emplace(id, arrival);
    s.requests_by_arrival.emplace(arrival, id);
  }
  s.unnamed_request = image.unnamed_request;
  s.HoldInFlight();
  return absl::OkStatus();
}

}  // namespace kvlearn
