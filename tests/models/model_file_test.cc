// Training, model files and the two inference paths (LibTorch, Eigen).
#include "models/model_file.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "datasets/workload_generator.h"
#include "learner/blas_kernels.h"
#include "learner/sample_recorder.h"
#include "learner/trainer.h"
#include "models/torch_archive.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  Trace trace;
  CostModel cost{*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100")};
  std::unique_ptr<ReplayTrace> replay;
  SampleSet train, valid;
};

const Fixture& Data() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ChatWorkloadOptions g;
    g.seed = 21;
    g.requests = 2500;
    fx->trace = GenerateChatTrace(g);
    fx->replay = std::make_unique<ReplayTrace>(*BuildReplayTrace(fx->trace, fx->cost));
    RecordOptions o;
    o.pool_bytes = fx->replay->distinct_block_bytes / 10;
    o.horizons_seconds = {60, 600};
    SampleSet all = *RecordSamples(*fx->replay, fx->cost, o);
    fx->train = all.Slice(0, 1500);
    fx->valid = all.Slice(1500, 2000);
    return fx;
  }();
  return *f;
}

TrainedMlp Train(uint64_t seed) {
  TrainOptions o;
  o.seed = seed;
  o.max_epochs = 3;
  o.hidden = {16, 8};
  auto mlp = TrainMlp(Data().train, Data().valid, o, nullptr);
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return *mlp;
}

ModelMetadata Metadata(const TrainedMlp& mlp) {
  ModelMetadata m;
  m.schema_version = kFeatureSchemaVersion;
  m.horizons_seconds = {60, 600};
  m.feature_mean = mlp.feature_mean;
  m.feature_std = mlp.feature_std;
  m.trace_fingerprint = "00112233deadbeef";
  m.created_by = "model_file_test";
  m.training_blas = "OpenBLAS \"test\" build; kernels Haswell; OPENBLAS_CORETYPE unset";
  return m;
}

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("kvlearn_model_file_test_" + name)).string();
}

TEST(TrainerTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  const TrainedMlp a = Train(7), b = Train(7), c = Train(8);
  ASSERT_EQ(a.layers.size(), 3u);
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].weight, b.layers[i].weight) << "layer " << i;
    EXPECT_EQ(a.layers[i].bias, b.layers[i].bias) << "layer " << i;
  }
  EXPECT_NE(a.layers[0].weight, c.layers[0].weight);
}

TEST(TrainerTest, LearnsSomethingAboutReuse) {
  const TrainedMlp m = Train(1);
  // Validation AUC of the 60 s head: better than chance on held-out, later traffic.
  EXPECT_GT(m.history[m.best_epoch - 1].valid_auc[0], 0.6);
}

TEST(TrainerTest, RocAucOnHandCases) {
  const std::vector<uint8_t> all(4, 1);
  EXPECT_DOUBLE_EQ(RocAuc({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}, all), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.9f, 0.8f, 0.2f, 0.1f}, {0, 0, 1, 1}, all), 0.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 1}, all), 0.5);
  // One positive above one of two negatives: 1 of 2 pairs ordered right.
  EXPECT_DOUBLE_EQ(RocAuc({0.3f, 0.1f, 0.5f, 0.0f}, {1, 0, 0, 0}, {1, 1, 1, 0}), 0.5);
  // Only negatives are known: there is no pair to order.
  EXPECT_TRUE(std::isnan(RocAuc({0.3f, 0.1f, 0.5f, 0.0f}, {1, 0, 0, 0}, {0, 1, 1, 1})));
}

TEST(ModelFileTest, EigenPathMatchesLibTorch) {
  const TrainedMlp mlp = Train(3);
  const std::string path = TempPath("agree.pt");
  ASSERT_TRUE(SaveModelFile(path, mlp.layers, Metadata(mlp)).ok());
  auto model = LearnedModel::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  auto module = LoadTorchModule(path);
  ASSERT_TRUE(module.ok()) << module.status();
  const SampleSet& v = Data().valid;
  const auto n = static_cast<int64_t>(std::min<size_t>(v.size(), 2000));
  torch::Tensor x =
      torch::from_blob(const_cast<float*>(v.features.data()), {n, kNumFeatures}).clone();
  torch::Tensor y = module->forward({x}).toTensor().contiguous();
  auto acc = y.accessor<float, 2>();
  float out[2];
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    (*model)->Predict(std::span<const float>(v.features.data() + i * kNumFeatures, kNumFeatures),
                      out);
    for (int k = 0; k < 2; ++k) worst = std::max<double>(worst, std::abs(out[k] - acc[i][k]));
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ((*model)->metadata().trace_fingerprint, "00112233deadbeef");
  EXPECT_EQ((*model)->metadata().horizons_seconds, (std::vector<double>{60, 600}));
  EXPECT_EQ((*model)->metadata().training_blas, Metadata(mlp).training_blas);  // quotes too
  fs::remove(path);
}

