#include "policies/retention_policy.h"

#include <algorithm>

namespace kvlearn {

std::vector<BlockIndex> RetentionPolicy::RankVictims(std::span<const BlockIndex> candidates) const {
  std::vector<BlockIndex> order(candidates.begin(), candidates.end());
  std::stable_sort(order.begin(), order.end(), [this](BlockIndex a, BlockIndex b) {
    return EvictionPriority(a) < EvictionPriority(b);
  });
  return order;
}

}  // namespace kvlearn
