// The learned router/replicator's decisions on hand-computed scenarios, with
// the burst probability p injected through a constant model.
#include "sim/learned_replication.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/mlp_model.h"
#include "sim/cluster_simulator.h"

namespace kvlearn {
namespace {

// A model that predicts p for every block at one 15 s horizon: no weights,
// the bias is logit(p).
std::shared_ptr<const LearnedModel> ConstantModel(double p) {
  DenseLayer l;
  l.weight = Eigen::MatrixXf::Zero(1, kNumFeatures);
  l.bias = Eigen::VectorXf::Constant(1, static_cast<float>(std::log(p / (1 - p))));
  ModelMetadata meta;
  meta.schema_version = kFeatureSchemaVersion;
  meta.horizons_seconds = {15};
  meta.feature_mean.assign(kNumFeatures, 0.0f);
  meta.feature_std.assign(kNumFeatures, 1.0f);
  return *MlpModel::Create({l}, meta, "constant");
}

// As in cluster_simulator_test: 4-token blocks of 4e6 B, prefill 1 ms per
// token (linear), a block copies in 2 ms (RDMA 2e6 B/ms).
CostModel RoundCosts() {
  ModelProfile m{"toy", 1, 1, 250000, 2, 1.0};
  HardwareProfile h{"toy", 1.0, 0.0, 1u << 30, 1.0, 2.0, 4.0, 1.0, 1.0, 1};
  return CostModel(m, h, RecomputeForm::kKvlearnPaper);  // alpha_bw only: linear
}

ClusterResult Simulate(const Trace& t, double p) {
  static const CostModel cost = RoundCosts();
  auto replay = BuildReplayTrace(t, cost);
  EXPECT_TRUE(replay.ok()) << replay.status();
  ClusterOptions o;
  o.prefill_nodes = 2;
  o.hbm_bytes_per_node = 1'000'000'000;
  o.router = "learned";
  o.model = ConstantModel(p);
  o.keep_ttft_samples = true;
  auto r = ReplayCluster(*replay, cost, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ClusterResult{};
}

// An 8-block shared prefix P (32 tokens) and a 1-block suffix per request.
std::vector<uint64_t> PrefixPlus(uint64_t suffix) { return {1, 2, 3, 4, 5, 6, 7, 8, suffix}; }

TEST(ConstantModelTest, PredictsItsProbability) {
  std::vector<float> x(kNumFeatures, 3.0f), out(1);
  ConstantModel(0.9)->Predict(x, out);
  EXPECT_NEAR(out[0], 0.9, 1e-6);
}

// r0 = P + a at 0 goes to node 0 (both idle; ties go to the lower node) and
// runs 0-36. r1 = P + b at 0 shares P (p applies, w = p / 2 nodes):
//   node 0: backlog 36 + (1 + w) * 4 (P is on its way there)
//   node 1: 0 + (1 + w) * 36 recomputing; with a copy, ready at 36 + 16 ms
//           of copy + (1 + w) * 4: never the least.
// p = 0.1 (w = 0.05): node 1 recomputes, 37.8 < 40.2; TTFT 36.
// p = 0.9 (w = 0.45): node 0, 41.8 < 52.2; r1 queues behind r0, TTFT 40,
// and 32 tokens fewer are recomputed: a predicted burst keeps the prefix on
// the node that is computing it.
TEST(LearnedReplicationTest, PredictedBurstQueuesBehindTheWarmNode) {
  Trace t;
  t.block_size = 4;
  t.Add(0, 36, 1, PrefixPlus(100));
  t.Add(0, 36, 1, PrefixPlus(101));
  const ClusterResult lone = Simulate(t, 0.1);
  ASSERT_EQ(lone.ttft_samples_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(lone.ttft_samples_ms[1], 36);
  EXPECT_EQ(lone.replay.recomputed_tokens, 72u);
  const ClusterResult burst = Simulate(t, 0.9);
  ASSERT_EQ(burst.ttft_samples_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(burst.ttft_samples_ms[1], 40);
  EXPECT_EQ(burst.replay.recomputed_tokens, 40u);
  EXPECT_EQ(burst.replication_bytes, 0u);
}

// Q (62 fresh tokens) at 0 takes node 0 (tie). r0 = P + a goes to node 1
// (backlog 0 < 62) and computes P by 36. r1..r7 = P + x: node 1 costs
// backlog + (1 + w) * 4 with backlog 36, 40, ..., 60; node 0 with a copy
// costs max(62, 36 + 16) + (1 + w) * 4 = 66 + 4w (recomputing: 62 + 36(1+w)).
// So r1..r7 queue on node 1 (r7: 64 + 4w < 66 + 4w) and r8 (node 1 at
// 68 + 4w) goes to node 0 with a copy of P: it leaves node 1 at 36, lands at
// 52 while Q runs, and r8 starts at 62 with P in HBM: TTFT 62 + 4 = 66.
TEST(LearnedReplicationTest, CopiesThePrefixWhenTheWarmNodeIsBusier) {
  Trace t;
  t.block_size = 4;
  t.Add(0, 62, 1,
        std::vector<uint64_t>{50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65});
  for (uint64_t x = 100; x <= 108; ++x) t.Add(0, 36, 1, PrefixPlus(x));
  const ClusterResult r = Simulate(t, 0.1);
  ASSERT_EQ(r.ttft_samples_ms.size(), 10u);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[0], 62);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[1], 36);
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[8], 64);  // r7, last on node 1
  EXPECT_DOUBLE_EQ(r.ttft_samples_ms[9], 66);  // r8, on node 0 with the copy
  EXPECT_EQ(r.replications, 1u);
  EXPECT_EQ(r.replication_bytes, 32'000'000u);  // 8 blocks of 4e6 B
  EXPECT_EQ(r.burst_triggers, 1u);
}

TEST(LearnedReplicationTest, NeedsAModel) {
  ReplicationOptions o;
  EXPECT_FALSE(CreateReplicationPolicy("learned", o).ok());
  o.model = ConstantModel(0.5);
  EXPECT_TRUE(CreateReplicationPolicy("learned", o).ok());
}

}  // namespace
}  // namespace kvlearn
