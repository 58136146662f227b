// Invariants of the shift generator: determinism, everything the Mooncake
// reader checks, the mix of components on each side of the shift point (the
// exact counts the shares give), no block shared across it, and prompts as
// long as each side's mix makes them.
#include <cmath>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "tests/support/same_trace.h"
#include "tests/support/well_formed_trace.h"

namespace kvlearn {
namespace {

ShiftWorkloadOptions Small(uint64_t seed = 1) {
  ShiftWorkloadOptions o;
  o.seed = seed;
  o.requests = 5000;
  return o;
}

// Requests of each component among requests [from, to).
std::vector<size_t> Counts(const std::vector<ShiftComponent>& kinds, size_t from, size_t to) {
  std::vector<size_t> counts(3, 0);
  for (size_t i = from; i < to; ++i) ++counts[static_cast<size_t>(kinds[i])];
  return counts;
}

double MeanBlocks(const Trace& trace, size_t from, size_t to) {
  double blocks = 0;
  for (size_t i = from; i < to; ++i) blocks += trace.requests[i].num_blocks;
  return blocks / static_cast<double>(to - from);
}

TEST(ShiftWorkloadTest, DefaultsValidBadOptionsRefused) {
  EXPECT_TRUE(ValidateShiftWorkloadOptions({}).ok());
  ShiftWorkloadOptions o;
  o.shift_at = 1.5;
  EXPECT_FALSE(ValidateShiftWorkloadOptions(o).ok());
  o = {};
  o.after.rag = -1;
  EXPECT_FALSE(ValidateShiftWorkloadOptions(o).ok());
  o = {};
  o.before = {};  // all zero
  EXPECT_FALSE(ValidateShiftWorkloadOptions(o).ok());
  o = {};
  o.coder.mean_edit_blocks = 0;  // a component's options are checked too
  EXPECT_FALSE(ValidateShiftWorkloadOptions(o).ok());
}

TEST(ShiftWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  std::vector<ShiftComponent> a_kinds, b_kinds;
  const Trace a = GenerateShiftTrace(Small(7), &a_kinds);
  EXPECT_TRUE(SameTrace(a, GenerateShiftTrace(Small(7), &b_kinds)));
  EXPECT_EQ(a_kinds, b_kinds);
  EXPECT_FALSE(SameTrace(a, GenerateShiftTrace(Small(8))));
}

TEST(ShiftWorkloadTest, WellFormed) {
  const ShiftWorkloadOptions o = Small();
  ExpectWellFormed(GenerateShiftTrace(o), o.requests, 131072);
}

// 5000 requests, shift at 0.8: the first 4000 are the before mix (0.7 / 0.15
// / 0.15: 2800 chat, 600 rag, 600 coder), the last 1000 the after mix (0.2 /
// 0.4 / 0.4: 200, 400, 400). The second phase's users and documents are new,
// so no request after the shift shares a block with one before it.
TEST(ShiftWorkloadTest, MixBeforeAndAfterTheShift) {
  const ShiftWorkloadOptions o = Small();
  std::vector<ShiftComponent> kinds;
  const Trace trace = GenerateShiftTrace(o, &kinds);
  ASSERT_EQ(kinds.size(), 5000u);
  EXPECT_EQ(Counts(kinds, 0, 4000), (std::vector<size_t>{2800, 600, 600}));
  EXPECT_EQ(Counts(kinds, 4000, 5000), (std::vector<size_t>{200, 400, 400}));

  std::unordered_set<uint64_t> before;
  for (size_t i = 0; i < 4000; ++i) {
    const auto ids = trace.BlocksOf(trace.requests[i]);
    before.insert(ids.begin(), ids.end());
  }
  for (size_t i = 4000; i < 5000; ++i) {
    for (const uint64_t id : trace.BlocksOf(trace.requests[i])) {
      ASSERT_EQ(before.count(id), 0u) << "request " << i;
    }
  }
  EXPECT_LE(trace.requests[3999].timestamp_ms, trace.requests[4000].timestamp_ms);

  // Chat prompts average ~17 blocks, rag ~30, coder ~62 (their tests), so the
  // before mix averages ~25 blocks and the after mix ~40: 1.3x at least.
  EXPECT_GT(MeanBlocks(trace, 4000, 5000), 1.3 * MeanBlocks(trace, 0, 4000));
}

// The shift point moves with shift_at; at 0 or 1 the trace is one mix.
TEST(ShiftWorkloadTest, ShiftPointFollowsTheOption) {
  ShiftWorkloadOptions o = Small();
  o.shift_at = 0.5;
  std::vector<ShiftComponent> kinds;
  GenerateShiftTrace(o, &kinds);
  EXPECT_EQ(Counts(kinds, 0, 2500), (std::vector<size_t>{1750, 375, 375}));
  EXPECT_EQ(Counts(kinds, 2500, 5000), (std::vector<size_t>{500, 1000, 1000}));
  o.shift_at = 0;
  const Trace after_only = GenerateShiftTrace(o, &kinds);
  EXPECT_EQ(after_only.requests.size(), 5000u);
  EXPECT_EQ(Counts(kinds, 0, 5000), (std::vector<size_t>{1000, 2000, 2000}));
  o.shift_at = 1;
  GenerateShiftTrace(o, &kinds);
  EXPECT_EQ(Counts(kinds, 0, 5000), (std::vector<size_t>{3500, 750, 750}));
}

}  // namespace
}  // namespace kvlearn
