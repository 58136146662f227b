// "learned-model": the model expert of the learned policy
// (learned_policy.cc), which runs it over a private pool of its own and
// lets its decisions reach the real pool only while it costs least. Alone
// (the factory names it too, to judge a model by itself) it is eviction
// ranked by the model's expected saving per byte, and a cost-aware admission
// filter that counts the descendants a block enables.
//
// At every request the policy records the chain in its AccessHistory and
// scores each block once, on features taken before anything is evicted for
// that request (the learner records at the same point, so training and
// serving see the same vectors). The model gives P(next use within H) for a
// ladder of horizons H: the block's reuse curve (learned/reuse_curve.h),
// kept per block until its next access. E is the pool's eviction age (how
// long evicted blocks had gone unused, moving average; the longest horizon
// before the first eviction).
//
// Admission. Block i of a request is worth
//   g_i = P_i(E) * (R_i - T_i) - T_i - d * bytes_i:
// the expected saving (recompute R avoided, load T paid on the hit) minus
// the transfer that admitting costs now and minus the pool space it takes
// from the others, d per byte (CountGhosts: the savings of misses on blocks
// evicted less than E ago, per byte admitted, both measured by the policy;
// 0 until the pool first evicts). Refusing a block ends admission for the
// request, so a block also enables its descendants: it is admitted when
// the best run of the chain starting at it is worth something,
//   G_i = g_i + max(0, G_{i+1}) > 0
// (a cheap shallow block goes in when the deeper ones it carries pay for it).
// A refusal (G_i <= 0) is a bet that block i will not be back within E,
// placed only while earlier bets on claims like it have won at least its
// stake (learned/refusal_ledger.h); else the block goes in. When the pool
// is full the displaced leaf must also have been used strictly earlier
// (never churn blocks of the same instant). AdmissionScore is G_i.
// P_i(E) is the model's claim as the traffic bears it out
// (learned/reuse_calibration.h): claims about missed blocks are settled by
// whether the block came back, and a bin of claims the traffic refutes is
// scaled down, so a model trained on other traffic proposes the refusals
// its own level of claims hid.
// The thresholds are the cost model's break-even and a price the pool
// measures, not constants fitted to a trace.
//
// Eviction (HALP-style: a learned preference over a heuristic's candidates).
// Leaves sit in a recency heap; at each eviction the kWindow least recent
// evictable leaves are ranked by
//   V = P(used in the next E | unused since its last access) * (R - T) / bytes
// read off each candidate's stored curve, and the lowest V goes (ties: the
// least recent, deeper first). V needs no inference, only the curve, so a
// block's score is cached for the request time it was computed at; E in V
// is the eviction age as that request began, so V, and the order, does not
// depend on the order blocks are scored in.
//
// Guard (learned/deviation_guard.h). At every eviction the model and recency
// both choose; when they differ, the one whose choice was evicted owes the
// evicted block's R - T if it returns while the other would still have held
// it (online regret, LeCaR-style, priced in cost). While the model's regret
// exceeds recency's, the least recent leaf goes. Regret accrues to recency
// too while it evicts, so a distrusted model wins trust back without
// evicting. On the tuning traces unguarded curve eviction lost cost wherever
// LRU already has about Belady's hits (docs/history/README.md).
// Shadow (learned/shadow_pool.h). A recency-evicting copy of the pool, fed
// the same requests and this pool's admissions as they happen (OnInsert;
// in a cluster they come at prefill end), counts what its hits would
// have saved; the model evicts only while this pool's hits have saved at
// least as much since the model was loaded. The guard's per-block regrets
// let through model evictions that lost to recency on every chat trace at
// the tightest pool (docs/history/README.md); the shadow measures
// the whole effect of evicting otherwise.
// While both trust the model, EvictionPriority is V / (1 + V) (below
// 1) for the leaves in the window and 1 + the last use (ms) for the others,
// so the victim always has the lowest; RankVictims replays the windowed
// choice over the candidates. Otherwise both are recency's: the last use, ms.
//
// ARC expert (arc_policy.h, learned/arc_shadow_pool.h). An ARC instance over
// this pool sees every hook, and a second shadow, evicting by ARC with the
// same admissions, counts what its hits would have saved. While that shadow
// has saved more than the recency shadow (ArcLeads: its lead > 0), ARC
// chooses the victims, and EvictionPriority and RankVictims are ARC's; the
// model (guard and recency shadow as above) chooses otherwise. ARC keeps as
// ghosts only the victims it chose: a victim the model chose, had it come
// back, would move ARC's p for a choice ARC did not make (round 10 of the
// docs: that rule lost the sample trace's gain; round 11: forgetting them
// won it without losing elsewhere).
//
// Tiers whose admission moves no bytes (PolicyEnv::admission_moves_bytes
// false: a node's HBM holds what it just computed) admit every block and
// only rank evictions: refusing there saves nothing and loses the hit. They
// have no ARC expert: in the cluster its lead over the recency shadow
// flipped with HBM sizes 0.4% apart, and without it every tuning trace's
// cluster cost was as low or lower under both routers
// (docs/learned_policy.md, "Cluster TTFT").
// A pool behind such tiers (a cluster's shared pool) reads P_i(E) as the
// reuse it would serve itself (learned/served_share.h), and a return a
// node served settles no bet and is no ghost miss: evicting or refusing it
// lost nothing there.
//
// What was tried and what each attempt measured: docs/history/README.md.
// The model is swappable at run time (SwapModel).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "models/learned_model.h"
#include "policies/arc_policy.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/leaf_window.h"
#include "policies/learned/arc_shadow_pool.h"
#include "policies/learned/deviation_guard.h"
#include "policies/learned/recent_requests.h"
#include "policies/learned/refusal_ledger.h"
#include "policies/learned/reuse_calibration.h"
#include "policies/learned/reuse_curve.h"
#include "policies/learned/served_share.h"
#include "policies/learned/shadow_pool.h"
#include "policies/policy_factory.h"

