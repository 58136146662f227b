#include "models/traffic_drift.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvlearn {
namespace {

DriftQuantity Quantity(std::string_view name, std::string_view unit, double observed,
                       double trained) {
  DriftQuantity q{name, unit, observed, trained};
  if (trained != 0) {
    q.ratio = observed / trained;
  } else {
    q.ratio = observed == 0 ? 1 : std::numeric_limits<double>::infinity();
  }
  q.off = !(q.ratio <= kDriftFactor && q.ratio >= 1 / kDriftFactor);
  return q;
}

}  // namespace

bool TrafficDrift::any_off() const {
  for (const DriftQuantity& q : quantities) {
    if (q.off) return true;
  }
  return false;
}

TrafficDrift CompareTraffic(const TrafficSummary& observed, const TrafficSummary& trained) {
  TrafficDrift d;
  const auto o = TrafficQuantities(observed), t = TrafficQuantities(trained);
  for (size_t i = 0; i < d.quantities.size(); ++i) {
    d.quantities[i] = Quantity(o[i].name, o[i].unit, o[i].value, t[i].value);
  }
  // A model's features count blocks: any other block size is another world.
  d.quantities[3].off = observed.block_size_tokens != trained.block_size_tokens;
  return d;
}

std::string DriftText(const TrafficDrift& drift) {
  std::string out;
  for (const DriftQuantity& q : drift.quantities) {
    absl::StrAppend(
        &out, out.empty() ? "" : ", ",
        absl::StrFormat("%s %.4g / %.4g%s%s (x%.2f)", std::string(q.name), q.observed, q.trained,
                        q.unit.empty() ? "" : " ", std::string(q.unit), q.ratio));
  }
  return out;
}

std::string OffText(const TrafficDrift& drift) {
  std::string out;
  for (const DriftQuantity& q : drift.quantities) {
    if (!q.off) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(q.name), " x",
                    absl::StrFormat("%.2f", q.ratio));
  }
  return out;
}

}  // namespace kvlearn
