#include "core/cost_model.h"

#include <gtest/gtest.h>

#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

// 2 * layers * kv_heads * head_dim * dtype_bytes from each model's config.
TEST(CostModelTest, KvBytesPerTokenFromArchitecture) {
  EXPECT_EQ(FindModelProfile("llama3-8b")->KvBytesPerToken(), 2u * 32 * 8 * 128 * 2);  // 128 KiB
  EXPECT_EQ(FindModelProfile("llama3-8b")->KvBytesPerToken(), 128u * 1024);
  EXPECT_EQ(FindModelProfile("llama3.3-70b")->KvBytesPerToken(), 320u * 1024);
  EXPECT_EQ(FindModelProfile("qwen3-8b")->KvBytesPerToken(), 2u * 36 * 8 * 128 * 2);
}

TEST(CostModelTest, UnknownProfilesNameTheChoices) {
  auto m = FindModelProfile("gpt-9");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama3-8b"), std::string::npos);
  auto h = FindHardwareProfile("tpu");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("a100"), std::string::npos);
}

TEST(CostModelTest, RecomputeFollowsCalibration) {
  const CostModel c = DefaultCost();
  // Below L_cross = 512: linear at 0.026 ms/token.
  EXPECT_NEAR(c.RecomputeMs(256), 0.026 * 256, 1e-9);
  // Above: 0.026 * 1024 + 8e-6 * (1024 - 512)^2 = 26.624 + 2.097152.
  EXPECT_NEAR(c.RecomputeMs(1024), 28.721152, 1e-9);
  EXPECT_EQ(c.RecomputeMs(0), 0.0);
}

TEST(CostModelTest, RecomputeIsContinuousAndMonotonic) {
  const CostModel c = DefaultCost();
  for (uint64_t l = 1; l < 70000; l += 37) EXPECT_LT(c.RecomputeMs(l - 1), c.RecomputeMs(l)) << l;
  // No jump at L_cross: one token more costs about alpha_bw.
  EXPECT_NEAR(c.RecomputeMs(513) - c.RecomputeMs(512), 0.026, 1e-4);
}

TEST(CostModelTest, DeeperBlocksCostMore) {
  const CostModel c = DefaultCost();
  double previous = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    const double block = c.RecomputeMs(i * 512, (i + 1) * 512);
    EXPECT_GE(block, previous) << "block " << i;
    previous = block;
  }
}

TEST(CostModelTest, BiggerModelCostsMoreToRecompute) {
  const CostModel small = DefaultCost();
  const CostModel big(*FindModelProfile("llama3.3-70b"), *FindHardwareProfile("a100"));
  EXPECT_NEAR(big.RecomputeMs(4096) / small.RecomputeMs(4096), 70.6 / 8.03, 1e-9);
}

TEST(CostModelTest, TransferAtLinkBandwidth) {
  const CostModel c = DefaultCost();  // 25 GB/s
  EXPECT_NEAR(c.TransferMs(25'000'000'000ull), 1000.0, 1e-9);
  EXPECT_NEAR(c.TransferMs(128 * 1024 * 512), 128.0 * 1024 * 512 / 25e6, 1e-12);
}

}  // namespace
}  // namespace kvlearn
