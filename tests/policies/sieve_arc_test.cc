// SIEVE and ARC (policies/sieve_policy.cc, policies/arc_policy.cc): small
// traces worked out by hand, and a check on generated traces that
// RankVictims over every resident block returns exactly the order in which
// SelectVictim/OnEvict would drain the pool. (The contract test runs both
// policies through the checks every policy meets, Belady's upper bound on
// hits included, because they are in PolicyNames().)
//
// Every block of the hand-worked traces is full (512 tokens of Llama-3-8B KV
// = 64 MiB), so a pool of k blocks is k * 64 MiB. Block ids are letters; a
// prompt "ab" is the chain a -> b. Requests are R0, R1, ...; the blocks of
// the request being served are pinned and never victims.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_model.h"
#include "core/pool_state.h"
#include "datasets/trace.h"
#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

// Replays `h` on a pool of `pool_blocks` full blocks; returns the block hits
// and, in `resident`, the pool's letters after each request.
uint64_t Replay(const HandTrace& h, std::string_view policy, uint64_t pool_blocks,
                std::vector<std::string>* resident = nullptr) {
  PoolReplayOptions options;
  options.pool_bytes = pool_blocks * HandBlockBytes();
  if (resident != nullptr) {
    options.after_request = [&h, resident](uint32_t, const PoolState& pool) {
      resident->push_back(h.Resident(pool));
    };
  }
  auto result = ReplayPool(h.replay, DefaultCost(), policy, options);
  EXPECT_TRUE(result.ok()) << policy << ": " << result.status();
  return result.ok() ? result->block_hits : 0;
}

// Pool of 3 blocks, single-block prompts a b c a d b e a. Queue tail -> head,
// * = visited bit set, ^ = where the hand rests (none: start at the tail).
//   R0-R2 a, b, c:  [a b c], hand none.
//   R3 a: hit a.    [a* b c]
//   R4 d: the hand starts at the tail: a* -> clear, b unvisited: evict b,
//         hand -> c (b's head-side neighbour).       [a ^c d]
//   R5 b: hand at c, unvisited: evict c, hand -> d.  [a ^d b]
//   R6 e: hand at d: evict d, hand -> b.              [a ^b e]
//   R7 a: hit a.                                     total 2 hits.
// LRU (most recent first): R3 [a c b]; R4 d evicts b [d a c]; R5 b evicts c
//   [b d a]; R6 e evicts a [e b d]; R7 a misses.     total 1 hit.
// The hit at R3 kept a through three evictions under SIEVE: the hand cleared
// its bit once and moved on; LRU let a age out.
TEST(SieveTest, VisitedBitSparesABlockThatLruAgesOut) {
  const auto h = MakeHandTrace({"a", "b", "c", "a", "d", "b", "e", "a"});
  std::vector<std::string> resident;
  EXPECT_EQ(Replay(*h, "sieve", 3, &resident), 2u);
  EXPECT_EQ(resident,
            (std::vector<std::string>{"a", "ab", "abc", "abc", "acd", "abd", "abe", "abe"}));
  EXPECT_EQ(Replay(*h, "lru", 3), 1u);
}

// Pool of 4 blocks. A chain's blocks enter deepest-first on the hand's path.
//   R0 abc: a at the head; b's parent a was inserted just before it, so b
//           goes right behind a, and c behind b.     [c b a]
//   R1 d:   d at the head.                          [c b a d]
//   R2 ab:  hit b, a (2 hits).                      [c b* a* d]
//   R3 e:   hand from the tail: c is an unvisited leaf: evict c, hand -> b.
//                                                    [^b* a* d e]
//   R4 f:   b* -> clear; a is interior (b is resident): the hand clears its
//           bit and passes; d unvisited leaf: evict d, hand -> e.
//                                                    [b a ^e f]
//   R5 g:   e unvisited: evict e, hand -> f.         [b a ^f g]
//   R6 ab:  2 hits.                                  total 4.
// LRU: R0 [a b c]; R1 [d a b c]; R2 hits [a b d c]; R3 e evicts c
//   [e a b d]; R4 f evicts d [f e a b]; R5 g evicts b (the least recent
//   leaf) [g f e a]; R6 hits a, misses b.           total 3.
TEST(SieveTest, ChainLeavesLeafFirstAndAHitChainSurvivesTheScan) {
  const auto h = MakeHandTrace({"abc", "d", "ab", "e", "f", "g", "ab"});
  std::vector<std::string> resident;
  EXPECT_EQ(Replay(*h, "sieve", 4, &resident), 4u);
  EXPECT_EQ(resident,
            (std::vector<std::string>{"abc", "abcd", "abcd", "abde", "abef", "abfg", "abfg"}));
  EXPECT_EQ(Replay(*h, "lru", 4), 3u);
}

