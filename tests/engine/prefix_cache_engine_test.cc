// PrefixCacheEngine on a sequence worked out by hand, then on the shipped
// trace against the properties an engine's events must keep.
#include "engine/prefix_cache_engine.h"

#include <cstdint>
#include <optional>
#include <set>
#include <variant>
#include <vector>

#include "datasets/mooncake_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvlearn {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";

struct Step {
  std::vector<uint64_t> removed;
  std::vector<uint64_t> stored;
  std::optional<uint64_t> parent;
};

// Flattens a batch into (removed, stored, parent), checking its shape:
// at most one BlockRemoved, then at most one BlockStored.
Step Summarize(const EngineEventBatch& batch) {
  Step s;
  for (size_t i = 0; i < batch.events.size(); ++i) {
    if (const auto* r = std::get_if<BlockRemovedEvent>(&batch.events[i])) {
      EXPECT_EQ(i, 0u);
      s.removed = r->block_hashes;
    } else if (const auto* st = std::get_if<BlockStoredEvent>(&batch.events[i])) {
      EXPECT_EQ(i, batch.events.size() - 1);
      s.stored = st->block_hashes;
      s.parent = st->parent_block_hash;
    } else {
      ADD_FAILURE() << "unexpected event";
    }
  }
  return s;
}

Step Serve(PrefixCacheEngine& engine, std::vector<uint64_t> chain) {
  return Summarize(engine.Serve(chain, 0, 0));
}

// Capacity 3. LRU order is written most recent first.
TEST(PrefixCacheEngineTest, HandWorkedSequence) {
  PrefixCacheEngine engine({.capacity_blocks = 3, .block_size = 4});

  // [1,2]: both computed. LRU: 1 2 (root touched last).
  Step s = Serve(engine, {1, 2});
  EXPECT_THAT(s.stored, ElementsAre(1u, 2u));
  EXPECT_FALSE(s.parent.has_value());
  EXPECT_THAT(s.removed, IsEmpty());

  // [1,3]: 1 hits, 3 computed under it. LRU: 1 3 2.
  s = Serve(engine, {1, 3});
  EXPECT_THAT(s.stored, ElementsAre(3u));
  EXPECT_EQ(s.parent, 1u);

  // [4]: full; the LRU end 2 is a leaf. LRU: 4 1 3.
  s = Serve(engine, {4});
  EXPECT_THAT(s.removed, ElementsAre(2u));
  EXPECT_THAT(s.stored, ElementsAre(4u));
  EXPECT_FALSE(s.parent.has_value());

  // [1,3,5]: 1 and 3 hit (pinned); 4 is the only unpinned leaf. LRU: 1 3 5.
  s = Serve(engine, {1, 3, 5});
  EXPECT_THAT(s.removed, ElementsAre(4u));
  EXPECT_THAT(s.stored, ElementsAre(5u));
  EXPECT_EQ(s.parent, 3u);

  // [6,7]: 5 goes for 6 (LRU 6 1 3), then 3 for 7. Resident 1 6 7.
  s = Serve(engine, {6, 7});
  EXPECT_THAT(s.removed, ElementsAre(5u, 3u));
  EXPECT_THAT(s.stored, ElementsAre(6u, 7u));
  EXPECT_THAT(engine.ResidentBlocks(), ElementsAre(1u, 6u, 7u));

  // [8,9,10,11]: LRU 6 7 1. 1 goes for 8, 7 for 9, 6 for 10; then only
  // blocks of this request are left, so 11 is not cached.
  s = Serve(engine, {8, 9, 10, 11});
  EXPECT_THAT(s.removed, ElementsAre(1u, 7u, 6u));
  EXPECT_THAT(s.stored, ElementsAre(8u, 9u, 10u));
  EXPECT_THAT(engine.ResidentBlocks(), ElementsAre(8u, 9u, 10u));

  // A full hit changes nothing.
  EXPECT_TRUE(engine.Serve(std::vector<uint64_t>{8, 9}, 0, 0).events.empty());

  EXPECT_EQ(engine.stats().requests, 7u);
  EXPECT_EQ(engine.stats().hit_blocks, 1u + 2u + 2u);
  EXPECT_EQ(engine.stats().stored_blocks, 2u + 1u + 1u + 1u + 2u + 3u);
  EXPECT_EQ(engine.stats().evicted_blocks, 1u + 1u + 2u + 3u);
  EXPECT_EQ(engine.stats().uncached_blocks, 1u);
  EXPECT_EQ(engine.stats().conflicts, 0u);
}

