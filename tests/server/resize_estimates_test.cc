// serve --resize-estimates in a real sidecar on loopback, driven by the load
// generator's nodes (server/resize_estimates.h):
//  - each node's ghost pools at 0.5x and 2x cost what the pool replay
//    (`kvlearn compare`) of the live policy costs on that node's requests
//    at 0.5x and 2x the pool, and scale 1 is the live pool's own cost;
//  - past --resize-max-blocks a ghost skips arrivals and counts them;
//  - a restart from the event log counts the same again, and the ghosts
//    follow the live policy across a reload;
//  - without the flag there are no kvlearn_resize_* series.
#include "server/resize_estimates.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "server/shadow_pool.h"
#include "sim/pool_simulator.h"
#include "tests/server/metrics_scrape.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

constexpr uint32_t kNodes = 2;

// The requests of `trace` whose index passes `keep`, in order.
Trace Requests(const Trace& trace, const std::function<bool(size_t)>& keep) {
  Trace out;
  out.source = trace.source;
  out.block_size = trace.block_size;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    if (!keep(i)) continue;
    const TraceRequest& r = trace.requests[i];
    out.Add(r.timestamp_ms, r.input_length, r.output_length, trace.BlocksOf(r));
    out.requests.back().type = r.type;
    out.requests.back().turn = r.turn;
  }
  return out;
}

// The requests the load generator sends node `node` of `nodes`: request i
// goes to node i mod nodes (clients/load_generator.h).
Trace RequestsOfNode(const Trace& trace, uint32_t node, uint32_t nodes) {
  return Requests(trace, [&](size_t i) { return i % nodes == node; });
}

std::string Labels(uint32_t node, const char* scale) {
  return "{node=\"loadgen-" + std::to_string(node) + "\",scale=\"" + scale + "\"}";
}

class ResizeEstimatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ChatWorkloadOptions o;
    o.seed = 23;
    o.requests = 400;
    o.sessions_per_second = 3;
    o.mean_think_time_s = 5;
    trace_ = GenerateChatTrace(o);
    auto replay = BuildReplayTrace(trace_, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    // Tight for one node's half of the trace: the 0.5x, 1x and 2x pools
    // all evict.
    pool_bytes_ = replay->distinct_block_bytes / 20;
  }

  // Starts a sidecar serving `policy` and replays the trace over kNodes.
  std::unique_ptr<SidecarServer> Drive(const std::string& policy, const std::string& data,
                                       const std::function<void(SidecarOptions&)>& tune) {
    SidecarOptions& o = options_;
    o = TestOptions(dir_.File(data), policy);
    o.cost = std::make_shared<CostModel>(DefaultCost());
    o.snapshot_every_events = 0;
    tune(o);
    auto server = StartServer(o);
    if (server != nullptr) Replay(*server, trace_, kNodes);
    return server;
  }

  // Replays `trace` through `server` over `nodes` load generator nodes.
  void Replay(const SidecarServer& server, const Trace& trace, uint32_t nodes) {
    LoadgenOptions lo;
    lo.target = "127.0.0.1:" + std::to_string(server.port());
    lo.pool_bytes = pool_bytes_;
    lo.nodes = nodes;
    auto replay = BuildReplayTrace(trace, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    auto got = RunLoadgen(*replay, DefaultCost(), lo);
    EXPECT_TRUE(got.ok()) << got.status();
  }

  // `compare` of `policy` on `requests` with a pool of `bytes`.
  static ReplayResult CompareOn(const Trace& requests, const std::string& policy, uint64_t bytes) {
    auto replay = BuildReplayTrace(requests, DefaultCost());  // points into `requests`
    EXPECT_TRUE(replay.ok()) << replay.status();
    if (!replay.ok()) return {};
    PoolReplayOptions o;
    o.pool_bytes = bytes;
    auto r = ReplayPool(*replay, DefaultCost(), policy, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ReplayResult{};
  }
  // The same on node `node`'s requests.
  ReplayResult Compare(uint32_t node, const std::string& policy, uint64_t bytes) {
    return CompareOn(RequestsOfNode(trace_, node, kNodes), policy, bytes);
  }

  TempDir dir_;
  SidecarOptions options_;  // of the last Drive
  Trace trace_;
  uint64_t pool_bytes_ = 0;
};

TEST_F(ResizeEstimatesTest, EachNodesGhostsCostWhatTheReplayCostsAtThatSize) {
  auto server = Drive("gdsf", "on", [](SidecarOptions& o) { o.resize_estimates = true; });
  ASSERT_NE(server, nullptr);
  const auto m = Scrape(server->metrics_port());
  for (uint32_t node = 0; node < kNodes; ++node) {
    SCOPED_TRACE("node " + std::to_string(node));
    const ReplayResult half = Compare(node, "gdsf", pool_bytes_ / 2);
    const ReplayResult same = Compare(node, "gdsf", pool_bytes_);
    const ReplayResult twice = Compare(node, "gdsf", pool_bytes_ * 2);
    ASSERT_GT(twice.evicted_blocks, 0u);
    // The sizes cost differently here, so each check below could fail.
    EXPECT_NE(half.block_hits, same.block_hits);
    EXPECT_NE(same.block_hits, twice.block_hits);
    const std::vector<std::pair<const char*, const ReplayResult*>> scales = {
        {"0.5", &half}, {"1", &same}, {"2", &twice}};
    for (const auto& [scale, want] : scales) {
      SCOPED_TRACE(std::string("scale ") + scale);
      const std::string labels = Labels(node, scale);
      EXPECT_NEAR(Series(m, "kvlearn_resize_cost_seconds_total" + labels), want->cost_seconds(1),
                  1e-6);
      EXPECT_EQ(Series(m, "kvlearn_resize_requests_total" + labels), want->requests);
      EXPECT_EQ(Series(m, "kvlearn_resize_block_hits_total" + labels), want->block_hits);
      EXPECT_EQ(Series(m, "kvlearn_resize_admitted_bytes_total" + labels), want->admitted_bytes);
    }
    for (const char* scale : kResizeScaleLabels) {
      EXPECT_EQ(Series(m, "kvlearn_resize_requests_skipped_total" + Labels(node, scale)), 0);
    }
  }
}

// A budget below the 0.5x ghosts' residents: every ghost skips arrivals,
// counts them, and what it served and skipped make up the node's arrivals;
// the live pool (scale 1) is not bounded by it.
TEST_F(ResizeEstimatesTest, GhostsPastTheBlockBudgetSkipAndCount) {
  const uint64_t residents = pool_bytes_ / (512 * DefaultCost().BytesForTokens(1));
  auto server = Drive("lru", "tight", [&](SidecarOptions& o) {
    o.resize_estimates = true;
    o.resize_max_blocks = residents / 4;
  });
  ASSERT_NE(server, nullptr);
  const auto m = Scrape(server->metrics_port());
  for (uint32_t node = 0; node < kNodes; ++node) {
    SCOPED_TRACE("node " + std::to_string(node));
    const double arrivals = Series(m, "kvlearn_resize_requests_total" + Labels(node, "1"));
    EXPECT_EQ(arrivals, RequestsOfNode(trace_, node, kNodes).requests.size());
    for (const char* scale : kResizeScaleLabels) {
      SCOPED_TRACE(std::string("scale ") + scale);
      const double skipped =
          Series(m, "kvlearn_resize_requests_skipped_total" + Labels(node, scale));
      const double served = Series(m, "kvlearn_resize_requests_total" + Labels(node, scale));
      EXPECT_GT(skipped, 0);
      EXPECT_EQ(served + skipped, arrivals);
    }
  }
}

// The start-up replay of the event log drives the ghosts through the same
// arrivals again, so every estimate comes back equal after a restart.
TEST_F(ResizeEstimatesTest, ARestartFromTheLogCountsTheSameAgain) {
  auto server = Drive("lru", "restart", [](SidecarOptions& o) { o.resize_estimates = true; });
  ASSERT_NE(server, nullptr);
  const auto before = Scrape(server->metrics_port());
  server->Shutdown();
  server.reset();
  auto again = StartServer(options_);
  ASSERT_NE(again, nullptr);
  const auto after = Scrape(again->metrics_port());
  for (uint32_t node = 0; node < kNodes; ++node) {
    for (const char* scale : {"0.5", "1", "2"}) {
      const std::string key = "kvlearn_resize_cost_seconds_total" + Labels(node, scale);
      EXPECT_GT(Series(before, key), 0) << key;
      EXPECT_NEAR(Series(after, key), Series(before, key), 1e-6) << key;
    }
  }
}

// A reload that changes the node's policy restarts its ghosts, empty, under
// the new one: over the two halves of the trace they cost lru's replay of
// the first half plus gdsf's of the second from an empty pool.
TEST_F(ResizeEstimatesTest, GhostsFollowTheLivePolicyAcrossAReload) {
  const std::string file = dir_.File("experiment.json");
  const auto write = [&](const std::string& policy) {
    std::ofstream(file) << R"({"arms": [{"name": "live", "policy": ")" << policy
                        << R"(", "share": 1}]})";
  };
  write("lru");
  SidecarOptions o = TestOptions(dir_.File("reload"));
  o.policy.clear();
  o.experiment_path = file;
  o.cost = std::make_shared<CostModel>(DefaultCost());
  o.resize_estimates = true;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const size_t half = trace_.requests.size() / 2;
  const Trace first = Requests(trace_, [&](size_t i) { return i < half; });
  const Trace second = Requests(trace_, [&](size_t i) { return i >= half; });
  Replay(*server, first, 1);
  write("gdsf");
  auto stub = Connect(server->port());
  grpc::ClientContext ctx;
  v1::ReloadModelRequest reload;
  reload.set_experiment(true);
  v1::ReloadModelResponse resp;
  ASSERT_TRUE(stub->ReloadModel(&ctx, reload, &resp).ok());
  Replay(*server, second, 1);
  const auto m = Scrape(server->metrics_port());
  for (size_t i = 0; i < kResizeScales.size(); ++i) {
    SCOPED_TRACE(std::string("scale ") + kResizeScaleLabels[i]);
    const auto bytes = static_cast<uint64_t>(pool_bytes_ * kResizeScales[i]);
    const ReplayResult a = CompareOn(first, "lru", bytes);
    const ReplayResult b = CompareOn(second, "gdsf", bytes);
    // Had the ghosts kept lru they would count another cost.
    EXPECT_NE(CompareOn(second, "lru", bytes).block_hits, b.block_hits);
    const std::string labels = Labels(0, kResizeScaleLabels[i]);
    EXPECT_NEAR(Series(m, "kvlearn_resize_cost_seconds_total" + labels),
                a.cost_seconds(1) + b.cost_seconds(1), 1e-6);
    EXPECT_EQ(Series(m, "kvlearn_resize_block_hits_total" + labels), a.block_hits + b.block_hits);
    EXPECT_EQ(Series(m, "kvlearn_resize_requests_total" + labels), trace_.requests.size());
  }
}

