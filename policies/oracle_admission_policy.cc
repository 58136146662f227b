// "oracle-admission": LRU eviction behind a perfect admission filter. It reads
// the trace's future (PolicyEnv::next_use) only to refuse blocks that are never
// used again; which resident block leaves is plain LRU (the least recently
// used leaf, deeper first on ties).
//
// It splits Belady's lead over LRU into its two halves: what knowing which new
// blocks come back is worth (this policy against lru), and what knowing when
// they come back adds on top (belady against this policy). The learned
// policy's admission rule is an estimate of exactly what this one knows.
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_env.h"

namespace kvlearn {
namespace {

class OracleAdmissionPolicy final : public LeafOrderedPolicy {
 public:
  explicit OracleAdmissionPolicy(const PolicyEnv& env)
      : LeafOrderedPolicy(env), next_use_(*env.next_use) {}

  std::string_view name() const override { return "oracle-admission"; }

  void OnHit(BlockIndex b, const AccessInfo& access) override { Rekey(b, KeyAt(b, access)); }

  bool ShouldAdmit(BlockIndex, const AccessInfo& access) override {
    return next_use_[access.access_pos] != kNeverUsedAgain;
  }

  void OnInsert(BlockIndex b, const AccessInfo& access) override { Track(b, KeyAt(b, access)); }

 private:
  // Access positions grow with time, so the smallest is the least recent use.
  OrderKey KeyAt(BlockIndex b, const AccessInfo& access) const {
    return {static_cast<double>(access.access_pos), 0, catalog_[b].depth};
  }

  const std::vector<uint32_t>& next_use_;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeOracleAdmissionPolicy(const PolicyEnv& env) {
  return std::make_unique<OracleAdmissionPolicy>(env);
}

}  // namespace kvlearn
