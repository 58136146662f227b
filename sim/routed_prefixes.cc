#include "sim/routed_prefixes.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace kvlearn {

uint32_t RoutedPrefixes::Match(std::span<const BlockIndex> chain) const {
  uint32_t n = 0;
  while (n < chain.size() && last_routed_ms_.contains(chain[n])) ++n;
  return n;
}

void RoutedPrefixes::Route(std::span<const BlockIndex> chain, int64_t now_ms) {
  for (const BlockIndex b : chain) {
    const auto [it, inserted] = last_routed_ms_.try_emplace(b, now_ms);
    if (inserted) {
      tokens_ += (*catalog_)[b].tokens;
    } else {
      it->second = now_ms;
    }
  }
}

void RoutedPrefixes::Trim(uint64_t max_tokens) {
  if (tokens_ <= max_tokens) return;
  struct Entry {
    int64_t last_ms;
    uint32_t depth;
    BlockIndex block;
  };
  std::vector<Entry> order;
  order.reserve(last_routed_ms_.size());
  for (const auto& [b, t] : last_routed_ms_) order.push_back({t, (*catalog_)[b].depth, b});
  // Oldest first; at equal times the deeper block first, so a block goes
  // before its parent (which was routed with it) and the memory stays
  // prefix-closed. The block index settles the rest: the same trim on every
  // run.
  std::sort(order.begin(), order.end(), [](const Entry& x, const Entry& y) {
    return std::tie(x.last_ms, y.depth, x.block) < std::tie(y.last_ms, x.depth, y.block);
  });
  for (const Entry& e : order) {
    if (tokens_ <= max_tokens) break;
    last_routed_ms_.erase(e.block);
    tokens_ -= (*catalog_)[e.block].tokens;
  }
}

}  // namespace kvlearn
