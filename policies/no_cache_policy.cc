// The pool that keeps nothing: every block is recomputed. The floor every
// other policy must beat.
#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {
namespace {

class NoCachePolicy final : public RetentionPolicy {
 public:
  std::string_view name() const override { return "no-cache"; }
  void OnHit(BlockIndex, const AccessInfo&) override {}
  bool ShouldAdmit(BlockIndex, const AccessInfo&) override { return false; }
  void OnInsert(BlockIndex, const AccessInfo&) override {}
  BlockIndex SelectVictim() override { return kNoBlock; }
  void OnEvict(BlockIndex) override {}
  double EvictionPriority(BlockIndex) const override { return 0; }
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeNoCachePolicy(const PolicyEnv&) {
  return std::make_unique<NoCachePolicy>();
}

}  // namespace kvlearn
