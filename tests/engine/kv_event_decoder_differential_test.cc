// The skipping decoder (engine/kv_event_decoder.h) against the msgpack-cxx
// decoder it replaced (msgpack_cxx_kv_event_decoder.h) on generated
// payloads: both wire forms at both levels, chosen per batch and per event,
// random key orders, unknown fields of random shape, repeated keys, every
// integer width, integer and byte-string hashes, unknown tags. On valid
// payloads both must give the same batch; on mutated and truncated ones the
// same status, message included.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kv_event_decoder.h"
#include "gtest/gtest.h"
#include "tests/engine/msgpack_builder.h"
#include "tests/engine/msgpack_cxx_kv_event_decoder.h"

namespace kvlearn {
namespace {

class PayloadGenerator {
 public:
  explicit PayloadGenerator(uint64_t seed) : rng_(seed) {}

  std::string Batch() {
    MsgpackBuilder m;
    const int events = Below(6);
    if (Coin()) {
      // [ts, events, rank?, extra...]
      const int extra = Below(4) == 0 ? 1 + Below(2) : 0;
      const bool rank = extra > 0 || Coin();
      m.Array(2 + (rank ? 1 : 0) + extra);
      Ts(m);
      Events(m, events);
      if (rank) OptionalInt(m);
      for (int i = 0; i < extra; ++i) Junk(m, 2);
    } else {
      std::vector<int> keys = {0, 1};                        // ts, events
      if (Coin()) keys.push_back(2);                         // a rank key
      for (int i = Below(3); i > 0; --i) keys.push_back(3);  // unknown
      if (Below(8) == 0) keys.push_back(Below(3));           // a key twice
      Shuffle(keys);
      m.Map(static_cast<uint32_t>(keys.size()));
      for (const int k : keys) {
        if (k == 0) {
          m.Str("ts");
          Ts(m);
        } else if (k == 1) {
          m.Str("events");
          Events(m, events);
        } else if (k == 2) {
          m.Str(Coin() ? "data_parallel_rank" : "attn_dp_rank");
          OptionalInt(m);
        } else {
          UnknownKey(m);
          Junk(m, 2);
        }
      }
    }
    return m.bytes();
  }

 private:
  int Below(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool Coin() { return rng_() & 1; }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    std::shuffle(v.begin(), v.end(), rng_);
  }

  // An integer in a random encoding wide enough for it.
  void AnyWidthUint(MsgpackBuilder& m, uint64_t v) {
    const int width = Below(4);
    if (v <= 0x7f && width == 0) {
      m.Uint(v);
    } else if (v <= 0xff && width <= 1) {
      Raw(m, 0xcc, v, 1);
    } else if (v <= 0xffff && width <= 2) {
      Raw(m, Coin() ? 0xcd : 0xd1, v, 2);  // int16 of a small non-negative value too
    } else if (v <= 0xffffffff && width <= 3) {
      Raw(m, 0xce, v, 4);
    } else {
      Raw(m, v > INT64_MAX || Coin() ? 0xcf : 0xd3, v, 8);
    }
  }
  static void Raw(MsgpackBuilder& m, uint8_t head, uint64_t v, int bytes) {
    std::string out(1, static_cast<char>(head));
    for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    m.Raw(out);
  }

  void Ts(MsgpackBuilder& m) {
    switch (Below(4)) {
      case 0:
        AnyWidthUint(m, rng_() % 2000000000);
        break;
      case 1: {
        const float f = static_cast<float>(rng_() % 100000) / 8;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        Raw(m, 0xca, bits, 4);
        break;
      }
      default:
        m.Double(1.7e9 + static_cast<double>(rng_() % 1000000) / 1000);
    }
  }

  void Hash(MsgpackBuilder& m) {
    switch (Below(3)) {
      case 0:
        AnyWidthUint(m, rng_() >> Below(64));
        break;
      case 1:
        m.Int(-1 - static_cast<int64_t>(rng_() >> (1 + Below(63))));
        break;
      default: {
        std::string b(1 + Below(40), '\0');
        for (char& c : b) c = static_cast<char>(rng_());
        m.Bin(b);
      }
    }
  }
  void Hashes(MsgpackBuilder& m) {
    const int n = Below(6);
    m.Array(n);
    for (int i = 0; i < n; ++i) Hash(m);
  }
  void Tokens(MsgpackBuilder& m) {
    const int n = Below(4) == 0 ? Below(600) : Below(40);
    m.Array(n);
    // Token ids below and above 128, 256, 65536 (Llama 3's vocabulary is 128256).
    const uint64_t vocab[] = {128, 256, 65536, 128256};
    const uint64_t top = vocab[Below(4)];
    for (int i = 0; i < n; ++i) AnyWidthUint(m, rng_() % top);
  }
  void OptionalInt(MsgpackBuilder& m) {
    if (Coin()) {
      m.Nil();
    } else if (Below(4) == 0) {
      m.Int(-static_cast<int64_t>(1 + Below(100)));
    } else {
      AnyWidthUint(m, Below(16));
    }
  }
  void Medium(MsgpackBuilder& m) {
    static const char* kNames[] = {"GPU", "cpu", "DISK", "STORAGE", "LMCache", "hbm"};
    if (Coin()) {
      m.Nil();
    } else {
      m.Str(kNames[Below(6)]);
    }
  }
  void UnknownKey(MsgpackBuilder& m) {
    static const char* kNames[] = {"lora_name", "extra_keys",  "kv_cache_spec_kind",
                                   "locality",  "source_node", "storage_tier"};
    if (Below(6) == 0) {
      AnyWidthUint(m, Below(100));  // a key that is not even a string
    } else {
      m.Str(kNames[Below(6)]);
    }
  }
  // Any value, nested up to `depth` more levels.
  void Junk(MsgpackBuilder& m, int depth) {
    switch (Below(depth > 0 ? 8 : 6)) {
      case 0:
        m.Nil();
        break;
      case 1:
        m.Bool(Coin());
        break;
      case 2:
        AnyWidthUint(m, rng_() >> Below(64));
        break;
      case 3:
        m.Str(std::string(Below(40), 'x'));
        break;
      case 4:
        m.Double(0.5);
        break;
      case 5:
        m.Raw(std::string("\xd4\x01\x02", 3));  // fixext 1
        break;
      case 6: {
        const int n = Below(4);
        m.Array(n);
        for (int i = 0; i < n; ++i) Junk(m, depth - 1);
        break;
      }
      default: {
        const int n = Below(3);
        m.Map(n);
        for (int i = 0; i < 2 * n; ++i) Junk(m, depth - 1);
      }
    }
  }

  void Events(MsgpackBuilder& m, int n) {
    m.Array(n);
    for (int i = 0; i < n; ++i) Event(m);
  }

  void Event(MsgpackBuilder& m) {
    static const char* kTags[] = {"BlockStored", "BlockStored", "BlockRemoved", "AllBlocksCleared",
                                  "BlockPinned"};
    const std::string tag = kTags[Below(5)];
    const bool stored = tag == "BlockStored", removed = tag == "BlockRemoved";
    if (Coin()) {
      // Tag first, then the fields in their order, maybe newer ones after.
      int fields = stored ? 4 + Below(3) : removed ? 1 + Below(2) : Below(2);
      const int extra = Below(4) == 0 ? 1 + Below(2) : 0;
      m.Array(1 + fields + extra).Str(tag);
      if (stored) {
        Hashes(m);
        if (Coin()) {
          m.Nil();
        } else {
          Hash(m);
        }
        Tokens(m);
        AnyWidthUint(m, Below(4) == 0 ? 0 : 16 * (1 + Below(32)));
        if (fields >= 5) OptionalInt(m);
        if (fields >= 6) Medium(m);
      } else if (removed) {
        Hashes(m);
        if (fields >= 2) Medium(m);
      } else {
        for (int f = 0; f < fields; ++f) Junk(m, 1);
      }
      for (int i = 0; i < extra; ++i) Junk(m, 2);
      return;
    }
    // A map: "type" first as msgspec writes it, or anywhere.
    std::vector<std::string> keys;
    if (stored) {
      keys = {"block_hashes", "parent_block_hash", "token_ids", "block_size"};
      for (const char* k : {"lora_id", "medium", "group_idx"}) {
        if (Coin()) keys.push_back(k);
      }
    } else if (removed) {
      keys = {"block_hashes"};
      for (const char* k : {"medium", "group_idx"}) {
        if (Coin()) keys.push_back(k);
      }
    }
    for (int i = Below(3); i > 0; --i) keys.push_back("?");
    if (Below(10) == 0) keys.push_back(keys.empty() ? "?" : keys[Below(keys.size())]);
    if (Below(3) == 0) {
      keys.push_back("type");
      Shuffle(keys);
    } else {
      Shuffle(keys);
      keys.insert(keys.begin(), "type");
    }
    // A second "type" (the last one decides), maybe another tag.
    if (Below(12) == 0) keys.insert(keys.begin() + Below(keys.size() + 1), "type2");
    m.Map(static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) {
      if (k == "?") {
        UnknownKey(m);
        Junk(m, 2);
        continue;
      }
      if (k != "type2") m.Str(k);
      if (k == "type2") {
        m.Str("type");
        if (Coin()) {
          m.Str(kTags[Below(5)]);
        } else {
          Junk(m, 1);
        }
      } else if (k == "type") {
        m.Str(tag);
      } else if (k == "block_hashes") {
        Hashes(m);
      } else if (k == "parent_block_hash") {
        if (Coin()) {
          m.Nil();
        } else {
          Hash(m);
        }
      } else if (k == "token_ids") {
        Tokens(m);
      } else if (k == "block_size") {
        AnyWidthUint(m, Below(4) == 0 ? 0 : 16 * (1 + Below(32)));
      } else if (k == "medium") {
        Medium(m);
      } else {
        OptionalInt(m);
      }
    }
  }

