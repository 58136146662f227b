// HoldingCost: see holding_cost.h.
#include "policies/kvlearn_cars/holding_cost.h"

#include <algorithm>

namespace kvlearn {
namespace {

constexpr int64_t kRateWindowMs = 10'000;
constexpr double kRateAverageWeight = 0.01;
constexpr double kIdleAverageWeight = 0.01;

}  // namespace

void HoldingCost::AdvanceTo(int64_t now_ms) {
  if (window_start_ms_ < 0) window_start_ms_ = now_ms;
  const int64_t span_ms = now_ms - window_start_ms_;
  if (span_ms < kRateWindowMs) return;
  const double rate = window_saved_ms_ * 1000.0 / static_cast<double>(span_ms);
  saved_ms_per_s_ =
      saved_ms_per_s_ < 0 ? rate : saved_ms_per_s_ + kRateAverageWeight * (rate - saved_ms_per_s_);
  window_start_ms_ = now_ms;
  window_saved_ms_ = 0;
}

void HoldingCost::ObserveEviction(double idle_s) {
  idle_at_eviction_s_ =
      idle_at_eviction_s_ < 0
          ? idle_s
          : idle_at_eviction_s_ + kIdleAverageWeight * (idle_s - idle_at_eviction_s_);
}

double HoldingCost::Ms(uint64_t bytes, uint64_t used_bytes, uint64_t capacity_bytes) const {
  if (capacity_bytes == 0 || saved_ms_per_s_ <= 0) return 0;
  const double dt_s =
      idle_at_eviction_s_ < 0 ? horizon_s_ : std::min(horizon_s_, idle_at_eviction_s_);
  const double c = static_cast<double>(capacity_bytes);
  const double pressure = static_cast<double>(used_bytes) / c;
  const double gamma = pressure * saved_ms_per_s_ / c;  // ms per byte-second
  return gamma * static_cast<double>(bytes) * dt_s;
}

}  // namespace kvlearn
