#include "policies/learned_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/learned_model.h"
#include "policies/policy_factory.h"

namespace kvlearn {
namespace {

// EvictionPriority's offset for blocks the leader holds: above every stamp.
constexpr double kHeldOffset = 0x1p52;
// LearnedPolicy::seen_'s bits.
constexpr uint8_t kSeen = 1, kUsed = 2;

}  // namespace

LearnedPolicy::LearnedPolicy(const PolicyEnv& env)
    : LeafOrderedPolicy(env), env_(env), admission_moves_bytes_(env.admission_moves_bytes) {
  env_.pool = nullptr;  // each expert gets its own
  PolicyEnv plain = env_;
  plain.model = nullptr;
  plain.feature_sink = nullptr;
  AddExpert("lru", plain);
  if (!env.learned_ablation.Off(LearnedPart::kGdsfExpert)) AddExpert("gdsf", plain);
  heuristics_ = experts_.size();
  if (env_.model != nullptr) AddExpert("learned-model", env_);
  for (ExpertState& s : experts_state_) s.joined = -kWindowTurnovers;  // all start together
}

void LearnedPolicy::AddExpert(std::string name, PolicyEnv env) {
  experts_.push_back(std::make_unique<LearnedExpert>(std::move(name), &catalog_,
                                                     pool_.capacity_bytes(), std::move(env)));
  experts_state_.push_back({.joined = turnovers_});
}

double LearnedPolicy::ReuseShare() const {
  return evicted_ms_ > 0 ? evicted_used_ms_ / evicted_ms_ : 1.0;
}

double LearnedPolicy::ExpectedRefill(size_t e) const {
  const ExpertState& s = experts_state_[e];
  return ReuseShare() * std::max(s.deficit_ms - s.surplus_ms, 0.0);
}

void LearnedPolicy::RealPoolChanged(BlockIndex b, double sign) {
  for (size_t e = 0; e < experts_.size(); ++e) {
    ExpertState& s = experts_state_[e];
    if (experts_[e]->pool().IsResident(b)) {
      s.deficit_ms -= sign * Refill(b);
    } else {
      s.surplus_ms += sign * Refill(b);
    }
  }
}

double LearnedPolicy::WindowFill(size_t e) const {
  // Both sums have run since the later of the two joined (the first experts
  // at turnover 0), at least one turnover: evidence from a fuller window.
  const double since = std::max({experts_state_[e].joined, experts_state_[leader_].joined, 0.0});
  const double elapsed = std::max(turnovers_ - since, 1.0);
  return 1.0 / -std::expm1(-elapsed / kWindowTurnovers);
}

bool LearnedPolicy::Warm(size_t e) const {
  return experts_[e]->status().ok() && turnovers_ - experts_state_[e].joined >= kWindowTurnovers;
}

void LearnedPolicy::Grow() {
  if (seen_.size() < catalog_.size()) {
    seen_.resize(GrownPerBlockSize(catalog_.size(), seen_.size(), catalog_), 0);
  }
}

OrderKey LearnedPolicy::KeyFor(BlockIndex b, double stamp) const {
  const bool held = experts_[leader_]->pool().IsResident(b);
  return {held ? 1.0 : 0.0, stamp, catalog_[b].depth};
}

double LearnedPolicy::RealPoolCost(std::span<const BlockIndex> chain, const AccessInfo& access) {
  const LearnedExpert& priced = *experts_[0];  // every expert prices transfers alike
  const double admitted = priced.TransferMs(real_admitted_bytes_);
  real_admitted_bytes_ = 0;
  const uint32_t above = std::min<uint32_t>(access.served_above, chain.size());
  return admitted + priced.MissesAndLoadMs(catalog_, chain, above, pool_.ResidentPrefix(chain));
}

bool LearnedPolicy::FallBack() {
  if (leader_ < heuristics_ || env_.learned_ablation.Off(LearnedPart::kFallback)) return false;
  size_t cheaper = 0;  // the heuristic the real pool lost most to in this stretch
  for (size_t h = 1; h < heuristics_; ++h) {
    if (StretchExcess(h) > StretchExcess(cheaper)) cheaper = h;
  }
  const double mean_request = real_decayed_ms_ / decayed_requests_;
  if (StretchExcess(cheaper) <= stretch_refill_ms_ + mean_request) return false;
  ++fallbacks_;
  fell_back_ = true;
  fallback_loss_ms_ = StretchExcess(cheaper);
  for (ExpertState& x : experts_state_) x.at_fallback_ms = x.decayed_ms;
  Lead(cheaper);
  return true;
}

bool LearnedPolicy::ReturnToLru() {
  if (leader_ == 0 || !LosingLately(leader_)) return false;
  const double excess = experts_state_[leader_].recent_ms - experts_state_[0].recent_ms;
  const double mean_request = experts_state_[leader_].recent_ms / recent_requests_;
  if (excess <= ExpectedRefill(0) + mean_request) return false;
  ++recent_returns_;
  Lead(0);
  return true;
}

void LearnedPolicy::OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) {
  Grow();
  for (const BlockIndex b : chain) seen_[b] |= kSeen;
  const double real_cost = RealPoolCost(chain, access);
  const double capacity = static_cast<double>(std::max<uint64_t>(pool_.capacity_bytes(), 1));
  for (size_t e = 0; e < experts_.size(); ++e) {
    LearnedExpert& x = *experts_[e];
    ExpertState& s = experts_state_[e];
    const bool leads = e == leader_;
    const uint64_t admitted_before = x.pool().used_bytes();
    uint64_t evicted_bytes = 0;
    const double cost = x.Serve(
        chain, access,
        [&](BlockIndex b) {
          evicted_bytes += catalog_[b].bytes;
          if (!pool_.IsResident(b)) {
            s.deficit_ms -= Refill(b);
          } else {
            s.surplus_ms += Refill(b);
            if (leads) Rekey(b, {0.0, KeyOf(b).secondary, catalog_[b].depth});
          }
        },
        [&](BlockIndex b) {
          if (!pool_.IsResident(b)) {
            s.deficit_ms += Refill(b);
          } else {
            s.surplus_ms -= Refill(b);
            if (leads) Rekey(b, {1.0, KeyOf(b).secondary, catalog_[b].depth});
          }
        });
    if (e == 0) {  // the lru expert admits every block: its admissions are the turnover clock
      const uint64_t admitted = x.pool().used_bytes() + evicted_bytes - admitted_before;
      turnovers_ += static_cast<double>(admitted) / capacity;
      const double decay = std::exp(-static_cast<double>(admitted) / capacity / kWindowTurnovers);
      const double recent_decay =
          std::exp(-static_cast<double>(admitted) / capacity / kRecentTurnovers);
      for (ExpertState& d : experts_state_) {
        d.decayed_ms *= decay;
        d.at_fallback_ms *= decay;
        d.recent_ms *= recent_decay;
      }
      recent_requests_ = recent_requests_ * recent_decay + 1;
      decayed_requests_ = decayed_requests_ * decay + 1;
      real_decayed_ms_ *= decay;
      for (double& offset : stretch_offset_ms_) offset *= decay;
      fallback_loss_ms_ *= decay;
      evicted_ms_ *= decay;
      evicted_used_ms_ *= decay;
    }
    s.decayed_ms += cost;
    s.recent_ms += cost;
    s.total_ms += cost;
  }
  real_decayed_ms_ += real_cost;
  if (!experts_[leader_]->status().ok()) {
    Lead(0);  // a broken expert decides nothing more; lru cannot break
    return;
  }
  if (FallBack() || ReturnToLru()) return;
  // After a fallback a model expert competes on what it cost since, unweighed:
  // the lead it had before is what the fallback found wanting.
  const auto returning = [&](size_t e) { return fell_back_ && e >= heuristics_; };
  const auto since = [&](size_t e) {
    return experts_state_[e].decayed_ms - experts_state_[e].at_fallback_ms;
  };
  size_t best = leader_;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (returning(e) && since(e) >= since(leader_)) continue;
    if (LosingLately(e)) continue;
    if (Warm(e) && experts_state_[e].decayed_ms < experts_state_[best].decayed_ms) best = e;
  }
  if (best == leader_) return;
  const double mean_request = experts_state_[leader_].decayed_ms / decayed_requests_;
  const double lead = returning(best)
                          ? since(leader_) - since(best)
                          : (experts_state_[leader_].decayed_ms - experts_state_[best].decayed_ms) *
                                WindowFill(best);
  const double won_back = returning(best) ? fallback_loss_ms_ : 0.0;
  if (lead > ExpectedRefill(best) + mean_request + won_back) Lead(best);
}

