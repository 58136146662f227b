// On prompts of one block each the prefix constraint never binds (every
// block is a root and a leaf), so the prefix-aware policies must make exactly
// the choices of their textbook forms. Each is written here again the plain
// way, from its definition, and both run the same random traces; the pool's
// contents must agree after every request. (SIEVE and LFU give the same
// figures to the last digit on the sample trace, which looked like one
// policy running under two names: this shows each follows its own
// definition; docs/results.md says why they agree there.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

// The textbook policies over block ids, `capacity` blocks.
class FlatCache {
 public:
  virtual ~FlatCache() = default;
  // Serves one access; true on a hit.
  virtual bool Access(uint64_t id, uint64_t time) = 0;
  virtual std::set<uint64_t> Resident() const = 0;
};

// LRU (a hit moves the block to the most recent end) or FIFO (it does not):
// the block at the front leaves first.
class FlatQueue final : public FlatCache {
 public:
  FlatQueue(size_t capacity, bool move_on_hit) : capacity_(capacity), move_on_hit_(move_on_hit) {}
  bool Access(uint64_t id, uint64_t) override {
    const auto it = std::find(order_.begin(), order_.end(), id);
    if (it != order_.end()) {
      if (move_on_hit_) order_.splice(order_.end(), order_, it);
      return true;
    }
    if (order_.size() == capacity_) order_.pop_front();
    order_.push_back(id);
    return false;
  }
  std::set<uint64_t> Resident() const override { return {order_.begin(), order_.end()}; }

 private:
  size_t capacity_;
  bool move_on_hit_;
  std::list<uint64_t> order_;
};

// Zhang et al. (NSDI '24): a FIFO queue with a visited bit per object; new
// objects enter at the head; the hand walks from the tail towards the head,
// clearing bits, and evicts the first unvisited object, then rests on the
// next one towards the head (past the head: back at the tail).
class FlatSieve final : public FlatCache {
 public:
  explicit FlatSieve(size_t capacity) : capacity_(capacity) {}
  bool Access(uint64_t id, uint64_t) override {
    const auto it =
        std::find_if(queue_.begin(), queue_.end(), [id](const Slot& s) { return s.id == id; });
    if (it != queue_.end()) {
      it->visited = true;
      return true;
    }
    if (queue_.size() == capacity_) {
      // queue_.front() is the tail; hand_ == queue_.end() means "from the tail".
      auto hand = hand_ == queue_.end() ? queue_.begin() : hand_;
      while (true) {
        if (hand == queue_.end()) hand = queue_.begin();
        if (!hand->visited) break;
        hand->visited = false;
        ++hand;
      }
      hand_ = queue_.erase(hand);
    }
    queue_.push_back({id, false});
    return false;
  }
  std::set<uint64_t> Resident() const override {
    std::set<uint64_t> ids;
    for (const Slot& s : queue_) ids.insert(s.id);
    return ids;
  }

 private:
  struct Slot {
    uint64_t id;
    bool visited;
  };
  size_t capacity_;
  std::list<Slot> queue_;
  std::list<Slot>::iterator hand_ = queue_.end();
};

// GreedyDual-Size-Frequency (Cherkasova, 1998): H = L + freq * cost / size,
// the smallest H leaves (ties: least recently used) and L becomes its H;
// freq counts uses since entering (1 at entry). Without the inflation L
// (which stays 0) it is LFU, ties to the least recently used. Every block
// here has the same cost and size.
class FlatFrequency final : public FlatCache {
 public:
  FlatFrequency(size_t capacity, double cost_ms, double bytes, bool inflate)
      : capacity_(capacity), cost_ms_(cost_ms), bytes_(bytes), inflate_(inflate) {}
  bool Access(uint64_t id, uint64_t time) override {
    if (auto it = entries_.find(id); it != entries_.end()) {
      ++it->second.freq;
      it->second.h = H(it->second.freq);
      it->second.last = time;
      return true;
    }
    if (entries_.size() == capacity_) {
      const auto victim = std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
        return std::make_pair(a.second.h, a.second.last) <
               std::make_pair(b.second.h, b.second.last);
      });
      if (inflate_) l_ = std::max(l_, victim->second.h);
      entries_.erase(victim);
    }
    entries_[id] = {1, H(1), time};
    return false;
  }
  std::set<uint64_t> Resident() const override {
    std::set<uint64_t> ids;
    for (const auto& [id, e] : entries_) ids.insert(id);
    return ids;
  }

 private:
  struct Entry {
    uint64_t freq;
    double h;
    uint64_t last;
  };
  double H(uint64_t freq) const { return l_ + static_cast<double>(freq) * cost_ms_ / bytes_; }

  size_t capacity_;
  double cost_ms_, bytes_;
  bool inflate_;
  double l_ = 0;
  std::map<uint64_t, Entry> entries_;
};

