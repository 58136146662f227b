// LearnedModel::Load: a model file read without LibTorch (models/torch_archive.h,
// models/module_pickle.h), its metadata and weights checked, into an MlpModel.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/fnv1a.h"
#include "core/one_line.h"
#include "features/feature_schema.h"
#include "models/learned_model.h"
#include "models/mlp_forward_check.h"
#include "models/mlp_model.h"
#include "models/model_judgement.h"
#include "models/model_metadata_json.h"
#include "models/module_pickle.h"
#include "models/torch_archive.h"

namespace kvlearn {
namespace {

// The class `kvlearn train` writes (SaveModelFile's torch::jit::Module); a
// file written in Python may define it in any module.
constexpr char kModuleClass[] = "KvlearnReuseMlp";
// kvlearn's networks have thousands of weights, not millions: a stride-0 view
// stores one element and would copy to gigabytes.
constexpr int64_t kMaxTensorElements = int64_t{1} << 24;

// A file that is not a readable model archive, and why (one line).
absl::Status NotAModel(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is not a kvlearn model file (TorchScript archive): ", why));
}

// A tensor's elements as floats, in row-major order of its sizes, after
// checking that every element it reaches lies inside `storage` (a damaged
// file's sizes, strides or offset must not read past the record).
absl::StatusOr<std::vector<float>> Elements(const PickledTensor& t, std::string_view storage) {
  int64_t count = 1;
  int64_t last = t.storage_offset;  // index of the last element reached
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    const int64_t size = t.sizes[d], stride = t.strides[d];
    if (size == 0) return std::vector<float>();  // no element to read
    int64_t reach = 0;
    if (__builtin_mul_overflow(count, size, &count) || count > kMaxTensorElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("has more than ", kMaxTensorElements, " elements (limit 2^24)"));
    }
    if (__builtin_mul_overflow(size - 1, stride, &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return absl::InvalidArgumentError("has sizes and strides out of range");
    }
  }
  const size_t item = DtypeBytes(t.dtype);
  const uint64_t stored = storage.size() / item;
  if (static_cast<uint64_t>(last) >= stored) {
    return absl::InvalidArgumentError(
        absl::StrCat("reaches element ", last, " but only ", stored, " are stored"));
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(t.sizes.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t at = t.storage_offset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.strides[d];
    const char* p = storage.data() + static_cast<size_t>(at) * item;
    if (t.dtype == PickledDtype::kFloat32) {
      float f;
      std::memcpy(&f, p, sizeof(f));
      out.push_back(f);
    } else {
      double f;
      std::memcpy(&f, p, sizeof(f));
      out.push_back(static_cast<float>(f));
    }
    for (size_t d = index.size(); d-- > 0;) {  // next index, last dimension fastest
      if (++index[d] < t.sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Tensor `name`'s elements, read from its storage record and checked there.
absl::StatusOr<std::vector<float>> TensorValues(const TorchArchive& archive,
                                                const std::string& name,
                                                const PickledTensor& tensor,
                                                const std::string& path) {
  auto storage = archive.Record(absl::StrCat("data/", tensor.storage_key));
  if (!storage.ok()) {
    return NotAModel(path, absl::StrCat("tensor ", name, ": ", storage.status().message()));
  }
  auto elements = Elements(tensor, *storage);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor ", name, " ", elements.status().message()));
  }
  return elements;
}

// The network's layers w<i>, b<i> for i = 0, 1, ... until one is missing.
absl::StatusOr<std::vector<DenseLayer>> ReadLayers(const TorchArchive& archive,
                                                   const std::map<std::string, PickledTensor>& t,
                                                   const std::string& path) {
  std::vector<DenseLayer> layers;
  uint64_t total_elements = 0;
  for (size_t i = 0;; ++i) {
    const std::string w = absl::StrCat("w", i), b = absl::StrCat("b", i);
    const auto w_it = t.find(w), b_it = t.find(b);
    if (w_it == t.end() || b_it == t.end()) break;
    std::vector<float> values[2];
    for (int k = 0; k < 2; ++k) {
      const auto& [name, tensor] = k == 0 ? *w_it : *b_it;
      auto elements = TensorValues(archive, name, tensor, path);
      if (!elements.ok()) return elements.status();
      // Tensors may share a storage: bound the copies' total, not each.
      total_elements += elements->size();
      if (total_elements > static_cast<uint64_t>(kMaxTensorElements)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": the network's tensors hold more than 2^24 elements in all"));
      }
      values[k] = *std::move(elements);
    }
    const PickledTensor& wt = w_it->second;
    if (wt.sizes.size() != 2 || b_it->second.sizes.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": layer ", i, " is not a matrix"));
    }
    DenseLayer d;
    d.weight =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
            values[0].data(), wt.sizes[0], wt.sizes[1]);
    d.bias = Eigen::Map<const Eigen::VectorXf>(values[1].data(), b_it->second.sizes[0]);
    layers.push_back(std::move(d));
  }
  if (layers.empty()) {
    std::string found;
    for (const auto& [name, tensor] : t) {
      absl::StrAppend(&found, found.empty() ? "" : ", ", OneLine(name, 40));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": no tensors w0 and b0; kvlearn reads a network's layers as w0, b0, w1, b1, ... "
        "(tensors in the file: ",
        found.empty() ? "none" : OneLine(found, 200), ")"));
  }
  return layers;
}

