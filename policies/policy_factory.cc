// Maps policy names to constructors. Adding a policy = one file + one row here.
#include "policies/policy_factory.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "features/feature_schema.h"
#include "models/learned_model.h"

namespace kvlearn {

std::unique_ptr<RetentionPolicy> MakeLruPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeLfuPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeFifoPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeGdsfPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeS3FifoPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeSievePolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeArcPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeBeladyPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeOracleAdmissionPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeNoCachePolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeKvlearnCarsPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeLearnedPolicy(const PolicyEnv& env);
std::unique_ptr<RetentionPolicy> MakeLearnedModelPolicy(const PolicyEnv& env);

namespace {

// What a policy does with PolicyEnv::model.
enum class ModelUse { kNone, kOptional, kRequired };

struct PolicyEntry {
  std::string_view name;
  bool offline;  // reads the future: needs PolicyEnv::next_use
  ModelUse model;
  bool bound;  // keeps nothing: the recompute-everything bound, not a policy to run
  std::unique_ptr<RetentionPolicy> (*make)(const PolicyEnv&);
};

constexpr ModelUse kNoModel = ModelUse::kNone;
constexpr std::array kPolicies = {
    PolicyEntry{"lru", false, kNoModel, false, MakeLruPolicy},
    PolicyEntry{"lfu", false, kNoModel, false, MakeLfuPolicy},
    PolicyEntry{"fifo", false, kNoModel, false, MakeFifoPolicy},
    PolicyEntry{"gdsf", false, kNoModel, false, MakeGdsfPolicy},
    PolicyEntry{"s3fifo", false, kNoModel, false, MakeS3FifoPolicy},
    PolicyEntry{"sieve", false, kNoModel, false, MakeSievePolicy},
    PolicyEntry{"arc", false, kNoModel, false, MakeArcPolicy},
    PolicyEntry{"kvlearn-cars", false, kNoModel, false, MakeKvlearnCarsPolicy},
    PolicyEntry{"learned", false, ModelUse::kOptional, false, MakeLearnedPolicy},
    PolicyEntry{"learned-model", false, ModelUse::kRequired, false, MakeLearnedModelPolicy},
    PolicyEntry{"belady", true, kNoModel, false, MakeBeladyPolicy},
    PolicyEntry{"oracle-admission", true, kNoModel, false, MakeOracleAdmissionPolicy},
    PolicyEntry{"no-cache", false, kNoModel, true, MakeNoCachePolicy},
};

constexpr auto kNames = [] {
  std::array<std::string_view, kPolicies.size()> names{};
  for (size_t i = 0; i < kPolicies.size(); ++i) names[i] = kPolicies[i].name;
  return names;
}();

// absl here predates std::string_view support in StrCat/StrJoin.
void AppendName(std::string* out, std::string_view name) { out->append(name); }

const PolicyEntry* Find(std::string_view name) {
  for (const auto& e : kPolicies) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

std::string JoinedPolicyNames(std::string_view separator) {
  return absl::StrJoin(kNames, std::string(separator), AppendName);
}

absl::Status CheckPolicyName(std::string_view name) {
  if (Find(name) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", std::string(name), "' (known: ", JoinedPolicyNames(), ")"));
}

bool PolicyNeedsModel(std::string_view name) {
  const PolicyEntry* e = Find(name);
  return e != nullptr && e->model == ModelUse::kRequired;
}

bool PolicyUsesModel(std::string_view name) {
  const PolicyEntry* e = Find(name);
  return e != nullptr && e->model != ModelUse::kNone;
}

absl::Status CheckModelFits(const LearnedModel* model) {
  if (model == nullptr) return absl::FailedPreconditionError("no model given (--model FILE)");
  const uint32_t version = model->metadata().schema_version;
  if (version != kFeatureSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("model was trained on feature schema ",
                                                      version, " but this build computes schema ",
                                                      kFeatureSchemaVersion));
  }
  return absl::OkStatus();
}

bool IsRecomputeBound(std::string_view name) {
  const PolicyEntry* e = Find(name);
  return e != nullptr && e->bound;
}

bool IsOfflinePolicy(std::string_view name) {
  const PolicyEntry* e = Find(name);
  return e != nullptr && e->offline;
}

absl::StatusOr<std::unique_ptr<RetentionPolicy>> CreatePolicy(std::string_view name,
                                                              const PolicyEnv& env) {
  if (auto s = CheckPolicyName(name); !s.ok()) return s;
  const PolicyEntry* e = Find(name);
  if (env.catalog == nullptr || env.pool == nullptr) {
    return absl::FailedPreconditionError("policy needs a block catalog and a pool");
  }
  if (e->offline && env.next_use == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "policy '", std::string(name), "' is an offline oracle: it needs the trace's future"));
  }
  if (e->model == ModelUse::kRequired || (e->model == ModelUse::kOptional && env.model)) {
    if (auto s = CheckModelFits(env.model.get()); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("policy '", std::string(name), "': ", s.message()));
    }
  }
  if (e->make == MakeLearnedPolicy || e->make == MakeLearnedModelPolicy) {
    auto ablation = LearnedAblationFromEnvironment();
    if (!ablation.ok()) return ablation.status();
    PolicyEnv ablated = env;
    ablated.learned_ablation |= *ablation;
    return e->make(ablated);
  }
  return e->make(env);
}

}  // namespace kvlearn
