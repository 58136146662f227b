// A model swap as the decision journal holds it (NodePools::SwapModel): the
// model file's path, the version of the model loaded from it ("<file
// name>@<hash of its bytes>", models/learned_model.h), and the number of
// events each pool had applied when it swapped, so the start-up replay
// (server/log_replay.h) swaps every pool at the same point of its history.
//
// Encoding: 'M', then length-prefixed path and version, a count of pools and
// per pool its length-prefixed node id, tier and event count (varints). The
// first byte tells it from Admit ('A') and RankEviction ('R') records.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

inline constexpr char kModelSwapRecord = 'M';

struct ModelSwapRecord {
  struct Position {
    std::string node;
    v1::Tier tier = v1::TIER_POOL;
    uint64_t events_applied = 0;
  };
  std::string path;
  std::string version;
  std::vector<Position> pools;
};

std::string EncodeModelSwap(const ModelSwapRecord& swap);
// DATA_LOSS when `record` is not a well-formed model-swap record.
absl::StatusOr<ModelSwapRecord> DecodeModelSwap(std::string_view record);

}  // namespace kvlearn
