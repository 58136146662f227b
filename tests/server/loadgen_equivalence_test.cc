// One contract, both drivers: for every policy the factory knows, the
// simulator (`kvlearn compare`) and a real sidecar over gRPC on loopback, fed
// the same trace by `kvlearn loadgen`'s logic (one node), make the same
// decisions: equal block hits, hit tokens, admitted bytes, evictions and TTFT.
// Counters summed over hundreds of admissions and evictions only agree if
// every single decision does (a different victim changes later hits).
// `learned` runs with a small model file built here, loaded by both sides.
#include <gtest/gtest.h>

#include <algorithm>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

// Its requests labelled with every type and several turns, as a Bailian
// trace's are: the sidecar's features (of `learned` and kvlearn-cars) read
// what the simulator's do only if the request arrivals carry both.
Trace SmallChatTrace() {
  ChatWorkloadOptions o;
  o.seed = 7;
  o.requests = 250;
  o.sessions_per_second = 3;
  o.mean_think_time_s = 5;
  Trace trace = GenerateChatTrace(o);
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    trace.requests[i].type = static_cast<RequestType>(i % kRequestTypes);
    trace.requests[i].turn = static_cast<uint16_t>(i % 5);
  }
  return trace;
}

// Every name the factory knows. Offline oracles read the trace's future,
// which a sidecar never has: the server refuses them at start-up (tested
// below), so they have no sidecar side to compare.
std::vector<std::string> OnlinePolicies() {
  std::vector<std::string> names;
  for (std::string_view n : PolicyNames()) {
    if (!IsOfflinePolicy(n)) names.emplace_back(n);
  }
  return names;
}

// One node replaying a small chat trace through the sidecar must count
// exactly what the simulator counts for `policy`, given the test model when
// `with_model` (both sides load the same file, as an operator's would).
void ExpectSidecarEqualsSimulator(const std::string& policy, bool with_model) {
  const Trace trace = SmallChatTrace();
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const uint64_t pool_bytes = replay->distinct_block_bytes / 20;  // tight: many evictions

  TempDir dir;
  PoolReplayOptions sim_options;
  sim_options.pool_bytes = pool_bytes;
  SidecarOptions o = TestOptions(dir.path(), policy);
  if (with_model) {
    o.model_path = dir.File("model.pt");
    ASSERT_TRUE(CopyTestModel(o.model_path));
    auto model = LearnedModel::Load(o.model_path);
    ASSERT_TRUE(model.ok()) << model.status();
    sim_options.model = *model;
  }
  auto expected = ReplayPool(*replay, cost, policy, sim_options);
  ASSERT_TRUE(expected.ok()) << expected.status();

  o.metrics_listen = "";
  o.cost = std::make_shared<CostModel>(cost);
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(server->port());
  lo.pool_bytes = pool_bytes;
  auto got = RunLoadgen(*replay, cost, lo);
  ASSERT_TRUE(got.ok()) << got.status();

  const ReplayResult& g = got->result;
  const ReplayResult& e = *expected;
  EXPECT_EQ(g.policy, policy);
  EXPECT_EQ(g.requests, e.requests);
  EXPECT_EQ(g.block_accesses, e.block_accesses);
  EXPECT_EQ(g.block_hits, e.block_hits);
  EXPECT_EQ(g.hit_tokens, e.hit_tokens);
  EXPECT_EQ(g.loaded_bytes, e.loaded_bytes);
  EXPECT_EQ(g.admitted_bytes, e.admitted_bytes);
  EXPECT_EQ(g.evicted_blocks, e.evicted_blocks);
  EXPECT_DOUBLE_EQ(g.ttft_ms.p99, e.ttft_ms.p99);
  if (policy != "no-cache") {
    EXPECT_GT(e.evicted_blocks, 0u);  // the test exercises eviction
  }
  ASSERT_EQ(got->rpcs.size(), 3u);
  EXPECT_GT(got->rpcs[0].calls, 0u);
}

class LoadgenEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoadgenEquivalenceTest, OneNodeThroughTheSidecarEqualsTheSimulator) {
  ExpectSidecarEqualsSimulator(GetParam(), PolicyUsesModel(GetParam()));
}

// `learned` runs without a model too (on its lru and gdsf experts), in the
// simulator and in the sidecar alike.
TEST(LoadgenEquivalenceWithoutModelTest, LearnedWithoutAModelThroughTheSidecarEqualsTheSimulator) {
  ExpectSidecarEqualsSimulator("learned", false);
}

INSTANTIATE_TEST_SUITE_P(EveryOnlinePolicy, LoadgenEquivalenceTest,
                         ::testing::ValuesIn(OnlinePolicies()), [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(LoadgenEquivalenceOfflineTest, TheSidecarRefusesEveryOfflinePolicy) {
  int offline = 0;
  for (std::string_view name : PolicyNames()) {
    if (!IsOfflinePolicy(name)) continue;
    ++offline;
    TempDir dir;
    SidecarOptions o = TestOptions(dir.path(), std::string(name));
    o.metrics_listen = "";
    auto server = SidecarServer::Start(o);
    ASSERT_FALSE(server.ok()) << name;
    EXPECT_NE(server.status().message().find("offline"), std::string::npos) << server.status();
  }
  EXPECT_GE(offline, 1);  // belady at least
}

TEST(LoadgenTest, ManyNodesOnManyThreadsReplayEveryRequest) {
  const Trace trace = SmallChatTrace();
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path(), "lru");
  o.metrics_listen = "";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(server->port());
  lo.pool_bytes = replay->distinct_block_bytes / 20;
  lo.nodes = 4;
  lo.concurrency = 3;
  auto got = RunLoadgen(*replay, cost, lo);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->result.requests, trace.requests.size());
  EXPECT_EQ(got->result.block_accesses, replay->block_accesses());
  // Each node holds its own pool: four pools on the server.
  auto stub = Connect(server->port());
  grpc::ClientContext ctx;
  v1::GetStatusResponse st;
  ASSERT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
  EXPECT_EQ(st.pools_size(), 4);
  uint64_t requests = 0;
  for (const auto& p : st.pools()) requests += p.requests();
  EXPECT_EQ(requests, trace.requests.size());

  Comparison c;
  c.trace = "chat";
  c.results.push_back(got->result);
  const std::string json = FormatLoadgenJson(c, *got);
  EXPECT_NE(json.find("\"rpc_p50_us\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"block_hit_ratio\""), std::string::npos);
  EXPECT_EQ(json.substr(json.size() - 3), "}}\n");
}

}  // namespace
}  // namespace kvlearn
