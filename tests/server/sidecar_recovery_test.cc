// Restart recovery: a sidecar restarted on its data directory (after a clean
// stop, a SIGTERM, or kill -9 of the real binary) answers RankEviction, Admit
// and GetStatus exactly as a sidecar that never restarted, because start-up
// replays the event log through the pools (server/log_replay.h). Each test
// feeds a trace slice through `kvlearn loadgen`'s protocol to two servers, one
// of which is then restarted, and asks both the same questions.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "server/event_log.h"
#include "tests/server/restart_compare.h"
#include "tests/server/serve_process.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

class SidecarRecoveryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SidecarRecoveryTest, RestartRebuildsEveryPoolAsIfItNeverStopped) {
  const Fed fed(SmallChatTrace());
  ASSERT_TRUE(fed.replay.ok());
  TempDir never_dir, restarted_dir;
  auto options = [&](const std::string& dir) { return RestartTestOptions(dir, GetParam()); };
  auto never = StartServer(options(never_dir.path()));
  auto restarted = StartServer(options(restarted_dir.path()));
  ASSERT_NE(never, nullptr);
  ASSERT_NE(restarted, nullptr);
  const LoadgenResult a = Feed(fed, never->port());
  const LoadgenResult b = Feed(fed, restarted->port());
  ASSERT_EQ(a.result.block_hits, b.result.block_hits);  // same start, same decisions
  ASSERT_GT(a.result.evicted_blocks, 0u);

  restarted.reset();  // a clean stop
  // Progress is reported while replaying (every 4096 events with no minimum
  // interval here).
  std::vector<std::pair<uint64_t, uint64_t>> progress;  // done, total
  SidecarOptions again = options(restarted_dir.path());
  again.replay_progress = [&progress](uint64_t done, uint64_t total, double) {
    progress.emplace_back(done, total);
  };
  again.replay_progress_interval_seconds = 0;
  restarted = StartServer(again);
  ASSERT_NE(restarted, nullptr);
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(restarted->port());
  EXPECT_GT(restarted->replayed_events(), 0u);
  EXPECT_GT(restarted->replayed_decisions(), 0u);
  ASSERT_EQ(progress.size(), restarted->replayed_events() / 4096);
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_EQ(progress[i].first, 4096 * (i + 1));
    EXPECT_EQ(progress[i].second, restarted->replayed_events());
  }
  ExpectSameAnswers(*never_stub, *restarted_stub, fed.pool_bytes);
}

INSTANTIATE_TEST_SUITE_P(Policies, SidecarRecoveryTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "s3fifo", "kvlearn-cars"),
                         PolicyTestName);

// A log trimmed by --log-max-bytes starts mid-history: the server still
// starts, rebuilds from the retained events, redoes no journaled decision
// (their places no longer line up) and says so.
TEST(SidecarRecoveryTrimTest, ATrimmedLogRebuildsFromTheRetainedEventsAndSaysSo) {
  const Fed fed(SmallChatTrace());
  ASSERT_TRUE(fed.replay.ok());
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path(), "lru");
  o.metrics_listen = "";
  o.cost = std::make_shared<CostModel>(DefaultCost());
  o.log_max_bytes = 200'000;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  Feed(fed, server->port());
  server.reset();
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->replayed_events(), 0u);
  EXPECT_EQ(server->replayed_decisions(), 0u);
  EXPECT_NE(server->startup_notes().find("trimmed by --log-max-bytes"), std::string::npos)
      << server->startup_notes();
  auto stub = Connect(server->port());
  EXPECT_NE(PoolsOf(*stub).find("loadgen-0"), std::string::npos);
}

// The real binary (lru, its default): kill -9 after the trace, or SIGTERM
// with an idle stream open, then a restart on the same directory.
class SidecarProcessRecoveryTest : public ::testing::TestWithParam<int> {};

TEST_P(SidecarProcessRecoveryTest, RestartedBinaryAnswersAsIfItNeverStopped) {
  const int sig = GetParam();
  const Fed fed(SmallChatTrace());
  ASSERT_TRUE(fed.replay.ok());
  TempDir dir;
  const std::string data = dir.File("data");
  SidecarOptions o = TestOptions(dir.File("never"), "lru");
  o.metrics_listen = "";
  auto never = StartServer(o);
  ASSERT_NE(never, nullptr);
  Feed(fed, never->port());

  auto server = std::make_unique<ServeProcess>(
      KVLEARN_BINARY, data, std::vector<std::string>{"--shutdown-grace-seconds", "0.5"});
  ASSERT_GT(server->port(), 0) << "kvlearn serve did not start";
  Feed(fed, server->port());
  if (sig == SIGKILL) {
    const int status = server->Kill(SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  } else {
    // An idle stream stays open across the signal: the stop must not wait
    // for it (it hung in gRPC's shutdown, holding the RocksDB lock).
    auto stub = Connect(server->port());
    grpc::ClientContext ctx;
    v1::ReportSummary summary;
    auto idle = stub->ReportEvents(&ctx, &summary);
    idle->Write(v1::EventBatch());
    int status = 0;
    ASSERT_TRUE(server->SignalAndWait(SIGTERM, std::chrono::seconds(60), &status))
        << "kvlearn serve did not exit after SIGTERM with an idle stream open";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ctx.TryCancel();
  }

  const std::string log = dir.File("restart.log");
  server = std::make_unique<ServeProcess>(KVLEARN_BINARY, data, std::vector<std::string>{}, log);
  ASSERT_GT(server->port(), 0) << "kvlearn serve did not restart on the same directory";
  std::stringstream err;
  err << std::ifstream(log).rdbuf();
  EXPECT_NE(err.str().find("rebuilt the pools from"), std::string::npos) << err.str();
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(server->port());
  ExpectSameAnswers(*never_stub, *restarted_stub, fed.pool_bytes);
  EXPECT_EQ(WEXITSTATUS(server->Kill(SIGTERM)), 0);
}

INSTANTIATE_TEST_SUITE_P(Signals, SidecarProcessRecoveryTest, ::testing::Values(SIGKILL, SIGTERM),
                         [](const auto& info) {
                           return std::string(info.param == SIGKILL ? "KillNine" : "Sigterm");
                         });

}  // namespace
}  // namespace kvlearn
