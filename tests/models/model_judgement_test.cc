// A model's verdict and training traffic in its metadata
// (models/model_judgement.h, models/model_metadata_json.h): they round-trip
// exactly, files written without them load as not judged, and a verdict that
// the file's costs or weights do not back is not believed.
#include "models/model_judgement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/learned_model.h"
#include "models/model_file.h"
#include "models/model_metadata_json.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

namespace fs = std::filesystem;

PoolJudgement Pool(double fraction, double learned, double lru, const char* best, double best_s) {
  PoolJudgement p;
  p.pool_fraction = fraction;
  p.pool_bytes = static_cast<uint64_t>(fraction * 1e12);
  p.learned_cost_s = learned;
  p.lru_cost_s = lru;
  p.best_heuristic = best;
  p.best_heuristic_cost_s = best_s;
  return p;
}

ModelMetadata Judged(std::vector<PoolJudgement> pools, uint64_t weights_seed = 1) {
  ModelMetadata meta = TestModelMetadata();
  ModelJudgement j;
  j.first_request = 600;
  j.end_request = 800;
  j.pools = std::move(pools);
  j.weights_fingerprint = WeightsFingerprint(TestModelLayers(weights_seed), meta);
  meta.judgement = j;
  TrafficSummary t;
  t.requests = 600;
  t.request_rate_per_s = 1.0 / 3;  // not a short decimal: must still read back exactly
  t.mean_prompt_blocks = 22.75;
  t.block_reuse_ratio = 0.1 + 0.2;
  t.block_size_tokens = 512;
  meta.training_traffic = t;
  return meta;
}

TEST(PoolJudgementTest, FitMeansCheaperThanBothAndATieIsNot) {
  EXPECT_TRUE(Pool(0.1, 90, 100, "gdsf", 95).fit());
  EXPECT_FALSE(Pool(0.1, 96, 100, "gdsf", 95).fit());   // beats lru, not gdsf
  EXPECT_FALSE(Pool(0.1, 95, 100, "gdsf", 95).fit());   // a tie is no win
  EXPECT_FALSE(Pool(0.1, 100, 100, "lru", 100).fit());  // lru itself the best
  ModelJudgement j;
  EXPECT_FALSE(j.fit()) << "judged at no pool is not fit";
  j.pools = {Pool(0.05, 90, 100, "gdsf", 95), Pool(0.1, 96, 100, "arc", 95)};
  EXPECT_FALSE(j.fit()) << "fit means fit at every pool";
  j.pools[1].learned_cost_s = 94;
  EXPECT_TRUE(j.fit());
}

// learned can beat its heuristics by switching between them with a model of
// no worth: it must beat itself without the model too, where that was priced.
TEST(PoolJudgementTest, FitNeedsLearnedCheaperThanWithoutItsModelWhenPriced) {
  PoolJudgement p = Pool(0.1, 90, 100, "gdsf", 95);
  ASSERT_LT(p.no_model_cost_s, 0) << "not priced: judged on the other costs";
  p.no_model_cost_s = 91;
  EXPECT_TRUE(p.fit());
  p.no_model_cost_s = 90;  // a tie: the model added nothing
  EXPECT_FALSE(p.fit());
  p.no_model_cost_s = 85;
  EXPECT_FALSE(p.fit());
}

TEST(ModelMetadataJsonTest, VerdictAndTrafficRoundTripExactly) {
  PoolJudgement priced = Pool(0.1, 1, 2, "a\"rc", 1.5);
  priced.no_model_cost_s = 1.0 / 3;  // not a short decimal: must still read back exactly
  const ModelMetadata meta = Judged({Pool(0.05, 1930.25, 1887.5, "gdsf", 1685.125), priced});
  auto back = ParseModelMetadata(ModelMetadataJson(meta), "m.pt");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->judgement.has_value());
  const ModelJudgement& j = *back->judgement;
  EXPECT_EQ(j.first_request, 600u);
  EXPECT_EQ(j.end_request, 800u);
  EXPECT_EQ(j.weights_fingerprint, meta.judgement->weights_fingerprint);
  ASSERT_EQ(j.pools.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const PoolJudgement &a = j.pools[i], &b = meta.judgement->pools[i];
    EXPECT_EQ(a.pool_fraction, b.pool_fraction);
    EXPECT_EQ(a.pool_bytes, b.pool_bytes);
    EXPECT_EQ(a.learned_cost_s, b.learned_cost_s);
    EXPECT_EQ(a.lru_cost_s, b.lru_cost_s);
    EXPECT_EQ(a.best_heuristic, b.best_heuristic);
    EXPECT_EQ(a.best_heuristic_cost_s, b.best_heuristic_cost_s);
    EXPECT_EQ(a.no_model_cost_s, b.no_model_cost_s);  // -1 (absent) reads back as absent
  }
  EXPECT_FALSE(j.fit());
  ASSERT_TRUE(back->training_traffic.has_value());
  const TrafficSummary &t = *back->training_traffic, &u = *meta.training_traffic;
  EXPECT_EQ(t.requests, u.requests);
  EXPECT_EQ(t.request_rate_per_s, u.request_rate_per_s);
  EXPECT_EQ(t.mean_prompt_blocks, u.mean_prompt_blocks);
  EXPECT_EQ(t.block_reuse_ratio, u.block_reuse_ratio);
  EXPECT_EQ(t.block_size_tokens, u.block_size_tokens);
}

