// The parts of "kvlearn-cars" (policies/kvlearn_cars/) checked alone, on
// cases small enough to work by hand: the PI threshold's step and its
// anti-windup, the running normaliser's moments and map, the MLP's SGD step,
// label windows and their expiry, the replay ring and the holding cost U.
// kvlearn_cars_test.cc checks the assembled policy on replays.
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/block_catalog.h"
#include "gtest/gtest.h"
#include "policies/kvlearn_cars/holding_cost.h"
#include "policies/kvlearn_cars/online_mlp.h"
#include "policies/kvlearn_cars/pi_threshold.h"
#include "policies/kvlearn_cars/replay_buffer.h"
#include "policies/kvlearn_cars/reuse_labels.h"
#include "policies/kvlearn_cars/running_normalizer.h"

namespace kvlearn {
namespace {

// ---------------------------------------------------------------- PiThreshold

PiThresholdOptions HandGains() {
  PiThresholdOptions o;
  o.target = 0.85;
  o.kp = 2;
  o.ki_per_second = 0.01;
  o.initial_integral = 0;
  o.limit = 10;
  return o;
}

TEST(PiThresholdTest, StepAddsProportionalAndIntegralTerms) {
  PiThreshold pi(HandGains());
  EXPECT_EQ(pi.theta(), 0);
  // Occupancy 0.95 after the rule admitted something: e = 0.95 - 0.85 = 0.1,
  // I = 0 + Ki * e * dt = 0.01 * 0.1 * 10 = 0.01,
  // theta = Kp * e + I = 2 * 0.1 + 0.01 = 0.21.
  pi.NoteAdmission();
  pi.Step(0.95, 10);
  EXPECT_NEAR(pi.integral(), 0.01, 1e-12);
  EXPECT_NEAR(pi.theta(), 0.21, 1e-12);
  // Same error, a refusal since the last step: I = 0.01 + 0.01 * 0.1 * 10 is
  // not taken (a refusal does not let I rise), so theta stays 0.21.
  pi.NoteRefusal();
  pi.Step(0.95, 10);
  EXPECT_NEAR(pi.integral(), 0.01, 1e-12);
  EXPECT_NEAR(pi.theta(), 0.21, 1e-12);
}

TEST(PiThresholdTest, IntegralMovesOnlyTheWayTheDecisionsAllow) {
  PiThreshold pi(HandGains());
  pi.NoteAdmission();
  pi.Step(0.95, 10);  // I = 0.01 (previous test)
  // Under target (e = 0.75 - 0.85 = -0.1) with only admissions since the last
  // step: lowering theta could not admit more than everything, so I holds at
  // 0.01 and theta = 2 * -0.1 + 0.01 = -0.19.
  pi.NoteAdmission();
  pi.Step(0.75, 20);
  EXPECT_NEAR(pi.integral(), 0.01, 1e-12);
  EXPECT_NEAR(pi.theta(), -0.19, 1e-12);
  // The flags reset at every step: with no decision at all I holds too.
  pi.Step(0.75, 20);
  EXPECT_NEAR(pi.integral(), 0.01, 1e-12);
  // After a refusal it integrates: I = 0.01 + 0.01 * -0.1 * 20 = -0.01,
  // theta = -0.2 - 0.01 = -0.21.
  pi.NoteRefusal();
  pi.Step(0.75, 20);
  EXPECT_NEAR(pi.integral(), -0.01, 1e-12);
  EXPECT_NEAR(pi.theta(), -0.21, 1e-12);
}

TEST(PiThresholdTest, ThetaAndIntegralStayWithinTheLimit) {
  PiThresholdOptions o = HandGains();
  o.initial_integral = 12;  // clamped to the limit 10 at construction
  o.ki_per_second = 1;
  PiThreshold pi(o);
  EXPECT_EQ(pi.integral(), 10);
  EXPECT_EQ(pi.theta(), 10);
  // e = 0.15: I would be 10 + 1 * 0.15 * 100 = 25, theta 25.3; both clamp.
  pi.NoteAdmission();
  pi.Step(1.0, 100);
  EXPECT_EQ(pi.integral(), 10);
  EXPECT_EQ(pi.theta(), 10);
  // e = -0.85: I = 10 - 0.85 * 1 = 9.15, theta = 2 * -0.85 + 9.15 = 7.45.
  pi.NoteRefusal();
  pi.Step(0.0, 1);
  EXPECT_NEAR(pi.integral(), 9.15, 1e-12);
  EXPECT_NEAR(pi.theta(), 7.45, 1e-12);
}

// ---------------------------------------------------------- RunningNormalizer

using Normalizer2 = RunningNormalizer<2>;

Normalizer2::Vector Vec(float a, float b) { return Normalizer2::Vector(a, b); }

TEST(RunningNormalizerTest, ExactMomentsOverTheFirstVectors) {
  Normalizer2 n;
  // Column 0 sees 1, 3, 5; column 1 sees 7 every time.
  // After 1: w = 1, mean = 1, var = (1 - 1) * ... = 0.
  n.Observe(Vec(1, 7));
  EXPECT_FLOAT_EQ(n.mean()(0), 1);
  EXPECT_FLOAT_EQ(n.variance()(0), 0);
  // After 3: w = 1/2, delta = 2, mean = 2, var = (1/2) * (0 + (1/2) * 4) = 1,
  // the population variance of {1, 3}.
  n.Observe(Vec(3, 7));
  EXPECT_FLOAT_EQ(n.mean()(0), 2);
  EXPECT_FLOAT_EQ(n.variance()(0), 1);
  // After 5: w = 1/3, delta = 3, mean = 3, var = (2/3) * (1 + (1/3) * 9) = 8/3,
  // the population variance of {1, 3, 5} ((4 + 0 + 4) / 3).
  n.Observe(Vec(5, 7));
  EXPECT_FLOAT_EQ(n.mean()(0), 3);
  EXPECT_NEAR(n.variance()(0), 8.0 / 3, 1e-6);
  EXPECT_FLOAT_EQ(n.mean()(1), 7);
  EXPECT_FLOAT_EQ(n.variance()(1), 0);
  EXPECT_EQ(n.observed(), 3u);
}

TEST(RunningNormalizerTest, MapIsTakenAtTheFirstVectorAndClipped) {
  Normalizer2 n;
  // Before any vector the map is the identity (then clipped to +-5).
  EXPECT_FLOAT_EQ(n.Normalise(Vec(2, -9))(0), 2);
  EXPECT_FLOAT_EQ(n.Normalise(Vec(2, -9))(1), -5);
  // The first vector sets the map: mean 1 and 7, variance 0 and 0, so the
  // scale is 1 / sqrt(0 + 1e-4) = 100 in both columns.
  n.Observe(Vec(1, 7));
  n.Observe(Vec(3, 7));
  n.Observe(Vec(5, 7));
  // The later two moved the moments (mean 3) but not the map, which still
  // says (x - 1) * 100 and (x - 7) * 100: 1.02 -> 2, 6.99 -> -1.
  const Normalizer2::Vector y = n.Normalise(Vec(1.02f, 6.99f));
  EXPECT_NEAR(y(0), 2, 1e-3);
  EXPECT_NEAR(y(1), -1, 1e-3);
  // 3 -> 200 and 0 -> -700 clip to +5 and -5.
  EXPECT_FLOAT_EQ(n.Normalise(Vec(3, 0))(0), 5);
  EXPECT_FLOAT_EQ(n.Normalise(Vec(3, 0))(1), -5);
}

TEST(RunningNormalizerTest, MapIsRefreshedFromTheMomentsEvery256Vectors) {
  Normalizer2 n;
  // One 1 and then 3s in column 0. After n vectors the share of 1s is
  // p = 1/n: mean = 3 - 2/n, population variance = 2^2 * p * (1 - p)
  // = 4 (n - 1) / n^2.
  n.Observe(Vec(1, 0));
  for (int i = 2; i <= 256; ++i) n.Observe(Vec(3, 0));
  // Vector 256: still the first map, (x - 1) * 100; 1.01 -> 1.
  EXPECT_NEAR(n.Normalise(Vec(1.01f, 0))(0), 1, 1e-3);
  // Vector 257 refreshes it: mean = 3 - 2/257 = 2.9922179, variance
  // = 1024 / 66049 = 0.0155036, scale = 1 / sqrt(0.0155036 + 1e-4) = 8.0054735,
  // so 3 -> (2/257) * 8.0054735 = 0.0622994.
  n.Observe(Vec(3, 0));
  EXPECT_NEAR(n.mean()(0), 2.9922179, 1e-5);
  EXPECT_NEAR(n.variance()(0), 0.0155036, 1e-5);
  EXPECT_NEAR(n.Normalise(Vec(3, 0))(0), 0.0622994, 1e-4);
  // 1 -> (1 - 2.9922179) * 8.0054735 = -15.95 clips to -5.
  EXPECT_FLOAT_EQ(n.Normalise(Vec(1, 0))(0), -5);
}

// ------------------------------------------------------------------ OnlineMlp

TEST(OnlineMlpTest, StepOnTheZeroInputMovesOnlyTheOutputBias) {
  // At x = 0 the hidden layer is ReLU(W1 * 0 + b1) = ReLU(0) = 0 (b1 starts
  // at 0), so P = sigmoid(b2) = sigmoid(0) = 0.5 whatever the weights.
  OnlineMlp mlp(1);
  const OnlineMlp::Input zero = OnlineMlp::Input::Zero();
  EXPECT_FLOAT_EQ(mlp.Predict(zero), 0.5f);
  // Label 1, lr 0.1: dloss/dlogit = P - 1 = -0.5; the gradients of W2, b1
  // and W1 are multiplied by h = 0, x = 0 or ReLU'(0) = 0, so only
  // b2 -= 0.1 * -0.5 moves, to 0.05: P = sigmoid(0.05) = 0.5124974.
  mlp.SgdStep(zero, 1, 0.1f);
  EXPECT_NEAR(mlp.Predict(zero), 0.5124974, 1e-6);
  // Again: b2 = 0.05 + 0.1 * (1 - 0.5124974) = 0.0987503,
  // P = sigmoid(0.0987503) = 0.5246675.
  mlp.SgdStep(zero, 1, 0.1f);
  EXPECT_NEAR(mlp.Predict(zero), 0.5246675, 1e-6);
}

TEST(OnlineMlpTest, StepLowersTheCrossEntropyOfItsSample) {
  // A small enough step along the negative gradient lowers the loss of the
  // sample it was taken on, for either label: -log P for label 1 falls as P
  // rises, -log(1 - P) for label 0 as P falls.
  OnlineMlp::Input x;
  for (int i = 0; i < OnlineMlp::kInputs; ++i) x(i) = 0.25f * static_cast<float>(i % 5) - 0.5f;
  for (const float label : {1.0f, 0.0f}) {
    OnlineMlp mlp(42);
    float p = mlp.Predict(x);
    for (int step = 0; step < 5; ++step) {
      mlp.SgdStep(x, label, 5e-3f);
      const float next = mlp.Predict(x);
      if (label == 1) {
        EXPECT_GT(next, p) << "step " << step;
      } else {
        EXPECT_LT(next, p) << "step " << step;
      }
      p = next;
    }
  }
}

TEST(OnlineMlpTest, SameSeedSameWeights) {
  OnlineMlp::Input x = OnlineMlp::Input::Constant(0.5f);
  // Identical weights give identical outputs bit for bit; another seed draws
  // other weights (the output of x could only coincide by accident).
  EXPECT_EQ(OnlineMlp(7).Predict(x), OnlineMlp(7).Predict(x));
  EXPECT_NE(OnlineMlp(7).Predict(x), OnlineMlp(8).Predict(x));
}

// ---------------------------------------------------------------- ReuseLabels

CarsRawInputs Inputs(float first) {
  CarsRawInputs in{};
  in[0] = first;
  return in;
}

BlockCatalog TwoBlocks() {
  BlockCatalog catalog;
  BlockMeta a;
  a.hash_id = 11;
  a.bytes = 100;
  BlockMeta b;
  b.hash_id = 22;
  b.bytes = 50;
  catalog.Add(a);
  catalog.Add(b);
  return catalog;
}

TEST(ReuseLabelsTest, WindowExpiresNegativeOnlyOnceOlderThanTheHorizon) {
  const BlockCatalog catalog = TwoBlocks();
  ReuseLabels labels(catalog, /*horizon_ms=*/1000);
  labels.Open(0, Inputs(1), 0.3f, /*now_ms=*/0);
  labels.Open(1, Inputs(2), 0.6f, /*now_ms=*/500);
  EXPECT_EQ(labels.open_bytes(), 150u);
  // At 1000 block 0's window is exactly H old: not expired yet.
  EXPECT_FALSE(labels.CloseNextExpired(1000).has_value());
  // At 1001 it is: a negative label with what was recorded at its opening.
  const std::optional<ReuseLabels::Label> l = labels.CloseNextExpired(1001);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->block, 0u);
  EXPECT_EQ(l->inputs[0], 1);
  EXPECT_EQ(l->predicted, 0.3f);
  EXPECT_FALSE(l->reused);
  EXPECT_FALSE(labels.IsOpen(0));
  EXPECT_EQ(labels.open_bytes(), 50u);
  // Block 1 opened at 500: 501 ms old, still open.
  EXPECT_FALSE(labels.CloseNextExpired(1001).has_value());
  EXPECT_TRUE(labels.IsOpen(1));
}

TEST(ReuseLabelsTest, ReopenedWindowExpiresFromItsNewStart) {
  const BlockCatalog catalog = TwoBlocks();
  ReuseLabels labels(catalog, /*horizon_ms=*/1000);
  labels.Open(1, Inputs(2), 0.6f, /*now_ms=*/500);
  // A hit at 1200 (700 ms later, within H): positive, then a new window.
  const ReuseLabels::Label hit = labels.Close(1, /*reused=*/true);
  EXPECT_EQ(hit.block, 1u);
  EXPECT_EQ(hit.predicted, 0.6f);
  EXPECT_TRUE(hit.reused);
  labels.Open(1, Inputs(3), 0.9f, /*now_ms=*/1200);
  // At 1600 the opening at 500 is 1100 ms old, but it was superseded: no label.
  EXPECT_FALSE(labels.CloseNextExpired(1600).has_value());
  EXPECT_TRUE(labels.IsOpen(1));
  // At 2201 the opening at 1200 is 1001 ms old: negative, with its own inputs.
  const std::optional<ReuseLabels::Label> l = labels.CloseNextExpired(2201);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->block, 1u);
  EXPECT_EQ(l->inputs[0], 3);
  EXPECT_EQ(l->predicted, 0.9f);
  EXPECT_FALSE(l->reused);
  EXPECT_EQ(labels.open_bytes(), 0u);
}

