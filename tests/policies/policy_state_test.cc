// RetentionPolicy::SaveState / LoadState for every online policy: a policy
// loaded from another's saved state decides exactly as the original from
// then on (admissions, scores, victims, rankings, priorities); a state saved
// through a compaction's renumbering keeps what the policy knew of the blocks
// kept and drops the forgotten ones; and damaged bytes are refused or loaded,
// never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "datasets/workload_generator.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

std::vector<std::string> OnlinePolicies() {
  std::vector<std::string> out;
  for (const std::string_view name : PolicyNames()) {
    if (!IsOfflinePolicy(name) && !IsRecomputeBound(name)) out.emplace_back(name);
  }
  return out;
}

// "kvlearn-cars" -> "kvlearn_cars".
std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// The test model's gains refuse almost every block, which would leave the
// learned policy's eviction side (curves, values, the guard) idle: it runs
// as on a tier whose admission moves no bytes, admitting every block (its
// gains are still computed, and logged as admission scores).
PolicyEnv Env(const std::string& policy) {
  PolicyEnv env = MakePolicyEnv(DefaultCost(), PolicyUsesModel(policy) ? MakeTestModel() : nullptr);
  env.admission_moves_bytes = !PolicyUsesModel(policy);
  return env;
}

// A chat trace with think times around the kvlearn-cars horizon, so label
// windows open, close and expire.
const ReplayTrace& SampleTrace() {
  static const auto* trace = [] {
    ChatWorkloadOptions o;
    o.seed = 11;
    o.requests = 400;
    o.sessions_per_second = 0.5;
    o.mean_think_time_s = 120;
    return new Trace(GenerateChatTrace(o));
  }();
  static const auto* replay = new ReplayTrace(*BuildReplayTrace(*trace, DefaultCost()));
  return *replay;
}

uint64_t PoolBytes() { return SampleTrace().distinct_block_bytes / 12; }  // many evictions

std::string Hex(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", d);
  return buf;
}

std::vector<BlockIndex> Residents(const PolicyDriver& d) {
  std::vector<BlockIndex> out;
  for (BlockIndex b = 0; b < d.pool().catalog().size(); ++b) {
    if (d.pool().IsResident(b)) out.push_back(b);
  }
  return out;
}

// Every resident block as the policy ranks it for eviction, with priorities.
std::string Ranking(const PolicyDriver& d) {
  std::string out = "rank";
  for (const BlockIndex b : d.RankVictims(Residents(d))) {
    out += " " + std::to_string(b) + "@" + Hex(d.EvictionPriority(b));
  }
  return out + "\n";
}

// Requests [from, to) of the sample trace as the sidecar drives a pool: the
// chain announced and held, hits deepest first, the missing blocks offered
// root first, victims taken until each fits. Returns every decision.
std::string Drive(PolicyDriver& d, size_t from, size_t to) {
  const ReplayTrace& replay = SampleTrace();
  const BlockCatalog& catalog = replay.catalog;
  std::string log;
  for (size_t r = from; r < to; ++r) {
    const TraceRequest& q = replay.trace->requests[r];
    const std::span<const BlockIndex> chain(replay.blocks.data() + q.first_block, q.num_blocks);
    AccessInfo access{q.timestamp_ms, static_cast<uint32_t>(r), q.first_block};
    d.AnnounceRequest(chain, access);
    d.Hold(chain);
    const uint32_t hits = d.Lookup(chain);
    for (uint32_t i = hits; i-- > 0;) d.Hit(chain[i], access);
    log += "r" + std::to_string(r) + " hits " + std::to_string(hits);
    for (uint32_t i = hits; i < chain.size(); ++i) {
      const BlockIndex b = chain[i];
      const bool admit = d.ShouldAdmit(b, access);
      log += " a" + std::to_string(b) + ":" + std::to_string(admit) + ":" +
             Hex(d.policy().AdmissionScore(b, admit));
      if (!admit) break;
      while (d.pool().free_bytes() < catalog[b].bytes) {
        const auto victim = d.NextVictim();
        EXPECT_TRUE(victim.ok()) << victim.status();
        if (!victim.ok() || *victim == kNoBlock) break;
        log += " v" + std::to_string(*victim);
        d.EvictLeaf(*victim);
      }
      if (d.pool().free_bytes() < catalog[b].bytes) break;
      d.Insert(b, access);
    }
    log += "\n";
    d.Release(chain);
    if (r % 16 == 0) log += Ranking(d);
  }
  return log + Ranking(d);
}

