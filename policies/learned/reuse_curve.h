// A block's reuse curve as the learned model gives it: F(t) = P(next use
// within t seconds of the access the model scored), known at the rungs of
// the model's horizon ladder and read in between, linear in log-time. The
// learned policy keeps the curve of each block's latest access and asks it
// two questions:
//   - At(t): will the block be used within t (admission, t = the pool's
//     eviction age);
//   - WithinGiven(idle, window): the block has gone `idle` seconds unused;
//     will it be used in the next `window` seconds? That is
//     (F(idle + window) - F(idle)) / (1 - F(idle)), the curve conditioned on
//     the idle time, which is what eviction needs: a block scored likely to
//     return within a minute that has sat for ten has mostly not returned.
// The model's outputs are separate sigmoids, so a curve is made monotone
// (running maximum) before use. Below the first rung F falls linearly to 0
// at t = 0; past the last rung it stays flat (the model says nothing more).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace kvlearn {

// F(t) for rungs `horizons_s` (positive, increasing) and probabilities `p`
// (same size, made monotone by the caller or not: the running maximum is
// taken here).
inline double ReuseCurveAt(std::span<const double> horizons_s, std::span<const float> p,
                           double t_s) {
  if (t_s <= 0) return 0;
  double running = 0;
  for (size_t k = 0; k < horizons_s.size(); ++k) {
    const double prev = running;
    running = std::max(running, static_cast<double>(p[k]));
    if (t_s > horizons_s[k]) continue;
    if (k == 0) return running * t_s / horizons_s[0];
    const double w =
        std::log(t_s / horizons_s[k - 1]) / std::log(horizons_s[k] / horizons_s[k - 1]);
    return (1 - w) * prev + w * running;
  }
  return running;
}

// P(used within the next window_s | unused for idle_s), from the same curve.
inline double ReuseWithinGiven(std::span<const double> horizons_s, std::span<const float> p,
                               double idle_s, double window_s) {
  const double before = ReuseCurveAt(horizons_s, p, idle_s);
  if (before >= 1) return 0;
  const double after = ReuseCurveAt(horizons_s, p, idle_s + window_s);
  return std::clamp((after - before) / (1 - before), 0.0, 1.0);
}

}  // namespace kvlearn
