// Small traces worked out by hand. Every block is full (512 tokens of
// Llama-3-8B KV = 64 MiB), so a pool of k blocks is k * 64 MiB and "room"
// means a free slot. Block ids are letters; a prompt "ab" is the chain a -> b.
//
// Notation in the derivations: requests R0, R1, ...; "evict x" happens when a
// new block needs a slot; the blocks of the request being served are pinned
// and never victims; only leaves (resident blocks without resident children)
// can be evicted.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_model.h"
#include "core/pool_state.h"
#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

uint64_t BlockHits(const HandTrace& h, std::string_view policy, uint64_t pool_blocks,
                   std::function<void(uint32_t, const PoolState&)> after_request = nullptr) {
  PoolReplayOptions options;
  options.pool_bytes = pool_blocks * HandBlockBytes();
  options.after_request = std::move(after_request);
  auto result = ReplayPool(h.replay, DefaultCost(), policy, options);
  EXPECT_TRUE(result.ok()) << policy << ": " << result.status();
  return result.ok() ? result->block_hits : 0;
}

// Pool of 3 blocks; "ab" is used twice, then two one-off chains under c push
// it out, then "ab" comes back.
//
// LRU (list most -> least recent; a new block sits right behind its parent):
//   R0 ab: insert a, b.                          [a b]
//   R1 ab: hit b, a (2 hits).                    [a b]
//   R2 cd: c fits.                               [c a b]
//          d: evict b (least recent leaf).       [c d a]
//   R3 ce: hit c (1 hit). e: evict a.            [c e d]
//   R4 ab: a: evict d. b: evict e.               0 hits
//   total 3.
// LFU (count since insert, then least recent, then deeper):
//   R0 ab: a=1, b=1.   R1 ab: hits (2), a=2, b=2.
//   R2 cd: c fits (c=1). d: leaves are b (2) and c (pinned): evict b; a is
//          now a leaf. d=1.                      {a c d}
//   R3 ce: hit c (1 hit), c=2. e: leaves a (2), d (1): evict d. e=1.
//                                                {a c e}
//   R4 ab: hit a (1 hit). b: leaves e (1), a pinned: evict e.
//   total 4: LFU kept a through the one-off traffic, LRU did not.
// Belady (next uses: R0 a,b -> R1; R1 a,b -> R4; R2 c -> R3, d never;
//   R3 c, e never; R4 never):
//   R0 ab: both fit.  R1 ab: 2 hits.  R2 cd: c fits; d is never used again:
//   refused.  R3 ce: hit c (1); e refused.  R4 ab: 2 hits.   total 5.
// oracle-admission (LRU, but refuses blocks never used again): d and e are
//   refused, so the pool never fills and nothing is evicted: the same 5 hits.
TEST(HandWorkedPolicyTest, LruAndLfuDisagreeOnAFrequentChain) {
  const auto h = MakeHandTrace({"ab", "ab", "cd", "ce", "ab"});
  EXPECT_EQ(BlockHits(*h, "lru", 3), 3u);
  EXPECT_EQ(BlockHits(*h, "lfu", 3), 4u);
  EXPECT_EQ(BlockHits(*h, "belady", 3), 5u);
  EXPECT_EQ(BlockHits(*h, "oracle-admission", 3), 5u);
}

