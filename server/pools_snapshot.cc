#include "server/pools_snapshot.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/varint.h"

namespace kvlearn {
namespace {

constexpr char kFormat = 14;
// The current layout, its policy states of the layout before learned's
// recent-loss rule (learned without its short-window sums)...
constexpr char kFormatBeforeRecentLoss = 13;
// ...or before its fallback (without the real pool's own decayed cost)...
constexpr char kFormatBeforeFallback = 12;
// ...without the blocks' origins (BlockMeta's request type
// and turn: they read as not known)...
constexpr char kFormatWithoutOrigins = 11;
// ...and without the in-flight requests' arrival times either.
constexpr char kFormatWithoutArrivalTimes = 10;
constexpr char kFormatWithoutPolicyState = 2;
// Policy states of an older layout: 3 (access histories without forks), 4
// (learned without its shadow pool), 5 (learned without its ARC expert), 6
// (lru without the block its next insert may be linked behind), 7 (learned
// without its served shares), 8 (learned with an ARC expert in a node's HBM
// and DRAM too), 9 (learned with the latest request's chain only), 10 to 12
// (learned without its fallback) and 13 (learned without its recent-loss
// rule).
bool HasOldPolicyStates(char format) { return format >= 3 && format <= kFormatBeforeRecentLoss; }
bool HasOrigins(char format) {
  return format == kFormat || format == kFormatBeforeRecentLoss || format == kFormatBeforeFallback;
}
bool HasArrivalTimes(char format) { return HasOrigins(format) || format == kFormatWithoutOrigins; }

void PutString(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}

void PutDouble(std::string& out, double d) {
  char bytes[sizeof d];
  std::memcpy(bytes, &d, sizeof d);
  out.append(bytes, sizeof d);
}

void PutList(std::string& out, const std::vector<BlockIndex>& list) {
  PutVarint(out, list.size());
  for (BlockIndex b : list) PutVarint(out, b);
}

// Reads what PutString / PutDouble / PutList wrote; every read checks bounds.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool empty() const { return in_.empty(); }
  uint64_t Varint() {
    uint64_t n = 0;
    if (ok_ && !GetVarint(in_, n)) ok_ = false;
    return n;
  }
  std::string String() {
    const uint64_t n = Varint();
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  double Double() {
    double d = 0;
    if (!ok_ || in_.size() < sizeof d) {
      ok_ = false;
      return 0;
    }
    std::memcpy(&d, in_.data(), sizeof d);
    in_.remove_prefix(sizeof d);
    return d;
  }
  // A list of block numbers, each below `blocks`.
  std::vector<BlockIndex> List(uint64_t blocks) {
    const uint64_t n = Varint();
    std::vector<BlockIndex> list;
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return list;
    }
    list.reserve(n);
    for (uint64_t i = 0; i < n && ok_; ++i) {
      const uint64_t b = Varint();
      if (b >= blocks) ok_ = false;
      list.push_back(static_cast<BlockIndex>(b));
    }
    return list;
  }

