// FIFO under the prefix constraint: evicts the resident leaf that entered the
// pool first. Hits change nothing.
//
// Prefix constraint: plain FIFO would evict the oldest block, but an old
// block whose descendants are still resident cannot leave without orphaning
// them. We evict the earliest-inserted leaf instead, so an old interior block
// stays until its (younger) subtree has gone. The alternative, evicting the
// oldest block together with its whole subtree, would throw away blocks far
// younger than the FIFO order says and can empty much of the pool at once.
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_env.h"

namespace kvlearn {
namespace {

class FifoPolicy final : public LeafOrderedPolicy {
 public:
  explicit FifoPolicy(const PolicyEnv& env) : LeafOrderedPolicy(env) {
    keys_never_tie_ = true;  // insertion numbers
  }

  std::string_view name() const override { return "fifo"; }

  void OnHit(BlockIndex, const AccessInfo&) override {}

  // Insertion order is unique, so the secondary key and depth never decide.
  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Track(b, {static_cast<double>(++inserted_), 0, catalog_[b].depth});
  }

  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    SaveOrder(renumber, out);
    out.Varint(inserted_);
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    LoadOrder(in);
    inserted_ = in.Varint("fifo insertions");
    return in.status();
  }

 private:
  uint64_t inserted_ = 0;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeFifoPolicy(const PolicyEnv& env) {
  return std::make_unique<FifoPolicy>(env);
}

}  // namespace kvlearn
