#include "sim/block_trace_export.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

struct Record {
  uint32_t seconds;
  uint64_t id;
  uint32_t bytes;
  int64_t next;
};

std::vector<Record> Decode(const std::string& bytes) {
  std::vector<Record> out;
  for (size_t at = 0; at + kOracleGeneralRecordBytes <= bytes.size();
       at += kOracleGeneralRecordBytes) {
    Record r;
    std::memcpy(&r.seconds, bytes.data() + at, 4);
    std::memcpy(&r.id, bytes.data() + at + 4, 8);
    std::memcpy(&r.bytes, bytes.data() + at + 12, 4);
    std::memcpy(&r.next, bytes.data() + at + 16, 8);
    out.push_back(r);
  }
  return out;
}

// Requests "ab", "ac", "ab" (one a second): accesses a b a c a b, root first,
// each the block's bytes, each pointing at the block's next access.
TEST(BlockTraceExportTest, OneRecordPerBlockOfEachRequestRootFirstWithItsNextAccess) {
  const auto h = MakeHandTrace({"ab", "ac", "ab"});
  std::ostringstream out;
  ASSERT_TRUE(WriteOracleGeneral(h->replay, out).ok());
  const std::string bytes = out.str();
  ASSERT_EQ(bytes.size(), 6 * kOracleGeneralRecordBytes);
  const std::vector<Record> records = Decode(bytes);
  const std::string letters = "abacab";
  const std::vector<uint32_t> seconds = {0, 0, 1, 1, 2, 2};
  const std::vector<int64_t> next = {2, 5, 4, -1, -1, -1};
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(records[i].id, h->Block(letters[i]));
    EXPECT_EQ(records[i].bytes, HandBlockBytes());
    EXPECT_EQ(records[i].seconds, seconds[i]);
    EXPECT_EQ(records[i].next, next[i]);
  }
}

}  // namespace
}  // namespace kvlearn