// Pool of 3 blocks. Under FIFO, a is the oldest block but has younger
// children, so it cannot be evicted before them.
//
// FIFO (insertion order):
//   R0 ab: a(1) b(2).
//   R1 ac: hit a (1 hit); c(3) fits.                         {a b c}
//   R2 de: d: the oldest block, a, still has children b and c; the oldest
//          leaf is b(2): evict b.                            {a c d}
//          e: a still has c; the leaves are c(3) and d (pinned): evict c.
//                                                            {a d e}
//   R3 ab: hit a (1 hit). b: the only unpinned leaf is e: evict e.
//   total 2, and a survived R2 although it was the first block in.
// LRU: R0 [a b]. R1 hit a, c behind a: [a c b]. R2 d: evict b; [d a c];
//   e: evict c; [d e a]. R3 hit a; b: evict e.  total 2.
// LFU: R0 a=1 b=1. R1 hit a (a=2), c=1. R2 d: leaves b (1, R0), c (1, R1):
//   evict b; e: leaves c, d pinned: evict c. R3 hit a; b: evict e.  total 2.
// Belady (R0 a -> R1, b -> R3; R1 a -> R3, c never; R2 d, e never;
//   R3 never): R0 both fit. R1 hit a; c refused. R2 d refused.
//   R3 hit a, b.  total 3.
TEST(HandWorkedPolicyTest, PrefixConstraintKeepsAnOldAncestor) {
  const auto h = MakeHandTrace({"ab", "ac", "de", "ab"});
  bool checked = false;
  EXPECT_EQ(BlockHits(*h, "fifo", 3,
                      [&](uint32_t request, const PoolState& pool) {
                        if (request != 2) return;
                        checked = true;
                        EXPECT_TRUE(pool.IsResident(h->Block('a')));
                        EXPECT_FALSE(pool.IsResident(h->Block('b')));
                        EXPECT_FALSE(pool.IsResident(h->Block('c')));
                      }),
            2u);
  EXPECT_TRUE(checked);
  EXPECT_EQ(BlockHits(*h, "lru", 3), 2u);
  EXPECT_EQ(BlockHits(*h, "lfu", 3), 2u);
  EXPECT_EQ(BlockHits(*h, "belady", 3), 3u);
}

// Pool of 2 blocks. cd is used again, but only after ab's two reuses, so the
// oracle does not let it in.
//
// LRU: R0 [a b]. R1 cd: c evicts b, d evicts a: [c d]. R2 ab: a evicts d,
//   b evicts c: [a b]. R3 ab: 2 hits. R4 cd: misses.  total 2.
// LFU: the same evictions (R1: b then a, all counts 1; R2: d (R1) then c;
//   R4: b, a).  total 2.
// Belady (R0 a,b -> R2; R1 c,d -> R4; R2 a,b -> R3; R3 and R4 never):
//   R0 ab: both fit.
//   R1 cd: pool full. c is next used at R4; the victim would be b, next used
//          at R2, sooner: refuse c (and so d).
//   R2 ab: 2 hits.  R3 ab: 2 hits.  R4 cd: c never used again: refused.
//   total 4. Admitting c and d (evicting b, a) would have cost R2's two hits
//   and R3's would only come back after re-admitting ab: 2 hits.
// oracle-admission: every block of R0-R2 is used again, so it admits them all
//   and evicts like LRU (R1: b, then a; R2: d, then c): R3's 2 hits, and R4's
//   c is refused.  total 2: knowing that cd returns is not enough, the oracle
//   also needs to know that it returns after ab.
TEST(HandWorkedPolicyTest, OracleBypassKeepsTheSoonerChain) {
  const auto h = MakeHandTrace({"ab", "cd", "ab", "ab", "cd"});
  EXPECT_EQ(BlockHits(*h, "lru", 2), 2u);
  EXPECT_EQ(BlockHits(*h, "lfu", 2), 2u);
  EXPECT_EQ(BlockHits(*h, "belady", 2), 4u);
  EXPECT_EQ(BlockHits(*h, "oracle-admission", 2), 2u);
}

