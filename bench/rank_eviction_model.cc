// The learned model rank_eviction_bench serves: the tests' small model written
// as a model file. Its own translation unit: models/model_file.h (Eigen,
// LibTorch) fails to compile after the bench's gRPC and httplib headers.
#include <cstdlib>
#include <string>

#include "models/model_file.h"
#include "tests/support/test_model.h"

namespace kvlearn {

std::string WriteRankBenchModel(const std::string& dir) {
  const std::string path = dir + "/model.pt";
  if (!SaveModelFile(path, TestModelLayers(), TestModelMetadata()).ok()) std::abort();
  return path;
}

}  // namespace kvlearn
