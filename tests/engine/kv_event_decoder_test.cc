// DecodeKvEventBatch on payloads built by hand (tests/engine/msgpack_builder.h)
// in the shapes the engines send; expected values are worked out by hand.
#include "engine/kv_event_decoder.h"

#include <cstdint>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/msgpack_builder.h"

namespace kvlearn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const BlockStoredEvent& Stored(const EngineEventBatch& b, size_t i) {
  return std::get<BlockStoredEvent>(b.events.at(i));
}
const BlockRemovedEvent& Removed(const EngineEventBatch& b, size_t i) {
  return std::get<BlockRemovedEvent>(b.events.at(i));
}

// 24 bytes of 0xAA, then 01 02 .. 08: a 32-byte hash whose uint64 is 0x0102030405060708.
std::string Sha256Like() {
  std::string b(24, static_cast<char>(0xAA));
  for (int i = 1; i <= 8; ++i) b.push_back(static_cast<char>(i));
  return b;
}

// SGLang and vLLM before map events: array batch, tag-first array events.
TEST(KvEventDecoderTest, ArrayBatchOfArrayEvents) {
  MsgpackBuilder m;
  m.Array(2).Double(1.5).Array(3);
  m.Array(6).Str("BlockStored").Array(2).Uint(10).Uint(11).Nil().Tokens(8).Uint(4).Nil();
  m.Array(2).Str("BlockRemoved").Array(1).Uint(9);
  m.Array(1).Str("AllBlocksCleared");

  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, 1.5);
  EXPECT_FALSE(batch->data_parallel_rank.has_value());
  EXPECT_EQ(batch->unknown_events, 0u);
  ASSERT_EQ(batch->events.size(), 3u);

  const BlockStoredEvent& s = Stored(*batch, 0);
  EXPECT_THAT(s.block_hashes, ElementsAre(10u, 11u));
  EXPECT_FALSE(s.parent_block_hash.has_value());
  EXPECT_EQ(s.block_size, 4u);
  EXPECT_EQ(s.num_token_ids, 8u);
  EXPECT_EQ(s.tokens_per_block, 4u);
  EXPECT_EQ(s.medium, KvMedium::kUnspecified);  // this version has no medium field
  EXPECT_FALSE(s.lora_id.has_value());

  EXPECT_THAT(Removed(*batch, 1).block_hashes, ElementsAre(9u));
  EXPECT_EQ(Removed(*batch, 1).medium, KvMedium::kUnspecified);
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(batch->events[2]));
}

// vLLM with medium, and the batch's third element (data_parallel_rank / attn_dp_rank).
TEST(KvEventDecoderTest, ArrayEventsWithMediumLoraAndRank) {
  MsgpackBuilder m;
  m.Array(3).Double(2.0).Array(2);
  m.Array(7).Str("BlockStored").Array(1).Uint(7).Uint(5).Tokens(4).Uint(4).Uint(3).Str("GPU");
  m.Array(3).Str("BlockRemoved").Array(1).Uint(7).Str("cpu");
  m.Uint(1);

  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->data_parallel_rank, 1);
  const BlockStoredEvent& s = Stored(*batch, 0);
  EXPECT_THAT(s.block_hashes, ElementsAre(7u));
  EXPECT_EQ(s.parent_block_hash, 5u);
  EXPECT_EQ(s.lora_id, 3);
  EXPECT_EQ(s.medium, KvMedium::kGpu);
  EXPECT_EQ(Removed(*batch, 1).medium, KvMedium::kCpu);
}

