#include "clients/fallback_lru.h"

#include <unordered_set>

namespace kvlearn {

FallbackLru::FallbackLru(size_t capacity_blocks)
    : capacity_blocks_(capacity_blocks == 0 ? 1 : capacity_blocks) {}

void FallbackLru::BeginRequest() {
  for (uint64_t id : pinned_) {
    if (auto it = entries_.find(id); it != entries_.end()) it->second.pinned = false;
  }
  pinned_.clear();
}

void FallbackLru::Touch(uint64_t block_id, Entry& entry) {
  recency_.erase(entry.place);
  entry.place = recency_.insert(recency_.end(), block_id);
  entry.last_use = ++clock_;
}

void FallbackLru::Pin(uint64_t block_id, Entry& entry) {
  if (entry.pinned) return;
  entry.pinned = true;
  pinned_.push_back(block_id);
}

void FallbackLru::Stored(uint64_t block_id, std::optional<uint64_t> parent_id, int64_t bytes,
                         int64_t tokens) {
  if (auto it = entries_.find(block_id); it != entries_.end()) {
    Touch(block_id, it->second);
    Pin(block_id, it->second);
    return;
  }
  Entry entry;
  entry.parent = parent_id;
  entry.bytes = bytes;
  entry.tokens = tokens;
  entry.last_use = ++clock_;
  entry.place = recency_.insert(recency_.end(), block_id);
  if (parent_id) {
    if (auto p = entries_.find(*parent_id); p != entries_.end()) ++p->second.stored_children;
  }
  Pin(block_id, entries_.emplace(block_id, entry).first->second);
  ForgetOneIfOverCapacity();
}

void FallbackLru::Hit(uint64_t block_id) {
  auto it = entries_.find(block_id);
  if (it == entries_.end()) return;
  Touch(block_id, it->second);
  Pin(block_id, it->second);
}

void FallbackLru::Removed(uint64_t block_id) {
  if (entries_.count(block_id)) Erase(block_id);
}

void FallbackLru::Erase(uint64_t block_id) {
  auto it = entries_.find(block_id);
  if (it->second.parent) {
    if (auto p = entries_.find(*it->second.parent);
        p != entries_.end() && p->second.stored_children > 0) {
      --p->second.stored_children;
    }
  }
  recency_.erase(it->second.place);
  entries_.erase(it);
}

void FallbackLru::ForgetOneIfOverCapacity() {
  if (entries_.size() <= capacity_blocks_) return;
  for (uint64_t id : recency_) {
    const Entry& e = entries_.at(id);
    if (e.stored_children == 0 && !e.pinned) {
      Erase(id);
      ++forgotten_;
      return;
    }
  }
}

std::vector<FallbackBlock> FallbackLru::Blocks() const {
  std::vector<FallbackBlock> blocks;
  blocks.reserve(entries_.size());
  std::unordered_set<uint64_t> emitted;
  std::vector<uint64_t> ancestry;
  for (const auto& [id, entry] : entries_) {
    // Climb to the first ancestor already emitted (or untracked), then emit downwards.
    ancestry.clear();
    for (std::optional<uint64_t> at = id; at && !emitted.count(*at);) {
      auto it = entries_.find(*at);
      if (it == entries_.end()) break;
      ancestry.push_back(*at);
      at = it->second.parent;
    }
    for (auto a = ancestry.rbegin(); a != ancestry.rend(); ++a) {
      const Entry& e = entries_.at(*a);
      blocks.push_back({*a, e.parent, e.tokens, e.bytes});
      emitted.insert(*a);
    }
  }
  return blocks;
}

std::vector<FallbackVictim> FallbackLru::Evict(int64_t bytes_to_free,
                                               const std::vector<uint64_t>& candidates) {
  const std::unordered_set<uint64_t> allowed(candidates.begin(), candidates.end());
  auto evictable = [&](uint64_t id, const Entry& e) {
    return e.stored_children == 0 && !e.pinned && (allowed.empty() || allowed.count(id) > 0);
  };
  std::vector<FallbackVictim> victims;
  int64_t freed = 0;
  auto scan = recency_.begin();
  // Evicting a leaf can make its parent a leaf. Every block older than the
  // scan's frontier (the last block it took) was not evictable, so a parent
  // older than the frontier is now the oldest evictable block and goes next;
  // a younger one is met by the scan.
  uint64_t frontier_use = 0;
  std::optional<uint64_t> parent_next;
  while (freed < bytes_to_free) {
    uint64_t id;
    if (parent_next) {
      id = *parent_next;
      parent_next.reset();
    } else {
      while (scan != recency_.end() && !evictable(*scan, entries_.at(*scan))) ++scan;
      if (scan == recency_.end()) break;
      id = *scan++;  // advance before Erase invalidates this position
      frontier_use = entries_.at(id).last_use;
    }
    const Entry& victim = entries_.at(id);
    victims.push_back({id, victim.bytes});
    freed += victim.bytes;
    const std::optional<uint64_t> parent = victim.parent;
    Erase(id);
    if (parent) {
      auto p = entries_.find(*parent);
      if (p != entries_.end() && evictable(*parent, p->second) &&
          p->second.last_use < frontier_use) {
        parent_next = *parent;
      }
    }
  }
  return victims;
}

}  // namespace kvlearn