TEST(ModelMetadataJsonTest, MetadataWithoutTheSectionsIsNotJudged) {
  auto back = ParseModelMetadata(ModelMetadataJson(TestModelMetadata()), "old.pt");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->judgement.has_value());
  EXPECT_FALSE(back->training_traffic.has_value());
  // A file written before: the build-time test models carry neither section.
  auto old = LearnedModel::Load(TestModelFile(1));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE((*old)->metadata().judgement.has_value());
  EXPECT_FALSE((*old)->metadata().training_traffic.has_value());
  EXPECT_EQ(UnfitModelLine((*old)->metadata(), "old.pt"), "");
}

TEST(ModelMetadataJsonTest, AVerdictTheCostsContradictIsRefused) {
  std::string json = ModelMetadataJson(Judged({Pool(0.1, 110, 100, "gdsf", 95)}));
  const size_t at = json.find("\"verdict\": \"unfit\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 18, "\"verdict\": \"fit\"");
  auto back = ParseModelMetadata(json, "edited.pt");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("edited.pt"), std::string::npos);
  EXPECT_NE(back.status().message().find("judgement.verdict"), std::string::npos);
}

TEST(ModelMetadataJsonTest, ANegativeCostWithoutAModelIsRefusedNamingTheField) {
  PoolJudgement p = Pool(0.1, 110, 100, "gdsf", 95);
  p.no_model_cost_s = 7;
  std::string json = ModelMetadataJson(Judged({p}));
  const std::string field = "\"no_model_cost_s\": 7";
  const size_t at = json.find(field);
  ASSERT_NE(at, std::string::npos);
  json.replace(at, field.size(), "\"no_model_cost_s\": -7");
  auto back = ParseModelMetadata(json, "edited.pt");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("judgement.pools[0].no_model_cost_s"), std::string::npos)
      << back.status();
}

class ModelFileVerdictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvlearn_verdict_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(ModelFileVerdictTest, TheVerdictReadsBackOnTheWeightsItJudged) {
  const ModelMetadata meta = Judged({Pool(0.1, 110, 100, "gdsf", 95)});
  ASSERT_TRUE(SaveModelFile(Path("unfit.pt"), TestModelLayers(1), meta).ok());
  auto model = LearnedModel::Load(Path("unfit.pt"));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->metadata().judgement.has_value());
  EXPECT_FALSE((*model)->metadata().judgement->fit());
  const std::string line = UnfitModelLine((*model)->metadata(), "unfit.pt");
  EXPECT_NE(line.find("unfit.pt is marked unfit"), std::string::npos) << line;
  EXPECT_NE(line.find("learned 110.0 s vs lru 100.0 s (+10.00%), best heuristic gdsf 95.0 s"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  ASSERT_TRUE((*model)->metadata().training_traffic.has_value());
  EXPECT_EQ((*model)->metadata().training_traffic->block_size_tokens, 512u);
}

TEST_F(ModelFileVerdictTest, OtherWeightsUnderTheSameMetadataAreNotJudged) {
  // As when a model is fine-tuned in Python and the metadata copied over.
  const ModelMetadata meta = Judged({Pool(0.1, 90, 100, "gdsf", 95)}, /*weights_seed=*/1);
  ASSERT_TRUE(SaveModelFile(Path("tuned.pt"), TestModelLayers(2), meta).ok());
  auto model = LearnedModel::Load(Path("tuned.pt"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->metadata().judgement.has_value());
  // Its training traffic still describes the data it was fitted on.
  EXPECT_TRUE((*model)->metadata().training_traffic.has_value());
  // Another normalisation is other weights too.
  ModelMetadata shifted = meta;
  shifted.feature_mean[0] = 1;
  ASSERT_TRUE(SaveModelFile(Path("shifted.pt"), TestModelLayers(1), shifted).ok());
  auto reloaded = LearnedModel::Load(Path("shifted.pt"));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_FALSE((*reloaded)->metadata().judgement.has_value());
}

TEST(UnfitModelLineTest, SilentForAFitModel) {
  EXPECT_EQ(UnfitModelLine(Judged({Pool(0.1, 90, 100, "gdsf", 95)}), "fit.pt"), "");
}

}  // namespace
}  // namespace kvlearn
