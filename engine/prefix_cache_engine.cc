#include "engine/prefix_cache_engine.h"

#include <algorithm>
#include <utility>

namespace kvlearn {

PrefixCacheEngine::PrefixCacheEngine(PrefixCacheEngineOptions options)
    : options_(std::move(options)) {
  if (options_.capacity_blocks == 0) options_.capacity_blocks = 1;
}

bool PrefixCacheEngine::EvictOne(std::vector<uint64_t>& removed) {
  // The LRU end is a leaf unless it is pinned by the current request, so this
  // scan stops after a few steps.
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    auto node = nodes_.find(*it);
    if (node->second.children > 0 || node->second.pinned_request == request_) continue;
    if (node->second.parent.has_value()) --nodes_.find(*node->second.parent)->second.children;
    removed.push_back(*it);
    lru_.erase(std::next(it).base());
    nodes_.erase(node);
    ++stats_.evicted_blocks;
    return true;
  }
  return false;
}

EngineEventBatch PrefixCacheEngine::Serve(std::span<const uint64_t> chain, uint32_t input_length,
                                          double ts) {
  ++request_;
  ++stats_.requests;
  EngineEventBatch batch;
  batch.ts = ts;

  // The longest cached prefix whose parents match the chain.
  size_t cached = 0;
  while (cached < chain.size()) {
    auto it = nodes_.find(chain[cached]);
    if (it == nodes_.end()) break;
    const std::optional<uint64_t> want =
        cached == 0 ? std::nullopt : std::optional<uint64_t>(chain[cached - 1]);
    if (it->second.parent != want) break;
    it->second.pinned_request = request_;
    ++cached;
  }
  stats_.hit_blocks += cached;

  std::vector<uint64_t> removed;
  BlockStoredEvent stored;
  stored.block_size = options_.block_size;
  stored.tokens_per_block = options_.block_size;
  stored.medium = options_.medium;
  if (cached > 0) stored.parent_block_hash = chain[cached - 1];

  size_t end = cached;  // blocks [0, end) are cached after this request
  for (size_t j = cached; j < chain.size(); ++j) {
    if (nodes_.contains(chain[j])) {
      ++stats_.conflicts;
      break;
    }
    if (nodes_.size() >= options_.capacity_blocks && !EvictOne(removed)) {
      stats_.uncached_blocks += chain.size() - j;
      break;
    }
    Node node;
    if (j > 0) {
      node.parent = chain[j - 1];
      ++nodes_.find(chain[j - 1])->second.children;
    }
    node.pinned_request = request_;
    lru_.push_front(chain[j]);
    node.lru = lru_.begin();
    nodes_.emplace(chain[j], node);
    stored.block_hashes.push_back(chain[j]);
    const uint64_t start = uint64_t{j} * options_.block_size;
    uint64_t tokens = options_.block_size;
    if (input_length > 0) {
      tokens = start >= input_length ? 0 : std::min<uint64_t>(tokens, input_length - start);
    }
    stored.num_token_ids += static_cast<uint32_t>(tokens);
    end = j + 1;
  }
  stats_.stored_blocks += stored.block_hashes.size();

  // Touch leaf first: the root ends up most recent.
  for (size_t j = end; j-- > 0;) {
    lru_.splice(lru_.begin(), lru_, nodes_.find(chain[j])->second.lru);
  }

  if (!removed.empty()) {
    BlockRemovedEvent event;
    event.block_hashes = std::move(removed);
    event.medium = options_.medium;
    batch.events.push_back(std::move(event));
  }
  if (!stored.block_hashes.empty()) batch.events.push_back(std::move(stored));
  return batch;
}

EngineEventBatch PrefixCacheEngine::Clear(double ts) {
  nodes_.clear();
  lru_.clear();
  EngineEventBatch batch;
  batch.ts = ts;
  batch.events.push_back(AllBlocksClearedEvent{});
  return batch;
}

std::vector<uint64_t> PrefixCacheEngine::ResidentBlocks() const {
  std::vector<uint64_t> ids;
  ids.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace kvlearn