void LearnedPolicy::OnHit(BlockIndex b, const AccessInfo&) {
  Grow();
  seen_[b] |= kUsed;
  Rekey(b, KeyFor(b, static_cast<double>(++stamp_)));
}

bool LearnedPolicy::ShouldAdmit(BlockIndex b, const AccessInfo&) {
  if (!admission_moves_bytes_) return true;  // refusing there saves nothing
  Grow();
  if (!(seen_[b] & kSeen)) return true;  // no announced request named it: no expert knows it
  return experts_[leader_]->pool().IsResident(b);
}

double LearnedPolicy::AdmissionScore(BlockIndex b, bool admitted) const {
  return experts_[leader_]->policy().AdmissionScore(b, admitted);
}

void LearnedPolicy::OnInsert(BlockIndex b, const AccessInfo&) {
  Grow();
  seen_[b] &= ~kUsed;
  Track(b, KeyFor(b, static_cast<double>(++stamp_)));
  RealPoolChanged(b, +1);
  if (admission_moves_bytes_) real_admitted_bytes_ += catalog_[b].bytes;
}

void LearnedPolicy::OnEvict(BlockIndex b) {
  Grow();
  evicted_ms_ += Refill(b);
  if (seen_[b] & kUsed) evicted_used_ms_ += Refill(b);
  RealPoolChanged(b, -1);
  LeafOrderedPolicy::OnEvict(b);
}