TEST(ModelFileTest, BlasKernelsNameTheLibraryTheKernelsAndTheChoice) {
  // This test links LibTorch, so its BLAS is the one training runs on.
  const std::string text = BlasKernels();
  if (text.rfind("not OpenBLAS", 0) == 0) GTEST_SKIP() << text;
  EXPECT_EQ(text.rfind("OpenBLAS ", 0), 0u) << text;
  EXPECT_NE(text.find("; kernels "), std::string::npos) << text;
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  const std::string tail = chosen != nullptr ? std::string("; OPENBLAS_CORETYPE=") + chosen
                                             : std::string("; OPENBLAS_CORETYPE unset");
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(ModelFileTest, RefusesMissingFile) {
  auto m = LearnedModel::Load(TempPath("does_not_exist.pt"));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("does_not_exist.pt"), std::string::npos);
}

TEST(ModelFileTest, RefusesGarbageAndTruncatedFiles) {
  const std::string garbage = TempPath("garbage.pt");
  std::ofstream(garbage) << "this is not a model\n";
  auto g = LearnedModel::Load(garbage);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("not a kvlearn model file"), std::string::npos) << g.status();

  const TrainedMlp mlp = Train(3);
  const std::string good = TempPath("good.pt"), cut = TempPath("cut.pt");
  ASSERT_TRUE(SaveModelFile(good, mlp.layers, Metadata(mlp)).ok());
  const auto size = fs::file_size(good);
  fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, size / 2);
  auto c = LearnedModel::Load(cut);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  fs::remove(garbage);
  fs::remove(good);
  fs::remove(cut);
}

TEST(ModelFileTest, RefusesAnotherFeatureSchema) {
  const TrainedMlp mlp = Train(3);
  ModelMetadata meta = Metadata(mlp);
  meta.schema_version = kFeatureSchemaVersion + 1;
  const std::string path = TempPath("schema.pt");
  ASSERT_TRUE(SaveModelFile(path, mlp.layers, meta).ok());
  auto m = LearnedModel::Load(path);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("feature schema"), std::string::npos) << m.status();
  fs::remove(path);
}

// Schema 1 (23 features, before the request-position features) is what every
// model file written before eviction learning carries.
TEST(ModelFileTest, RefusesAModelOfTheOlderSchemaAskingForARetrain) {
  static_assert(kFeatureSchemaVersion >= 2);
  const TrainedMlp mlp = Train(3);
  ModelMetadata meta = Metadata(mlp);
  meta.schema_version = 1;
  const std::string path = TempPath("schema1.pt");
  ASSERT_TRUE(SaveModelFile(path, mlp.layers, meta).ok());
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("feature schema 1 but this build computes schema " +
                                      std::to_string(kFeatureSchemaVersion)),
            std::string::npos)
      << m.status();
  EXPECT_NE(m.status().message().find("retrain"), std::string::npos) << m.status();
  fs::remove(path);
}

TEST(ModelFileTest, RefusesNonFiniteWeights) {
  TrainedMlp mlp = Train(3);
  mlp.layers[1].weight(0, 0) = std::numeric_limits<float>::quiet_NaN();
  const std::string path = TempPath("nan.pt");
  ASSERT_TRUE(SaveModelFile(path, mlp.layers, Metadata(mlp)).ok());
  auto m = LearnedModel::Load(path);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("non-finite"), std::string::npos) << m.status();
  fs::remove(path);
}

// A model that loads: the small test model of tests/support/test_model.h.
std::string SaveTestModel(const std::string& path, uint64_t seed = 1,
                          ModelMetadata meta = TestModelMetadata()) {
  EXPECT_TRUE(SaveModelFile(path, TestModelLayers(seed), meta).ok());
  return path;
}

