// The research switches of the learned policy (policies/learned/ablation.h):
// names are parsed exactly, and an unknown one is refused where the policy
// is made, naming the known ones, rather than switching nothing.
#include <string>

#include "gtest/gtest.h"
#include "policies/learned/ablation.h"
#include "policies/policy_driver.h"
#include "policies/policy_env.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/scoped_env.h"

namespace kvlearn {
namespace {

TEST(LearnedAblationTest, ParsesTheSlugsItNames) {
  const auto none = ParseLearnedAblation("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->None());
  const auto two = ParseLearnedAblation("ledger, gdsf-expert");
  ASSERT_TRUE(two.ok());
  for (size_t i = 0; i < static_cast<size_t>(LearnedPart::kCount); ++i) {
    const auto part = static_cast<LearnedPart>(i);
    EXPECT_EQ(two->Off(part), part == LearnedPart::kLedger || part == LearnedPart::kGdsfExpert)
        << LearnedPartName(part);
    // Every part's own slug turns it, and only it, off.
    const auto alone = ParseLearnedAblation(LearnedPartName(part));
    ASSERT_TRUE(alone.ok());
    for (size_t j = 0; j < static_cast<size_t>(LearnedPart::kCount); ++j) {
      EXPECT_EQ(alone->Off(static_cast<LearnedPart>(j)), i == j);
    }
  }
}

TEST(LearnedAblationTest, AnUnknownPartIsRefusedWhereThePolicyIsMade) {
  const auto h = MakeHandTrace({"a"});
  const ScopedEnv ablate(std::string(kLearnedAblateVariable), "gdsf-expert,ledgr");
  PolicyDriver driver(&h->replay.catalog, 2 * HandBlockBytes());
  const absl::Status s = driver.StartPolicy("learned", MakePolicyEnv(DefaultCost()));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'ledgr'"), std::string_view::npos) << s.message();
  EXPECT_NE(s.message().find(JoinedLearnedPartNames()), std::string_view::npos) << s.message();
  // Other policies do not read the switches.
  PolicyDriver lru(&h->replay.catalog, 2 * HandBlockBytes());
  EXPECT_TRUE(lru.StartPolicy("lru", MakePolicyEnv(DefaultCost())).ok());
}

}  // namespace
}  // namespace kvlearn