// Pool of 6 blocks. Marginal recompute costs under llama3-8b/a100 (R(L) =
// 0.026 L, plus 8e-6 (L - 512)^2 beyond 512 tokens):
//   depth 0: 13.31 ms   depth 1: 15.41 ms   depth 2: 19.60 ms   depth 3: 23.80 ms
// so the depth-3 block s of "pqrs" costs more than the blocks of "cd", at the
// same size and the same frequency (1).
//
// GDSF (H = L + freq * cost / size, size s equal for all; L starts at 0):
//   R0 pqrs: H p=13.31/s q=15.41/s r=19.60/s s=23.80/s.
//   R1 cd:   H c=13.31/s d=15.41/s. Pool full; leaves s and d.
//   R2 ef:   e: evict the smaller-H leaf d (15.41 < 23.80); L = 15.41/s.
//            e: H = L + 13.31/s.
//            f: leaves s (23.80/s), c (13.31/s), e pinned: evict c.
//            p and q (13.31/s, 15.41/s) are as cheap as c and d but interior.
//   R3 pqrs: 4 hits.                                             total 4.
// LRU: R2 evicts s then r (the oldest leaves); R3 hits p, q.     total 2.
// LFU: all counts 1; R2 evicts s (R0, older than d) then r.      total 2.
// Belady: c, d, e, f are never used again and are refused.      total 4.
TEST(HandWorkedPolicyTest, GdsfKeepsTheCostlierDeepBlock) {
  const auto h = MakeHandTrace({"pqrs", "cd", "ef", "pqrs"});
  const BlockCatalog& catalog = h->replay.catalog;
  ASSERT_GT(catalog[h->Block('s')].recompute_gpu_ms, catalog[h->Block('d')].recompute_gpu_ms);
  ASSERT_GT(catalog[h->Block('d')].recompute_gpu_ms, catalog[h->Block('c')].recompute_gpu_ms);
  ASSERT_EQ(catalog[h->Block('d')].recompute_gpu_ms, catalog[h->Block('q')].recompute_gpu_ms);
  ASSERT_EQ(catalog[h->Block('c')].recompute_gpu_ms, catalog[h->Block('p')].recompute_gpu_ms);

  bool checked = false;
  EXPECT_EQ(BlockHits(*h, "gdsf", 6,
                      [&](uint32_t request, const PoolState& pool) {
                        if (request != 2) return;
                        checked = true;
                        for (const char kept : {'p', 'q', 'r', 's', 'e', 'f'}) {
                          EXPECT_TRUE(pool.IsResident(h->Block(kept))) << kept;
                        }
                      }),
            4u);
  EXPECT_TRUE(checked);
  EXPECT_EQ(BlockHits(*h, "lru", 6), 2u);
  EXPECT_EQ(BlockHits(*h, "lfu", 6), 2u);
  EXPECT_EQ(BlockHits(*h, "belady", 6), 4u);
}

// S3-FIFO (policies/s3fifo_policy.cc), pool of 4 blocks: the small queue S
// targets 10% of the bytes (0.4 blocks), the main queue M the other 3.6; a
// victim comes from M only when M holds more than 3.6 blocks (all 4) or S is
// empty. Single-block prompts; queues front (next to leave) first, f = the
// 2-bit counter, G = the ghost FIFO.
//   R0-R3 a b c d: all enter S.                 S [a b c d]
//   R4, R5 a: hits, a f=2.  R6 b: hit, b f=1.   (3 hits)
//   R7 e: scan S: a (f 2) moves to M with f 0; b (f 1 < 2) is evicted into G.
//                                               S [c d e]  M [a]  G [b]
//   R8 b: in G. Scan S: c evicted into G; b enters M, leaving G.
//                                               S [d e]  M [a b]  G [c]
//   R9 a: hit, a f=1.                           (4 hits)
//   R10 f: d evicted into G.                    S [e f]  M [a b]  G [c d]
//   R11 c: in G: e evicted into G; c enters M.  S [f]  M [a b c]  G [d e]
//   R12 d: in G: f evicted into G; d enters M.  S []  M [a b c d]  G [e f]
//   R13 g: M is over 3.6 blocks: CLOCK over M: a (f 1) goes to the back with
//          f 0; b (f 0) is evicted (from M: not into G). g enters S.
//                                               S [g]  M [c d a]
//   R14 b: not in G: g is evicted from S, b enters S.   total 4 hits.
TEST(HandWorkedPolicyTest, S3FifoPromotesTwiceHitBlocksAndRemembersWhatLeftTheSmallQueue) {
  const auto h =
      MakeHandTrace({"a", "b", "c", "d", "a", "a", "b", "e", "b", "a", "f", "c", "d", "g", "b"});
  std::vector<std::string> resident;
  EXPECT_EQ(
      BlockHits(*h, "s3fifo", 4,
                [&](uint32_t, const PoolState& pool) { resident.push_back(h->Resident(pool)); }),
      4u);
  EXPECT_EQ(resident,
            (std::vector<std::string>{"a", "ab", "abc", "abcd", "abcd", "abcd", "abcd", "acde",
                                      "abde", "abde", "abef", "abcf", "abcd", "acdg", "abcd"}));
}

