// The recalibration of the model's admission probability
// (policies/learned/reuse_calibration.h): labels settled by hand, and the
// model expert refusing a foreign model's too confident claims once the
// traffic has disproved them, while claims the traffic bears out are kept.
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "models/learned_model.h"
#include "policies/learned/reuse_calibration.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/stand_in_model.h"

namespace kvlearn {
namespace {

// E = 25 s: label windows of kLabelE * E = 100 s, slots of 25 s, sums
// decaying with time constant 400 s.
constexpr double kE = 25'000;
static_assert(LearnedReuseCalibration::kLabelE == 4);
static_assert(LearnedReuseCalibration::kSlotsPerWindow == 4);
static_assert(LearnedReuseCalibration::kMemoryWindows == 4);

// 25 predictions of 0.5, one a second from 0 to 24 s, fill the first slot
// [0, 25 s). The one made at 0 comes back at 50 s (within the window: a
// positive); the one made at 1 s at 102 s (after it: no label). Until the
// slot is settled, 100 s after it closed (125 s), nothing is counted and
// 0.5 reads 0.5. Then the bin of 0.5 has s = 25 * 0.5 = 12.5 predicted
// returns and r = 1 observed: 0.5 reads 0.5 * (1 + 1) / (12.5 + 1); a bin
// nothing fell in still reads the model's own claim.
TEST(LearnedReuseCalibrationTest, ASlotCountsOnceEveryPredictionInItIsSettled) {
  LearnedReuseCalibration c;
  for (int64_t t = 0; t < 25'000; t += 1000) c.Predicted(0.5, t, kE);
  c.Returned(0.5, 0, 50'000);
  c.Returned(0.5, 1000, 102'000);
  c.Advance(125'000, kE);
  EXPECT_DOUBLE_EQ(c.Adjust(0.5), 0.5);
  c.Advance(125'001, kE);
  const size_t bin = LearnedReuseCalibration::BinOf(0.5);
  // The sums joined at 125,001 ms: no time to decay yet.
  EXPECT_DOUBLE_EQ(c.predicted(bin), 12.5);
  EXPECT_DOUBLE_EQ(c.returned(bin), 1);
  EXPECT_DOUBLE_EQ(c.Adjust(0.5), 0.5 * 2 / 13.5);
  EXPECT_DOUBLE_EQ(c.Adjust(0.1), 0.1);
}

// Predictions at 0 and 30 s fall in two slots, settled after 125 s and
// 155 s. At 126 s and at 146 s only the first is counted, its sums
// decaying with time constant 400 s in between.
TEST(LearnedReuseCalibrationTest, LaterSlotsWaitAndSettledSumsDecay) {
  LearnedReuseCalibration c;
  c.Predicted(0.9, 0, kE);
  c.Predicted(0.9, 30'000, kE);
  c.Advance(126'000, kE);
  const size_t bin = LearnedReuseCalibration::BinOf(0.9);
  EXPECT_DOUBLE_EQ(c.predicted(bin), 0.9);
  c.Advance(146'000, kE);
  EXPECT_NEAR(c.predicted(bin), 0.9 * std::exp(-20'000 / 400'000.0), 1e-12);
  c.Advance(156'000, kE);
  EXPECT_NEAR(c.predicted(bin), 0.9 * std::exp(-30'000 / 400'000.0) + 0.9, 1e-12);
}

TEST(LearnedReuseCalibrationTest, SavedAndLoadedItReadsAsTheOriginal) {
  LearnedReuseCalibration a;
  for (int64_t t = 0; t < 60'000; t += 3000) a.Predicted(0.3, t, kE);
  a.Returned(0.3, 3000, 20'000);
  a.Advance(140'000, kE);
  PolicyStateWriter w;
  a.Save(w);
  const std::string bytes = w.Take();
  PolicyStateReader r(bytes, 0);
  LearnedReuseCalibration b;
  b.Load(r);
  ASSERT_TRUE(r.Finish().ok()) << r.status();
  for (const int64_t t : {140'000, 170'000, 250'000}) {
    a.Advance(t, kE);
    b.Advance(t, kE);
    EXPECT_DOUBLE_EQ(a.Adjust(0.3), b.Adjust(0.3)) << t;
  }
}

// A stand-in model that gives every block P = `p` on both rungs (10 s,
// 100 s).
std::shared_ptr<const LearnedModel> SureModel(float p) {
  return std::make_shared<StandInModel>(
      "sure", [p](std::span<const float>, std::span<float> out) { out[0] = out[1] = p; });
}

// One-block requests (time ms, block id), replayed under learned-model with
// the stand-in model in a pool that never fills; whether each new block
// was admitted when first asked for.
std::vector<bool> AdmittedOnFirstUse(const std::vector<std::pair<int64_t, uint64_t>>& requests,
                                     float p) {
  HandTrace h;
  h.trace.source = "hand-worked";
  h.trace.block_size = kHandBlockSize;
  for (const auto& [t, id] : requests) {
    const uint64_t ids[] = {id};
    h.trace.Add(t, kHandBlockSize, 16, ids);
  }
  auto replay = BuildReplayTrace(h.trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  h.replay = *std::move(replay);
  PolicyDriver driver(&h.replay.catalog, (requests.size() + 1) * HandBlockBytes());
  EXPECT_TRUE(driver.StartPolicy("learned-model", MakePolicyEnv(DefaultCost(), SureModel(p))).ok());
  std::vector<bool> admitted;
  std::vector<bool> seen(h.replay.catalog.size(), false);
  for (uint32_t r = 0; r < h.trace.requests.size(); ++r) {
    RequestOutcome outcome;
    EXPECT_TRUE(ServeRequest(h.replay, r, driver, outcome).ok());
    const BlockIndex b = h.replay.blocks[h.trace.requests[r].first_block];
    if (seen[b]) continue;
    seen[b] = true;
    admitted.push_back(driver.pool().IsResident(b));
  }
  return admitted;
}

// A model sure (P = 0.9) that every block comes back, on traffic where
// none does: a new block every second for 900 s. g = 0.9 (R - T) - T > 0,
// so the model alone would admit them all. Nothing is evicted, so E is the
// longest rung, 100 s, and the label window 400 s: until the first slot is
// settled (at 500 s) the claim stands; then the bin of 0.9 has seen no
// return, the claim reads as 0.9 / (0.9 * 100 + 1), refusals are proposed,
// and once their bets have won their stake (learned/refusal_ledger.h) new
// blocks are refused.
TEST(LearnedReuseCalibrationTest, AClaimTheTrafficDisprovesStopsAdmitting) {
  std::vector<std::pair<int64_t, uint64_t>> requests;
  for (uint64_t i = 0; i < 900; ++i)
    requests.emplace_back(static_cast<int64_t>(i) * 1000, 1000 + i);
  const std::vector<bool> admitted = AdmittedOnFirstUse(requests, 0.9f);
  ASSERT_EQ(admitted.size(), 900u);
  for (size_t i = 0; i <= 500; ++i) EXPECT_TRUE(admitted[i]) << "no label yet: block " << i;
  EXPECT_FALSE(admitted.back()) << "the claim was disproved: refused";
}

// The same claim where every block does come back, 50 s after its first
// use (within the window): the bin's returns exceed its predictions and
// every new block is admitted.
TEST(LearnedReuseCalibrationTest, AClaimTheTrafficBearsOutKeepsAdmitting) {
  std::vector<std::pair<int64_t, uint64_t>> requests;
  for (uint64_t i = 0; i < 900; ++i) {
    requests.emplace_back(static_cast<int64_t>(i) * 1000, 1000 + i);
    if (i >= 50) requests.emplace_back(static_cast<int64_t>(i) * 1000 + 500, 1000 + i - 50);
  }
  const std::vector<bool> admitted = AdmittedOnFirstUse(requests, 0.9f);
  ASSERT_EQ(admitted.size(), 900u);
  for (size_t i = 0; i < admitted.size(); ++i) EXPECT_TRUE(admitted[i]) << "block " << i;
}

}  // namespace
}  // namespace kvlearn