// Megiddo & Modha (FAST '03), Fig. 4, for a cache of c pages: T1 and T2
// resident (seen once, seen twice or more), B1 and B2 their ghosts; each
// list's front is its LRU end.
class FlatArc final : public FlatCache {
 public:
  explicit FlatArc(size_t capacity) : c_(static_cast<double>(capacity)) {}
  bool Access(uint64_t x, uint64_t) override {
    if (Take(t1_, x) || Take(t2_, x)) {  // case I
      t2_.push_back(x);
      return true;
    }
    // |B1| and |B2| with x still in its ghost list, as the paper's ratios read them.
    const double b1 = static_cast<double>(b1_.size()), b2 = static_cast<double>(b2_.size());
    if (Take(b1_, x)) {  // case II
      p_ = std::min(p_ + std::max(b2 / b1, 1.0), c_);
      Replace(false);
      t2_.push_back(x);
      return false;
    }
    if (Take(b2_, x)) {  // case III
      p_ = std::max(p_ - std::max(b1 / b2, 1.0), 0.0);
      Replace(true);
      t2_.push_back(x);
      return false;
    }
    const double l1 = static_cast<double>(t1_.size() + b1_.size());
    const double all = l1 + static_cast<double>(t2_.size() + b2_.size());
    if (l1 == c_) {  // case IV A
      if (static_cast<double>(t1_.size()) < c_) {
        b1_.pop_front();
        Replace(false);
      } else {
        t1_.pop_front();
      }
    } else if (all >= c_) {  // case IV B
      if (all == 2 * c_) b2_.pop_front();
      Replace(false);
    }
    t1_.push_back(x);
    return false;
  }
  std::set<uint64_t> Resident() const override {
    std::set<uint64_t> ids(t1_.begin(), t1_.end());
    ids.insert(t2_.begin(), t2_.end());
    return ids;
  }

 private:
  static bool Take(std::list<uint64_t>& list, uint64_t x) {
    const auto it = std::find(list.begin(), list.end(), x);
    if (it == list.end()) return false;
    list.erase(it);
    return true;
  }
  void Replace(bool x_in_b2) {
    const double t1 = static_cast<double>(t1_.size());
    if (!t1_.empty() && ((x_in_b2 && t1 == p_) || t1 > p_)) {
      b1_.push_back(t1_.front());
      t1_.pop_front();
    } else {
      b2_.push_back(t2_.front());
      t2_.pop_front();
    }
  }

  double c_, p_ = 0;
  std::list<uint64_t> t1_, t2_, b1_, b2_;
};

// `block`: what every block of the flat traces costs and weighs.
std::unique_ptr<FlatCache> MakeFlat(const std::string& policy, size_t capacity,
                                    const BlockMeta& block) {
  if (policy == "lru" || policy == "fifo") {
    return std::make_unique<FlatQueue>(capacity, policy == "lru");
  }
  if (policy == "arc") return std::make_unique<FlatArc>(capacity);
  if (policy == "lfu" || policy == "gdsf") {
    return std::make_unique<FlatFrequency>(capacity, block.recompute_gpu_ms,
                                           static_cast<double>(block.bytes), policy == "gdsf");
  }
  return std::make_unique<FlatSieve>(capacity);
}

// `requests` one-block prompts: 70% from 300 ids with Zipf-like weights
// (1 / rank^0.8), 30% ids never seen before.
std::vector<uint64_t> SkewedIds(uint64_t seed, int requests) {
  std::mt19937_64 rng(seed);
  std::vector<double> weights;
  for (int i = 1; i <= 300; ++i) weights.push_back(1.0 / std::pow(i, 0.8));
  std::discrete_distribution<int> popular(weights.begin(), weights.end());
  std::bernoulli_distribution fresh(0.3);
  std::vector<uint64_t> ids;
  uint64_t next_fresh = 1000;
  for (int r = 0; r < requests; ++r) {
    ids.push_back(fresh(rng) ? next_fresh++ : static_cast<uint64_t>(popular(rng)));
  }
  return ids;
}

class FlatReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FlatReferenceTest, PoolMatchesTheTextbookPolicyAfterEveryRequest) {
  const std::string policy = GetParam();
  for (const uint64_t seed : {1, 2, 3}) {
    for (const size_t capacity : {8, 40}) {
      const std::vector<uint64_t> ids = SkewedIds(seed, 3000);
      Trace trace;
      trace.source = "flat";
      trace.block_size = kHandBlockSize;
      for (size_t r = 0; r < ids.size(); ++r) {
        trace.Add(static_cast<int64_t>(r) * 1000, kHandBlockSize, 16,
                  std::span<const uint64_t>(&ids[r], 1));
      }
      auto replay = BuildReplayTrace(trace, DefaultCost());
      ASSERT_TRUE(replay.ok()) << replay.status();

      const auto flat = MakeFlat(policy, capacity, replay->catalog[0]);
      uint64_t flat_hits = 0;
      int mismatches = 0;
      PoolReplayOptions options;
      options.pool_bytes = capacity * HandBlockBytes();
      options.after_request = [&](uint32_t r, const PoolState& pool) {
        flat_hits += flat->Access(ids[r], r);
        std::set<uint64_t> resident;
        for (BlockIndex b = 0; b < replay->catalog.size(); ++b) {
          if (pool.IsResident(b)) resident.insert(replay->catalog[b].hash_id);
        }
        if (resident != flat->Resident() && mismatches++ == 0) {
          ADD_FAILURE() << policy << " seed " << seed << " capacity " << capacity
                        << ": pools differ first after request " << r;
        }
      };
      auto result = ReplayPool(*replay, DefaultCost(), policy, options);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(mismatches, 0);
      EXPECT_EQ(result->block_hits, flat_hits) << policy << " seed " << seed;
      // Not a trivial agreement: the pool was full and the policy chose.
      EXPECT_GT(result->block_hits, 0u);
      EXPECT_LT(result->block_hits, ids.size() - capacity);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, FlatReferenceTest,
                         ::testing::Values("lru", "fifo", "lfu", "gdsf", "sieve", "arc"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvlearn
