// EncodeKvEventBatch: what DecodeKvEventBatch reads back, in both encodings
// and both hash types, and the exact bytes of the small cases.
#include "engine/kv_event_encoder.h"

#include <cstdint>
#include <string>

#include "engine/kv_event_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/msgpack_builder.h"

namespace kvlearn {
namespace {

EngineEventBatch AllKinds() {
  EngineEventBatch batch;
  batch.ts = 12.5;
  batch.data_parallel_rank = 2;
  BlockStoredEvent stored;
  stored.block_hashes = {1, 0xFFFFFFFFFFFFFFF0u, 42};  // one above INT64_MAX
  stored.parent_block_hash = 0x8000000000000000u;
  stored.block_size = 16;
  stored.num_token_ids = 48;
  stored.tokens_per_block = 16;
  stored.medium = KvMedium::kGpu;
  stored.lora_id = 7;
  batch.events.push_back(stored);
  BlockRemovedEvent removed;
  removed.block_hashes = {42};
  removed.medium = KvMedium::kOther;
  removed.medium_name = "LMCache";
  batch.events.push_back(removed);
  batch.events.push_back(AllBlocksClearedEvent{});
  BlockStoredEvent root;
  root.block_hashes = {9};
  root.block_size = 16;
  root.num_token_ids = 5;
  root.tokens_per_block = 16;
  batch.events.push_back(root);
  return batch;
}

class KvEventEncoderRoundTrip
    : public ::testing::TestWithParam<std::tuple<KvEventEncoding, KvHashEncoding>> {};

TEST_P(KvEventEncoderRoundTrip, DecodesToTheSameBatch) {
  const auto [encoding, hashes] = GetParam();
  const EngineEventBatch batch = AllKinds();
  const std::string bytes = EncodeKvEventBatch(batch, {encoding, hashes});
  const auto decoded = DecodeKvEventBatch(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, batch);
}

TEST_P(KvEventEncoderRoundTrip, GroupIdxSurvivesInMaps) {
  const auto [encoding, hashes] = GetParam();
  EngineEventBatch batch;
  BlockRemovedEvent removed;
  removed.block_hashes = {3};
  removed.group_idx = 1;
  batch.events.push_back(removed);
  const auto decoded = DecodeKvEventBatch(EncodeKvEventBatch(batch, {encoding, hashes}));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  // The array form has no position for group_idx (no version sends it there).
  const std::optional<int64_t> want =
      encoding == KvEventEncoding::kMap ? std::optional<int64_t>(1) : std::nullopt;
  EXPECT_EQ(std::get<BlockRemovedEvent>(decoded->events.at(0)).group_idx, want);
}

INSTANTIATE_TEST_SUITE_P(
    AllForms, KvEventEncoderRoundTrip,
    ::testing::Combine(::testing::Values(KvEventEncoding::kArray, KvEventEncoding::kMap),
                       ::testing::Values(KvHashEncoding::kInt, KvHashEncoding::kBytes)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == KvEventEncoding::kMap ? "Map" : "Array") +
             (std::get<1>(info.param) == KvHashEncoding::kBytes ? "BytesHashes" : "IntHashes");
    });

TEST(KvEventEncoderTest, ArrayBytesAreWhatAnEngineSends) {
  EngineEventBatch batch;
  batch.ts = 1.5;
  BlockRemovedEvent removed;
  removed.block_hashes = {5};
  removed.medium = KvMedium::kGpu;
  batch.events.push_back(removed);
  MsgpackBuilder want;
  want.Array(2).Double(1.5).Array(1).Array(3).Str("BlockRemoved").Array(1).Uint(5).Str("GPU");
  EXPECT_EQ(EncodeKvEventBatch(batch, {KvEventEncoding::kArray, KvHashEncoding::kInt}),
            want.bytes());
}

TEST(KvEventEncoderTest, MapBytesAreWhatAnEngineSends) {
  EngineEventBatch batch;
  batch.ts = 2;  // still a float64 on the wire, as msgspec writes it
  batch.events.push_back(AllBlocksClearedEvent{});
  MsgpackBuilder want;
  want.Map(2).Str("ts").Double(2).Str("events").Array(1);
  want.Map(1).Str("type").Str("AllBlocksCleared");
  EXPECT_EQ(EncodeKvEventBatch(batch, {KvEventEncoding::kMap, KvHashEncoding::kInt}), want.bytes());
}

TEST(KvEventEncoderTest, ByteHashesEndWithTheValueBigEndian) {
  const std::string b = HashToBytes(0x0102030405060708u);
  ASSERT_EQ(b.size(), 32u);
  EXPECT_EQ(b.substr(24), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(
      HashFromBytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size())),
      0x0102030405060708u);
  // Different hashes get different fillers.
  EXPECT_NE(HashToBytes(1).substr(0, 24), HashToBytes(2).substr(0, 24));
}

}  // namespace
}  // namespace kvlearn
