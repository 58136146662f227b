// The verdict `kvlearn train` records in a model file: on the validation split
// it trained against (requests it did not learn from), the cost of `learned`
// with the model against `lru`, the cheapest online heuristic and `learned`
// without a model, for each pool it was judged at. A model is fit when, at
// every pool, `learned` with it costs less than all three: `learned` follows
// `lru` and `gdsf` where its model loses, so it can beat every heuristic with
// a model that carries no signal, and only beating `learned` without a model
// shows that the model adds something. `kvlearn train` writes an unfit one
// only with --force. `compare` and
// `serve` say so in one line when they load an unfit model (UnfitModelLine).
//
// The verdict names the weights it judged (WeightsFingerprint): a file whose
// weights or normalisation were changed afterwards (fine-tuned in Python with
// the metadata copied over) reads as not judged.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvlearn {

struct DenseLayer;
struct ModelMetadata;

struct PoolJudgement {
  double pool_fraction = 0;  // of the trace's distinct-block bytes, as compare --pool-fraction
  uint64_t pool_bytes = 0;
  double learned_cost_s = 0;  // cost_seconds (transfer weight 1) of the validation requests
  double lru_cost_s = 0;
  std::string best_heuristic;  // the cheapest online policy other than learned (may be lru)
  double best_heuristic_cost_s = 0;
  // `learned` without a model (following lru and gdsf only); negative in
  // files judged before it was priced, whose verdict stands on the others.
  double no_model_cost_s = -1;

  bool fit() const {
    return learned_cost_s < lru_cost_s && learned_cost_s < best_heuristic_cost_s &&
           (no_model_cost_s < 0 || learned_cost_s < no_model_cost_s);
  }
};

struct ModelJudgement {
  uint32_t first_request = 0;  // the validation split judged: requests [first, end)
  uint32_t end_request = 0;
  std::vector<PoolJudgement> pools;
  std::string weights_fingerprint;  // WeightsFingerprint of the model judged

  // Fit at every pool judged (and at least one).
  bool fit() const;
};

// 16 hex digits of FNV-1a over the layers' weights and biases and the
// metadata's normalisation, as float bits.
std::string WeightsFingerprint(std::span<const DenseLayer> layers, const ModelMetadata& metadata);

// "learned 3226.0 s vs lru 3317.0 s (-2.74%), best heuristic gdsf 3252.0 s, without a model
// 3240.1 s at pool 0.1" for each pool (no "without a model" when it was not priced), joined
// by "; ".
std::string JudgementText(const ModelJudgement& judgement);

// For a model marked unfit: one line naming `model` (a path or version), the
// numbers and what to do. Empty for a fit or unjudged model.
std::string UnfitModelLine(const ModelMetadata& metadata, const std::string& model);

}  // namespace kvlearn
