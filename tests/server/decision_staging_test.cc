// DecisionStaging: staged records come back in order from the file after a
// reopen (a crash leaves them there), a full staging refuses instead of
// overwriting, Clear() hides older records even where their numbers would
// continue, and a damaged or foreign file ends the records or is refused.
#include "server/decision_staging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

using Staged = std::vector<std::pair<uint64_t, std::string>>;  // number, RocksDB value

// A record journaled at event sequence 5, as RocksDB stores it.
std::string Value(const std::string& record) { return "\x05" + record; }

Staged Read(const DecisionStaging& s) {
  Staged out;
  for (const DecisionStaging::Record& r : s.Records()) out.emplace_back(r.number, r.value);
  return out;
}

std::unique_ptr<DecisionStaging> OpenAt(const std::string& path, size_t capacity = 4096) {
  auto s = DecisionStaging::Open(path, capacity);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(DecisionStagingTest, RecordsSurviveAReopenUntilCleared) {
  TempDir dir;
  const std::string path = dir.File("staging");
  const Staged want = {
      {7, Value("a")}, {8, Value(std::string("\0bc", 3))}, {9, Value(std::string(300, 'd'))}};
  {
    auto s = OpenAt(path);
    EXPECT_TRUE(s->empty());
    for (const auto& [n, v] : want) ASSERT_TRUE(s->Append(n, 5, v.substr(1)));
    EXPECT_EQ(Read(*s), want);
  }  // closed without Clear: as a killed process leaves it
  {
    auto s = OpenAt(path);
    EXPECT_FALSE(s->empty());
    EXPECT_EQ(Read(*s), want);
    // Appends after the recovered ones continue them.
    ASSERT_TRUE(s->Append(10, 300, "e"));  // a two-byte varint
    EXPECT_EQ(Read(*s).back(), (std::pair<uint64_t, std::string>{10,
                                                                 "\xac\x02"
                                                                 "e"}));
    s->Clear();
    EXPECT_TRUE(s->empty());
    EXPECT_TRUE(Read(*s).empty());
  }
  EXPECT_TRUE(Read(*OpenAt(path)).empty());
}

TEST(DecisionStagingTest, AFullStagingRefusesAndClearMakesRoom) {
  TempDir dir;
  // 256 bytes: 16 of header, then records of 24 + 40 bytes.
  auto s = OpenAt(dir.File("staging"), 256);
  const std::string record(39, 'v');
  uint64_t n = 0;
  while (s->Append(n, 5, record)) ++n;
  EXPECT_EQ(n, 3u);  // (256 - 16) / 64
  EXPECT_EQ(Read(*s).size(), 3u);
  EXPECT_FALSE(s->Append(n, 5, record));  // refused, and nothing changed
  EXPECT_EQ(Read(*s).size(), 3u);
  s->Clear();
  EXPECT_TRUE(s->Append(n, 5, record));
  EXPECT_EQ(Read(*s), (Staged{{3, Value(record)}}));
}

TEST(DecisionStagingTest, ClearHidesOlderRecordsWhoseNumbersWouldContinue) {
  TempDir dir;
  const std::string path = dir.File("staging");
  {
    auto s = OpenAt(path);
    for (uint64_t n = 10; n < 13; ++n) ASSERT_TRUE(s->Append(n, 5, "same size"));
    s->Clear();
    // Record 10 again, in the first slot: the old 11 and 12 still sit after
    // it, numbered as its successors; only the end mark written with it
    // keeps them out.
    ASSERT_TRUE(s->Append(10, 5, "same size"));
  }
  EXPECT_EQ(Read(*OpenAt(path)), (Staged{{10, Value("same size")}}));
}

TEST(DecisionStagingTest, ADamagedRecordEndsTheRecordsAndAForeignFileIsRefused) {
  TempDir dir;
  const std::string path = dir.File("staging");
  {
    auto s = OpenAt(path);
    for (uint64_t n = 0; n < 3; ++n) ASSERT_TRUE(s->Append(n, 5, "value" + std::to_string(n)));
  }
  // Flip a byte of the second record's value: header 16, record 0 takes 24 + 7 -> 32 bytes.
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "X", 1, 16 + 32 + 24), 1);
  ::close(fd);
  EXPECT_EQ(Read(*OpenAt(path)), (Staged{{0, Value("value0")}}));

  const std::string foreign = dir.File("foreign");
  const int f = ::open(foreign.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_EQ(::write(f, "not a staging file", 18), 18);
  ::close(f);
  auto refused = DecisionStaging::Open(foreign);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("not a kvlearn decision staging file"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace kvlearn