std::vector<BlockIndex> Identity(size_t n) {
  std::vector<BlockIndex> out(n);
  for (size_t b = 0; b < n; ++b) out[b] = static_cast<BlockIndex>(b);
  return out;
}

// A fresh driver over `catalog` holding `residents`, its policy loaded from
// `state`.
std::unique_ptr<PolicyDriver> Restored(const BlockCatalog& catalog, const std::string& policy,
                                       const std::vector<BlockIndex>& residents,
                                       std::string_view state, absl::Status* status) {
  auto d = std::make_unique<PolicyDriver>(&catalog, PoolBytes());
  EXPECT_TRUE(d->StartPolicy(policy, Env(policy)).ok());
  d->RestoreResidents(residents);
  *status = d->LoadPolicyState(state);
  return d;
}

class PolicyStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyStateTest, ALoadedPolicyDecidesAsTheOriginal) {
  const ReplayTrace& replay = SampleTrace();
  const size_t n = replay.trace->requests.size();
  for (const size_t at : {n / 5, n / 2, 4 * n / 5}) {
    PolicyDriver original(&replay.catalog, PoolBytes());
    ASSERT_TRUE(original.StartPolicy(GetParam(), Env(GetParam())).ok());
    Drive(original, 0, at);
    ASSERT_GT(original.pool().evictions(), 0u) << "no eviction yet: a weak test";
    const auto state = original.SavePolicyState(Identity(replay.catalog.size()));
    ASSERT_TRUE(state.ok()) << state.status();
    absl::Status loaded;
    auto copy = Restored(replay.catalog, GetParam(), Residents(original), *state, &loaded);
    ASSERT_TRUE(loaded.ok()) << loaded;
    // Saving what was loaded gives the same bytes back.
    EXPECT_EQ(copy->SavePolicyState(Identity(replay.catalog.size())).value(), *state) << at;
    EXPECT_EQ(Drive(*copy, at, n), Drive(original, at, n)) << "restored after request " << at;
  }
}

// Decisions that differ are what the saved state is for: a fresh policy over
// the same resident set (what a snapshot restored before) decides otherwise.
TEST_P(PolicyStateTest, AFreshPolicyOverTheSameResidentsDecidesOtherwise) {
  const ReplayTrace& replay = SampleTrace();
  const size_t n = replay.trace->requests.size();
  PolicyDriver original(&replay.catalog, PoolBytes());
  ASSERT_TRUE(original.StartPolicy(GetParam(), Env(GetParam())).ok());
  Drive(original, 0, n / 2);
  PolicyDriver fresh(&replay.catalog, PoolBytes());
  ASSERT_TRUE(fresh.StartPolicy(GetParam(), Env(GetParam())).ok());
  AccessInfo access;
  access.time_ms = replay.trace->requests[n / 2 - 1].timestamp_ms;
  for (const BlockIndex b : Residents(original)) fresh.Insert(b, access);
  EXPECT_NE(Drive(fresh, n / 2, n), Drive(original, n / 2, n));
}

