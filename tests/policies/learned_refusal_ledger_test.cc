// The refusal ledger (policies/learned/refusal_ledger.h): bets settled by
// hand, and the learned policy refusing only what its refusals have won.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "models/learned_model.h"
#include "policies/learned/refusal_ledger.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/stand_in_model.h"

namespace kvlearn {
namespace {

TEST(LearnedRefusalLedgerTest, ClassesAreOctavesOfTheClaimedProbability) {
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(0), 0u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(std::nan("")), 0u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(1.0 / 256), 0u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(1.0 / 128), 1u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(0.9 / 64), 1u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(1.0 / 64), 2u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(0.1), 4u);  // [1/16, 1/8)
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(0.3), 6u);  // [1/4, 1/2)
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(0.5), 7u);
  EXPECT_EQ(LearnedRefusalLedger::ClassOf(1), 7u);
}

// Block ids are plain numbers here; the ledger only compares them. E = 1 s
// throughout; the balances decay by e^(-dt / E) from one request to the next.
//   bet 1 (class 0, saves 3, stakes 50, window to 100 ms): nothing uses
//     block 1 by 101 ms: won, balance 3.
//   bet 2 (class 0, window to 200 ms): block 2 used at 150 ms: lost,
//     3 e^(-0.049) + 3 - 50.
//   bet 3 (class 1): its own balance; block 3 used at 400 ms, after its
//     window (300 ms): won, 3.
//   a second bet on block 4 while one is open is ignored: the first's stake
//     is lost at 450 ms: 3 e^(-0.05) + 3 - 50.
TEST(LearnedRefusalLedgerTest, BetsSettleByHand) {
  constexpr double kE = 1000;
  LearnedRefusalLedger ledger;
  EXPECT_TRUE(ledger.Covers(0, 0));  // staking nothing needs nothing
  EXPECT_FALSE(ledger.Covers(0, 1));
  ledger.Enter(1, 0, 3, 50, 100);
  ledger.OnAccess({}, 100, kE);  // the window's last instant: still open
  EXPECT_EQ(ledger.open_bets(), 1u);
  ledger.OnAccess({}, 101, kE);
  EXPECT_DOUBLE_EQ(ledger.balance(0), 3);
  EXPECT_TRUE(ledger.Covers(0, 3));
  EXPECT_FALSE(ledger.Covers(0, 3.5));

  ledger.Enter(2, 0, 3, 50, 200);
  ledger.OnAccess(std::vector<BlockIndex>{2}, 150, kE);
  EXPECT_NEAR(ledger.balance(0), 3 * std::exp(-0.049) + 3 - 50, 1e-12);

  ledger.Enter(3, 1, 3, 50, 300);
  ledger.OnAccess(std::vector<BlockIndex>{3}, 400, kE);
  EXPECT_DOUBLE_EQ(ledger.balance(1), 3);

  ledger.Enter(4, 1, 3, 50, 500);
  ledger.Enter(4, 1, 100, 0, 600);
  ledger.OnAccess(std::vector<BlockIndex>{4}, 450, kE);
  EXPECT_NEAR(ledger.balance(1), 3 * std::exp(-0.05) + 3 - 50, 1e-12);
  EXPECT_EQ(ledger.open_bets(), 0u);
}

// Memory is bounded: past kMaxOpen waiting bets, new ones are not entered
// until some settle.
TEST(LearnedRefusalLedgerTest, AtMostKMaxOpenBetsWait) {
  LearnedRefusalLedger ledger;
  const auto n = static_cast<BlockIndex>(LearnedRefusalLedger::kMaxOpen);
  for (BlockIndex b = 0; b <= n; ++b) ledger.Enter(b, 0, 1, 10, 1000 + b);
  EXPECT_EQ(ledger.open_bets(), LearnedRefusalLedger::kMaxOpen);
  ledger.OnAccess({}, 1002, 1000);  // bets 0 and 1 have passed their windows: won
  EXPECT_EQ(ledger.open_bets(), LearnedRefusalLedger::kMaxOpen - 2);
  ledger.Enter(n + 1, 0, 1, 10, 5000);
  EXPECT_EQ(ledger.open_bets(), LearnedRefusalLedger::kMaxOpen - 1);
}