// Current vLLM: map-tagged events with sha256 byte hashes and the newer fields.
TEST(KvEventDecoderTest, MapBatchOfMapEventsWithByteHashes) {
  MsgpackBuilder m;
  m.Map(3).Str("ts").Double(3.25).Str("events").Array(1);
  m.Map(12);
  m.Str("type").Str("BlockStored");
  m.Str("block_hashes").Array(2).Bin(Sha256Like()).Bin({0x01, 0x02});
  m.Str("parent_block_hash").Bin({0xFF, 0, 0, 0, 0, 0, 0, 0, 0x2A});  // 9 bytes: last 8 -> 42
  m.Str("token_ids").Tokens(32);
  m.Str("block_size").Uint(16);
  m.Str("lora_id").Nil();
  m.Str("medium").Str("GPU");
  m.Str("lora_name").Nil();
  m.Str("extra_keys").Array(2).Array(2).Str("mm-hash").Uint(3).Nil();
  m.Str("group_idx").Uint(0);
  m.Str("kv_cache_spec_kind").Str("full_attention");
  m.Str("locality").Str("LOCAL");
  m.Str("data_parallel_rank").Uint(0);

  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, 3.25);
  EXPECT_EQ(batch->data_parallel_rank, 0);
  const BlockStoredEvent& s = Stored(*batch, 0);
  EXPECT_THAT(s.block_hashes, ElementsAre(0x0102030405060708u, 0x0102u));
  EXPECT_EQ(s.parent_block_hash, 42u);
  EXPECT_EQ(s.block_size, 16u);
  EXPECT_EQ(s.num_token_ids, 32u);
  EXPECT_EQ(s.tokens_per_block, 16u);
  EXPECT_EQ(s.medium, KvMedium::kGpu);
  EXPECT_EQ(s.group_idx, 0);
}

// vLLM forks tracking main: array batch, map events.
TEST(KvEventDecoderTest, ArrayBatchOfMapEvents) {
  MsgpackBuilder m;
  m.Array(3).Double(4.0).Array(2);
  m.Map(4).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Uint(1);
  m.Str("medium").Str("DISK").Str("group_idx").Uint(2);
  m.Map(1).Str("type").Str("AllBlocksCleared");
  m.Uint(3);

  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->data_parallel_rank, 3);
  EXPECT_THAT(Removed(*batch, 0).block_hashes, ElementsAre(1u));
  EXPECT_EQ(Removed(*batch, 0).medium, KvMedium::kDisk);
  EXPECT_EQ(Removed(*batch, 0).group_idx, 2);
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(batch->events[1]));
}

// Python's builtin hash() is signed: -1 and -2 are the top two uint64 values.
TEST(KvEventDecoderTest, NegativeIntegerHashesKeepTheirBits) {
  MsgpackBuilder m;
  m.Array(2).Double(0).Array(1);
  m.Array(5).Str("BlockStored").Array(1).Int(-1).Int(-2).Tokens(2).Uint(2);
  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(Stored(*batch, 0).block_hashes, ElementsAre(0xFFFFFFFFFFFFFFFFu));
  EXPECT_EQ(Stored(*batch, 0).parent_block_hash, 0xFFFFFFFFFFFFFFFEu);
}

TEST(KvEventDecoderTest, TokensPerBlockFromTokenIdsWhenBlockSizeIsZero) {
  MsgpackBuilder m;
  m.Array(2).Uint(7).Array(1);  // an integer ts is accepted
  m.Array(5).Str("BlockStored").Array(3).Uint(1).Uint(2).Uint(3).Nil().Tokens(30).Uint(0);
  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ts, 7.0);
  EXPECT_EQ(Stored(*batch, 0).block_size, 0u);
  EXPECT_EQ(Stored(*batch, 0).tokens_per_block, 10u);
}

TEST(KvEventDecoderTest, UnknownTagsAreSkippedAndCounted) {
  MsgpackBuilder m;
  m.Array(2).Double(1).Array(4);
  m.Array(3).Str("BlockPinned").Array(1).Uint(1).Uint(2);
  m.Array(2).Str("BlockRemoved").Array(1).Uint(5);
  m.Map(2).Str("type").Str("CacheResized").Str("blocks").Uint(10);
  m.Array(1).Str("AllBlocksCleared");
  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->unknown_events, 2u);
  ASSERT_EQ(batch->events.size(), 2u);
  EXPECT_THAT(Removed(*batch, 0).block_hashes, ElementsAre(5u));
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(batch->events[1]));
}