double LearnedPolicy::EvictionPriority(BlockIndex b) const {
  const OrderKey& key = KeyOf(b);
  return key.primary * kHeldOffset + key.secondary;
}

void LearnedPolicy::Lead(size_t e) {
  if (e >= heuristics_ && e != leader_) {  // the model expert's stretch begins
    fell_back_ = false;
    stretch_refill_ms_ = ExpectedRefill(e);
    for (size_t h = 0; h < heuristics_; ++h) {
      stretch_offset_ms_[h] = real_decayed_ms_ - experts_state_[h].decayed_ms;
    }
  }
  if (e != leader_) ++switches_;
  leader_ = e;
  for (BlockIndex b = 0; b < catalog_.size(); ++b) {
    if (pool_.IsResident(b)) Rekey(b, KeyFor(b, KeyOf(b).secondary));
  }
  RecountDeficitsAndSurpluses();
}

void LearnedPolicy::RecountDeficitsAndSurpluses() {
  for (size_t e = 0; e < experts_.size(); ++e) {
    double deficit = 0, surplus = 0;
    const PoolState& pool = experts_[e]->pool();
    for (BlockIndex b = 0; b < catalog_.size(); ++b) {
      if (pool.IsResident(b) == pool_.IsResident(b)) continue;
      (pool.IsResident(b) ? deficit : surplus) += Refill(b);
    }
    experts_state_[e].deficit_ms = deficit;
    experts_state_[e].surplus_ms = surplus;
  }
}

absl::Status LearnedPolicy::SwitchTo(std::string_view name) {
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (experts_[e]->name() == name) {
      Lead(e);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("no expert named '", std::string(name), "'"));
}

