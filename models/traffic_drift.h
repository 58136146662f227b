// How far observed traffic lies from the traffic a model was trained on, one
// ratio (observed / trained) per quantity of TrafficSummary. `kvlearn compare`
// prints it as one line and the sidecar exposes the ratios in /metrics; a
// quantity is off when its ratio is above kDriftFactor or below its inverse,
// and the block size whenever it differs (a model's features count blocks).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "models/traffic_summary.h"

namespace kvlearn {

inline constexpr double kDriftFactor = 2.0;

struct DriftQuantity {
  std::string_view name;  // as in /metrics' quantity label
  std::string_view unit;
  double observed = 0;
  double trained = 0;
  double ratio = 1;  // observed / trained; 1 when both are 0, +inf when only trained is 0
  bool off = false;
};

struct TrafficDrift {
  std::array<DriftQuantity, 4> quantities;  // request_rate, prompt_blocks, block_reuse, block_size
  bool any_off() const;
};

TrafficDrift CompareTraffic(const TrafficSummary& observed, const TrafficSummary& trained);

// "request rate 3.1 / 3.4 req/s (x0.91), prompt 23.0 / 22.1 blocks (x1.04), ..."
std::string DriftText(const TrafficDrift& drift);
// The quantities that are off, e.g. "request rate x2.6, block size 256 / 512";
// empty when none.
std::string OffText(const TrafficDrift& drift);

}  // namespace kvlearn