// Pool of 3 blocks. The hand clears the bit of an interior block it passes
// (see sieve_policy.cc), so once that block becomes a leaf it leaves at the
// next pass unless it was used in between.
//   R0 ab: [b a] (b behind its parent a).
//   R1 ab: 2 hits.                                   [b* a*]
//   R2 c:                                            [b* a* c]
//   R3 d:  b* -> clear; a* interior -> clear; c unvisited leaf: evict c.
//          c was the head: the hand starts again at the tail.  [b a d]
//   R4 e:  b: unvisited leaf: evict b, hand -> a.    [^a d e]
//   R5 f:  a is a leaf now and its bit was cleared at R3: evict a, hand -> d.
//                                                    [^d e f]
//   R6 a:  miss.                                     total 2.
// Had the hand left a's bit alone at R3, R5 would have cleared it and
// evicted d instead, and R6 would hit a.
TEST(SieveTest, PassingAnInteriorBlockClearsItsBit) {
  const auto h = MakeHandTrace({"ab", "ab", "c", "d", "e", "f", "a"});
  std::vector<std::string> resident;
  EXPECT_EQ(Replay(*h, "sieve", 3, &resident), 2u);
  EXPECT_EQ(resident, (std::vector<std::string>{"ab", "ab", "abc", "abd", "ade", "def", "aef"}));
}

// Pool of 2 blocks (c = 2B, B = one block's bytes), single-block prompts
// a b a c b c. Lists LRU first; p starts at 0.
//   R0 a: new: T1 [a].                T1 = B.
//   R1 b: new: T1 [a b].              T1 = 2B.
//   R2 a: hit: T2 [a], T1 [b].        1 hit.
//   R3 c: new; REPLACE: |T1| = B > p = 0: b goes to B1. T1 [c], B1 [b].
//   R4 b: ghost hit in B1: p += B * max(1, |B2| / |B1|) = B * max(1, 0) = B.
//         REPLACE: |T1| = B is not > p = B (and b is not from B2): evict
//         T2's LRU a into B2. b enters T2.  T1 [c], T2 [b], B2 [a].
//         (With p still 0, REPLACE would have evicted c instead.)
//   R5 c: hit.                        2 hits.
//   R6 a: ghost hit in B2: p -= B * max(1, |B1| / |B2|) = B * max(1, 0/B):
//         p = 0. T1 is empty (c moved to T2 at R5), so REPLACE takes T2's
//         LRU, b (R4; c was hit at R5). T2 [c a], B2 [b].
//   R7 c: hit.                        3 hits.
// LRU: R2 hit; R3 c evicts b [c a]; R4 b evicts a [b c]; R5 hit c [c b];
//   R6 a evicts b [a c]; R7 hit c.    3 hits, with the same residents: on
//   this trace the adapted p steers ARC to LRU's choices, where a fixed
//   p = 0 would have evicted c at R4 and missed at R5 and R7.
TEST(ArcTest, GhostHitInB1RaisesTheTargetAndSparesT1) {
  const auto h = MakeHandTrace({"a", "b", "a", "c", "b", "c", "a", "c"});
  std::vector<std::string> resident;
  EXPECT_EQ(Replay(*h, "arc", 2, &resident), 3u);
  EXPECT_EQ(resident, (std::vector<std::string>{"a", "ab", "ab", "ac", "bc", "bc", "ac", "ac"}));
  EXPECT_EQ(Replay(*h, "lru", 2), 3u);
}

// Pool of 2 blocks: ARC's scan resistance. a is used twice (T2), then
// one-off blocks b, c, d pass through T1 while p stays 0 (no ghost is ever
// hit), so REPLACE always evicts from T1 and a survives.
//   R0 a: T1 [a]. R1 a: hit, T2 [a]. R2 b: T1 [b].
//   R3 c: |T1| = B > 0: b -> B1; T1 [c].
//   R4 d: c -> B1; T1 [d]; |T1| + |B1| = 3B > c = 2B: b leaves B1.
//   R5 a: hit.                                      2 hits.
// LRU: R2 [b a]; R3 c evicts a; R5 misses.          1 hit.
TEST(ArcTest, OneOffBlocksDoNotPushOutAFrequentOne) {
  const auto h = MakeHandTrace({"a", "a", "b", "c", "d", "a"});
  std::vector<std::string> resident;
  EXPECT_EQ(Replay(*h, "arc", 2, &resident), 2u);
  EXPECT_EQ(resident, (std::vector<std::string>{"a", "a", "ab", "ac", "ad", "ad"}));
  EXPECT_EQ(Replay(*h, "lru", 2), 1u);
}

// Serves `h`'s requests through a driver whose pool holds everything, then
// ends the last request's pins.
void ServeWithoutEvictions(const HandTrace& h, PolicyDriver& driver) {
  for (uint32_t ri = 0; ri < h.trace.requests.size(); ++ri) {
    RequestOutcome outcome;
    ASSERT_TRUE(ServeRequest(h.replay, ri, driver, outcome).ok());
    ASSERT_EQ(outcome.evicted_blocks, 0u);
  }
  driver.UnpinAll();
}