// A compaction's renumbering: every resident block and half of the others
// kept (each with its parent), renumbered in order. What the policy knew of
// the residents survives: the same ranking and priorities, renumbered.
TEST_P(PolicyStateTest, ACompactionKeepsWhatThePolicyKnewOfTheKeptBlocks) {
  const ReplayTrace& replay = SampleTrace();
  const size_t n = replay.trace->requests.size();
  PolicyDriver original(&replay.catalog, PoolBytes());
  ASSERT_TRUE(original.StartPolicy(GetParam(), Env(GetParam())).ok());
  Drive(original, 0, n / 2);
  const BlockCatalog& old = replay.catalog;
  std::vector<BlockIndex> renumber(old.size(), kNoBlock);
  BlockCatalog kept;
  for (BlockIndex b = 0; b < old.size(); ++b) {
    const BlockIndex parent = old[b].parent;
    const bool parent_kept = parent == kNoBlock || renumber[parent] != kNoBlock;
    if (!original.pool().IsResident(b) && (b % 2 == 1 || !parent_kept)) continue;
    BlockMeta meta = old[b];
    if (parent != kNoBlock) meta.parent = renumber[parent];
    renumber[b] = kept.Add(meta);
  }
  ASSERT_LT(kept.size(), old.size());
  const auto state = original.SavePolicyState(renumber);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<BlockIndex> residents;
  for (const BlockIndex b : Residents(original)) residents.push_back(renumber[b]);
  absl::Status loaded;
  auto rebuilt = Restored(kept, GetParam(), residents, *state, &loaded);
  ASSERT_TRUE(loaded.ok()) << loaded;
  std::string expected = "rank";
  for (const BlockIndex b : original.RankVictims(Residents(original))) {
    expected += " " + std::to_string(renumber[b]) + "@" + Hex(original.EvictionPriority(b));
  }
  EXPECT_EQ(Ranking(*rebuilt), expected + "\n");
}

// Ghost lists through a compaction, by hand: four one-block chains fill a
// pool of four blocks, the first two are evicted into the ghost list, a
// compaction keeps ghost 0 and forgets ghost 1. Re-admitted, ghost 0 is a
// returning ghost in both pools (same ranking and priorities); block 1 is one
// in the original and a stranger (appended as block 5) in the rebuilt pool.
class GhostCompactionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GhostCompactionTest, KeptGhostsStayGhostsAndForgottenOnesAreGone) {
  constexpr uint64_t kBytes = 1 << 20;
  BlockCatalog old;
  for (uint64_t id = 0; id < 6; ++id)
    old.Add({.hash_id = 100 + id,
             .parent = kNoBlock,
             .depth = 0,
             .tokens = 16,
             .bytes = kBytes,
             .recompute_gpu_ms = 1.0});
  PolicyDriver original(&old, 4 * kBytes);
  ASSERT_TRUE(original.StartPolicy(GetParam(), Env(GetParam())).ok());
  AccessInfo access;
  const auto admit = [&access](PolicyDriver& d, BlockIndex b) {
    ++access.request;
    ++access.time_ms;
    const BlockIndex chain[] = {b};
    d.AnnounceRequest(chain, access);
    ASSERT_TRUE(d.ShouldAdmit(b, access));
    d.Insert(b, access);
  };
  for (BlockIndex b = 0; b < 4; ++b) admit(original, b);
  for (const BlockIndex expected : {0u, 1u}) {
    ASSERT_EQ(original.NextVictim().value(), expected);
    original.EvictLeaf(expected);
  }
  const std::vector<BlockIndex> renumber = {0, kNoBlock, 1, 2, 3, 4};
  BlockCatalog kept;
  for (const BlockIndex b : {0, 2, 3, 4, 5, 1}) kept.Add(old[b]);  // 1 comes back as 5
  absl::Status loaded;
  auto rebuilt =
      Restored(kept, GetParam(), {1, 2}, original.SavePolicyState(renumber).value(), &loaded);
  ASSERT_TRUE(loaded.ok()) << loaded;
  // The original's ranking in the rebuilt pool's numbers.
  const std::vector<BlockIndex> to_rebuilt = {0, 5, 1, 2, 3, 4};
  const auto ranking_of_original = [&] {
    std::string out = "rank";
    for (const BlockIndex b : original.RankVictims(Residents(original))) {
      out += " " + std::to_string(to_rebuilt[b]) + "@" + Hex(original.EvictionPriority(b));
    }
    return out + "\n";
  };
  const AccessInfo before = access;
  admit(original, 0);
  access = before;
  admit(*rebuilt, 0);
  EXPECT_EQ(Ranking(*rebuilt), ranking_of_original());
  const AccessInfo before_second = access;
  admit(original, 1);
  access = before_second;
  admit(*rebuilt, 5);
  EXPECT_NE(Ranking(*rebuilt), ranking_of_original());
}

INSTANTIATE_TEST_SUITE_P(GhostLists, GhostCompactionTest, ::testing::Values("arc", "s3fifo"),
                         TestName);

