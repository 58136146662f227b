// DecisionStaging: staged records come back in order from the file after a
// reopen (a crash leaves them there), a full staging refuses instead of
// overwriting, Clear() hides older records even where their numbers would
// continue, a damaged or foreign file ends the records or is refused, and a
// file system that cannot hold the file refuses the open (no SIGBUS later).
#include "server/decision_staging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
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

// A full disk, as a process file-size limit: allocating the staging's blocks
// fails (EFBIG) at open, so the sidecar refuses to start with the path in the
// message instead of dying of SIGBUS at the first store into an unbacked page.
// The records of the smaller file already there are left as they were.
TEST(DecisionStagingTest, AFileSystemThatCannotHoldTheFileRefusesTheOpenAndKeepsTheRecords) {
  TempDir dir;
  const std::string path = dir.File("staging");
  {
    auto s = OpenAt(path, 4096);
    ASSERT_TRUE(s->Append(0, 5, "kept"));
  }
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  rlimit small = before;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto refused = DecisionStaging::Open(path, 1 << 20);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find(path + ": allocate"), std::string::npos)
      << refused.status();
  EXPECT_EQ(Read(*OpenAt(path, 4096)), (Staged{{0, Value("kept")}}));
}

}  // namespace
}  // namespace kvlearn