  std::mt19937_64 rng_;
};

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Same status (code and message) and, when OK, the same batch.
void ExpectSameResult(const std::string& payload, const std::string& what) {
  const auto expected = DecodeKvEventBatchWithMsgpackCxx(Bytes(payload));
  const auto got = DecodeKvEventBatch(Bytes(payload));
  ASSERT_EQ(got.status(), expected.status()) << what;
  if (expected.ok()) {
    ASSERT_EQ(*got, *expected) << what;
  }
}

TEST(KvEventDecoderDifferentialTest, GeneratedBatchesDecodeAsWithMsgpackCxx) {
  PayloadGenerator gen(1411);
  int ok = 0, stored = 0, removed = 0, unknown = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string payload = gen.Batch();
    ExpectSameResult(payload, "payload " + std::to_string(i));
    const auto batch = DecodeKvEventBatch(Bytes(payload));
    if (!batch.ok()) continue;
    ++ok;
    unknown += static_cast<int>(batch->unknown_events);
    for (const EngineEvent& e : batch->events) {
      stored += std::holds_alternative<BlockStoredEvent>(e) ? 1 : 0;
      removed += std::holds_alternative<BlockRemovedEvent>(e) ? 1 : 0;
    }
  }
  // The generator makes mostly valid payloads (negative ranks, group_idx and
  // block sizes aside), and exercises every kind.
  EXPECT_GT(ok, 10000);
  EXPECT_GT(stored, 5000);
  EXPECT_GT(removed, 2000);
  EXPECT_GT(unknown, 1000);
}

TEST(KvEventDecoderDifferentialTest, MutatedAndTruncatedBatchesFailAsWithMsgpackCxx) {
  PayloadGenerator gen(1412);
  std::mt19937_64 rng(1413);
  for (int i = 0; i < 4000; ++i) {
    const std::string payload = gen.Batch();
    for (int m = 0; m < 8; ++m) {
      std::string bytes = payload;
      switch (rng() % 3) {
        case 0:
          bytes.resize(rng() % bytes.size());
          break;
        case 1:
          for (int f = 1 + static_cast<int>(rng() % 3); f > 0; --f) {
            bytes[rng() % bytes.size()] = static_cast<char>(rng());
          }
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(rng() % bytes.size()),
                       static_cast<char>(rng()));
      }
      ExpectSameResult(bytes, "payload " + std::to_string(i) + " mutation " + std::to_string(m));
    }
  }
}

// Reusing one batch across payloads gives what a fresh decode gives.
TEST(KvEventDecoderDifferentialTest, DecodingIntoAReusedBatchEqualsAFreshDecode) {
  PayloadGenerator gen(1414);
  EngineEventBatch reused;
  for (int i = 0; i < 5000; ++i) {
    const std::string payload = gen.Batch();
    const auto fresh = DecodeKvEventBatch(Bytes(payload));
    const absl::Status s = DecodeKvEventBatch(Bytes(payload), {}, &reused);
    ASSERT_EQ(s, fresh.status()) << i;
    if (s.ok()) {
      ASSERT_EQ(reused, *fresh) << i;
    } else {
      ASSERT_TRUE(reused.events.empty()) << i;
    }
  }
}

}  // namespace
}  // namespace kvlearn
