// The learned policy's ARC expert (docs/learned_policy.md, "How it decides"), on
// cases worked out by hand: ARC forgets the victims it did not choose, the
// ARC shadow pool (policies/learned/arc_shadow_pool.h) and its saved state,
// and the learned pool handing its evictions to ARC once ARC's shadow has
// saved more than the recency shadow.
//
// Hand traces (tests/support/hand_trace.h): full blocks of 64 MiB, request i
// at i seconds; a prompt "ab" is the chain a -> b.
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/policy_state.h"
#include "gtest/gtest.h"
#include "policies/arc_policy.h"
#include "policies/learned/arc_shadow_pool.h"
#include "policies/learned/shadow_pool.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "sim/pool_simulator.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/stand_in_model.h"

namespace kvlearn {
namespace {

// ARC over a pool of 2 blocks, driven by hand as the simulator drives a
// policy. Roots x, a, b; T1 and T2 by recency, p the target size of T1.
//   x in, then hit: T2 [x]. a in: T1 [a]. b: p = 0 < |T1|: REPLACE takes
//   T1's LRU, a; b in (|T1| + |B1| = 2 blocks, so a ghost of a survives).
//   a again: remembered, a is in B1: p rises by one block (|B2| / |B1| = 0,
//     so by max(1, 0)), and |T1| = 1 block = p: REPLACE takes T2's LRU, x;
//     forgotten, a is new to ARC: p stays 0 and T1's LRU, b, goes.
// Returns the residents once a is back in.
std::string ArcKeepsAfterAReturns(bool remember_a) {
  const auto h = MakeHandTrace({"x", "a", "b"});
  PoolState pool(&h->replay.catalog, 2 * HandBlockBytes());
  ArcPolicy arc(h->replay.catalog, &pool, pool.capacity_bytes());
  const AccessInfo access{};
  const auto admit = [&](char id, bool remember_victim) {
    const BlockIndex b = h->Block(id);
    arc.ShouldAdmit(b, access);
    if (pool.free_bytes() < h->replay.catalog[b].bytes) {
      const BlockIndex victim = arc.SelectVictim();
      pool.Evict(victim);
      arc.OnEvict(victim, remember_victim);
    }
    pool.Insert(b);
    arc.OnInsert(b, access);
  };
  admit('x', true);
  arc.OnHit(h->Block('x'), access);
  admit('a', true);
  admit('b', remember_a);  // evicts a
  EXPECT_EQ(h->Resident(pool), "bx");
  admit('a', true);
  return h->Resident(pool);
}

TEST(ArcExpertTest, AVictimArcDidNotChooseLeavesNoGhost) {
  EXPECT_EQ(ArcKeepsAfterAReturns(/*remember_a=*/true), "ab");
  EXPECT_EQ(ArcKeepsAfterAReturns(/*remember_a=*/false), "ax");
}

// The chain of request r of `h`.
std::span<const BlockIndex> Chain(const HandTrace& h, uint32_t r) {
  const TraceRequest& req = h.trace.requests[r];
  return std::span<const BlockIndex>(h.replay.blocks).subspan(req.first_block, req.num_blocks);
}

// Both shadows of a pool of 3 blocks whose real pool holds everything
// (each request's blocks are then copied in at the next), on R0 a, R1 a,
// R2 b, R3 c, R4 d, R5 a:
//   recency: R1 copies a and hits it; R3 copies b, R4 c {a b c}; R5 copies
//     d, evicting a, the least recent: R5 misses.              1 hit.
//   ARC: R1 a in T1, its hit moves it to T2; R3, R4 b, c in T1; R5 copies
//     d: |T1| = 2 > p = 0, so T1's LRU, b, goes; a is kept: R5 hits.  2 hits.
TEST(LearnedArcShadowPoolTest, KeepsWhatArcWouldHaveKept) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d", "a"});
  const uint64_t capacity = 3 * HandBlockBytes();
  LearnedShadowPool recency(&h->replay.catalog, capacity);
  LearnedArcShadowPool arc(&h->replay.catalog, capacity);
  const auto all = [](BlockIndex) { return true; };
  std::string recency_hits, arc_hits;
  for (uint32_t r = 0; r < h->trace.requests.size(); ++r) {
    recency_hits += std::to_string(recency.OnRequest(Chain(*h, r), all));
    arc_hits += std::to_string(arc.OnRequest(Chain(*h, r), all));
  }
  EXPECT_EQ(recency_hits, "010000");
  EXPECT_EQ(arc_hits, "010001");
  EXPECT_EQ(h->Resident(arc.pool()), "acd");
  EXPECT_EQ(arc.used_bytes(), 3 * HandBlockBytes());
}

// The ARC shadow copies an admission when it happens too: R0 a and R1 b
// start before the real pool holds either (a cluster admits a request's
// blocks as its prefill ends); a and b are then admitted; R2 a hits. Copied
// only at the next request, a would have been looked for at R1 and never
// again.
TEST(LearnedArcShadowPoolTest, CopiesAnAdmissionWhenItHappens) {
  const auto h = MakeHandTrace({"a", "b", "a"});
  LearnedArcShadowPool arc(&h->replay.catalog, 3 * HandBlockBytes());
  const auto none = [](BlockIndex) { return false; };
  EXPECT_EQ(arc.OnRequest(Chain(*h, 0), none), 0u);
  EXPECT_EQ(arc.OnRequest(Chain(*h, 1), none), 0u);
  arc.OnAdmit(h->Block('a'));
  arc.OnAdmit(h->Block('b'));
  EXPECT_EQ(h->Resident(arc.pool()), "ab");
  EXPECT_EQ(arc.OnRequest(Chain(*h, 2), none), 1u);
}

// Saved and loaded, the ARC shadow goes on exactly as one never saved; saved
// through a compaction that forgets a block only the shadow holds, it loads
// (ARC's state checks every resident leaf is in its heaps) without that
// block and what hangs below it.
// `shadow` saved through the compaction `renumber` and loaded into a fresh
// one over the same catalog; the load must succeed.
void SaveAndLoad(const LearnedArcShadowPool& shadow, std::span<const BlockIndex> renumber,
                 size_t blocks, LearnedArcShadowPool& into) {
  PolicyStateWriter out;
  shadow.Save(renumber, out);
  const std::string bytes = out.Take();
  PolicyStateReader in(bytes, blocks);
  into.Load(in);
  const absl::Status loaded = in.Finish();
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST(LearnedArcShadowPoolTest, SavedStateResumesAndDropsForgottenBlocks) {
  const auto h = MakeHandTrace({"ab", "ab", "cd", "e", "ab", "f", "cd", "e", "ab", "g", "cd"});
  const BlockCatalog& catalog = h->replay.catalog;
  const uint64_t capacity = 5 * HandBlockBytes();
  const auto all = [](BlockIndex) { return true; };
  const uint32_t half = 6;
  LearnedArcShadowPool straight(&catalog, capacity);
  for (uint32_t r = 0; r < half; ++r) straight.OnRequest(Chain(*h, r), all);
  ASSERT_EQ(h->Resident(straight.pool()), "abcde") << "the case needs c and d held";

  std::vector<BlockIndex> same(catalog.size());
  for (BlockIndex b = 0; b < same.size(); ++b) same[b] = b;
  LearnedArcShadowPool resumed(&catalog, capacity);
  SaveAndLoad(straight, same, catalog.size(), resumed);
  EXPECT_EQ(h->Resident(resumed.pool()), h->Resident(straight.pool()));
  for (uint32_t r = half; r < h->trace.requests.size(); ++r) {
    EXPECT_EQ(resumed.OnRequest(Chain(*h, r), all), straight.OnRequest(Chain(*h, r), all)) << r;
    EXPECT_EQ(h->Resident(resumed.pool()), h->Resident(straight.pool())) << r;
  }

  // Forgetting c (the real pool does not hold it) drops d below it.
  LearnedArcShadowPool before(&catalog, capacity);
  for (uint32_t r = 0; r < half; ++r) before.OnRequest(Chain(*h, r), all);
  std::vector<BlockIndex> without_c = same;
  without_c[h->Block('c')] = kNoBlock;
  LearnedArcShadowPool after(&catalog, capacity);
  SaveAndLoad(before, without_c, catalog.size(), after);
  EXPECT_EQ(h->Resident(after.pool()), "abe");
  EXPECT_EQ(after.used_bytes(), 3 * HandBlockBytes());
  // It goes on. R6 cd: copies f {a b e f}, misses c (forgotten). R7 e:
  // copies c, then d, for which T1's LRU, e, goes (a and b are in T2, hit
  // at R1 and R4): a miss. R8 ab: e returns from B1 and f makes room; hits.
  EXPECT_EQ(after.OnRequest(Chain(*h, 6), all), 0u);
  EXPECT_EQ(after.OnRequest(Chain(*h, 7), all), 0u);
  EXPECT_EQ(after.OnRequest(Chain(*h, 8), all), 2u);
}

// The learned pool hands its evictions to ARC while ARC's shadow leads.
// A model that says nothing returns (V = 0 for every block: the model's
// order is recency's) in a fresh pool (its refusals have not proved
// themselves, so every block is admitted), so until ARC leads the pool is
// LRU's. In a node's own tier (admission moves no bytes) ARC never leads, and
// the pool stays LRU's to the end. Pool of 3 blocks, R0 a,
// R1 a, R2 b, R3 c, R4 d, R5 a, R6 c, R7 e, R8 f, R9 g.
//   LRU: R4 d evicts a {b c d}; R5 a evicts b {a c d}; R7 e evicts d
//     {a c e}; R8 f evicts a {c e f}; R9 g evicts c, the least recent
//     (used at R6)                                                {e f g}.
//   The shadows are those of the test above up to R5: at R5 ARC's shadow
//   hits a and the recency shadow misses it, so ARC leads from R5 on (the
//   shadows then hit and miss alike).
//   The ARC expert: a went to T2 at R1, but its eviction at R4 was
//   recency's, so a left no ghost: p stays 0. R5 a is new to ARC (T1); the
//   victim is T1's LRU, b, as LRU's. R6 hits c: T2. R7 e: T1 [d a]: d;
//   R8 f: T1 [a e]: a; both as LRU's. R9 g: T1 [e f], T2 [c]: ARC takes e,
//   where LRU takes c                                             {c f g}.
// Its ranking is ARC's too: T1 [f g] (p = 0 < |T1|), then T2 [c]; LRU's
// would be c f g.
TEST(LearnedArcExpertTest, EvictsByArcOnceArcsShadowLeads) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d", "a", "c", "e", "f", "g"});
  auto never = std::make_shared<StandInModel>(
      "never", [](std::span<const float>, std::span<float> out) { out[0] = out[1] = 0; });
  std::vector<std::string> learned, lru, learned_in_tier;
  for (auto [policy, residents, tier] :
       {std::tuple{"learned-model", &learned, false}, std::tuple{"lru", &lru, false},
        std::tuple{"learned-model", &learned_in_tier, true}}) {
    PolicyDriver driver(&h->replay.catalog, 3 * HandBlockBytes());
    PolicyEnv env = MakePolicyEnv(DefaultCost(), never);
    env.admission_moves_bytes = !tier;
    ASSERT_TRUE(driver.StartPolicy(policy, env).ok());
    for (uint32_t r = 0; r < h->trace.requests.size(); ++r) {
      RequestOutcome outcome;
      ASSERT_TRUE(ServeRequest(h->replay, r, driver, outcome).ok());
      residents->push_back(h->Resident(driver.pool()));
    }
    if (std::string_view(policy) != "learned-model" || tier) continue;
    driver.UnpinAll();
    const std::vector<BlockIndex> all = {h->Block('c'), h->Block('f'), h->Block('g')};
    EXPECT_EQ(driver.RankVictims(all),
              (std::vector<BlockIndex>{h->Block('f'), h->Block('g'), h->Block('c')}));
  }
  EXPECT_EQ(lru, (std::vector<std::string>{"a", "a", "ab", "abc", "bcd", "acd", "acd", "ace", "cef",
                                           "efg"}));
  EXPECT_EQ(learned, (std::vector<std::string>{"a", "a", "ab", "abc", "bcd", "acd", "acd", "ace",
                                               "cef", "cfg"}));
  EXPECT_EQ(learned_in_tier, lru);
}

}  // namespace
}  // namespace kvlearn
