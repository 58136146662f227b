// "learned": a follower of full-pool experts, safe by construction.
//
// The experts are complete simulated pools of the real pool's capacity
// (learned/expert.h): `lru`, `gdsf` and, when a model is given, the
// model-driven `learned-model`. Each is fed every request as it arrives
// (OnRequest) and plays it through, so it sees exactly what it would have
// seen serving alone, and each request is priced for it as the replay
// prices cost_seconds.
//
// The real pool follows one expert, the leader:
//  - ShouldAdmit(b): does the leader's pool hold b once it has served this
//    request? (A block no announced request named is admitted, as lru
//    would.) So the model's refusals reach the real pool only while the
//    model expert leads.
//  - SelectVictim: first an evictable leaf the leader does not hold, least
//    recently used first; then, when every such leaf is pinned, the least
//    recently used evictable leaf. EvictionPriority, RankVictims and
//    FirstVictims follow that same order (one heap of keys: whether the
//    leader holds the block, then its last use).
// Once the real pool holds every block the leader holds, the real pool
// evicts what the leader evicted, admits what it admitted, and pays at most
// its cost (it may keep a few blocks more, which only adds hits). After a
// switch the extra cost is at most one refill (a recompute) of each block
// the new leader holds and the real pool does not: its deficit.
//
// Switching. Each expert's cost is summed with exponential decay whose clock
// is the pool's turnover: the bytes the lru expert admits, in units of the
// capacity; the window is kWindowTurnovers turnovers. The leader changes
// when another (warm) expert's sum is lower than the leader's, the lead
// weighed over a whole window (WindowFill), by more than the refill a switch
// is expected to pay (ExpectedRefill) plus one mean request's cost (the
// noise floor of the sums). The expected refill is net: after a switch the
// real pool misses the new leader's blocks it lacks (the expert's deficit)
// but keeps hitting the old leader's blocks the new one lacks (its surplus)
// until it needs their room; both at the share of evicted recompute the
// real pool had used while resident.
//
// Fallback. The real pool's own cost is summed with the same decay. Once,
// since the model expert took the lead, that sum has grown more than the
// cheaper heuristic expert's (lru or gdsf) by more than the refill that
// switch was expected to pay plus one mean request's cost, that heuristic
// leads at once, whatever the refill back. The model expert may then lead
// again only on the lead it has built since the fallback, as it stands (not
// weighed up to a whole window), once that also wins back what its stretch
// lost (decayed as the sums). The margin above can grow with the
// deficit for as long as the model's pool lacks the heuristic's blocks; the
// fallback does not wait for it.
//
// Recent loss. The decayed sums remember kWindowTurnovers turnovers, so
// after the traffic changes an expert that was cheaper before keeps the lead
// for about that long while it costs more than lru now. So each expert's cost
// is also summed over a short window (kRecentTurnovers): once the leader's
// recent sum exceeds lru's by more than the refill a switch to lru is
// expected to pay plus one recent mean request, lru leads at once; and no
// other expert takes the lead from anyone while its recent sum exceeds
// lru's. Leaving lru needs evidence over the long window, returning to it
// only over the short one: lru is the cost the policy must not exceed.
// docs/learned_policy.md ("Safe by construction") states the bound this
// gives and what was measured.
//
// Not thread-safe: one policy per pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/learned/expert.h"
#include "policies/policy_env.h"

namespace kvlearn {

class LearnedPolicy final : public LeafOrderedPolicy {
 public:
  // The decay window of the experts' cost sums, in pool turnovers.
  static constexpr double kWindowTurnovers = 16.0;
  // The short window of the recent-loss rule, in pool turnovers.
  static constexpr double kRecentTurnovers = 4.0;
  // The heuristic experts, lru and gdsf, are experts 0 and 1; a model's
  // expert comes after (gdsf is absent when a research switch turns it off,
  // learned/ablation.h).
  static constexpr size_t kHeuristicExperts = 2;

  // REQUIRES: env.model, if set, checked by CreatePolicy (CheckModelFits).
  explicit LearnedPolicy(const PolicyEnv& env);

