// `lru` sets interior blocks aside instead of scanning past them at every
// eviction (policies/lru_policy.cc). Here the same rules are written again
// the plain way, one list scanned from the back every time, and both run the
// same random requests through PolicyDriver: requests whose leading blocks
// the pool is not told of (a cluster's node served them), admissions made
// after later requests began (a cluster admits when a prefill ends), and
// pools of a few blocks. Every eviction and every saved state must agree.
#include <algorithm>
#include <cstdint>
#include <list>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

// LRU's rules over one std::list, most recent first, scanned whole.
class ScanningLru final : public RetentionPolicy {
 public:
  explicit ScanningLru(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {}
  std::string_view name() const override { return "scanning-lru"; }

  void OnRequest(std::span<const BlockIndex>, const AccessInfo&) override {
    tail_ = kNoBlock;
    first_hit_ = true;
  }
  void OnHit(BlockIndex b, const AccessInfo&) override {
    order_.remove(b);
    order_.push_front(b);
    Stamp(b) = ++clock_;
    if (first_hit_) tail_ = b;
    first_hit_ = false;
  }
  // Behind the request's first hit or the block inserted just before.
  void OnInsert(BlockIndex b, const AccessInfo&) override {
    const BlockIndex parent = catalog_[b].parent;
    if (parent != kNoBlock && parent == tail_) {
      order_.insert(std::next(std::find(order_.begin(), order_.end(), parent)), b);
      Stamp(b) = Stamp(parent);
    } else {
      order_.push_front(b);
      Stamp(b) = ++clock_;
    }
    tail_ = b;
    first_hit_ = false;
  }
  BlockIndex SelectVictim() override {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      if (pool_.IsEvictable(*it)) return *it;
    }
    return kNoBlock;
  }
  void OnEvict(BlockIndex b) override {
    order_.remove(b);
    if (b == tail_) tail_ = kNoBlock;
  }
  double EvictionPriority(BlockIndex b) const override {
    return static_cast<double>(stamp_.at(b)) - catalog_[b].depth * 1e-6;
  }
  // lru's format: clock, count, each block (most recent first) and its stamp,
  // then the run's tail (+1, 0 for none) and the first-hit flag.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    out.Varint(clock_);
    out.Varint(order_.size());
    for (const BlockIndex b : order_) {
      out.Varint(Renumbered(renumber, b));
      out.Varint(stamp_.at(b));
    }
    out.Varint(tail_ == kNoBlock ? 0 : uint64_t{Renumbered(renumber, tail_)} + 1);
    out.Bool(first_hit_);
    return absl::OkStatus();
  }

 private:
  uint64_t& Stamp(BlockIndex b) {
    if (b >= stamp_.size()) stamp_.resize(b + 1, 0);
    return stamp_[b];
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  std::list<BlockIndex> order_;
  std::vector<uint64_t> stamp_;
  uint64_t clock_ = 0;
  BlockIndex tail_ = kNoBlock;
  bool first_hit_ = true;
};

// Requests over a random prefix tree: each extends a random known block (or
// starts a new root) by 1-4 new blocks, so chains share prefixes of every
// length and blocks have several children.
std::unique_ptr<HandTrace> RandomTreeTrace(uint32_t seed, uint32_t requests) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint64_t>> paths;  // paths[i]: the chain ending at node i + 1
  auto h = std::make_unique<HandTrace>();
  Trace& trace = h->trace;
  trace.block_size = kHandBlockSize;
  for (uint32_t r = 0; r < requests; ++r) {
    std::vector<uint64_t> chain;
    if (!paths.empty() && rng() % 8 != 0) chain = paths[rng() % paths.size()];
    const uint32_t grow = rng() % 5;  // 0: the request reuses a known chain only
    for (uint32_t k = 0; k < std::max<uint32_t>(grow, chain.empty() ? 1 : 0); ++k) {
      chain.push_back(paths.size() + 1);
      paths.push_back(chain);
    }
    trace.Add(int64_t{r} * 1000, static_cast<uint32_t>(chain.size()) * kHandBlockSize, 16, chain);
  }
  auto replay = BuildReplayTrace(trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (replay.ok()) h->replay = *std::move(replay);
  return h;
}

struct Pools {
  Pools(const ReplayTrace& replay, uint64_t capacity)
      : set_aside(&replay.catalog, capacity), scanning(&replay.catalog, capacity) {
    EXPECT_TRUE(set_aside.StartPolicy("lru", MakePolicyEnv(DefaultCost())).ok());
    EXPECT_TRUE(
        scanning
            .StartPolicy(
                [](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
                  return std::make_unique<ScanningLru>(env);
                },
                MakePolicyEnv(DefaultCost()))
            .ok());
  }
  PolicyDriver set_aside;
  PolicyDriver scanning;
};

std::span<const BlockIndex> Chain(const ReplayTrace& replay, uint32_t r) {
  const TraceRequest& req = replay.trace->requests[r];
  return {replay.blocks.data() + req.first_block, req.num_blocks};
}

