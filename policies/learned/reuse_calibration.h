// The model's admission probability, recalibrated on the traffic the pool
// sees: a model trained on other traffic keeps its order of the blocks, but
// the level of its claims is measured here.
//
// Admission asks p = P(block used again within E) of each block a request
// misses (learned_model_policy.cc). A model trained on other traffic can
// put a whole kind of block at the wrong level: a chat model reads a batch
// job's fresh documents, which never return, as a conversation's turns,
// which often do, and admits them all. The refusal ledger
// (learned/refusal_ledger.h) stops refusals that lose, but nothing starts
// refusals the model never proposes.
//
// So every prediction about a missed block becomes a labelled sample: the
// block came back within the label window or it did not. Predictions are
// binned by p (kBins equal bins); per bin the policy sums the predicted p
// (s) and the returns (r), and reads a new prediction as
//   p' = p * (r + kPrior) / (s + kPrior), at most 1:
// the model's claim while a bin has few samples or its claims hold, scaled
// by the bin's returns per predicted return once they do not. Inside a bin
// the model's order is kept.
//
// The label window is kLabelE times E, not E: a refused block loses its hit
// if it returns while an admitted copy would still be resident, and the
// pool keeps the blocks it values well past E, the mean idle age at
// eviction. The longer window makes the correction one-sided in effect: it
// lowers only the claims that even a window kLabelE times longer refutes.
// Chosen on the robustness grid's tuning traces: with a window of E or 2E
// the traces' own models refused blocks the pool would have hit (the
// sample at 0.05 and 0.1, chat 202 at 0.2: up to 1.5% dearer); with 8E
// chat 201's model on batch 701 lost the whole gain it has at 4E.
//
// Labels arrive late: a return is known when it happens, a non-return only
// once the window has passed. Predictions are summed in time slots of a
// quarter window, each remembering the window it opened under; a return is
// credited to the slot of the prediction it answers, and a slot joins the
// sums once its window has passed after it closed, when every prediction
// in it is settled, so r and s always count the same predictions. The sums
// decay with time constant kMemoryWindows windows.
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "core/policy_state.h"

namespace kvlearn {

class LearnedReuseCalibration {
 public:
  static constexpr size_t kBins = 16;
  static constexpr double kLabelE = 4;
  static constexpr double kSlotsPerWindow = 4;
  static constexpr double kMemoryWindows = 4;
  static constexpr double kPrior = 1;

  static size_t BinOf(double p) {
    if (!(p > 0)) return 0;  // NaN too
    return std::min(static_cast<size_t>(p * kBins), kBins - 1);
  }

  // A prediction `p` about a missed block, made at `now_ms` with E = `e_ms`.
  void Predicted(double p, int64_t now_ms, double e_ms) {
    Advance(now_ms, e_ms);
    const double window_ms = kLabelE * e_ms;
    if (slots_.empty() || now_ms >= slots_.back().end_ms) {
      const auto width = std::max<int64_t>(1, static_cast<int64_t>(window_ms / kSlotsPerWindow));
      slots_.push_back({now_ms, now_ms + width, window_ms, {}, {}});
    }
    slots_.back().predicted[BinOf(p)] += p;
  }

  // The block predicted `p` at `predicted_ms` came back at `now_ms`: a
  // return within the window its prediction was made under is a positive
  // label. A return after it, or to a prediction already settled, is none.
  void Returned(double p, int64_t predicted_ms, int64_t now_ms) {
    // The slot holding predicted_ms: the last one starting at or before it.
    auto it = std::upper_bound(slots_.begin(), slots_.end(), predicted_ms,
                               [](int64_t t, const Slot& s) { return t < s.start_ms; });
    if (it == slots_.begin()) return;
    --it;
    if (predicted_ms >= it->end_ms) return;
    if (static_cast<double>(now_ms - predicted_ms) <= it->window_ms) it->returned[BinOf(p)] += 1;
  }

  // At `now_ms`, E = `e_ms`: the sums decay for the time since the last
  // call, and slots whose every prediction is settled join them.
  void Advance(int64_t now_ms, double e_ms) {
    // A clock that steps back (a sidecar's caller) decays nothing.
    if (last_ms_ != kNever && now_ms > last_ms_ && e_ms > 0) {
      const double decay =
          std::exp(-static_cast<double>(now_ms - last_ms_) / (kMemoryWindows * kLabelE * e_ms));
      for (size_t k = 0; k < kBins; ++k) {
        predicted_[k] *= decay;
        returned_[k] *= decay;
      }
    }
    if (last_ms_ == kNever || now_ms > last_ms_) last_ms_ = now_ms;
    while (!slots_.empty() &&
           static_cast<double>(now_ms) >
               static_cast<double>(slots_.front().end_ms) + slots_.front().window_ms) {
      for (size_t k = 0; k < kBins; ++k) {
        predicted_[k] += slots_.front().predicted[k];
        returned_[k] += slots_.front().returned[k];
      }
      slots_.pop_front();
    }
  }

  // The recalibrated prediction.
  double Adjust(double p) const {
    if (!(p > 0)) return p;
    const size_t k = BinOf(p);
    return std::min(p * (returned_[k] + kPrior) / (predicted_[k] + kPrior), 1.0);
  }

  // The settled sums of bin k: predicted returns and returns.
  double predicted(size_t k) const { return predicted_[k]; }
  double returned(size_t k) const { return returned_[k]; }

  // The sums, the clock and the open slots, for snapshots (core/policy_state.h).
  void Save(PolicyStateWriter& out) const {
    for (size_t k = 0; k < kBins; ++k) {
      out.Double(predicted_[k]);
      out.Double(returned_[k]);
    }
    out.Signed(last_ms_);
    out.Varint(slots_.size());
    for (const Slot& slot : slots_) {
      out.Signed(slot.start_ms);
      out.Signed(slot.end_ms);
      out.Double(slot.window_ms);
      for (size_t k = 0; k < kBins; ++k) {
        out.Double(slot.predicted[k]);
        out.Double(slot.returned[k]);
      }
    }
  }
  // REQUIRES: a calibration that saw nothing yet.
  void Load(PolicyStateReader& in) {
    for (size_t k = 0; k < kBins; ++k) {
      predicted_[k] = in.Double("calibration predicted");
      returned_[k] = in.Double("calibration returned");
    }
    last_ms_ = in.Signed("calibration clock");
    const uint64_t n = in.Count("calibration slots", 3 + 2 * kBins * sizeof(double));
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      Slot slot{};
      slot.start_ms = in.Signed("calibration slot start");
      slot.end_ms = in.Signed("calibration slot end");
      slot.window_ms = in.Double("calibration slot window");
      for (size_t k = 0; k < kBins; ++k) {
        slot.predicted[k] = in.Double("calibration slot predicted");
        slot.returned[k] = in.Double("calibration slot returned");
      }
      if (in.ok() && (slot.end_ms <= slot.start_ms ||
                      (!slots_.empty() && slot.start_ms < slots_.back().end_ms))) {
        in.Fail("calibration slots: not in order");
      }
      if (in.ok()) slots_.push_back(slot);
    }
  }

 private:
  static constexpr int64_t kNever = INT64_MIN;
  struct Slot {
    int64_t start_ms, end_ms;  // predictions made in [start, end)
    double window_ms;          // their label window
    std::array<double, kBins> predicted, returned;
  };
  std::deque<Slot> slots_;  // open, oldest first
  std::array<double, kBins> predicted_{}, returned_{};
  int64_t last_ms_ = kNever;
};

}  // namespace kvlearn