absl::Status LearnedPolicy::SwapModel(std::shared_ptr<const LearnedModel> model) {
  if (auto s = CheckModelFits(model.get()); !s.ok()) return s;
  for (auto& x : experts_) {
    if (x->name() == "learned-model") return x->policy().SwapModel(std::move(model));
  }
  // The first model: its expert starts empty and may lead once warm.
  env_.model = std::move(model);
  AddExpert("learned-model", env_);
  return experts_.back()->status();
}

// ---- state (core/policy_state.h) ----
// The real pool's keys, the stamp, the leader, the switches, the clocks, the
// evicted recompute sums, the real pool's cost sum, last fallback and the model's stretch, each
// block's bits (named by an announced request; used since admitted), and per expert its sums, when
// it joined, and its pool and policy state, when a compaction keeps every block it holds (else it
// restarts empty and leads again only once warm). Deficits are recounted on load. A model expert is
// state only if the restarted policy has one too (its model comes from the environment).
absl::Status LearnedPolicy::SaveState(std::span<const BlockIndex> renumber,
                                      PolicyStateWriter& out) const {
  SaveOrder(renumber, out);
  out.Varint(stamp_);
  out.Varint(leader_);
  out.Varint(switches_);
  out.Double(turnovers_);
  out.Double(decayed_requests_);
  out.Double(evicted_ms_);
  out.Double(evicted_used_ms_);
  out.Double(real_decayed_ms_);
  out.Varint(real_admitted_bytes_);
  out.Varint(fallbacks_);
  out.Bool(fell_back_);
  out.Double(fallback_loss_ms_);
  for (const double offset : stretch_offset_ms_) out.Double(offset);
  out.Double(stretch_refill_ms_);
  out.Varint(recent_returns_);
  out.Double(recent_requests_);
  std::vector<std::pair<BlockIndex, uint8_t>> marked;  // renumbered, with their bits
  for (BlockIndex b = 0; b < std::min(seen_.size(), renumber.size()); ++b) {
    if (seen_[b] != 0 && renumber[b] != kNoBlock) marked.emplace_back(renumber[b], seen_[b]);
  }
  std::sort(marked.begin(), marked.end());
  out.Varint(marked.size());
  for (const auto& [b, bits] : marked) {
    out.Varint(b);
    out.Varint(bits);
  }
  out.Varint(experts_.size());
  for (size_t e = 0; e < experts_.size(); ++e) {
    const LearnedExpert& x = *experts_[e];
    const ExpertState& s = experts_state_[e];
    out.Bytes(x.name());
    out.Double(s.decayed_ms);
    out.Double(s.total_ms);
    out.Double(s.joined);
    out.Double(s.at_fallback_ms);
    out.Double(s.recent_ms);
    std::vector<BlockIndex> residents;
    bool kept = x.status().ok();
    for (BlockIndex b = 0; b < catalog_.size() && kept; ++b) {
      if (!x.pool().IsResident(b)) continue;
      kept = Renumbered(renumber, b) != kNoBlock;
      residents.push_back(Renumbered(renumber, b));
    }
    absl::StatusOr<std::string> state;
    if (kept) state = x.driver().SavePolicyState(renumber);
    kept = kept && state.ok();
    out.Bool(kept);
    if (!kept) continue;
    std::sort(residents.begin(), residents.end());  // parents first: parents number lower
    out.Varint(residents.size());
    for (const BlockIndex b : residents) out.Varint(b);
    out.Bytes(*state);
  }
  return absl::OkStatus();
}