TEST(LruSetAsideTest, EvictsExactlyAsScanningTheWholeList) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    const auto h = RandomTreeTrace(seed, 3000);
    const ReplayTrace& replay = h->replay;
    ASSERT_GT(replay.catalog.size(), 0u);
    std::mt19937 rng(seed * 7919);
    const uint64_t capacity = (3 + seed * 4) * HandBlockBytes();
    Pools pools(replay, capacity);
    std::vector<BlockIndex> identity(replay.catalog.size());
    for (BlockIndex b = 0; b < identity.size(); ++b) identity[b] = b;
    uint64_t evicted_total = 0;
    int64_t deferred = -1;  // a request whose admission waits for the next one to begin
    const uint32_t n = static_cast<uint32_t>(replay.trace->requests.size());
    for (uint32_t r = 0; r <= n; ++r) {
      if (r < n) {
        const auto chain = Chain(replay, r);
        AccessInfo access{int64_t{r} * 1000, r, replay.trace->requests[r].first_block};
        const uint32_t hits = pools.set_aside.Lookup(chain);
        ASSERT_EQ(hits, pools.scanning.Lookup(chain));
        // The pool is not told of a random number of leading blocks.
        const uint32_t first_used = rng() % 3 == 0 ? rng() % (hits + 1) : 0;
        for (PolicyDriver* d : {&pools.set_aside, &pools.scanning}) {
          d->Touch(chain, hits, access, first_used);
        }
      }
      // Admit the request before (deferred), then maybe this one.
      for (const int64_t a : {deferred, r < n && rng() % 2 == 0 ? int64_t{r} : int64_t{-1}}) {
        if (a < 0) continue;
        const auto chain = Chain(replay, static_cast<uint32_t>(a));
        AccessInfo access{a * 1000, static_cast<uint32_t>(a),
                          replay.trace->requests[a].first_block};
        std::vector<BlockIndex> victims[2];
        uint64_t inserted[2] = {0, 0}, evicted[2] = {0, 0};
        PolicyDriver* drivers[2] = {&pools.set_aside, &pools.scanning};
        for (int k = 0; k < 2; ++k) {
          drivers[k]->UnpinAll();
          ASSERT_TRUE(drivers[k]
                          ->Admit(chain, 0, static_cast<uint32_t>(chain.size()), access,
                                  inserted[k], evicted[k],
                                  [&](BlockIndex v) { victims[k].push_back(v); })
                          .ok());
        }
        ASSERT_EQ(victims[0], victims[1]) << "request " << a << " admitted at " << r;
        ASSERT_EQ(inserted[0], inserted[1]);
        evicted_total += evicted[0];
      }
      deferred = r < n && rng() % 2 == 0 ? int64_t{r} : int64_t{-1};
      if (r % 97 == 0) {
        const auto a = pools.set_aside.SavePolicyState(identity);
        const auto b = pools.scanning.SavePolicyState(identity);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(*a, *b) << "saved states differ after request " << r;
      }
    }
    // The pools were small enough that most admissions evicted.
    EXPECT_GT(evicted_total, n);
  }
}

// A hand-worked case of a new block whose parent the request did not use:
// it is as recent as that request, not as its parent.
//   R0 "ab": a and b inserted, stamp 1 (b behind a).
//   R1 "ac": a used (2), c behind it (2).
//   R2 "abd", the pool told of neither a nor b: d goes to the front with a
//     new stamp, 3. (Behind b with b's stamp 1 it would be the next victim.)
//   R3 "ae", a not told, the pool full at 4 blocks: from the back, b is
//     interior (set aside), c is a leaf with stamp 2: c goes, d stays.
TEST(LruSetAsideTest, ANewBlockUnderAnUnusedParentIsTheRequestsAge) {
  const auto h = MakeHandTrace({"ab", "ac", "abd", "ae"});
  PolicyDriver driver(&h->replay.catalog, 4 * HandBlockBytes());
  ASSERT_TRUE(driver.StartPolicy("lru", MakePolicyEnv(DefaultCost())).ok());
  std::vector<BlockIndex> victims;
  for (uint32_t r = 0; r < 4; ++r) {
    const auto chain = Chain(h->replay, r);
    AccessInfo access{int64_t{r} * 1000, r, h->trace.requests[r].first_block};
    const uint32_t hits = driver.Lookup(chain);
    const uint32_t first_used = r == 2 ? hits : (r == 3 ? 1 : 0);  // served elsewhere
    driver.Touch(chain, hits, access, first_used);
    uint64_t inserted = 0, evicted = 0;
    ASSERT_TRUE(driver
                    .Admit(chain, hits, static_cast<uint32_t>(chain.size()), access, inserted,
                           evicted, [&](BlockIndex v) { victims.push_back(v); })
                    .ok());
  }
  EXPECT_EQ(victims, std::vector<BlockIndex>{h->Block('c')});
  EXPECT_EQ(h->Resident(driver.pool()), "abde");
}

}  // namespace
}  // namespace kvlearn
