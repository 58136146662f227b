// One (node, tier) pool of the sidecar (server/node_pools.h): the blocks it
// remembers, the driver of its policy and the counters a restart must bring
// back, under its own mutex. Its own header because the shard compaction and
// the snapshots (server/shard_image.h) read and rebuild it as a whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/block_catalog.h"
#include "policies/policy_driver.h"
#include "server/node_pools.h"

namespace kvlearn {

struct NodePools::Shard {
  Shard(std::string node_id, v1::Tier tier_value, uint64_t capacity)
      : node(std::move(node_id)), tier(tier_value), driver(&catalog, capacity) {}

  const std::string node;
  const v1::Tier tier;
  absl::Mutex mu;
  BlockCatalog catalog ABSL_GUARDED_BY(mu);
  PolicyDriver driver ABSL_GUARDED_BY(mu);
  // Blocks the sidecar recommended for eviction (and evicted in its view)
  // whose block-removed event has not arrived yet.
  absl::flat_hash_set<BlockIndex> advised_evictions ABSL_GUARDED_BY(mu);
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
  // Evictions counted by pools this shard replaced (compaction, snapshot
  // load), so GetStatus keeps counting from where it was.
  uint64_t evictions_before ABSL_GUARDED_BY(mu) = 0;
  // Latest event timestamp, for the policy calls that rebuild a pool.
  int64_t last_timestamp_us ABSL_GUARDED_BY(mu) = 0;
  uint64_t compactions ABSL_GUARDED_BY(mu) = 0;
  // The model this pool's policy scores with (a swap reaches pools one by
  // one), for the policy a rebuild starts.
  std::shared_ptr<const LearnedModel> model ABSL_GUARDED_BY(mu);
};

}  // namespace kvlearn
