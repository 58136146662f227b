// The codec of policy state (core/policy_state.h): values come back bit for
// bit, and every malformed input is DATA_LOSS naming what was being read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/policy_state.h"

namespace kvlearn {
namespace {

uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

TEST(PolicyStateCodecTest, ValuesComeBackBitForBit) {
  PolicyStateWriter out;
  const int64_t signed_values[] = {0, -1, 1, INT64_MIN, INT64_MAX};
  const double doubles[] = {0.0,
                            -0.0,
                            1.0 / 3,
                            std::numeric_limits<double>::lowest(),
                            std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()};
  out.Varint(0);
  out.Varint(UINT64_MAX);
  for (int64_t v : signed_values) out.Signed(v);
  for (double d : doubles) out.Double(d);
  out.Float(-2.5f);
  out.Bool(true);
  out.Bytes("abc");
  out.Varint(6);  // a block number
  // 0 + 10 varint bytes, 1 + 1 + 1 + 10 + 10 zigzag bytes (INT64_MIN -> 2^64 - 1).
  EXPECT_EQ(out.bytes().size(), 1 + 10 + 23 + 7 * 8 + 4 + 1 + 4 + 1);

  PolicyStateReader in(out.bytes(), 7);
  EXPECT_EQ(in.Varint("a"), 0u);
  EXPECT_EQ(in.Varint("b"), UINT64_MAX);
  for (int64_t v : signed_values) EXPECT_EQ(in.Signed("s"), v);
  for (double d : doubles) EXPECT_EQ(Bits(in.Double("d")), Bits(d));
  EXPECT_EQ(in.Float("f"), -2.5f);
  EXPECT_TRUE(in.Bool("bool"));
  EXPECT_EQ(in.Bytes("bytes"), "abc");
  EXPECT_EQ(in.Block("block"), 6u);
  EXPECT_TRUE(in.Finish().ok()) << in.Finish();
}

TEST(PolicyStateCodecTest, MalformedInputIsDataLossNamingTheField) {
  {
    PolicyStateReader in("\x80", 10);  // a varint that never ends
    in.Varint("the clock");
    EXPECT_EQ(in.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(in.status().message().find("the clock"), std::string::npos) << in.status();
    EXPECT_EQ(in.Varint("later"), 0u);  // every read after a failure returns 0
    EXPECT_NE(in.status().message().find("the clock"), std::string::npos);
  }
  {
    const std::string three("\x01\x02\x03", 3);  // no double; the reader keeps a view
    PolicyStateReader in(three, 10);
    in.Double("a score");
    EXPECT_NE(in.status().message().find("a score"), std::string::npos);
  }
  {
    PolicyStateWriter out;
    out.Varint(10);
    PolicyStateReader in(out.bytes(), 10);  // blocks 0..9
    in.Block("a victim");
    EXPECT_NE(in.status().message().find("block 10 of 10"), std::string::npos) << in.status();
  }
  {
    // A count larger than the bytes left could hold, at 2 bytes per item.
    PolicyStateWriter out;
    out.Varint(3);
    out.Varint(1);
    out.Varint(2);
    out.Varint(3);
    out.Varint(4);
    PolicyStateReader ok_in(out.bytes(), 10);
    EXPECT_EQ(ok_in.Count("pairs", 2), 0u);  // 4 bytes left: 2 pairs fit, 3 do not
    EXPECT_FALSE(ok_in.ok());
    PolicyStateReader in(out.bytes(), 10);
    EXPECT_EQ(in.Count("singles", 1), 3u);
    EXPECT_TRUE(in.ok());
  }
  {
    PolicyStateWriter out;
    out.Varint(UINT64_MAX);  // an absurd length: refused, nothing allocated
    PolicyStateReader in(out.bytes(), 10);
    EXPECT_EQ(in.Bytes("a name"), "");
    EXPECT_EQ(in.status().code(), absl::StatusCode::kDataLoss);
  }
  {
    PolicyStateWriter out;
    out.Varint(2);
    PolicyStateReader in(out.bytes(), 10);
    EXPECT_EQ(in.Bounded("a flag", 1), 0u);
    EXPECT_NE(in.status().message().find("2 is above 1"), std::string::npos) << in.status();
  }
  {
    const std::string two("\x01\x05", 2);
    PolicyStateReader in(two, 10);
    in.Varint("one");
    EXPECT_EQ(in.Finish().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(in.Finish().message().find("1 trailing bytes"), std::string::npos);
  }
}

TEST(PolicyStateCodecTest, OptionalBlocksCarryNoneAndForgotten) {
  const BlockIndex renumber[] = {0, kNoBlock, 1};
  PolicyStateWriter out;
  out.Varint(OptionalBlock(renumber, kNoBlock));
  out.Varint(OptionalBlock(renumber, 1));  // forgotten
  out.Varint(OptionalBlock(renumber, 2));
  out.Varint(OptionalBlock(renumber, 7));  // past the table
  EXPECT_EQ(out.bytes(), std::string("\x00\x00\x02\x00", 4));
  PolicyStateReader in(out.bytes(), 2);
  EXPECT_EQ(OptionalBlock(in, "x"), kNoBlock);
  EXPECT_EQ(OptionalBlock(in, "x"), kNoBlock);
  EXPECT_EQ(OptionalBlock(in, "x"), 1u);
  EXPECT_EQ(OptionalBlock(in, "x"), kNoBlock);
  EXPECT_TRUE(in.Finish().ok());
}

}  // namespace
}  // namespace kvlearn