namespace kvlearn {
namespace {

// Leaves ranked at each eviction: the 21 least recent evictable ones (as
// many as the top three levels of the 4-ary heap hold).
constexpr size_t kWindow = 1 + 4 + 16;

class LearnedModelPolicy final : public LeafOrderedPolicy {
 public:
  LearnedModelPolicy(const PolicyEnv& env, std::shared_ptr<const LearnedModel> model)
      : LeafOrderedPolicy(env),
        history_(env.catalog),
        extractor_(env.features),
        model_(std::move(model)),
        feature_sink_(env.feature_sink),
        admission_moves_bytes_(env.admission_moves_bytes),
        ablation_(env.learned_ablation),
        shadow_(env.catalog, env.pool->capacity_bytes()),
        arc_(env.admission_moves_bytes && !ablation_.Off(LearnedPart::kArcExpert)
                 ? std::make_unique<ArcExpert>(env)
                 : nullptr),
        served_(model_->metadata().horizons_seconds),
        value_horizon_s_(Horizon()) {}

  std::string_view name() const override { return "learned-model"; }

  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) override {
    ++hooks_;
    CountShadowHits(chain);
    if (arc_) arc_->arc.OnRequest(chain, access);
    if (!ablation_.Off(LearnedPart::kServedShares)) CountReturns(chain, access);
    SettlePredictions(chain, access);
    history_.Record(chain, access.time_ms);
    history_.RecordEvictions(pool_.evictions());
    if (!ablation_.Off(LearnedPart::kGuard)) guard_.OnAccess(chain, access.time_ms);
    // A return a faster tier served settles no bet: refusing lost nothing.
    if (!ablation_.Off(LearnedPart::kLedger)) {
      refusals_.OnAccess(chain.subspan(std::min<size_t>(access.served_above, chain.size())),
                         access.time_ms, Horizon() * 1000);
    }
    // Only refusals read the chains, and a tier that admits everything refuses nothing.
    if (admission_moves_bytes_ && !ablation_.Off(LearnedPart::kLedger)) {
      recent_.Begin(access.request, chain);
    }
    value_horizon_s_ = Horizon();
    Grow();
    CountGhosts(chain, access.time_ms, access.served_above);
    now_ms_ = access.time_ms;
    ScoreChain(chain, access.request);
    // G_i from the leaf up: what admitting block i and the run it enables is worth.
    double best_below = 0;
    for (size_t i = chain.size(); i-- > 0;) {
      gain_[chain[i]] = static_cast<float>(gain_[chain[i]] + std::max(0.0, best_below));
      best_below = gain_[chain[i]];
    }
  }

  void OnHit(BlockIndex b, const AccessInfo& access) override {
    ++hooks_;
    Rekey(b, KeyFor(b));
    if (arc_) arc_->arc.OnHit(b, access);
  }
  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) override {
    if (arc_) arc_->arc.ShouldAdmit(b, access);  // ARC's miss (a ghost moves its p); admits all
    // The simulator announces every block in a request's chain before asking,
    // but the sidecar may be asked about a block no request_arrival named (a
    // node that sends none, a pool of another tier, a candidate outside the
    // chain): score such a block now, on what is known of it.
    Grow();
    if (!scored_[b]) Score(b, access.request, false);
    if (!admission_moves_bytes_) return true;
    if (!(gain_[b] > 0) &&
        (ablation_.Off(LearnedPart::kLedger) || BetOnRefusing(b, access.request))) {
      return false;
    }
    if (pool_.free_bytes() >= catalog_[b].bytes) return true;
    const BlockIndex victim = OwnVictim();
    return victim != kNoBlock && EvictsBefore(KeyOf(victim), KeyFor(b));
  }
  double AdmissionScore(BlockIndex b, bool) const override {
    return b < gain_.size() ? gain_[b] : 0.0;
  }
  void OnInsert(BlockIndex b, const AccessInfo& access) override {
    ++hooks_;
    admitted_bytes_ += static_cast<double>(catalog_[b].bytes);
    last_admit_ms_ = access.time_ms;
    Track(b, KeyFor(b));
    shadow_.OnAdmit(b);
    if (arc_) {
      arc_->arc.OnInsert(b, access);
      arc_->shadow.OnAdmit(b);
    }
  }

