// Trains the reuse predictor with LibTorch: an MLP from features to one
// logit per horizon, masked binary cross-entropy (censored labels do not
// count), Adam, mini-batches in a seeded shuffle, early stopping on a
// validation split that lies later in time than the training split.
// Single-threaded and seeded, so the same inputs give the same weights.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/sample_recorder.h"
#include "models/mlp_model.h"

namespace kvlearn {

struct TrainOptions {
  uint64_t seed = 1;
  int max_epochs = 40;
  // Epochs without validation improvement before stopping. The validation
  // loss is noisy from epoch to epoch while the rare confident claims (a
  // block that will not return) are still sharpening: 5 stopped mixed
  // traffic's models about 10 epochs early (docs/history/README.md, feature schema 3).
  int patience = 15;
  int batch_size = 512;
  double learning_rate = 1e-3;
  std::vector<int> hidden = {32, 32};
  // When set, advanced by each batch's training samples (a progress line's
  // counter: at most max_epochs * train.size() in all).
  std::atomic<uint64_t>* samples_done = nullptr;
};

struct EpochReport {
  int epoch = 0;
  double train_loss = 0;  // masked BCE, mean per known label
  double valid_loss = 0;
  std::vector<double> valid_auc;  // per horizon, ROC AUC on known labels
};

struct TrainedMlp {
  std::vector<DenseLayer> layers;  // un-normalised inputs are NOT folded in
  std::vector<float> feature_mean, feature_std;
  std::vector<EpochReport> history;
  int best_epoch = 0;
};

// ROC AUC of `scores` for binary `labels` where `mask` is set; NaN if one
// class is absent (nothing to rank).
double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels,
              const std::vector<uint8_t>& mask);

absl::StatusOr<TrainedMlp> TrainMlp(const SampleSet& train, const SampleSet& valid,
                                    const TrainOptions& options,
                                    const std::function<void(const EpochReport&)>& progress);

}  // namespace kvlearn
