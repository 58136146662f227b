// The holding cost U of the kvlearn-cars score CARS = P * (R - T) - U: what
// keeping a block costs, in ms of prefill time, because the space it takes
// could hold something else.
//
// The paper prices a byte-second of pool at gamma = R_bar * lambda / M_S: the
// prefill work arriving per second (lambda blocks of mean cost R_bar) spread
// over the capacity M_S, and U = gamma * bytes * dt. With lambda = all block
// requests and dt = how long a block stays, U comes to about R_bar over the
// miss ratio, more than the expected saving P * (R - T) of almost any block:
// the sign of CARS then carries no information and theta must sit far below
// zero to admit anything. We take for R_bar * lambda the prefill work the
// pool's hits actually save per second instead (the sum of R - T over hits
// per second of trace time, in 10 s windows, averaged with weight 0.01 per
// window, i.e. over ~1000 s), so U is what an average resident of the block's
// size earns while the block would sit in its place: space is worth what the
// pool makes of it. gamma is scaled by the pool's pressure rho = used /
// capacity, as in the paper's public code (space in a pool that is not full
// costs nothing). dt = the pool's eviction age (moving average, weight 0.01,
// of how long evicted blocks had been idle), capped at the horizon H: how
// long a block that is not reused stays. Before the first eviction dt = H. U
// is 0 until a first saving rate has been measured.
//
// U is nearly the same for all full blocks at a given moment, so it mostly
// shifts CARS against theta (which is controlled anyway) and favours small
// blocks.
//
// Not thread-safe.
#pragma once

#include <cstdint>

#include "core/policy_state.h"

namespace kvlearn {

class HoldingCost {
 public:
  explicit HoldingCost(double horizon_s) : horizon_s_(horizon_s) {}

  // A hit saved `ms` of prefill (its R - T).
  void AddSaving(double ms) { window_saved_ms_ += ms; }

  // Moves the clock to now_ms; closes the saving-rate window once it spans
  // 10 s or more. REQUIRES: now_ms never decreases.
  void AdvanceTo(int64_t now_ms);

  // A block was evicted after idling for idle_s seconds.
  void ObserveEviction(double idle_s);

  // U for a block of `bytes` in a pool holding used_bytes of capacity_bytes.
  double Ms(uint64_t bytes, uint64_t used_bytes, uint64_t capacity_bytes) const;

  // Averaged saving rate, ms per second; < 0 until the first window closes.
  double saved_ms_per_s() const { return saved_ms_per_s_; }

  // The averages and the open window (cars_state.cc).
  void Save(PolicyStateWriter& out) const;
  void Load(PolicyStateReader& in);

 private:
  double horizon_s_;
  double saved_ms_per_s_ = -1;
  int64_t window_start_ms_ = -1;
  double window_saved_ms_ = 0;
  double idle_at_eviction_s_ = -1;  // < 0 before the first eviction
};

}  // namespace kvlearn
