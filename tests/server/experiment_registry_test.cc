// Experiment arms naming the data directory's model registry
// (server/registry_model_reference.h) in a real sidecar on loopback:
//  - "registry:serving" loads what registry.json names, at start and again at
//    every reload, so moving the pointer and reloading switches the arm;
//    "registry:vN" stays on N; with nothing serving the arm has no model;
//  - a damaged entry named by an arm is refused, naming it, and the arm keeps
//    the model it had; a start naming it fails;
//  - a restart loads what the pointer names then.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/model_registry.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr char kExperiment[] = R"({"arms": [
  {"name": "lru", "policy": "lru", "share": 0.4},
  {"name": "follow", "policy": "learned", "model": "registry:serving", "share": 0.3},
  {"name": "pinned", "policy": "learned", "model": "registry:v1", "share": 0.3}]})";

class ExperimentRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.File("data");
    std::filesystem::create_directories(data_);
    experiment_ = dir_.File("experiment.json");
    std::ofstream(experiment_) << kExperiment;
    // Two versions, seed 1 and seed 2 of the test model.
    for (const uint64_t seed : {1, 2}) {
      const std::string file = dir_.File(absl::StrCat("m", seed, ".pt"));
      ASSERT_TRUE(CopyTestModel(file, seed));
      auto registry = ModelRegistry::Open(data_);
      ASSERT_TRUE(registry.ok()) << registry.status();
      auto version = registry->Register(file, "test", std::nullopt);
      ASSERT_TRUE(version.ok()) << version.status();
      ASSERT_EQ(*version, static_cast<int>(seed));
    }
  }

  absl::StatusOr<std::unique_ptr<SidecarServer>> Start() {
    SidecarOptions o = TestOptions(data_);
    o.policy.clear();
    o.experiment_path = experiment_;
    o.cost = std::make_shared<CostModel>(DefaultCost());
    return SidecarServer::Start(o);
  }

  // Makes `version` serve, as `kvlearn model promote` records it.
  void Serve(int version) {
    auto registry = ModelRegistry::Open(data_);
    ASSERT_TRUE(registry.ok()) << registry.status();
    ServingChange change;
    change.action = "promote";
    change.to = version;
    change.from = registry->serving();
    ASSERT_TRUE(registry->Record(change).ok());
  }

  // "name=learned:vN.pt@CHECKSUM" as DescribeArms writes an arm serving N.
  std::string Arm(const std::string& name, int version) {
    auto registry = ModelRegistry::Open(data_);
    EXPECT_TRUE(registry.ok()) << registry.status();
    auto entry = registry->Find(version);
    EXPECT_TRUE(entry.ok()) << entry.status();
    return absl::StrCat(name, "=learned:v", version, ".pt@", (*entry)->checksum);
  }

  TempDir dir_;
  std::string data_;
  std::string experiment_;
};

TEST_F(ExperimentRegistryTest, ServingArmsFollowThePointerAtStartReloadAndRestart) {
  {
    // Nothing serves yet: the following arm runs learned without a model.
    auto server = Start();
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ((*server)->experiment_arms(),
              absl::StrCat("lru=lru,follow=learned,", Arm("pinned", 1)));
    Serve(1);
    auto arms = (*server)->ReloadExperiment();
    ASSERT_TRUE(arms.ok()) << arms.status();
    EXPECT_EQ(*arms, absl::StrCat("lru=lru,", Arm("follow", 1), ",", Arm("pinned", 1)));
    Serve(2);
    arms = (*server)->ReloadExperiment();
    ASSERT_TRUE(arms.ok()) << arms.status();
    EXPECT_EQ(*arms, absl::StrCat("lru=lru,", Arm("follow", 2), ",", Arm("pinned", 1)));
  }
  // A restart loads what the pointer names now.
  auto server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->experiment_arms(),
            absl::StrCat("lru=lru,", Arm("follow", 2), ",", Arm("pinned", 1)));
}

TEST_F(ExperimentRegistryTest, ADamagedEntryIsRefusedAndTheArmKeepsItsModel) {
  Serve(1);
  auto server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string before = absl::StrCat("lru=lru,", Arm("follow", 1), ",", Arm("pinned", 1));
  ASSERT_EQ((*server)->experiment_arms(), before);
  // Version 2's model file changes after it was registered.
  {
    std::fstream f(data_ + "/models/v2.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("\x00\x01", 2);
  }
  Serve(2);
  auto arms = (*server)->ReloadExperiment();
  ASSERT_FALSE(arms.ok());
  EXPECT_NE(arms.status().message().find("arms[1].model: registry entry version 2"),
            std::string::npos)
      << arms.status();
  EXPECT_NE(arms.status().message().find("has checksum"), std::string::npos) << arms.status();
  EXPECT_EQ((*server)->experiment_arms(), before);
  server->reset();
  // A start naming it fails, saying why.
  auto refused = Start();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("registry entry version 2"), std::string::npos)
      << refused.status();
}

TEST_F(ExperimentRegistryTest, AReferenceOfNeitherFormIsRefusedNamingTheField) {
  std::ofstream(experiment_) << R"({"arms": [
    {"name": "a", "policy": "learned", "model": "registry:latest", "share": 1}]})";
  auto server = Start();
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("arms[0].model: 'registry:latest' names no registry"),
            std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace kvlearn
