// How much of a block's reuse a tier behind faster ones gets to serve, by
// how long the block had been idle when it came back.
//
// A cluster's shared pool sits behind each prefill node's HBM and DRAM: a
// block that returns soon after its last use is usually still on the node
// that computed it, and the router sends the request there, so the pool's
// copy saves nothing that time. The model's reuse curve F(t) was learned
// from a pool that serves every return, so the pool's admission value
// P(used within E) = F(E) counts those returns too. This class measures,
// for every return of a block announced to the tier (held here or not), in
// which rung interval of the model's horizon ladder its idle time fell and
// whether a faster tier served it (AccessInfo::served_above); the share
// left to this tier in interval k weights F's mass there:
//   P_here(E) = sum over k of (F(min(h_k, E)) - F(h_(k-1))) * share_k,
// for the rungs h_(k-1) < E (h_(-1) = 0). Returns idler than the last rung
// are not counted: the model says nothing past it.
//
// A tier nothing serves ahead of (the pool replay, a sidecar whose node
// sends no served_above) counts no return as served elsewhere, and then P_here is F(E) exactly, so
// its decisions are those of a policy without this class. Counts decay by
// a factor (1 - 1/kMemory) per counted return, so the shares follow the
// last few thousand returns; a prior of kPrior returns served here keeps an
// interval with few returns from swinging to 0 on one.
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "core/policy_state.h"
#include "policies/learned/reuse_curve.h"

namespace kvlearn {

class LearnedServedShare {
 public:
  static constexpr double kMemory = 4096;
  static constexpr double kPrior = 2;

  explicit LearnedServedShare(std::span<const double> horizons_s)
      : horizons_s_(horizons_s.begin(), horizons_s.end()),
        returns_(horizons_s.size(), 0.0),
        served_elsewhere_(horizons_s.size(), 0.0) {}

  // A block came back after `idle_s` seconds unused; `elsewhere` when a
  // faster tier served it.
  void Count(double idle_s, bool elsewhere) {
    const auto rung = std::lower_bound(horizons_s_.begin(), horizons_s_.end(), idle_s);
    if (rung == horizons_s_.end() || !(idle_s >= 0)) return;
    // Decaying every count by (1 - 1/kMemory) is weighing the newest return
    // by a growing `weight_` instead; rescaled before it overflows.
    weight_ /= 1 - 1 / kMemory;
    if (weight_ > 1e100) {
      for (size_t k = 0; k < returns_.size(); ++k) {
        returns_[k] /= weight_;
        served_elsewhere_[k] /= weight_;
      }
      weight_ = 1;
    }
    const size_t k = static_cast<size_t>(rung - horizons_s_.begin());
    returns_[k] += weight_;
    if (elsewhere) {
      served_elsewhere_[k] += weight_;
      any_elsewhere_ = true;
    }
  }

  // The share of returns idle for (h_(k-1), h_k] that this tier served.
  double Share(size_t k) const {
    const double prior = kPrior * weight_;
    return (returns_[k] - served_elsewhere_[k] + prior) / (returns_[k] + prior);
  }

  // P(used within e_s, and served here) for the curve `p` (one probability
  // per rung, as ReuseCurveAt takes it).
  double ReuseHere(std::span<const float> p, double e_s) const {
    if (!any_elsewhere_) return ReuseCurveAt(horizons_s_, p, e_s);
    double sum = 0, below = 0;  // F at the previous rung
    for (size_t k = 0; k < horizons_s_.size(); ++k) {
      const double lower = k == 0 ? 0.0 : horizons_s_[k - 1];
      if (e_s <= lower) break;
      // F at a rung is the running maximum of p (what ReuseCurveAt gives
      // there exactly); only the interval E ends inside needs interpolating.
      const double at = e_s < horizons_s_[k] ? ReuseCurveAt(horizons_s_, p, e_s)
                                             : std::max(below, static_cast<double>(p[k]));
      sum += std::max(0.0, at - below) * Share(k);
      below = std::max(below, at);
    }
    // Past the last rung F is flat: nothing more to add.
    return sum;
  }

  // For snapshots (core/policy_state.h). Counts saved on another ladder
  // (the restarted pool's model differs) are read and dropped: the shares
  // start afresh, as after a model swap.
  void Save(PolicyStateWriter& out) const {
    out.Varint(returns_.size());
    out.Bool(any_elsewhere_);
    out.Double(weight_);
    for (size_t k = 0; k < returns_.size(); ++k) {
      out.Double(returns_[k]);
      out.Double(served_elsewhere_[k]);
    }
  }
  void Load(PolicyStateReader& in) {
    const uint64_t rungs = in.Count("served share rungs", 2 * sizeof(double));
    const bool any = in.Bool("served share flag");
    const double weight = in.Double("served share weight");
    std::vector<double> returns(rungs), elsewhere(rungs);
    for (uint64_t k = 0; k < rungs && in.ok(); ++k) {
      returns[k] = in.Double("served share returns");
      elsewhere[k] = in.Double("served share served elsewhere");
      // A share must stay in [0, 1]: 0 <= elsewhere <= returns, finite.
      if (in.ok() && !(elsewhere[k] >= 0 && returns[k] >= elsewhere[k] && returns[k] < 1e300)) {
        in.Fail("served share counts: not counts");
      }
    }
    if (in.ok() && !(weight >= 1 && weight <= 1e100)) in.Fail("served share weight: out of range");
    if (!in.ok() || rungs != returns_.size()) return;
    any_elsewhere_ = any;
    weight_ = weight;
    returns_ = std::move(returns);
    served_elsewhere_ = std::move(elsewhere);
  }

 private:
  std::vector<double> horizons_s_;
  std::vector<double> returns_;           // decayed count of returns per rung interval
  std::vector<double> served_elsewhere_;  // of them, served by a faster tier
  double weight_ = 1;                     // the weight of the newest return
  bool any_elsewhere_ = false;
};

}  // namespace kvlearn
