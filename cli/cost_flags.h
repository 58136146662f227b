// The cost-model flags shared by every command that replays a trace
// (compare, train, ...): profile names plus per-field overrides.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "core/cost_model.h"

namespace kvlearn {

struct CostFlags {
  std::string model_profile = "llama3-8b";
  std::string hardware_profile = "a100";
  // Overrides of profile fields; negative = keep the profile's value.
  double alpha_bw = -1, alpha_flop = -1, rdma_gbps = -1;
  int64_t l_cross = -1, prefill_nodes = -1, kv_bytes_per_token = -1;

  void Register(CLI::App* cmd);
  absl::StatusOr<CostModel> Resolve() const;
};

}  // namespace kvlearn
