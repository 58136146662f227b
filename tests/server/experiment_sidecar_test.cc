// A/B experiments in a real sidecar on loopback (server/experiment.h,
// server/shadow_pool.h), driven by the load generator's nodes:
//  - each node runs its arm's policy, and the arms' /metrics add up to the
//    requests served;
//  - a shadow running the live arm's own policy costs what the live arm
//    costs, and every shadow costs what the pool replay (`kvlearn compare`)
//    of its policy costs on the node's requests;
//  - a reload (the RPC) moves policies and keeps the pools whose arm did not
//    change;
//  - a bad file stops the start, naming its field.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "server/experiment.h"
#include "sim/pool_simulator.h"
#include "tests/server/metrics_scrape.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

Trace ChatTrace(uint32_t requests) {
  ChatWorkloadOptions o;
  o.seed = 11;
  o.requests = requests;
  o.sessions_per_second = 3;
  o.mean_think_time_s = 5;
  return GenerateChatTrace(o);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

struct SidecarRun {
  std::unique_ptr<SidecarServer> server;
  LoadgenResult loadgen;
};

class ExperimentSidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = ChatTrace(300);
    auto replay = BuildReplayTrace(trace_, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    replay_ = *std::move(replay);
    pool_bytes_ = replay_.distinct_block_bytes / 20;  // tight: many evictions
  }

  // Starts a sidecar running `experiment` on data directory `data` and
  // replays the trace over `nodes`.
  SidecarRun Drive(const std::string& experiment, uint32_t nodes, const std::string& data = "data",
                   const std::function<void(SidecarOptions&)>& tune = nullptr) {
    SidecarRun run;
    const std::string file = dir_.File("experiment.json");
    WriteFile(file, experiment);
    SidecarOptions& o = options_;
    o = TestOptions(dir_.File(data));
    o.policy.clear();
    o.experiment_path = file;
    o.cost = std::make_shared<CostModel>(DefaultCost());
    o.snapshot_every_events = 0;  // the restart test takes its own
    if (tune) tune(o);
    run.server = StartServer(o);
    if (run.server == nullptr) return run;
    LoadgenOptions lo;
    lo.target = "127.0.0.1:" + std::to_string(run.server->port());
    lo.pool_bytes = pool_bytes_;
    lo.nodes = nodes;
    auto got = RunLoadgen(replay_, DefaultCost(), lo);
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok()) run.loadgen = *std::move(got);
    return run;
  }

  ReplayResult Compare(const std::string& policy) {
    PoolReplayOptions o;
    o.pool_bytes = pool_bytes_;
    auto r = ReplayPool(replay_, DefaultCost(), policy, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ReplayResult{};
  }

  TempDir dir_;
  SidecarOptions options_;  // of the last Drive
  Trace trace_;
  ReplayTrace replay_;
  uint64_t pool_bytes_ = 0;
};