TEST(KvEventDecoderTest, UnknownExtraFieldsAreIgnored) {
  MsgpackBuilder m;
  // A map batch with a field from the future, holding a nested value.
  m.Map(3).Str("ts").Double(1).Str("schema").Map(1).Str("v").Array(2).Uint(1).Uint(2);
  m.Str("events").Array(2);
  // Array event with three fields past medium.
  m.Array(10).Str("BlockStored").Array(1).Uint(3).Nil().Tokens(4).Uint(4).Nil().Str("GPU");
  m.Str("lora").Array(1).Nil().Double(0.5);
  // Map event with unknown keys, one of them not even a string.
  m.Map(4).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Uint(3);
  m.Str("source_node").Str("d1").Uint(99).Bool(true);
  const auto batch = DecodeKvEventBatch(m.bytes());
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->events.size(), 2u);
  EXPECT_THAT(Stored(*batch, 0).block_hashes, ElementsAre(3u));
  EXPECT_EQ(Stored(*batch, 0).medium, KvMedium::kGpu);
  EXPECT_THAT(Removed(*batch, 1).block_hashes, ElementsAre(3u));
}

TEST(KvEventDecoderTest, MediumNames) {
  const std::vector<std::pair<std::string, KvMedium>> cases = {
      {"GPU", KvMedium::kGpu},      {"gpu", KvMedium::kGpu},   {"CPU", KvMedium::kCpu},
      {"DISK", KvMedium::kDisk},    {"disk", KvMedium::kDisk}, {"STORAGE", KvMedium::kDisk},
      {"LMCache", KvMedium::kOther}};
  for (const auto& [name, want] : cases) {
    MsgpackBuilder m;
    m.Array(2).Double(0).Array(1).Array(3).Str("BlockRemoved").Array(0).Str(name);
    const auto batch = DecodeKvEventBatch(m.bytes());
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(Removed(*batch, 0).medium, want) << name;
    EXPECT_EQ(Removed(*batch, 0).medium_name, want == KvMedium::kOther ? name : "") << name;
  }
}

struct BadPayload {
  std::string name;
  std::string bytes;
  std::string message;  // a substring of the error
};

// One BlockStored array event inside an array batch, fields given by `fill`.
template <typename Fill>
std::string OneArrayEvent(Fill fill) {
  MsgpackBuilder m;
  m.Array(2).Double(0).Array(1);
  fill(m);
  return m.bytes();
}

