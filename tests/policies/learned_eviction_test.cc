// The learned policy's eviction order and its reuse curve, on cases worked
// out by hand with a stand-in model whose curve we choose.
//
// Hand traces (tests/support/hand_trace.h): full blocks of 64 MiB, request i
// at i seconds. The stand-in model has horizons 10 s and 100 s and reads one
// feature, accesses ever: a block used once gets the curve (0, 0.2) (P(used
// within 10 s) = 0, within 100 s = 0.2), a block used twice or more
// (0.5, 0.9).
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "features/feature_schema.h"
#include "gtest/gtest.h"
#include "models/learned_model.h"
#include "policies/learned/ablation.h"
#include "policies/learned/deviation_guard.h"
#include "policies/learned/reuse_curve.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/scoped_env.h"
#include "tests/support/stand_in_model.h"

namespace kvlearn {
namespace {

// The stand-in model of the header comment.
std::shared_ptr<const LearnedModel> AccessCountModel() {
  return std::make_shared<StandInModel>("access-count",
                                        [](std::span<const float> x, std::span<float> out) {
                                          const bool again = x[kAccessesLog] > std::log1p(1.5);
                                          out[0] = again ? 0.5f : 0.0f;
                                          out[1] = again ? 0.9f : 0.2f;
                                        });
}

constexpr std::array<double, 2> kRungs = {10, 100};

TEST(LearnedReuseCurveTest, InterpolatesInLogTimeAndStaysFlatPastTheLastRung) {
  const std::array<float, 2> p = {0.5f, 0.9f};
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 0), 0, 1e-6);
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 5), 0.25, 1e-6);  // linear to 0 below 10 s
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 10), 0.5, 1e-6);
  // 31.62 s is halfway from 10 to 100 in log-time.
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, std::sqrt(1000.0)), 0.7, 1e-6);
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 100), 0.9, 1e-6);
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 1e6), 0.9, 1e-6);
}

TEST(LearnedReuseCurveTest, NonMonotoneOutputsReadAsTheirRunningMaximum) {
  const std::array<float, 2> p = {0.6f, 0.4f};  // separate sigmoids may disagree
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 100), 0.6, 1e-6);
  EXPECT_NEAR(ReuseCurveAt(kRungs, p, 50), 0.6, 1e-6);
}

TEST(LearnedReuseCurveTest, ConditionsOnTheIdleTime) {
  const std::array<float, 2> p = {0.5f, 0.9f};
  // Unused for 10 s (F = 0.5); within the next 90 s: (0.9 - 0.5) / (1 - 0.5).
  EXPECT_NEAR(ReuseWithinGiven(kRungs, p, 10, 90), 0.8, 1e-6);
  // Past the last rung the curve says nothing more will come.
  EXPECT_NEAR(ReuseWithinGiven(kRungs, p, 100, 50), 0, 1e-6);
  const std::array<float, 2> sure = {1.0f, 1.0f};
  EXPECT_NEAR(ReuseWithinGiven(kRungs, sure, 20, 10), 0, 1e-6);
}

// Block ids are plain numbers here; the guard only compares them.

// Regret goes to the expert whose choice was evicted, priced by the block's
// saving: the model evicts 1 (saving 10), which returns within the swap
// window: the model owes 10 and loses trust. Recency evicts 4 (saving 30),
// which returns in time: recency owes 30, the model's 10 decays once to 9.9,
// and the model is trusted again.
TEST(LearnedDeviationGuardTest, RegretGoesToTheExpertWhoseChoiceWasEvicted) {
  LearnedDeviationGuard guard;
  EXPECT_TRUE(guard.Trusted());  // no evidence yet: 0 >= 0
  guard.OnEviction(/*model=*/1, /*recency=*/2, /*victim=*/1, 10, /*now=*/0, /*swap=*/100);
  guard.OnAccess(std::vector<BlockIndex>{1}, 50);
  EXPECT_DOUBLE_EQ(guard.model_regret(), 10);
  EXPECT_DOUBLE_EQ(guard.recency_regret(), 0);
  EXPECT_FALSE(guard.Trusted());
  guard.OnEviction(3, 4, /*victim=*/4, 30, 60, 100);
  guard.OnAccess(std::vector<BlockIndex>{4}, 160);  // exactly at the window's end
  EXPECT_DOUBLE_EQ(guard.recency_regret(), 30);
  EXPECT_DOUBLE_EQ(guard.model_regret(), 9.9);
  EXPECT_TRUE(guard.Trusted());
}

