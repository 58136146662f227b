// PiThreshold: see pi_threshold.h.
#include "policies/kvlearn_cars/pi_threshold.h"

#include <algorithm>

namespace kvlearn {

PiThreshold::PiThreshold(const PiThresholdOptions& options)
    : options_(options),
      integral_(std::clamp(options.initial_integral, -options.limit, options.limit)),
      theta_(integral_) {}

void PiThreshold::Step(double occupancy, double dt_s) {
  const double e = occupancy - options_.target;
  const double limit = options_.limit;
  if ((e > 0 && admitted_since_step_) || (e < 0 && refused_since_step_)) {
    integral_ = std::clamp(integral_ + options_.ki_per_second * e * dt_s, -limit, limit);
  }
  theta_ = std::clamp(options_.kp * e + integral_, -limit, limit);
  admitted_since_step_ = false;
  refused_since_step_ = false;
}

}  // namespace kvlearn
