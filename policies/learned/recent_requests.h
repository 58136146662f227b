// The chains of the latest requests, for the learned policy's refusals. A
// request's blocks can reach the pool after later requests began: a cluster
// admits them at the request's prefill end, an engine may report
// block_stored after the next request_arrival. A refusal at block b stakes
// the run of b's own request below b (learned/refusal_ledger.h), and each
// request enters one bet, so both are looked up by the request that admits.
//
// A snapshot keeps the chains, each up to its first block a compaction
// forgot (core/policy_state.h, SaveKeptChain).
// Memory: the last kKept chains (their buffers are reused).
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

class LearnedRecentRequests {
 public:
  // More than a cluster has requests between their start and prefill end
  // (one per prefill node), so every admission there finds its request.
  static constexpr size_t kKept = 64;

  // A request began needing `chain` (root first).
  void Begin(uint32_t request, std::span<const BlockIndex> chain) {
    Entry& e = Push(request);
    e.chain.assign(chain.begin(), chain.end());
  }

  // The run from `b` down of the latest request `request` whose chain holds
  // b; else of the latest request whose chain does (a caller that names no
  // request, or another). Empty, with no bet flag, if no kept chain holds b.
  // `parent` is b's: a chain runs from a root, so one that holds b holds its
  // parent, and a walk down blocks no chain holds searches once, not once a
  // block.
  struct Run {
    std::span<const BlockIndex> blocks;
    bool* bet_entered = nullptr;  // that request's: its bet is in the ledger
  };
  Run RunFrom(BlockIndex b, BlockIndex parent, uint32_t request) {
    if (parent != kNoBlock && parent == missing_) {
      missing_ = b;
      return {};
    }
    Run run = Search(b, [request](const Entry& e) { return e.request == request; });
    if (run.blocks.empty()) run = Search(b, [](const Entry&) { return true; });
    missing_ = run.blocks.empty() ? b : kNoBlock;
    return run;
  }

  // Oldest first.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    out.Varint(count_);
    for (size_t k = count_; k-- > 0;) {
      const Entry& e = entries_[(newest_ + kKept - k) % kKept];
      out.Varint(e.request);
      SaveKeptChain(renumber, e.chain, out);
      out.Bool(e.bet_entered);
    }
  }
  // REQUIRES: nothing began yet.
  void Load(PolicyStateReader& in) {
    const uint64_t n = in.Bounded("learned recent requests", kKept);
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      Entry& e = Push(static_cast<uint32_t>(in.Bounded("learned request", UINT32_MAX)));
      const uint64_t blocks = in.Count("learned request chain");
      for (uint64_t j = 0; j < blocks && in.ok(); ++j) {
        e.chain.push_back(in.Block("learned chain block"));
      }
      e.bet_entered = in.Bool("learned bet entered");
    }
  }

 private:
  struct Entry {
    uint32_t request = 0;
    std::vector<BlockIndex> chain;
    bool bet_entered = false;
  };
  Entry& Push(uint32_t request) {
    missing_ = kNoBlock;  // the new chain may hold it
    newest_ = (newest_ + 1) % kKept;
    count_ = std::min(count_ + 1, kKept);
    Entry& e = entries_[newest_];
    e.request = request;
    e.chain.clear();
    e.bet_entered = false;
    return e;
  }
  // The run from b of the latest entry `named` accepts whose chain holds b.
  template <class Named>
  Run Search(BlockIndex b, const Named& named) {
    for (size_t k = 0; k < count_; ++k) {
      Entry& e = entries_[(newest_ + kKept - k) % kKept];
      if (!named(e)) continue;
      const auto at = std::find(e.chain.begin(), e.chain.end(), b);
      if (at != e.chain.end()) {
        return {std::span<const BlockIndex>(at, e.chain.end()), &e.bet_entered};
      }
    }
    return {};
  }

  std::array<Entry, kKept> entries_;
  size_t newest_ = kKept - 1;
  BlockIndex missing_ = kNoBlock;  // the last block RunFrom found in no chain since Begin
  size_t count_ = 0;
};

}  // namespace kvlearn