// One node, live arm lru, shadows lru and gdsf: the lru shadow's counters
// are the live arm's, and each shadow's are the pool replay's of its policy
// (the node's requests are the whole trace, as its exported log would be).
TEST_F(ExperimentSidecarTest, ShadowsCostWhatTheReplayOfTheirPolicyCosts) {
  SidecarRun run = Drive(R"({"arms": [{"name": "live", "policy": "lru", "share": 1}],
                     "shadows": [{"name": "same", "policy": "lru"},
                                 {"name": "gdsf", "policy": "gdsf"}]})",
                         1);
  ASSERT_NE(run.server, nullptr);
  const auto m = Scrape(run.server->metrics_port());
  const ReplayResult lru = Compare("lru");
  const ReplayResult gdsf = Compare("gdsf");
  ASSERT_GT(lru.evicted_blocks, 0u);
  // The live arm: what the node itself measured (loadgen), and the replay.
  const double live_cost = Series(m, R"(kvlearn_arm_cost_seconds_total{arm="live"})");
  EXPECT_NEAR(live_cost, run.loadgen.result.cost_seconds(1), 1e-6);
  EXPECT_NEAR(live_cost, lru.cost_seconds(1), 1e-6);
  EXPECT_EQ(Series(m, R"(kvlearn_arm_requests_total{arm="live"})"), trace_.requests.size());
  EXPECT_EQ(Series(m, R"(kvlearn_arm_block_hits_total{arm="live"})"), lru.block_hits);
  EXPECT_EQ(Series(m, R"(kvlearn_arm_admitted_bytes_total{arm="live"})"), lru.admitted_bytes);
  // The shadow of the same policy: to the second, and every counter.
  const std::string same = R"({shadow="same",arm="live"})";
  EXPECT_NEAR(Series(m, "kvlearn_shadow_cost_seconds_total" + same), live_cost, 1e-6);
  for (const char* q : {"requests_total", "block_hits_total", "block_misses_total",
                        "loaded_bytes_total", "admitted_bytes_total", "recomputed_tokens_total"}) {
    EXPECT_EQ(Series(m, std::string("kvlearn_shadow_") + q + same),
              Series(m, std::string("kvlearn_arm_") + q + R"({arm="live"})"))
        << q;
  }
  // Another policy's shadow: the replay of that policy.
  const std::string other = R"({shadow="gdsf",arm="live"})";
  EXPECT_NEAR(Series(m, "kvlearn_shadow_cost_seconds_total" + other), gdsf.cost_seconds(1), 1e-6);
  EXPECT_EQ(Series(m, "kvlearn_shadow_block_hits_total" + other), gdsf.block_hits);
  EXPECT_EQ(Series(m, "kvlearn_shadow_admitted_bytes_total" + other), gdsf.admitted_bytes);
  EXPECT_EQ(Series(m, "kvlearn_shadow_recomputed_tokens_total" + other), gdsf.recomputed_tokens);
  EXPECT_EQ(Series(m, "kvlearn_shadow_requests_skipped_total" + other), 0);
  // The two policies differ on this trace, so the check above could fail.
  EXPECT_NE(gdsf.block_hits, lru.block_hits);
}

// With few --ghost-blocks every pool, the shadows' included, is compacted
// many times: lru and gdsf keep nothing about blocks out of the pool, so
// their shadows still count what the replay counts.
TEST_F(ExperimentSidecarTest, CompactedShadowsStillCostWhatTheReplayCosts) {
  SidecarRun run = Drive(R"({"arms": [{"name": "live", "policy": "lru", "share": 1}],
                             "shadows": [{"name": "gdsf", "policy": "gdsf"}]})",
                         1, "data", [](SidecarOptions& o) { o.ghost_blocks = 64; });
  ASSERT_NE(run.server, nullptr);
  ASSERT_GT(replay_.catalog.size(), 64u * 4);  // many compactions
  const auto m = Scrape(run.server->metrics_port());
  const ReplayResult gdsf = Compare("gdsf");
  const std::string labels = R"({shadow="gdsf",arm="live"})";
  EXPECT_NEAR(Series(m, "kvlearn_shadow_cost_seconds_total" + labels), gdsf.cost_seconds(1), 1e-6);
  EXPECT_EQ(Series(m, "kvlearn_shadow_block_hits_total" + labels), gdsf.block_hits);
  EXPECT_NEAR(Series(m, R"(kvlearn_arm_cost_seconds_total{arm="live"})"),
              Compare("lru").cost_seconds(1), 1e-6);
}

// Near --shadow-max-blocks a shadow pool forgets its ghosts to make room
// (an lru shadow then still counts what the live lru arm counts); past it,
// with its residents alone over the budget, it skips arrivals and counts
// them, and what it served and skipped make up every arrival.
TEST_F(ExperimentSidecarTest, AShadowAtTheBlockBudgetDropsGhostsThenSkips) {
  const std::string json = R"({"arms": [{"name": "live", "policy": "lru", "share": 1}],
                               "shadows": [{"name": "s", "policy": "lru"}]})";
  const std::string labels = R"({shadow="s",arm="live"})";
  const uint64_t residents = pool_bytes_ / (512 * DefaultCost().BytesForTokens(1));
  ASSERT_LT(residents * 2, replay_.catalog.size());
  SidecarRun roomy = Drive(json, 1, "roomy", [&](SidecarOptions& o) {
    o.shadow_max_blocks = residents * 2;  // the residents fit, the ghosts do not
  });
  ASSERT_NE(roomy.server, nullptr);
  auto m = Scrape(roomy.server->metrics_port());
  EXPECT_EQ(Series(m, "kvlearn_shadow_requests_skipped_total" + labels), 0);
  EXPECT_NEAR(Series(m, "kvlearn_shadow_cost_seconds_total" + labels),
              Series(m, R"(kvlearn_arm_cost_seconds_total{arm="live"})"), 1e-6);

  SidecarRun tight =
      Drive(json, 1, "tight", [&](SidecarOptions& o) { o.shadow_max_blocks = residents / 4; });
  ASSERT_NE(tight.server, nullptr);
  m = Scrape(tight.server->metrics_port());
  const double skipped = Series(m, "kvlearn_shadow_requests_skipped_total" + labels);
  const double served = Series(m, "kvlearn_shadow_requests_total" + labels);
  EXPECT_GT(skipped, 0);
  EXPECT_GT(served, 0);
  EXPECT_EQ(served + skipped, trace_.requests.size());
  EXPECT_EQ(Series(m, R"(kvlearn_arm_requests_total{arm="live"})"), trace_.requests.size());
}