TEST(LearnedRefusalLedgerTest, SavedAndLoadedItSettlesAsTheOriginal) {
  LearnedRefusalLedger original;
  original.Enter(5, 2, 3, 50, 100);
  original.OnAccess({}, 101, 1000);
  original.Enter(6, 2, 4, 40, 1000);
  original.Enter(7, 3, 5, 30, 1100);
  original.Enter(8, 3, 6, 20, 1200);  // forgotten by the compaction below
  // Renumbering: 6 -> 0, 7 -> 1, the rest forgotten.
  std::vector<BlockIndex> renumber(9, kNoBlock);
  renumber[6] = 0;
  renumber[7] = 1;
  PolicyStateWriter out;
  original.Save(renumber, out);
  const std::string bytes = out.Take();
  PolicyStateReader in(bytes, 2);
  LearnedRefusalLedger loaded;
  loaded.Load(in);
  const absl::Status finished = in.Finish();
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(loaded.open_bets(), 2u);
  EXPECT_DOUBLE_EQ(loaded.balance(2), original.balance(2));
  original.OnAccess(std::vector<BlockIndex>{6}, 500, 1000);
  loaded.OnAccess(std::vector<BlockIndex>{0}, 500, 1000);
  original.OnAccess({}, 1150, 1000);
  loaded.OnAccess({}, 1150, 1000);
  for (size_t c = 0; c < LearnedRefusalLedger::kClasses; ++c) {
    EXPECT_DOUBLE_EQ(loaded.balance(c), original.balance(c)) << "class " << c;
  }
}

TEST(LearnedRefusalLedgerTest, DamagedBytesAreRefusedNamingTheField) {
  LearnedRefusalLedger ledger;
  ledger.Enter(1, 0, 3, 50, 100);
  PolicyStateWriter out;
  ledger.Save(std::vector<BlockIndex>{0, 1}, out);
  std::string bytes = out.Take();
  bytes.pop_back();  // the class of the one bet
  PolicyStateReader in(bytes, 2);
  LearnedRefusalLedger loaded;
  loaded.Load(in);
  const absl::Status s = in.Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("refusal ledger class"), std::string::npos) << s;
}

// A stand-in model sure that nothing is used again: every block reads
// P = 0 on both rungs (10 s, 100 s), so g = -T and the model would refuse
// every block it is asked about.
std::shared_ptr<const LearnedModel> NeverAgainModel() {
  return std::make_shared<StandInModel>(
      "never-again", [](std::span<const float>, std::span<float> out) { out[0] = out[1] = 0; });
}

// One-block requests, request i at i seconds, ids from `ids` (each a full
// hand block); the residents after each, under learned with the stand-in
// model, in a pool that never fills. Request `served_above` (if any) had its
// block served by a faster tier in front of the pool, as a cluster node's
// HBM serves it (ClusterSimulator): the pool is told so, then offered it.
std::vector<std::vector<bool>> ReplayNeverAgain(const std::vector<uint64_t>& ids, HandTrace& h,
                                                int64_t served_above = -1) {
  h.trace.source = "hand-worked";
  h.trace.block_size = kHandBlockSize;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t id[] = {ids[i]};
    h.trace.Add(static_cast<int64_t>(i) * 1000, kHandBlockSize, 16, id);
  }
  auto replay = BuildReplayTrace(h.trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  h.replay = *std::move(replay);
  PolicyDriver driver(&h.replay.catalog, (ids.size() + 1) * HandBlockBytes());
  PolicyEnv env = MakePolicyEnv(DefaultCost(), NeverAgainModel());
  EXPECT_TRUE(driver.StartPolicy("learned-model", env).ok());
  std::vector<std::vector<bool>> resident;
  for (uint32_t r = 0; r < h.trace.requests.size(); ++r) {
    if (r == served_above) {
      const TraceRequest& q = h.trace.requests[r];
      const std::span<const BlockIndex> chain(h.replay.blocks.data() + q.first_block, 1);
      const AccessInfo access{q.timestamp_ms, r, q.first_block};
      const uint32_t hits = driver.Lookup(chain);
      driver.Touch(chain, hits, access, 1);
      uint64_t admitted = 0, evicted = 0;
      EXPECT_TRUE(driver.Admit(chain, hits, 1, access, admitted, evicted, [](BlockIndex) {}).ok());
    } else {
      RequestOutcome outcome;
      EXPECT_TRUE(ServeRequest(h.replay, r, driver, outcome).ok());
    }
    std::vector<bool> now;
    for (const uint64_t id : ids)
      now.push_back(driver.pool().IsResident(h.replay.catalog.Find(id)));
    resident.push_back(std::move(now));
  }
  return resident;
}

