// Issue 13, "no ghost pools": a refused event or call used to create an empty
// (node, tier) pool that a restart's log replay did not recreate, so GetStatus
// differed across a restart. Pools are now created only by accepted input.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/node_pools.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

NodePoolsOptions Options(bool strict = false) {
  NodePoolsOptions o;
  o.cost = std::make_shared<CostModel>(DefaultCost());
  o.strict_nodes = strict;
  if (strict) o.known_nodes = {"known"};
  return o;
}

int PoolCount(const NodePools& pools) {
  v1::GetStatusResponse status;
  pools.FillStatus(status);
  return status.pools_size();
}

v1::Event Hit(const std::string& node, uint64_t id) {
  v1::Event e;
  e.set_node_id(node);
  e.mutable_block_hit()->set_block_id(id);
  return e;
}

v1::Event Arrival(const std::string& node, uint64_t id) {
  v1::Event e;
  e.set_node_id(node);
  e.mutable_request_arrival()->add_block_ids(id);
  return e;
}

v1::AdmitRequest AdmitUnder(const std::string& node, uint64_t parent, uint64_t id) {
  v1::AdmitRequest r;
  r.set_node_id(node);
  auto* c = r.add_candidates();
  c->set_block_id(id);
  c->set_parent_id(parent);
  c->set_tokens(512);
  c->set_bytes(1 << 20);
  return r;
}

TEST(PoolCreationTest, RefusedEventsAndCallsCreateNoPool) {
  NodePools pools(Options());
  // A hit on a block the new pool never stored: FAILED_PRECONDITION.
  EXPECT_EQ(pools.Apply(Hit("n1", 7)).code(), absl::StatusCode::kFailedPrecondition);
  // An Admit under a parent the new pool never saw: FAILED_PRECONDITION.
  EXPECT_EQ(pools.Admit(AdmitUnder("n2", 1, 2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // RankEviction naming a candidate the new pool never saw: NOT_FOUND.
  v1::RankRequest rank;
  rank.set_node_id("n3");
  rank.add_candidate_ids(5);
  rank.set_bytes_to_free(1);
  EXPECT_EQ(pools.RankEviction(rank).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(PoolCount(pools), 0);
  EXPECT_EQ(pools.counters().shards.load(), 0u);

  // Accepted input does create its pool, once.
  EXPECT_TRUE(pools.Apply(Arrival("n1", 7)).ok());
  EXPECT_TRUE(pools.Apply(Arrival("n1", 8)).ok());
  EXPECT_EQ(PoolCount(pools), 1);
  EXPECT_EQ(pools.counters().shards.load(), 1u);
  EXPECT_EQ(pools.EventsApplied("n1", v1::TIER_POOL), 2u);
}

TEST(PoolCreationTest, UnknownNodeUnderStrictNodesCreatesNoPool) {
  NodePools pools(Options(/*strict=*/true));
  EXPECT_EQ(pools.Apply(Arrival("stranger", 1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pools.Admit(AdmitUnder("stranger", 1, 2)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(PoolCount(pools), 0);
  EXPECT_TRUE(pools.Apply(Arrival("known", 1)).ok());
  EXPECT_EQ(PoolCount(pools), 1);
}

// The server view: what GetStatus lists before a restart, it lists after.
TEST(PoolCreationTest, GetStatusListsTheSamePoolsAfterARestart) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.metrics_listen = "";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  v1::EventBatch batch;
  *batch.add_events() = Hit("ghost", 9);     // refused
  *batch.add_events() = Arrival("real", 3);  // accepted
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, {batch}, &summary).ok());
  EXPECT_EQ(summary.accepted(), 1u);
  EXPECT_EQ(summary.rejected(), 1u);
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse out;
    v1::AdmitRequest r = AdmitUnder("ghost2", 1, 2);
    EXPECT_EQ(stub->Admit(&ctx, r, &out).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  auto pools = [](v1::Retention::Stub& s) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    EXPECT_TRUE(s.GetStatus(&ctx, {}, &st).ok());
    std::string out;
    for (const auto& p : st.pools()) out += p.DebugString();
    return out;
  };
  const std::string before = pools(*stub);
  EXPECT_EQ(before.find("ghost"), std::string::npos) << before;
  EXPECT_NE(before.find("real"), std::string::npos) << before;
  server.reset();
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  stub = Connect(server->port());
  EXPECT_EQ(pools(*stub), before);
}

}  // namespace
}  // namespace kvlearn
