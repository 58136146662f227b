// Fuzzes the model-file loader (LearnedModel::Load, models/model_reader.cc) with
// arbitrary bytes written to a temporary file: it must return a model or a
// status whose message is one line, never crash;
// a model it returns must give probabilities in [0, 1].
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "models/learned_model.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/kvlearn_model_fuzz_" + std::to_string(getpid()) + ".pt";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto model = kvlearn::LearnedModel::Load(path);
  if (!model.ok()) {
    Check(!model.status().message().empty());
    Check(model.status().message().find('\n') == std::string_view::npos);
    return 0;
  }
  const auto& meta = (*model)->metadata();
  std::vector<float> out((*model)->num_outputs());
  (*model)->Predict(meta.feature_mean, out);
  for (float p : out) Check(p >= 0 && p <= 1);
  return 0;
}
