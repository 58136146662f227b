// The engine's word is the truth: a block_removed of a block that still has
// children in the sidecar's view takes every descendant along (a block
// without its prefix is unreachable to prefix hits, as in the engine), so the
// sidecar's resident set equals the engine's for any removal order. The
// engine is simulated by hand: a prefix-closed set of stored blocks, from
// which each removal takes the removed block's subtree.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/server/metrics_scrape.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr char kNode[] = "engine-0";
constexpr int64_t kBlockBytes = 1000;
constexpr uint64_t kBlocks = 80;

// How the blocks to remove are ordered.
enum class Order { kRandom, kParentsFirst, kLeavesFirst };

struct Case {
  std::string policy;
  Order order;
  uint32_t seed;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* order = info.param.order == Order::kRandom         ? "random"
                      : info.param.order == Order::kParentsFirst ? "parents_first"
                                                                 : "leaves_first";
  return absl::StrCat(info.param.policy, "_", order, "_", info.param.seed);
}

// The engine: which blocks it holds, under the prefix constraint.
class EngineModel {
 public:
  void Store(uint64_t id, std::optional<uint64_t> parent) {
    held_.insert(id);
    if (parent) children_[*parent].push_back(id);
  }
  // Removes `id` and everything below it that is held; returns how many
  // blocks below it went (0 when `id` itself was not held).
  uint64_t Remove(uint64_t id) {
    if (!held_.contains(id)) return 0;
    uint64_t below = 0;
    std::vector<uint64_t> stack = {id};
    held_.erase(id);
    while (!stack.empty()) {
      const uint64_t x = stack.back();
      stack.pop_back();
      for (uint64_t c : children_[x]) {
        if (held_.erase(c) > 0) {
          ++below;
          stack.push_back(c);
        }
      }
    }
    return below;
  }
  const std::set<uint64_t>& held() const { return held_; }

 private:
  std::set<uint64_t> held_;
  std::map<uint64_t, std::vector<uint64_t>> children_;
};

class RemovalOrderTest : public ::testing::TestWithParam<Case> {
 protected:
  void Start() {
    SidecarOptions o = TestOptions(dir_.path(), GetParam().policy);
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  v1::Event* Add(v1::EventBatch& batch) {
    v1::Event* e = batch.add_events();
    e->set_node_id(kNode);
    e->set_timestamp_us(++clock_us_);
    return e;
  }

  void Send(const v1::EventBatch& batch) {
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*stub_, {batch}, &summary).ok());
    ASSERT_EQ(summary.rejected(), 0u)
        << (summary.rejections_size() ? summary.rejections(0).message() : "");
  }

  v1::RankResponse Rank(int64_t bytes) { return RankOn(*stub_, kNode, bytes); }
  uint64_t ResidentBlocks() { return PoolOf(*stub_, kNode).resident_blocks(); }

  // Every block the view holds: a drain proposes each (nothing is pinned).
  std::set<uint64_t> Drained() {
    std::set<uint64_t> out;
    const v1::RankResponse drained = Rank(int64_t{1} << 40);
    for (const auto& v : drained.victims()) {
      EXPECT_TRUE(out.insert(v.block_id()).second) << "proposed twice: " << v.block_id();
    }
    return out;
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
  int64_t clock_us_ = 0;
};

TEST_P(RemovalOrderTest, ResidentSetEqualsTheEnginesForAnyRemovalOrder) {
  Start();
  std::mt19937 rng(GetParam().seed);
  // A forest of kBlocks blocks: each one a root (1 in 5) or the child of a
  // random earlier block, so ids increase from parent to child.
  EngineModel engine;
  v1::EventBatch store;
  for (uint64_t id = 1; id <= kBlocks; ++id) {
    std::optional<uint64_t> parent;
    if (id > 1 && rng() % 5 != 0) parent = 1 + rng() % (id - 1);
    auto* s = Add(store)->mutable_block_stored();
    s->set_block_id(id);
    if (parent) s->set_parent_id(*parent);
    s->set_tokens(16);
    s->set_bytes(kBlockBytes);
    engine.Store(id, parent);
  }
  Send(store);
  // Some leaves proposed and not yet confirmed: still held by the node, so
  // in the view, and removing an ancestor must take them too.
  ASSERT_EQ(Rank(6 * kBlockBytes).victims_size(), 6);
  ASSERT_EQ(ResidentBlocks(), kBlocks);

  // Half the blocks removed, in the case's order, in batches of 5; ids
  // already gone with an ancestor are accepted and change nothing.
  std::vector<uint64_t> order(kBlocks);
  std::iota(order.begin(), order.end(), 1);
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(kBlocks / 2);
  if (GetParam().order == Order::kParentsFirst) std::sort(order.begin(), order.end());
  if (GetParam().order == Order::kLeavesFirst) {
    std::sort(order.begin(), order.end(), std::greater<>());
  }
  uint64_t below = 0;
  for (size_t i = 0; i < order.size(); i += 5) {
    v1::EventBatch removals;
    for (size_t j = i; j < std::min(order.size(), i + 5); ++j) {
      Add(removals)->mutable_block_removed()->set_block_id(order[j]);
      below += engine.Remove(order[j]);
    }
    Send(removals);
    ASSERT_EQ(ResidentBlocks(), engine.held().size()) << "after " << i + 5 << " removals";
  }
  if (GetParam().order != Order::kLeavesFirst) {
    EXPECT_GT(below, 0u) << "this case removed no parent before its children";
  }
  EXPECT_EQ(ScrapeCounter(server_->metrics_port(), "kvlearn_removed_descendants_total"), below);

  // A restart replays the same removals to the same view.
  server_.reset();
  Start();
  EXPECT_EQ(ResidentBlocks(), engine.held().size());
  // The policy was told of every block that left (else it would name one
  // the pool no longer holds, an Internal error): a drain gives exactly the
  // engine's set.
  EXPECT_EQ(Drained(), engine.held());
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const char* policy : {"lru", "s3fifo", "arc", "gdsf"}) {
    for (uint32_t seed : {1u, 2u, 3u}) out.push_back({policy, Order::kRandom, seed});
    out.push_back({policy, Order::kParentsFirst, 4});
    out.push_back({policy, Order::kLeavesFirst, 5});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Orders, RemovalOrderTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace kvlearn