TEST(ModelFileTest, VersionIsTheFileNameAndAHashOfTheFileBytes) {
  // Same name, same training trace, other weights: before, both were
  // "model.pt@<fingerprint>".
  const fs::path a_dir = TempPath("version_a"), b_dir = TempPath("version_b");
  fs::create_directories(a_dir);
  fs::create_directories(b_dir);
  ModelMetadata meta = TestModelMetadata();
  meta.trace_fingerprint = "00112233deadbeef";
  auto a = LearnedModel::Load(SaveTestModel((a_dir / "model.pt").string(), 1, meta));
  auto b = LearnedModel::Load(SaveTestModel((b_dir / "model.pt").string(), 2, meta));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->version(), (*b)->version());
  EXPECT_EQ((*a)->version().rfind("model.pt@", 0), 0u) << (*a)->version();
  EXPECT_EQ((*a)->version().size(), std::string("model.pt@").size() + 16) << (*a)->version();
  // The same bytes again: the same version.
  const fs::path copy = b_dir / "model.pt";
  fs::copy_file(a_dir / "model.pt", copy, fs::copy_options::overwrite_existing);
  auto c = LearnedModel::Load(copy.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*a)->version(), (*c)->version());
  fs::remove_all(a_dir);
  fs::remove_all(b_dir);
}

TEST(ModelFileTest, RefusesFeatureNamesThatDoNotMatchTheInputs) {
  ModelMetadata meta = TestModelMetadata();
  for (const auto n : kFeatureNames) meta.feature_names.emplace_back(n);
  meta.feature_names.pop_back();  // one name short
  const std::string path = SaveTestModel(TempPath("names_short.pt"), 1, meta);
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok()) << "a model with " << meta.feature_names.size() << " names for "
                       << kNumFeatures << " inputs loaded";
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(
                absl::StrCat(kNumFeatures - 1, " feature names for ", kNumFeatures, " inputs")),
            std::string::npos)
      << m.status();
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status();

  meta.feature_names.emplace_back("not_a_feature");  // right count, wrong last name
  SaveTestModel(path, 1, meta);
  m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(absl::StrCat("feature_names[", kNumFeatures - 1, "]")),
            std::string::npos)
      << m.status();
  fs::remove(path);
}

TEST(ModelFileTest, RefusesHorizonsTheLearnedPolicyCannotInterpolate) {
  ModelMetadata meta = TestModelMetadata();
  meta.horizons_seconds = {600, 60};  // two outputs, as the layers have, but backwards
  const std::string path = SaveTestModel(TempPath("horizons.pt"), 1, meta);
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("horizons_seconds"), std::string::npos) << m.status();
  fs::remove(path);
}

TEST(ModelFileTest, LibTorchErrorsAreOneLineWithoutAStackTrace) {
  const std::string garbage = TempPath("garbage_line.pt");
  std::ofstream(garbage) << "this is not a model\n";
  const std::string good = SaveTestModel(TempPath("good_line.pt"));
  const std::string cut = TempPath("cut_line.pt");
  fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(good) / 2);
  for (const std::string& path : {garbage, cut}) {
    auto m = LearnedModel::Load(path);
    ASSERT_FALSE(m.ok()) << path;
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status();
    EXPECT_EQ(m.status().message().find("Exception raised from"), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find("not a kvlearn model file"), std::string::npos)
        << m.status();
    auto module = LoadTorchModule(path);
    ASSERT_FALSE(module.ok()) << path;
    EXPECT_EQ(module.status().message().find('\n'), std::string::npos) << module.status();
  }
  fs::remove(garbage);
  fs::remove(good);
  fs::remove(cut);
}

// The four files under tests/models/data/ are inputs fuzz/model_file_fuzzer
// found against the LibTorch-based loader. That loader did not check CRCs;
// today's reader refuses a record failing its CRC before anything else, so
// the files' CRCs were recomputed for the damaged bytes (4 December 2026) and
// each still reaches the check its test names.

// Found by fuzz/model_file_fuzzer: the test model with one byte of its
// pickled tensor metadata changed, so that a tensor's shape reaches past the
// bytes stored for it. LibTorch loads it as is; copying its weights read past
// the buffer (AddressSanitizer: heap-buffer-overflow).
TEST(ModelFileTest, RefusesATensorThatReachesPastItsStorage) {
  const std::string path =
      std::string(KVLEARN_SOURCE_DIR) + "/tests/models/data/tensor_past_storage.model";
  ASSERT_TRUE(fs::exists(path)) << path;
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok()) << "loaded";
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("are stored"), std::string::npos) << m.status();
}

