// Helpers of the restart tests: a small chat trace played as serving nodes
// through `kvlearn loadgen`'s protocol, and the same questions asked of a
// server that restarted and of one that never did (GetStatus of every pool,
// then per node a partial eviction, an admission and a drain that reveals
// the policy's whole eviction order).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {

inline constexpr uint32_t kNodes = 2;

inline Trace SmallChatTrace(uint32_t requests = 250) {
  ChatWorkloadOptions o;
  o.seed = 7;
  o.requests = requests;
  o.sessions_per_second = 3;
  o.mean_think_time_s = 5;
  return GenerateChatTrace(o);
}

// A trace, its replay form (which points at the trace) and the pool size the
// nodes get.
struct Fed {
  explicit Fed(Trace t) : trace(std::move(t)), replay(BuildReplayTrace(trace, DefaultCost())) {
    EXPECT_TRUE(replay.ok()) << replay.status();
    if (replay.ok()) pool_bytes = replay->distinct_block_bytes / 20;  // tight: many evictions
  }
  Fed(const Fed&) = delete;
  Trace trace;
  absl::StatusOr<ReplayTrace> replay;
  uint64_t pool_bytes = 0;
};

// Plays the trace as kNodes serving nodes against the server on `port`.
inline LoadgenResult Feed(const Fed& fed, int port) {
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(port);
  lo.pool_bytes = fed.pool_bytes;
  lo.nodes = kNodes;
  lo.concurrency = 1;
  auto got = RunLoadgen(*fed.replay, DefaultCost(), lo);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : LoadgenResult{};
}

inline std::string PoolsOf(v1::Retention::Stub& stub) {
  grpc::ClientContext ctx;
  v1::GetStatusResponse st;
  const grpc::Status s = stub.GetStatus(&ctx, {}, &st);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::string out = "policy " + st.policy() + " log_next_sequence " +
                    std::to_string(st.log_next_sequence()) + " model_version " +
                    st.model_version() + "\n";
  for (const auto& p : st.pools()) out += p.DebugString();
  return out;
}

// A RankEviction of `bytes` on `node`'s pool; DebugString of the answer,
// or with `ids_only` its victims as "id:bytes " pairs without scores (a
// rebuilt lru renumbers them).
inline std::string Rank(v1::Retention::Stub& stub, const std::string& node, int64_t bytes,
                        bool ids_only = false) {
  grpc::ClientContext ctx;
  v1::RankRequest r;
  r.set_node_id(node);
  r.set_bytes_to_free(bytes);
  v1::RankResponse out;
  const grpc::Status s = stub.RankEviction(&ctx, r, &out);
  if (!s.ok()) return "error " + s.error_message();
  if (!ids_only) return out.DebugString();
  std::string ids;
  for (const auto& v : out.victims()) {
    ids += std::to_string(v.block_id()) + ":" + std::to_string(v.bytes()) + " ";
  }
  return ids;
}

inline std::string VictimIds(v1::Retention::Stub& stub, const std::string& node, int64_t bytes) {
  return Rank(stub, node, bytes, /*ids_only=*/true);
}

inline std::string AdmitFresh(v1::Retention::Stub& stub, const std::string& node, uint64_t id) {
  grpc::ClientContext ctx;
  v1::AdmitRequest r;
  r.set_node_id(node);
  r.set_timestamp_us(1);
  auto* c = r.add_candidates();
  c->set_block_id(id);
  c->set_tokens(512);
  c->set_bytes(1 << 20);
  v1::AdmitResponse out;
  const grpc::Status s = stub.Admit(&ctx, r, &out);
  return s.ok() ? out.DebugString() : "error " + s.error_message();
}

// Asks both servers the same questions, in the same order, and expects the
// same answers: status of every pool, then per node a partial eviction, an
// admission, and a drain that reveals the policy's whole eviction order.
inline void ExpectSameAnswers(v1::Retention::Stub& never, v1::Retention::Stub& restarted,
                              uint64_t pool_bytes) {
  const std::string pools = PoolsOf(never);
  EXPECT_EQ(PoolsOf(restarted), pools);
  EXPECT_NE(pools.find("resident_blocks"), std::string::npos) << "nothing resident: a weak test";
  for (uint32_t n = 0; n < kNodes; ++n) {
    const std::string node = "loadgen-" + std::to_string(n);
    const std::string first = Rank(never, node, static_cast<int64_t>(pool_bytes / 4));
    EXPECT_EQ(Rank(restarted, node, static_cast<int64_t>(pool_bytes / 4)), first) << node;
    EXPECT_NE(first.find("victims"), std::string::npos) << first;
    const std::string admit = AdmitFresh(never, node, 0xfeedbeefull + n);
    EXPECT_EQ(AdmitFresh(restarted, node, 0xfeedbeefull + n), admit) << node;
    const std::string drain = Rank(never, node, int64_t{1} << 60);
    EXPECT_EQ(Rank(restarted, node, int64_t{1} << 60), drain) << node;
  }
  EXPECT_EQ(PoolsOf(restarted), PoolsOf(never));
}

// A server on free loopback ports without /metrics, pricing blocks with the
// tests' default cost model.
inline SidecarOptions RestartTestOptions(const std::string& dir, const std::string& policy) {
  SidecarOptions o = TestOptions(dir, policy);
  o.metrics_listen = "";
  o.cost = std::make_shared<CostModel>(DefaultCost());
  return o;
}

// A test name for a policy parameter ("kvlearn-cars" -> "kvlearn_cars").
inline std::string PolicyTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

}  // namespace kvlearn
