#include "server/shard_image.h"

#include <algorithm>
#include <utility>

namespace kvlearn {

ShardImage CaptureShard(const NodePools::Shard& s, size_t keep_ghosts) {
  const BlockCatalog& catalog = s.catalog;
  const PoolState& pool = s.driver.pool();
  const auto n = static_cast<BlockIndex>(catalog.size());
  std::vector<uint8_t> keep(n, 0);
  std::vector<BlockIndex> residents, ghosts;
  residents.reserve(pool.resident_blocks());
  for (BlockIndex b = 0; b < n; ++b) {
    if (pool.IsResident(b)) {
      keep[b] = 1;  // residents are prefix-closed: their ancestors are resident
      residents.push_back(b);
    } else {
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
  for (BlockIndex b : s.driver.RankVictims(residents)) {
    image.eviction_order.push_back(renumber[b]);
  }
  for (BlockIndex b : residents) {
    if (pool.IsPinned(b)) image.pinned.push_back(renumber[b]);
  }
  // A recommended eviction whose block_removed has not come is a ghost like
  // any other: kept while recent (it was touched when evicted).
  for (BlockIndex b : s.advised_evictions) {
    if (keep[b]) image.advised_evictions.push_back(renumber[b]);
  }
  std::sort(image.advised_evictions.begin(), image.advised_evictions.end());
  image.capacity_bytes = pool.capacity_bytes();
  image.next_request = s.next_request;
  image.current_request = s.current_request;
  image.requests = s.requests;
  image.events_applied = s.events_applied;
  image.touch_clock = s.touch_clock;
  image.evictions = s.evictions_before + pool.evictions();
  image.last_timestamp_us = s.last_timestamp_us;
  return image;
}

absl::Status RestoreShard(NodePools::Shard& s, const ShardImage& image, PolicyEnv env) {
  BlockCatalog catalog;
  catalog.Reserve(image.blocks.size());
  for (const BlockMeta& meta : image.blocks) catalog.Add(meta);
  s.catalog = std::move(catalog);  // the driver's pool points at s.catalog
  if (auto st = s.driver.Restart(image.capacity_bytes, std::move(env)); !st.ok()) return st;
  s.last_seen = image.last_seen;
  s.touch_clock = image.touch_clock;
  s.advised_evictions.clear();
  s.advised_evictions.insert(image.advised_evictions.begin(), image.advised_evictions.end());
  s.next_request = image.next_request;
  s.current_request = image.current_request;
  s.requests = image.requests;
  s.events_applied = image.events_applied;
  s.evictions_before = image.evictions;
  s.last_timestamp_us = image.last_timestamp_us;

  AccessInfo access;
  access.time_ms = image.last_timestamp_us / 1000;
  access.request = image.current_request;
  // Root first (catalog order puts parents first), then one hit per block in
  // the old eviction order: the last hit is the last victim.
  std::vector<BlockIndex> residents(image.eviction_order);
  std::sort(residents.begin(), residents.end());
  for (BlockIndex b : residents) s.driver.Insert(b, access);
  s.driver.UnpinAll();
  for (BlockIndex b : image.eviction_order) s.driver.Hit(b, access);
  s.driver.UnpinAll();
  for (BlockIndex b : image.pinned) s.driver.Pin(b);
  return absl::OkStatus();
}

}  // namespace kvlearn