std::vector<BadPayload> BadPayloads() {
  std::vector<BadPayload> v;
  v.push_back({"hashes not an array", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Str("x").Nil().Tokens(1).Uint(1);
               }),
               "events[0].block_hashes: expected an array, got a string"});
  v.push_back({"hash a float", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(2).Uint(1).Double(2.5).Nil().Tokens(1).Uint(1);
               }),
               "events[0].block_hashes[1]: expected an integer or bytes, got a float"});
  v.push_back({"empty byte hash", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(1).Bin("").Nil().Tokens(1).Uint(1);
               }),
               "events[0].block_hashes[0]: empty byte-string hash"});
  v.push_back({"parent a string", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(1).Uint(1).Str("p").Tokens(1).Uint(1);
               }),
               "events[0].parent_block_hash: expected an integer or bytes, got a string"});
  v.push_back({"token_ids a map", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(1).Uint(1).Nil().Map(0).Uint(1);
               }),
               "events[0].token_ids: expected an array, got a map"});
  v.push_back({"negative block size", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(1).Uint(1).Nil().Tokens(1).Int(-16);
               }),
               "events[0].block_size: negative block size"});
  v.push_back({"huge block size", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(5).Str("BlockStored").Array(1).Uint(1).Nil().Tokens(1).Uint(1u << 30);
               }),
               "events[0].block_size: block size 1073741824 above"});
  v.push_back({"medium an integer", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(3).Str("BlockRemoved").Array(0).Uint(1);
               }),
               "events[0].medium: expected a string or nil, got an integer"});
  v.push_back({"lora_id a string", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(6).Str("BlockStored").Array(0).Nil().Tokens(0).Uint(1).Str("x");
               }),
               "events[0].lora_id: expected an integer or nil, got a string"});
  v.push_back({"short stored array", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Array(3).Str("BlockStored").Array(0).Nil();
               }),
               "events[0]: BlockStored array has 2 fields, needs at least 4"});
  v.push_back({"removed without hashes",
               OneArrayEvent([](MsgpackBuilder& m) { m.Array(1).Str("BlockRemoved"); }),
               "events[0].block_hashes: missing"});
  v.push_back({"empty event array", OneArrayEvent([](MsgpackBuilder& m) { m.Array(0); }),
               "events[0]: empty array (no tag)"});
  v.push_back({"tag an integer",
               OneArrayEvent([](MsgpackBuilder& m) { m.Array(2).Uint(0).Array(0); }),
               "events[0].tag: expected a string, got an integer"});
  v.push_back({"event an integer", OneArrayEvent([](MsgpackBuilder& m) { m.Uint(4); }),
               "events[0]: expected an array or a map, got an integer"});
  v.push_back({"map event without type",
               OneArrayEvent([](MsgpackBuilder& m) { m.Map(1).Str("block_hashes").Array(0); }),
               "events[0].type: missing"});
  v.push_back({"map type not a string",
               OneArrayEvent([](MsgpackBuilder& m) { m.Map(1).Str("type").Uint(1); }),
               "events[0].type: expected a string, got an integer"});
  v.push_back({"map stored without token_ids", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Map(3).Str("type").Str("BlockStored").Str("block_hashes").Array(0);
                 m.Str("block_size").Uint(16);
               }),
               "events[0].token_ids: missing"});
  v.push_back({"map stored without block_size", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Map(3).Str("type").Str("BlockStored").Str("block_hashes").Array(0);
                 m.Str("token_ids").Array(0);
               }),
               "events[0].block_size: missing"});
  v.push_back({"map removed without hashes", OneArrayEvent([](MsgpackBuilder& m) {
                 m.Map(2).Str("type").Str("BlockRemoved").Str("medium").Nil();
               }),
               "events[0].block_hashes: missing"});
  {
    MsgpackBuilder m;
    m.Array(2).Str("now").Array(0);
    v.push_back({"ts a string", m.bytes(), "ts: expected a number, got a string"});
  }
  {
    MsgpackBuilder m;
    m.Array(2).Double(0).Map(0);
    v.push_back({"events a map", m.bytes(), "events: expected an array, got a map"});
  }
  {
    MsgpackBuilder m;
    m.Array(1).Double(0);
    v.push_back({"batch too short", m.bytes(), "payload: batch array has 1 elements"});
  }
  {
    MsgpackBuilder m;
    m.Uint(3);
    v.push_back({"batch an integer", m.bytes(), "payload: expected a batch (array or map)"});
  }
  {
    MsgpackBuilder m;
    m.Map(1).Str("ts").Double(0);
    v.push_back({"map batch without events", m.bytes(), "events: missing"});
  }
  {
    MsgpackBuilder m;
    m.Map(1).Str("events").Array(0);
    v.push_back({"map batch without ts", m.bytes(), "ts: missing"});
  }
  {
    MsgpackBuilder m;
    m.Array(3).Double(0).Array(0).Str("r0");
    v.push_back({"rank a string", m.bytes(),
                 "data_parallel_rank: expected an integer or nil, got a string"});
  }
  {
    MsgpackBuilder m;
    m.Array(2).Double(0).Array(0).Uint(1);
    v.push_back({"trailing bytes", m.bytes(), "payload: 1 trailing bytes after the batch"});
  }
  v.push_back({"empty payload", "", "payload: empty"});
  v.push_back({"reserved type byte", "\xc1", "payload: not msgpack"});
  return v;
}

TEST(KvEventDecoderTest, ErrorsNameTheField) {
  for (const BadPayload& bad : BadPayloads()) {
    const auto batch = DecodeKvEventBatch(bad.bytes);
    ASSERT_FALSE(batch.ok()) << bad.name;
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_THAT(batch.status().message(), HasSubstr(bad.message)) << bad.name;
  }
}

