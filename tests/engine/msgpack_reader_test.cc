// MsgpackReader and MsgpackStructureError on byte strings written out by hand
// (msgpack spec: 0x90|n fixarray, 0x80|n fixmap, 0xa0|n fixstr, 0xcc uint8,
// 0xcd uint16, 0xce uint32, 0xd0 int8, 0xc4 bin8, 0xd4 fixext1, 0xc0 nil).
#include "engine/msgpack_reader.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace kvlearn {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(MsgpackReaderTest, ReadsEachKindOfHeader) {
  // [5, -3, int8 7, uint16 0x1234, "ab", bin "xyz", {}]
  const std::string b(
      "\x97\x05\xfd\xd0\x07\xcd\x12\x34\xa2"
      "ab\xc4\x03xyz\x80",
      17);
  MsgpackReader r(Bytes(b), 32);
  MsgpackValue v;
  ASSERT_TRUE(r.Read(&v, 0));
  EXPECT_EQ(v.type, MsgpackType::kArray);
  EXPECT_EQ(v.u, 7u);
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kUint);
  EXPECT_EQ(v.u, 5u);
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kInt);
  EXPECT_EQ(static_cast<int64_t>(v.u), -3);
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kUint);  // a non-negative signed encoding reads as unsigned
  EXPECT_EQ(v.u, 7u);
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.u, 0x1234u);
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kStr);
  EXPECT_EQ(v.str(), "ab");
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kBin);
  EXPECT_EQ(v.str(), "xyz");
  ASSERT_TRUE(r.Read(&v, 1));
  EXPECT_EQ(v.type, MsgpackType::kMap);
  EXPECT_EQ(v.children(), 0u);
  EXPECT_EQ(r.remaining(), 0u);
}

// Skip lands exactly after the values it was asked to skip, whatever mix of
// the fast paths (runs of 8 positive fixints, the fixed-size table) and the
// general one (containers, sized strings) they take.
TEST(MsgpackReaderTest, SkipLandsAfterTheValues) {
  std::string b;
  b += '\x9c';                                  // fixarray of 12:
  b += std::string(9, '\x01');                  //   nine fixints (a run of 8, then one)
  b += std::string("\xcd\x01\x00", 3);          //   uint16 (explicit lengths: NUL bytes)
  b += "\x92\xd4\x01\x02\xa1z";                 //   [fixext1, "z"]
  b += "\x81\xa1k\x91\xc0";                     //   {"k": [nil]}
  b += std::string("\xce\x00\x01\x00\x00", 5);  // then a uint32 after the array
  b += std::string(40, '\x00');                 // padding, so the fast paths run
  MsgpackReader r(Bytes(b), 32);
  ASSERT_TRUE(r.Skip(1, 0));
  MsgpackValue v;
  ASSERT_TRUE(r.Read(&v, 0));
  EXPECT_EQ(v.type, MsgpackType::kUint);
  EXPECT_EQ(v.u, 65536u);
  EXPECT_EQ(r.remaining(), 40u);
}

TEST(MsgpackReaderTest, ErrorsStopTheReader) {
  MsgpackValue v;
  // [1, 2, "ab... cut short: a string of 5 bytes with 2 of them there.
  const std::string short_array = std::string("\x93\x01\x02\xa5", 4) + "ab";
  MsgpackReader truncated(Bytes(short_array), 32);
  EXPECT_TRUE(truncated.Read(&v, 0));
  EXPECT_FALSE(truncated.Skip(3, 1));
  EXPECT_EQ(truncated.error(), MsgpackReader::Error::kTruncated);
  EXPECT_EQ(truncated.ErrorMessage(), "truncated payload");
  EXPECT_FALSE(truncated.Read(&v, 0));

  const std::string never_used("\xc1", 1);
  MsgpackReader invalid(Bytes(never_used), 32);
  EXPECT_FALSE(invalid.Read(&v, 0));
  EXPECT_EQ(invalid.ErrorMessage(), "not msgpack (invalid type byte)");

  // Three nested arrays under a limit of 2, found while skipping.
  const std::string nested("\x91\x91\x91\xc0", 4);
  MsgpackReader deep(Bytes(nested), 2);
  EXPECT_FALSE(deep.Skip(1, 0));
  EXPECT_EQ(deep.ErrorMessage(), "nesting deeper than 2");

  // An array claiming 16 elements with 3 bytes left: refused at its header.
  const std::string claims("\xdc\x00\x10\x01\x02\x03", 6);
  MsgpackReader overclaimed(Bytes(claims), 32);
  EXPECT_FALSE(overclaimed.Read(&v, 0));
  EXPECT_EQ(overclaimed.error(), MsgpackReader::Error::kTruncated);
}

TEST(MsgpackStructureErrorTest, NamesTheFirstProblemInDocumentOrder) {
  const auto error = [](const std::string& b, uint32_t depth = 32) {
    return MsgpackStructureError(Bytes(b), depth);
  };
  EXPECT_EQ(error(std::string("\x92\x01\xc0", 3)), "");
  EXPECT_EQ(error(std::string("\x92\x01", 2)), "truncated payload");
  EXPECT_EQ(error(std::string("\x92\xc1\x01", 3)), "not msgpack (invalid type byte)");
  EXPECT_EQ(error(std::string("\x91\x01\x02\x03", 4)), "2 trailing bytes after the batch");
  EXPECT_EQ(error(std::string("\x91\x91\xc0", 3), 1), "nesting deeper than 1");
  // An array of 3 holding an array of 2 holding an array of 2, in 6 bytes:
  // the declared elements add up to 3, 5, then 7, past the 6 bytes.
  EXPECT_EQ(error(std::string("\x93\x92\x92\x01\x02\x03", 6)),
            "truncated or corrupt: containers declare more elements (7) than the payload has "
            "bytes (6)");
}

}  // namespace
}  // namespace kvlearn
