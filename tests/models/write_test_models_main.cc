// Writes the model files of TestModelLayers(1) and TestModelLayers(2) with
// TestModelMetadata() (tests/support/test_model.h) into DIR, as `kvlearn
// train` writes models: test_model_1.pt and test_model_2.pt; and
// test_model_unfit.pt, TestModelLayers(1) with TestModelUnfitMetadata(). Run at build
// time, so that the sidecar's tests read real model files without linking
// LibTorch themselves.
//
// usage: write_test_models DIR
#include <cstdio>
#include <string>

#include "models/model_file.h"
#include "tests/support/test_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_test_models DIR\n");
    return 2;
  }
  for (const uint64_t seed : {1, 2}) {
    const std::string path = std::string(argv[1]) + "/test_model_" + std::to_string(seed) + ".pt";
    const absl::Status s =
        kvlearn::SaveModelFile(path, kvlearn::TestModelLayers(seed), kvlearn::TestModelMetadata());
    if (!s.ok()) {
      std::fprintf(stderr, "write_test_models: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const std::string unfit = std::string(argv[1]) + "/test_model_unfit.pt";
  if (const absl::Status s = kvlearn::SaveModelFile(unfit, kvlearn::TestModelLayers(1),
                                                    kvlearn::TestModelUnfitMetadata());
      !s.ok()) {
    std::fprintf(stderr, "write_test_models: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