// Every resident block, ranked; then the order NextVictim/EvictLeaf empty
// the pool in. Both are returned so callers can compare them.
struct RankAndDrain {
  std::vector<BlockIndex> ranked;
  std::vector<BlockIndex> drained;
};

RankAndDrain RankThenDrain(PolicyDriver& driver) {
  RankAndDrain out;
  std::vector<BlockIndex> resident;
  for (BlockIndex b = 0; b < driver.pool().catalog().size(); ++b) {
    if (driver.pool().IsResident(b)) resident.push_back(b);
  }
  out.ranked = driver.RankVictims(resident);
  while (true) {
    auto victim = driver.NextVictim();
    EXPECT_TRUE(victim.ok()) << victim.status();
    if (!victim.ok() || *victim == kNoBlock) break;
    driver.EvictLeaf(*victim);
    out.drained.push_back(*victim);
  }
  return out;
}

// R0 abc, R1 ad, R2 ef, R3 ab, R4 eg, nothing evicted, then drained.
// SIEVE queue, tail -> head: R0 c b a (b and c behind their parents); R1 d at
// the head (its parent a was not the last block inserted); R2 f e; R4 g:
// [c b a d f e g], visited: a (R1, R3), b (R3), e (R4); hand none.
//   From the tail: c unvisited leaf -> out; b* clear; a* clear (interior);
//   d -> out; f -> out; e* clear (interior: g); g -> out; wrap: b (cleared,
//   now a leaf) -> out; a -> out; e -> out.          c d f g b a e.
// ARC stamps (insert or hit): a1 b2 c3; R1 a4 (-> T2) d5; R2 e6 f7; R3 b8
//   (-> T2) a9; R4 e10 (-> T2) g11. T1 = {c3 d5 f7 g11}, T2 = {b8 a9 e10},
//   p = 0 < |T1|: REPLACE empties T1 first, least recent leaf first: c d f g;
//   then T2: b (a leaf once c left), a (once b and d left), e.
//                                                    c d f g b a e.
TEST(RankVictimsTest, SieveAndArcRankInDrainOrder) {
  const auto h = MakeHandTrace({"abc", "ad", "ef", "ab", "eg"});
  std::vector<BlockIndex> want;
  for (const char id : std::string_view("cdfgbae")) want.push_back(h->Block(id));
  for (const std::string_view policy : {"sieve", "arc"}) {
    SCOPED_TRACE(policy);
    PolicyDriver driver(&h->replay.catalog, h->replay.distinct_block_bytes);
    ASSERT_TRUE(driver.StartPolicy(policy, MakePolicyEnv(DefaultCost())).ok());
    ServeWithoutEvictions(*h, driver);
    const RankAndDrain r = RankThenDrain(driver);
    EXPECT_EQ(r.ranked, want);
    EXPECT_EQ(r.drained, want);
  }
}

// On a generated chat trace, at a pool of 10% of the distinct bytes (so
// ARC's ghosts and p and SIEVE's hand are all in play), the replay is
// stopped after a number of requests, the pool is ranked and drained: the
// ranking must be the drain order. With the last request's pins kept, the
// drain stops at the pinned chain, so the drain is a prefix of the ranking.
TEST(RankVictimsTest, RankingIsTheDrainOrderOnAGeneratedTrace) {
  ChatWorkloadOptions options;
  options.seed = 11;
  options.requests = 600;
  const Trace trace = GenerateChatTrace(options);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (const std::string_view policy : {"sieve", "arc"}) {
    for (const uint32_t stop_after : {50u, 300u, 600u}) {
      for (const bool keep_pins : {false, true}) {
        SCOPED_TRACE(std::string(policy) + " after " + std::to_string(stop_after) +
                     (keep_pins ? " requests, pins kept" : " requests"));
        PolicyDriver driver(&replay->catalog, replay->distinct_block_bytes / 10);
        ASSERT_TRUE(driver.StartPolicy(policy, MakePolicyEnv(DefaultCost())).ok());
        uint64_t evicted = 0;
        for (uint32_t ri = 0; ri < stop_after; ++ri) {
          RequestOutcome outcome;
          ASSERT_TRUE(ServeRequest(*replay, ri, driver, outcome).ok());
          evicted += outcome.evicted_blocks;
        }
        if (stop_after == 600) {
          ASSERT_GT(evicted, 0u) << "the pool never filled";
        }
        if (!keep_pins) driver.UnpinAll();
        const uint64_t resident = driver.pool().resident_blocks();
        const RankAndDrain r = RankThenDrain(driver);
        ASSERT_EQ(r.ranked.size(), resident);
        if (keep_pins) {
          ASSERT_LE(r.drained.size(), r.ranked.size());
          EXPECT_TRUE(std::equal(r.drained.begin(), r.drained.end(), r.ranked.begin()));
        } else {
          EXPECT_EQ(r.ranked, r.drained);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvlearn
