// The kvlearn-cars replay buffer: the most recent labelled samples (raw model
// inputs and a 0/1 reuse label), from which training batches are drawn.
//
// A ring of fixed capacity (20k in the policy): once full, each new label
// replaces the oldest. Batches are drawn uniformly with replacement from a
// splitmix64 stream of their own, so they do not perturb exploration. With a
// batch of 100 every 100 labels, each label is replayed about once on average
// during its life in the buffer, as in the paper's public code. Samples stay
// raw so the trainer normalises them with the map of the moment, the one
// scoring uses too.
//
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/policy_state.h"
#include "core/splitmix64.h"
#include "policies/kvlearn_cars/model_inputs.h"

namespace kvlearn {

struct LabelledInputs {
  CarsRawInputs inputs;
  float label = 0;  // 1 = reused within the horizon
};

class ReplayBuffer {
 public:
  // A capacity of 0 keeps nothing.
  ReplayBuffer(uint32_t capacity, uint64_t draw_seed) : capacity_(capacity), draw_rng_(draw_seed) {
    samples_.reserve(capacity);
  }

  void Add(const LabelledInputs& s) {
    if (samples_.size() < capacity_) {
      samples_.push_back(s);
    } else if (!samples_.empty()) {
      samples_[oldest_] = s;
      oldest_ = (oldest_ + 1) % samples_.size();
    }
  }

  // The samples, the overwrite position and the draw stream, for snapshots
  // (core/policy_state.h; cars_state.cc). Load refuses more samples than
  // the capacity.
  void Save(PolicyStateWriter& out) const;
  void Load(PolicyStateReader& in);

  size_t size() const { return samples_.size(); }
  bool empty() const { return samples_.empty(); }

  // Calls train(sample) on `count` samples drawn uniformly with replacement.
  // REQUIRES: !empty().
  template <typename Train>
  void Draw(uint32_t count, Train&& train) {
    // Draws are random over a ~1.4 MB buffer: fetch the next sample while the
    // current one trains.
    size_t next = SplitMix64(draw_rng_) % samples_.size();
    for (uint32_t k = 0; k < count; ++k) {
      const size_t current = next;
      next = SplitMix64(draw_rng_) % samples_.size();
      __builtin_prefetch(&samples_[next]);
      train(samples_[current]);
    }
  }

 private:
  uint32_t capacity_;
  uint64_t draw_rng_;
  std::vector<LabelledInputs> samples_;
  size_t oldest_ = 0;  // next slot to overwrite once full
};

}  // namespace kvlearn