// New blocks x0, x1, ... one per second, never used again. Nothing is
// evicted, so E stays the longest rung (100 s) and the price of space is 0:
// each would-be refusal is a bet (class 0) saving T and staking S = R - T,
// its window 100 s. Bet j (at j s) settles as won at the first request
// after j + 100 s, request j + 101, and the balances decay by e^(-0.01)
// from one request to the next, so request k sees n = k - 100 won bets and
// a balance of T (1 - e^(-0.01 n)) / (1 - e^(-0.01)). The first refusal is
// at the first k whose balance covers S; every block before it is admitted,
// every one after it refused (the balance only grows).
TEST(LearnedRefusalLedgerTest, TheModelRefusesOnlyOnceItsRefusalsHaveWonTheStake) {
  HandTrace h;
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 160; ++i) ids.push_back(1000 + i);
  const auto resident = ReplayNeverAgain(ids, h);
  const BlockMeta& m = h.replay.catalog[h.replay.catalog.Find(ids[0])];
  // T as the policy prices it: the bytes over the pool link.
  const double t_ms = static_cast<double>(m.bytes) / DefaultCost().LinkBytesPerMs();
  const double s_ms = m.recompute_gpu_ms - t_ms;
  size_t first_refused = 100;
  const auto balance = [t_ms](size_t n) {
    return t_ms * (1 - std::exp(-0.01 * static_cast<double>(n))) / (1 - std::exp(-0.01));
  };
  while (balance(first_refused - 100) < s_ms) {
    ++first_refused;
  }
  ASSERT_LT(first_refused, ids.size()) << "the trace must be long enough to see a refusal";
  const auto& last = resident.back();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(last[i], i < first_refused) << "block x" << i;
  }
}

// The trace of the test above cut two requests after its first refusal,
// then the block refused first again and a new block (id 5000), replayed
// with the return served by a faster tier or not. The residents after each
// request, and the index of the block refused first.
struct RefusedBlockReturns {
  std::vector<std::vector<bool>> after;
  size_t first_refused = 0;
};
RefusedBlockReturns ReplayARefusedBlocksReturn(bool served_above) {
  HandTrace h;
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 160; ++i) ids.push_back(1000 + i);
  const auto before = ReplayNeverAgain(ids, h);
  RefusedBlockReturns r;
  while (r.first_refused < ids.size() && before.back()[r.first_refused]) ++r.first_refused;
  EXPECT_LT(r.first_refused + 2, ids.size());
  std::vector<uint64_t> again(ids.begin(),
                              ids.begin() + static_cast<ptrdiff_t>(r.first_refused) + 2);
  again.push_back(ids[r.first_refused]);
  again.push_back(5000);
  HandTrace h2;
  r.after = ReplayNeverAgain(again, h2, served_above ? static_cast<int64_t>(again.size()) - 2 : -1);
  return r;
}

// The block refused first comes back within its window (a lost bet: the
// balance falls by S and no longer covers it), and a new block after it:
// both are admitted.
TEST(LearnedRefusalLedgerTest, ALostBetStopsTheRefusals) {
  const auto r = ReplayARefusedBlocksReturn(false);
  const size_t n = r.after.size();
  EXPECT_FALSE(r.after[n - 3][r.first_refused]) << "refused first";
  EXPECT_TRUE(r.after[n - 2][r.first_refused]) << "admitted on its return: the lost bet";
  EXPECT_TRUE(r.after[n - 1][n - 1]) << "the next new block is admitted too";
}

// The same return, but a faster tier in front of the pool served it: the
// pool's refusal cost nothing, so the bet is not lost, the balance still
// covers the stake and the block and the new one after it are refused.
TEST(LearnedRefusalLedgerTest, AReturnAFasterTierServedLosesNoBet) {
  const auto r = ReplayARefusedBlocksReturn(true);
  const size_t n = r.after.size();
  EXPECT_FALSE(r.after[n - 2][r.first_refused]) << "refused again: the bet stands";
  EXPECT_FALSE(r.after[n - 1][n - 1]) << "the next new block is refused too";
}

