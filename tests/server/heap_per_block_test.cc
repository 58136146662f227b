// docs/guarantees.md promises at most 128 heap bytes per tracked block for
// every classic policy in a sidecar pool; this measures it the way
// bench/serve_memory's part 1 does (tests/support/heap_per_block.h).
#include "tests/support/heap_per_block.h"

#include <gtest/gtest.h>

#include <string>

#include "core/block_catalog.h"
#include "tests/support/sanitizer_slowdown.h"

namespace kvlearn {
namespace {

class HeapPerBlockTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HeapPerBlockTest, AClassicPolicyKeepsAtMost128BytesPerTrackedBlock) {
  if (kSanitizerSlowdown != 1) {
    GTEST_SKIP() << "a sanitizer's allocator is not glibc's: mallinfo2 measures nothing there";
  }
  const auto m = MeasureHeapPerBlock(GetParam(), v1::TIER_POOL);
  ASSERT_TRUE(m.ok()) << m.status();
  // Every chain's first block is stored, the other 15 ids are remembered
  // from the request_arrival: a million ids, nothing forgotten.
  EXPECT_EQ(m->blocks_tracked, 1'000'000u);
  EXPECT_LE(m->bytes_per_block, 128.0);
  // A measurement that read nothing (an allocator mallinfo2 does not see)
  // would pass the bound: a pool keeps at least its catalog entry a block.
  EXPECT_GE(m->bytes_per_block, static_cast<double>(sizeof(BlockMeta)));
}

INSTANTIATE_TEST_SUITE_P(Classic, HeapPerBlockTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvlearn
