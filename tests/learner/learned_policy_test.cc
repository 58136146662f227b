// End to end: train on one generated trace, replay another (other seed).
// The learned policy must move fewer bytes than LRU and cost less.
#include <gtest/gtest.h>

#include "datasets/workload_generator.h"
#include "learner/sample_recorder.h"
#include "learner/trainer.h"
#include "sim/pool_simulator.h"

namespace kvlearn {
namespace {

TEST(LearnedPolicyTest, BeatsLruOnTrafficItWasNotTrainedOn) {
  const CostModel cost(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  ChatWorkloadOptions g;
  g.requests = 6000;
  g.seed = 31;
  const Trace train_trace = GenerateChatTrace(g);
  g.seed = 32;
  const Trace test_trace = GenerateChatTrace(g);
  auto train_replay = BuildReplayTrace(train_trace, cost);
  auto test_replay = BuildReplayTrace(test_trace, cost);
  ASSERT_TRUE(train_replay.ok() && test_replay.ok());

  RecordOptions record;
  record.pool_bytes = train_replay->distinct_block_bytes / 50;
  record.end_request = 4800;
  auto samples = RecordSamples(*train_replay, cost, record);
  ASSERT_TRUE(samples.ok()) << samples.status();
  TrainOptions options;
  options.max_epochs = 10;
  auto mlp = TrainMlp(samples->Slice(0, 3600), samples->Slice(3600, 4800), options, nullptr);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ModelMetadata meta;
  meta.schema_version = kFeatureSchemaVersion;
  meta.horizons_seconds = record.horizons_seconds;
  meta.feature_mean = mlp->feature_mean;
  meta.feature_std = mlp->feature_std;
  auto model = MlpModel::Create(mlp->layers, meta, "test");
  ASSERT_TRUE(model.ok()) << model.status();

  for (const int share : {50, 20}) {  // pool = 2% and 5% of distinct bytes
    SCOPED_TRACE(share);
    PoolReplayOptions o;
    o.pool_bytes = test_replay->distinct_block_bytes / share;
    o.eval_from = 0.5;
    auto lru = ReplayPool(*test_replay, cost, "lru", o);
    o.model = *model;
    auto learned = ReplayPool(*test_replay, cost, "learned", o);
    ASSERT_TRUE(lru.ok() && learned.ok());
    // The objective is cost (prefill GPU-s + transfer s), not tokens alone:
    // pricing pool space may recompute a few more tokens to move fewer bytes.
    EXPECT_LT(learned->transfer_bytes(), lru->transfer_bytes());
    EXPECT_LT(learned->cost_seconds(1), lru->cost_seconds(1));
  }
}

}  // namespace
}  // namespace kvlearn
