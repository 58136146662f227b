// A snapshot of every pool of the sidecar (NodePools::CaptureAll), as the
// event log stores it (EventLog::WriteSnapshot): each pool's ShardImage
// (server/shard_image.h: remembered blocks, resident blocks in eviction
// order, proposals, in-flight requests, counters) and the last journaled model swap, so a restart
// loads it and replays only the log after it (server/log_replay.h).
//
// Encoding (little-endian doubles, varints elsewhere): a format byte (2), the
// model-swap record, the pool count, and per pool its node, tier, capacity,
// counters, blocks (hash id, parent + 1, depth, tokens, bytes, recompute
// cost, last seen), the eviction order and proposals as block numbers, the
// proposals' scores, the in-flight requests (id, chain) and the last request
// without an id. Decoding checks every number it will index with.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/shard_image.h"

namespace kvlearn {

struct PoolsSnapshot {
  std::string model_swap;  // the last journaled model-swap record; empty if none
  struct Pool {
    std::string node;
    v1::Tier tier = v1::TIER_POOL;
    ShardImage image;
  };
  std::vector<Pool> pools;
};

std::string EncodePoolsSnapshot(const PoolsSnapshot& snapshot);
// DATA_LOSS naming what is wrong when `bytes` is not a well-formed snapshot.
absl::StatusOr<PoolsSnapshot> DecodePoolsSnapshot(std::string_view bytes);

}  // namespace kvlearn
