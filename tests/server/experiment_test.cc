// The experiment file's parser and the node -> arm assignment
// (server/experiment.h): the documented hash, shares kept on many node ids,
// stability, and an error naming the field for each kind of bad file.
#include "server/experiment.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/splitmix64.h"

namespace kvlearn {
namespace {

Experiment Parse(const std::string& json) {
  auto x = ParseExperiment(json, "x.json");
  EXPECT_TRUE(x.ok()) << x.status();
  return x.ok() ? *x : Experiment{};
}

// The error of a bad file, which must name `field`.
void ExpectRefused(const std::string& json, const std::string& field) {
  auto x = ParseExperiment(json, "x.json");
  ASSERT_FALSE(x.ok()) << json;
  EXPECT_EQ(x.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(x.status().message());
  EXPECT_NE(message.find("x.json: " + field + ":"), std::string::npos)
      << "wanted field " << field << " in: " << message;
}

TEST(ExperimentTest, ParsesArmsAndShadows) {
  const Experiment x = Parse(R"({"arms": [
      {"name": "base", "policy": "lru", "share": 0.25},
      {"name": "new", "policy": "learned", "model": "m.pt", "share": 0.75}],
    "shadows": [{"name": "g", "policy": "gdsf"}]})");
  ASSERT_EQ(x.arms.size(), 2u);
  EXPECT_EQ(x.arms[1].name, "new");
  EXPECT_EQ(x.arms[1].policy, "learned");
  EXPECT_EQ(x.arms[1].model, "m.pt");
  EXPECT_DOUBLE_EQ(x.arms[0].share, 0.25);
  ASSERT_EQ(x.shadows.size(), 1u);
  EXPECT_EQ(x.shadows[0].policy, "gdsf");
  EXPECT_TRUE(x.shadows[0].model.empty());
}

// The header documents the hash: FNV-1a 64 with the published basis, then
// splitmix64. FNV-1a("a") is the published test vector 0xaf63dc4c8601ec8c.
TEST(ExperimentTest, NodeHashIsTheDocumentedOne) {
  uint64_t state = 0xaf63dc4c8601ec8cULL;
  EXPECT_EQ(NodeHashUnit("a"), SplitMix64Uniform(state));
  state = 0xcbf29ce484222325ULL;  // FNV-1a of nothing: the basis itself
  EXPECT_EQ(NodeHashUnit(""), SplitMix64Uniform(state));
}

// On 10k node ids every arm gets its share within 2 points, and the same id
// always lands on the same arm (a second experiment object, same shares).
TEST(ExperimentTest, ArmsGetTheirSharesOfTenThousandNodes) {
  const std::string json = R"({"arms": [
      {"name": "a", "policy": "lru", "share": 0.2},
      {"name": "b", "policy": "gdsf", "share": 0.5},
      {"name": "c", "policy": "lfu", "share": 0.3}]})";
  const Experiment x = Parse(json);
  const Experiment again = Parse(json);
  constexpr int kNodes = 10000;
  std::vector<int> count(3, 0);
  for (int i = 0; i < kNodes; ++i) {
    const std::string node = "prefill-" + std::to_string(i);
    const size_t arm = x.ArmOf(node);
    ASSERT_LT(arm, 3u);
    EXPECT_EQ(again.ArmOf(node), arm) << node;
    ++count[arm];
  }
  for (size_t a = 0; a < 3; ++a) {
    EXPECT_NEAR(static_cast<double>(count[a]) / kNodes, x.arms[a].share, 0.02) << x.arms[a].name;
  }
}

// Moving share between two arms moves only nodes between those two: a node
// of an arm whose cumulative interval is unchanged stays.
TEST(ExperimentTest, ANodeKeepsItsArmWhileItsIntervalStays) {
  const Experiment before = Parse(R"({"arms": [
      {"name": "a", "policy": "lru", "share": 0.5},
      {"name": "b", "policy": "gdsf", "share": 0.25},
      {"name": "c", "policy": "lfu", "share": 0.25}]})");
  const Experiment after = Parse(R"({"arms": [
      {"name": "a", "policy": "lru", "share": 0.5},
      {"name": "b", "policy": "gdsf", "share": 0.1},
      {"name": "c", "policy": "lfu", "share": 0.4}]})");
  int moved = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string node = "n" + std::to_string(i);
    const size_t a = before.ArmOf(node), b = after.ArmOf(node);
    if (a == 0) {
      EXPECT_EQ(b, 0u) << node;  // [0, 0.5) in both
    }
    if (a == 2) {
      EXPECT_EQ(b, 2u) << node;  // [0.75, 1) inside [0.6, 1)
    }
    moved += a != b;
    if (a != b) {
      EXPECT_TRUE(a == 1 && b == 2) << node;
    }
  }
  EXPECT_GT(moved, 0);
}

TEST(ExperimentTest, EachBadFileIsRefusedNamingTheField) {
  ExpectRefused("{", "(file)");
  ExpectRefused("[]", "(file)");
  ExpectRefused(R"({"arms": [], "extra": 1})", "extra");
  ExpectRefused(R"({"shadows": []})", "arms");
  ExpectRefused(R"({"arms": {}})", "arms");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 1, "colour": 2}]})",
                "arms[0].colour");
  ExpectRefused(R"({"arms": [{"policy": "lru", "share": 1}]})", "arms[0].name");
  ExpectRefused(R"({"arms": [{"name": "a b", "policy": "lru", "share": 1}]})", "arms[0].name");
  ExpectRefused(R"({"arms": [{"name": "a", "share": 1}]})", "arms[0].policy");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru"}]})", "arms[0].share");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": "1"}]})", "arms[0].share");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 0}]})", "arms[0].share");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": 3, "share": 1}]})", "arms[0].policy");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                            {"name": "b", "policy": "lru", "share": 0.4}]})",
                "arms[].share");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 0.5},
                            {"name": "a", "policy": "gdsf", "share": 0.5}]})",
                "arms[1].name");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 1}],
                   "shadows": [{"name": "s", "policy": "lru", "share": 1}]})",
                "shadows[0].share");
  ExpectRefused(R"({"arms": [{"name": "a", "policy": "lru", "share": 1}],
                   "shadows": [{"name": "s", "policy": "lru"}, {"name": "s", "policy": "gdsf"}]})",
                "shadows[1].name");
}

}  // namespace
}  // namespace kvlearn
