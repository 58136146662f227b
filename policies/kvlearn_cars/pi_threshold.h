// The kvlearn-cars admission threshold (the paper's ATC): a PI controller
// that moves theta with pool occupancy, so that a pool over its target
// occupancy admits less and one under it admits more.
//
//   e       = occupancy - target
//   I      += Ki * e * dt     (dt in seconds; |I| clamped to the limit)
//   theta   = Kp * e + I      (clamped to the limit)
//
// theta is unitless here; the policy multiplies it by the mean block
// recompute cost, so the gains carry over between model profiles. The
// policy's defaults: target 0.85, Kp = 2 (a pool 15 points over target
// raises theta by 0.3 at once; an empty one lowers it by 1.7), Ki = Kp / H
// (integral time = the horizon H, the time occupancy takes to answer a change
// of theta), limit 10 (above 10 mean recomputes hardly any block clears it).
//
// Anti-windup by conditional integration: I moves up only if the rule has
// admitted something since the last step and down only if it has refused
// something, so a pool filling up during warm-up (every block admitted) does
// not wind I down for later. The paper's public code writes the loop as
// theta += Kp * e + Ki * sum(e) per tick, which integrates twice and
// oscillates, with gains for theta in raw ms ticking every 50 requests; this
// is the textbook PI form instead. What "occupancy" is is the caller's choice
// (see kvlearn_cars_policy.cc).
//
// Not thread-safe.
#pragma once

#include "core/policy_state.h"

namespace kvlearn {

struct PiThresholdOptions {
  double target = 0.85;         // occupancy the controller steers to
  double kp = 2;                // theta per unit of occupancy error
  double ki_per_second = 0;     // theta per unit of error per second
  double initial_integral = 0;  // I (and theta) before the first step
  double limit = 10;            // bound on |theta| and on |I|
};

class PiThreshold {
 public:
  // Starts with I = theta = initial_integral, clamped to the limit.
  explicit PiThreshold(const PiThresholdOptions& options);

  // Record the rule's decisions between steps (for anti-windup).
  void NoteAdmission() { admitted_since_step_ = true; }
  void NoteRefusal() { refused_since_step_ = true; }

  // Updates theta for the occupancy now, dt_s seconds after the last step,
  // and forgets the decisions noted since.
  void Step(double occupancy, double dt_s);

  double theta() const { return theta_; }
  double integral() const { return integral_; }

  // I, theta and the decisions noted since the last step (cars_state.cc).
  void Save(PolicyStateWriter& out) const;
  void Load(PolicyStateReader& in);

 private:
  PiThresholdOptions options_;
  double integral_;
  double theta_;
  bool admitted_since_step_ = false;
  bool refused_since_step_ = false;
};

}  // namespace kvlearn