  std::string_view name() const override { return "learned"; }

  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) override;
  void OnHit(BlockIndex b, const AccessInfo& access) override;
  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) override;
  double AdmissionScore(BlockIndex b, bool admitted) const override;
  void OnInsert(BlockIndex b, const AccessInfo& access) override;
  void OnEvict(BlockIndex b) override;
  double EvictionPriority(BlockIndex b) const override;
  absl::Status SwapModel(std::shared_ptr<const LearnedModel> model) override;
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override;
  absl::Status LoadState(PolicyStateReader& in) override;

  // ---- what the follower did, for reports and tests ----
  size_t num_experts() const { return experts_.size(); }
  const LearnedExpert& expert(size_t e) const { return *experts_[e]; }
  size_t leader() const { return leader_; }
  uint64_t switches() const { return switches_; }
  // Every request's priced cost for expert e, summed without decay, ms.
  double total_cost_ms(size_t e) const { return experts_state_[e].total_ms; }
  // The same summed with decay (the switching rule's sums), ms; the requests
  // with that decay; the decay's clock, in pool turnovers.
  double decayed_cost_ms(size_t e) const { return experts_state_[e].decayed_ms; }
  double decayed_requests() const { return decayed_requests_; }
  double turnovers() const { return turnovers_; }
  // The recompute of the blocks expert e holds and the real pool does not
  // (deficit), and of those the real pool holds and e does not (surplus), ms.
  double deficit_ms(size_t e) const { return experts_state_[e].deficit_ms; }
  double surplus_ms(size_t e) const { return experts_state_[e].surplus_ms; }
  // Makes expert `name` the leader now (tests force switches with it).
  absl::Status SwitchTo(std::string_view name);
  // Every request's price for the real pool (its own hits and admissions,
  // priced as an expert's), summed with the sums' decay, ms.
  double real_decayed_ms() const { return real_decayed_ms_; }
  // Times the fallback made a heuristic expert lead.
  uint64_t fallbacks() const { return fallbacks_; }
  // Expert e's cost summed over the short window (the recent-loss rule's), ms.
  double recent_cost_ms(size_t e) const { return experts_state_[e].recent_ms; }
  // Requests, with the short window's decay.
  double recent_requests() const { return recent_requests_; }
  // Times the recent-loss rule made lru lead.
  uint64_t recent_returns() const { return recent_returns_; }

 private:
  struct ExpertState {
    double decayed_ms = 0;      // cost summed with decay (the switching rule's)
    double total_ms = 0;        // cost summed without decay
    double deficit_ms = 0;      // recompute of the blocks it holds and the real pool does not
    double surplus_ms = 0;      // recompute of the blocks the real pool holds and it does not
    double joined = 0;          // turnovers_ when it joined: warm one window later
    double at_fallback_ms = 0;  // decayed_ms at the last fallback, decayed since
    double recent_ms = 0;       // cost summed with the short window's decay
  };

  void Grow();
  // The real pool's price of the request needing `chain`, before it serves
  // it (its resident prefix is its hits), with the transfer of the bytes it
  // admitted for the previous request.
  double RealPoolCost(std::span<const BlockIndex> chain, const AccessInfo& access);
  // How much more the real pool has cost than heuristic expert h since the
  // model expert took the lead, ms (decayed as the sums).
  double StretchExcess(size_t h) const {
    return real_decayed_ms_ - experts_state_[h].decayed_ms - stretch_offset_ms_[h];
  }
  // The fallback (see the top of this file): true when it made a heuristic
  // expert lead.
  bool FallBack();
  // The recent-loss rule (see the top of this file): true when it made lru
  // lead; LosingLately(e): e's recent sum exceeds lru's.
  bool ReturnToLru();
  bool LosingLately(size_t e) const {
    return e != 0 && experts_state_[e].recent_ms > experts_state_[0].recent_ms;
  }
  void AddExpert(std::string name, PolicyEnv env);
  bool Warm(size_t e) const;
  // What a lead of the decayed sums is worth over a whole window: the sums
  // of experts that have run t turnovers weigh W(1 - e^(-t/W)) turnovers of
  // costs, so a lead is scaled by 1 / (1 - e^(-t/W)) (t at least one
  // turnover) to be set against a switch's one-time refill.
  double WindowFill(size_t e) const;
  // The share of the recompute the real pool evicted that was used while
  // resident (1 before any eviction): what a refill is expected to pay of a
  // deficit, the rest leaving unused.
  double ReuseShare() const;
  // What a switch to e is expected to cost the real pool over e's own
  // price: after it the real pool misses the blocks e holds and it does not
  // (e's deficit) but, until it needs their room, still hits the blocks it
  // holds and e does not (its surplus over e), which e misses. Each side is
  // used at the measured reuse share, so the net refill is
  // ReuseShare() * (deficit - surplus), at least 0.
  double ExpectedRefill(size_t e) const;
  // The real pool gained (sign +1) or lost (-1) block b: the deficit of
  // each expert holding b and the surplus over each one not holding it
  // move by b's refill.
  void RealPoolChanged(BlockIndex b, double sign);
  // The leader becomes e: every resident block is rekeyed (held by e or
  // not) and the deficits and surpluses are recounted exactly.
  void Lead(size_t e);
  void RecountDeficitsAndSurpluses();
  OrderKey KeyFor(BlockIndex b, double stamp) const;
  // What missing b costs a pool that would have held it: its recompute.
  double Refill(BlockIndex b) const { return catalog_[b].recompute_gpu_ms; }

  PolicyEnv env_;  // for a model expert added by SwapModel
  const bool admission_moves_bytes_;
  std::vector<std::unique_ptr<LearnedExpert>> experts_;
  std::vector<ExpertState> experts_state_;
  size_t heuristics_ = 0;  // experts before the model's: kHeuristicExperts unless ablated
  size_t leader_ = 0;
  uint64_t switches_ = 0;
  double turnovers_ = 0;         // the lru expert's admitted bytes / capacity
  double decayed_requests_ = 0;  // requests, with the sums' decay
  uint64_t stamp_ = 0;           // last-use clock of the real pool's blocks
  // Of the recompute the real pool evicted, decayed as the sums: all of it,
  // and that of blocks used while resident (the share a refill pays again).
  double evicted_ms_ = 0;
  double evicted_used_ms_ = 0;
  double real_decayed_ms_ = 0;        // the real pool's cost, decayed as the sums
  uint64_t real_admitted_bytes_ = 0;  // admitted since the last request (priced at the next)
  uint64_t fallbacks_ = 0;
  uint64_t recent_returns_ = 0;
  double recent_requests_ = 0;  // requests, with the short window's decay
  // Since the model expert took the lead: what the real pool's sum exceeded
  // each heuristic's by then (decayed as the sums), and the refill that
  // switch was expected to pay.
  double stretch_offset_ms_[kHeuristicExperts] = {};
  double stretch_refill_ms_ = 0;
  bool fell_back_ = false;       // since the last fallback, no model expert has led
  double fallback_loss_ms_ = 0;  // the excess that made the last fallback, decayed since
  std::vector<uint8_t> seen_;    // per block: bit 0 named by an announced request, bit 1 used since
                                 // the real pool admitted it
};

}  // namespace kvlearn
