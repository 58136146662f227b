#include "server/shadow_pool.h"

#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "policies/policy_driver.h"
#include "server/node_shard.h"
#include "server/shard_image.h"

namespace kvlearn {

absl::StatusOr<std::unique_ptr<ShadowPool>> ShadowPool::Start(
    const ExperimentPolicy& spec, const std::string& node, v1::Tier tier, uint64_t capacity_bytes,
    PolicyEnv env, CostCounters* costs, ShadowBudget* budget, double capacity_scale) {
  std::unique_ptr<ShadowPool> s(new ShadowPool());
  s->name_ = spec.name;
  s->policy_ = spec.policy;
  s->capacity_scale_ = capacity_scale;
  s->model_ = spec.loaded_model;
  s->env_ = env;
  s->costs_ = costs;
  s->budget_ = budget;
  s->pool_ = std::make_unique<NodePools::Shard>(node, tier,
                                                ScaledCapacity(capacity_bytes, capacity_scale));
  absl::MutexLock lock(&s->pool_->mu);
  if (auto st = s->pool_->driver.StartPolicy(spec.policy, std::move(env)); !st.ok()) return st;
  s->pool_->model = spec.loaded_model;
  return s;
}

uint64_t ShadowPool::ScaledCapacity(uint64_t capacity_bytes, double scale) {
  if (scale == 1.0 || capacity_bytes >= kUnboundedPoolBytes) return capacity_bytes;
  // long double holds every 64-bit size exactly, so 0.5x and 2x are exact.
  const long double scaled = static_cast<long double>(capacity_bytes) * scale;
  return scaled >= kUnboundedPoolBytes ? kUnboundedPoolBytes : static_cast<uint64_t>(scaled);
}

ShadowPool::~ShadowPool() {
  if (pool_ != nullptr) budget_->blocks.fetch_sub(pool_->catalog.size(), std::memory_order_relaxed);
}

void ShadowPool::Serve(const BlockCatalog& live, std::span<const BlockIndex> chain,
                       uint64_t input_tokens, int64_t timestamp_us, const CostModel& cost,
                       uint32_t block_size, uint64_t ghost_blocks) {
  NodePools::Shard& s = *pool_;
  absl::MutexLock lock(&s.mu);
  // New blocks take from the shared budget first: a request the budget
  // cannot take is skipped whole (a part of a chain would be another request).
  const auto take = [&] {
    uint64_t fresh = 0;
    for (const BlockIndex b : chain) fresh += s.catalog.Find(live[b].hash_id) == kNoBlock;
    const uint64_t before = budget_->blocks.fetch_add(fresh, std::memory_order_relaxed);
    if (before + fresh <= budget_->max_blocks) return true;
    budget_->blocks.fetch_sub(fresh, std::memory_order_relaxed);
    return false;
  };
  bool fits = take();
  if (!fits && s.catalog.size() > s.driver.pool().resident_blocks()) {
    Compact(s, 0, cost, block_size);  // its ghosts go first; its residents stay
    fits = take();
  }
  if (!fits) {
    costs_->requests_skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  absl::InlinedVector<BlockIndex, 32> own(chain.size());
  BlockIndex parent = kNoBlock;
  for (size_t i = 0; i < chain.size(); ++i) {
    const BlockMeta& m = live[chain[i]];
    BlockIndex b = s.catalog.Find(m.hash_id);
    if (b == kNoBlock) {
      BlockMeta meta = m;
      meta.parent = parent;
      meta.depth = parent == kNoBlock ? 0 : s.catalog[parent].depth + 1;
      b = s.catalog.Add(meta);
      s.last_seen.push_back(0);
      s.driver.Grow();
    }
    s.last_seen[b] = ++s.touch_clock;
    own[i] = parent = b;
  }
  // The pool replay's step (sim/pool_simulator.h, ServeRequest).
  const std::span<const BlockIndex> blocks(own.data(), own.size());
  const AccessInfo access{timestamp_us / 1000, requests_++, positions_};
  positions_ += static_cast<uint32_t>(blocks.size());
  RequestTally tally;
  tally.input_tokens = input_tokens;
  tally.blocks = static_cast<uint32_t>(blocks.size());
  tally.hit_blocks = s.driver.Lookup(blocks);
  s.driver.Touch(blocks, tally.hit_blocks, access);
  for (uint32_t i = 0; i < tally.hit_blocks; ++i) {
    tally.hit_tokens += s.catalog[blocks[i]].tokens;
    tally.loaded_bytes += s.catalog[blocks[i]].bytes;
  }
  uint64_t evicted = 0;
  if (!s.driver
           .Admit(blocks, tally.hit_blocks, tally.blocks, access, tally.admitted_bytes, evicted,
                  [](BlockIndex) {})
           .ok()) {
    // The policy broke its contract (a bug): not charged, counted.
    costs_->requests_skipped.fetch_add(1, std::memory_order_relaxed);
  } else {
    costs_->Charge(cost, tally);
  }
  ++s.requests;
  // Bounded as the live pools are (server/node_pools.h, ghost_blocks).
  if (s.catalog.size() - s.driver.pool().resident_blocks() > ghost_blocks) {
    Compact(s, ghost_blocks / 2, cost, block_size);
  }
}

void ShadowPool::Compact(NodePools::Shard& s, size_t keep_ghosts, const CostModel& cost,
                         uint32_t block_size) {
  const size_t size = s.catalog.size();
  const ShardImage image = CaptureShard(s, keep_ghosts);
  RestoreShard(s, image, cost, block_size, env_).IgnoreError();
  budget_->blocks.fetch_sub(size - s.catalog.size(), std::memory_order_relaxed);
}

void ShadowPool::Restart(uint64_t capacity_bytes) {
  absl::MutexLock lock(&pool_->mu);
  pool_->driver.Restart(ScaledCapacity(capacity_bytes, capacity_scale_))
      .IgnoreError();  // built before from the same name
}

}  // namespace kvlearn