// Eight nodes over two arms: each pool runs its arm's policy (as the hash
// assigns it), the decisions name the arm, and the arms' requests add up.
TEST_F(ExperimentSidecarTest, EachNodeRunsItsArmsPolicy) {
  const std::string json = R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                                        {"name": "b", "policy": "gdsf", "share": 0.5}]})";
  SidecarRun run = Drive(json, 8);
  ASSERT_NE(run.server, nullptr);
  auto x = ParseExperiment(json, "x");
  ASSERT_TRUE(x.ok());
  auto stub = Connect(run.server->port());
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  ASSERT_TRUE(stub->GetStatus(&ctx, {}, &status).ok());
  ASSERT_EQ(status.pools_size(), 8);
  std::map<std::string, uint64_t> requests;
  for (const auto& p : status.pools()) {
    const ExperimentArm& arm = x->arms[x->ArmOf(p.node_id())];
    EXPECT_EQ(p.arm(), arm.name) << p.node_id();
    EXPECT_EQ(p.policy(), arm.policy) << p.node_id();
    requests[p.arm()] += p.requests();
  }
  EXPECT_EQ(requests.size(), 2u);  // both arms hold nodes among these eight
  const auto m = Scrape(run.server->metrics_port());
  for (const auto& [arm, n] : requests) {
    EXPECT_EQ(Series(m, "kvlearn_arm_requests_total{arm=\"" + arm + "\"}"), n) << arm;
  }
  v1::RankRequest rank;
  rank.set_node_id(status.pools(0).node_id());
  rank.set_bytes_to_free(1);
  grpc::ClientContext rank_ctx;
  v1::RankResponse victims;
  ASSERT_TRUE(stub->RankEviction(&rank_ctx, rank, &victims).ok());
  EXPECT_EQ(victims.arm(), status.pools(0).arm());
  EXPECT_EQ(victims.policy(), status.pools(0).policy());
}

