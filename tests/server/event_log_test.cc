// EventLog: ordered keys, reopen, read-only open, retention bound.
#include "server/event_log.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

std::vector<std::pair<uint64_t, std::string>> ReadAll(const EventLog& log) {
  std::vector<std::pair<uint64_t, std::string>> out;
  EXPECT_TRUE(log.ForEach([&](uint64_t seq, std::string_view v) {
                   out.emplace_back(seq, std::string(v));
                   return absl::OkStatus();
                 })
                  .ok());
  return out;
}

TEST(EventLogTest, KeysAreBigEndianSoByteOrderIsSequenceOrder) {
  EXPECT_LT(EventLogKey(255), EventLogKey(256));
  EXPECT_LT(EventLogKey(65535), EventLogKey(65536));
  EXPECT_EQ(EventLogKey(1), std::string("\0\0\0\0\0\0\0\1", 8));
}

TEST(EventLogTest, AppendsInOrderAndSurvivesReopen) {
  TempDir dir;
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    std::vector<std::string> a = {"a0", "a1"};
    std::vector<std::string> b = {"b0", "b1", "b2"};
    EXPECT_EQ(*(*log)->Append(a), 0u);
    EXPECT_EQ(*(*log)->Append(b), 2u);
    EXPECT_EQ((*log)->next_sequence(), 5u);
  }
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_sequence(), 5u);
  std::vector<std::string> c = {"c0"};
  EXPECT_EQ(*(*log)->Append(c), 5u);
  auto all = ReadAll(**log);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0], std::make_pair(uint64_t{0}, std::string("a0")));
  EXPECT_EQ(all[4], std::make_pair(uint64_t{4}, std::string("b2")));
  EXPECT_EQ(all[5], std::make_pair(uint64_t{5}, std::string("c0")));

  // A read-only view works while the writer has the database open.
  auto ro = EventLog::OpenReadOnly(dir.path());
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ(ReadAll(**ro).size(), 6u);
}

TEST(EventLogTest, RetentionBoundDeletesTheOldestEntries) {
  TempDir dir;
  EventLogOptions o;
  o.max_bytes = 10'000;
  auto log = EventLog::Open(dir.path(), o);
  ASSERT_TRUE(log.ok()) << log.status();
  // Each append is one entry: 8-byte key + 10 records of 1 + 1 + 92 bytes.
  const std::vector<std::string> batch(10, std::string(92, 'x'));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*log)->Append(batch).ok());
  EXPECT_LE((*log)->retained_bytes(), o.max_bytes);
  EXPECT_GT((*log)->first_sequence(), 0u);
  EXPECT_EQ((*log)->first_sequence() % 10, 0u);  // whole appends are deleted
  EXPECT_EQ((*log)->next_sequence(), 500u);
  EXPECT_EQ((*log)->retained_bytes() + (*log)->trimmed_bytes(), 50u * (8 + 10 * 94));
  auto all = ReadAll(**log);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().first, (*log)->first_sequence());
  EXPECT_EQ(all.back().first, 499u);
  EXPECT_EQ(all.size(), 500 - (*log)->first_sequence());
  EXPECT_EQ(all.back().second, std::string(92, 'x'));
  const uint64_t first = (*log)->first_sequence();
  log->reset();
  auto reopened = EventLog::Open(dir.path(), o);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->first_sequence(), first);
  EXPECT_EQ((*reopened)->next_sequence(), 500u);
}

TEST(EventLogTest, OpeningCreatesMissingParentDirectories) {
  TempDir dir;
  const std::string nested = dir.File("runs/a/log");
  {
    auto log = EventLog::Open(nested, {});
    ASSERT_TRUE(log.ok()) << log.status();
    std::vector<std::string> a = {"a0"};
    EXPECT_EQ(*(*log)->Append(a), 0u);
  }
  auto ro = EventLog::OpenReadOnly(nested);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ(ReadAll(**ro).size(), 1u);
}

TEST(EventLogTest, ADirectoryThatCannotBeCreatedIsNamedInTheError) {
  TempDir dir;
  // A regular file where a parent directory should be.
  const std::string file = dir.File("plain-file");
  { std::ofstream(file) << "x"; }
  auto log = EventLog::Open(file + "/log", {});
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find(file + "/log"), std::string::npos) << log.status();
}

TEST(EventLogTest, OpeningAMissingLogReadOnlyFails) {
  TempDir dir;
  auto ro = EventLog::OpenReadOnly(dir.File("nothing-here"));
  EXPECT_FALSE(ro.ok());
}

}  // namespace
}  // namespace kvlearn
