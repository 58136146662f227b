// core/fnv1a.h against the published FNV-1a 64 test vectors, and the basis
// kvlearn's recorded fingerprints were written with.
#include "core/fnv1a.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlearn {
namespace {

uint64_t Published(const std::string& s) {
  Fnv1a h(Fnv1a::kPublishedBasis);
  h.Bytes(s);
  return h.value();
}

// The test vectors of the FNV reference (Fowler, Noll, Vo; draft-eastlake-fnv).
TEST(Fnv1aTest, MatchesThePublishedVectors) {
  EXPECT_EQ(Published(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Published("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Published("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1aTest, AWordIsItsEightBytesLeastSignificantFirst) {
  Fnv1a word, bytes;
  word.Word(0x0807060504030201ull);
  bytes.Bytes(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(word.value(), bytes.value());
  Fnv1a reversed;
  reversed.Bytes(std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_NE(word.value(), reversed.value());
}

// Fingerprints recorded in model files and model versions in journals were
// hashed from this basis: changing it would rename them all.
TEST(Fnv1aTest, KvlearnsBasisIsTheOneItsFingerprintsWereWrittenWith) {
  EXPECT_EQ(Fnv1a().value(), 1469598103934665603ull);
  EXPECT_NE(Fnv1a::kKvlearnBasis, Fnv1a::kPublishedBasis);
}

}  // namespace
}  // namespace kvlearn