// The buffers the file's forward normalises by must be the metadata's, which
// kvlearn normalises by.
absl::Status CheckNormalisation(const TorchArchive& archive,
                                const std::map<std::string, PickledTensor>& t,
                                const ModelMetadata& metadata, const std::string& path) {
  for (const auto& [name, expected] : {std::pair{"feature_mean", &metadata.feature_mean},
                                       {"feature_std", &metadata.feature_std}}) {
    const auto it = t.find(name);
    if (it == t.end()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tensor ", name));
    auto values = TensorValues(archive, name, it->second, path);
    if (!values.ok()) return values.status();
    if (values->size() != expected->size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, " holds ",
                                                     values->size(), " values, ", kMetadataFile,
                                                     " ", expected->size()));
    }
    for (size_t j = 0; j < values->size(); ++j) {
      const float a = (*values)[j], b = (*expected)[j];
      if (!(std::fabs(a - b) <= 1e-6f * std::max(std::fabs(a), std::fabs(b)))) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", name, "[", j, "] is ", a, " but ", kMetadataFile, " says ", b,
            "; kvlearn normalises by the metadata, the file's forward by the tensor"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LearnedModel>> LearnedModel::Load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("model file ", path, " does not exist"));
  }
  auto archive = TorchArchive::Read(path);
  if (!archive.ok()) {
    return archive.status().code() == absl::StatusCode::kInvalidArgument
               ? NotAModel(path, archive.status().message())
               : archive.status();
  }
  auto pickle = archive->Record("data.pkl");
  if (!pickle.ok()) return NotAModel(path, pickle.status().message());
  auto state = ReadModulePickle(*pickle, kModuleClass);
  if (!state.ok()) return NotAModel(path, absl::StrCat("data.pkl: ", state.status().message()));
  auto layers = ReadLayers(*archive, state->tensors, path);
  if (!layers.ok()) return layers.status();
  const std::string metadata_record = absl::StrCat("extra/", kMetadataFile);
  if (!archive->Has(metadata_record)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has no ", kMetadataFile, ": not written by kvlearn train"));
  }
  auto metadata_json = archive->Record(metadata_record);
  if (!metadata_json.ok()) return NotAModel(path, metadata_json.status().message());
  auto metadata = ParseModelMetadata(*metadata_json, path);
  if (!metadata.ok()) return metadata.status();
  if (metadata->schema_version != kFeatureSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " was trained on feature schema ", metadata->schema_version,
                     " but this build computes schema ", kFeatureSchemaVersion, "; retrain it"));
  }
  if (metadata->feature_mean.size() != kNumFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expects ",
                                                   metadata->feature_mean.size(),
                                                   " features, this build has ", kNumFeatures));
  }
  // The names say which input is which: as many as the network has inputs,
  // and this build's, in order (a file edited by hand or written by another
  // build must not be read with its columns shifted).
  const size_t inputs = layers->empty() ? metadata->feature_mean.size()
                                        : static_cast<size_t>(layers->front().weight.cols());
  if (metadata->feature_names.size() != inputs) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", kMetadataFile, " lists ",
                                                   metadata->feature_names.size(),
                                                   " feature names for ", inputs, " inputs"));
  }
  for (size_t i = 0; i < inputs && i < kNumFeatures; ++i) {
    if (metadata->feature_names[i] != kFeatureNames[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", kMetadataFile, ": feature_names[", i, "] is '",
                       OneLine(metadata->feature_names[i]), "' but this build computes '",
                       std::string(kFeatureNames[i]), "' there"));
    }
  }
  // The weights run in kvlearn's own MLP, so the file's forward must be
  // that MLP (a file written in Python may hold another).
  auto source = archive->Text(
      absl::StrCat("code/", absl::StrReplaceAll(state->class_module, {{".", "/"}}), ".py"));
  if (!source.ok()) return NotAModel(path, source.status().message());
  if (auto s = CheckMlpForward(*source, kModuleClass, layers->size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  if (auto s = CheckNormalisation(*archive, state->tensors, *metadata, path); !s.ok()) return s;
  // A verdict judges the weights it names: metadata copied onto other weights
  // (a model fine-tuned in Python) is not judged.
  if (metadata->judgement.has_value() &&
      metadata->judgement->weights_fingerprint != WeightsFingerprint(*layers, *metadata)) {
    metadata->judgement.reset();
  }
  // A hash of the file's bytes: two files with other weights or metadata get
  // other versions even when trained on the same trace.
  Fnv1a hash;
  hash.Bytes(archive->bytes());
  const std::string base = path.substr(path.find_last_of('/') + 1);
  auto model = MlpModel::Create(*std::move(layers), *metadata,
                                absl::StrCat(base, "@", absl::Hex(hash.value(), absl::kZeroPad16)));
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", model.status().message()));
  }
  return std::shared_ptr<const LearnedModel>(*model);
}

}  // namespace kvlearn