TEST(ReuseLabelsTest, WindowClosedAtEvictionGivesNoSecondLabel) {
  const BlockCatalog catalog = TwoBlocks();
  ReuseLabels labels(catalog, /*horizon_ms=*/1000);
  labels.Open(0, Inputs(1), 0.3f, /*now_ms=*/0);
  const ReuseLabels::Label evicted = labels.Close(0, /*reused=*/false);
  EXPECT_FALSE(evicted.reused);
  EXPECT_EQ(labels.open_bytes(), 0u);
  EXPECT_FALSE(labels.CloseNextExpired(5000).has_value());
}

// --------------------------------------------------------------- ReplayBuffer

TEST(ReplayBufferTest, FullRingReplacesTheOldestAndDrawsFromWhatItHolds) {
  ReplayBuffer replay(/*capacity=*/2, /*draw_seed=*/3);
  EXPECT_TRUE(replay.empty());
  replay.Add({Inputs(1), 1});
  replay.Add({Inputs(2), 0});
  replay.Add({Inputs(3), 1});  // replaces the first
  EXPECT_EQ(replay.size(), 2u);
  std::multiset<float> drawn;
  replay.Draw(200, [&](const LabelledInputs& s) { drawn.insert(s.inputs[0]); });
  EXPECT_EQ(drawn.size(), 200u);
  EXPECT_EQ(drawn.count(1), 0u);
  // Uniform over two samples: each is drawn 100 +- 5 * sqrt(200 / 4) ~ 35 times.
  EXPECT_GT(drawn.count(2), 65u);
  EXPECT_GT(drawn.count(3), 65u);
}