// Found by fuzz/model_file_fuzzer: a pickle stating more elements for a
// storage than its record holds. The unpickler sized the storage from the
// pickle, so the storage check passed and the weights were copied from past
// the record's buffer (AddressSanitizer: heap-buffer-overflow).
TEST(ModelFileTest, RefusesAStorageShorterThanThePickleSays) {
  const std::string path =
      std::string(KVLEARN_SOURCE_DIR) + "/tests/models/data/storage_shorter_than_pickle_says.model";
  ASSERT_TRUE(fs::exists(path)) << path;
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok()) << "loaded";
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("are stored"), std::string::npos) << m.status();
}

// Found by fuzz/model_file_fuzzer: the test model with bytes of its stored
// TorchScript source changed. torch::jit::load compiles that source, and
// LibTorch's parser dies on it (SIGSEGV in
// ScriptTypeParser::parseClassConstant); Load reads the weights without
// compiling anything, so the file is refused (one of its tensors is damaged
// too) and the process lives.
TEST(ModelFileTest, RefusesADamagedArchiveWithoutCompilingItsCode) {
  const std::string path =
      std::string(KVLEARN_SOURCE_DIR) + "/tests/models/data/torchscript_parser_crash.model";
  ASSERT_TRUE(fs::exists(path)) << path;
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("not a kvlearn model file"), std::string::npos) << m.status();
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status();
}

// Found by fuzz/model_file_fuzzer: data.pkl starting with BUILD, nothing on
// the stack. LibTorch's unpickler pops anyway (SIGSEGV in
// Unpickler::readInstruction); the pickle is now checked first.
TEST(ModelFileTest, RefusesAPickleThatPopsAnEmptyStack) {
  const std::string path =
      std::string(KVLEARN_SOURCE_DIR) + "/tests/models/data/pickle_build_on_empty_stack.model";
  ASSERT_TRUE(fs::exists(path)) << path;
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("data.pkl: pickle byte 2"), std::string::npos) << m.status();
}

// Writes `layers` layers whose weights (rows x cols) and biases (rows) are
// stride-0 views of one stored element each: tiny on disk, large to copy.
void SaveStrideZeroModel(const std::string& path, int layers, int64_t rows, int64_t cols) {
  torch::jit::Module module("KvlearnReuseMlp");
  for (int i = 0; i < layers; ++i) {
    module.register_parameter(absl::StrCat("w", i), torch::ones({1, 1}).expand({rows, cols}),
                              false);
    module.register_parameter(absl::StrCat("b", i), torch::zeros({1}).expand({rows}), false);
  }
  module.save(path);
  ASSERT_LT(fs::file_size(path), 1u << 20) << "the views were saved expanded";
}

// A stride-0 view stores one element but copies to 2^25 x 23 floats (3 GB):
// refused before anything is copied.
TEST(ModelFileTest, RefusesATensorOfTooManyElements) {
  const std::string path = TempPath("huge_view.pt");
  SaveStrideZeroModel(path, 1, 1 << 25, kNumFeatures);
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("elements (limit"), std::string::npos) << m.status();
  fs::remove(path);
}

// Each of these views stays under the per-tensor limit (2^22 elements of
// 2^24), but all five layers would copy 5 x (2^22 + 2^12) floats: refused
// before the copy that crosses 2^24.
TEST(ModelFileTest, RefusesTensorsOfTooManyElementsInAll) {
  const std::string path = TempPath("many_views.pt");
  SaveStrideZeroModel(path, 5, 1 << 12, 1 << 10);
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("2^24 elements in all"), std::string::npos) << m.status();
  fs::remove(path);
}

// The reader sees every stored record of an archive LibTorch wrote with the
// bytes LibTorch's own reader (caffe2's PyTorchStreamReader) gives, and
// refuses to read the compressed ones (the TorchScript source) at all.
TEST(ModelFileTest, TheArchiveReaderAgreesWithLibTorchsOnEveryRecord) {
  const TrainedMlp mlp = Train(3);
  const std::string path = TempPath("records.pt");
  ASSERT_TRUE(SaveModelFile(path, mlp.layers, Metadata(mlp)).ok());
  auto archive = TorchArchive::Read(path);
  ASSERT_TRUE(archive.ok()) << archive.status();
  caffe2::serialize::PyTorchStreamReader reader(path);
  size_t stored = 0;
  for (const std::string& name : reader.getAllRecords()) {
    ASSERT_TRUE(archive->Has(name)) << name;
    auto [data, size] = reader.getRecord(name);
    const std::string_view expected(static_cast<const char*>(data.get()), size);
    auto record = archive->Record(name);
    if (record.ok()) {
      EXPECT_EQ(*record, expected) << name;
      ++stored;
    } else {
      EXPECT_NE(record.status().message().find("compressed"), std::string::npos) << name;
      EXPECT_EQ(name.rfind("code/", 0), 0u) << name << " is compressed";
      // The source only as text, inflated to LibTorch's bytes.
      auto text = archive->Text(name);
      ASSERT_TRUE(text.ok()) << name << ": " << text.status();
      EXPECT_EQ(*text, expected) << name;
    }
  }
  // data.pkl, the metadata, and a weight and a bias per layer at least.
  EXPECT_GE(stored, 2 + 2 * mlp.layers.size());
  fs::remove(path);
}

