// BlockIdIndex against a std::unordered_map reference: random ids appended
// one by one through several doublings, a reserved rebuild like a
// compaction's, ids that collide in their bucket, and absent ids.
#include "core/block_id_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/block_catalog.h"
#include "core/splitmix64.h"

namespace kvlearn {
namespace {

struct Ids {
  std::vector<uint64_t> ids;
  uint64_t operator()(BlockIndex b) const { return ids[b]; }
};

// Every id in `ref` maps to its block; `absent` ids map to kNoBlock.
void ExpectSame(const BlockIdIndex& index, const Ids& ids,
                const std::unordered_map<uint64_t, BlockIndex>& ref,
                const std::vector<uint64_t>& absent) {
  ASSERT_EQ(index.size(), ref.size());
  for (const auto& [id, b] : ref) ASSERT_EQ(index.Find(id, ids), b) << id;
  for (uint64_t id : absent) {
    if (!ref.contains(id)) {
      ASSERT_EQ(index.Find(id, ids), kNoBlock) << id;
    }
  }
}

TEST(BlockIdIndexTest, EmptyFindsNothing) {
  BlockIdIndex index;
  Ids ids;
  EXPECT_EQ(index.Find(0, ids), kNoBlock);
  EXPECT_EQ(index.Find(UINT64_MAX, ids), kNoBlock);
  EXPECT_EQ(index.bucket_count(), 0u);
}

TEST(BlockIdIndexTest, RandomAppendsMatchAnUnorderedMapThroughGrowth) {
  uint64_t rng = 42;
  Ids ids;
  BlockIdIndex index;
  std::unordered_map<uint64_t, BlockIndex> ref;
  std::vector<uint64_t> absent;
  for (int i = 0; i < 1000; ++i) absent.push_back(SplitMix64(rng));
  size_t doublings = 0;
  for (BlockIndex b = 0; b < 50'000; ++b) {
    uint64_t id = SplitMix64(rng);
    if (b % 7 == 0) id = b;  // small dense ids too, as tests and benches send
    if (ref.contains(id)) continue;
    const size_t buckets = index.bucket_count();
    ids.ids.push_back(id);
    index.Append(ids);
    ref.emplace(id, static_cast<BlockIndex>(ids.ids.size() - 1));
    if (index.bucket_count() != buckets) {
      ++doublings;
      ExpectSame(index, ids, ref, absent);  // right after each rehash
    }
  }
  ExpectSame(index, ids, ref, absent);
  // 1 bucket at first, then doublings up to at least 50,000 / (12 * 7/8).
  EXPECT_GE(doublings, 13u);
  // At most 7/8 of the slots are used, and never fewer than 7/16 after a
  // doubling (4.5 to 9.1 bytes of buckets per block, two 64-byte lines for
  // 21 blocks at most).
  const double slots = static_cast<double>(index.bucket_count() * BlockIdIndex::kSlots);
  EXPECT_LE(static_cast<double>(index.size()), slots * 7 / 8);
  EXPECT_GT(static_cast<double>(index.size()), slots * 7 / 16);
}

TEST(BlockIdIndexTest, AReservedRebuildNeverRehashesAndFindsEverything) {
  // A compaction keeps a subset of the old blocks, renumbered in order, and
  // reserves its exact size first.
  uint64_t rng = 7;
  Ids old_ids;
  for (int i = 0; i < 30'000; ++i) old_ids.ids.push_back(SplitMix64(rng));
  Ids kept;
  for (size_t i = 0; i < old_ids.ids.size(); i += 3) kept.ids.push_back(old_ids.ids[i]);
  BlockIdIndex index;
  Ids growing;  // ids appended so far, as a catalog's blocks_
  index.Reserve(kept.ids.size(), growing);
  const size_t buckets = index.bucket_count();
  std::unordered_map<uint64_t, BlockIndex> ref;
  for (uint64_t id : kept.ids) {
    growing.ids.push_back(id);
    index.Append(growing);
    ref.emplace(id, static_cast<BlockIndex>(growing.ids.size() - 1));
  }
  EXPECT_EQ(index.bucket_count(), buckets);
  // The forgotten ids are absent.
  std::vector<uint64_t> forgotten;
  for (size_t i = 1; i < old_ids.ids.size(); i += 3) forgotten.push_back(old_ids.ids[i]);
  ExpectSame(index, growing, ref, forgotten);
  // Reserving for more after appends rehashes and keeps every block.
  index.Reserve(4 * kept.ids.size(), growing);
  EXPECT_GT(index.bucket_count(), buckets);
  ExpectSame(index, growing, ref, forgotten);
}

TEST(BlockIdIndexTest, FullBucketsSpillOverAndStillFindEveryId) {
  // Ids that land in the same bucket of a 2-bucket table (same low hash
  // bit): more than 12 of them must spill into the other bucket. With one
  // growth step avoided by reserving, the table stays at 2 buckets.
  BlockIdIndex index;
  Ids ids;
  index.Reserve(21, ids);  // 21 = 2 buckets * 12 * 7/8
  ASSERT_EQ(index.bucket_count(), 2u);
  std::unordered_map<uint64_t, BlockIndex> ref;
  const size_t low_bit = absl::Hash<uint64_t>{}(0) & 1;
  for (uint64_t id = 0; ids.ids.size() < 21; ++id) {
    if (ids.ids.size() < 15 && (absl::Hash<uint64_t>{}(id)&1) != low_bit) continue;
    ids.ids.push_back(id);
    index.Append(ids);
    ref.emplace(id, static_cast<BlockIndex>(ids.ids.size() - 1));
  }
  ASSERT_EQ(index.bucket_count(), 2u);
  std::vector<uint64_t> absent;
  for (uint64_t id = 0; id < 1000; ++id) absent.push_back(id);
  ExpectSame(index, ids, ref, absent);
}

TEST(BlockIdIndexTest, TheCatalogFindsWhatItAddedAndNothingElse) {
  BlockCatalog catalog;
  std::unordered_map<uint64_t, BlockIndex> ref;
  uint64_t rng = 3;
  for (int i = 0; i < 5'000; ++i) {
    const uint64_t id = SplitMix64(rng);
    ref.emplace(id, catalog.Add({.hash_id = id, .tokens = 16}));
  }
  for (const auto& [id, b] : ref) {
    ASSERT_EQ(catalog.Find(id), b);
    ASSERT_EQ(catalog[b].hash_id, id);
  }
  for (int i = 0; i < 5'000; ++i) {
    const uint64_t id = SplitMix64(rng);
    if (!ref.contains(id)) {
      ASSERT_EQ(catalog.Find(id), kNoBlock);
    }
  }
  // A copy moved into place (as a compaction's rebuild does) still finds them.
  BlockCatalog moved = std::move(catalog);
  for (const auto& [id, b] : ref) ASSERT_EQ(moved.Find(id), b);
}

TEST(BlockIdIndexTest, FindAllAnswersAsFindDoesIdByIdIncludingAbsentAndRepeatedIds) {
  BlockCatalog catalog;
  std::vector<uint64_t> ids;
  std::vector<BlockIndex> out(3);
  catalog.FindAll(std::vector<uint64_t>{1, 2, 3}, out);  // an empty catalog finds nothing
  EXPECT_EQ(out, std::vector<BlockIndex>(3, kNoBlock));
  uint64_t rng = 11;
  for (int i = 0; i < 3'000; ++i) catalog.Add({.hash_id = SplitMix64(rng), .tokens = 16});
  for (int i = 0; i < 3'000; ++i) {
    // Present (some twice), then never added.
    ids.push_back(catalog[static_cast<BlockIndex>((i * 7919) % 3'000)].hash_id);
    if (i % 3 == 0) ids.push_back(SplitMix64(rng));
  }
  out.assign(ids.size(), 0);
  catalog.FindAll(ids, out);
  size_t absent = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(out[i], catalog.Find(ids[i])) << i;
    absent += out[i] == kNoBlock;
  }
  EXPECT_EQ(absent, 1'000u);  // the ids never added, and only those
}

}  // namespace
}  // namespace kvlearn