// Pool sizes as `compare --pool-bytes` takes them: rounded down; the
// sidecar's unbounded pool stays unbounded at any scale.
TEST(ScaledCapacityTest, RoundsDownAndKeepsUnboundedPoolsUnbounded) {
  EXPECT_EQ(ShadowPool::ScaledCapacity(1001, 0.5), 500u);
  EXPECT_EQ(ShadowPool::ScaledCapacity(1001, 2.0), 2002u);
  EXPECT_EQ(ShadowPool::ScaledCapacity(0, 2.0), 0u);
  const uint64_t big = (uint64_t{1} << 62) + 1;  // 2x is past the unbounded size
  EXPECT_EQ(ShadowPool::ScaledCapacity(big, 2.0), kUnboundedPoolBytes);
  EXPECT_EQ(ShadowPool::ScaledCapacity(big, 0.5), big / 2);
  EXPECT_EQ(ShadowPool::ScaledCapacity(kUnboundedPoolBytes, 0.5), kUnboundedPoolBytes);
}

TEST_F(ResizeEstimatesTest, OffByDefault) {
  auto server = Drive("lru", "off", [](SidecarOptions&) {});
  ASSERT_NE(server, nullptr);
  for (const auto& [key, value] : Scrape(server->metrics_port())) {
    EXPECT_EQ(key.rfind("kvlearn_resize_", 0), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace kvlearn
