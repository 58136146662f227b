// An A/B experiment of the sidecar (`kvlearn serve --experiment FILE`): live
// arms that split the serving nodes, each running its own policy (and model),
// and shadow policies that every node's events also drive without deciding
// (docs/experiments.md). This file parses the JSON file and assigns nodes to
// arms; loading the model files is the server's (server/sidecar_server.h).
//
//   {"arms":    [{"name": "lru", "policy": "lru", "share": 0.5},
//                {"name": "learned", "policy": "learned", "model": "m.pt", "share": 0.5}],
//    "shadows": [{"name": "gdsf", "policy": "gdsf"}]}
//
// A node's arm: u = the top 53 bits of splitmix64's mixer over FNV-1a 64
// (published offset basis) of the node id's bytes, divided by 2^53; the arm is
// the first whose cumulative share exceeds u. It depends only on the id and
// the shares, so a node changes arm only when the file changes the shares (or
// the arms' order).
//
// Thread-safety: an Experiment is a plain value; const methods may be called
// concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvlearn {

class LearnedModel;

// A policy as the experiment names it: an arm's or a shadow's.
struct ExperimentPolicy {
  std::string name;    // label of its /metrics series
  std::string policy;  // a policy factory name (policies/policy_factory.h)
  // Model file as written, or a registry version ("registry:serving",
  // server/registry_model_reference.h); empty: none.
  std::string model;
  // Loaded by the server from `model` (nullptr when none).
  std::shared_ptr<const LearnedModel> loaded_model;
};

struct ExperimentArm : ExperimentPolicy {
  double share = 0;  // of the nodes, in (0, 1]; the arms' shares sum to 1
};

struct Experiment {
  std::vector<ExperimentArm> arms;        // at least one
  std::vector<ExperimentPolicy> shadows;  // any number, names distinct from each other

  // Index into `arms` of the node's arm (see the file comment).
  size_t ArmOf(std::string_view node_id) const;
};

// Shares may miss 1 by this much (decimal fractions in JSON do not sum
// exactly); the last arm takes the rest.
inline constexpr double kShareTolerance = 1e-9;

// The node's point in [0, 1) (see the file comment).
double NodeHashUnit(std::string_view node_id);

// Parses the experiment file's text. Errors name the field ("arms[1].share:
// ..."), an unknown key included; `source` (the file name) starts each.
// Policy names are not checked here (the server builds them).
absl::StatusOr<Experiment> ParseExperiment(std::string_view json, std::string_view source);

// One arm serving every node: what a sidecar without --experiment runs.
Experiment SingleArmExperiment(const std::string& policy,
                               std::shared_ptr<const LearnedModel> model);

}  // namespace kvlearn
