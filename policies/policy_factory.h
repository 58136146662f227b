// Maps policy names to constructors: the names every command, the sidecar
// and the tests accept, and which of them need the future or a model.
// Adding a policy = one file + one row in policy_factory.cc.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {

// OK if `model` can drive the learned policy in this build: present, and
// trained on this build's feature schema.
absl::Status CheckModelFits(const LearnedModel* model);

// Names accepted by CreatePolicy, in display order.
std::span<const std::string_view> PolicyNames();
// "lru, lfu, ..." for messages and --help.
std::string JoinedPolicyNames(std::string_view separator = ", ");
// OK if CreatePolicy knows `name`; else InvalidArgument listing the known ones.
absl::Status CheckPolicyName(std::string_view name);
// True for policies that read the future (they need PolicyEnv::next_use).
bool IsOfflinePolicy(std::string_view name);
// True for the policy that keeps nothing (no-cache): a bound on recompute that
// reports show beside the others, not a policy anyone would run.
bool IsRecomputeBound(std::string_view name);
// True for policies that cannot run without a trained model (PolicyEnv::model).
bool PolicyNeedsModel(std::string_view name);
// True for policies that score with a model when given one: those that need
// one, and `learned`, which runs on lru and gdsf alone without one.
bool PolicyUsesModel(std::string_view name);

absl::StatusOr<std::unique_ptr<RetentionPolicy>> CreatePolicy(std::string_view name,
                                                              const PolicyEnv& env);

}  // namespace kvlearn