std::string FullMapPayload() {
  MsgpackBuilder m;
  m.Map(3).Str("ts").Double(3.25).Str("events").Array(2);
  m.Map(7).Str("type").Str("BlockStored");
  m.Str("block_hashes").Array(2).Bin(Sha256Like()).Uint(12);
  m.Str("parent_block_hash").Nil().Str("token_ids").Tokens(16).Str("block_size").Uint(8);
  m.Str("lora_id").Nil().Str("medium").Str("GPU");
  m.Array(3).Str("BlockRemoved").Array(1).Int(-5).Nil();
  m.Str("data_parallel_rank").Uint(0);
  return m.bytes();
}

TEST(KvEventDecoderTest, EveryTruncationFailsCleanly) {
  const std::string full = FullMapPayload();
  ASSERT_TRUE(DecodeKvEventBatch(full).ok());
  for (size_t n = 1; n < full.size(); ++n) {
    const auto batch = DecodeKvEventBatch(std::string_view(full).substr(0, n));
    ASSERT_FALSE(batch.ok()) << n;
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(batch.status().message(), HasSubstr("truncated")) << n;
  }
}

TEST(KvEventDecoderTest, HugeDeclaredLengthsAreRefusedBeforeAllocating) {
  // array32 / map32 claiming 2^32-1 elements, followed by a few bytes.
  for (const std::string& header :
       {std::string("\xdd\xff\xff\xff\xff", 5), std::string("\xdf\xff\xff\xff\xff", 5)}) {
    const auto batch = DecodeKvEventBatch(header + std::string(16, '\0'));
    ASSERT_FALSE(batch.ok());
    EXPECT_THAT(batch.status().message(), HasSubstr("declare more elements"));
  }
  // Containers that fit one by one but not together: 50 arrays of 40 inside 250 bytes.
  MsgpackBuilder m;
  m.Array(50);
  for (int i = 0; i < 50; ++i) m.Raw(std::string("\xdc\x00\x28", 3));  // array16 of 40
  const auto nested = DecodeKvEventBatch(m.bytes());
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().message(), HasSubstr("declare more elements"));
  // str32 / bin32 lengths past the end.
  for (const std::string& header :
       {std::string("\xdb\xff\xff\xff\xff", 5), std::string("\xc6\xff\xff\xff\xff", 5)}) {
    const auto batch = DecodeKvEventBatch(header + "abc");
    ASSERT_FALSE(batch.ok());
    EXPECT_THAT(batch.status().message(), HasSubstr("truncated payload"));
  }
}

TEST(KvEventDecoderTest, DeepNestingIsRefused) {
  // 100000 one-element arrays around a nil.
  const std::string deep = std::string(100000, '\x91') + "\xc0";
  const auto batch = DecodeKvEventBatch(deep);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("nesting deeper than 32"));

  // Nesting within the limit inside an ignored field is fine.
  MsgpackBuilder m;
  m.Map(3).Str("ts").Double(0).Str("events").Array(0).Str("future");
  m.Raw(std::string(20, '\x91')).Nil();
  EXPECT_TRUE(DecodeKvEventBatch(m.bytes()).ok());
}

TEST(KvEventDecoderTest, PayloadSizeLimit) {
  const std::string full = FullMapPayload();
  KvEventDecodeOptions options;
  options.max_payload_bytes = full.size() - 1;
  const auto batch = DecodeKvEventBatch(full, options);
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kResourceExhausted);
}

// Random bytes and random mutations of a valid payload: any result, no crash.
TEST(KvEventDecoderTest, GarbageNeverCrashes) {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    (void)DecodeKvEventBatch(bytes);
  }
  const std::string full = FullMapPayload();
  int still_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    still_ok += DecodeKvEventBatch(bytes).ok() ? 1 : 0;
  }
  // Some mutations land on token values or hash bytes and still decode.
  EXPECT_GT(still_ok, 0);
}

}  // namespace
}  // namespace kvlearn
