// GreedyDual-Size-Frequency (Cherkasova, HP Labs TR HPL-98-69, 1998) under
// the prefix constraint. Each resident block has a value
//   H = L + freq * cost / size
// where freq counts its accesses since it entered the pool (1 at insert, +1
// per hit), cost is what a miss on it costs: its marginal recompute time
// BlockMeta::recompute_gpu_ms (deep blocks attend over a longer prefix, so they
// cost more per byte than shallow ones once past L_cross), size is its KV
// bytes, and L is the inflation value: the H of the last evicted block. H is
// recomputed with the current L on every hit, so blocks that stop being used
// fall behind the rising L and age out. The leaf with the smallest H goes;
// ties go to the least recently used (logical clock ticking once per
// request), then to the deeper block.
//
// Prefix constraint: unlike LRU and LFU, GDSF can rank an ancestor below its
// descendant (a cheap depth-1 block under a costly depth-3 one). The ancestor
// cannot leave first without orphaning the descendant; we evict the
// smallest-H leaf instead and let the ancestor wait until its subtree has
// gone. Evicting the whole subtree would discard exactly the blocks GDSF
// values most. Because the victim is then not always the global minimum, its
// H can be below the current L; we keep L = max(L, H_victim) so the inflation
// never runs backwards (in unconstrained GDSF the two are the same).
#include <algorithm>
#include <vector>

#include "policies/leaf_ordered_policy.h"
#include "policies/policy_env.h"

namespace kvlearn {
namespace {

class GdsfPolicy final : public LeafOrderedPolicy {
 public:
  explicit GdsfPolicy(const PolicyEnv& env) : LeafOrderedPolicy(env) {
    keys_never_tie_ = true;  // as lfu's: a per-request clock, then depth
    if (catalog_.size() > 0) Grow(static_cast<BlockIndex>(catalog_.size() - 1));  // as the heap
  }

  std::string_view name() const override { return "gdsf"; }

  void OnHit(BlockIndex b, const AccessInfo& access) override {
    Tick(access);
    Grow(b);
    ++freq_[b];
    Rekey(b, KeyFor(b));
  }

  void OnInsert(BlockIndex b, const AccessInfo& access) override {
    Tick(access);
    Grow(b);
    freq_[b] = 1;
    Track(b, KeyFor(b));
  }

  void OnEvict(BlockIndex b) override {
    inflation_ = std::max(inflation_, KeyOf(b).primary);
    LeafOrderedPolicy::OnEvict(b);
  }

  // Keys, then L, the clock and each resident block's frequency.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    SaveOrder(renumber, out);
    out.Double(inflation_);
    out.Varint(clock_);
    out.Varint(last_request_);
    for (BlockIndex b = 0; b < renumber.size(); ++b) {
      if (pool_.IsResident(b)) out.Varint(freq_[b]);
    }
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    LoadOrder(in);
    inflation_ = in.Double("gdsf inflation");
    clock_ = in.Varint("gdsf clock");
    last_request_ = static_cast<uint32_t>(in.Bounded("gdsf last request", UINT32_MAX));
    for (BlockIndex b = 0; b < in.blocks() && in.ok(); ++b) {
      if (!pool_.IsResident(b)) continue;
      Grow(b);
      freq_[b] = static_cast<uint32_t>(in.Bounded("gdsf frequency", UINT32_MAX));
    }
    return in.status();
  }

 private:
  OrderKey KeyFor(BlockIndex b) const {
    const BlockMeta& m = catalog_[b];
    // A zero-byte block cannot occur in a valid trace; guard the division.
    const double size = static_cast<double>(std::max<uint64_t>(m.bytes, 1));
    return {inflation_ + static_cast<double>(freq_[b]) * m.recompute_gpu_ms / size,
            static_cast<double>(clock_), m.depth};
  }

  void Tick(const AccessInfo& access) {
    if (clock_ == 0 || access.request != last_request_) {
      ++clock_;
      last_request_ = access.request;
    }
  }

  void Grow(BlockIndex b) {
    if (b >= freq_.size()) freq_.resize(GrownPerBlockSize(b + 1, freq_.size(), catalog_), 0);
  }

  std::vector<uint32_t> freq_;
  double inflation_ = 0;  // L
  uint64_t clock_ = 0;
  uint32_t last_request_ = 0;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeGdsfPolicy(const PolicyEnv& env) {
  return std::make_unique<GdsfPolicy>(env);
}

}  // namespace kvlearn
