// A snapshot of every pool of the sidecar (NodePools::CaptureAll), as the
// event log stores it (EventLog::WriteSnapshot): each pool's ShardImage
// (server/shard_image.h: remembered blocks, resident blocks, the policy's own
// state, proposals, in-flight requests, counters) and the last journaled
// model swap, so a restart loads it and replays only the log after it
// (server/log_replay.h).
//
// Encoding (little-endian doubles, varints elsewhere): a format byte (13), the
// model-swap record, the pool count, and per pool its node, tier, capacity,
// counters, blocks (hash id, parent + 1, depth, tokens, bytes, recompute
// cost, last seen, origin type and turn), the resident blocks and proposals as block numbers, the
// proposals' scores, the in-flight requests (id, chain), the last request
// without an id, and the policy state: 1 and its bytes
// (core/policy_state.h), or 0 for a policy that cannot save one (its
// residents are then in eviction order), then each in-flight request's
// arrival timestamp (for --request-timeout-seconds). Format 12 is the same
// with learned's policy state of the layout before its fallback (dropped when
// decoded, as below), format 11 also without the blocks' origins (they decode as not known), format
// 10 without the arrival times too (its requests count from the pool's latest event when loaded).
// Formats 9 down to 3 are format 10, their policy states of older layouts (server/pools_snapshot.cc
// lists them): they decode with them dropped, residents in catalog order. Format 2, written before
// policies saved their state, is the same without the policy state, residents in eviction order.
// Both still decode (log_replay.h says when they are used). Decoding checks every number it will
// index with; the policy state's bytes are checked when the policy loads them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/shard_image.h"

namespace kvlearn {

struct PoolsSnapshot {
  // 14; 13 down to 2 as decoded from an older snapshot (13 to 3: no policy
  // state to load; 11: no block origins; 10 and below: no arrival times
  // either; 2: no policy state at all). Encoding 2 to 13 writes that format's
  // layout (tests); any other value encodes format 14.
  char format = 14;
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
// Why a decoded snapshot's policies cannot restart exactly from it, or empty
// when they can (the current format): "no policy state" (format 2) or
// "policy states of an older layout" (formats 3 to 12).
absl::string_view MissingPolicyStates(const PoolsSnapshot& snapshot);

}  // namespace kvlearn
