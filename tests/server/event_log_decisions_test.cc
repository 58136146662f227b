// EventLog's decision journal (the "decisions" column family): journal order
// and event positions survive a reopen, read-only opens see it, readers of the
// events never do, and the retention bound trims decisions with the events
// they followed.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "server/event_log.h"
#include "tests/server/journaled_decisions.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

size_t EventCount(const EventLog& log) {
  size_t n = 0;
  EXPECT_TRUE(log.ForEach([&](uint64_t, std::string_view) {
                   ++n;
                   return absl::OkStatus();
                 })
                  .ok());
  return n;
}

TEST(EventLogDecisionsTest, DecisionsKeepTheirOrderAndEventPositionAcrossReopens) {
  TempDir dir;
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->AppendDecision("first").ok());  // before any event
    ASSERT_TRUE((*log)->Append(std::vector<std::string>{"e0", "e1"}).ok());
    ASSERT_TRUE((*log)->AppendDecision("second").ok());
    ASSERT_TRUE((*log)->AppendDecision(std::string("\0third", 6)).ok());
    EXPECT_EQ((*log)->next_decision(), 3u);
  }
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_decision(), 3u);
  EXPECT_EQ(EventCount(**log), 2u);  // events only: decisions are not events
  ASSERT_TRUE((*log)->AppendDecision("fourth").ok());
  const std::vector<JournaledDecision> want = {
      {0, 0, "first"}, {1, 2, "second"}, {2, 2, std::string("\0third", 6)}, {3, 2, "fourth"}};
  EXPECT_EQ(JournaledDecisions(**log), want);
  // The cursor reads the same, one at a time.
  {
    std::vector<JournaledDecision> read;
    auto cursor = (*log)->ReadDecisions();  // must not outlive the log
    uint64_t n = 0, seq = 0;
    std::string record;
    while (cursor->Next(&n, &seq, &record)) read.emplace_back(n, seq, record);
    EXPECT_TRUE(cursor->status().ok()) << cursor->status();
    EXPECT_EQ(read, want);
  }
  log->reset();
  auto ro = EventLog::OpenReadOnly(dir.path());
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ(JournaledDecisions(**ro), want);
  EXPECT_FALSE((*ro)->AppendDecision("no").ok());
}

TEST(EventLogDecisionsTest, TrimmingDropsTheDecisionsBeforeTheFirstEventKept) {
  TempDir dir;
  EventLogOptions o;
  o.max_bytes = 10'000;
  auto log = EventLog::Open(dir.path(), o);
  ASSERT_TRUE(log.ok()) << log.status();
  const std::vector<std::string> batch(10, std::string(92, 'x'));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE((*log)->Append(batch).ok());
    ASSERT_TRUE((*log)->AppendDecision(std::string(20, 'd')).ok());
  }
  const uint64_t first = (*log)->first_sequence();
  ASSERT_GT(first, 0u);
  EXPECT_LE((*log)->retained_bytes(), o.max_bytes);
  const auto kept = JournaledDecisions(**log);
  ASSERT_FALSE(kept.empty());
  for (const auto& [n, seq, record] : kept) EXPECT_GE(seq, first) << "decision " << n;
  // JournaledDecision i was journaled after append i, at event position 10 (i + 1).
  EXPECT_EQ(std::get<1>(kept.front()), first);
  EXPECT_EQ(std::get<0>(kept.back()), 49u);
}

}  // namespace
}  // namespace kvlearn