// Serves `h`'s requests against a pool large enough to never evict, the way
// ReplayPool does (the request announced, hits deepest first, then inserts
// root to leaf), then unpins everything.
void ServeWithoutEvictions(const HandTrace& h, RetentionPolicy& policy, PoolState& pool) {
  const Trace& trace = h.trace;
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    const TraceRequest& r = trace.requests[ri];
    pool.BeginRequest();
    AccessInfo access;
    access.request = ri;
    access.time_ms = r.timestamp_ms;
    uint32_t hits = 0;
    while (hits < r.num_blocks && pool.IsResident(h.replay.blocks[r.first_block + hits])) ++hits;
    policy.OnRequest({h.replay.blocks.data() + r.first_block, r.num_blocks}, access);
    for (uint32_t i = hits; i-- > 0;) {
      const BlockIndex b = h.replay.blocks[r.first_block + i];
      access.access_pos = r.first_block + i;
      pool.Pin(b);
      policy.OnHit(b, access);
    }
    for (uint32_t i = hits; i < r.num_blocks; ++i) {
      const BlockIndex b = h.replay.blocks[r.first_block + i];
      access.access_pos = r.first_block + i;
      ASSERT_TRUE(policy.ShouldAdmit(b, access));
      pool.Insert(b);
      pool.Pin(b);
      policy.OnInsert(b, access);
    }
  }
  pool.BeginRequest();
}

// Ranks every resident block, then drains the pool through SelectVictim; the
// two orders must agree (and match the hand-derived one).
void ExpectRankMatchesEvictionOrder(std::string_view policy_name, std::string_view expected) {
  SCOPED_TRACE(policy_name);
  // R0 abc, R1 ad, R2 ef, R3 ab, R4 eg.
  const auto h = MakeHandTrace({"abc", "ad", "ef", "ab", "eg"});
  PoolState pool(&h->replay.catalog, h->replay.distinct_block_bytes);
  PolicyEnv env{&h->replay.catalog, &pool, &h->replay.next_use};
  auto policy = CreatePolicy(policy_name, env);
  ASSERT_TRUE(policy.ok()) << policy.status();
  ServeWithoutEvictions(*h, **policy, pool);

  std::vector<BlockIndex> resident;
  for (BlockIndex b = 0; b < h->replay.catalog.size(); ++b) {
    if (pool.IsResident(b)) resident.push_back(b);
  }
  std::vector<BlockIndex> want;
  for (const char id : expected) want.push_back(h->Block(id));
  EXPECT_EQ((*policy)->RankVictims(resident), want);

  std::vector<BlockIndex> drained;
  while (pool.resident_blocks() > 0) {
    const BlockIndex victim = (*policy)->SelectVictim();
    ASSERT_NE(victim, kNoBlock);
    ASSERT_TRUE(pool.IsEvictable(victim));
    pool.Evict(victim);
    (*policy)->OnEvict(victim);
    drained.push_back(victim);
  }
  EXPECT_EQ(drained, want);
}

// LRU stamps (a new block shares its parent's stamp; each hit takes a new one,
// deepest first): R0 a=b=c=1; R1 a=2, d=2; R2 e=f=3; R3 b=4, a=5; R4 e=6,
// g=6. Oldest first, deeper first on ties: c(1) d(2) f(3) b(4) a(5) g(6)
// e(6). Draining agrees: c, d, f are leaves; then b (c gone), a (b and d
// gone), g, e.
TEST(RankVictimsTest, LruRanksInEvictionOrder) { ExpectRankMatchesEvictionOrder("lru", "cdfbage"); }

// LFU (count, request stamp, depth): a(3, R3, 0) b(2, R3, 1) c(1, R0, 2)
// d(1, R1, 1) e(2, R4, 0) f(1, R2, 1) g(1, R4, 1). Fewest accesses first,
// then least recent: c d f g b e a. Draining agrees: leaves c, d, f, g go
// first; b becomes a leaf after c, e after f and g, a after b and d.
TEST(RankVictimsTest, LfuRanksInEvictionOrder) { ExpectRankMatchesEvictionOrder("lfu", "cdfgbea"); }

}  // namespace
}  // namespace kvlearn