// A request's blocks can reach the pool after a later request began (a
// cluster admits them at prefill end). After the 160 one-block requests of
// the tests above (refusals have begun: the balance covers one block's
// stake S and, decayed, never exceeds T / (1 - e^(-0.01))), request A
// needs L new blocks, L * S above that bound, and request B one new block.
// A's first block stakes A's whole run, L * S, which the balance cannot
// cover: it is admitted, whether A's admission comes before B begins or
// after. B's block stakes S and is refused. (Staking the run of the latest
// request's chain, B's, A's first block would stake S alone and be refused.)
TEST(LearnedRefusalLedgerTest, ALateAdmissionStakesItsOwnRequestsRun) {
  for (const bool late : {false, true}) {
    SCOPED_TRACE(late ? "A admitted after B began" : "A admitted before B began");
    HandTrace h;
    h.trace.source = "hand-worked";
    h.trace.block_size = kHandBlockSize;
    constexpr uint32_t kOneBlock = 160;
    for (uint32_t i = 0; i < kOneBlock; ++i) {
      const uint64_t id[] = {1000 + i};
      h.trace.Add(int64_t{i} * 1000, kHandBlockSize, 16, id);
    }
    // L from the bound, on a catalog built to read S from.
    const auto probe = BuildReplayTrace(h.trace, DefaultCost());
    ASSERT_TRUE(probe.ok()) << probe.status();
    const BlockMeta& m = probe->catalog[probe->catalog.Find(1000)];
    const double t_ms = static_cast<double>(m.bytes) / DefaultCost().LinkBytesPerMs();
    const double s_ms = m.recompute_gpu_ms - t_ms;
    const auto run = static_cast<uint32_t>(t_ms / (1 - std::exp(-0.01)) / s_ms) + 2;
    std::vector<uint64_t> a_ids;
    for (uint32_t i = 0; i < run; ++i) a_ids.push_back(6000 + i);
    const uint64_t b_id[] = {7000};
    h.trace.Add(int64_t{kOneBlock} * 1000, run * kHandBlockSize, 16, a_ids);
    h.trace.Add(int64_t{kOneBlock + 1} * 1000, kHandBlockSize, 16, b_id);
    auto replay = BuildReplayTrace(h.trace, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    h.replay = *std::move(replay);

    PolicyDriver driver(&h.replay.catalog, (kOneBlock + run + 2) * HandBlockBytes());
    ASSERT_TRUE(
        driver.StartPolicy("learned-model", MakePolicyEnv(DefaultCost(), NeverAgainModel())).ok());
    for (uint32_t r = 0; r < kOneBlock; ++r) {
      RequestOutcome outcome;
      ASSERT_TRUE(ServeRequest(h.replay, r, driver, outcome).ok());
    }
    ASSERT_FALSE(driver.pool().IsResident(h.replay.catalog.Find(1000 + kOneBlock - 1)))
        << "refusals have begun";
    const auto chain_of = [&](uint32_t r) {
      const TraceRequest& q = h.trace.requests[r];
      return std::span<const BlockIndex>(h.replay.blocks.data() + q.first_block, q.num_blocks);
    };
    const auto access_of = [&](uint32_t r) {
      const TraceRequest& q = h.trace.requests[r];
      return AccessInfo{q.timestamp_ms, r, q.first_block};
    };
    const auto admit = [&](uint32_t r) {
      uint64_t admitted = 0, evicted = 0;
      ASSERT_TRUE(driver
                      .Admit(chain_of(r), 0, static_cast<uint32_t>(chain_of(r).size()),
                             access_of(r), admitted, evicted, [](BlockIndex) {})
                      .ok());
    };
    const uint32_t a = kOneBlock, b = kOneBlock + 1;
    driver.Touch(chain_of(a), 0, access_of(a));
    if (!late) admit(a);
    driver.Touch(chain_of(b), 0, access_of(b));
    if (late) admit(a);
    admit(b);
    EXPECT_TRUE(driver.pool().IsResident(h.replay.catalog.Find(6000))) << "A's first block";
    EXPECT_FALSE(driver.pool().IsResident(h.replay.catalog.Find(7000))) << "B's block";
  }
}

}  // namespace
}  // namespace kvlearn
