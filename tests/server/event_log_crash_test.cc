// A decision journaled by EventLog::AppendDecision survives the process being
// killed (SIGKILL) right after it, whether the next event append carried it
// into RocksDB or it was still staged (server/decision_staging.h): a child
// process writes and kills itself, the parent reopens the directory. Its own
// binary so the fork happens before this process has touched RocksDB (a fork
// does not copy RocksDB's background threads).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "server/event_log.h"
#include "tests/server/journaled_decisions.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

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

TEST(EventLogCrashTest, StagedDecisionsSurviveSigkillAndAreRecoveredInPlace) {
  TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) WriteAndDie(dir.path());
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