  BlockIndex SelectVictim() override { return ArcLeads() ? arc_->arc.SelectVictim() : OwnVictim(); }

  // The model's choice among the window, or recency's (the guard and the
  // recency shadow decide), recording both for the guard. Kept until the
  // pool or this policy changes: the simulator asks twice for each block a
  // full pool admits (ShouldAdmit, then the first SelectVictim).
  BlockIndex OwnVictim() {
    if (own_.pool_changes == pool_.changes() && own_.hooks == hooks_) {
      recency_choice_ = own_.recency;
      model_choice_ = own_.model;
      return own_.victim;
    }
    recency_choice_ = LeafOrderedPolicy::SelectVictim();
    model_choice_ = ablation_.Off(LearnedPart::kCurveEviction) ? kNoBlock : ModelChoice();
    const BlockIndex victim = ModelRanks() ? model_choice_ : recency_choice_;
    own_ = {pool_.changes(), hooks_, victim, model_choice_, recency_choice_};
    return victim;
  }

  void OnEvict(BlockIndex b) override {
    ++hooks_;
    // Both experts chose for this eviction; the guard judges the one whose
    // choice went.
    if (model_choice_ != kNoBlock && (b == model_choice_ || b == recency_choice_) &&
        !ablation_.Off(LearnedPart::kGuard)) {
      const BlockHistory& m = history_.Of(model_choice_);
      const double idle_s = m.kept ? static_cast<double>(now_ms_ - m.last_ms) / 1000.0 : 0;
      guard_.OnEviction(model_choice_, recency_choice_, b, Saving(b), now_ms_,
                        static_cast<int64_t>((Horizon() - idle_s) * 1000));
    }
    model_choice_ = recency_choice_ = kNoBlock;
    const BlockHistory& h = history_.Of(b);
    if (h.kept > 0) {
      const double idle_s = static_cast<double>(now_ms_ - h.last_ms) / 1000.0;
      eviction_age_s_ = eviction_age_s_ < 0 ? idle_s : 0.99 * eviction_age_s_ + 0.01 * idle_s;
    }
    Grow();  // a sidecar may insert blocks no request or admission named
    evicted_ms_[b] = now_ms_;
    LeafOrderedPolicy::OnEvict(b);
    if (arc_) arc_->arc.OnEvict(b, /*remember=*/ArcLeads());
  }

  // While the model is trusted: V / (1 + V) in [0, 1) for the leaves in the
  // window, 1 + the last use in ms for the others (not yet the model's to
  // choose from); the victim always has the lowest. Else the last use, ms.
  double EvictionPriority(BlockIndex b) const override {
    if (ArcLeads()) return arc_->arc.EvictionPriority(b);
    if (!ModelRanks()) return KeyOf(b).primary;
    if (!window_finder_.Holds(heap(), Pinned(), b)) return 1 + std::max(KeyOf(b).primary, 0.0);
    const double v = Value(b);
    return v / (1 + v);
  }
  // The order repeated SelectVictim calls would take `candidates` in if they
  // (and the parents their eviction turns into leaves) were the pool's only
  // evictable leaves.
  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const override {
    return FirstVictims(candidates, UINT64_MAX);
  }
  // The windowed choice stops once the victims it took from `candidates`
  // hold `bytes_wanted`; the rest follow in candidate order.
  std::vector<BlockIndex> FirstVictims(std::span<const BlockIndex> candidates,
                                       uint64_t bytes_wanted) const override {
    if (ArcLeads()) return arc_->arc.RankVictims(candidates);
    if (!ModelRanks()) return LeafOrderedPolicy::RankVictims(candidates);
    std::vector<BlockIndex> wanted(candidates.begin(), candidates.end());
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    // The evictable ones, least recent first. V is computed once, when an
    // entry first enters the window: a call that frees one block reads the
    // policy state of about kWindow candidates, not of all of them (cold,
    // each is a few cache misses).
    struct Live {
      double v;
      BlockIndex b;
      bool valued;
    };
    const auto recency = [this](const Live& x, const Live& y) {
      return EvictsBefore(KeyOf(x.b), KeyOf(y.b)) ||
             (!EvictsBefore(KeyOf(y.b), KeyOf(x.b)) && x.b < y.b);
    };
    std::vector<Live> live;
    for (const BlockIndex b : wanted) {
      if (pool_.IsEvictable(b)) live.push_back({0, b, false});
    }
    std::sort(live.begin(), live.end(), recency);
    std::vector<std::pair<BlockIndex, uint32_t>> children_left;  // of parents met
    std::vector<BlockIndex> order, taken;
    uint64_t bytes = 0;
    while (!live.empty() && bytes < bytes_wanted) {
      const size_t n = std::min(live.size(), kWindow);
      for (size_t i = 0; i < n; ++i) {
        if (!live[i].valued) live[i] = {Value(live[i].b), live[i].b, true};
      }
      size_t best = 0;
      for (size_t i = 1; i < n; ++i) {
        if (ModelRanksBefore(live[i].v, live[i].b, live[best].v, live[best].b)) best = i;
      }
      const BlockIndex victim = live[best].b;
      live.erase(live.begin() + static_cast<ptrdiff_t>(best));
      if (std::binary_search(wanted.begin(), wanted.end(), victim)) {
        order.push_back(victim);
        taken.push_back(victim);
        bytes += catalog_[victim].bytes;
      }
      const BlockIndex parent = catalog_[victim].parent;
      if (parent == kNoBlock || pool_.IsPinned(parent)) continue;
      auto it = std::find_if(children_left.begin(), children_left.end(),
                             [parent](const auto& p) { return p.first == parent; });
      if (it == children_left.end()) {
        children_left.emplace_back(parent, pool_.ResidentChildren(parent));
        it = children_left.end() - 1;
      }
      if (--it->second == 0) {
        const Live up{0, parent, false};
        live.insert(std::upper_bound(live.begin(), live.end(), up, recency), up);
      }
    }
    std::sort(taken.begin(), taken.end());
    for (const BlockIndex b : candidates) {  // not reached, pinned, or under a kept block
      if (!std::binary_search(taken.begin(), taken.end(), b)) {
        order.push_back(b);
        taken.insert(std::upper_bound(taken.begin(), taken.end(), b), b);
      }
    }
    return order;
  }

