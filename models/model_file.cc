#include "models/model_file.h"

#include <caffe2/serialize/inline_container.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "features/feature_schema.h"
#include "models/pickle_check.h"

namespace kvlearn {
namespace {

// What LibTorch says went wrong, in one line: a c10::Error's what() carries
// a C++ stack trace after the message, and the message itself can span lines
// (TorchScript source excerpts). Operators get the first line.
std::string TorchMessage(const std::exception& e) {
  std::string_view text = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) text = c10->what_without_backtrace();
  const size_t end = text.find_first_of("\r\n");
  if (end != std::string_view::npos) text = text.substr(0, end);
  if (text.size() > 300) text = text.substr(0, 300);
  return text.empty() ? std::string("(no message)") : std::string(text);
}

// FNV-1a (64 bits) of the file's bytes: two files with other weights or
// metadata get other versions even when trained on the same trace.
absl::StatusOr<uint64_t> HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("model file ", path, " cannot be read"));
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("model file ", path, ": read error"));
  return h;
}

// LibTorch trusts a tensor's sizes, strides and offset as the archive states
// them, even when they reach past the bytes stored for it (a damaged or
// hostile file): reading it would read past the buffer. OK when every element
// lies inside the storage.
absl::Status CheckTensorInStorage(const torch::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return absl::InvalidArgumentError("has no data");
  if (t.is_sparse() || !t.is_cpu()) return absl::InvalidArgumentError("is not a dense CPU tensor");
  // Stride 0 repeats one stored element: bound what copying it would allocate
  // (kvlearn's networks have thousands of weights, not millions).
  if (t.numel() > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("has ", t.numel(), " elements (limit 2^24)"));
  }
  int64_t last = t.storage_offset();  // index of the last element, in elements
  if (last < 0) return absl::InvalidArgumentError("has a negative storage offset");
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.size(d), stride = t.stride(d);
    if (size < 0 || stride < 0) return absl::InvalidArgumentError("has a negative size or stride");
    if (size == 0) return absl::OkStatus();  // no element to read
    int64_t reach = 0;
    if (__builtin_mul_overflow(size - 1, stride, &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return absl::InvalidArgumentError("has sizes and strides out of range");
    }
  }
  const auto item = static_cast<uint64_t>(t.element_size());
  const uint64_t stored = t.storage().nbytes();
  if (item == 0 || static_cast<uint64_t>(last) >= stored / item) {
    return absl::InvalidArgumentError(absl::StrCat("reaches element ", last, " but only ",
                                                   stored / std::max<uint64_t>(item, 1),
                                                   " are stored"));
  }
  return absl::OkStatus();
}

// What LearnedModel::Load needs of an archive: the metadata file and the
// module's tensor attributes by name.
struct ArchiveContents {
  std::string metadata_json;  // empty when the archive has none
  std::map<std::string, torch::Tensor> tensors;
};

// The class SaveModelFile writes (torch::jit::Module("KvlearnReuseMlp")).
constexpr char kModuleClass[] = "__torch__.KvlearnReuseMlp";

// Reads the archive's metadata and the module's attributes without
// torch::jit::load: that compiles the TorchScript source stored in the file,
// and LibTorch's compiler crashes on some malformed sources (found by
// fuzz/model_file_fuzzer: SIGSEGV in ScriptTypeParser::parseClassConstant).
// Here the pickled module state is read with a type resolver that knows only
// kvlearn's module class and defines no code, so nothing from the file is
// compiled, and the pickle is checked first (models/pickle_check.h). Throws
// (std::exception) on a malformed archive.
ArchiveContents ReadArchive(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  ArchiveContents out;
  const std::string metadata_record = std::string("extra/") + kMetadataFile;
  if (reader.hasRecord(metadata_record)) {
    auto [data, size] = reader.getRecord(metadata_record);
    out.metadata_json.assign(static_cast<const char*>(data.get()), size);
  }
  if (!reader.hasRecord("data.pkl")) throw std::runtime_error("no data.pkl");
  {
    auto [data, size] = reader.getRecord("data.pkl");
    const absl::Status s =
        CheckPickleStructure(std::string_view(static_cast<const char*>(data.get()), size));
    if (!s.ok()) throw std::runtime_error("data.pkl: " + std::string(s.message()));
  }
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  const auto resolve = [&unit](const c10::QualifiedName& name) {
    if (name.qualifiedName() != kModuleClass) {
      throw std::runtime_error("unexpected class " + name.qualifiedName());
    }
    return c10::StrongTypePtr(unit, c10::ClassType::create(name, unit, /*is_module=*/true));
  };
  bool loaded = false;
  const auto load = [&out, &loaded](const at::StrongTypePtr& type, const c10::IValue& state) {
    if (loaded || !state.isGenericDict()) throw std::runtime_error("unexpected module state");
    loaded = true;
    for (const auto& entry : state.toGenericDict()) {
      if (entry.key().isString() && entry.value().isTensor()) {
        out.tensors.emplace(entry.key().toStringRef(), entry.value().toTensor());
      }
    }
    return c10::ivalue::Object::create(type, 0);
  };
  // The unpickler would size each storage from the element count the pickle
  // states, whatever the length of the record behind it (found by fuzzing:
  // weights copied from past the buffer). Hand it every record as a storage
  // of the record's true length instead; CheckTensorInStorage then compares
  // against real bytes.
  auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
  for (const std::string& name : reader.getAllRecords()) {
    if (name.rfind("data/", 0) != 0) continue;
    auto [data, size] = reader.getRecord(name);
    storages->addStorage(name.substr(5), c10::Storage(c10::Storage::use_byte_size_t(), size,
                                                      std::move(data), nullptr, false));
  }
  torch::jit::readArchiveAndTensors("data", "", "", torch::jit::TypeResolver(resolve),
                                    torch::jit::ObjLoader(load), at::Device(at::kCPU), reader,
                                    torch::jit::Unpickler::defaultTypeParser, storages);
  if (!loaded) throw std::runtime_error("no module in data.pkl");
  return out;
}

torch::Tensor ToTensor(const Eigen::MatrixXf& m) {
  torch::Tensor t = torch::empty({m.rows(), m.cols()}, torch::kFloat32);
  auto a = t.accessor<float, 2>();
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    for (Eigen::Index c = 0; c < m.cols(); ++c) a[r][c] = m(r, c);
  }
  return t;
}

torch::Tensor ToTensor(const std::vector<float>& v) {
  return torch::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())},
                          torch::kFloat32)
      .clone();
}

std::string MetadataJson(const ModelMetadata& m) {
  const auto floats = [](const auto& v) {
    return absl::StrJoin(
        v, ", ", [](std::string* out, double x) { out->append(absl::StrFormat("%.9g", x)); });
  };
  const auto escaped = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  };
  // This build's names unless the metadata says otherwise (tests write others).
  std::vector<std::string> names;
  if (m.feature_names.empty()) {
    for (const auto n : kFeatureNames) names.push_back(absl::StrCat("\"", escaped(n), "\""));
  } else {
    for (const auto& n : m.feature_names) names.push_back(absl::StrCat("\"", escaped(n), "\""));
  }
  const std::string created_by = escaped(m.created_by);
  return absl::StrCat("{\"schema_version\": ", m.schema_version, ",\n \"label\": \"",
                      "P(next use of the block within horizons_seconds[k]) per output k",
                      "\",\n \"horizons_seconds\": [", floats(m.horizons_seconds),
                      "],\n \"feature_names\": [", absl::StrJoin(names, ", "),
                      "],\n \"feature_mean\": [", floats(m.feature_mean), "],\n \"feature_std\": [",
                      floats(m.feature_std), "],\n \"trace_fingerprint\": \"", m.trace_fingerprint,
                      "\",\n \"created_by\": \"", created_by, "\"}\n");
}

absl::StatusOr<ModelMetadata> ParseMetadata(const std::string& json, const std::string& path) {
  const auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", kMetadataFile, ": ", std::string(what)));
  };
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc)) return bad("not valid JSON");
  ModelMetadata m;
  int64_t version = 0;
  if (doc["schema_version"].get(version)) return bad("field 'schema_version' missing");
  m.schema_version = static_cast<uint32_t>(version);
  const auto read_doubles = [&](const char* key, auto& out) -> absl::Status {
    simdjson::dom::array a;
    if (doc[key].get(a)) return bad(absl::StrCat("field '", key, "' missing"));
    for (auto v : a) {
      double d;
      if (v.get(d)) return bad(absl::StrCat("field '", key, "' holds a non-number"));
      out.push_back(static_cast<typename std::decay_t<decltype(out)>::value_type>(d));
    }
    return absl::OkStatus();
  };
  if (auto s = read_doubles("horizons_seconds", m.horizons_seconds); !s.ok()) return s;
  if (auto s = read_doubles("feature_mean", m.feature_mean); !s.ok()) return s;
  if (auto s = read_doubles("feature_std", m.feature_std); !s.ok()) return s;
  // The learned policy interpolates in log-time between rungs.
  if (m.horizons_seconds.empty()) return bad("field 'horizons_seconds' is empty");
  for (size_t k = 0; k < m.horizons_seconds.size(); ++k) {
    const double h = m.horizons_seconds[k];
    if (!(std::isfinite(h) && h > 0 && (k == 0 || h > m.horizons_seconds[k - 1]))) {
      return bad(absl::StrCat("field 'horizons_seconds': entry ", k, " (", h,
                              ") is not a finite number above the one before and 0"));
    }
  }
  simdjson::dom::array names;
  if (doc["feature_names"].get(names)) return bad("field 'feature_names' missing");
  for (auto v : names) {
    std::string_view name;
    if (v.get(name)) return bad("field 'feature_names' holds a non-string");
    m.feature_names.emplace_back(name);
  }
  std::string_view text;
  if (!doc["trace_fingerprint"].get(text)) m.trace_fingerprint = std::string(text);
  if (!doc["created_by"].get(text)) m.created_by = std::string(text);
  return m;
}

}  // namespace

absl::Status SaveModelFile(const std::string& path, std::span<const DenseLayer> layers,
                           const ModelMetadata& metadata) {
  try {
    torch::jit::Module module("KvlearnReuseMlp");
    module.register_buffer("feature_mean", ToTensor(metadata.feature_mean));
    module.register_buffer("feature_std", ToTensor(metadata.feature_std));
    std::string forward =
        "def forward(self, x):\n    h = (x - self.feature_mean) / self.feature_std\n";
    for (size_t i = 0; i < layers.size(); ++i) {
      module.register_parameter(absl::StrCat("w", i), ToTensor(layers[i].weight), false);
      module.register_parameter(
          absl::StrCat("b", i),
          ToTensor(std::vector<float>(layers[i].bias.data(),
                                      layers[i].bias.data() + layers[i].bias.size())),
          false);
      const std::string affine = absl::StrCat("torch.addmm(self.b", i, ", h, self.w", i, ".t())");
      absl::StrAppend(&forward, "    h = ",
                      i + 1 < layers.size() ? absl::StrCat("torch.relu(", affine, ")")
                                            : absl::StrCat("torch.sigmoid(", affine, ")"),
                      "\n");
    }
    absl::StrAppend(&forward, "    return h\n");
    module.define(forward);
    torch::jit::ExtraFilesMap extra{{kMetadataFile, MetadataJson(metadata)}};
    module.save(path, extra);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot write model ", path, ": ", TorchMessage(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::jit::Module> LoadTorchModule(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("model file ", path, " does not exist"));
  }
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a kvlearn model file (TorchScript archive): ", TorchMessage(e)));
  }
}

absl::StatusOr<std::shared_ptr<const LearnedModel>> LearnedModel::Load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("model file ", path, " does not exist"));
  }
  std::string metadata_json;
  std::vector<DenseLayer> layers;
  try {
    ArchiveContents archive = ReadArchive(path);
    metadata_json = std::move(archive.metadata_json);
    for (size_t i = 0;; ++i) {
      const std::string w = absl::StrCat("w", i), b = absl::StrCat("b", i);
      const auto w_it = archive.tensors.find(w), b_it = archive.tensors.find(b);
      if (w_it == archive.tensors.end() || b_it == archive.tensors.end()) break;
      for (const auto& [name, t] : {std::pair{&w, &w_it->second}, std::pair{&b, &b_it->second}}) {
        if (auto s = CheckTensorInStorage(*t); !s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": tensor ", *name, " ", s.message()));
        }
      }
      const torch::Tensor wt = w_it->second.contiguous().to(torch::kFloat32);
      const torch::Tensor bt = b_it->second.contiguous().to(torch::kFloat32);
      if (wt.dim() != 2 || bt.dim() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": layer ", i, " is not a matrix"));
      }
      DenseLayer d;
      d.weight =
          Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
              wt.data_ptr<float>(), wt.size(0), wt.size(1));
      d.bias = Eigen::Map<const Eigen::VectorXf>(bt.data_ptr<float>(), bt.size(0));
      layers.push_back(std::move(d));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a kvlearn model file (TorchScript archive): ", TorchMessage(e)));
  }
  if (metadata_json.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has no ", kMetadataFile, ": not written by kvlearn train"));
  }
  auto metadata = ParseMetadata(metadata_json, path);
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
  const size_t inputs = layers.empty() ? metadata->feature_mean.size()
                                       : static_cast<size_t>(layers.front().weight.cols());
  if (metadata->feature_names.size() != inputs) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", kMetadataFile, " lists ",
                                                   metadata->feature_names.size(),
                                                   " feature names for ", inputs, " inputs"));
  }
  for (size_t i = 0; i < inputs && i < kNumFeatures; ++i) {
    if (metadata->feature_names[i] != kFeatureNames[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", kMetadataFile, ": feature_names[", i, "] is '", metadata->feature_names[i],
          "' but this build computes '", std::string(kFeatureNames[i]), "' there"));
    }
  }
  auto hash = HashFile(path);
  if (!hash.ok()) return hash.status();
  const std::string base = path.substr(path.find_last_of('/') + 1);
  auto model = MlpModel::Create(std::move(layers), *metadata,
                                absl::StrCat(base, "@", absl::Hex(*hash, absl::kZeroPad16)));
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", model.status().message()));
  }
  return std::shared_ptr<const LearnedModel>(*model);
}

}  // namespace kvlearn