absl::Status LearnedPolicy::LoadState(PolicyStateReader& in) {
  LoadOrder(in);
  stamp_ = in.Varint("learned stamp");
  const uint64_t leader = in.Varint("learned leader");
  switches_ = in.Varint("learned switches");
  turnovers_ = in.Double("learned turnovers");
  decayed_requests_ = in.Double("learned decayed requests");
  Grow();
  evicted_ms_ = in.Double("learned evicted recompute");
  evicted_used_ms_ = in.Double("learned evicted recompute used");
  real_decayed_ms_ = in.Double("learned real pool cost");
  real_admitted_bytes_ = in.Varint("learned real pool admitted bytes");
  fallbacks_ = in.Varint("learned fallbacks");
  fell_back_ = in.Bool("learned fell back");
  fallback_loss_ms_ = in.Double("learned fallback loss");
  for (double& offset : stretch_offset_ms_) offset = in.Double("learned stretch offset");
  stretch_refill_ms_ = in.Double("learned stretch refill");
  recent_returns_ = in.Varint("learned recent returns");
  recent_requests_ = in.Double("learned recent requests");
  const uint64_t marked = in.Count("learned marked blocks", 2);
  for (uint64_t i = 0; i < marked && in.ok(); ++i) {
    const BlockIndex b = in.Block("learned marked block");
    const auto bits = static_cast<uint8_t>(in.Bounded("learned block bits", kSeen | kUsed));
    if (in.ok()) seen_[b] = bits;
  }
  const uint64_t n = in.Count("learned experts", 3);
  // An expert restored twice would hold its residents twice: damage.
  std::vector<uint8_t> loaded(experts_.size(), 0);
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const std::string name = in.Bytes("learned expert name");
    ExpertState s;
    s.decayed_ms = in.Double("learned expert cost");
    s.total_ms = in.Double("learned expert total cost");
    s.joined = in.Double("learned expert joined");
    s.at_fallback_ms = in.Double("learned expert cost at fallback");
    s.recent_ms = in.Double("learned expert recent cost");
    const bool kept = in.Bool("learned expert kept");
    std::vector<BlockIndex> residents;
    std::string state;
    if (kept) {
      const uint64_t r = in.Count("learned expert residents");
      BlockIndex last = 0;
      for (uint64_t j = 0; j < r && in.ok(); ++j) {
        const BlockIndex b = in.Block("learned expert resident");
        const BlockIndex parent = in.ok() ? catalog_[b].parent : kNoBlock;
        if (in.ok() && ((j > 0 && b <= last) ||
                        (parent != kNoBlock &&
                         !std::binary_search(residents.begin(), residents.end(), parent)))) {
          in.Fail("learned expert residents: not increasing, or a parent missing");
        }
        last = b;
        residents.push_back(b);
      }
      state = in.Bytes("learned expert state");
    }
    if (!in.ok()) break;
    // Only an expert this policy has (a model expert needs a model now).
    size_t e = 0;
    while (e < experts_.size() && experts_[e]->name() != name) ++e;
    if (e == experts_.size()) continue;
    if (loaded[e]++ != 0) {
      in.Fail(absl::StrCat("learned expert ", name, " saved twice"));
      break;
    }
    LearnedExpert& x = *experts_[e];
    if (kept) {
      x.driver().Grow();
      x.driver().RestoreResidents(residents);
      if (auto st = x.driver().LoadPolicyState(state); !st.ok()) {
        in.Fail(absl::StrCat("learned expert ", name, ": ", st.message()));
        break;
      }
    } else {
      s.joined = turnovers_;  // cold: warm again first
    }
    experts_state_[e] = s;  // its deficit and surplus are recounted below
  }
  if (!in.ok()) return in.status();
  if (leader >= experts_.size() || !Warm(leader)) {
    leader_ = 0;
    Lead(0);  // the saved leader is gone or cold: lru admits and keeps what it sees
  } else {
    leader_ = static_cast<size_t>(leader);
    RecountDeficitsAndSurpluses();
  }
  return in.status();
}

std::unique_ptr<RetentionPolicy> MakeLearnedPolicy(const PolicyEnv& env) {
  return std::make_unique<LearnedPolicy>(env);
}

}  // namespace kvlearn