// ReloadModel with `experiment` reads the file again: nodes of an arm whose
// policy changed run the new one on the blocks they hold; the others keep
// their pools untouched. A reload of a bad file changes nothing.
TEST_F(ExperimentSidecarTest, AReloadMovesPoliciesAndKeepsTheRest) {
  SidecarRun run = Drive(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                              {"name": "b", "policy": "lru", "share": 0.5}]})",
                         8);
  ASSERT_NE(run.server, nullptr);
  auto stub = Connect(run.server->port());
  const auto status = [&] {
    grpc::ClientContext ctx;
    v1::GetStatusResponse s;
    EXPECT_TRUE(stub->GetStatus(&ctx, {}, &s).ok());
    return s;
  };
  const auto reload = [&](const std::string& json) {
    WriteFile(run.server->experiment_path(), json);
    grpc::ClientContext ctx;
    v1::ReloadModelRequest req;
    req.set_experiment(true);
    v1::ReloadModelResponse resp;
    return stub->ReloadModel(&ctx, req, &resp);
  };
  const v1::GetStatusResponse before = status();
  ASSERT_TRUE(reload(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                                 {"name": "b", "policy": "s3fifo", "share": 0.5}]})")
                  .ok());
  const v1::GetStatusResponse after = status();
  ASSERT_EQ(after.pools_size(), before.pools_size());
  int changed = 0;
  for (int i = 0; i < after.pools_size(); ++i) {
    const auto& p = after.pools(i);
    const auto& q = before.pools(i);
    ASSERT_EQ(p.node_id(), q.node_id());
    EXPECT_EQ(p.arm(), q.arm());  // same shares: same arms
    EXPECT_EQ(p.policy(), p.arm() == "b" ? "s3fifo" : "lru");
    changed += p.policy() != q.policy();
    // The node's blocks stay in its pool whatever runs it now.
    EXPECT_EQ(p.resident_blocks(), q.resident_blocks());
    EXPECT_EQ(p.blocks_tracked(), q.blocks_tracked());
  }
  EXPECT_GT(changed, 0);
  const grpc::Status refused =
      reload(R"({"arms": [{"name": "a", "policy": "belady", "share": 1}]})");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("arms[0].policy"), std::string::npos);
  EXPECT_EQ(status().pools(0).policy(), after.pools(0).policy());
  // A model reload is refused while an experiment names the models.
  grpc::ClientContext ctx;
  v1::ReloadModelRequest model;
  model.set_path(dir_.File("none.pt"));
  v1::ReloadModelResponse resp;
  EXPECT_EQ(stub->ReloadModel(&ctx, model, &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// A restart rebuilds every pool under its arm's policy, from the log alone
// or from a snapshot. From the log alone the start-up replay drives the arms
// and shadows through the same requests again, so their counters come back
// equal.
TEST_F(ExperimentSidecarTest, ARestartRebuildsEachPoolUnderItsArm) {
  for (const bool snapshot : {false, true}) {
    SCOPED_TRACE(snapshot ? "from a snapshot" : "from the log");
    SidecarRun run = Drive(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                                        {"name": "b", "policy": "gdsf", "share": 0.5}],
                               "shadows": [{"name": "s", "policy": "s3fifo"}]})",
                           8, snapshot ? "snapshot" : "log");
    ASSERT_NE(run.server, nullptr);
    const auto before = Scrape(run.server->metrics_port());
    const auto status = [](int port) {
      auto stub = Connect(port);
      grpc::ClientContext ctx;
      v1::GetStatusResponse s;
      EXPECT_TRUE(stub->GetStatus(&ctx, {}, &s).ok());
      return s;
    };
    const v1::GetStatusResponse was = status(run.server->port());
    if (snapshot) {
      ASSERT_TRUE(run.server->SnapshotNow().ok());
    }
    run.server->Shutdown();
    run.server.reset();
    auto again = StartServer(options_);
    ASSERT_NE(again, nullptr);
    const v1::GetStatusResponse is = status(again->port());
    ASSERT_EQ(is.pools_size(), was.pools_size());
    for (int i = 0; i < is.pools_size(); ++i) {
      EXPECT_EQ(is.pools(i).arm(), was.pools(i).arm());
      EXPECT_EQ(is.pools(i).policy(), was.pools(i).policy());
      EXPECT_EQ(is.pools(i).resident_blocks(), was.pools(i).resident_blocks());
    }
    if (snapshot) continue;  // the counters count from the snapshot on
    const auto after = Scrape(again->metrics_port());
    for (const char* key : {R"(kvlearn_arm_cost_seconds_total{arm="a"})",
                            R"(kvlearn_arm_cost_seconds_total{arm="b"})",
                            R"(kvlearn_shadow_cost_seconds_total{shadow="s",arm="a"})",
                            R"(kvlearn_shadow_cost_seconds_total{shadow="s",arm="b"})"}) {
      EXPECT_NEAR(Series(after, key), Series(before, key), 1e-6) << key;
      EXPECT_GT(Series(before, key), 0) << key;
    }
  }
}

TEST_F(ExperimentSidecarTest, ABadFileStopsTheStartNamingTheField) {
  const auto start = [&](const std::string& json) {
    WriteFile(dir_.File("bad.json"), json);
    SidecarOptions o = TestOptions(dir_.File("data"));
    o.experiment_path = dir_.File("bad.json");
    return SidecarServer::Start(o).status();
  };
  absl::Status st = start(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.9}]})");
  EXPECT_NE(st.message().find("arms[].share"), std::string::npos) << st;
  st = start(R"({"arms": [{"name": "a", "policy": "nope", "share": 1}]})");
  EXPECT_NE(st.message().find("arms[0].policy"), std::string::npos) << st;
  st = start(R"({"arms": [{"name": "a", "policy": "lru", "share": 1}],
                 "shadows": [{"name": "s", "policy": "learned-model"}]})");
  EXPECT_NE(st.message().find("shadows[0].policy"), std::string::npos) << st;
  st = start(R"({"arms": [{"name": "a", "policy": "learned", "model": "gone.pt", "share": 1}]})");
  EXPECT_NE(st.message().find("arms[0].model"), std::string::npos) << st;
}

}  // namespace
}  // namespace kvlearn
