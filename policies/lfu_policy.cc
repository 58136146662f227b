// LFU under the prefix constraint: evicts the resident leaf with the fewest
// accesses since it entered the pool (1 at insert, +1 per hit; the count
// starts over if the block is evicted and comes back). Ties go to the least
// recently used block, then to the deeper one.
//
// Recency is a logical clock that ticks once per request, so every block a
// request touches shares one timestamp and the depth rule orders them.
//
// Prefix constraint: only leaves are candidates. LFU never has to override
// its own ranking for that: every hit on a descendant is also a hit on its
// ancestors, and an ancestor enters the pool before and leaves after its
// descendants, so an ancestor's count and recency are never lower than a
// descendant's; the least-frequent block is always found among the leaves.
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_env.h"

namespace kvlearn {
namespace {

class LfuPolicy final : public LeafOrderedPolicy {
 public:
  explicit LfuPolicy(const PolicyEnv& env) : LeafOrderedPolicy(env) {
    // Blocks touched by one request (one clock tick) lie on one chain, at
    // different depths.
    keys_never_tie_ = true;
  }

  std::string_view name() const override { return "lfu"; }

  void OnHit(BlockIndex b, const AccessInfo& access) override {
    Tick(access);
    Rekey(b, {KeyOf(b).primary + 1, static_cast<double>(clock_), catalog_[b].depth});
  }

  void OnInsert(BlockIndex b, const AccessInfo& access) override {
    Tick(access);
    Track(b, {1, static_cast<double>(clock_), catalog_[b].depth});
  }

  // Counts and recency live in the keys.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    SaveOrder(renumber, out);
    out.Varint(clock_);
    out.Varint(last_request_);
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    LoadOrder(in);
    clock_ = in.Varint("lfu clock");
    last_request_ = static_cast<uint32_t>(in.Bounded("lfu last request", UINT32_MAX));
    return in.status();
  }

 private:
  void Tick(const AccessInfo& access) {
    if (clock_ == 0 || access.request != last_request_) {
      ++clock_;
      last_request_ = access.request;
    }
  }

  uint64_t clock_ = 0;
  uint32_t last_request_ = 0;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeLfuPolicy(const PolicyEnv& env) {
  return std::make_unique<LfuPolicy>(env);
}

}  // namespace kvlearn