// A file LibTorch wrote with kvlearn's weights and metadata but another
// forward (what a Python author might save): Python would answer with tanh,
// kvlearn with relu, so Load refuses it; the same network with kvlearn's
// forward loads. Likewise normalisation buffers that differ from the metadata.
TEST(ModelFileTest, RefusesAForwardOrNormalisationOtherThanKvlearnsMlp) {
  const TrainedMlp mlp = Train(3);
  const ModelMetadata metadata = Metadata(mlp);
  auto save = [&](const std::string& path, const std::string& hidden_activation, float mean_shift) {
    torch::jit::Module module("KvlearnReuseMlp");
    std::vector<float> mean = metadata.feature_mean;
    mean[0] += mean_shift;
    module.register_buffer("feature_mean", torch::tensor(mean));
    module.register_buffer("feature_std", torch::tensor(metadata.feature_std));
    std::string forward =
        "def forward(self, x):\n    h = (x - self.feature_mean) / self.feature_std\n";
    for (size_t i = 0; i < mlp.layers.size(); ++i) {
      const DenseLayer& l = mlp.layers[i];
      torch::Tensor w = torch::empty({l.weight.rows(), l.weight.cols()});
      for (int r = 0; r < l.weight.rows(); ++r) {
        for (int c = 0; c < l.weight.cols(); ++c) w[r][c] = l.weight(r, c);
      }
      module.register_parameter(absl::StrCat("w", i), w, false);
      module.register_parameter(
          absl::StrCat("b", i),
          torch::tensor(std::vector<float>(l.bias.data(), l.bias.data() + l.bias.size())), false);
      const bool last = i + 1 == mlp.layers.size();
      absl::StrAppend(&forward, "    h = torch.", last ? "sigmoid" : hidden_activation,
                      "(torch.addmm(self.b", i, ", h, self.w", i, ".t()))\n");
    }
    absl::StrAppend(&forward, "    return h\n");
    module.define(forward);
    module.save(path, {{kMetadataFile, ModelMetadataJson(metadata)}});
  };
  const std::string path = TempPath("forward.pt");
  save(path, "relu", 0);
  auto same = LearnedModel::Load(path);
  ASSERT_TRUE(same.ok()) << same.status();

  save(path, "tanh", 0);
  auto tanh = LearnedModel::Load(path);
  ASSERT_FALSE(tanh.ok());
  EXPECT_EQ(tanh.status().code(), absl::StatusCode::kInvalidArgument);
  // Read from the output back, the last hidden layer's activation differs first.
  EXPECT_NE(tanh.status().message().find(absl::StrCat(
                "forward: layer ", mlp.layers.size() - 2,
                "'s output goes through torch.tanh(...) where kvlearn applies torch.relu")),
            std::string::npos)
      << tanh.status();

  save(path, "relu", 0.25f);
  auto shifted = LearnedModel::Load(path);
  ASSERT_FALSE(shifted.ok());
  EXPECT_NE(shifted.status().message().find("tensor feature_mean[0] is"), std::string::npos)
      << shifted.status();
  fs::remove(path);
}

// learned-model cannot run without a model; learned runs on lru and gdsf
// without one.
TEST(ModelFileTest, LearnedModelPolicyNeedsAModelAndLearnedDoesNot) {
  PoolState pool(&Data().replay->catalog, 1 << 30);
  PolicyEnv env{&Data().replay->catalog, &pool, nullptr, nullptr};
  auto none = CreatePolicy("learned-model", env);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--model"), std::string::npos);
  auto learned = CreatePolicy("learned", env);
  ASSERT_TRUE(learned.ok()) << learned.status();
  EXPECT_EQ((*learned)->name(), "learned");
}

}  // namespace
}  // namespace kvlearn