TEST(PrefixCacheEngineTest, TokenCountsFollowInputLength) {
  PrefixCacheEngine engine({.capacity_blocks = 8, .block_size = 512});
  // 1100 tokens: 512 + 512 + 76.
  const EngineEventBatch batch = engine.Serve(std::vector<uint64_t>{1, 2, 3}, 1100, 2.5);
  EXPECT_EQ(batch.ts, 2.5);
  const auto& stored = std::get<BlockStoredEvent>(batch.events.at(0));
  EXPECT_EQ(stored.num_token_ids, 1100u);
  EXPECT_EQ(stored.block_size, 512u);
  EXPECT_EQ(stored.medium, KvMedium::kGpu);
}

TEST(PrefixCacheEngineTest, ConflictingChainStopsCaching) {
  PrefixCacheEngine engine({.capacity_blocks = 8, .block_size = 4});
  Serve(engine, {1, 2});
  // 2 again, but under 5: not a prefix hash any more.
  const Step s = Serve(engine, {5, 2, 3});
  EXPECT_THAT(s.stored, ElementsAre(5u));
  EXPECT_EQ(engine.stats().conflicts, 1u);
}

TEST(PrefixCacheEngineTest, ClearEmptiesTheCache) {
  PrefixCacheEngine engine({.capacity_blocks = 8, .block_size = 4});
  Serve(engine, {1, 2});
  const EngineEventBatch batch = engine.Clear(1.0);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(batch.events[0]));
  EXPECT_THAT(engine.ResidentBlocks(), IsEmpty());
  EXPECT_THAT(Serve(engine, {1}).stored, ElementsAre(1u));
}

// On the shipped trace: capacity is never exceeded, only leaves are removed,
// every stored block's parent is resident, and applying the events to a set
// gives the engine's resident set.
TEST(PrefixCacheEngineTest, ShippedTraceEventsKeepATree) {
  const auto trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  PrefixCacheEngine engine({.capacity_blocks = 500, .block_size = 512});
  std::set<uint64_t> resident;
  std::map<uint64_t, std::optional<uint64_t>> parent;
  std::map<uint64_t, int> children;
  const size_t n = std::min<size_t>(trace->requests.size(), 3000);
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace->requests[i];
    const EngineEventBatch batch = engine.Serve(trace->BlocksOf(r), r.input_length, 0);
    for (const EngineEvent& event : batch.events) {
      if (const auto* removed = std::get_if<BlockRemovedEvent>(&event)) {
        for (const uint64_t id : removed->block_hashes) {
          ASSERT_TRUE(resident.contains(id)) << id;
          ASSERT_EQ(children[id], 0) << "removed a block with a cached child: " << id;
          if (parent[id].has_value()) --children[*parent[id]];
          resident.erase(id);
        }
      } else if (const auto* stored = std::get_if<BlockStoredEvent>(&event)) {
        std::optional<uint64_t> p = stored->parent_block_hash;
        for (const uint64_t id : stored->block_hashes) {
          if (p.has_value()) {
            ASSERT_TRUE(resident.contains(*p)) << "parent not resident: " << *p;
            ++children[*p];
          }
          ASSERT_TRUE(resident.insert(id).second) << id;
          parent[id] = p;
          children[id] = 0;
          p = id;
        }
      }
    }
    ASSERT_LE(resident.size(), 500u);
  }
  const std::vector<uint64_t> want = engine.ResidentBlocks();
  EXPECT_EQ(std::vector<uint64_t>(resident.begin(), resident.end()), want);
  EXPECT_GT(engine.stats().evicted_blocks, 0u);
  EXPECT_GT(engine.stats().hit_blocks, 0u);
  EXPECT_EQ(engine.stats().conflicts, 0u);
}

}  // namespace
}  // namespace kvlearn
