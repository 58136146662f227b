// Test helper: kvlearn's own inference (LearnedModel::Load, the Eigen MLP)
// for rows of raw features read from stdin, one row per line, one output row
// per line, so that python_torch_model_test.py can hold Python torch's
// forward of the same file to it.
//   model_predict MODEL < rows
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "models/learned_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: model_predict MODEL < feature rows\n";
    return 2;
  }
  auto model = kvlearn::LearnedModel::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << "model_predict: " << model.status().message() << "\n";
    return 1;
  }
  const size_t inputs = (*model)->metadata().feature_mean.size();
  std::vector<float> out((*model)->num_outputs());
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream row(line);
    std::vector<float> x;
    for (float v; row >> v;) x.push_back(v);
    if (x.size() != inputs) {
      std::cerr << "model_predict: a row has " << x.size() << " values, the model takes " << inputs
                << "\n";
      return 1;
    }
    (*model)->Predict(x, out);
    for (size_t i = 0; i < out.size(); ++i) std::printf(i ? " %.9g" : "%.9g", out[i]);
    std::printf("\n");
  }
  return 0;
}
