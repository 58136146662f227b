// EventLog's decision journal (the "decisions" column family): journal order
// and event positions survive a reopen, read-only opens see it, readers of the
// events never do, the retention bound trims decisions with the events they
// followed, a decision still staged (server/decision_staging.h) when its
// writer is killed is recovered by the next open from either staging file,
// decisions that fill staging after staging while events, readers and
// other writers come and go all arrive, once each, and a call that finds
// both staging files full waits for the drain thread.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/decision_staging.h"
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

// In the child: two events, decisions 0-1, one event (it carries 0-1 into
// RocksDB), decisions 2-3 (staged only), then SIGKILL.
[[noreturn]] void WriteAndDie(const std::string& dir) {
  auto log = EventLog::Open(dir, {});
  if (!log.ok()) _exit(2);
  const bool ok = (*log)->Append(std::vector<std::string>{"e0", "e1"}).ok() &&
                  (*log)->AppendDecision("d0").ok() && (*log)->AppendDecision("d1").ok() &&
                  (*log)->Append(std::vector<std::string>{"e2"}).ok() &&
                  (*log)->AppendDecision("d2").ok() && (*log)->AppendDecision("d3").ok();
  if (!ok) _exit(3);
  raise(SIGKILL);
  _exit(4);
}

// A staging file an earlier build left at 1 MiB, with records past this
// build's 64 KiB: the next open moves every record into RocksDB, then starts
// the file again at this build's size, which later decisions fill and empty.
TEST(EventLogDecisionsTest, AnEarlierBuildsLargerStagingIsRecoveredThenShrunk) {
  TempDir dir;
  const std::string path = dir.File(DecisionStaging::kFileName);
  std::vector<JournaledDecision> want;
  {
    auto old = DecisionStaging::Open(path, 1 << 20);
    ASSERT_TRUE(old.ok()) << old.status();
    for (uint64_t n = 0; n < 600; ++n) {  // ~200 KB of records
      want.emplace_back(n, 0, std::string(300, static_cast<char>('a' + n % 26)));
      ASSERT_TRUE((*old)->Append(n, 0, std::get<2>(want.back())));
    }
  }  // closed without Clear, as a killed process leaves it
  ASSERT_GT(std::filesystem::file_size(path), DecisionStaging::kDefaultCapacity);
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ((*log)->next_decision(), 600u);
    EXPECT_EQ(std::filesystem::file_size(path), DecisionStaging::kDefaultCapacity);
    for (uint64_t n = 600; n < 1000; ++n) {  // more than the smaller file holds
      want.emplace_back(n, 0, std::string(300, 'z'));
      ASSERT_TRUE((*log)->AppendDecision(std::get<2>(want.back())).ok());
    }
  }
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(JournaledDecisions(**log), want);
}

// A node that sends no events: its decisions fill the staging ten times
// over, each full file handed to the drain thread while the other fills.
// Every one is journaled once, in order, now and after a reopen.
TEST(EventLogDecisionsTest, DecisionsFillingStagingAfterStagingAllArriveOnce) {
  TempDir dir;
  std::vector<JournaledDecision> want;
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(std::vector<std::string>{"e0"}).ok());
    const size_t count = 10 * DecisionStaging::kDefaultCapacity / 300;
    for (uint64_t n = 0; n < count; ++n) {
      want.emplace_back(n, 1, std::string(300, static_cast<char>('a' + n % 26)));
      ASSERT_TRUE((*log)->AppendDecision(std::get<2>(want.back())).ok()) << n;
    }
    // A call waits at most once per staging filled (each record takes over
    // 300 bytes of a file's 64 KiB), whatever the drain thread's pace.
    EXPECT_LE((*log)->decision_waits(), count * 300 / DecisionStaging::kDefaultCapacity + 1);
    EXPECT_EQ(JournaledDecisions(**log), want);
  }
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_decision(), want.size());
  EXPECT_EQ(JournaledDecisions(**log), want);
}