  absl::Status SwapModel(std::shared_ptr<const LearnedModel> model) override {
    ++hooks_;
    if (auto s = CheckModelFits(model.get()); !s.ok()) return s;
    model_ = std::move(model);
    // Curves of the old model may have another ladder: score afresh.
    std::fill(scored_.begin(), scored_.end(), 0);
    std::fill(value_ms_.begin(), value_ms_.end(), kStale);
    curves_.assign(scored_.size() * model_->num_outputs(), 0.0f);
    value_horizon_s_ = Horizon();
    shadow_advantage_ = 0;  // a new model earns its evictions afresh
    // A new model's claims are measured afresh.
    calibration_ = LearnedReuseCalibration();
    std::fill(predicted_p_.begin(), predicted_p_.end(), std::numeric_limits<float>::quiet_NaN());
    served_ = LearnedServedShare(model_->metadata().horizons_seconds);
    return absl::OkStatus();
  }

  // ---- state (core/policy_state.h) ----
  // The recency keys, the access history, the guard, the recency shadow and
  // its advantage, the ARC expert (its lead, ARC and its shadow; a tier has
  // none), the refusal ledger, the calibration of the model's claims, the
  // served shares, the latest requests' chains and whether their bets are
  // entered, V's window, the last choices, E, the clock, the price of space
  // (its two decayed sums and the last admission), and per block known
  // (kept by a compaction): whether it was scored, its curve, G, the cached
  // V, when it was evicted and its open prediction. The model is not state:
  // the restarted pool gets it from its environment; if that one's curves
  // are of another length, blocks are unscored as after SwapModel.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    SaveOrder(renumber, out);
    history_.Save(renumber, pool_.evictions(), out);
    guard_.Save(renumber, out);
    out.Double(shadow_advantage_);
    shadow_.Save(renumber, out);
    if (arc_) {  // a tier has none (the header comment): its state has no such section
      out.Double(arc_->lead);
      if (auto s = arc_->arc.SaveState(renumber, out); !s.ok()) return s;
      arc_->shadow.Save(renumber, out);
    }
    refusals_.Save(renumber, out);
    calibration_.Save(out);
    served_.Save(out);
    recent_.Save(renumber, out);
    out.Double(value_horizon_s_);
    out.Varint(OptionalBlock(renumber, recency_choice_));
    out.Varint(OptionalBlock(renumber, model_choice_));
    out.Double(eviction_age_s_);
    out.Signed(now_ms_);
    out.Double(ghost_value_);
    out.Double(admitted_bytes_);
    out.Signed(last_admit_ms_);
    const size_t k = model_->num_outputs();
    out.Varint(k);
    std::vector<BlockIndex> known;
    for (BlockIndex b = 0; b < std::min(scored_.size(), renumber.size()); ++b) {
      if (renumber[b] != kNoBlock && (scored_[b] || gain_[b] != 0 || value_ms_[b] != kStale ||
                                      evicted_ms_[b] != kStale || !std::isnan(predicted_p_[b]))) {
        known.push_back(b);
      }
    }
    out.Varint(known.size());
    for (const BlockIndex b : known) {
      out.Varint(renumber[b]);
      out.Bool(scored_[b] != 0);
      out.Floats({curves_.data() + b * k, k});
      out.Float(gain_[b]);
      out.Float(value_[b]);
      out.Signed(value_ms_[b]);
      out.Signed(evicted_ms_[b]);
      out.Float(predicted_p_[b]);
    }
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    ++hooks_;
    LoadOrder(in);
    window_finder_.Reset();  // the keys are the saved ones now
    history_.Load(in, pool_.evictions());
    guard_.Load(in);
    shadow_advantage_ = in.Double("learned shadow advantage");
    shadow_.Load(in);
    if (arc_) {
      arc_->lead = in.Double("learned arc lead");
      if (in.ok()) (void)arc_->arc.LoadState(in);
      if (in.ok()) arc_->shadow.Load(in);
    }
    refusals_.Load(in);
    calibration_.Load(in);
    served_.Load(in);
    recent_.Load(in);
    value_horizon_s_ = in.Double("learned value horizon");
    recency_choice_ = OptionalBlock(in, "learned recency choice");
    model_choice_ = OptionalBlock(in, "learned model choice");
    eviction_age_s_ = in.Double("learned eviction age");
    now_ms_ = in.Signed("learned clock");
    ghost_value_ = in.Double("learned ghost savings");
    admitted_bytes_ = in.Double("learned admitted bytes");
    last_admit_ms_ = in.Signed("learned last admission");
    const size_t k = model_->num_outputs();
    const auto saved_k = static_cast<size_t>(in.Bounded("learned curve length", 1 << 16));
    const uint64_t n = in.Count("learned blocks", 1 + 1 + 4 * saved_k + 4 + 4 + 1 + 1 + 4);
    Grow();
    std::vector<float> curve(n > 0 ? saved_k : 0);
    int64_t last = -1;
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      const BlockIndex b = in.Block("learned block");
      if (in.ok() && static_cast<int64_t>(b) <= last) in.Fail("learned blocks: not increasing");
      const bool scored = in.Bool("learned scored");
      in.Floats("learned curve", curve);
      const float gain = in.Float("learned gain");
      const float value = in.Float("learned value");
      const int64_t value_ms = in.Signed("learned value time");
      const int64_t evicted_ms = in.Signed("learned eviction time");
      const float predicted_p = in.Float("learned open prediction");
      if (!in.ok()) break;
      last = b;
      gain_[b] = gain;
      evicted_ms_[b] = evicted_ms;
      predicted_p_[b] = predicted_p;
      if (saved_k != k) continue;  // another model: unscored, as after SwapModel
      scored_[b] = scored ? 1 : 0;
      std::copy(curve.begin(), curve.end(), curves_.begin() + static_cast<ptrdiff_t>(b * k));
      value_[b] = value;
      value_ms_[b] = value_ms;
    }
    return in.status();
  }

 private:
  static constexpr int64_t kStale = INT64_MIN;

  void Grow() {
    const size_t n = catalog_.size();
    if (scored_.size() >= n) return;
    scored_.resize(n, 0);
    gain_.resize(n, 0);
    value_.resize(n, 0);
    value_ms_.resize(n, kStale);
    evicted_ms_.resize(n, kStale);
    predicted_p_.resize(n, std::numeric_limits<float>::quiet_NaN());
    curves_.resize(n * model_->num_outputs(), 0.0f);
  }

  // Scores b at now_ms_: stores its curve and its own admission gain g;
  // `record` hands the features to the learner's sink (only for blocks of an
  // announced request, as in training).
  void Score(BlockIndex b, uint32_t request, bool record) {
    std::array<float, kNumFeatures> x;
    extractor_.Extract(b, now_ms_, catalog_, history_, pool_, x);
    if (record && feature_sink_) feature_sink_(b, request, x);
    model_->Predict(x, Curve(b));
    Scored(b, record);
  }

  // Score(b, request, true) for each block of `chain` in turn, with one
  // inference for all: no block's features read what scoring another
  // writes, and the batch gives Predict's floats.
  void ScoreChain(std::span<const BlockIndex> chain, uint32_t request) {
    const size_t n = chain.size(), k = model_->num_outputs();
    chain_features_.resize(n * kNumFeatures);
    chain_curves_.resize(n * k);
    for (size_t i = 0; i < n; ++i) {
      const std::span<float, kNumFeatures> x(chain_features_.data() + i * kNumFeatures,
                                             kNumFeatures);
      extractor_.Extract(chain[i], now_ms_, catalog_, history_, pool_, x);
      if (feature_sink_) feature_sink_(chain[i], request, x);
    }
    model_->PredictBatch(chain_features_, n, chain_curves_);
    for (size_t i = 0; i < n; ++i) {
      std::copy_n(chain_curves_.begin() + static_cast<ptrdiff_t>(i * k), k,
                  Curve(chain[i]).begin());
      Scored(chain[i], true);
    }
  }

  // The rest of Score once b's curve is stored.
  void Scored(BlockIndex b, bool record) {
    const std::span<float> curve = Curve(b);
    scored_[b] = 1;
    value_ms_[b] = kStale;
    double p = ReuseHere(curve);
    // A missed block's claim is what admission acts on: it is the one measured.
    if (record && !pool_.IsResident(b)) {
      predicted_p_[b] = static_cast<float>(p);
      calibration_.Predicted(p, now_ms_, Horizon() * 1000);
    }
    p = Calibrated(p);
    const BlockMeta& m = catalog_[b];
    gain_[b] =
        static_cast<float>(p * (m.recompute_gpu_ms - extractor_.TransferMs(m)) - AdmissionCost(b));
  }

  // The price of a byte of pool space, ms (CountGhosts).
  double SpacePrice() const {
    if (ablation_.Off(LearnedPart::kSpacePrice)) return 0;
    return admitted_bytes_ > 0 ? ghost_value_ / admitted_bytes_ : 0.0;
  }
  // P(E) as this tier serves it (learned/served_share.h), and a claim as the
  // traffic bears it out (learned/reuse_calibration.h); each the plain
  // value when its part is switched off.
  double ReuseHere(std::span<const float> curve) const {
    if (ablation_.Off(LearnedPart::kServedShares)) {
      return ReuseCurveAt(model_->metadata().horizons_seconds, curve, Horizon());
    }
    return served_.ReuseHere(curve, Horizon());
  }
  double Calibrated(double p) const {
    return ablation_.Off(LearnedPart::kCalibration) ? p : calibration_.Adjust(p);
  }
  // What admitting b costs now: its transfer and the space it takes, ms.
  double AdmissionCost(BlockIndex b) const {
    const BlockMeta& m = catalog_[b];
    return extractor_.TransferMs(m) + SpacePrice() * static_cast<double>(m.bytes);
  }

  // The model would refuse b, and with it the blocks below it in `request`,
  // the request admitting it, which later ones may have followed (a
  // refusal ends the request's admission): enters the bet in the refusal
  // ledger and says whether its class has won enough to place it. A block
  // no kept request named stakes itself alone, in a bet of its own.
  bool BetOnRefusing(BlockIndex b, uint32_t request) {
    const double p = Calibrated(ReuseHere(Curve(b)));
    const size_t c = LearnedRefusalLedger::ClassOf(p);
    auto run = recent_.RunFrom(b, catalog_[b].parent, request);
    if (run.blocks.empty()) run.blocks = std::span<const BlockIndex>(&b, 1);
    double saved = 0, stake = 0;
    for (const BlockIndex x : run.blocks) {
      saved += AdmissionCost(x);
      stake += Saving(x);
    }
    // The request's first would-be refusal is its bet: refusing deeper in
    // the same request stakes part of the same run on the same return.
    if (run.bet_entered == nullptr || !*run.bet_entered) {
      refusals_.Enter(b, c, saved, stake, now_ms_ + static_cast<int64_t>(Horizon() * 1000));
      if (run.bet_entered) *run.bet_entered = true;
    }
    return refusals_.Covers(c, stake);
  }

  // The value of pool space, measured: a request that misses a block
  // evicted less than E ago would have hit in a pool twice the size (under
  // recency, twice the space keeps blocks about twice as long). Their
  // savings, per byte admitted over the same time, are what one more
  // admitted byte costs the others (the average slope of the hit curve from
  // this pool's size to twice it). Both sums decay with time constant E.
  void CountGhosts(std::span<const BlockIndex> chain, int64_t time_ms, size_t served_above) {
    const double e_ms = Horizon() * 1000;
    // A clock that steps back (a sidecar's caller) decays nothing.
    const double decay =
        std::exp(-static_cast<double>(std::max<int64_t>(time_ms - now_ms_, 0)) / e_ms);
    ghost_value_ *= decay;
    admitted_bytes_ *= decay;
    // Nothing admitted for longer than E: the price has no measurement
    // behind it, and left alone it would never get one (no admission, no
    // eviction, no ghost), so a price above every block's worth would stop
    // admission for good. Measure afresh from zero.
    if (last_admit_ms_ != kStale && static_cast<double>(time_ms - last_admit_ms_) > e_ms) {
      ghost_value_ = 0;
      admitted_bytes_ = 0;
      last_admit_ms_ = kStale;
    }
    for (size_t i = 0; i < chain.size(); ++i) {
      const BlockIndex b = chain[i];
      if (pool_.IsResident(b) || evicted_ms_[b] == kStale) continue;
      // A faster tier served it: the eviction cost nothing this time.
      if (i >= served_above && static_cast<double>(time_ms - evicted_ms_[b]) <= e_ms) {
        ghost_value_ += Saving(b);
      }
      evicted_ms_[b] = kStale;
    }
  }

  std::span<float> Curve(BlockIndex b) {
    const size_t k = model_->num_outputs();
    return {curves_.data() + b * k, k};
  }

  // The model's choice among the kWindow least recent evictable leaves
  // (leaf_window.h): the lowest V, then the least recent, deeper first;
  // among leaves equal in both, the first the heap's best-first walk meets.
  // Recency's choice when no leaf is evictable.
  BlockIndex ModelChoice() {
    if (window_finder_.Find(heap(), Pinned(), window_) == LeafWindow::kAnyOrder) {
      // In no particular order: the answer stands unless another leaf ties it.
      const auto [best, tied] = LeastByModel(window_);
      if (!tied) return window_[best];
      window_finder_.Walk(heap(), Pinned(), kWindow, window_);
    }
    return window_.empty() ? recency_choice_ : window_[LeastByModel(window_).first];
  }

  // The pool's pins, as the window's walks ask for them.
  struct PinTest {
    const PoolState* pool;
    bool operator()(BlockIndex b) const { return pool->IsPinned(b); }
  };
  PinTest Pinned() const { return {&pool_}; }

  // The position in `window` of its first entry of lowest (V, recency key),
  // and whether another entry equals it in both (or a V is NaN, which
  // compares with nothing).
  std::pair<size_t, bool> LeastByModel(std::span<const BlockIndex> window) {
    values_.clear();
    for (const BlockIndex b : window) values_.push_back(Value(b));
    size_t best = 0;
    bool nan = false;
    for (size_t i = 0; i < window.size(); ++i) {
      nan |= std::isnan(values_[i]);
      if (ModelRanksBefore(values_[i], window[i], values_[best], window[best])) best = i;
    }
    bool tied = nan;
    for (size_t i = 0; i < window.size() && !tied; ++i) {
      tied = i != best && !ModelRanksBefore(values_[best], window[best], values_[i], window[i]);
    }
    return {best, tied};
  }

  // The window a kept block is expected to stay for: the eviction age.
  double Horizon() const {
    return eviction_age_s_ < 0 ? model_->metadata().horizons_seconds.back() : eviction_age_s_;
  }

  // V of b at now_ms_, cached per request time. A block never scored (the
  // sidecar told of it without a request naming it) has V = 0: nothing
  // says it will return.
  double Value(BlockIndex b) const {
    if (b >= scored_.size() || !scored_[b]) return 0;
    if (value_ms_[b] == now_ms_) return value_[b];
    const BlockHistory& h = history_.Of(b);
    const double idle_s = h.kept ? static_cast<double>(now_ms_ - h.last_ms) / 1000.0 : 0;
    const size_t k = model_->num_outputs();
    const double p = ReuseWithinGiven(model_->metadata().horizons_seconds,
                                      {curves_.data() + b * k, k}, idle_s, value_horizon_s_);
    const BlockMeta& m = catalog_[b];
    const double saving = std::max(m.recompute_gpu_ms - extractor_.TransferMs(m), 0.0);
    value_[b] =
        static_cast<float>(p * saving / static_cast<double>(std::max<uint64_t>(m.bytes, 1)));
    value_ms_[b] = now_ms_;
    return value_[b];
  }

  // What a hit on b saves: R - T, at least 0.
  double Saving(BlockIndex b) const {
    if (b == kNoBlock) return 0;
    const BlockMeta& m = catalog_[b];
    return std::max(m.recompute_gpu_ms - extractor_.TransferMs(m), 0.0);
  }

  // The guard trusts the model, and its evictions have saved at least what
  // evicting by recency would have with the same admissions (the shadow).
  // Research switches: without curve eviction never, without the guard always.
  bool ModelRanks() const {
    if (ablation_.Off(LearnedPart::kCurveEviction)) return false;
    if (ablation_.Off(LearnedPart::kGuard)) return true;
    return guard_.Trusted() && shadow_advantage_ >= 0;
  }

  // ARC chooses the victims while its shadow's hits have saved more than
  // the recency shadow's, with this pool's admissions; never in a node's own
  // tiers (see the header comment).
  bool ArcLeads() const { return arc_ && arc_->lead > 0; }

  // Counts every block of `chain` seen before as a return after its idle
  // time, served by a faster tier or here (LearnedServedShare). Before the
  // history records this request: last_ms is still the previous use.
  void CountReturns(std::span<const BlockIndex> chain, const AccessInfo& access) {
    for (size_t i = 0; i < chain.size(); ++i) {
      const BlockHistory& h = history_.Of(chain[i]);
      if (h.kept == 0) continue;
      served_.Count(static_cast<double>(access.time_ms - h.last_ms) / 1000.0,
                    i < access.served_above);
    }
  }

  // Settles the open predictions of `chain`'s blocks, made at their previous
  // use (before the history records this request), as returns: a return a
  // faster tier served is none here, as for the bets.
  void SettlePredictions(std::span<const BlockIndex> chain, const AccessInfo& access) {
    Grow();
    calibration_.Advance(access.time_ms, Horizon() * 1000);
    for (size_t i = 0; i < chain.size(); ++i) {
      const BlockIndex b = chain[i];
      if (std::isnan(predicted_p_[b])) continue;
      const BlockHistory& h = history_.Of(b);
      if (h.kept > 0 && i >= access.served_above) {
        calibration_.Returned(predicted_p_[b], h.last_ms, access.time_ms);
      }
      predicted_p_[b] = std::numeric_limits<float>::quiet_NaN();
    }
  }

  // Adds to shadow_advantage_ the savings of the blocks of `chain` that hit
  // in this pool and not in the recency shadow, less the reverse, and to
  // the ARC expert's lead those of its shadow against the recency one: only the
  // blocks where two pools differ (a prefix is held in both), so pools that
  // agree add exactly 0, whatever the rounding.
  void CountShadowHits(std::span<const BlockIndex> chain) {
    const auto held = [this](BlockIndex b) { return pool_.IsResident(b); };
    const size_t real = pool_.ResidentPrefix(chain);
    const size_t shadow = shadow_.OnRequest(chain, held);
    shadow_advantage_ += SavingBetween(chain, real, shadow);
    if (arc_) arc_->lead += SavingBetween(chain, arc_->shadow.OnRequest(chain, held), shadow);
  }
  // The savings of chain[b, a) when a > b, less those of chain[a, b) when b > a.
  double SavingBetween(std::span<const BlockIndex> chain, size_t a, size_t b) const {
    double sum = 0;
    for (size_t i = std::min(a, b); i < std::max(a, b); ++i) {
      sum += a > b ? Saving(chain[i]) : -Saving(chain[i]);
    }
    return sum;
  }

  // The model's order of two blocks of V va and vb: lower V first, then the
  // least recent, deeper first.
  bool ModelRanksBefore(double va, BlockIndex a, double vb, BlockIndex b) const {
    return va < vb || (va == vb && EvictsBefore(KeyOf(a), KeyOf(b)));
  }
  OrderKey KeyFor(BlockIndex b) const {
    return {static_cast<double>(now_ms_), 0, catalog_[b].depth};
  }

  AccessHistory history_;
  FeatureExtractor extractor_;
  std::shared_ptr<const LearnedModel> model_;
  FeatureSink feature_sink_;
  const bool admission_moves_bytes_;
  const LearnedAblation ablation_;  // research switches (learned/ablation.h)
  std::vector<uint8_t> scored_;     // per block: 1 once a curve is stored
  std::vector<float> curves_;       // per block: num_outputs() probabilities at its latest score
  std::vector<float> gain_;         // per block: G (g until OnRequest sums the chain)
  std::vector<float> chain_features_, chain_curves_;  // scratch of ScoreChain()
  // Cache of V: value_[b] was computed at request time value_ms_[b].
  mutable std::vector<float> value_;
  mutable std::vector<int64_t> value_ms_;
  LearnedDeviationGuard guard_;
  // Recency eviction with this pool's admissions, and what this pool's hits
  // saved beyond the shadow's since the model was loaded (R - T summed).
  LearnedShadowPool shadow_;
  double shadow_advantage_ = 0;
  // The expert that evicts while ARC leads: ARC over this pool, fed every
  // hook, remembering as ghosts only the victims it chose. Its lead: what
  // the ARC shadow's hits saved beyond the recency shadow's (R - T summed).
  // Null in a tier (the header comment; about 118 B a block saved).
  struct ArcExpert {
    explicit ArcExpert(const PolicyEnv& env)
        : arc(env), shadow(env.catalog, env.pool->capacity_bytes()) {}
    ArcPolicy arc;
    LearnedArcShadowPool shadow;
    double lead = 0;
  };
  std::unique_ptr<ArcExpert> arc_;
  LearnedRefusalLedger refusals_;
  LearnedReuseCalibration calibration_;
  std::vector<float> predicted_p_;  // per block: p of its open prediction (NaN: none)
  LearnedServedShare served_;       // on the model's ladder
  LearnedRecentRequests recent_;    // their chains, for the runs refusals stake
  // E as the latest request began: V's window, fixed while that request's
  // evictions move E, so V, and with it the eviction order, does not depend
  // on the order blocks are scored in.
  double value_horizon_s_ = 0;
  LeafWindow window_finder_{kWindow};
  std::vector<BlockIndex> window_;        // scratch of ModelChoice()
  std::vector<double> values_;            // scratch of LeastByModel(): V per window entry
  BlockIndex recency_choice_ = kNoBlock;  // of the latest SelectVictim
  BlockIndex model_choice_ = kNoBlock;
  // OwnVictim's last answer, for the pool and policy as they were then.
  struct OwnChoice {
    uint64_t pool_changes = UINT64_MAX;  // PoolState::changes() when it was made
    uint64_t hooks = 0;                  // hooks_ when it was made
    BlockIndex victim = kNoBlock, model = kNoBlock, recency = kNoBlock;
  };
  OwnChoice own_;
  uint64_t hooks_ = 0;               // calls that change what OwnVictim reads
  double eviction_age_s_ = -1;       // < 0 until the first eviction
  std::vector<int64_t> evicted_ms_;  // per block: when it was evicted (kStale: resident, counted)
  double ghost_value_ = 0;           // decayed savings of misses on blocks evicted < E ago
  double admitted_bytes_ = 0;        // decayed bytes admitted
  int64_t last_admit_ms_ = kStale;   // when a block was last admitted (kStale: none since a reset)
  int64_t now_ms_ = 0;
};

}  // namespace

// REQUIRES: env.model checked by CreatePolicy.
std::unique_ptr<RetentionPolicy> MakeLearnedModelPolicy(const PolicyEnv& env) {
  return std::make_unique<LearnedModelPolicy>(env, env.model);
}

}  // namespace kvlearn