 private:
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace

std::string EncodePoolsSnapshot(const PoolsSnapshot& snapshot) {
  // The layout of snapshot.format when it is one (tests write old ones),
  // else the current one.
  const char format =
      snapshot.format == kFormatWithoutPolicyState || HasOldPolicyStates(snapshot.format)
          ? snapshot.format
          : kFormat;
  const bool with_state = format != kFormatWithoutPolicyState;
  std::string out(1, format);
  PutString(out, snapshot.model_swap);
  PutVarint(out, snapshot.pools.size());
  for (const auto& pool : snapshot.pools) {
    const ShardImage& m = pool.image;
    PutString(out, pool.node);
    PutVarint(out, static_cast<uint64_t>(pool.tier));
    for (uint64_t n : {m.capacity_bytes, uint64_t{m.next_request}, uint64_t{m.current_request},
                       m.requests, m.events_applied, m.touch_clock, m.removals,
                       static_cast<uint64_t>(m.last_timestamp_us)}) {
      PutVarint(out, n);
    }
    PutVarint(out, m.blocks.size());
    for (size_t b = 0; b < m.blocks.size(); ++b) {
      const BlockMeta& meta = m.blocks[b];
      PutVarint(out, meta.hash_id);
      PutVarint(out, meta.parent == kNoBlock ? 0 : uint64_t{meta.parent} + 1);
      PutVarint(out, meta.depth);
      PutVarint(out, meta.tokens);
      PutVarint(out, meta.bytes);
      PutDouble(out, meta.recompute_gpu_ms);
      PutVarint(out, m.last_seen[b]);
      if (HasOrigins(format)) {
        PutVarint(out, static_cast<uint64_t>(meta.origin_type));
        PutVarint(out, meta.origin_turn);
      }
    }
    PutList(out, m.residents);
    PutList(out, m.proposals);
    for (double score : m.proposal_scores) PutDouble(out, score);
    PutVarint(out, m.requests_in_flight.size());
    for (const auto& [id, chain] : m.requests_in_flight) {
      PutString(out, id);
      PutList(out, chain);
    }
    PutList(out, m.unnamed_request);
    if (!with_state) continue;
    PutVarint(out, m.policy_state.has_value() ? 1 : 0);
    if (m.policy_state) PutString(out, *m.policy_state);
    for (size_t r = 0; HasArrivalTimes(format) && r < m.requests_in_flight.size(); ++r) {
      const int64_t arrival =
          r < m.request_arrival_us.size() ? m.request_arrival_us[r] : m.last_timestamp_us;
      PutVarint(out, static_cast<uint64_t>(arrival));
    }
  }
  return out;
}

absl::string_view MissingPolicyStates(const PoolsSnapshot& snapshot) {
  if (snapshot.format == kFormatWithoutPolicyState) return "no policy state";
  if (HasOldPolicyStates(snapshot.format)) return "policy states of an older layout";
  return {};
}

absl::StatusOr<PoolsSnapshot> DecodePoolsSnapshot(std::string_view bytes) {
  const auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("pool snapshot: ", what));
  };
  if (bytes.empty() || (bytes[0] != kFormat && !HasOldPolicyStates(bytes[0]) &&
                        bytes[0] != kFormatWithoutPolicyState)) {
    return bad("unknown format");
  }
  Reader in(bytes.substr(1));
  PoolsSnapshot snapshot;
  snapshot.format = bytes[0];
  snapshot.model_swap = in.String();
  const uint64_t pools = in.Varint();
  if (!in.ok() || pools > bytes.size()) return bad("truncated header");
  snapshot.pools.resize(pools);
  for (uint64_t p = 0; p < pools; ++p) {
    auto& pool = snapshot.pools[p];
    ShardImage& m = pool.image;
    pool.node = in.String();
    const uint64_t tier = in.Varint();
    if (!in.ok() || !v1::Tier_IsValid(static_cast<int>(tier))) {
      return bad(absl::StrCat("pool ", p, ": bad node or tier"));
    }
    pool.tier = static_cast<v1::Tier>(tier);
    m.capacity_bytes = in.Varint();
    m.next_request = static_cast<uint32_t>(in.Varint());
    m.current_request = static_cast<uint32_t>(in.Varint());
    m.requests = in.Varint();
    m.events_applied = in.Varint();
    m.touch_clock = in.Varint();
    m.removals = in.Varint();
    m.last_timestamp_us = static_cast<int64_t>(in.Varint());
    const uint64_t blocks = in.Varint();
    if (!in.ok() || blocks > bytes.size() || blocks >= kNoBlock) {
      return bad(absl::StrCat("pool ", p, ": truncated"));
    }
    m.blocks.resize(blocks);
    m.last_seen.resize(blocks);
    for (uint64_t b = 0; b < blocks && in.ok(); ++b) {
      BlockMeta& meta = m.blocks[b];
      meta.hash_id = in.Varint();
      const uint64_t parent = in.Varint();
      if (parent > b) return bad(absl::StrCat("pool ", p, ": block ", b, " after its child"));
      meta.parent = parent == 0 ? kNoBlock : static_cast<BlockIndex>(parent - 1);
      meta.depth = static_cast<uint32_t>(in.Varint());
      meta.tokens = static_cast<uint32_t>(in.Varint());
      meta.bytes = in.Varint();
      meta.recompute_gpu_ms = in.Double();
      m.last_seen[b] = in.Varint();
      if (HasOrigins(snapshot.format)) {
        const uint64_t type = in.Varint();
        const uint64_t turn = in.Varint();
        if (type >= kRequestTypes || turn > UINT16_MAX) {
          return bad(absl::StrCat("pool ", p, ": block ", b, " has an origin out of range"));
        }
        meta.origin_type = static_cast<RequestType>(type);
        meta.origin_turn = static_cast<uint16_t>(turn);
      }
    }
    m.residents = in.List(blocks);
    m.proposals = in.List(blocks);
    for (size_t i = 0; i < m.proposals.size() && in.ok(); ++i) {
      m.proposal_scores.push_back(in.Double());
    }
    const uint64_t in_flight = in.Varint();
    if (!in.ok() || in_flight > bytes.size()) return bad(absl::StrCat("pool ", p, ": truncated"));
    for (uint64_t r = 0; r < in_flight && in.ok(); ++r) {
      std::string id = in.String();
      m.requests_in_flight.emplace_back(std::move(id), in.List(blocks));
    }
    m.unnamed_request = in.List(blocks);
    if (snapshot.format != kFormatWithoutPolicyState) {
      const uint64_t has_state = in.Varint();
      if (has_state > 1) return bad(absl::StrCat("pool ", p, ": bad policy state flag"));
      if (has_state == 1) m.policy_state = in.String();
      // Saved by a build whose policies' layout differs: not loadable.
      if (HasOldPolicyStates(snapshot.format)) m.policy_state.reset();
    }
    if (HasArrivalTimes(snapshot.format)) {
      for (size_t r = 0; r < m.requests_in_flight.size() && in.ok(); ++r) {
        // Event timestamps are never negative: a larger value is damage, and
        // would overflow the timeout's arithmetic.
        const uint64_t arrival = in.Varint();
        if (arrival > uint64_t{INT64_MAX}) {
          return bad(absl::StrCat("pool ", p, ": request arrival time out of range"));
        }
        m.request_arrival_us.push_back(static_cast<int64_t>(arrival));
      }
    }
    if (!in.ok()) return bad(absl::StrCat("pool ", p, ": truncated or a block out of range"));
    // The resident set must be prefix-closed, without repeats.
    std::vector<uint8_t> resident(blocks, 0);
    for (BlockIndex b : m.residents) {
      if (resident[b]++) return bad(absl::StrCat("pool ", p, ": block ", b, " resident twice"));
    }
    for (BlockIndex b : m.residents) {
      const BlockIndex parent = m.blocks[b].parent;
      if (parent != kNoBlock && !resident[parent]) {
        return bad(absl::StrCat("pool ", p, ": resident block ", b, " without its parent"));
      }
    }
    // A proposal is out of the pool, under a resident block or a proposal
    // proposed later (children go first), once.
    std::vector<uint8_t> proposed(blocks, 0);
    for (size_t i = m.proposals.size(); i-- > 0;) {
      const BlockIndex b = m.proposals[i];
      const BlockIndex parent = m.blocks[b].parent;
      if (resident[b] || proposed[b]++ ||
          (parent != kNoBlock && !resident[parent] && !proposed[parent])) {
        return bad(
            absl::StrCat("pool ", p, ": proposal ", b, " is resident, repeated or orphaned"));
      }
    }
    // An in-flight request's blocks form a chain from a root.
    const auto is_chain = [&m](const std::vector<BlockIndex>& chain) {
      for (size_t i = 0; i < chain.size(); ++i) {
        if (m.blocks[chain[i]].parent != (i == 0 ? kNoBlock : chain[i - 1])) return false;
      }
      return true;
    };
    for (const auto& [id, chain] : m.requests_in_flight) {
      if (!is_chain(chain))
        return bad(absl::StrCat("pool ", p, ": request '", id, "' not a chain"));
    }
    if (!is_chain(m.unnamed_request)) return bad(absl::StrCat("pool ", p, ": request not a chain"));
  }
  if (!in.empty()) return bad("trailing bytes");
  return snapshot;
}

}  // namespace kvlearn
