// s3fifo's scans visit only each queue's active blocks (leaves, and S's
// blocks hit twice) and move the queue's start past the others in one step
// (policies/s3fifo_policy.cc). Here S3-FIFO is written again the plain way,
// as the header comment of that file defines it: every scan step takes the
// queue's front block and moves it to the back unless it is promoted or
// chosen. Both run the same generated traces through the same driver; the
// pools must hold the same blocks after every request, at several pool sizes.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "policies/policy_driver.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

class PlainS3Fifo final : public RetentionPolicy {
 public:
  explicit PlainS3Fifo(const PolicyEnv& env)
      : catalog_(*env.catalog),
        pool_(*env.pool),
        small_target_(env.pool->capacity_bytes() / 10),
        main_target_(env.pool->capacity_bytes() - small_target_),
        queue_(env.catalog->size(), kNone),
        freq_(env.catalog->size(), 0),
        ghost_stamp_(env.catalog->size(), 0) {}

  std::string_view name() const override { return "plain-s3fifo"; }
  void OnHit(BlockIndex b, const AccessInfo&) override {
    freq_[b] = static_cast<uint8_t>(std::min(freq_[b] + 1, 3));
  }
  void OnInsert(BlockIndex b, const AccessInfo&) override {
    freq_[b] = 0;
    const bool ghost = ghost_stamp_[b] != 0;
    if (ghost) Forget(b);
    Push(ghost ? kMain : kSmall, b);
  }
  BlockIndex SelectVictim() override {
    if (bytes_[kMain] > main_target_ || queues_[kSmall].empty()) {
      if (const BlockIndex b = ScanMain(); b != kNoBlock) return b;
      const size_t main_before = queues_[kMain].size();
      if (const BlockIndex b = ScanSmall(); b != kNoBlock) return b;
      return queues_[kMain].size() != main_before ? ScanMain() : kNoBlock;
    }
    if (const BlockIndex b = ScanSmall(); b != kNoBlock) return b;
    return ScanMain();
  }
  void OnEvict(BlockIndex b) override {
    const int q = queue_[b];
    std::deque<BlockIndex>& queue = queues_[q];
    queue.erase(std::find(queue.begin(), queue.end(), b));
    bytes_[q] -= catalog_[b].bytes;
    queue_[b] = kNone;
    if (q == kSmall) {
      ghost_stamp_[b] = ++ghost_clock_;
      ghost_.emplace_back(b, ghost_stamp_[b]);
      ghost_bytes_ += catalog_[b].bytes;
      while (ghost_bytes_ > main_target_ && !ghost_.empty()) {
        const auto [old, stamp] = ghost_.front();
        ghost_.pop_front();
        if (ghost_stamp_[old] == stamp) Forget(old);
      }
    }
  }
  double EvictionPriority(BlockIndex) const override { return 0; }

 private:
  static constexpr int kSmall = 0;
  static constexpr int kMain = 1;
  static constexpr int kNone = 2;

  BlockIndex ScanSmall() {
    for (size_t n = queues_[kSmall].size(); n > 0; --n) {
      const BlockIndex b = queues_[kSmall].front();
      queues_[kSmall].pop_front();
      bytes_[kSmall] -= catalog_[b].bytes;
      if (freq_[b] >= 2) {
        freq_[b] = 0;
        Push(kMain, b);
      } else if (!pool_.IsEvictable(b)) {
        Push(kSmall, b);
      } else {
        queues_[kSmall].push_front(b);  // the victim stays the front
        bytes_[kSmall] += catalog_[b].bytes;
        return b;
      }
    }
    return kNoBlock;
  }
  BlockIndex ScanMain() {
    const size_t lap = queues_[kMain].size();
    bool seen_evictable = false;
    for (size_t step = 0; step < 4 * lap; ++step) {
      if (step > 0 && step % lap == 0 && !seen_evictable) break;
      const BlockIndex b = queues_[kMain].front();
      if (pool_.IsEvictable(b)) {
        seen_evictable = true;
        if (freq_[b] == 0) return b;
        --freq_[b];
      }
      queues_[kMain].pop_front();
      queues_[kMain].push_back(b);
    }
    return kNoBlock;
  }
  void Push(int q, BlockIndex b) {
    queues_[q].push_back(b);
    bytes_[q] += catalog_[b].bytes;
    queue_[b] = static_cast<uint8_t>(q);
  }
  void Forget(BlockIndex b) {
    ghost_stamp_[b] = 0;
    ghost_bytes_ -= catalog_[b].bytes;
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  const uint64_t small_target_;
  const uint64_t main_target_;
  std::deque<BlockIndex> queues_[2];
  uint64_t bytes_[2] = {0, 0};
  std::vector<uint8_t> queue_;
  std::vector<uint8_t> freq_;
  std::deque<std::pair<BlockIndex, uint64_t>> ghost_;
  std::vector<uint64_t> ghost_stamp_;
  uint64_t ghost_clock_ = 0;
  uint64_t ghost_bytes_ = 0;
};

std::vector<BlockIndex> Residents(const PoolState& pool) {
  std::vector<BlockIndex> out;
  for (BlockIndex b = 0; b < pool.catalog().size(); ++b) {
    if (pool.IsResident(b)) out.push_back(b);
  }
  return out;
}

void ExpectSamePools(const Trace& trace) {
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (const double fraction : {0.01, 0.05, 0.2}) {
    SCOPED_TRACE(fraction);
    const auto bytes = static_cast<uint64_t>(fraction * replay->distinct_block_bytes);
    PolicyDriver fast(&replay->catalog, bytes);
    PolicyDriver plain(&replay->catalog, bytes);
    ASSERT_TRUE(fast.StartPolicy("s3fifo", MakePolicyEnv(cost)).ok());
    ASSERT_TRUE(
        plain
            .StartPolicy(
                [](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
                  return std::make_unique<PlainS3Fifo>(env);
                },
                MakePolicyEnv(cost))
            .ok());
    uint64_t evicted = 0;
    for (uint32_t r = 0; r < trace.requests.size(); ++r) {
      RequestOutcome a;
      RequestOutcome b;
      ASSERT_TRUE(ServeRequest(*replay, r, fast, a).ok());
      ASSERT_TRUE(ServeRequest(*replay, r, plain, b).ok());
      ASSERT_EQ(a.hit_blocks, b.hit_blocks) << "request " << r;
      ASSERT_EQ(Residents(fast.pool()), Residents(plain.pool())) << "request " << r;
      evicted += a.evicted_blocks;
    }
    EXPECT_GT(evicted, 100u);  // the scans had work to do
  }
}

TEST(S3FifoReferenceTest, ChatTraceKeepsThePlainPoolsBlocks) {
  ChatWorkloadOptions o;
  o.seed = 5;
  o.requests = 1500;
  ExpectSamePools(GenerateChatTrace(o));
}

TEST(S3FifoReferenceTest, MixedTraceKeepsThePlainPoolsBlocks) {
  MixedWorkloadOptions o;
  o.seed = 6;
  o.requests = 1500;
  ExpectSamePools(GenerateMixedTrace(o));
}

}  // namespace
}  // namespace kvlearn