// What settles nothing: an eviction both experts agreed on, a return after
// the swap window, a model choice older than E (no window), a victim neither
// expert chose, and a verdict already settled.
TEST(LearnedDeviationGuardTest, WhatSettlesNothing) {
  LearnedDeviationGuard guard;
  guard.OnEviction(5, 5, 5, 10, 0, 100);
  guard.OnAccess(std::vector<BlockIndex>{5}, 1);
  guard.OnEviction(1, 2, 1, 10, 0, 100);
  guard.OnAccess(std::vector<BlockIndex>{1}, 101);
  guard.OnEviction(6, 7, 6, 10, 200, 0);
  guard.OnAccess(std::vector<BlockIndex>{6}, 200);
  guard.OnEviction(8, 9, 3, 10, 300, 100);
  guard.OnAccess(std::vector<BlockIndex>{3}, 301);
  EXPECT_DOUBLE_EQ(guard.model_regret(), 0);
  EXPECT_DOUBLE_EQ(guard.recency_regret(), 0);

  guard.OnEviction(11, 12, 12, 10, 400, 100);
  guard.OnAccess(std::vector<BlockIndex>{12}, 410);
  guard.OnAccess(std::vector<BlockIndex>{12}, 420);  // settled once only
  EXPECT_DOUBLE_EQ(guard.recency_regret(), 10);
  EXPECT_DOUBLE_EQ(guard.model_regret(), 0);
}

PoolReplayOptions StandInOptions(uint64_t pool_blocks,
                                 std::function<void(uint32_t, const PoolState&)> after) {
  PoolReplayOptions o;
  o.pool_bytes = pool_blocks * HandBlockBytes();
  o.model = AccessCountModel();
  o.after_request = std::move(after);
  return o;
}

// The pool's blocks after each request of the hand trace, under `learned`
// (with the stand-in model) and under `lru`, in a pool of `pool_blocks`.
struct Residents {
  std::vector<std::string> learned, lru;
};
Residents ReplayBoth(const HandTrace& h, uint64_t pool_blocks) {
  Residents r;
  for (auto [policy, out] : {std::pair{"learned-model", &r.learned}, std::pair{"lru", &r.lru}}) {
    auto record = [&h, out](uint32_t, const PoolState& pool) { out->push_back(h.Resident(pool)); };
    EXPECT_TRUE(
        ReplayPool(h.replay, DefaultCost(), policy, StandInOptions(pool_blocks, record)).ok());
  }
  return r;
}

// T of block m over the default link.
double TransferMs(const BlockMeta& m) {
  return static_cast<double>(m.bytes) / DefaultCost().LinkBytesPerMs();
}

// Pool of 3 blocks; R0 a, R1 a, R2 b, R3 c, R4 d, R5 e (all roots, same R
// and bytes, so V orders by P alone).
// Admission: before any eviction E = 100 s, and a once-used block has
//   g = 0.2 (R - T) - T > 0 as long as R > 6 T (checked below), so all are
//   admitted.
// R4 d: pool {a b c} full, leaves a b c. P(used in the next 100 s | idle):
//   a (used at 1 s, twice; idle 3 s): F(3) = 0.15, F(103) = 0.9,
//     (0.9 - 0.15) / 0.85 = 0.88;
//   b (idle 2 s): F(2) = 0, F(102) = 0.2: 0.2; c (idle 1 s): 0.2.
//   b and c tie; b is less recent: evict b (LRU would evict a).  {a c d}
//   E becomes b's idle time, 2 s.
// R5 e: admission reads P(e used within E = 2 s) = F(2) = 0, so g = -T < 0:
//   the model would refuse e, but no refusal has won anything yet (the
//   refusal ledger), so e goes in. V now looks E = 2 s ahead: a (idle 4 s)
//   (F(6) - F(4)) / (1 - F(4)) = (0.3 - 0.2) / 0.8 = 0.125; c (idle 2 s)
//   and d (idle 1 s) F(4) - F(2) = 0 and F(3) - F(1) = 0: c, the less
//   recent, goes (LRU: b).                                          {a d e}
TEST(LearnedEvictionTest, KeepsTheBlockItsCurveSaysReturns) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d", "e"});
  const BlockMeta& m = h->replay.catalog[h->Block('a')];
  ASSERT_GT(m.recompute_gpu_ms, 6 * TransferMs(m)) << "the derivation needs every block admitted";

  const Residents r = ReplayBoth(*h, 3);
  ASSERT_EQ(r.learned.size(), 6u);
  EXPECT_EQ(r.learned[4], "acd");
  EXPECT_EQ(r.learned[5], "ade");
  EXPECT_EQ(r.lru[4], "bcd");
  EXPECT_EQ(r.lru[5], "cde");
}

// The model evicts only while its pool's hits have saved at least what a
// shadow evicting by recency, with the same admissions, would have
// (learned/shadow_pool.h). The trace above, then R6 c (t = 6 s):
//   the shadow copies the real admissions but evicts its least recent leaf:
//     R4 copies c {a b c}; R5 copies d, evicting a {b c d}; R6 copies e,
//     evicting b {c d e}.
//   R5's eviction of c was the model's (recency's choice was a); c's idle
//     time, 2 s, is E, so the guard opens no verdict on it (no swap window)
//     and, with nothing settled, still trusts the model at R6.
//   R6 c: the real pool {a d e} misses c, the shadow hits it: the real pool
//     has saved c's R - T less, so recency evicts. Pool full, leaves a (used
//     at 1 s), d (4 s), e (5 s): a goes, as LRU's would.       {c d e}
//   Trusting the model (its V over the next E = 2 s: a 0.133, d 0, e 0), d
//   would have gone instead: {a c e}.
TEST(LearnedEvictionTest, StopsEvictingByTheModelOnceRecencyWouldHaveSavedMore) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d", "e", "c"});
  const Residents r = ReplayBoth(*h, 3);
  ASSERT_EQ(r.learned.size(), 7u);
  EXPECT_EQ(r.learned[5], "ade");  // as in the test above
  EXPECT_EQ(r.learned[6], "cde");
  EXPECT_EQ(r.lru[6], "cde");
}

// After each request of `h` under learned (stand-in `model`) in a pool of
// `pool_blocks`, driven as the pool replay drives it: the residents and the
// admission score G of each block of the request.
struct Step {
  std::string resident;
  std::vector<double> gains;
};
std::vector<Step> DriveLearned(const HandTrace& h, uint64_t pool_blocks,
                               std::shared_ptr<const LearnedModel> model) {
  std::vector<Step> steps;
  PolicyDriver driver(&h.replay.catalog, pool_blocks * HandBlockBytes());
  EXPECT_TRUE(
      driver.StartPolicy("learned-model", MakePolicyEnv(DefaultCost(), std::move(model))).ok());
  for (uint32_t r = 0; r < h.trace.requests.size(); ++r) {
    RequestOutcome outcome;
    EXPECT_TRUE(ServeRequest(h.replay, r, driver, outcome).ok());
    const TraceRequest& req = h.trace.requests[r];
    const auto chain =
        std::span<const BlockIndex>(h.replay.blocks).subspan(req.first_block, req.num_blocks);
    Step step{h.Resident(driver.pool()), {}};
    for (const BlockIndex b : chain) step.gains.push_back(driver.policy().AdmissionScore(b, false));
    steps.push_back(std::move(step));
  }
  return steps;
}

// Admission pays for pool space (d per byte: savings of misses on blocks
// evicted less than E ago, per byte admitted, both decayed with time
// constant E). Pool of 2 blocks; R0 a, R1 b, R2 c, R3 a (request i at i s);
// S = R - T of a block.
//   R0, R1: admitted (no eviction yet, d = 0, E = 100 s).
//   R2 c: admitted; a (idle 2 s) and b (idle 1 s) both read V = 0.2 S: the
//     tie goes to the least recent, a, which recency also picks. E = 2 s.
//   R3 a (t = 3 s): a missed 1 s after its eviction, within E: a ghost worth
//     S. Blocks admitted, decayed by e^(-1 s / E) at each request (E = 100 s
//     at R1 and R2, 2 s at R3): ((e^-0.01 + 1) e^-0.01 + 1) e^-0.5 = 1.8015,
//     so d = S / 1.8015 per block. a (used twice) reads P(within E = 2 s) =
//     0.5 * 2 / 10 = 0.1: G = g = 0.1 S - T - S / 1.8015 < 0, although
//     0.1 S - T > 0 (checked below): the price alone makes the model refuse.
//     The refusal ledger has won nothing yet, so a goes in all the same; b
//     and c both read V = 0 over the next 2 s: b, the less recent, goes.
TEST(LearnedAdmissionTest, PaysForThePoolSpaceItTakes) {
  const auto h = MakeHandTrace({"a", "b", "c", "a"});
  const BlockMeta& m = h->replay.catalog[h->Block('a')];
  const double t_ms = TransferMs(m), s_ms = m.recompute_gpu_ms - TransferMs(m);
  ASSERT_GT(0.1 * s_ms, t_ms) << "a must be refused for the price alone";

  const std::vector<Step> steps = DriveLearned(*h, 2, AccessCountModel());
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[2].resident, "bc");
  const double blocks_admitted = ((std::exp(-0.01) + 1) * std::exp(-0.01) + 1) * std::exp(-0.5);
  EXPECT_NEAR(steps[3].gains[0], 0.1 * s_ms - t_ms - s_ms / blocks_admitted, 1e-4);
  EXPECT_EQ(steps[3].resident, "ac");
}

// The research switches (policies/learned/ablation.h) change decisions: on
// the trace above, without the refusal ledger the refusal of a at R3 is
// placed (G < 0), so the pool keeps b and c; without the ledger and the
// price of space, a's G = 0.1 S - T > 0 and a goes in, as with both.
TEST(LearnedAdmissionTest, ResearchSwitchesChangeTheDecision) {
  const auto h = MakeHandTrace({"a", "b", "c", "a"});
  const BlockMeta& m = h->replay.catalog[h->Block('a')];
  const double t_ms = TransferMs(m), s_ms = m.recompute_gpu_ms - TransferMs(m);
  {
    const ScopedEnv ablate(std::string(kLearnedAblateVariable), "ledger");
    const std::vector<Step> steps = DriveLearned(*h, 2, AccessCountModel());
    ASSERT_EQ(steps.size(), 4u);
    EXPECT_LT(steps[3].gains[0], 0);
    EXPECT_EQ(steps[3].resident, "bc");
  }
  const ScopedEnv ablate(std::string(kLearnedAblateVariable), "ledger,space-price");
  const std::vector<Step> steps = DriveLearned(*h, 2, AccessCountModel());
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_NEAR(steps[3].gains[0], 0.1 * s_ms - t_ms, 1e-4);
  EXPECT_EQ(steps[3].resident, "ac");
}

// The price lapses when nothing was admitted for longer than E (else a price
// above every block's worth would stop admission for good: no admission, no
// eviction, no ghost to move it). The trace above, then R4 c, R5 c (hits,
// nothing admitted), R6 y (t = 6 s); E stays 2 s (no eviction after R3).
//   R3 a: admitted with the price of space of the test above; the last
//     admission is at 3 s.                                        {a c}
//   R6 y: 6 s - 3 s > E: the price is measured afresh from zero, so y (used
//     once: P(within 2 s) = 0) has G = -T exactly. Without the lapse it
//     would still carry the price (d > 0 since R3): G < -T.
TEST(LearnedAdmissionTest, ThePriceLapsesWhenNothingWasAdmittedForE) {
  const auto h = MakeHandTrace({"a", "b", "c", "a", "c", "c", "y"});
  const std::vector<Step> steps = DriveLearned(*h, 2, AccessCountModel());
  ASSERT_EQ(steps.size(), 7u);
  const BlockMeta& m = h->replay.catalog[h->Block('y')];
  EXPECT_EQ(steps[5].resident, "ac");
  EXPECT_NEAR(steps[6].gains[0], -TransferMs(m), 1e-6);
}

// The same trace up to R4 in a pool with room for all: nothing is evicted,
// E stays 100 s. At R4 (now 4 s), once R4 has ended (its block unpinned),
// the leaves are a b c d:
//   a (idle 3 s): 0.88; b (idle 2 s), c (idle 1 s), d (idle 0 s): 0.2 each.
// Order: b, c, d (ties by recency), then a; EvictionPriority (V / (1 + V),
// all four in the model's window of 21) must agree and so must draining the
// pool through SelectVictim. Asked only for a little over one block's bytes
// (FirstVictims), the choice stops after b and c, and a and d follow in the
// candidates' order.
TEST(LearnedEvictionTest, RankVictimsAgreesWithPriorityAndEvictionOrder) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d"});
  PolicyDriver driver(&h->replay.catalog, 10 * HandBlockBytes());
  PolicyEnv env = MakePolicyEnv(DefaultCost(), AccessCountModel());
  ASSERT_TRUE(driver.StartPolicy("learned-model", env).ok());
  for (uint32_t r = 0; r < h->trace.requests.size(); ++r) {
    RequestOutcome outcome;
    ASSERT_TRUE(ServeRequest(h->replay, r, driver, outcome).ok());
    ASSERT_EQ(outcome.evicted_blocks, 0u);
  }
  driver.UnpinAll();
  std::vector<BlockIndex> leaves;
  for (const char id : std::string("abcd")) leaves.push_back(h->Block(id));
  const std::vector<BlockIndex> want = {h->Block('b'), h->Block('c'), h->Block('d'), h->Block('a')};
  RetentionPolicy& policy = driver.policy();
  EXPECT_EQ(policy.RankVictims(leaves), want);
  EXPECT_EQ(policy.FirstVictims(leaves, UINT64_MAX), want);
  EXPECT_EQ(policy.FirstVictims(leaves, HandBlockBytes() + 1),
            (std::vector<BlockIndex>{h->Block('b'), h->Block('c'), h->Block('a'), h->Block('d')}));
  EXPECT_EQ(policy.FirstVictims(leaves, 1)[0], h->Block('b'));
  const double pa = policy.EvictionPriority(h->Block('a'));
  const double pb = policy.EvictionPriority(h->Block('b'));
  EXPECT_LT(pb, pa);
  EXPECT_DOUBLE_EQ(pb, policy.EvictionPriority(h->Block('d')));
  EXPECT_NEAR(pa / pb, (0.75 / 0.85) / 0.2, 1e-5);

  // Draining: E moves to 2 s as b goes, but V keeps the window E had when
  // R4 began (100 s) until the next request, so the order stays c, d, a.
  std::vector<BlockIndex> drained;
  for (int i = 0; i < 4; ++i) {
    auto victim = driver.NextVictim();
    ASSERT_TRUE(victim.ok()) << victim.status();
    ASSERT_NE(*victim, kNoBlock);
    driver.EvictLeaf(*victim);
    drained.push_back(*victim);
  }
  EXPECT_EQ(drained, want);
}

// A serving node may report blocks stored without any request or admission
// naming them (PolicyDriver::Insert), and evict them. The policy has scored
// none of them (V = 0 for all), so the order is recency's: a (stored at 1 s)
// before b (2 s). The eviction must also be recorded for a later ghost
// count, for blocks the policy has never sized its tables for.
TEST(LearnedEvictionTest, EvictsBlocksNoRequestNamed) {
  const auto h = MakeHandTrace({"a", "b"});
  PolicyDriver driver(&h->replay.catalog, 10 * HandBlockBytes());
  PolicyEnv env = MakePolicyEnv(DefaultCost(), AccessCountModel());
  ASSERT_TRUE(driver.StartPolicy("learned-model", env).ok());
  driver.Insert(h->Block('a'), AccessInfo{1000, 0, 0});
  driver.Insert(h->Block('b'), AccessInfo{2000, 1, 1});
  std::vector<BlockIndex> drained;
  for (int i = 0; i < 2; ++i) {
    auto victim = driver.NextVictim();
    ASSERT_TRUE(victim.ok()) << victim.status();
    ASSERT_NE(*victim, kNoBlock);
    driver.EvictLeaf(*victim);
    drained.push_back(*victim);
  }
  EXPECT_EQ(drained, (std::vector<BlockIndex>{h->Block('a'), h->Block('b')}));
}

// The victim ShouldAdmit found is kept for the SelectVictim that follows it,
// but not past a change of the pool: a sidecar pool of 3 holds a (0 s), b
// (1 s) and c (2 s), roots used once; an in-flight request holds a. Asked
// about d (3 s), the pool is full and a is held: the candidate victim is b
// (the least recent evictable leaf; a, b and c all read the same curve).
// The request holding a ends: the next victim is a.
TEST(LearnedEvictionTest, AVictimFoundForAnAdmissionIsAskedAgainOnceThePoolChanges) {
  const auto h = MakeHandTrace({"a", "b", "c", "d"});
  PolicyDriver driver(&h->replay.catalog, 3 * HandBlockBytes());
  ASSERT_TRUE(
      driver.StartPolicy("learned-model", MakePolicyEnv(DefaultCost(), AccessCountModel())).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    const std::span<const BlockIndex> chain(&h->replay.blocks[r], 1);
    const AccessInfo access{static_cast<int64_t>(r) * 1000, r, r};
    driver.AnnounceRequest(chain, access);
    ASSERT_TRUE(driver.ShouldAdmit(chain[0], access));
    driver.Insert(chain[0], access);
  }
  const std::span<const BlockIndex> held(&h->replay.blocks[0], 1);
  driver.Hold(held);
  const std::span<const BlockIndex> d(&h->replay.blocks[3], 1);
  const AccessInfo at_d{3000, 3, 3};
  driver.AnnounceRequest(d, at_d);
  ASSERT_TRUE(driver.ShouldAdmit(d[0], at_d));
  auto victim = driver.NextVictim();
  ASSERT_TRUE(victim.ok()) << victim.status();
  EXPECT_EQ(*victim, h->Block('b'));
  driver.Release(held);
  victim = driver.NextVictim();
  ASSERT_TRUE(victim.ok()) << victim.status();
  EXPECT_EQ(*victim, h->Block('a'));
}

}  // namespace
}  // namespace kvlearn