// The drain thread held (EventLogOptions::before_drain_write) while it
// writes the first full staging file: decisions fill the second, and the
// call that finds both full waits for the drain thread, counted once, and
// goes on once it is let go; every decision arrives once, in order. Each
// record takes over 300 bytes of a 64 KiB file, so 1.5 files' worth of
// them has handed the first file over and left the second half full, and
// one file's worth more must fill it.
TEST(EventLogDecisionsTest, ACallFindingBothStagingFilesFullWaitsForTheDrainThread) {
  struct Gate {
    std::promise<void> open;
    std::shared_future<void> opened = open.get_future().share();
    std::atomic<int> drains{0};
    std::once_flag once;
    void Open() {
      std::call_once(once, [this] { open.set_value(); });
    }
  };
  const auto gate = std::make_shared<Gate>();
  EventLogOptions options;
  options.before_drain_write = [gate] {
    ++gate->drains;
    gate->opened.wait();
  };
  TempDir dir;
  auto log = EventLog::Open(dir.path(), options);
  ASSERT_TRUE(log.ok()) << log.status();
  struct OpenOnExit {  // a failed check must not leave the drain thread held
    std::shared_ptr<Gate> gate;
    ~OpenOnExit() { gate->Open(); }
  } open_on_exit{gate};
  ASSERT_TRUE((*log)->Append(std::vector<std::string>{"e0"}).ok());
  const size_t per_file = DecisionStaging::kDefaultCapacity / 300;
  std::vector<JournaledDecision> want;
  for (uint64_t n = 0; n < per_file * 5 / 2; ++n) {
    want.emplace_back(n, 1, std::string(300, static_cast<char>('a' + n % 26)));
  }
  const size_t first = per_file * 3 / 2;
  for (size_t n = 0; n < first; ++n) {
    ASSERT_TRUE((*log)->AppendDecision(std::get<2>(want[n])).ok()) << n;
  }
  while (gate->drains.load() == 0) std::this_thread::yield();
  ASSERT_EQ((*log)->decision_waits(), 0u);

  std::atomic<bool> done{false};
  absl::Status written;
  std::thread writer([&] {
    for (size_t n = first; n < want.size() && written.ok(); ++n) {
      written = (*log)->AppendDecision(std::get<2>(want[n]));
    }
    done = true;
  });
  while ((*log)->decision_waits() == 0 && !done.load()) std::this_thread::yield();
  EXPECT_FALSE(done.load()) << "no call waited for the held drain thread";
  EXPECT_EQ((*log)->decision_waits(), 1u);
  gate->Open();
  writer.join();
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ((*log)->decision_waits(), 1u) << "the rest fit in the drained file";
  EXPECT_EQ(JournaledDecisions(**log), want);
}

// What a kill -9 can leave in the two staging files: the drain thread wrote
// the full one (decisions 2-4, in the first file) but died before emptying
// it, and the one taking calls (the second) holds 5-6, never written. The
// next open puts 5-6 in and does not count 2-4 twice.
TEST(EventLogDecisionsTest, RecoveryTakesBothStagingFilesWithoutDuplicates) {
  TempDir dir;
  const auto record = [](uint64_t n) { return std::string(10 + n, static_cast<char>('a' + n)); };
  std::vector<JournaledDecision> want;
  for (uint64_t n = 0; n < 7; ++n) want.emplace_back(n, 1, record(n));
  const auto stage = [&](const char* file, uint64_t from, uint64_t to) {
    auto staging = DecisionStaging::Open(dir.File(file));
    ASSERT_TRUE(staging.ok()) << staging.status();
    for (uint64_t n = from; n < to; ++n) ASSERT_TRUE((*staging)->Append(n, 1, record(n)));
  };  // closed without Clear, as a killed process leaves it
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(std::vector<std::string>{"e0"}).ok());
    for (uint64_t n = 0; n < 5; ++n) ASSERT_TRUE((*log)->AppendDecision(record(n)).ok());
  }  // 0-4 in RocksDB
  stage(DecisionStaging::kFileName, 2, 5);
  stage(DecisionStaging::kSecondFileName, 5, 7);
  uint64_t retained = 0;
  {
    auto log = EventLog::Open(dir.path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ((*log)->next_decision(), 7u);
    EXPECT_EQ(JournaledDecisions(**log), want);
    retained = (*log)->retained_bytes();
  }
  // What an open counts from RocksDB alone: nothing was counted twice.
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->retained_bytes(), retained);
  EXPECT_EQ(JournaledDecisions(**log), want);
}

// Two writers of decisions, one of events and one reader at once, across
// many full stagings (the tsan stage runs this): every decision is journaled
// once, each writer's in the order it made them.
TEST(EventLogDecisionsTest, ConcurrentWritersEventsAndReadersLoseNoDecision) {
  TempDir dir;
  auto opened = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(opened.ok()) << opened.status();
  EventLog& log = **opened;
  constexpr int kWriters = 2;
  constexpr int kPerWriter = 1500;  // ~7 stagings of 300-byte records
  std::atomic<int> writers_left{kWriters};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        std::string record(300, static_cast<char>('a' + w));
        record.replace(0, 12, absl::StrCat(w, ":", i, ":"));
        if (!log.AppendDecision(record).ok()) failed = true;
      }
      --writers_left;
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; writers_left > 0; ++i) {
      if (!log.Append(std::vector<std::string>{absl::StrCat("e", i)}).ok()) failed = true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  threads.emplace_back([&] {
    while (writers_left > 0) {
      uint64_t expected = 0;  // every decision up to the last, once each
      const absl::Status read = log.ForEachDecision([&](uint64_t n, uint64_t, std::string_view) {
        if (n != expected) {
          return absl::DataLossError(absl::StrCat("decision ", n, " after ", expected));
        }
        ++expected;
        return absl::OkStatus();
      });
      if (!read.ok()) {
        ADD_FAILURE() << read;
        failed = true;
      }
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failed);
  const std::vector<JournaledDecision> got = JournaledDecisions(log);
  ASSERT_EQ(got.size(), static_cast<size_t>(kWriters * kPerWriter));
  std::vector<int> next(kWriters, 0);
  uint64_t previous_sequence = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    const auto& [number, sequence, record] = got[n];
    ASSERT_EQ(number, n);
    // Numbers and event positions are taken under one lock: they rise together.
    ASSERT_GE(sequence, previous_sequence) << "decision " << n;
    previous_sequence = sequence;
    const int w = record[0] - '0';
    ASSERT_TRUE(w >= 0 && w < kWriters) << record.substr(0, 12);
    EXPECT_TRUE(record.starts_with(absl::StrCat(w, ":", next[w], ":"))) << "decision " << n;
    ++next[w];
  }
  EXPECT_LE(previous_sequence, log.next_sequence());
  EXPECT_EQ(next, std::vector<int>(kWriters, kPerWriter));
}

// Set in the child process: the directory it writes to.
constexpr const char* kChildDirVariable = "KVLEARN_EVENT_LOG_CRASH_CHILD_DIR";

TEST(EventLogDecisionsTest, StagedDecisionsSurviveSigkillAndAreRecoveredInPlace) {
  if (const char* child_dir = std::getenv(kChildDirVariable)) WriteAndDie(child_dir);
  TempDir dir;
  // The child is this test binary run afresh (fork, then exec): a process
  // that has not touched RocksDB, whose threads a bare fork would not copy.
  // Set before the fork: the child only execs.
  ASSERT_EQ(setenv(kChildDirVariable, dir.path().c_str(), 1), 0);
  const pid_t child = fork();
  if (child == 0) {
    execl(
        "/proc/self/exe", "event_log_decisions_test",
        "--gtest_filter=EventLogDecisionsTest.StagedDecisionsSurviveSigkillAndAreRecoveredInPlace",
        static_cast<char*>(nullptr));
    _exit(5);
  }
  unsetenv(kChildDirVariable);
  ASSERT_GE(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child did not die by SIGKILL: status " << status;

  const std::vector<JournaledDecision> want = {
      {0, 2, "d0"}, {1, 2, "d1"}, {2, 3, "d2"}, {3, 3, "d3"}};
  {
    // RocksDB alone (what a read-only open reads) holds what the last event
    // append carried: d2 and d3 were only staged when the process died.
    auto ro = EventLog::OpenReadOnly(dir.path());
    ASSERT_TRUE(ro.ok()) << ro.status();
    EXPECT_EQ(JournaledDecisions(**ro), (std::vector<JournaledDecision>{want[0], want[1]}));
  }
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_decision(), 4u);
  EXPECT_EQ((*log)->next_sequence(), 3u);
  EXPECT_EQ(JournaledDecisions(**log), want);
  // Numbering goes on after the recovered ones.
  ASSERT_TRUE((*log)->AppendDecision("d4").ok());
  EXPECT_EQ(std::get<0>(JournaledDecisions(**log).back()), 4u);
}

}  // namespace
}  // namespace kvlearn
