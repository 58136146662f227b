// Whether the learned policy may refuse to admit a request's blocks: a
// refusal is a bet, placed only when earlier bets of its kind (placed or
// not) have won at least what it stakes, so a model whose low probabilities
// are wrong for this traffic soon stops refusing.
//
// The model refuses block i when the run of the request from i down is
// worth less than it costs to admit (learned_policy.cc). Against admitting
// it, refusing saves `saved` (T + d * bytes of each block of the run) and,
// if block i is used again within E while an admitted copy would still be
// resident, loses `stake` (R - T of each block of the run: a prefix that
// misses at i misses below it too). One miscalibrated bet can cost a
// hundred right ones (a long conversation's deep blocks cost ~100 T each to
// recompute), so the ledger counts decisions, not blocks, and a refusal
// goes ahead only while its class's balance covers its stake. What a
// refusal would have done is observable whatever the policy then does
// (requests do not depend on the pool), so every would-be refusal is
// entered and settled when block i comes back or E has passed: a class
// earns its bankroll from bets it did not place.
//
// Refusals are classed by the probability the model gave block i of being
// used within E, in octaves: [0, 1/128), [1/128, 1/64), ..., [1/4, 1/2),
// [1/2, 1]: each class tests one range of the model's claims (the bet is
// won when the claim was right), so a range it is wrong about on this
// traffic, as on the rare long conversations it saw few of, stops refusing
// without silencing the ranges it gets right. The balances decay with time
// constant E, as the price of space's sums do: a class's bankroll is what
// its bets won over about the last E, however many that was.
//
// Memory: at most kMaxOpen bets are waiting to settle (a bet entered while
// that many are, at most one per request over the last E, is not entered:
// the ledger learns from a sample of the traffic then).
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

class LearnedRefusalLedger {
 public:
  static constexpr size_t kClasses = 8;
  static constexpr size_t kMaxOpen = size_t{1} << 16;  // ~2 MiB of bets and queue

  // The class of a refusal whose block the model gives probability `p` of
  // coming back within E: octaves of that claim, [0, 1/128), [1/128, 1/64),
  // ..., [1/4, 1/2), [1/2, 1].
  static size_t ClassOf(double p) {
    if (!(p >= 1.0 / 128)) return 0;  // NaN too: nothing says it returns
    size_t c = 1;
    for (double edge = 1.0 / 64; c + 1 < kClasses && p >= edge; edge *= 2) ++c;
    return c;
  }

  // True while class `c` has won at least `stake`: what a refusal staking
  // that much may lose.
  bool Covers(size_t c, double stake) const { return balance_[c] >= stake; }

  // A would-be refusal of class `c` at block `b`, saving `saved` and
  // staking `stake`, settled by b's next use before `until_ms`. A block
  // with an open bet keeps it (the request's first refusal speaks for it).
  void Enter(BlockIndex b, size_t c, double saved, double stake, int64_t until_ms) {
    if (expiry_.size() >= kMaxOpen) return;  // the queue bounds the open bets too
    const auto [it, added] = open_.try_emplace(b, Bet{until_ms, saved, stake, c});
    if (added) expiry_.emplace_back(until_ms, b);
  }

  // A request used `chain` at `now_ms`, with E = `e_ms`: the balances
  // decay for the time since the last request, then bets whose window has
  // passed are won and bets on the chain's blocks still open are lost.
  void OnAccess(std::span<const BlockIndex> chain, int64_t now_ms, double e_ms) {
    // A clock that steps back (a sidecar's caller) decays nothing.
    if (last_ms_ != kNever && now_ms > last_ms_ && e_ms > 0) {
      const double decay = std::exp(-static_cast<double>(now_ms - last_ms_) / e_ms);
      for (double& b : balance_) b *= decay;
    }
    last_ms_ = now_ms;
    // Windows are E at entry, which moves, so the queue is only roughly in
    // order: a bet may settle after its window, never before.
    while (!expiry_.empty() && expiry_.front().first < now_ms) {
      const auto [until_ms, b] = expiry_.front();
      expiry_.pop_front();
      const auto it = open_.find(b);
      if (it == open_.end() || it->second.until_ms != until_ms) continue;
      Settle(it->second, false);
      open_.erase(it);
    }
    if (open_.empty()) return;
    for (const BlockIndex b : chain) {
      const auto it = open_.find(b);
      if (it == open_.end()) continue;
      Settle(it->second, now_ms <= it->second.until_ms);
      open_.erase(it);
    }
  }

  double balance(size_t c) const { return balance_[c]; }
  size_t open_bets() const { return open_.size(); }

  // The balances and the open bets in entry order, for snapshots
  // (core/policy_state.h). A bet on a block a compaction forgets is
  // dropped: that block cannot come back as itself.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    for (const double b : balance_) out.Double(b);
    out.Signed(last_ms_);
    std::vector<std::pair<BlockIndex, Bet>> kept;
    for (const auto& [until_ms, b] : expiry_) {
      const auto it = open_.find(b);
      if (it == open_.end() || it->second.until_ms != until_ms) continue;
      const BlockIndex to = Renumbered(renumber, b);
      if (to != kNoBlock) kept.emplace_back(to, it->second);
    }
    out.Varint(kept.size());
    for (const auto& [b, bet] : kept) {
      out.Varint(b);
      out.Signed(bet.until_ms);
      out.Double(bet.saved);
      out.Double(bet.stake);
      out.Varint(bet.refusal_class);
    }
  }
  // REQUIRES: a ledger that saw nothing yet.
  void Load(PolicyStateReader& in) {
    for (double& b : balance_) b = in.Double("refusal ledger balance");
    last_ms_ = in.Signed("refusal ledger clock");
    const uint64_t n = in.Count("refusal ledger bets", 4);
    for (uint64_t k = 0; k < n && in.ok(); ++k) {
      const BlockIndex b = in.Block("refusal ledger block");
      Bet bet;
      bet.until_ms = in.Signed("refusal ledger window end");
      bet.saved = in.Double("refusal ledger saving");
      bet.stake = in.Double("refusal ledger stake");
      bet.refusal_class = in.Bounded("refusal ledger class", kClasses - 1);
      if (!in.ok()) break;
      if (!open_.emplace(b, bet).second) {
        in.Fail("refusal ledger bets: a block twice");
        break;
      }
      expiry_.emplace_back(bet.until_ms, b);
    }
  }

 private:
  static constexpr int64_t kNever = INT64_MIN;
  struct Bet {
    int64_t until_ms = 0;
    double saved = 0;  // T + d * bytes of the run: what refusing it saves
    double stake = 0;  // R - T of the run: what refusing it loses if b returns in time
    size_t refusal_class = 0;
  };

  void Settle(const Bet& bet, bool lost) {
    double& balance = balance_[bet.refusal_class];
    balance += bet.saved - (lost ? bet.stake : 0.0);
  }

  std::array<double, kClasses> balance_{};
  int64_t last_ms_ = kNever;  // the latest request
  absl::flat_hash_map<BlockIndex, Bet> open_;
  std::deque<std::pair<int64_t, BlockIndex>> expiry_;  // (until_ms, block), entry order
};

}  // namespace kvlearn