// Damaged bytes: every truncation is refused (DATA_LOSS); flipped bytes and
// absurd lengths are refused or load, never crash (CI runs this under ASan).
TEST_P(PolicyStateTest, DamagedBytesAreRefusedOrLoadedNeverACrash) {
  const ReplayTrace& replay = SampleTrace();
  PolicyDriver original(&replay.catalog, PoolBytes());
  ASSERT_TRUE(original.StartPolicy(GetParam(), Env(GetParam())).ok());
  Drive(original, 0, replay.trace->requests.size() / 2);
  const std::string state = original.SavePolicyState(Identity(replay.catalog.size())).value();
  const std::vector<BlockIndex> residents = Residents(original);
  const size_t step = std::max<size_t>(1, state.size() / 300);
  absl::Status st;
  for (size_t len = 0; len < state.size(); len += len < 64 ? 1 : step) {
    Restored(replay.catalog, GetParam(), residents, state.substr(0, len), &st);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << "truncated to " << len;
  }
  const std::string huge = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";  // 2^64 - 1
  for (size_t at = 0; at < state.size(); at += std::max<size_t>(1, state.size() / 200)) {
    for (const std::string& damaged :
         {state.substr(0, at) + static_cast<char>(state[at] ^ 0x5a) + state.substr(at + 1),
          state.substr(0, at) + huge + state.substr(at)}) {
      Restored(replay.catalog, GetParam(), residents, damaged, &st);
      EXPECT_TRUE(st.ok() || st.code() == absl::StatusCode::kDataLoss) << at << ": " << st;
    }
  }
  Restored(replay.catalog, GetParam(), residents, state + "x", &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << "a trailing byte";
}

INSTANTIATE_TEST_SUITE_P(Online, PolicyStateTest, ::testing::ValuesIn(OnlinePolicies()), TestName);

// learned saves each expert's pool after its own: a state naming an expert
// twice (bytes copied within a snapshot) would restore that pool's residents
// twice over, so it is refused.
TEST(PolicyStateTest, ALearnedStateNamingAnExpertTwiceIsRefused) {
  const ReplayTrace& replay = SampleTrace();
  PolicyDriver original(&replay.catalog, PoolBytes());
  ASSERT_TRUE(original.StartPolicy("learned", Env("learned")).ok());
  Drive(original, 0, replay.trace->requests.size() / 2);
  const std::string state = original.SavePolicyState(Identity(replay.catalog.size())).value();
  // Experts in order lru, gdsf, learned-model, each opening with its name
  // (length, bytes), the count of experts just before the first.
  const size_t gdsf = state.rfind("\x04gdsf");
  ASSERT_NE(gdsf, std::string::npos);
  const size_t lru = state.rfind("\x03lru", gdsf);
  ASSERT_NE(lru, std::string::npos);
  ASSERT_EQ(state[lru - 1], 3) << "the expert count precedes lru's section";
  absl::Status st;
  Restored(replay.catalog, "learned", Residents(original), state, &st);
  ASSERT_TRUE(st.ok()) << st;
  const std::string lru_section = state.substr(lru, gdsf - lru);
  const std::string twice =
      state.substr(0, lru - 1) + '\x04' + lru_section + state.substr(lru);  // lru, lru, gdsf, ...
  Restored(replay.catalog, "learned", Residents(original), twice, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("lru saved twice"), std::string::npos) << st;
}

TEST(PolicyStateTest, OfflinePoliciesSayTheyCannotSave) {
  const ReplayTrace& replay = SampleTrace();
  for (const std::string_view name : PolicyNames()) {
    if (!IsOfflinePolicy(name) && !IsRecomputeBound(name)) continue;
    PolicyDriver d(&replay.catalog, PoolBytes());
    PolicyEnv env = Env(std::string(name));
    env.next_use = &replay.next_use;
    ASSERT_TRUE(d.StartPolicy(name, env).ok()) << name;
    EXPECT_EQ(d.SavePolicyState(Identity(replay.catalog.size())).status().code(),
              absl::StatusCode::kUnimplemented)
        << name;
  }
}

}  // namespace
}  // namespace kvlearn
