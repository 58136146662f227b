#include "models/model_file.h"

#include <sys/stat.h>

#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/model_metadata_json.h"

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
    torch::jit::ExtraFilesMap extra{{kMetadataFile, ModelMetadataJson(metadata)}};
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

}  // namespace kvlearn
