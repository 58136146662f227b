#include "sim/routed_prefixes.h"

namespace kvlearn {

uint32_t RoutedPrefixes::Match(std::span<const BlockIndex> chain) const {
  uint32_t n = 0;
  while (n < chain.size() && links_.contains(chain[n])) ++n;
  return n;
}

void RoutedPrefixes::Unlink(const Links& l) {
  (l.older == kNoBlock ? oldest_ : links_[l.older].newer) = l.newer;
  (l.newer == kNoBlock ? newest_ : links_[l.newer].older) = l.older;
}

void RoutedPrefixes::Append(BlockIndex b) {
  links_[b] = {newest_, kNoBlock};
  (newest_ == kNoBlock ? oldest_ : links_[newest_].newer) = b;
  newest_ = b;
}

void RoutedPrefixes::Route(std::span<const BlockIndex> chain) {
  // Deepest first, so the root ends newest and a block never outlives its
  // parent in the list's order.
  for (size_t i = chain.size(); i-- > 0;) {
    const BlockIndex b = chain[i];
    if (const auto it = links_.find(b); it != links_.end()) {
      Unlink(it->second);
    } else {
      tokens_ += (*catalog_)[b].tokens;
    }
    Append(b);
  }
}

void RoutedPrefixes::Trim(uint64_t max_tokens) {
  while (tokens_ > max_tokens && oldest_ != kNoBlock) {
    const BlockIndex b = oldest_;
    const auto it = links_.find(b);
    Unlink(it->second);
    links_.erase(it);
    tokens_ -= (*catalog_)[b].tokens;
  }
}

}  // namespace kvlearn