// ---------------------------------------------------------------- HoldingCost

TEST(HoldingCostTest, PricesSpaceAtWhatThePoolSaves) {
  HoldingCost u(/*horizon_s=*/300);
  // Nothing measured yet: U = 0.
  EXPECT_EQ(u.Ms(1000, 500, 1000), 0);
  u.AdvanceTo(0);
  u.AddSaving(500);
  u.AdvanceTo(9999);  // the window spans 9.999 s < 10 s: still open
  EXPECT_EQ(u.Ms(1000, 500, 1000), 0);
  u.AdvanceTo(10'000);
  // Rate = 500 ms saved / 10 s = 50 ms/s. Pressure 500 / 1000 = 0.5, so
  // gamma = 0.5 * 50 / 1000 = 0.025 ms per byte-second; no eviction yet,
  // dt = H = 300 s: U = 0.025 * 1000 * 300 = 7500 ms.
  EXPECT_NEAR(u.saved_ms_per_s(), 50, 1e-9);
  EXPECT_NEAR(u.Ms(1000, 500, 1000), 7500, 1e-6);
  // First eviction after 100 s idle: dt = 100, U = 0.025 * 1000 * 100 = 2500.
  u.ObserveEviction(100);
  EXPECT_NEAR(u.Ms(1000, 500, 1000), 2500, 1e-6);
  // Next after 200 s: dt = 100 + 0.01 * (200 - 100) = 101, U = 2525.
  u.ObserveEviction(200);
  EXPECT_NEAR(u.Ms(1000, 500, 1000), 2525, 1e-6);
  // Second window, 2000 ms saved over 10 s = 200 ms/s, averaged with weight
  // 0.01: 50 + 0.01 * 150 = 51.5.
  u.AddSaving(2000);
  u.AdvanceTo(20'000);
  EXPECT_NEAR(u.saved_ms_per_s(), 51.5, 1e-9);
}

TEST(HoldingCostTest, IdleTimeIsCappedAtTheHorizon) {
  HoldingCost u(/*horizon_s=*/300);
  u.AdvanceTo(0);
  u.AddSaving(500);
  u.AdvanceTo(10'000);  // 50 ms/s, gamma = 0.025 at pressure 0.5 (above)
  // Evicted blocks idle 1000 s on average, but a block that is not reused is
  // known to be worth nothing after H: dt = min(300, 1000) = 300, U = 7500.
  u.ObserveEviction(1000);
  EXPECT_NEAR(u.Ms(1000, 500, 1000), 7500, 1e-6);
  // A pool with no capacity prices nothing.
  EXPECT_EQ(u.Ms(1000, 0, 0), 0);
}

}  // namespace
}  // namespace kvlearn
